"""Benchmark our CPU code against XLA:CPU and op-at-a-time numpy (the interpreter).

    python -m hlo_opt.tools.bench_cpu                 # small table, then large table
    python -m hlo_opt.tools.bench_cpu --small         # the corpus fixtures only (a minute)
    python -m hlo_opt.tools.bench_cpu --large         # benchmarks/large only (~15 minutes)
    python -m hlo_opt.tools.bench_cpu softmax mlp     # modules whose name contains a word
    python -m hlo_opt.tools.bench_cpu --limits        # also the physical limits section
    python -m hlo_opt.tools.bench_cpu --optimize      # ours on hlo_opt.optimize's output
    python -m hlo_opt.tools.bench_cpu --json rows.json   # the rows as JSON too (to compare runs)
    HLO_OPT_CPU=haswell python -m hlo_opt.tools.bench_cpu --large   # AVX2 code, both sides

Two tables from the same run: small, the JAX fixtures of tests/corpus (tens of
microseconds: per-call overhead dominates), and large, the same workloads at real sizes
(benchmarks/large/, written by gen_corpus --large: 3 ms to ~1 s a call). The header names the
CPU and vector width the code is generated for (targets/cpu_facts.target_cpu: the host's,
or HLO_OPT_CPU's) and the measured limits: numpy's memcpy bandwidth (64 MiB, read and write
counted) and the f32 FMA peak of one core at that vector width (thread CPU time). Where that
CPU lacks AVX-512, XLA:CPU is capped to the same instruction set (--xla_cpu_max_isa). The cap
holds for the code XLA generates, not for its dot library: on an AVX-512 host, XLA's dots
still run YNNPACK's AVX-512 kernels under the cap (perf shows
ynn::dot_fp32_5x64x1_1x16x1_avx512), so there dot-heavy rows compare our AVX2 GEMM with an
AVX-512 one; judge them against the AVX2 FMA peak in the kernel lines instead.

Per module, in one process: compile time from a cold cache (ours: parse -> machine code;
XLA's: parse -> StableHLO -> XLA:CPU executable), then the median per-call time of each
runtime. Ours runs twice: IEEE arithmetic with denormals (the default, what the interpreter
computes) and with denormals flushed to zero, XLA:CPU's own floating-point mode, which is the
like-for-like comparison with XLA. Calls are interleaved in rounds (ours, ours ftz, XLA, ...)
so that load from other processes on the machine hits all alike; a round makes --calls
calls of each, fewer where they would take more than 0.3 s. XLA runs on device buffers
placed beforehand, ours on numpy arrays (outputs allocated per call). Ratios: ours/XLA (< 1
is faster than XLA). Every module's outputs are checked against the interpreter with the
test suite's tolerances (tools/output_check.py); where they differ, the check says whether
XLA's differ too (then the random, unscaled inputs make the module ill-conditioned).

Small table: the interpreter's time (a few calls) and numpy/ours; geomeans over all
fixtures and per class (modules without dot or convolution are elementwise/reduction).
Large table: the interpreter runs once, for the check, and gives up after 300 s (the check
then says so); under each module its three costliest kernels from the per-kernel profile
(Executable.profile: cycle counters around each step, over calls taking ~0.3 s, at least 3):
share of the call, time (that share of the module's median), GB/s (bytes the kernel's
inputs and outputs hold / its time: more than it reads where a gather or slice reads part of
an input; data that stays in cache can beat memcpy) against the memcpy bandwidth, and for
kernels with dots or convolutions GFLOP/s against the FMA peak of the cores it runs on.
Geomean of ours/XLA over the modules where XLA takes at least 1 ms, the largest ratio, and
the geomean over all.

--limits also measures the FMA peak of all cores now and how close two large kernels come:
a memory-bound fused elementwise kernel (bytes moved / bandwidth) and a compute-bound matmul
(flops / peak); best of 15 calls each, outputs reused.

--optimize runs ours on what hlo_opt.optimize makes of each module (default rules, fusion)
instead of on the module (which compile fuses with the default declarations); XLA and numpy
still run the module. Compile time then excludes optimization (bench_optimize times that).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import signal
import statistics
import sys
import time
import warnings

import numpy as np

from .. import evaluate, optimize, parse
from ..lowering import jit
from ..targets.work import flops
from .hlo_run import random_inputs
from .output_check import mismatch

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "corpus"
LARGE = ROOT / "benchmarks" / "large"        # gen_corpus --large: real sizes, not in tests


def _median_call(fn, calls: int) -> float:
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _xla_runner(text: str, platform: str = "cpu"):
    """(compile seconds, prepare) of XLA on `platform` (XLA:CPU by default), or None where
    XLA is unavailable or refuses; prepare(args) places the arguments on the device and
    returns a call that runs the executable and waits for its outputs."""
    from .. import xla_oracle
    if not xla_oracle.available():
        return None
    try:
        compiled = xla_oracle.compile(text, platform)
    except xla_oracle.XlaError:
        return None
    jax = xla_oracle._xla.jax
    device = compiled.executable.local_devices()[0]

    def prepare(args):
        with jax.enable_x64(True):
            buffers = [jax.device_put(np.ascontiguousarray(a), device) for a in args]

        def call():
            for o in compiled.executable.execute(buffers):
                o.block_until_ready()
        return call
    return compiled.seconds, prepare


OPTIMIZE_SECONDS = 10.0                 # saturation limit per fixture for --optimize
ROUND_SECONDS = 0.3                     # calls per round: about this long, at most --calls
MIN_SECONDS = 1e-3                      # large modules in the geomean: XLA takes this long
INTERPRETER_SECONDS = 300.0             # the interpreter's check gives up after this long
TOP_KERNELS = 3                         # kernels listed per large module


class _InterpreterTimeout(BaseException):
    """Raised into the interpreter by the alarm (not an Exception: nothing may catch it)."""


def _interpret(module, args, seconds: float):
    """(outputs, seconds) of one interpreter call, or None when it takes longer than
    `seconds` (an interval timer interrupts it; main thread only)."""
    running = [True]

    def stop(signum, frame):
        if running[0]:                  # not once the result is in
            raise _InterpreterTimeout
    previous = signal.signal(signal.SIGALRM, stop)
    start = time.perf_counter()
    try:
        signal.setitimer(signal.ITIMER_REAL, seconds)
        with np.errstate(all="ignore"):
            outputs = evaluate(module, args)
        running[0] = False
        return outputs, time.perf_counter() - start
    except _InterpreterTimeout:
        return None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _calls_per_round(fn, calls: int) -> int:
    """As many calls as take about ROUND_SECONDS (from one timed call), 1 to `calls`."""
    return max(1, min(calls, int(ROUND_SECONDS / max(_median_call(fn, 1), 1e-9))))


def bench_module(path: pathlib.Path, rounds: int, calls: int, numpy_calls: int,
                 optimized: bool = False, large: bool = False) -> dict:
    """One row of the small table, or with `large` of the large one: the interpreter runs
    once (its result checked, given up after INTERPRETER_SECONDS) instead of `numpy_calls`
    times, and the costliest kernels are profiled."""
    from ..lowering import compile as compile_cpu
    from ..lowering.runtime import clear_caches
    text = path.read_text()
    module = parse(text, str(path))
    ours_text = optimize(module, time_limit=OPTIMIZE_SECONDS).to_text() if optimized else text
    clear_caches()                      # compile time from cold: no kernel of earlier modules
    start = time.perf_counter()
    ours_module = parse(ours_text, str(path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exe = compile_cpu(ours_module)
    ours_compile = time.perf_counter() - start
    args = random_inputs(module, seed=0)
    row = {"name": path.name.removesuffix(".hlo"), "ours_compile": ours_compile,
           "fallbacks": len(exe.stats["fallbacks"]), "peak_bytes": exe.stats["peak_bytes"],
           "kernels": exe.stats["kernels"],
           "class": "dot/conv" if any(i.opcode in ("dot", "convolution")
                                      for i in module.instructions()) else "elementwise/reduce"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exe_ftz = compile_cpu(ours_module, flush_denormals=True)
    ours = lambda: exe.run(args)   # noqa: E731
    ours_ftz = lambda: exe_ftz.run(args)   # noqa: E731
    got = ours()
    ours_ftz()
    xla = _xla_runner(text)
    xla_call = None
    if xla is not None:
        row["xla_compile"], prepare = xla
        xla_call = prepare(args)
        xla_call()
    runs = [("ours", ours), ("ours_ftz", ours_ftz)] + ([("xla", xla_call)] if xla_call else [])
    runs = [(key, fn, _calls_per_round(fn, calls)) for key, fn in runs]
    times = {key: [] for key, _, _ in runs}
    for _ in range(rounds):
        for key, fn, n in runs:
            times[key].append(_median_call(fn, n))
    row.update({key: statistics.median(t) for key, t in times.items()})
    interpreted = _interpret(module, args, INTERPRETER_SECONDS)
    if interpreted is None:
        row["check"] = f"interpreter > {INTERPRETER_SECONDS:.0f} s: not checked"
    else:
        want, row["numpy"] = interpreted
        row["check"] = _check(got, want, text if xla_call else None, args)
        if not large:
            with np.errstate(all="ignore"):
                row["numpy"] = _median_call(lambda: evaluate(module, args), numpy_calls)
    if large:
        profiled_calls = max(3, min(calls, int(ROUND_SECONDS / row["ours"])))
        row["top_kernels"] = kernel_rows(exe, args, row["ours"], profiled_calls)
    return row


def _check(got, want, text: str | None, args) -> str:
    """"ok" when our outputs match the interpreter's (the test suite's tolerances), else
    how they differ, and how XLA:CPU's outputs differ (when `text` is given): a difference
    XLA shares comes from the inputs' conditioning (random unscaled weights make softmax
    and long dot chains sensitive to rounding), not from our code."""
    problem = mismatch(got, want)
    if problem is None:
        return "ok"
    if text is None:
        return problem
    from .. import xla_oracle
    return f"{problem}; XLA: {mismatch(xla_oracle.run(text, args), want) or 'ok'}"


def matrix_flops(comp) -> float:
    """Multiply-add flops (2 per MAC) of the dots and convolutions a kernel computes."""
    return sum(flops(i.opcode, i.shape, i.attrs, [o.shape for o in i.operands], {})[1]
               for i in comp.post_order())


def kernel_rows(exe, args, seconds: float, calls: int = 3) -> list[dict]:
    """The costliest steps of `exe` (its per-kernel profile): share of the call, time (that
    share of `seconds`, the module's median: a profile's few calls are noisier), bytes its
    outputs and inputs hold and flops of its dots and convolutions (per call, for the
    rates); `threads` is how many cores the kernel runs on."""
    from ..lowering.driver import step_label
    from ..lowering.program import kernel_steps
    from ..targets import cpu_facts
    steps = {step_label(s): s for s in kernel_steps(exe.program)}
    rows = exe.profile(args, calls)
    total = sum(r[1] for r in rows) or 1.0
    out = []
    for label, profiled, launches, moved in rows[:TOP_KERNELS]:
        share = profiled / total
        step = steps.get(label)                  # None: a fallback to the interpreter
        kernel = step.kernel if step is not None else None
        parallel = kernel is not None and jit.has_openmp() and kernel.parallel(
            cpu_facts.threads(), cpu_facts.PARALLEL_MIN_WORK)
        mac = matrix_flops(kernel.comp) if kernel is not None and kernel.comp else 0.0
        out.append({"kernel": label, "seconds": share * seconds, "share": share,
                    "launches": launches, "bytes": moved * launches,
                    "flops": mac * launches, "threads": cpu_facts.threads() if parallel else 1})
    return out


def _fmt_time(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{s * 1e6:9.1f}" if s < 0.1 else f"{s * 1e3:8.1f}m"


def _geomean(values) -> float:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def _ratio(a, b) -> str:
    return f"{a / b:8.2f}" if a and b else "       -"


def header(machine: dict | None = None) -> str:
    """Which CPU the code was generated for, and the machine's limits when measured."""
    from ..targets import cpu_facts
    name, _ = cpu_facts.target_cpu()
    bits = cpu_facts.vector_isa()
    isa = {512: "AVX-512", 256: "AVX/AVX2"}.get(bits, "SSE")
    lines = [f"code generated for {name} ({isa}: {bits}-bit vectors"
             f"{', HLO_OPT_CPU=' + os.environ['HLO_OPT_CPU'] if os.environ.get('HLO_OPT_CPU') else ''}"
             f"); {cpu_facts.threads()} threads; host {llvm_host()}"
             + (f"; XLA_FLAGS={os.environ['XLA_FLAGS']}" if os.environ.get("XLA_FLAGS") else "")]
    if machine:
        lines.append(f"limits: memcpy {machine['bandwidth'] / 1e9:.1f} GB/s (read+write, 64 MiB), "
                     f"f32 FMA peak {machine['peak1'] / 1e9:.0f} GFLOP/s per core")
    return "\n".join(lines)


def match_xla_isa() -> None:
    """Where our code is generated for narrower vectors than AVX-512 (HLO_OPT_CPU=haswell on
    an AVX-512 host), cap XLA:CPU's instruction set the same way (XLA_FLAGS
    --xla_cpu_max_isa), so that both sides run the machine being imitated. Before XLA
    starts; an explicit cap in XLA_FLAGS is kept."""
    from ..targets import cpu_facts
    flags = os.environ.get("XLA_FLAGS", "")
    bits = cpu_facts.vector_isa()
    if bits < 512 and "xla_cpu_max_isa" not in flags:
        isa = "AVX2" if bits == 256 else "SSE4_2"
        os.environ["XLA_FLAGS"] = f"{flags} --xla_cpu_max_isa={isa}".strip()


def llvm_host() -> str:
    import llvmlite.binding as llvm
    llvm.initialize_native_target()
    return llvm.get_host_cpu_name()


def _columns(large: bool) -> list[tuple[str, int, object]]:
    """(heading, width, cell of a row) of a table's columns: the small table in
    microseconds with the interpreter's time, the large one in milliseconds."""
    unit, fmt = ("ms", _ms) if large else ("us", _fmt_time)
    numpy = [] if large else [("numpy us", 9, lambda r: _fmt_time(r.get("numpy")))]
    numpy_ratio = [] if large else [("numpy/ours", 10, lambda r: _ratio(r.get("numpy"), r["ours"]))]
    return [("module", -22, lambda r: r["name"]), ("class", -6, lambda r: r["class"][:6]),
            (f"ours {unit}", 9, lambda r: fmt(r["ours"])),
            (f"ftz {unit}", 9, lambda r: fmt(r["ours_ftz"])),
            (f"xla {unit}", 9, lambda r: fmt(r.get("xla"))), *numpy,
            ("ours/xla", 8, lambda r: _ratio(r["ours"], r.get("xla"))),
            ("ftz/xla", 8, lambda r: _ratio(r["ours_ftz"], r.get("xla"))), *numpy_ratio,
            ("compile", 8, lambda r: f"{r['ours_compile']:7.2f}s"),
            ("xla", 6, lambda r: f"{r.get('xla_compile', float('nan')):5.2f}s"),
            ("fb", -2, lambda r: str(r["fallbacks"] or "")), ("check", -5, lambda r: r["check"])]


def _table(rows: list[dict], large: bool, machine: dict | None = None) -> list[str]:
    """The module lines of a table (under each large module its costliest kernels)."""
    columns = _columns(large)

    def line(cells):
        return " ".join(f"{c:<{-w}s}" if w < 0 else f"{c:>{w}s}"
                        for c, (_, w, _) in zip(cells, columns)).rstrip()
    head = line([h for h, _, _ in columns])
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(line([cell(r).strip() for _, _, cell in columns]))
        lines.extend("      " + _kernel_line(k, machine) for k in r.get("top_kernels", []))
    return lines


def report(rows: list[dict]) -> str:
    """The small table: per fixture times, ratios, compile times; geomeans per class."""
    lines = _table(rows, False)
    lines.append("")
    for label, subset in (("all", rows),
                          ("elementwise/reduce", [r for r in rows if r["class"] != "dot/conv"]),
                          ("dot/conv", [r for r in rows if r["class"] == "dot/conv"])):
        with_xla = [r for r in subset if r.get("xla")]
        if not subset:
            continue
        lines.append(
            f"geomean {label:18s} ours/xla {_geomean(r['ours'] / r['xla'] for r in with_xla):5.2f}"
            f"  ftz/xla {_geomean(r['ours_ftz'] / r['xla'] for r in with_xla):5.2f}"
            f"  numpy/ours {_geomean(r.get('numpy', 0) / r['ours'] for r in subset):6.1f}"
            f"  compile ours {_geomean(r['ours_compile'] for r in subset):5.2f}s"
            f" xla {_geomean(r.get('xla_compile') for r in with_xla):5.2f}s ({len(subset)} modules)")
    return "\n".join(lines)


def report_large(rows: list[dict], machine: dict) -> str:
    """The large table: per module times, ratios, the interpreter check, and its costliest
    kernels against the limits (memcpy bandwidth; FMA peak of the cores the kernel runs
    on); geomean over modules where XLA takes at least MIN_SECONDS, and the worst ratio."""
    lines = _table(rows, True, machine)
    lines.append("")
    timed = [r for r in rows if r.get("xla")]
    big = [r for r in timed if r["xla"] >= MIN_SECONDS]
    for key in ("ours", "ours_ftz"):
        ratios = {r["name"]: r[key] / r["xla"] for r in big}
        worst = max(ratios, key=ratios.get) if ratios else None
        lines.append(
            f"{key + '/xla':12s} geomean {_geomean(ratios.values()):5.2f} over {len(big)} modules "
            f"with xla >= {MIN_SECONDS * 1e3:.0f} ms (max {ratios.get(worst, float('nan')):.2f} "
            f"{worst}; {sum(v > 1 for v in ratios.values())} slower than XLA); "
            f"{_geomean(r[key] / r['xla'] for r in timed):5.2f} over all {len(timed)}")
    failed = [r["name"] for r in rows if r["check"] != "ok"]
    lines.append(f"interpreter check: {len(rows) - len(failed)} of {len(rows)} ok"
                 + (f"; not ok: {', '.join(failed)}" if failed else ""))
    return "\n".join(lines)


def _ms(s: float | None) -> str:
    return f"{s * 1e3:9.2f}" if s else "        -"


def _kernel_line(k: dict, machine: dict) -> str:
    seconds = k["seconds"] or 1e-12
    gbps = k["bytes"] / seconds
    rate = f"{gbps / 1e9:6.1f} GB/s = {gbps / machine['bandwidth'] * 100:3.0f}% of memcpy"
    if k["flops"]:
        peak = machine["peak1"] * k["threads"]
        rate += (f", {k['flops'] / seconds / 1e9:5.0f} GFLOP/s = "
                 f"{k['flops'] / seconds / peak * 100:3.0f}% of {k['threads']}-core FMA peak")
    return (f"{k['share'] * 100:3.0f}% {k['seconds'] * 1e3:8.2f} ms x{k['launches']:<3d} "
            f"{k['threads']}t {rate}  {k['kernel']}")


# ----------------------------------------------------------------- physical limits

FMA_ACCUMULATORS = 12


def _fma_peak(threads: int) -> float:
    """Measured f32 FMA throughput (flop/s) of `threads` cores at the target CPU's vector
    width: 12 independent vector accumulators per core (enough to cover the FMA latency on
    two ports, few enough for AVX2's 16 registers), a loop the compiler cannot shorten (one
    core: by thread CPU time, so other processes on the machine do not count)."""
    import ctypes

    from llvmlite import ir

    from ..lowering import jit
    from ..lowering.intrinsics import call
    from ..lowering.ltypes import F32, I64, VOID
    from ..targets import cpu_facts
    lanes = cpu_facts.vector_isa() // 32
    vt = ir.VectorType(F32, lanes)
    mod = jit.new_module("fma_peak")
    fn = ir.Function(mod, ir.FunctionType(VOID, [I64, ir.PointerType()]), "fma_peak")
    jit.tune(fn)
    n, out = fn.args
    entry = fn.append_basic_block("entry")
    loop = fn.append_basic_block("loop")
    done = fn.append_basic_block("done")
    b = ir.IRBuilder(entry)
    one = ir.Constant(vt, [1.0000001] * lanes)
    b.branch(loop)
    b.position_at_end(loop)
    i = b.phi(I64)
    i.add_incoming(I64(0), entry)
    accs = []
    for k in range(FMA_ACCUMULATORS):
        p = b.phi(vt)
        p.add_incoming(ir.Constant(vt, [float(k)] * lanes), entry)
        accs.append(p)
    new = [call(b, "llvm.fma", [a, one, one]) for a in accs]
    for p, v in zip(accs, new):
        p.add_incoming(v, loop)
    nxt = b.add(i, I64(1))
    i.add_incoming(nxt, loop)
    b.cbranch(b.icmp_signed("<", nxt, n), loop, done)
    b.position_at_end(done)
    total = new[0]
    for v in new[1:]:
        total = b.fadd(total, v)
    b.store(b.extract_element(total, I64(0)), out)
    b.ret_void()
    address = jit.compile_ir(str(mod), ["fma_peak"])["fma_peak"]
    f = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p)(address)
    iters = 20_000_000
    flops = iters * FMA_ACCUMULATORS * lanes * 2
    sink = [np.zeros(1, np.float32) for _ in range(threads)]
    f(1000, sink[0].ctypes.data)

    def run(s):
        start = time.thread_time()
        f(iters, s.ctypes.data)
        return time.thread_time() - start
    from concurrent.futures import ThreadPoolExecutor
    best = 0.0
    for _ in range(3):
        start = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            cpu = list(pool.map(run, sink))
        elapsed = time.perf_counter() - start
        # One thread: its own CPU time, immune to other processes; several: wall time,
        # what the cores deliver together right now.
        best = max(best, flops / cpu[0] if threads == 1 else threads * flops / elapsed)
    return best


def _best(fn, calls: int = 15) -> float:
    """Fastest of `calls` calls: what the machine can do when nothing else interferes
    (limits are about the hardware; the fixtures' medians are about typical behaviour)."""
    return min(_median_call(fn, 1) for _ in range(calls))


def measure_machine() -> dict:
    """The limits kernels are compared with: memcpy bandwidth (bytes/s, read and write
    counted, numpy copy of 64 MiB, best of 15) and the f32 FMA peak of one core."""
    a = np.random.default_rng(0).standard_normal(1 << 24).astype(np.float32)
    dst = np.empty_like(a)
    copy_t = _best(lambda: np.copyto(dst, a))
    return {"bandwidth": 2 * a.nbytes / copy_t, "peak1": _fma_peak(1)}


def limits(machine: dict) -> str:
    """The limits section: `machine` (measure_machine) and how close a memory-bound and a
    compute-bound kernel come to them."""
    from ..lowering import compile as compile_cpu
    from ..targets import cpu_facts
    n = 1 << 24
    a = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    bandwidth, peak1 = machine["bandwidth"], machine["peak1"]
    threads = cpu_facts.threads()
    measured = _fma_peak(threads)
    peak = peak1 * threads              # what all cores would give if nothing else ran
    lines = [f"memcpy bandwidth {bandwidth / 1e9:.1f} GB/s (numpy copy of 64 MiB, read+write); "
             f"f32 FMA peak {peak1 / 1e9:.0f} GFLOP/s on one core (x{threads} cores = "
             f"{peak / 1e9:.0f}; measured on {threads} now: {measured / 1e9:.0f})"]
    text = f"""HloModule membound
ENTRY e {{
  x = f32[{n}] parameter(0)
  y = f32[{n}] parameter(1)
  m = f32[{n}] multiply(x, y)
  ROOT r = f32[{n}] add(m, x)
}}"""
    exe = compile_cpu(text)
    y = a[::-1].copy()
    out = exe(a, y)                       # outputs reused: page faults are not bandwidth
    t = _best(lambda: exe.run([a, y], out))
    moved = 3 * a.nbytes
    lines.append(f"memory-bound  x*y+x on 2 x 64 MiB f32: {t * 1e3:.2f} ms = "
                 f"{moved / t / 1e9:.1f} GB/s, limit {moved / bandwidth * 1e3:.2f} ms "
                 f"-> {moved / bandwidth / t * 100:.0f}% of memcpy bandwidth")
    size = 1024
    text = f"""HloModule computebound
ENTRY e {{
  x = f32[{size},{size}] parameter(0)
  y = f32[{size},{size}] parameter(1)
  ROOT d = f32[{size},{size}] dot(x, y), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}"""
    exe = compile_cpu(text)
    x = np.random.default_rng(1).standard_normal((size, size)).astype(np.float32)
    out = exe(x, x)
    t = _best(lambda: exe.run([x, x], out))
    flops = 2 * size ** 3
    blas = _best(lambda: x @ x)
    line = (f"compute-bound f32 matmul {size}^3: {t * 1e3:.2f} ms = {flops / t / 1e9:.0f} "
            f"GFLOP/s, limit {flops / peak * 1e3:.2f} ms -> {flops / peak / t * 100:.0f}% of "
            f"peak (numpy/OpenBLAS {flops / blas / 1e9:.0f} GFLOP/s")
    xla = _xla_runner(text)
    if xla is not None:
        call = xla[1]([x, x])
        call()
        xt = _best(call)
        line += f", XLA:CPU {flops / xt / 1e9:.0f} GFLOP/s"
    lines.append(line + ")")
    # One core, timed by the thread's CPU time: immune to other processes on the machine.
    from ..lowering.runtime import clear_caches
    saved, cpu_facts.PARALLEL_MIN_WORK = cpu_facts.PARALLEL_MIN_WORK, float("inf")
    try:
        clear_caches()
        serial = compile_cpu(text.replace("computebound", "computebound_serial"))
    finally:
        cpu_facts.PARALLEL_MIN_WORK = saved
        clear_caches()
    serial.run([x, x], out)
    cpu = min(_thread_time(lambda: serial.run([x, x], out)) for _ in range(7))
    lines.append(f"compute-bound on one core (thread CPU time): {flops / cpu / 1e9:.0f} GFLOP/s "
                 f"-> {flops / cpu / peak1 * 100:.0f}% of the one-core peak")
    return "\n".join(lines)


def _thread_time(fn) -> float:
    start = time.thread_time()
    fn()
    return time.thread_time() - start


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="bench_cpu", description=__doc__.split("\n\n")[0])
    p.add_argument("names", nargs="*", help="only modules whose file name contains one")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    p.add_argument("--calls", type=int, default=40,
                   help=f"calls per round, at most (default 40; fewer where they would take "
                        f"more than {ROUND_SECONDS} s)")
    p.add_argument("--numpy-calls", type=int, default=3)
    which = p.add_mutually_exclusive_group()
    which.add_argument("--small", action="store_true", help="the small table only")
    which.add_argument("--large", action="store_true", help="the large table only")
    p.add_argument("--xla-opt", action="store_true", help="also XLA-optimized fixtures")
    p.add_argument("--limits", action="store_true", help="measure the physical limits too")
    p.add_argument("--optimize", action="store_true",
                   help="run ours on hlo_opt.optimize's output (rules and fusion)")
    p.add_argument("--json", metavar="PATH",
                   help="write the header facts and both tables' rows here as JSON too")
    args = p.parse_args(argv)
    small = sorted(CORPUS.glob("*.hlo"))
    if not args.xla_opt:
        small = [f for f in small if not f.name.endswith(".xla_opt.hlo")]
    tables = [(False, small)] * (not args.large) + \
        [(True, sorted(LARGE.glob("*.hlo")))] * (not args.small)
    match_xla_isa()
    machine = measure_machine()
    print(header(machine), flush=True)
    saved = {"header": header(machine), "machine": machine}
    for large, files in tables:
        if args.names:
            files = [f for f in files if any(n in f.name for n in args.names)]
        rows = []
        for f in files:
            rows.append(bench_module(f, args.rounds, args.calls, args.numpy_calls,
                                     args.optimize, large))
            print(f"  {rows[-1]['name']}: ours {_fmt_time(rows[-1]['ours'])} us, "
                  f"xla {_fmt_time(rows[-1].get('xla'))} us, {rows[-1]['check']}",
                  file=sys.stderr, flush=True)
        print()
        print(f"{'large' if large else 'small'} modules ({LARGE if large else CORPUS})")
        print(report_large(rows, machine) if large else report(rows), flush=True)
        saved["large" if large else "small"] = rows
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(saved, indent=1))
    if args.limits:
        print()
        print(limits(machine))
    return 0


if __name__ == "__main__":
    sys.exit(main())
