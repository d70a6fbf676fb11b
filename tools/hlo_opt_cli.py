"""`hlo-opt`: read an HLO module, optimize it, print it (stdout or -o, written atomically)."""
from __future__ import annotations

import argparse
import sys

from .. import parse
from ..errors import HloError
from .cli import main_guard, read_text, write_text


def build_arg_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="hlo-opt",
        description="Optimize an XLA HLO module with declarative rewrite rules.")
    p.add_argument("input", help="HLO text file, or - for stdin")
    p.add_argument("--rules", action="append", metavar="default|none|PATH",
                   help="rule set: 'none' parses and re-prints the module unchanged")
    p.add_argument("-o", "--output", metavar="OUT", help="output file (default: stdout)")
    p.add_argument("--no-metadata", action="store_true",
                   help="drop metadata={...} attributes from the output")
    p.add_argument("--verify", action="store_true",
                   help="check every instruction's shape against shape inference first")
    return p


@main_guard
def main(argv=None) -> int:
    args = build_arg_parser().parse_args(argv)
    rules = args.rules or ["none"]
    if rules != ["none"]:
        raise HloError("only --rules=none is available in this version")
    filename = "<stdin>" if args.input == "-" else args.input
    module = parse(read_text(args.input), filename)
    if args.verify:
        from ..verifier import verify
        verify(module)
    write_text(args.output, module.to_text(metadata=not args.no_metadata))
    return 0


if __name__ == "__main__":
    sys.exit(main())
