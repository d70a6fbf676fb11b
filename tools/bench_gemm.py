"""f32 GEMM throughput on one core against its FMA peak: whole GEMMs at chosen sizes, and the
micro-kernel alone, which tells the kernel's own losses from packing and cache misses.

    python -m hlo_opt.tools.bench_gemm                         # default sizes
    python -m hlo_opt.tools.bench_gemm 512x4096x1024 1000x1000x1000 --kc 256 768
    HLO_OPT_CPU=haswell python -m hlo_opt.tools.bench_gemm     # AVX2 code

A size MxNxK is C[M,N] = A[M,K] B[K,N] compiled as one dot on one thread (best of --reps
calls by thread CPU time: other processes on the machine do not count). The micro-kernel
runs from a compiled loop over 16 packed A panels with one B panel (the order the GEMM runs
them) for each K block depth of --kc, C rows --ldc floats apart. The peak is bench_cpu's
(12 independent FMA chains at the target's vector width).
"""
from __future__ import annotations

import argparse
import ctypes

import numpy as np

from ..lowering import jit
from ..lowering.emit_dot import micro_kernel
from ..lowering.ltypes import elem
from ..targets import cpu_facts
from .bench_cpu import _fma_peak, _thread_time

SIZES = ["512x4096x1024", "512x1024x2048", "1024x1536x512", "2048x768x3072", "1000x1000x1000"]
A_PANELS = 16

_DRIVER = """
declare void @{micro}(ptr, ptr, i64, ptr, i64, i64, i64, i1)
define void @micro_driver(ptr %a, ptr %b, i64 %kc, ptr %c, i64 %ldc, i64 %reps) {{
entry:
  br label %rep
rep:
  %r = phi i64 [0, %entry], [%r1, %next]
  br label %panel
panel:
  %i = phi i64 [0, %rep], [%i1, %panel]
  %a_at = mul i64 %i, {a_step}
  %a_off = mul i64 %a_at, %kc
  %ap = getelementptr float, ptr %a, i64 %a_off
  %c_at = mul i64 %i, {mr}
  %c_off = mul i64 %c_at, %ldc
  %cp = getelementptr float, ptr %c, i64 %c_off
  call void @{micro}(ptr %ap, ptr %b, i64 %kc, ptr %cp, i64 %ldc, i64 {mr}, i64 {nr}, i1 0)
  %i1 = add i64 %i, 1
  %more = icmp slt i64 %i1, {panels}
  br i1 %more, label %panel, label %next
next:
  %r1 = add i64 %r, 1
  %again = icmp slt i64 %r1, %reps
  br i1 %again, label %rep, label %done
done:
  ret void
}}
"""


def _best(fn, reps: int) -> float:
    return min(_thread_time(fn) for _ in range(reps))


def gemm_rate(m: int, n: int, k: int, reps: int = 7) -> float:
    """flop/s of one f32 dot of that size on one thread."""
    from ..lowering import compile as compile_cpu
    text = (f"HloModule gemm_{m}_{n}_{k}\nENTRY e {{\n  a = f32[{m},{k}] parameter(0)\n"
            f"  b = f32[{k},{n}] parameter(1)\n  ROOT c = f32[{m},{n}] dot(a, b), "
            "lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n")
    saved, cpu_facts.PARALLEL_MIN_WORK = cpu_facts.PARALLEL_MIN_WORK, float("inf")
    try:
        exe = compile_cpu(text)
    finally:
        cpu_facts.PARALLEL_MIN_WORK = saved
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k), np.float32)
    b = rng.standard_normal((k, n), np.float32)
    out = exe(a, b)
    return 2.0 * m * n * k / _best(lambda: exe.run([a, b], out), reps)


def micro_rate(kc: int, ldc: int = 1024, reps: int = 7) -> float:
    """flop/s of the f32 micro-kernel over A_PANELS packed A panels and one B panel."""
    mr, nr, _ = cpu_facts.gemm_tile(32)
    name = micro_kernel(elem("f32"))
    mod = jit.new_module("micro_driver")
    text = (f'target triple = "{mod.triple}"\ntarget datalayout = "{mod.data_layout}"\n'
            + _DRIVER.format(micro=name, mr=mr, nr=nr, a_step=mr, panels=A_PANELS))
    address = jit.compile_ir(text, ["micro_driver"])["micro_driver"]
    drive = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                             ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(address)
    rng = np.random.default_rng(0)
    a = rng.standard_normal(A_PANELS * mr * kc, np.float32)
    b = rng.standard_normal(kc * nr, np.float32)
    c = np.zeros((A_PANELS * mr, max(ldc, nr)), np.float32)
    flops = 2.0 * A_PANELS * mr * nr * kc
    calls = max(1, int(2e9 / flops))                # 2 GFLOP a timing: ~10-20 ms
    seconds = _best(lambda: drive(a.ctypes.data, b.ctypes.data, kc, c.ctypes.data,
                                  c.shape[1], calls), reps)
    return flops * calls / seconds


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="bench_gemm", description=__doc__.split("\n\n")[0])
    p.add_argument("sizes", nargs="*", default=SIZES, help="MxNxK (default: a few)")
    p.add_argument("--kc", type=int, nargs="*", default=[256, 768],
                   help="K block depths for the micro-kernel alone (none: skip it)")
    p.add_argument("--ldc", type=int, default=1024, help="floats between C's rows")
    p.add_argument("--reps", type=int, default=7, help="timed calls, best kept")
    args = p.parse_args(argv)
    peak = _fma_peak(1)
    mr, nr, _ = cpu_facts.gemm_tile(32)
    print(f"{cpu_facts.target_cpu()[0]}: {cpu_facts.vector_isa()}-bit vectors, micro-tile "
          f"{mr}x{nr}, one-core f32 FMA peak {peak / 1e9:.0f} GFLOP/s")
    for kc in args.kc:
        rate = micro_rate(kc, args.ldc, args.reps)
        print(f"micro-kernel K={kc:<5d}        {rate / 1e9:6.1f} GFLOP/s = {rate / peak:4.0%} of peak")
    for size in args.sizes:
        m, n, k = (int(v) for v in size.lower().split("x"))
        rate = gemm_rate(m, n, k, args.reps)
        print(f"gemm {size:20s} {rate / 1e9:6.1f} GFLOP/s = {rate / peak:4.0%} of peak")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
