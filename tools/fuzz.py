"""`python -m hlo_opt.tools.fuzz`: mutated modules through every stage, in worker subprocesses;
a table of how the cases ended, and a reproducer for every case that ended badly.

    python -m hlo_opt.tools.fuzz --cases 3000 --seed 1 --jobs 2 --out fuzz-out
    python -m hlo_opt.tools.fuzz --seed 1 --case 17          # one case, in this process
    python -m hlo_opt.tools.fuzz --seed 1 --case 17 --print  # just its text
    python -m hlo_opt.tools.fuzz --seed 1 --case 17 --minimize   # a small reproducer

Sources are HLO files or folders of them (default: tests/corpus and examples, when run from
a checkout). Case i of seed s is always the same module (fuzz_mutate.py) and the same
inputs. Every case must end in success or an HloError (fuzz_case.py lists the outcomes);
for every other case `--out` receives CASE.hlo (the mutated module) and CASE.txt (the edits,
the outcome, the traceback or the crashed worker's log), and outcomes.jsonl every case's
outcome. Exit status 1 when any case ended badly.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import time
from collections import Counter
from contextlib import nullcontext

from .cli import main_guard, read_text
from .fuzz_case import run_case
from .fuzz_minimize import minimize
from .fuzz_mutate import Mutator
from .fuzz_pool import Pool
from ..errors import HloError

DEFAULT_SOURCES = ("tests/corpus", "examples")
XLA_SECONDS = 120


def build_arg_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m hlo_opt.tools.fuzz",
                                description=__doc__.splitlines()[0])
    p.add_argument("sources", nargs="*", help="HLO files or folders (default: "
                   f"{' and '.join(DEFAULT_SOURCES)} where they exist)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cases", type=int, default=300, help="how many cases (default 300)")
    p.add_argument("--start", type=int, default=0, help="index of the first case")
    p.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds per case")
    p.add_argument("--memory-gib", type=float, default=4.0,
                   help="address space of a worker, GiB (default 4)")
    p.add_argument("--max-lines", type=int, default=400,
                   help="skip source modules longer than this (default 400)")
    p.add_argument("--out", metavar="DIR", help="write reproducers of bad cases here")
    p.add_argument("--case", type=int, metavar="I", help="run case I alone, in this process")
    p.add_argument("--print", action="store_true", help="with --case: print its text only")
    p.add_argument("--minimize", action="store_true",
                   help="with --case: shrink it to a small module that fails the same way "
                        "(each try in a worker) and print that")
    return p


def load_sources(paths, max_lines: int) -> dict[str, str]:
    """name -> text of every .hlo file under `paths` no longer than `max_lines`."""
    paths = paths or [p for p in DEFAULT_SOURCES if os.path.isdir(p)]
    if not paths:
        raise HloError("no sources: give HLO files or folders")
    files = []
    for path in map(pathlib.Path, paths):
        files += sorted(path.rglob("*.hlo")) if path.is_dir() else [path]
    texts = {str(f): read_text(str(f)) for f in files}
    kept = {name: t for name, t in texts.items() if t.count("\n") <= max_lines}
    if not kept:
        raise HloError(f"no source module of at most {max_lines} lines among {len(texts)}")
    return kept


@main_guard("fuzz")
def main(argv=None) -> int:
    args = build_arg_parser().parse_args(argv)
    mutator = Mutator(load_sources(args.sources, args.max_lines))
    if args.case is not None:
        case = mutator.case(args.seed, args.case)
        if args.print:
            print(case.text)
            return 0
        if args.minimize:
            print(shrink(case, args))
            return 0
        outcome = run_case(case.text, case.index)
        print(f"{case.label}\n{outcome.kind} {outcome.stage} (verified: {outcome.verified}) "
              f"{outcome.detail} {outcome.where}\n{outcome.trace}")
        return 0 if outcome.accepted else 1
    outcomes = fuzz(mutator, args)
    print(table(outcomes.values()))
    past = {i: o for i, o in outcomes.items() if o.verified and not o.accepted}
    if past:
        print("\nbad cases on modules the verifier accepts, and what XLA says of them")
        for i, o in past.items():
            print(f"  case {i}: {o.cause}: {o.detail[:80]}\n    {o.xla}")
    return 0 if all(o.accepted for o in outcomes.values()) else 1


def fuzz(mutator: Mutator, args) -> dict:
    """Run the cases in a worker pool; index -> Outcome. Reproducers go to args.out."""
    out = pathlib.Path(args.out) if args.out else None
    if out:
        out.mkdir(parents=True, exist_ok=True)
    cases = {i: mutator.case(args.seed, i) for i in range(args.start, args.start + args.cases)}
    outcomes = {}
    start = time.perf_counter()
    log = (out / "outcomes.jsonl").open("a", encoding="utf-8") if out else nullcontext()
    with Pool(args.jobs, args.timeout, int(args.memory_gib * (1 << 30))) as pool, log:
        for i, outcome in pool.run((i, c.text, i) for i, c in cases.items()):
            outcomes[i] = outcome
            if outcome.verified and not outcome.accepted:
                outcome.xla = xla_verdict(cases[i].text)
            if out:
                record(out, log, cases[i], outcome)
            if len(outcomes) % 50 == 0:
                bad = sum(not o.accepted for o in outcomes.values())
                print(f"{len(outcomes)}/{len(cases)} cases, {bad} bad, "
                      f"{time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    return dict(sorted(outcomes.items()))


def shrink(case, args) -> str:
    """The smallest module found that ends like the case: same cause, and verified if the
    case was (a reproducer past the verifier must stay past it)."""
    with Pool(1, args.timeout, int(args.memory_gib * (1 << 30))) as pool:
        def outcome(text: str):
            return next(pool.run([(0, text, case.index)]))[1]
        first = outcome(case.text)
        if first.accepted:
            raise HloError(f"{case.label} ends well ({first.kind}): nothing to minimize")

        def same(text: str) -> bool:
            o = outcome(text)
            return o.cause == first.cause and (o.verified or not first.verified)
        small = minimize(case.text, same)
        last = outcome(small)
    return (f"// {case.label}\n// {last.kind} at {last.stage}: {last.cause}\n"
            f"// {last.detail}\n{small}")


def record(out: pathlib.Path, log, case, outcome) -> None:
    """The case's outcome as a line of outcomes.jsonl; a reproducer if it ended badly."""
    log.write(json.dumps({"seed": case.seed, "case": case.index, **outcome.to_dict()}) + "\n")
    log.flush()
    if outcome.accepted:
        return
    stem = out / f"case-{case.seed}-{case.index}"
    stem.with_suffix(".hlo").write_text(case.text, encoding="utf-8")
    stem.with_suffix(".txt").write_text(
        f"{case.label}\noutcome: {outcome.kind} at {outcome.stage} (verified: "
        f"{outcome.verified})\ncause: {outcome.cause}\n{outcome.detail}\n{outcome.xla}\n\n"
        f"{outcome.trace}\n", encoding="utf-8")


def xla_verdict(text: str) -> str:
    """What XLA says of a module (where jax is installed): whether it compiles it. A bad
    case XLA rejects is a gap in our verifier rather than a bug past it. Asked in a
    subprocess: XLA's parser aborts on some malformed modules."""
    from .. import xla_oracle
    if not xla_oracle.available():
        return ""
    ask = "import sys; from hlo_opt.tools.fuzz import ask_xla; print(ask_xla(sys.stdin.read()))"
    try:
        done = subprocess.run([sys.executable, "-c", ask], input=text, capture_output=True,
                              text=True, timeout=XLA_SECONDS)
    except subprocess.TimeoutExpired:
        return f"XLA takes over {XLA_SECONDS} s on it"
    if done.returncode:
        return f"XLA crashes on it: {_telling_line(done.stderr)}"
    return done.stdout.strip()


def ask_xla(text: str) -> str:
    from .. import xla_oracle
    try:
        xla_oracle.compile(text)
    except xla_oracle.XlaError as e:
        return f"XLA rejects it: {_telling_line(e.message)}"
    return "XLA compiles it"


def _telling_line(message: str) -> str:
    """The first line of XLA's message that says what is wrong, shortened."""
    lines = message.splitlines() or [""]
    telling = [line for line in lines if re.search(r"(?i)error:|check failed", line)]
    return (telling or lines)[0].strip()[:200]


def table(outcomes) -> str:
    """Counts by outcome and stage, split by what the verifier says of the parsed module;
    then the bad cases grouped by cause."""
    outcomes = list(outcomes)
    rows = Counter((o.kind, o.stage, o.verified) for o in outcomes)
    keys = sorted({(k, s) for k, s, _ in rows}, key=lambda ks: (ks[0] not in ("ok",), ks))
    lines = [f"{len(outcomes)} cases", f"{'outcome':<14}{'stage':<10}{'total':>7}{'verified':>10}"
             f"{'rejected':>10}{'unparsed':>10}"]
    for kind, stage in keys:
        counts = [rows[(kind, stage, v)] for v in (True, False, None)]
        lines.append(f"{kind:<14}{stage:<10}{sum(counts):>7}" +
                     "".join(f"{c:>10}" for c in counts))
    causes = Counter((o.cause, o.verified) for o in outcomes if not o.accepted)
    if causes:
        lines.append("\nbad cases by cause (verified: the verifier accepts the module)")
        for (cause, verified), n in sorted(causes.items(), key=lambda kv: (-kv[1], kv[0][0])):
            lines.append(f"{n:>6}  {'verified' if verified else '        '}  {cause}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
