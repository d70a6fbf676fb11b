"""`hlo-opt batch INPUT... --out OUTDIR`: optimize many modules (an XLA dump folder, folders of
.hlo files, files, quoted globs: tools/batch_inputs.py) on a process pool or on Ray, with a
progress bar, a summary table on stdout and a JSON report (docs/batch.md).

A module's output is up to date, and the module skipped, when OUTDIR/<name>.hlo is at least
as new as its input and was made from the same input path under the same options
fingerprint (batch_work.fingerprint), which OUTDIR/.hlo-opt-batch.json remembers.

Exit status: 0 every module optimized (or up to date), 1 some module failed, 2 bad usage or
input (no module found, an unknown option), 130 interrupted (Ctrl-C; the finished outputs
are kept and the report marks the others interrupted).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from dataclasses import asdict

from ..errors import HloError
from .batch_inputs import find_modules, output_names
from .batch_work import INTERRUPTED, OK, SKIPPED, Job, Options, fingerprint, row
from .cli import write_atomically
from .hlo_opt_cli import build_arg_parser as single_module_parser

STATE_FILE = ".hlo-opt-batch.json"
EXIT_FAILED = 1
EXIT_INTERRUPTED = 130
# hlo-opt FILE's options that batch takes as they are.
OPTIMIZE_OPTIONS = ("rules", "fp_mode", "target", "no_fusion", "time_limit", "node_limit")


def build_arg_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="hlo-opt batch",
        description="Optimize many HLO modules in parallel: XLA dump folders (their "
                    "*.before_optimizations.txt), folders of *.hlo files, files or quoted "
                    "globs. Exit status: 0 all optimized, 1 some failed, 2 bad usage or "
                    "input, 130 interrupted.")
    p.add_argument("inputs", nargs="+", metavar="DIR|FILE|GLOB")
    p.add_argument("--out", required=True, metavar="OUTDIR",
                   help="folder for the outputs (OUTDIR/<module>.hlo) and report.json")
    p.add_argument("-j", "--jobs", type=int, default=None, metavar="N",
                   help="modules optimized at once (default: the CPUs of this machine, or "
                        "of the Ray cluster)")
    for action in single_module_parser()._actions:     # the same options, help and defaults
        if action.dest in OPTIMIZE_OPTIONS:
            p._add_action(action)
    p.add_argument("--timeout", type=float, default=None, metavar="S",
                   help="a module still running after S seconds is stopped and reported "
                        "as a timeout (default: twice --time-limit plus 60)")
    p.add_argument("--report", metavar="PATH", help="JSON report (default: OUTDIR/report.json)")
    p.add_argument("--force", action="store_true",
                   help="optimize every module, even those whose output is up to date")
    p.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="run the modules as Ray tasks: on a local Ray, or on the cluster at "
                        "ADDRESS (needs the `ray` extra)")
    return p


def main(argv: list[str]) -> int:
    """Called by hlo-opt's main (under its error guard) with the arguments after `batch`."""
    args = build_arg_parser().parse_args(argv)
    if min(args.time_limit, args.node_limit, args.timeout or 1, args.jobs or 1) <= 0:
        raise HloError("-j, --time-limit, --node-limit and --timeout must be positive")
    timeout = args.timeout or 2 * args.time_limit + 60
    options = Options(tuple(args.rules or ["default"]), args.fp_mode, args.target,
                      not args.no_fusion, args.time_limit, args.node_limit)
    paths = find_modules(args.inputs, args.out)
    if args.ray is not None:
        from .batch_ray import import_ray
        import_ray()                         # a missing Ray is a usage error, before any work
    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as e:
        raise HloError(f"--out: cannot create the folder: {e.strerror}", args.out) from None
    stamp = fingerprint(options)
    jobs = [Job(name, os.path.abspath(path), os.path.join(os.path.abspath(args.out),
                                                            name + ".hlo"), options)
            for name, path in zip(output_names(paths), paths)]
    state = _read_state(args.out)
    rows = {job.name: _skipped(job, state.get(job.name), stamp)
            for job in jobs if not args.force}
    rows = {name: r for name, r in rows.items() if r is not None}
    todo = [job for job in jobs if job.name not in rows]
    if todo:        # a broken rule file is one usage error here, not one per module
        from ..egraph.pipeline import compiled_rules
        compiled_rules(list(options.rules), options.fp_mode)
    backend = "ray" if args.ray is not None else "pool"
    start = time.perf_counter()
    interrupted = _run(todo, args, timeout, rows)
    for job in todo:
        rows.setdefault(job.name, row(job, INTERRUPTED))
    ordered = [rows[job.name] for job in jobs]
    _write_state(args.out, state, ordered, stamp)
    report = {"options": {**asdict(options), "timeout": timeout}, "fingerprint": stamp,
              "backend": backend, "ray_address": args.ray or None, "jobs": args.jobs,
              "seconds": round(time.perf_counter() - start, 3), "interrupted": interrupted,
              "counts": _counts(ordered), "modules": ordered}
    write_atomically(args.report or os.path.join(args.out, "report.json"),
                     (json.dumps(report, indent=1) + "\n").encode())
    print(summary_table(ordered))
    if interrupted:
        print("hlo-opt batch: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return 0 if all(r["status"] in (OK, SKIPPED) for r in ordered) else EXIT_FAILED


def _run(jobs: list[Job], args, timeout: float, rows: dict) -> bool:
    """Run the jobs, filling rows by name; True when Ctrl-C stopped it."""
    if not jobs:
        return False
    if args.ray is not None:
        from .batch_ray import ray_results
        results = ray_results(jobs, args.ray or None, args.jobs, timeout)
    else:
        from .batch_pool import pool_results
        results = pool_results(jobs, args.jobs or os.cpu_count() or 1, timeout)
    with _progress(len(jobs)) as bar:
        try:
            for result in results:
                rows[result["name"]] = result
                bar.set_postfix_str(result["name"], refresh=False)
                bar.update()
        except KeyboardInterrupt:
            signal.signal(signal.SIGINT, signal.SIG_IGN)    # the report is written whole
            return True
        finally:
            results.close()
    return False


def _progress(total: int):
    """A tqdm bar on stderr when it is a terminal; otherwise a bar that draws nothing."""
    from tqdm import tqdm
    return tqdm(total=total, unit="module", file=sys.stderr, disable=not sys.stderr.isatty(),
                dynamic_ncols=True)


def _skipped(job: Job, remembered: dict | None, stamp: str) -> dict | None:
    """The remembered row marked skipped, when job's output is up to date."""
    if not remembered or remembered.get("input") != job.input or \
            remembered.get("fingerprint") != stamp:
        return None
    try:
        if os.stat(job.output).st_mtime_ns < os.stat(job.input).st_mtime_ns:
            return None
    except OSError:
        return None
    return dict(remembered["row"], status=SKIPPED, output=job.output,
                error=None)


def _read_state(outdir: str) -> dict:
    try:
        with open(os.path.join(outdir, STATE_FILE), encoding="utf-8") as f:
            state = json.load(f)
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def _write_state(outdir: str, state: dict, rows: list[dict], stamp: str) -> None:
    """Remember each module optimized now or before (for the skip rule); forget the ones
    that failed now."""
    for r in rows:
        if r["status"] == OK:
            state[r["name"]] = {"input": r["input"], "fingerprint": stamp, "row": r}
        elif r["status"] != SKIPPED:
            state.pop(r["name"], None)
    write_atomically(os.path.join(outdir, STATE_FILE),
                     (json.dumps(state, indent=1) + "\n").encode())


def _counts(rows: list[dict]) -> dict:
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    return counts


def summary_table(rows: list[dict]) -> str:
    """module | instructions before -> after | kernels (and XLA's, from a dump's
    after_optimizations module) | time | status (with the error)."""
    def cells(r):
        before, after = r["instructions_before"], r["instructions_after"]
        return [r["name"],
                f"{before} → {after}" if before is not None else "-",
                "-" if r["kernels"] is None else str(r["kernels"]),
                "-" if r.get("xla_kernels") is None else str(r["xla_kernels"]),
                "-" if r["seconds"] is None else f"{r['seconds']:.2f} s",
                r["status"] + (f": {r['error']}" if r["error"] else "")]
    table = [["module", "instructions", "kernels", "XLA kernels", "time", "status"]] + \
        [cells(r) for r in rows]
    widths = [max(len(line[k]) for line in table) for k in range(5)]
    lines = ["  ".join([c.ljust(w) if k == 0 else c.rjust(w)
                        for k, (c, w) in enumerate(zip(line[:5], widths))] + [line[5]])
             for line in table]
    counts = ", ".join(f"{n} {status}" for status, n in _counts(rows).items())
    lines.append(f"{len(rows)} modules: {counts}")
    both = [r for r in rows if r["kernels"] is not None and r.get("xla_kernels") is not None]
    if both:
        lines.append(f"kernels where XLA's optimized module is beside the input "
                     f"({len(both)} module{'s' if len(both) > 1 else ''}): ours "
                     f"{sum(r['kernels'] for r in both)}, XLA "
                     f"{sum(r['xla_kernels'] for r in both)}")
    return "\n".join(lines)
