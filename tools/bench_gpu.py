"""Benchmark our GPU code against XLA:GPU on the same HLO text, in one process.

    python -m hlo_opt.tools.bench_gpu                   # corpus modules + the large variants
    python -m hlo_opt.tools.bench_gpu softmax mlp       # modules whose name contains a word
    python -m hlo_opt.tools.bench_gpu --no-large        # the corpus modules only
    python -m hlo_opt.tools.bench_gpu --json rows.json  # the rows as JSON too

Per module: ours is `hlo_opt.compile(module, target="gpu")` called on arguments placed on
the GPU beforehand, outputs left there (`run(args, device=True)`: a fresh allocation per
output per call), waiting for the stream; XLA:GPU is jaxlib's GPU client compiling the same
text (xla_oracle.compile(text, "gpu")), arguments placed beforehand, waiting for its
outputs. Calls are interleaved in rounds (ours, XLA, ...) after a warm-up call each; times
are medians. ours/xla < 1 is faster than XLA; the geomean is over modules where XLA takes
at least 1 ms. A module with a kernel we have no GPU code for yet is listed as refused.

Per kernel (CUDA events around each launch, GpuExecutable.profile) of each module's three
costliest kernels: achieved bandwidth = bytes of the kernel's outputs and inputs / its time,
against the GPU's peak (targets/gpu.py's figure and a measured device-to-device copy);
kernels with a dot: 2*M*N*K / time in TFLOP/s. The memory-bound summary counts kernels that
move at least 16 MiB and reach 70% of the measured copy bandwidth.

Large variants (built with JAX, lowered for CUDA; skipped without jax): an MLP of 4096x4096
layers at batch 4096, a 12-layer transformer LM at batch 8 x 512 tokens, the corpus CNN at
batch 64, and memory-bound softmax / layernorm / an elementwise chain reading 2 GiB
(more than 1 ms at an H100's bandwidth, so they count in the geomean).
Without a GPU it prints why in one line and exits 1.
"""
from __future__ import annotations

import argparse
import functools
import json
import math
import os
import statistics
import sys
import warnings

import numpy as np

from .. import parse
from ..errors import UnsupportedError
from ..targets import gpu as gpu_facts
from .bench_cpu import CORPUS, _fmt_time, _geomean, _median_call, _ratio, _xla_runner
from .hlo_run import random_inputs

MIN_SECONDS = 1e-3                   # modules in the geomean: XLA takes at least this long
MEMORY_BOUND_BYTES = 16 << 20        # kernels in the bandwidth summary move at least this
BANDWIDTH_TARGET = 0.7


def large_variants() -> dict[str, str]:
    """name -> HLO text of the large variants (JAX lowering for CUDA); {} without jax."""
    try:
        import jax
        import jax.numpy as jnp

        from . import jax_models as nn
        from .gen_corpus import i32, specs
    except ImportError as e:
        print(f"bench_gpu: large variants skipped ({e})", file=sys.stderr)
        return {}

    def chain(x, y):
        a = jnp.exp(-jnp.abs(x)) + jnp.log1p(jnp.abs(y))
        return jnp.tanh(a * y) - jnp.sin(x) * 0.5

    models = {
        "mlp_4096": (nn.mlp, (specs(nn.mlp_shapes([4096, 4096, 4096])),
                              *specs(((4096, 4096),)))),
        "transformer_12l_b8_t512": (nn.lm_loss, (specs(nn.lm_shapes(12, 8192, 768, 512)),
                                                 *i32((8, 512), (8, 512)))),
        "cnn_b64": (nn.cnn, (specs(nn.cnn_shapes()), *specs(((64, 16, 16, 3),)))),
        "softmax_512x1024x1024": (lambda x: jax.nn.softmax(x, axis=-1),
                                  specs(((512, 1024, 1024),))),
        "layernorm_512x1024x1024": (nn.layernorm,
                                    specs(((512, 1024, 1024), (1024,), (1024,)))),
        "elementwise_16384x16384": (chain, specs(((16384, 16384), (16384, 16384)))),
    }
    out = {}
    for name, (f, args) in models.items():
        entry = functools.wraps(f)(lambda *a, f=f: f(*a))
        entry.__name__ = name
        out[name] = jax.jit(entry).trace(*args).lower(
            lowering_platforms=("cuda",)).as_text(dialect="hlo")
    return out


def dot_flops(comp) -> int:
    """2*M*N*K summed over the dots a kernel computes (0 for a kernel without one)."""
    from ..dot_dims import dot_dims
    flops = 0
    for inst in comp.post_order():
        if inst.opcode == "dot":
            lhs = inst.operands[0].shape
            dims, _ = dot_dims(inst.attrs, lhs.rank, inst.operands[1].shape.rank)
            flops += 2 * inst.shape.num_elements * math.prod(lhs.dims[d] for d in dims.contracting)
    return flops


def bench_module(name: str, text: str, rounds: int, calls: int, copy_bandwidth: float) -> dict:
    import hlo_opt
    module = parse(text, name)
    row = {"name": name}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exe = hlo_opt.compile(module, target="gpu")
    except UnsupportedError as e:
        row["refused"] = e.message
        exe = None
    args = random_inputs(module, seed=0)
    xla = _xla_runner(text, "gpu")
    xla_call = None
    if xla is not None:
        row["xla_compile"], prepare = xla
        xla_call = prepare(args)
        xla_call()
    ours = None
    if exe is not None:
        row.update(kernels=exe.stats["kernels"], launches=exe.stats["kernel_calls"],
                   ours_compile=exe.stats["compile_seconds"])
        placed = args if any(isinstance(a, tuple) for a in args) else \
            [exe.put(np.asarray(a, s.dtype.numpy)) for a, s in zip(args, exe.param_shapes)]
        ours = lambda: exe.run(placed, device=True)   # noqa: E731
        ours()
    ours_t, xla_t = [], []
    for _ in range(rounds):
        if ours:
            ours_t.append(_median_call(ours, calls))
        if xla_call:
            xla_t.append(_median_call(xla_call, calls))
    if ours_t:
        row["ours"] = statistics.median(ours_t)
        row["top_kernels"] = _kernel_rows(exe, placed, copy_bandwidth)
    if xla_t:
        row["xla"] = statistics.median(xla_t)
    return row


def _kernel_rows(exe, args, copy_bandwidth: float) -> list[dict]:
    from ..lowering.program import kernel_steps
    comps = {s.label: s.kernel.kernel.comp for s in kernel_steps(exe.program)}
    rows = []
    for label, seconds, launches, moved in exe.profile(args, calls=10):
        flops = dot_flops(comps[label]) * launches
        rows.append({"kernel": label, "seconds": seconds, "launches": launches, "bytes": moved,
                     "gbps": moved * launches / seconds / 1e9 if seconds else 0.0,
                     "of_copy": moved * launches / seconds / copy_bandwidth if seconds else 0.0,
                     "tflops": flops / seconds / 1e12 if flops and seconds else None})
    return rows


def copy_bandwidth(device, nbytes: int = 1 << 30) -> float:
    """Bytes per second of a device-to-device copy of `nbytes`, read and written counted,
    best of 5 (CUDA events)."""
    src, dst = device.alloc(nbytes), device.alloc(nbytes)
    try:
        best = math.inf
        for _ in range(5):
            start, end = device.event(), device.event()
            device.record(start)
            device.copy_d2d(dst, src, nbytes)
            device.record(end)
            device.sync()
            best = min(best, device.elapsed(start, end))
        return 2 * nbytes / best
    finally:
        device.free(src)
        device.free(dst)


def report(rows: list[dict], device_name: str, copy_bw: float) -> str:
    peak = gpu_facts.GPU.bytes_per_ns * 1e9
    lines = [f"{device_name}: device-to-device copy {copy_bw / 1e9:.0f} GB/s (read+write), "
             f"targets/gpu.py peak {peak / 1e9:.0f} GB/s",
             f"{'module':26s} {'ours us':>9s} {'xla us':>9s} {'ours/xla':>8s} {'kernels':>7s} "
             f"{'launches':>8s} {'compile':>8s}"]
    for r in rows:
        ours = r.get("ours")
        note = f"  refused: {r['refused'][:90]}" if "refused" in r else ""
        lines.append(f"{r['name']:26s} {_fmt_time(ours)} {_fmt_time(r.get('xla'))} "
                     f"{_ratio(ours, r.get('xla'))} {r.get('kernels', '-'):>7} "
                     f"{r.get('launches', '-'):>8} "
                     f"{r['ours_compile'] if 'ours_compile' in r else float('nan'):7.2f}s{note}")
        for k in r.get("top_kernels", [])[:3]:
            rate = f"{k['tflops']:7.1f} TFLOP/s" if k["tflops"] else \
                f"{k['gbps']:7.0f} GB/s = {k['of_copy'] * 100:3.0f}% of copy"
            lines.append(f"    {k['seconds'] * 1e6:9.1f} us x{k['launches']:<3d} "
                         f"{k['bytes'] / 2**20:9.1f} MiB {rate}  {k['kernel']}")
    both = [r for r in rows if r.get("ours") and r.get("xla")]
    big = [r for r in both if r["xla"] >= MIN_SECONDS]
    lines.append("")
    lines.append(f"geomean ours/xla: {_geomean(r['ours'] / r['xla'] for r in big):.2f} over "
                 f"{len(big)} modules of >= {MIN_SECONDS * 1e3:.0f} ms; "
                 f"{_geomean(r['ours'] / r['xla'] for r in both):.2f} over all {len(both)} "
                 f"that ran; {sum('refused' in r for r in rows)} refused")
    memory = [k for r in rows for k in r.get("top_kernels", [])
              if not k["tflops"] and k["bytes"] >= MEMORY_BOUND_BYTES]
    if memory:
        good = sum(k["of_copy"] >= BANDWIDTH_TARGET for k in memory)
        lines.append(f"memory-bound kernels moving >= {MEMORY_BOUND_BYTES >> 20} MiB: {good} of "
                     f"{len(memory)} reach {BANDWIDTH_TARGET:.0%} of the copy bandwidth "
                     f"(median {statistics.median(k['of_copy'] for k in memory):.0%})")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="bench_gpu", description=__doc__.split("\n\n")[0])
    p.add_argument("names", nargs="*", help="only modules whose name contains one")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    p.add_argument("--calls", type=int, default=20, help="calls per round (default 20)")
    p.add_argument("--no-large", action="store_true", help="skip the large variants")
    p.add_argument("--xla-opt", action="store_true", help="also XLA-optimized fixtures")
    p.add_argument("--json", metavar="PATH", help="write the rows here as JSON")
    args = p.parse_args(argv)
    # JAX would otherwise take 75% of the GPU's memory when XLA:GPU starts, before ours.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    from ..lowering.cuda_device import open_device, unavailable_reason
    reason = unavailable_reason()
    if reason is not None:
        print(f"bench_gpu: {reason}", file=sys.stderr)
        return 1
    device = open_device()
    files = sorted(CORPUS.rglob("*.hlo"))
    if not args.xla_opt:
        files = [f for f in files if not f.name.endswith(".xla_opt.hlo")]
    texts = {str(f.relative_to(CORPUS)).removesuffix(".hlo"): f.read_text() for f in files}
    if not args.no_large:
        texts.update(large_variants())
    if args.names:
        texts = {k: v for k, v in texts.items() if any(n in k for n in args.names)}
    copy_bw = copy_bandwidth(device)
    rows = []
    for name, text in texts.items():
        rows.append(bench_module(name, text, args.rounds, args.calls, copy_bw))
        r = rows[-1]
        print(f"  {name}: ours {_fmt_time(r.get('ours'))} us, xla {_fmt_time(r.get('xla'))} us"
              f"{' (refused)' if 'refused' in r else ''}", file=sys.stderr, flush=True)
    print(report(rows, device.name, copy_bw))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": device.name, "copy_bandwidth": copy_bw, "rows": rows}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
