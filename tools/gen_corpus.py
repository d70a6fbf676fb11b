"""Generate the JAX corpus: realistic workloads as HLO text, and what XLA:CPU makes of them.

    python -m hlo_opt.tools.gen_corpus OUTDIR [NAME ...]      # all workloads, or those named
    python -m hlo_opt.tools.gen_corpus --large benchmarks/large   # the same at real sizes

For each workload NAME it writes NAME.hlo, the text JAX hands to XLA (`jax.jit(f)`, traced
from shapes, lowered for the CPU, `as_text(dialect="hlo")`), and NAME.xla_opt.hlo, XLA:CPU's module
after its HLO passes (`hlo_opt.xla_oracle.optimized_text`). Weights and data are parameters,
never constants, so the text depends only on shapes, dtypes and the jax version (two runs
give identical files). Tensors are small so the fixtures run fast in the interpreter.

Every workload also has large shapes (`--large`, NAME.hlo only): batch and hidden sizes of
real models (MLPs 4096 wide at batch 512, transformers at d=512-768 over 256-512 tokens with
one or two layers, a CNN at batch 64 with 64/128 channels, elementwise and normalization
modules over 4-16M elements, sorts of 512K), so that XLA:CPU takes 3 ms to ~1 s per call
on two cores: the benchmark's large table (tools/bench_cpu.py), kept out of the test suite.
A workload
is a function of `large` returning (function, argument specs): one definition, two sizes.

Workloads (what each exercises):
  elementwise_chain   f32 unary/binary math: exp log1p sqrt rsqrt tanh sin cos pow floor
                      round clamp select compare abs sign remainder atan2
  activations         relu, leaky relu, gelu (tanh and erf), silu, sigmoid, softplus, elu,
                      hard tanh: a tuple of 8 results
  softmax             softmax and log-softmax over the last axis (reduce max/sum, exp, log)
  layernorm           layer norm with scale and bias (mean, variance, rsqrt, broadcasts)
  rmsnorm             RMS norm
  reductions          sum/mean/var/max/min/prod/logsumexp/any/all over several axes, s32 sum
  layout_ops          transpose, reshape, pad (negative and interior), concatenate, strided
                      slice, reverse, iota, broadcast_in_dim
  mlp_fwd             3-layer MLP forward with gelu (dot + bias)
  mlp_train_sgd       value_and_grad of softmax cross-entropy + SGD update (transposed dots)
  mlp_train_adam      the same loss with an Adam update (step counter s32 -> f32 pow)
  attention_1h        single-head causal attention (dot_general, iota mask, softmax)
  mha                 4-head causal self-attention (batched dot_general, transposes)
  gpt2_block          pre-LN GPT-2 block: LN, MHA, residuals, tanh-gelu MLP
  gpt2_block_train    value_and_grad of a GPT-2 block + SGD (the backward pass of all of it)
  transformer_lm      6-block GPT-2 language model with token/position embeddings (gather),
                      tied output head and token cross-entropy (~1,100 instructions)
  transformer_lm_train  value_and_grad + SGD of a 5-block GPT-2 LM: the >= 2,000-instruction
                      module (embedding gradients are scatter-adds)
  cnn                 conv (SAME), depthwise conv (feature groups), strided conv, max and
                      average pooling (reduce-window), dense head
  cnn_train           value_and_grad of the CNN + SGD: conv backprop, select-and-scatter
  scan_rnn            lax.scan tanh RNN (while, dynamic-slice, dynamic-update-slice)
  scan_rnn_grad       gradient through the scan (reverse loop, stacked residuals)
  while_loop          lax.while_loop Newton sqrt with a tolerance and an iteration cap,
                      fori_loop with a trip count given at run time
  cond_switch         lax.cond on a data-dependent predicate and lax.switch on an s32 index
  dropout             threefry2x32 PRNG from a u32[2] key (shifts, xor, rotate, while),
                      bernoulli mask, select
  random_sampling     uniform, normal (erf_inv), randint, gumbel-max categorical
  mlp_fwd_bf16        bf16 MLP (bf16 dots and elementwise ops)
  softmax_bf16        bf16 softmax (f32 accumulation inside, converts)
  attention_bf16      bf16 causal multi-head attention
  low_precision       f16 math and f32 <-> f8e4m3fn / f8e5m2 quantize/dequantize round trips
  sort_topk           argmax/argmin (variadic reduce), sort, argsort (multi-operand sort),
                      top_k
  cumulative          cumsum (f32, s32), cumprod, cummax (reduce-window)
  gather_scatter      indexing gathers, .at[].add/.set/.max scatters, take_along_axis,
                      segment_sum, dynamic_slice / dynamic_update_slice at run-time offsets
  one_hot_xent        embedding lookup, one_hot of s32 labels, label cross-entropy, accuracy
  integer_ops         s32/u32/s8/u8 arithmetic: floor div, rem, shifts, and/or/xor/not,
                      popcount, clz, min/max, abs, sign, converts to and from f32
  complex_fft         c64 arithmetic (conj, abs, real/imag, complex), fft/ifft/rfft
  x64_ops             f64 and s64 math under jax x64
"""
from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
from jax import lax

from . import jax_models as nn

WORKLOADS = {}      # name -> () -> (function, argument specs)


def workload(make):
    WORKLOADS[make.__name__] = make
    return make


def specs(tree, dtype=jnp.float32):
    """Nested dicts/tuples of shapes -> the same of ShapeDtypeStruct (shapes: tuples of ints)."""
    return jax.tree.map(lambda s: jax.ShapeDtypeStruct(s, jnp.dtype(dtype)), tree,
                        is_leaf=lambda s: isinstance(s, tuple) and all(isinstance(d, int) for d in s))


def i32(*shapes):
    return specs(shapes, jnp.int32)


# --- elementwise, normalization, layout ------------------------------------------------------

@workload
def elementwise_chain(large):
    def f(x, y):
        a = jnp.exp(-jnp.abs(x)) + jnp.log1p(jnp.abs(y))
        b = jnp.sqrt(jnp.abs(a * y) + 1.0) * lax.rsqrt(a + 2.0)
        c = jnp.tanh(b) - jnp.sin(x) * jnp.cos(y) + jnp.power(jnp.abs(x) + 0.5, 1.7)
        d = jnp.floor(c * 3.0) + jnp.round(y) + jnp.sign(x) * jnp.remainder(y, 1.5)
        e = jnp.where(x > y, jnp.arctan2(x, y), jnp.clip(d, -2.0, 2.0))
        return e / (1.0 + jnp.maximum(a, 0.25)) - jnp.minimum(b, c)
    n = (2048, 2048) if large else (32, 64)
    return f, specs((n, n))


@workload
def activations(large):
    def f(x):
        return (jax.nn.relu(x), jax.nn.leaky_relu(x, 0.01), jax.nn.gelu(x, approximate=True),
                jax.nn.gelu(x, approximate=False), jax.nn.silu(x), jax.nn.sigmoid(x),
                jax.nn.softplus(x), jax.nn.elu(x) + jax.nn.hard_tanh(x) * 0.5)
    return f, specs(((1024, 2048) if large else (16, 128),))


@workload
def softmax(large):
    def f(x):
        return jax.nn.softmax(x, axis=-1), jax.nn.log_softmax(x, axis=-1)
    return f, specs(((32, 512, 512) if large else (8, 16, 64),))


@workload
def layernorm(large):
    b, t, d = (16, 512, 768) if large else (4, 32, 96)
    return nn.layernorm, specs(((b, t, d), (d,), (d,)))


@workload
def rmsnorm(large):
    b, t, d = (4, 512, 4096) if large else (4, 32, 96)
    return nn.rmsnorm, specs(((b, t, d), (d,)))


@workload
def reductions(large):
    def f(x, n):
        return (jnp.sum(x, axis=(0, 2)), jnp.mean(x, axis=1), jnp.var(x, axis=-1),
                jnp.max(x, axis=0), jnp.min(x), jnp.prod(1.0 + 0.01 * x, axis=2),
                jax.nn.logsumexp(x, axis=1), jnp.any(x > 2.5, axis=1), jnp.all(n >= 0, axis=0),
                jnp.sum(n, axis=1))
    a, b, c = (32, 512, 256) if large else (6, 20, 12)
    return f, (*specs(((a, b, c),)), *i32((a, b)))


@workload
def layout_ops(large):
    a, b, c, d = (64, 64, 1024, 1024) if large else (5, 8, 12, 10)    # needs 2d + 3 >= ab/2

    def f(x, y):
        t = jnp.transpose(x, (2, 0, 1)).reshape(c, a * b)
        p = lax.pad(y, 0.0, ((1, -1, 0), (2, 2, 1)))
        cat = jnp.concatenate([t[:, ::2], p[:c, :a * b // 2]], axis=1)
        r = jnp.flip(cat, axis=(0, 1)) + jnp.arange(a * b, dtype=jnp.float32)[None, :]
        return (r[1::3, 5:a * b - 5:2], jnp.broadcast_to(y[:, None, :], (c, 3, d)).sum(1),
                x[:, ::-1])
    return f, specs(((a, b, c), (c, d)))


# --- MLPs -------------------------------------------------------------------------------------

@workload
def mlp_fwd(large):
    sizes, batch = ([1024, 4096, 2048, 1024], 512) if large else ([48, 128, 96, 10], 16)
    return nn.mlp, (specs(nn.mlp_shapes(sizes)), *specs(((batch, sizes[0]),)))


@workload
def mlp_train_sgd(large):
    def step(p, x, y):
        loss, g = jax.value_and_grad(lambda q: nn.xent(nn.mlp(q, x, jax.nn.relu), y))(p)
        return loss, nn.sgd(p, g)
    sizes, batch = ([1024, 4096, 1000], 512) if large else ([32, 64, 10], 16)
    return step, (specs(nn.mlp_shapes(sizes)), *specs(((batch, sizes[0]),)), *i32((batch,)))


@workload
def mlp_train_adam(large):
    def step(p, m, v, t, x, y, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8):
        loss, g = jax.value_and_grad(lambda q: nn.xent(nn.mlp(q, x), y))(p)
        t = t + 1
        m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, m, g)
        v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, v, g)
        tf = t.astype(jnp.float32)
        scale = lr * jnp.sqrt(1 - b2 ** tf) / (1 - b1 ** tf)
        p = jax.tree.map(lambda w, m, v: w - scale * m / (jnp.sqrt(v) + eps), p, m, v)
        return loss, p, m, v, t
    sizes, batch = ([1024, 4096, 1000], 512) if large else ([32, 64, 10], 16)
    shapes = nn.mlp_shapes(sizes)
    return step, (*specs((shapes, shapes, shapes)), *i32(()), *specs(((batch, sizes[0]),)),
                  *i32((batch,)))


# --- attention and transformers ---------------------------------------------------------------

@workload
def attention_1h(large):
    def f(x, wq, wk, wv):
        return nn.attention(x @ wq, x @ wk, x @ wv)
    t, d, h = (2048, 768, 128) if large else (32, 64, 32)
    return f, specs(((t, d), (d, h), (d, h), (d, h)))


@workload
def mha(large):
    heads, (b, t, d) = (12, (4, 512, 768)) if large else (4, (2, 16, 64))
    return functools.partial(nn.mha, heads=heads), (specs(nn.mha_shapes(d)), *specs(((b, t, d),)))


@workload
def gpt2_block(large):
    heads, (b, t, d) = (12, (2, 512, 768)) if large else (4, (2, 16, 64))
    return (functools.partial(nn.gpt2_block, heads=heads),
            (specs(nn.gpt2_block_shapes(d)), *specs(((b, t, d),))))


@workload
def gpt2_block_train(large):
    def step(p, x, target):
        mse = lambda q: jnp.mean(jnp.square(nn.gpt2_block(q, x, heads) - target))  # noqa: E731
        loss, g = jax.value_and_grad(mse)(p)
        return loss, nn.sgd(p, g, 0.01)
    heads, (b, t, d) = (8, (1, 512, 512)) if large else (4, (2, 8, 32))
    return step, (specs(nn.gpt2_block_shapes(d)), *specs(((b, t, d), (b, t, d))))


@workload
def transformer_lm(large):
    layers, vocab, d, (b, t) = (2, 8192, 512, (2, 512)) if large else (6, 128, 64, (2, 32))
    return nn.lm_loss, (specs(nn.lm_shapes(layers, vocab, d, t)), *i32((b, t), (b, t)))


@workload
def transformer_lm_train(large):
    def step(p, tokens, targets):
        loss, g = jax.value_and_grad(nn.lm_loss)(p, tokens, targets)
        return loss, nn.sgd(p, g, 0.01)
    layers, vocab, d, (b, t) = (2, 8192, 512, (1, 256)) if large else (5, 128, 64, (2, 32))
    return step, (specs(nn.lm_shapes(layers, vocab, d, t)), *i32((b, t), (b, t)))


# --- convolutions -----------------------------------------------------------------------------

def cnn_specs(large):
    """(parameters, images) of the CNN: 2 x 16x16 RGB with 16/32 channels, or a batch of 64
    at 32x32 with 64/128 channels."""
    (n, size), channels = ((64, 32), (64, 128)) if large else ((2, 16), (16, 32))
    return specs(nn.cnn_shapes(size, channels)), *specs(((n, size, size, 3),))


@workload
def cnn(large):
    return nn.cnn, cnn_specs(large)


@workload
def cnn_train(large):
    def step(p, x, y):
        loss, g = jax.value_and_grad(lambda q: nn.xent(nn.cnn(q, x), y))(p)
        return loss, nn.sgd(p, g, 0.05)
    p, x = cnn_specs(large)
    return step, (p, x, *i32(x.shape[:1]))


# --- control flow -----------------------------------------------------------------------------

def rnn_specs(large):
    """(parameters, inputs [T, B, features], initial state) of the scan RNN."""
    steps, batch, features, hidden = (100, 64, 256, 512) if large else (10, 4, 16, 32)
    return (specs(nn.rnn_shapes(features, hidden)),
            *specs(((steps, batch, features), (batch, hidden))))


@workload
def scan_rnn(large):
    return nn.rnn, rnn_specs(large)


@workload
def scan_rnn_grad(large):
    def f(p, xs, h0):
        return jax.value_and_grad(lambda q: jnp.sum(jnp.square(nn.rnn(q, xs, h0)[1])))(p)
    return f, rnn_specs(large)


@workload
def while_loop(large):
    def f(a, n):
        def cond(s):
            i, _, err = s
            return (i < 50) & (err > 1e-6)

        def body(s):
            i, y, _ = s
            y2 = 0.5 * (y + a / y)
            return i + 1, y2, jnp.max(jnp.abs(y2 - y))
        i, y, _ = lax.while_loop(cond, body, (0, jnp.maximum(a, 1.0), jnp.float32(jnp.inf)))
        z = lax.fori_loop(0, n, lambda k, z: z * 0.5 + jnp.sin(z + k.astype(jnp.float32)), a)
        return i, y, z
    return f, (*specs(((1 << 20,) if large else (64,),)), *i32(()))


@workload
def cond_switch(large):
    def f(x, k):
        y = lax.cond(jnp.sum(x) > 0, lambda v: jnp.exp(-v), lambda v: v * v - 1.0, x)
        branches = [lambda v: v + 1.0, lambda v: jnp.tanh(v) * 2.0, lambda v: jnp.cumsum(v, 1)]
        return y, lax.switch(k, branches, x)
    return f, (*specs(((2048, 2048) if large else (8, 16),)), *i32(()))


# --- randomness -------------------------------------------------------------------------------

@workload
def dropout(large):
    def f(key, x, rate=0.1):
        keep = jax.random.bernoulli(jax.random.wrap_key_data(key), 1.0 - rate, x.shape)
        return jnp.where(keep, x / (1.0 - rate), 0.0)
    return f, (*specs(((2,),), jnp.uint32), *specs(((4096, 1024) if large else (16, 64),)))


@workload
def random_sampling(large):
    n, m, logits_shape = ((1024, 1024), 1 << 20, (1024, 1000)) if large else ((32, 16), 64, (8, 10))

    def f(key, logits):
        k1, k2, k3, k4 = jax.random.split(jax.random.wrap_key_data(key), 4)
        return (jax.random.uniform(k1, n), jax.random.normal(k2, n),
                jax.random.randint(k3, (m,), -5, 17), jax.random.categorical(k4, logits))
    return f, (*specs(((2,),), jnp.uint32), *specs((logits_shape,)))


# --- low precision ----------------------------------------------------------------------------

@workload
def mlp_fwd_bf16(large):
    sizes, batch = ([1024, 4096, 1024], 512) if large else ([48, 128, 10], 16)
    return nn.mlp, (specs(nn.mlp_shapes(sizes), jnp.bfloat16),
                    *specs(((batch, sizes[0]),), jnp.bfloat16))


@workload
def softmax_bf16(large):
    return (functools.partial(jax.nn.softmax, axis=-1),
            specs(((8192, 1024) if large else (16, 128),), jnp.bfloat16))


@workload
def attention_bf16(large):
    heads, (b, t, d) = (12, (2, 512, 768)) if large else (4, (2, 16, 64))
    return (functools.partial(nn.mha, heads=heads),
            (specs(nn.mha_shapes(d), jnp.bfloat16), *specs(((b, t, d),), jnp.bfloat16)))


@workload
def low_precision(large):
    def f(x, h):
        scale = jnp.max(jnp.abs(x)) / 448.0
        q = (x / scale).astype(jnp.float8_e4m3fn)
        e5 = x.astype(jnp.float8_e5m2)
        hh = (jnp.exp(h * jnp.float16(0.1)) + h * h).astype(jnp.float16)
        return q.astype(jnp.float32) * scale, e5.astype(jnp.float32), q, hh, jnp.sum(hh.astype(jnp.float32))
    n = (2048, 2048) if large else (32, 32)
    return f, (*specs((n,)), *specs((n,), jnp.float16))


# --- integer-heavy ----------------------------------------------------------------------------

@workload
def sort_topk(large):
    def f(x, n):
        vals, idx = lax.top_k(x, 5)
        return (jnp.argmax(x, axis=1), jnp.argmin(x, axis=0), jnp.sort(x, axis=1),
                jnp.argsort(n, axis=0), vals, idx, jnp.sort(n, axis=1, descending=True))
    n = (512, 1024) if large else (12, 40)
    return f, (*specs((n,)), *i32(n))


@workload
def cumulative(large):
    def f(x, n):
        return (jnp.cumsum(x, axis=1), jnp.cumsum(n, axis=0), jnp.cumprod(1.0 + 0.01 * x, axis=1),
                lax.cummax(x, axis=0), jnp.cumsum(x[:, ::-1], axis=1))
    n = (256, 1024) if large else (16, 50)    # cumulative sums are quadratic reduce-windows
    return f, (*specs((n,)), *i32(n))


@workload
def gather_scatter(large):
    def f(table, idx, seg, vals, start):
        rows = table[idx]                                         # gather
        added = table.at[idx].add(vals)                           # scatter-add, duplicate rows
        mixed = table.at[idx[:5], 3].set(-1.0).at[idx[5:9]].max(vals[:4])
        picked = jnp.take_along_axis(table[:len(idx)], (idx[:, None] * 7) % table.shape[1], axis=1)
        seg_sum = jax.ops.segment_sum(vals, seg, num_segments=6)
        window = lax.dynamic_slice(table, (start, 4), (8, 16))
        updated = lax.dynamic_update_slice(table, window * 2.0, (start + 3, 10))
        return rows, added, mixed, picked, seg_sum, updated
    (rows, cols), n = ((8192, 512), 4096) if large else ((50, 32), 20)
    return f, (*specs(((rows, cols),)), *i32((n,), (n,)), *specs(((n, cols),)), *i32(()))


@workload
def one_hot_xent(large):
    def f(emb, w, tokens, labels):
        h = jnp.mean(emb[tokens], axis=1) @ w                     # [B, C]
        y = jax.nn.one_hot(labels, w.shape[1])
        loss = -jnp.mean(jnp.sum(y * jax.nn.log_softmax(h), axis=-1))
        acc = jnp.mean((jnp.argmax(h, -1) == labels).astype(jnp.float32))
        return loss, acc
    (vocab, d, classes), (b, t) = ((32768, 512, 1000), (256, 64)) if large else ((100, 24, 10), (8, 12))
    return f, (*specs(((vocab, d), (d, classes))), *i32((b, t), (b,)))


@workload
def integer_ops(large):
    def f(a, b, u, c):
        d = jnp.where(b == 0, 1, b)
        r = (a // d, a % d, lax.rem(a, d), lax.div(a, d), a << (b & 7), a >> (b & 7),
             lax.shift_right_logical(u, jnp.uint32(3)), (a & b) | (~a ^ b),
             lax.population_count(u), lax.clz(a), jnp.maximum(a, b) - jnp.minimum(a, b),
             jnp.abs(a) * jnp.sign(b), (a.astype(jnp.float32) * 0.5).astype(jnp.int32))
        c16 = c.astype(jnp.int16) * 3
        return (*r, (c16 >> 1).astype(jnp.uint8), jnp.clip(c, -100, 100).astype(jnp.int8))
    n, m = ((2048, 2048), (1 << 22,)) if large else ((16, 16), (64,))
    return f, (*i32(n, n), *specs((n,), jnp.uint32), *specs((m,), jnp.int8))


@workload
def complex_fft(large):
    def f(z, x):
        w = z * jnp.conj(z[::-1]) + jnp.abs(z).astype(jnp.complex64)
        s = jnp.fft.fft(w, axis=-1)
        r = jnp.fft.rfft(x, axis=-1)
        return jnp.fft.ifft(s * 0.5, axis=-1), jnp.real(r) - jnp.imag(r), jnp.angle(lax.complex(x, x[::-1]))
    n = (1024, 1024) if large else (8, 32)
    return f, (*specs((n,), jnp.complex64), *specs((n,)))


@workload
def x64_ops(large):
    def f(x, n):
        y = jnp.exp(x) / (1.0 + jnp.log1p(jnp.abs(x))) + 1e-300
        m = n * 1_000_000_007 + (n >> 3)
        return y, m, (x * m.astype(jnp.float64)).sum(), (y * 2.0).astype(jnp.float32)
    n = (1 << 22,) if large else (64,)
    return f, (*specs((n,), jnp.float64), *specs((n,), jnp.int64))


# --- driver -----------------------------------------------------------------------------------

def lower(name: str, large: bool = False) -> str:
    """HLO text of one workload (at its large shapes if `large`), as JAX hands it to XLA:CPU.
    The module is named jit_<name>."""
    with jax.enable_x64(name.startswith("x64")):
        f, args = WORKLOADS[name](large)

        @functools.wraps(f)                # keeps f's signature: parameter names in the HLO
        def entry(*a):
            return f(*a)
        entry.__name__ = name
        return jax.jit(entry).trace(*args).lower(lowering_platforms=("cpu",)).as_text(dialect="hlo")


def instruction_count(text: str) -> int:
    """Instructions in all computations of HLO text (one per line in XLA's print)."""
    return sum(1 for line in text.splitlines() if " = " in line and not line.startswith("HloModule"))


def main(argv=None) -> int:
    from hlo_opt import xla_oracle
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir", type=Path)
    ap.add_argument("names", nargs="*", help="workloads to generate (default: all)")
    ap.add_argument("--large", action="store_true",
                    help="the large shapes, NAME.hlo only (benchmarks/large/ holds them)")
    args = ap.parse_args(argv)
    unknown = set(args.names) - set(WORKLOADS)
    if unknown:
        ap.error(f"unknown workloads: {', '.join(sorted(unknown))}")
    if not xla_oracle.available():
        print(xla_oracle.reason, file=sys.stderr)
        return 1
    args.outdir.mkdir(parents=True, exist_ok=True)
    for name in args.names or WORKLOADS:
        text = lower(name, args.large)
        (args.outdir / f"{name}.hlo").write_text(text)
        if not args.large:
            (args.outdir / f"{name}.xla_opt.hlo").write_text(xla_oracle.optimized_text(text))
        print(f"{name:22} {instruction_count(text):5} instructions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
