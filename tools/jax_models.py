"""Small JAX models the corpus is made of (see gen_corpus): plain jax.numpy, weights as pytrees.

Each model comes with a function giving its parameter shapes, so the corpus generator can
lower it from shapes alone.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax import lax


def layernorm(x, g, b, eps=1e-5):
    mu = jnp.mean(x, -1, keepdims=True)
    var = jnp.mean(jnp.square(x - mu), -1, keepdims=True)
    return (x - mu) * lax.rsqrt(var + eps) * g + b


def rmsnorm(x, g, eps=1e-6):
    return x * lax.rsqrt(jnp.mean(jnp.square(x), -1, keepdims=True) + eps) * g


def attention(q, k, v, causal=True):
    """Scaled dot-product attention; q, k, v: [..., T, D] -> [..., T, D]."""
    s = jnp.einsum("...qd,...kd->...qk", q, k) / math.sqrt(q.shape[-1])
    if causal:
        t = q.shape[-2]
        s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, jnp.finfo(s.dtype).min)
    return jnp.einsum("...qk,...kd->...qd", jax.nn.softmax(s, axis=-1), v)


def mha_shapes(d):
    return {"w_qkv": (d, 3 * d), "b_qkv": (3 * d,), "w_o": (d, d), "b_o": (d,)}


def mha(p, x, heads):
    """Causal multi-head self-attention; x: [B, T, D] -> [B, T, D]."""
    b, t, d = x.shape
    qkv = x @ p["w_qkv"] + p["b_qkv"]
    q, k, v = (a.reshape(b, t, heads, d // heads).transpose(0, 2, 1, 3)
               for a in jnp.split(qkv, 3, axis=-1))
    o = attention(q, k, v).transpose(0, 2, 1, 3).reshape(b, t, d)
    return o @ p["w_o"] + p["b_o"]


def gpt2_block_shapes(d):
    return {"ln1_g": (d,), "ln1_b": (d,), **mha_shapes(d), "ln2_g": (d,), "ln2_b": (d,),
            "w_fc": (d, 4 * d), "b_fc": (4 * d,), "w_proj": (4 * d, d), "b_proj": (d,)}


def gpt2_block(p, x, heads):
    """Pre-LN transformer block: attention and a tanh-gelu MLP, each with a residual."""
    x = x + mha(p, layernorm(x, p["ln1_g"], p["ln1_b"]), heads)
    h = jax.nn.gelu(layernorm(x, p["ln2_g"], p["ln2_b"]) @ p["w_fc"] + p["b_fc"], approximate=True)
    return x + h @ p["w_proj"] + p["b_proj"]


def lm_shapes(layers, vocab, d, t):
    return {"wte": (vocab, d), "wpe": (t, d), "lnf_g": (d,), "lnf_b": (d,),
            **{f"h{i}": gpt2_block_shapes(d) for i in range(layers)}}


def lm_loss(p, tokens, targets, heads=4):
    """GPT-2 language model: embeddings, blocks, final LN, tied head, token cross-entropy."""
    x = p["wte"][tokens] + p["wpe"][None, :, :]
    for i in range(sum(k.startswith("h") for k in p)):
        x = gpt2_block(p[f"h{i}"], x, heads)
    x = layernorm(x, p["lnf_g"], p["lnf_b"])
    return xent(x @ p["wte"].T, targets)


def mlp_shapes(sizes):
    return {f"l{i}": {"w": (m, n), "b": (n,)} for i, (m, n) in enumerate(zip(sizes, sizes[1:]))}


def mlp(p, x, act=None):
    """Dense layers with `act` (default tanh-gelu) between them."""
    act = act or (lambda h: jax.nn.gelu(h, approximate=True))
    layers = [p[k] for k in sorted(p)]
    for i, layer in enumerate(layers):
        x = x @ layer["w"] + layer["b"]
        if i < len(layers) - 1:
            x = act(x)
    return x


def cnn_shapes(size=16, channels=(16, 32)):
    """Parameters of `cnn` for size x size RGB images (size a multiple of 4)."""
    c1, c2 = channels
    return {"c1": (3, 3, 3, c1), "dw": (3, 3, 1, c1), "c2": (3, 3, c1, c2), "b2": (c2,),
            "fc_w": ((size // 4) ** 2 * c2, 10), "fc_b": (10,)}


def cnn(p, x):
    """x: [N, S, S, 3] NHWC -> logits [N, 10]: conv, depthwise conv, max pool, strided conv,
    average pool over width (padded window), dense head."""
    dn = ("NHWC", "HWIO", "NHWC")
    h = jax.nn.relu(lax.conv_general_dilated(x, p["c1"], (1, 1), "SAME", dimension_numbers=dn))
    h = lax.conv_general_dilated(h, p["dw"], (1, 1), "SAME", dimension_numbers=dn,
                                 feature_group_count=p["dw"].shape[-1])
    h = lax.reduce_window(h, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    h = jax.nn.relu(lax.conv_general_dilated(h, p["c2"], (2, 2), ((1, 1), (1, 1)),
                                             dimension_numbers=dn) + p["b2"])
    h = lax.reduce_window(h, 0.0, lax.add, (1, 1, 2, 1), (1, 1, 1, 1),
                          ((0, 0), (0, 0), (0, 1), (0, 0))) / 2
    return h.reshape(h.shape[0], -1) @ p["fc_w"] + p["fc_b"]


def rnn_shapes(features, hidden):
    return {"wx": (features, hidden), "wh": (hidden, hidden), "b": (hidden,)}


def rnn(p, xs, h0):
    """tanh RNN over the leading axis of xs with lax.scan: (final h, all h)."""
    def cell(h, x):
        h = jnp.tanh(x @ p["wx"] + h @ p["wh"] + p["b"])
        return h, h
    return lax.scan(cell, h0, xs)


def xent(logits, labels):
    """Mean softmax cross-entropy against integer labels."""
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, labels[..., None], axis=-1))


def sgd(params, grads, lr=0.1):
    return jax.tree.map(lambda w, g: w - lr * g, params, grads)
