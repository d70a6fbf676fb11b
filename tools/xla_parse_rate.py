"""Do we accept exactly what XLA accepts? Measured on the HLO modules inside XLA's C++ tests.

    python -m hlo_opt.tools.xla_parse_rate [LABEL=]PATH ... [--list]

Each PATH is a `*_test.cc` file or a folder searched for them; files are grouped under LABEL
(the first group that names a file keeps it). Every C++ raw string `R"(...)"` that reads like
an HLO module is parsed by XLA (jaxlib's parser, run in a child process so that a CHECK
failure there cannot end this one) and by us. "We accept" means our parser and our verifier
both accept; XLA's parser runs no verifier, so a module XLA parses and only our verifier
refuses is counted apart. Per group it prints:

    both accept | XLA only (we reject) | verifier only rejects | we only (XLA rejects) | both reject

`--list` adds each disagreement with both messages.
"""
from __future__ import annotations

import argparse
import multiprocessing
import pathlib
import re
import sys
from dataclasses import dataclass

from .. import parse
from ..errors import HloError
from .cli import main_guard, read_text

# A C++ raw string: R"delim( ... )delim".
_RAW_STRING = re.compile(r'R"([^()\\\s]{0,16})\((.*?)\)\1"', re.S)
# What makes a raw string an HLO module rather than FileCheck lines or a proto.
_LOOKS_LIKE_HLO = re.compile(r"\bparameter\(\d+\)|^\s*HloModule\b|\bENTRY\b", re.M)
# Templates filled in by absl::Substitute / StrFormat / StrReplaceAll before use.
_TEMPLATE = re.compile(r"\$\w|%[sd]\b|\{\{|CHECK")


def hlo_strings(path: pathlib.Path) -> list[str]:
    """The HLO modules written as raw strings in one C++ test file, templates left out."""
    return [text for _, text in hlo_raw_strings(read_text(str(path)))]


def hlo_raw_strings(cpp: str) -> list[tuple[re.Match, str]]:
    """(the raw string's match, the HLO module in it) for each module in C++ source text."""
    return [(m, m.group(2)) for m in _RAW_STRING.finditer(cpp)
            if _LOOKS_LIKE_HLO.search(m.group(2)) and not _TEMPLATE.search(m.group(2))]


def collect(specs: list[str]) -> dict[str, list[tuple[str, int, str]]]:
    """LABEL=PATH specs -> {label: [(file, index in file, module text)]}, each file once."""
    groups: dict[str, list[tuple[str, int, str]]] = {}
    seen: set[pathlib.Path] = set()
    for spec in specs:
        label, _, path_text = spec.rpartition("=")
        path = pathlib.Path(path_text)
        files = sorted(path.rglob("*_test.cc")) if path.is_dir() else [path]
        group = groups.setdefault(label or path_text, [])
        for f in files:
            if f.resolve() in seen:
                continue
            seen.add(f.resolve())
            group.extend((str(f), i, s) for i, s in enumerate(hlo_strings(f)))
    return groups


@dataclass
class Verdict:
    xla: str | None         # XLA's error, None when it parses
    ours: str | None        # our parser's error
    verifier: str | None    # our verifier's error (None when it passes or was not reached)


def parse_error(text: str) -> str | None:
    """XLA's parser on `text`: None when it accepts, else the line of its message that says why."""
    from .. import xla_oracle
    try:
        xla_oracle.parse(text)
        return None
    except xla_oracle.XlaError as e:
        return reason(e.message)


def reason(message: str) -> str:
    """The line of an XLA error message that says why (the first, or the one after a first
    line that ends in a colon)."""
    lines = [line for line in message.strip().splitlines() if line.strip()] or ["rejected"]
    return lines[1] if lines[0].endswith(":") and len(lines) > 1 else lines[0]


def _serve(conn, job) -> None:
    while True:
        conn.send(job(conn.recv()))


class XlaChild:
    """`job(text) -> str | None` (a module-level function that calls XLA) in a child process,
    restarted when a module crashes or hangs it: a CHECK failure in XLA aborts its process."""

    def __init__(self, job=parse_error, crashed: str = "XLA's parser crashed or hung",
                 timeout: float = 60.0):
        self._job, self._crashed, self._timeout = job, crashed, timeout
        self._ctx = multiprocessing.get_context("spawn")
        self._start()

    def _start(self) -> None:
        self._conn, child = self._ctx.Pipe()
        self._proc = self._ctx.Process(target=_serve, args=(child, self._job), daemon=True)
        self._proc.start()

    def error(self, text: str) -> str | None:
        try:
            self._conn.send(text)
            if self._conn.poll(self._timeout):
                return self._conn.recv()
        except (EOFError, OSError):
            pass
        self._proc.kill()
        self._proc.join()
        self._start()
        return self._crashed

    def close(self) -> None:
        self._proc.kill()


def judge(text: str, xla: XlaChild) -> Verdict:
    from ..verifier import verify
    verdict = Verdict(xla.error(text), None, None)
    try:
        module = parse(text)
    except HloError as e:
        verdict.ours = str(e)
        return verdict
    try:
        verify(module)
    except HloError as e:
        verdict.verifier = str(e)
    return verdict


COLUMNS = ("both accept", "XLA only", "verifier only", "we only", "both reject")


def column(v: Verdict) -> str:
    if v.xla is None:
        return "both accept" if v.ours is None and v.verifier is None else \
            "XLA only" if v.ours is not None else "verifier only"
    return "we only" if v.ours is None and v.verifier is None else "both reject"


@main_guard("xla_parse_rate")
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+", help="[LABEL=]PATH to a *_test.cc file or a folder")
    ap.add_argument("--list", action="store_true", help="print every disagreement")
    args = ap.parse_args(argv)
    groups = collect(args.paths)
    xla = XlaChild()
    print(f"{'group':14} {'modules':>7} " + " ".join(f"{c:>13}" for c in COLUMNS))
    disagreements = []
    try:
        for label, modules in groups.items():
            counts = dict.fromkeys(COLUMNS, 0)
            for file, index, text in modules:
                v = judge(text, xla)
                counts[column(v)] += 1
                if column(v) in ("XLA only", "verifier only", "we only"):
                    disagreements.append((label, column(v), file, index, v))
            print(f"{label:14} {len(modules):7d} " + " ".join(f"{counts[c]:13d}" for c in COLUMNS))
    finally:
        xla.close()
    if args.list:
        for label, kind, file, index, v in disagreements:
            print(f"\n[{label}] {kind}: {file} #{index}")
            print(f"  XLA: {v.xla or 'accepts'}")
            print(f"  us:  {v.ours or v.verifier or 'accept'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
