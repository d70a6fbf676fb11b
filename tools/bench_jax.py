"""Speed of `hlo_opt.jax.jit` against `jax.jit` on a few JAX models (docs/jax.md).

    python -m hlo_opt.tools.bench_jax                  # every model
    python -m hlo_opt.tools.bench_jax mlp cnn          # models whose name contains a word
    python -m hlo_opt.tools.bench_jax --rounds 15 --calls 20
    python -m hlo_opt.tools.bench_jax --corpus --rounds 3    # every corpus workload (small)

One process, both front doors on the same inputs (jax arrays, as a JAX user calls them):
compile times (ours: hlo_opt.optimize + hlo_opt.compile of the lowered module; jax's: XLA's
compile of the same lowering; both after one small function has started each compiler's
machinery: LLVM, compile workers, the rule set), then calls interleaved in rounds (a
round makes --calls calls of ours, then as many of jax.jit's), so load from other processes
hits both alike; each column is the median call. Results must equal jax.jit's (the tolerances
of tools/output_check.py) or the row says where they differ. Kernels: ours (the optimized
module) / XLA's (its optimized module), counted alike (hlo_opt.kernels).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from .. import parse
from .. import jax as hj
from ..kernels import kernel_report
from . import jax_models as m
from .bench_cpu import header
from .hlo_run import random_inputs
from .output_check import mismatch


def _params(shapes, rng):
    return jax.tree.map(lambda s: jnp.asarray(rng.standard_normal(s, np.float32)
                                              / np.sqrt(s[0] if len(s) > 1 else 1)),
                        shapes, is_leaf=lambda s: isinstance(s, tuple))


def _mlp_train(p, x, labels):
    loss, grads = jax.value_and_grad(lambda p: m.xent(m.mlp(p, x), labels))(p)
    return loss, m.sgd(p, grads)


def models(rng) -> dict:
    """name -> (function, example arguments), sized so a call takes milliseconds."""
    def normal(*shape):
        return jnp.asarray(rng.standard_normal(shape, np.float32))
    sizes = [256, 1024, 1024, 256]
    return {
        "mlp": (m.mlp, (_params(m.mlp_shapes(sizes), rng), normal(128, 256))),
        "mlp_train": (_mlp_train, (_params(m.mlp_shapes(sizes), rng), normal(128, 256),
                                   jnp.asarray(rng.integers(0, 256, 128, np.int32)))),
        "attention": (lambda p, x: m.gpt2_block(p, x, heads=4),
                      (_params(m.gpt2_block_shapes(256), rng), normal(4, 128, 256))),
        "cnn": (m.cnn, (_params(m.cnn_shapes(32), rng), normal(32, 32, 32, 3))),
    }


def corpus_models() -> dict:
    """The corpus workloads (tools/gen_corpus.py) at their small shapes, with random inputs
    (tools/hlo_run.py's) for the parameters of their lowered modules; name -> (function,
    arguments, x64)."""
    from .gen_corpus import WORKLOADS
    out = {}
    for name, make in WORKLOADS.items():
        x64 = name.startswith("x64")
        with jax.enable_x64(x64):
            fn, specs = make(False)
            lowered = hj.lower(fn, *specs)
            leaves = [np.zeros(a.shape, a.dtype) for a in lowered.in_avals]
            for leaf, value in zip(lowered.kept, random_inputs(lowered.module)):
                leaves[leaf] = value
            args, _ = jax.tree.unflatten(lowered.in_tree, leaves)
        out[name] = (fn, args, x64)
    return out


def _call_times(fn, calls: int) -> list[float]:
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - start)
    return times


def bench(name: str, fn, args, rounds: int, calls: int, target: str) -> dict:
    ours = hj.jit(fn, target=target)
    compiled = ours.compile(*args)
    theirs = jax.jit(fn)
    start = time.perf_counter()
    xla = theirs.lower(*args).compile()
    xla_compile = time.perf_counter() - start
    got, want = jax.tree.leaves(ours(*args)), jax.tree.leaves(theirs(*args))
    ours_t, jax_t = [], []
    for _ in range(rounds):
        ours_t += _call_times(lambda: ours(*args), calls)
        jax_t += _call_times(lambda: theirs(*args), calls)
    ours_ms, jax_ms = statistics.median(ours_t) * 1e3, statistics.median(jax_t) * 1e3
    return {"model": name,
            "ours_compile": compiled.stats["optimize_seconds"] + compiled.stats["compile_seconds"],
            "jax_compile": xla_compile, "ours_ms": ours_ms, "jax_ms": jax_ms,
            "ratio": ours_ms / jax_ms,
            "kernels": kernel_report(compiled.optimized).kernels,
            "xla_kernels": kernel_report(parse(xla.as_text())).kernels,
            "check": mismatch([np.asarray(g) for g in got], [np.asarray(w) for w in want])}


def table(rows: list[dict]) -> str:
    lines = ["| model | our compile s (optimize+compile) | jax compile s | ours ms | jax.jit ms "
             "| ours/jax | kernels ours/XLA | equal to jax.jit |",
             "|---|--:|--:|--:|--:|--:|--:|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['ours_compile']:.2f} | {r['jax_compile']:.2f} | "
                     f"{r['ours_ms']:.2f} | {r['jax_ms']:.2f} | {r['ratio']:.2f} | "
                     f"{r['kernels']}/{r['xla_kernels']} | {r['check'] or 'yes'} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hlo_opt.tools.bench_jax", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", help="models whose name contains one of these words")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--calls", type=int, default=10, help="calls per round of each")
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--corpus", action="store_true",
                    help="the corpus workloads (tools/gen_corpus.py, small shapes) instead")
    ns = ap.parse_args(argv)
    warm_up = (lambda x: jnp.tanh(x) @ x, jnp.ones((4, 4)))     # start both compilers' machinery
    hj.jit(warm_up[0])(warm_up[1])
    jax.jit(warm_up[0])(warm_up[1])
    if ns.corpus:
        chosen = corpus_models()
    else:
        chosen = {name: (fn, args, False)
                  for name, (fn, args) in models(np.random.default_rng(0)).items()}
    rows = []
    for name, (fn, args, x64) in chosen.items():
        if ns.names and not any(w in name for w in ns.names):
            continue
        with jax.enable_x64(x64):
            rows.append(bench(name, fn, args, ns.rounds, ns.calls, ns.target))
        print(f"{name}: done", file=sys.stderr, flush=True)
    print(f"{header()}\njax {jax.__version__} on {jax.devices()[0].platform}; "
          f"{ns.rounds} rounds x {ns.calls} calls each, medians; "
          f"load average {os.getloadavg()[0]:.1f}")
    print(table(rows))
    return 0 if all(r["check"] is None for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
