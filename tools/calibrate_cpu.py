"""Measure the CPU cost model's constants on this machine, with our own kernels.

    python -m hlo_opt.tools.calibrate_cpu                 # writes targets/calibration/cpu.json
    python -m hlo_opt.tools.calibrate_cpu --out PATH      # elsewhere (e.g. to compare)

Every figure is the per-call time of a small HLO module compiled by our lowering
(hlo_opt.compile), outputs reused, after a warm-up: the fastest of several batches of calls
(the machine may be shared and others only slow a batch down; the spread between batches,
(max - min) / median, is recorded next to each value).
What is measured, and which model constant it gives (targets/roofline.py, targets/work.py):

- bandwidth: `add` of two f32 arrays, bytes read + written per ns; arrays that fit L2 on one
  thread (serial kernels are small, so their data is mostly cached) and 64 MiB ones, on one
  thread and threaded (a kernel that large runs on every core).
- elementwise arithmetic: 8 independent instances of one op per element (64 of an add) over
  an L1/L2-resident array, so arithmetic and not memory sets the time; add's rate is the
  vector throughput, every other op's per-element time over add's its weight.
- reduction, GEMM (f32, a few sizes, one thread and threaded), convolution rates.
- kernel overhead: the extra time of each kernel in a chain of tiny dots (each its own kernel);
  opaque overhead: a one-trip while loop over the same kernel run plainly.
- overlap: a kernel over L2-resident arrays balanced to need as long for its arithmetic as
  for its memory traffic; the share of the shorter of the two its measured time hides.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import platform
import statistics
import sys
import time

import numpy as np

from ..targets.work import OP_WEIGHT
from .cli import main_guard, write_text

DEFAULT_OUT = (pathlib.Path(__file__).resolve().parent.parent / "targets" / "calibration"
               / "cpu.json")

SMALL = 1 << 15        # f32 elements per array that stay in L2 (128 KiB each)
ARITH = 1 << 13        # elements per array of an arithmetic fan (L1/L2)
LARGE = 1 << 24        # 64 MiB per f32 array: beyond L2 (this machine's L3 may still hold it)
FAN = 8                # independent instances of an op per element
ADD_FAN = 64           # ... of an add, to time the adds themselves
BATCH_SECONDS = 0.02   # one batch of calls lasts at least this long
BATCHES = 15
DOTS = 201             # kernels in the chain that prices one kernel call

# Each measured op, applied to FAN independent values per element (x + j/FAN: finite and
# away from denormals for every op; `{y}` is an operand near 1) whose results are summed.
# Independent, so the core overlaps them as it does the elements of a real kernel (a chain
# of one op after another would time its latency instead). An optional third entry is a
# type to convert to and back from ("convert" is the pair). Integer figures include about
# one add per op: LLVM folds the integer sum that they are timed against.
ELEMENTWISE = {
    "add": ("f32", "{x}"),
    "multiply": ("f32", "multiply({x}, {y})"),
    "divide": ("f32", "divide({x}, {y})"),
    "remainder": ("f32", "remainder({x}, {y})"),
    "sqrt": ("f32", "sqrt({x})"),
    "rsqrt": ("f32", "rsqrt({x})"),
    "cbrt": ("f32", "cbrt({x})"),
    "exponential": ("f32", "exponential({x})"),
    "exponential-minus-one": ("f32", "exponential-minus-one({x})"),
    "log": ("f32", "log({x})"),
    "log-plus-one": ("f32", "log-plus-one({x})"),
    "logistic": ("f32", "logistic({x})"),
    "tanh": ("f32", "tanh({x})"),
    "sine": ("f32", "sine({x})"),
    "cosine": ("f32", "cosine({x})"),
    "tan": ("f32", "tan({x})"),
    "atan2": ("f32", "atan2({x}, {y})"),
    "erf": ("f32", "erf({x})"),
    "power": ("f32", "power({x}, {y})"),
    # A square, not x * y: a sum of integer products by one y would be factored out.
    "s32 multiply": ("s32", "multiply({x}, {x})"),
    "s32 divide": ("s32", "divide({x}, {y})"),
    "convert f32<->s32": ("f32", "convert({x})", "s32"),
}


def _per_call(runs) -> list[tuple[float, float]]:
    """Per (exe, args, out): (seconds per call of its fastest batch, relative spread of its
    batches). The fastest: other processes on a shared machine only ever slow a batch down.
    Batches of the executables alternate, so that load hits all of them alike."""
    counts = []
    for exe, args, out in runs:
        exe.run(args, out)
        start = time.perf_counter()
        exe.run(args, out)
        counts.append(max(1, int(BATCH_SECONDS / max(time.perf_counter() - start, 1e-7))))
    times = [[] for _ in runs]
    for _ in range(BATCHES):
        for (exe, args, out), calls, batches in zip(runs, counts, times):
            start = time.perf_counter()
            for _ in range(calls):
                exe.run(args, out)
            batches.append((time.perf_counter() - start) / calls)
    return [(min(t), (max(t) - min(t)) / statistics.median(t)) for t in times]


def timed(texts: list[str], args: list[np.ndarray],
          serial: bool = False) -> list[tuple[float, float, int]]:
    """(seconds per call, spread, kernel calls) of each of `texts` compiled by our lowering
    and run on `args`, timed side by side; `serial` keeps every kernel on one thread."""
    from .. import compile as compile_cpu
    from ..lowering.runtime import clear_caches
    from ..targets import cpu_facts
    saved = cpu_facts.PARALLEL_MIN_WORK
    if serial:
        cpu_facts.PARALLEL_MIN_WORK = float("inf")
    try:
        clear_caches()
        exes = [compile_cpu(text) for text in texts]
    finally:
        cpu_facts.PARALLEL_MIN_WORK = saved
    runs = [(exe, args, exe.run(args)) for exe in exes]
    return [(t, s, exe.stats["kernel_calls"]) for (t, s), exe in zip(_per_call(runs), exes)]


def _array(dtype: str, shape, low: float, high: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype == "s32":
        return rng.integers(max(int(low), 1), max(int(high), 2), shape, dtype=np.int32)
    return rng.uniform(low, high, shape).astype(np.float32)


def _binary(op: str, n: int, dtype: str = "f32") -> str:
    return (f"HloModule {op}\nENTRY e {{\n  x = {dtype}[{n}] parameter(0)\n"
            f"  y = {dtype}[{n}] parameter(1)\n  ROOT r = {dtype}[{n}] {op}(x, y)\n}}\n")


def _fan(name: str, dtype: str, op: str, via: str | None, count: int, n: int) -> str:
    """sum over j < count of op(x + j / count): `count` independent instances of `op` per
    element and 2 * count - 1 adds."""
    t = f"{dtype}[{n}]"
    lines = [f"  x = {t} parameter(0)", f"  y = {t} parameter(1)"]
    terms = []
    for j in range(count):
        step = j / count if dtype == "f32" else j
        lines += [f"  c{j} = {dtype}[] constant({step})",
                  f"  b{j} = {t} broadcast(c{j}), dimensions={{}}", f"  s{j} = {t} add(x, b{j})"]
        value = f"s{j}"
        if via:
            lines.append(f"  v{j} = {via}[{n}] convert({value})")
            value = f"v{j}"
        if op != "{x}":
            lines.append(f"  o{j} = {t} {op.format(x=value, y='y')}")
            value = f"o{j}"
        terms.append(value)
    while len(terms) > 1:                    # a balanced tree: the sum has parallelism too
        pairs = []
        for k in range(0, len(terms) - 1, 2):
            lines.append(f"  p{len(lines)} = {t} add({terms[k]}, {terms[k + 1]})")
            pairs.append(f"p{len(lines) - 1}")
        terms = pairs + terms[len(terms) - len(terms) % 2:]
    lines.append(f"  ROOT r = {t} copy({terms[0]})")
    return f"HloModule fan_{count}_{name.replace(' ', '_').replace('<->', '_')}\nENTRY e {{\n" + \
        "\n".join(lines) + "\n}\n"


def _fan_args(dtype: str, n: int) -> list[np.ndarray]:
    if dtype == "s32":
        return [_array(dtype, n, 1, 100), _array(dtype, n, 1, 3, 1)]
    return [_array(dtype, n, 0.5, 1.5), _array(dtype, n, 0.9, 1.1, 1)]


# Module builders, shared with tests/test_cost_model.py.
def dot_module(m: int) -> str:
    """An f32 [m,m] x [m,m] GEMM."""
    return (f"HloModule dot_{m}\nENTRY e {{\n  a = f32[{m},{m}] parameter(0)\n"
            f"  b = f32[{m},{m}] parameter(1)\n  ROOT d = f32[{m},{m}] dot(a, b), "
            "lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n")


def reduce_module(rows: int, cols: int) -> str:
    """Row sums of an f32 [rows, cols]."""
    return f"""HloModule reduce
add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}
ENTRY e {{
  x = f32[{rows},{cols}] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[{rows}] reduce(x, z), dimensions={{1}}, to_apply=add
}}
"""


def conv_module(features: int, side: int) -> str:
    """A 3x3 f32 convolution, `features` in and out, on one side x side image."""
    return (f"HloModule conv\nENTRY e {{\n  x = f32[1,{side},{side},{features}] parameter(0)\n"
            f"  w = f32[3,3,{features},{features}] parameter(1)\n"
            f"  ROOT c = f32[1,{side},{side},{features}] convolution(x, w), "
            "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f\n}\n")


def _dot_chain(count: int) -> str:
    lines = ["  v0 = f32[2,2] parameter(0)", "  w = f32[2,2] parameter(1)"]
    for k in range(1, count + 1):
        lines.append(f"  v{k} = f32[2,2] dot(v{k - 1}, w), lhs_contracting_dims={{1}}, "
                     "rhs_contracting_dims={0}")
    lines[-1] = "  ROOT" + lines[-1][1:]
    return f"HloModule dots_{count}\nENTRY e {{\n" + "\n".join(lines) + "\n}\n"


CONV = conv_module(64, 32)
CONV_FLOPS = 2 * 32 * 32 * 64 * 9 * 64

WHILE_ONE_TRIP = """HloModule while_one
body {
  p = (s32[], f32[2,2]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  v = f32[2,2] get-tuple-element(p), index=1
  d = f32[2,2] dot(v, v), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT t = (s32[], f32[2,2]) tuple(j, d)
}
cond {
  p = (s32[], f32[2,2]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  one = s32[] constant(1)
  ROOT lt = pred[] compare(i, one), direction=LT
}
ENTRY e {
  x = f32[2,2] parameter(0)
  zero = s32[] constant(0)
  t = (s32[], f32[2,2]) tuple(zero, x)
  w = (s32[], f32[2,2]) while(t), condition=cond, body=body
  ROOT r = f32[2,2] get-tuple-element(w), index=1
}
"""
ONE_DOT = """HloModule one_dot
ENTRY e {
  x = f32[2,2] parameter(0)
  ROOT d = f32[2,2] dot(x, x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""


def _entry(value: float, unit: str, spread: float, what: str) -> dict:
    return {"value": float(f"{value:.4g}"), "unit": unit, "spread": round(spread, 3),
            "what": what}


def measure(log=lambda s: None) -> dict:
    """Every measurement, by name."""
    from ..targets import cpu_facts
    out: dict[str, dict] = {}

    def note(name, value, unit, spread, what):
        out[name] = _entry(value, unit, spread, what)
        log(f"{name:34s} {out[name]['value']:>12g} {unit:16s} spread {spread:.2f}")

    w = [_array("f32", (2, 2), 0.4, 0.6), _array("f32", (2, 2), 0.4, 0.6, 1)]
    (t1, s1, _), (tk, sk, k) = timed([_dot_chain(1), _dot_chain(DOTS)], w)
    call = t1
    note("module call", t1 * 1e9, "ns", s1, "one call of a one-kernel module, from Python")
    note("kernel overhead", (tk - t1) / (k - 1) * 1e9, "ns", max(s1, sk),
         f"extra time per kernel of a chain of {k} 2x2 dots over one")
    (tw, sw, _), (td, sd, _) = timed([WHILE_ONE_TRIP, ONE_DOT], w[:1])
    note("while overhead", max(tw - td, 0.0) * 1e9, "ns", max(sw, sd),
         "one-trip while loop around a 2x2 dot, over the dot alone")
    for label, n, serial in (("L2", SMALL, True), ("64MiB 1 thread", LARGE, True),
                             ("64MiB threaded", LARGE, False)):
        [(t, s, _)] = timed([_binary("add", n)],
                            [_array("f32", n, 0, 1), _array("f32", n, 0, 1, 1)], serial)
        note(f"bandwidth {label}", 12 * n / (t - call) / 1e9, "bytes/ns", s,
             f"f32 add of two {n * 4 >> 10} KiB arrays, read + written (less the call)")
    base = None
    for name, (dtype, op, *via) in ELEMENTWISE.items():
        via = via[0] if via else None
        if name == "add":
            texts = [_fan(name, dtype, op, via, c, ARITH) for c in (ADD_FAN, 1)]
            ops = 2 * ADD_FAN - 2
        else:
            texts, ops = [_fan(name, dtype, op, via, FAN, ARITH),
                          _fan("add", dtype, "{x}", None, FAN, ARITH)], FAN
        (t, s, kernels), (t0, _, _) = timed(texts, _fan_args(dtype, ARITH), True)
        per = max(t - t0, 1e-12) / (ops * ARITH) * 1e9
        note(f"elementwise {name}", per, "ns/element", s,
             f"{ops} more per element over {ARITH} {dtype}, one thread, {kernels} kernel")
        if name == "add":
            base = per
    for name in ELEMENTWISE:
        out[f"elementwise {name}"]["relative_to_add"] = round(
            out[f"elementwise {name}"]["value"] / base, 2)
    rows, cols = 256, 1024
    [(t, s, _)] = timed([reduce_module(rows, cols)], [_array("f32", (rows, cols), 0, 1)],
                        serial=True)
    note("reduce", rows * cols / (t - call) / 1e9, "elements/ns", s,
         f"row sums of f32[{rows},{cols}] (1 MiB, L2), one thread")
    n = LARGE // 16
    exp4 = _fan("exp_threads", "f32", "exponential({x})", None, 4, n)
    for serial in (True, False):
        [(t, s, _)] = timed([exp4], _fan_args("f32", n), serial)
        note(f"elementwise exponential {'1 thread' if serial else 'threaded'}",
             4 * n / t / 1e9, "elements/ns", s, f"4 per element over {n} f32 (4 MiB)")
    for size, serial in ((64, True), (256, True), (512, True), (512, False), (1024, False)):
        args = [_array("f32", (size, size), -1, 1), _array("f32", (size, size), -1, 1, 1)]
        [(t, s, _)] = timed([dot_module(size)], args, serial)
        note(f"gemm {size} {'1 thread' if serial else 'threaded'}",
             2 * size ** 3 / (t - call) / 1e9, "flops/ns", s,
             f"f32 [{size},{size}] x [{size},{size}]")
    args = [_array("f32", (1, 32, 32, 64), -1, 1), _array("f32", (3, 3, 64, 64), -1, 1, 1)]
    [(t, s, _)] = timed([CONV], args, serial=True)
    note("convolution 1 thread", CONV_FLOPS / (t - call) / 1e9, "flops/ns", s,
         "f32 3x3, 64 -> 64 features on 32x32, one thread")
    # Overlap: over L2-resident arrays (where one core's kernels mostly find their data), a
    # fan of adds whose arithmetic takes about as long as the traffic of one add.
    memory_per = 12 / out["bandwidth L2"]["value"]
    adds = max(2, round(memory_per / base / 2))
    (t, s, _), (t1, _, _) = timed(
        [_fan("balanced", "f32", "{x}", None, n, SMALL) for n in (adds, 1)],
        _fan_args("f32", SMALL), True)
    memory, compute = (t1 - call) * 1e9, (2 * adds - 2) * SMALL * base
    hidden = (memory + compute - (t - call) * 1e9) / min(memory, compute)
    note("overlap", min(max(hidden, 0.0), 1.0), "fraction", s,
         f"fan of {2 * adds - 1} adds over {SMALL} f32 (L2) against one (its traffic), one "
         "thread: the share of the shorter of traffic and arithmetic hidden")
    out["threads"] = {"value": cpu_facts.threads(), "unit": "cores", "spread": 0.0,
                      "what": "cores this process may run on (threaded kernels use all)"}
    return out


def model_constants(m: dict) -> dict:
    """What targets/cpu.py reads: rates in per-ns units; weights (targets/work.py) as
    multiples of an add per element, of a GEMM's time per flop for a convolution."""
    from ..targets import cpu_facts
    value = lambda name: m[name]["value"]  # noqa: E731
    add = value("elementwise add")
    # Per element reduced, what the L2 traffic (4 bytes) does not explain: the reduction's
    # own arithmetic, at least an add.
    reduce_compute = 1 / value("reduce") - 4 / value("bandwidth L2")
    # The ops the work model weighs (by opcode: the integer and convert figures, for types
    # it does not tell apart, stay in the record only).
    weights = {name: m[f"elementwise {name}"]["relative_to_add"]
               for name in ELEMENTWISE if name in OP_WEIGHT}
    # A threaded kernel is never slower than on one core (the lowering would not split it
    # on a machine where it were; measured so, other processes held the cores).
    return {
        # A difference of two timings: on a loaded machine it can come out near zero; 1 ns
        # keeps a kernel dearer than a view (view_ns).
        "kernel_overhead_ns": round(max(value("kernel overhead"), 1.0), 1),
        "bytes_per_ns": value("bandwidth L2"),
        "cache_bytes": cpu_facts.cache_bytes(2),
        "far_bytes_per_ns": value("bandwidth 64MiB 1 thread"),
        "vector_flops_per_ns": round(1 / add, 2),
        "matrix_flops_per_ns": value("gemm 512 1 thread"),
        "parallel_bytes_per_ns": max(value("bandwidth 64MiB threaded"),
                                     value("bandwidth 64MiB 1 thread")),
        "parallel_vector_flops_per_ns": round(max(
            value("elementwise exponential threaded") / value("elementwise exponential 1 thread"),
            1.0) / add, 2),
        "parallel_matrix_flops_per_ns": max(value("gemm 1024 threaded"),
                                            value("gemm 512 1 thread")),
        "opaque_ns": round(value("while overhead"), 1),
        "overlap": round(value("overlap"), 2),
        "op_weights": {**weights, "reduce": round(max(1.0, reduce_compute / add), 2),
                       "convolution": round(value("gemm 512 1 thread")
                                            / value("convolution 1 thread"), 2)},
    }


def machine() -> dict:
    from ..targets import cpu_facts
    name = platform.processor()
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    llvm_name, features = cpu_facts.target_cpu()
    enabled = {f[1:] for f in features.split(",") if f.startswith("+")}
    return {"cpu": name, "cores": os.cpu_count(), "threads": cpu_facts.threads(),
            "llvm_cpu": llvm_name,
            "features": sorted(f for f in ("sse4.2", "avx", "avx2", "fma", "avx512f",
                                           "avx512bw", "avx512vl", "avx512bf16", "avx512fp16",
                                           "amx-tile") if f in enabled),
            "vector_bits": cpu_facts.vector_isa(), "python": platform.python_version()}


@main_guard("calibrate_cpu")
def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="calibrate_cpu", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=pathlib.Path, default=DEFAULT_OUT)
    args = p.parse_args(argv)
    start = time.perf_counter()
    measured = measure(lambda s: print(s, file=sys.stderr, flush=True))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    result = {
        "machine": machine(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ"),
        "tool": "python -m hlo_opt.tools.calibrate_cpu",
        "noise": {"load_average": load, "seconds": round(time.perf_counter() - start, 1),
                  "note": f"fastest of {BATCHES} batches; spread = (max - min) / median"},
        "model": model_constants(measured),
        "measurements": measured,
    }
    write_text(str(args.out), json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
