"""Optimizer benchmark: hlo-opt against XLA's compile, per corpus fixture.

    python -m hlo_opt.tools.bench_optimize [FILE.hlo ...] [--rules default] [--target cpu]
                                           [--json OUT]

Each fixture runs in a fresh process (peak memory is per process, and Rust allocations are
invisible to tracemalloc): first the cold run (parse, optimize, print, paying for the rule
set's e-graph), then the best warm run of `--repeat`, split into parse / encode (with
ingest) / saturate / extract (with decode) / print; peak RSS over the optimizer runs, before
jax is imported; then XLA's compile of the same text (best of 2, after one warm-up compile)
and the instruction counts of the input, our output and XLA's optimized module. Fusion:
kernels (fusions + unfused non-trivial ops) and bytes materialized between kernels, ours and
in XLA's optimized module (hlo_opt.kernels.kernel_report counts both), with geomean ratios.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import resource
import subprocess
import sys
import time

SATURATE = ("analysis", "fold")          # plus every ruleset phase


def measure(path: pathlib.Path, rules: list[str], repeat: int, target: str) -> dict:
    """One fixture, in this process (the parent runs each in a fresh one)."""
    start_rss = _rss_mb()
    import hlo_opt
    from hlo_opt.egraph.pipeline import optimize
    from hlo_opt.kernels import kernel_report
    text = path.read_text()
    runs = []
    for _ in range(1 + repeat):
        t0 = time.perf_counter()
        module = hlo_opt.parse(text, str(path))
        t1 = time.perf_counter()
        out, report = optimize(module, rules, target=target, stats=True)
        t2 = time.perf_counter()
        printed = out.to_text()
        t3 = time.perf_counter()
        runs.append(_phases(t1 - t0, t2 - t1, t3 - t2, report))
    peak = _rss_mb()
    result = {
        "file": path.name, "cold": runs[0], "warm": min(runs[1:], key=lambda r: r["total"]),
        "peak_mb": peak, "peak_delta_mb": peak - start_rss,
        "instructions": sum(1 for _ in module.instructions()),
        "ours": sum(1 for _ in out.instructions()),
        "stop": report.stop, "enodes": report.enodes, "iterations": report.iterations,
        "kernels": kernel_report(out).kernels, "bytes": kernel_report(out).bytes_written,
    }
    result.update(_xla(text, printed))
    return result


def _phases(parse: float, optimize: float, print_: float, report) -> dict:
    seconds = report.seconds
    group = {"encode": seconds.get("encode", 0) + seconds.get("ingest", 0),
             "extract": seconds.get("extract", 0) + seconds.get("decode", 0),
             "fuse": seconds.get("fuse", 0)}
    group["saturate"] = sum(s for phase, s in seconds.items()
                            if phase not in ("encode", "ingest", "extract", "decode", "fuse"))
    group["other"] = optimize - sum(group.values())        # rules, e-graph preparation
    return {"parse": parse, **group, "print": print_, "total": parse + optimize + print_}


def _xla(text: str, printed: str) -> dict:
    from hlo_opt import parse, xla_oracle
    from hlo_opt.kernels import kernel_report
    if not xla_oracle.available():
        return {"xla_compile": None, "xla_instructions": None}
    xla_oracle.compile("HloModule w\nENTRY e {\n  ROOT p = f32[2] parameter(0)\n}\n")
    try:
        compiled = [xla_oracle.compile(text) for _ in range(2)]
    except xla_oracle.XlaError as e:
        return {"xla_compile": None, "xla_instructions": None, "xla_error": e.message[:200]}
    optimized = parse(compiled[0].optimized_text)
    xla_oracle.parse(printed)                   # XLA takes our output
    xla_kernels = kernel_report(optimized)
    return {"xla_compile": min(c.seconds for c in compiled),
            "xla_instructions": sum(1 for _ in optimized.instructions()),
            "xla_kernels": xla_kernels.kernels, "xla_bytes": xla_kernels.bytes_written}


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def default_files() -> list[pathlib.Path]:
    return sorted(p for p in pathlib.Path("tests/corpus").glob("*.hlo")
                  if not p.name.endswith(".xla_opt.hlo"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", type=pathlib.Path)
    ap.add_argument("--rules", action="append", metavar="default|none|PATH")
    ap.add_argument("--repeat", type=int, default=3, help="warm runs (best is reported)")
    ap.add_argument("--target", default="cpu", choices=("cpu", "gpu", "tpu"),
                    help="cost model for extraction and fusion (XLA's side is its CPU build)")
    ap.add_argument("--json", metavar="OUT", help="also write the results as JSON")
    ap.add_argument("--measure", type=pathlib.Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    rules = args.rules or ["default"]
    if args.measure:
        print(json.dumps(measure(args.measure, rules, args.repeat, args.target)))
        return 0
    results = []
    print(_header())
    for path in args.files or default_files():
        cmd = [sys.executable, "-m", "hlo_opt.tools.bench_optimize", "--measure", str(path),
               "--repeat", str(args.repeat), "--target", args.target,
               *(f"--rules={r}" for r in rules)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"{path.name:40} FAILED: {proc.stderr.strip().splitlines()[-1:]}")
            continue
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        results.append(result)
        print(_row(result), flush=True)
    print(_summary(results))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


_COLUMNS = ("module", "instrs", "ours", "xla", "cold ms", "warm ms", "parse", "encode",
            "saturate", "extract", "fuse", "print", "xla ms", "warm/xla", "peak MB",
            "kernels", "xla kernels", "bytes", "xla bytes")


def _header() -> str:
    return "| " + " | ".join(_COLUMNS) + " |\n|" + "---|" * len(_COLUMNS)


def _row(r: dict) -> str:
    w = r["warm"]
    ms = lambda s: f"{s * 1e3:.0f}" if s is not None else "-"     # noqa: E731
    xla = r["xla_compile"]
    ratio = f"{w['total'] / xla:.2f}" if xla else "-"
    cells = [r["file"], r["instructions"], r["ours"], r["xla_instructions"] or "-",
             ms(r["cold"]["total"]), ms(w["total"]), ms(w["parse"]), ms(w["encode"]),
             ms(w["saturate"]), ms(w["extract"]), ms(w.get("fuse")), ms(w["print"]), ms(xla),
             ratio, f"{r['peak_mb']:.0f}", r["kernels"], r.get("xla_kernels", "-"),
             f"{r['bytes']:,}", f"{r['xla_bytes']:,}" if r.get("xla_bytes") is not None else "-"]
    return "| " + " | ".join(map(str, cells)) + " |"


def _summary(results: list[dict]) -> str:
    timed = [r for r in results if r["xla_compile"]]
    slower = [r["file"] for r in timed if r["warm"]["total"] > r["xla_compile"]]
    peak = max((r["peak_mb"] for r in results), default=0)
    fused = [r for r in timed if r.get("xla_kernels") and r.get("xla_bytes")]
    kernels = _geomean([r["kernels"] / r["xla_kernels"] for r in fused])
    moved = _geomean([max(r["bytes"], 1) / r["xla_bytes"] for r in fused])
    time_ratio = _geomean([r["warm"]["total"] / r["xla_compile"] for r in timed])
    return (f"\n{len(results)} modules; warm optimize slower than XLA's compile on "
            f"{len(slower)} of {len(timed)}{': ' + ', '.join(slower) if slower else ''}; "
            f"largest peak RSS {peak:.0f} MB\n"
            f"geomean ours/XLA: optimize time {time_ratio:.2f}, kernels {kernels:.2f}, "
            f"bytes materialized {moved:.2f} (over {len(fused)} modules)")


def _geomean(ratios: list[float]) -> float:
    import math
    return math.exp(sum(math.log(x) for x in ratios) / len(ratios)) if ratios else float("nan")


if __name__ == "__main__":
    sys.exit(main())
