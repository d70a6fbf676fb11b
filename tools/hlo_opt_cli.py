"""`hlo-opt`: read an HLO module, optimize it, print it (stdout or -o, written atomically)."""
from __future__ import annotations

import argparse
import sys

from .. import optimize, parse
from ..errors import HloError
from ..targets import TARGETS
from .cli import main_guard, read_text, write_text


def build_arg_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="hlo-opt",
        description="Optimize an XLA HLO module with declarative rewrite rules.")
    p.add_argument("input", help="HLO text file, or - for stdin")
    p.add_argument("--rules", action="append", metavar="default|none|PATH",
                   help="rule set (repeatable): the shipped rules, none (only common "
                        "subexpressions and dead code go), or a .rules file or folder")
    p.add_argument("--fp-mode", default="xla", choices=("strict", "xla", "fast"),
                   help="floating-point semantics the rules may assume (default: xla)")
    p.add_argument("--target", default="cpu", choices=TARGETS,
                   help="cost model for extraction (default: cpu)")
    p.add_argument("--time-limit", type=float, default=60.0, metavar="S",
                   help="wall-clock seconds for saturation, whole module (default: 60)")
    p.add_argument("--node-limit", type=int, default=200_000, metavar="N",
                   help="e-nodes per e-graph before saturation stops (default: 200000)")
    p.add_argument("-o", "--output", metavar="OUT", help="output file (default: stdout)")
    p.add_argument("--stats", action="store_true",
                   help="print what saturation and extraction did to stderr")
    p.add_argument("--no-metadata", action="store_true",
                   help="drop metadata={...} attributes from the output")
    p.add_argument("--verify", action="store_true",
                   help="check every instruction's shape against shape inference first")
    return p


@main_guard
def main(argv=None) -> int:
    args = build_arg_parser().parse_args(argv)
    if args.time_limit <= 0 or args.node_limit <= 0:
        raise HloError("--time-limit and --node-limit must be positive")
    filename = "<stdin>" if args.input == "-" else args.input
    module = parse(read_text(args.input), filename)
    if args.verify:
        from ..verifier import verify
        verify(module)
    out, report = optimize(module, args.rules or ["default"], args.fp_mode, args.target,
                           args.time_limit, args.node_limit, stats=True)
    if args.stats:
        print(report.summary(), file=sys.stderr)
    write_text(args.output, out.to_text(metadata=not args.no_metadata))
    return 0


if __name__ == "__main__":
    sys.exit(main())
