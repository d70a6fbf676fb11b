"""`hlo-rules`: check rule files for soundness, or list a rule set.

    hlo-rules check FILE... [--fp-mode M] [--trials N] [--seed S] [--allow-unchecked]
    hlo-rules list [--rules default|none|PATH ...] [--fp-mode M]

`check` exits 1 when a rule is unsound (or could not be checked, unless --allow-unchecked),
2 when a file is malformed, 0 otherwise.
"""
from __future__ import annotations

import argparse
import sys

from ..grammar.rules_parser import MODES, to_text
from .cli import main_guard


def build_arg_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hlo-rules", description="Check or list rewrite rules.")
    sub = p.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="instantiate every rule and look for a counterexample")
    check.add_argument("files", nargs="+", metavar="FILE", help="rule files or folders")
    check.add_argument("--fp-mode", choices=MODES, default="fast",
                       help="check the rules that run in this mode (default: all of them)")
    check.add_argument("--trials", type=int, default=100, metavar="N",
                       help="instances per rule (default 100)")
    check.add_argument("--seed", type=int, default=0, metavar="S")
    check.add_argument("--allow-unchecked", action="store_true",
                       help="do not fail on rules no instance could be found for")
    lst = sub.add_parser("list", help="print the rules of a rule set")
    lst.add_argument("--rules", action="append", metavar="default|none|PATH")
    lst.add_argument("--fp-mode", choices=MODES, default="fast",
                     help="list the rules that run in this mode (default: all)")
    return p


@main_guard("hlo-rules")
def main(argv=None) -> int:
    args = build_arg_parser().parse_args(argv)
    from ..rule_compiler.rules import compile_rules, load_rule_set, mode_allows
    if args.command == "list":
        rule_file = load_rule_set(args.rules or ["default"])
        compiled = compile_rules(rule_file, args.fp_mode)
        for rule in rule_file.rules:
            if mode_allows(rule.mode, args.fp_mode):
                print(f"{rule.pos.file}:{rule.pos.line}: [{rule.ruleset}] {to_text(rule)}")
        for fold in rule_file.folds:
            print(f"{fold.pos.file}:{fold.pos.line}: [{fold.ruleset}] {to_text(fold)}")
        n = sum(1 for c in compiled.rule_names)
        print(f"{len(rule_file.rules)} rules, {len(rule_file.folds)} folds, {n} egglog rules "
              f"in --fp-mode={args.fp_mode}", file=sys.stderr)
        return 0
    from ..rule_checker.soundness import check_rule_file, describe
    rule_file = load_rule_set(args.files)
    _validate(compile_rules(rule_file, "fast"))
    verdicts = check_rule_file(rule_file, args.fp_mode, args.trials, args.seed)
    counts: dict[str, int] = {}
    for v in verdicts:
        print(describe(v))
        counts[v.status] = counts.get(v.status, 0) + 1
    print(", ".join(f"{counts.get(s, 0)} {label}" for s, label in (
        ("sound", "sound"), ("unsound", "unsound"), ("unchecked", "not checked"),
        ("skipped", "skipped"))))
    failed = counts.get("unsound", 0) or (counts.get("unchecked", 0)
                                           and not args.allow_unchecked)
    return 1 if failed else 0


def _validate(compiled) -> None:
    """Load the compiled rules into a fresh e-graph: egglog's own errors (raw blocks) surface
    as file:line:col errors before any checking."""
    from egglog.bindings import EGraph
    from ..egraph.schema import declarations
    egraph = EGraph()
    egraph.run_program(*egraph.parse_program(declarations()))
    compiled.load(egraph)


if __name__ == "__main__":
    sys.exit(main())
