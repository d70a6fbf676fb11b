"""Parity with XLA's AlgebraicSimplifier, test by test: what our rules do with the modules of
XLA's own simplifier tests.

    python -m hlo_opt.tools.simplifier_parity PATH/algebraic_simplifier_test.cc
        [--rules default] [--unsound docs/simplifier_unsound.md] [--out docs/simplifier_parity.md]
        [--no-xla] [--only REGEX]

The C++ file is split into tests (tools/cc_tests.py: each test's HLO modules and whether the
test expects the simplifier to change each one). Every module is parsed by us, executed by
XLA:CPU on zeros (jaxlib, in a child process that a CHECK failure may end; compiled only when
an array is over 256 MiB), and optimized by
`hlo_opt.optimize(module, rules, fp_mode=M, fusion=False, stats=True)` in each
floating-point mode M (strict, xla, fast).

A module counts as rewritten as XLA expects in mode M when our output has fewer
instructions than the input, or when its graph changed (`signature`: each instruction's
opcode, shape and operands' opcodes) and it has every opcode XLA's matchers name after the
run (`m::Multiply(...)`): some of XLA's rewrites keep the count (transpose -> reshape, divide
by a constant -> multiply, reduce(negate(x)) -> negate(reduce(x))). A test's status:

* `done`: every module it expects to change that XLA:CPU runs is rewritten in some mode (by
  a sound rule for the test's case, even when XLA's general rewrite is unsound); the mode
  column is the weakest mode that does all of them;
* `rule fires, not chosen`: otherwise, when a rule whose `# xla:` comment names the test
  matched every such module in some mode but extraction kept the input: the target's cost
  model prices the input as cheaper (with fusion off, every instruction is its own kernel), so
  the rewrite is covered but not taken; the mode column is the weakest mode the rule fires in;
* `not sound`: otherwise, when its name is a `## ` heading of the unsound list
  (docs/simplifier_unsound.md);
* `not applicable`: no HLO text (built with the C++ builder API or a template), no module the
  test expects to change, or XLA:CPU runs none of those;
* `missing`: otherwise.

Rules name the tests they cover with a trailing `# xla: TestName, OtherTest` comment; the rule
column lists them, then the rules that fired in the weakest mode's run of a done test.
Families come from a table of test-name patterns (FAMILIES). With `--no-xla` XLA is not asked
and every module counts as running.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import os
import re
import sys
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from .. import parse
from ..errors import HloError
from ..grammar.rules_parser import MODES
from ..memory import check_fits_in_memory
from ..ops import COMMUTATIVE
from ..shape_util import text as shape_text
from .cc_tests import CcTest, split_tests
from .cli import main_guard, read_text, write_text
from .xla_parse_rate import XlaChild, reason

TABLE = "docs/simplifier_parity.md"
UNSOUND = "docs/simplifier_unsound.md"
RUN_BYTES = 256 << 20

# Test-name pattern -> family (issue 16's families); the first pattern that matches wins,
# so the exceptions to a broad pattern come before it.
FAMILIES = (
    (r"IsNonNegative", "other"),
    (r"ScalarMultiplyReduction|.*(DivideByPowerOf2|RemainderByPowerOf2)", "strength reduction"),
    (r"(Reverse)?SelectDUS", "slicing & joining"),
    (r"AbsEliminationSelMaxBcast", "compare/select"),
    (r"BroadcastAndPadReorder", "layout & data movement"),
    (r"SliceOfReduceWindow|SliceDotReorder", "slicing & joining"),
    (r"DotContractingReorder|SwapDotOperands|TransposeOf(Batch)?Dot|TransposeReshape",
     "layout & data movement"),
    (r"Factor|MultiplyChain|.*Reassoc|.*MergeConstants|.*Canonicalization|AddConstOnLHS"
     r"|AddZero|MulZero|SubZero|SubSame|DivOne|ExpOfZero|AddBroadcastZero"
     r"|ReplaceSubtractOfEqualOperands|NegateNegate|NotNot|MultiplyNegateNegate"
     r"|(And|Or)(True|False)", "reassociation & constants"),
    (r"Select|Compare|NeFalse|EqTrue|Nop(Max|Min)|Minimum|Maximum|(Min|Max)Of|.*Clamp"
     r"|Trivial(Min|Max)\b|SinkCbrtThroughMax", "compare/select"),
    (r"Recip|.*Rsqrt|.*Sqrt|Pow|.*Div|Ln|Exp|SquareOfAbs|AbsElimination|MultiplyOfConvertedPred"
     r"|SquaredComplex|.*DotStrengthReduction|.*DotToMultiply", "strength reduction"),
    (r".*Reduce|Reduce|TwoReducesToOne|.*ReduceWindow|Remainder|RepeatedRemainder",
     "reductions"),
    (r"(Dynamic)?Slice|.*DynamicUpdateSlice|.*Concat|.*Reverse|RemoveNoop(Pad|SliceOfPad)"
     r"|NegativePadding|TrivialInteriorPadding|ZeroSizedPad|CanDisableNegativePadding|Gather"
     r"|Scatter|ScalarScatter|DontSinkInstructionsIn|.*SliceToDynamic|.*PadToStatic"
     r"|SimplifyShardedPad|SlicePadLayout|.*DynamicSlice|RemoveNoopSlice", "slicing & joining"),
    (r"Transpose|.*Reshape|.*Broadcast|.*Bitcast|Copy|Copies|Iota|Degenerate|ElementwiseN?o?Sink"
     r"|.*Dot|.*Layout|RemoveCopy|NoBitcastAdded|Reversal|Swap|MergeBroadcast|ConstantToIota"
     r"|RespectHostOffloading|ScalarBroadcast", "layout & data movement"),
)
FAMILY_ORDER = ("reassociation & constants", "strength reduction", "compare/select",
                "slicing & joining", "layout & data movement", "reductions", "other")
STATUSES = ("done", "rule fires, not chosen", "not sound", "missing", "not applicable")


def family(name: str) -> str:
    for pattern, fam in FAMILIES:
        if re.match(pattern, name):
            return fam
    return "other"


@dataclass
class Optimized:
    """One module through optimize in one floating-point mode."""
    instructions: int
    rewritten: bool
    fired: Counter


@dataclass
class ModuleResult:
    instructions: int = 0
    parse_error: str | None = None
    optimize_error: str | None = None
    xla_error: str | None = None
    by_mode: dict[str, Optimized] = field(default_factory=dict)

    def weakest_mode(self, accept=lambda o: o.rewritten) -> str | None:
        """The first mode whose run `accept`s (by default: did the rewrite)."""
        return next((m for m in MODES if m in self.by_mode and accept(self.by_mode[m])), None)


@dataclass(frozen=True)
class RuleInfo:
    name: str
    where: str          # file name:line
    mode: str

    def cell(self) -> str:
        return f"`{self.name}` ({self.where}, {self.mode})"


@dataclass
class Row:
    test: CcTest
    label: str
    family: str
    status: str
    note: str
    mode: str
    rules: list[str]
    instructions: str
    running_rewrites: int        # modules expected to change that XLA:CPU runs
    fewer_in_xla_mode: int       # of those, how many optimize in xla mode shrinks


def rewritten(before: Counter, after: Counter, expected_opcodes: frozenset[str]) -> bool:
    """Did optimize do the rewrite XLA's test expects? Signatures of the input and output."""
    if sum(after.values()) < sum(before.values()):
        return True
    return after != before and bool(expected_opcodes) and \
        expected_opcodes <= {opcode for opcode, _, _ in after}


def signature(module) -> Counter:
    """Each instruction as (opcode, result shape without layout, its operands' opcodes, a
    parameter's with its number, in order, sorted for a commutative op): it changes when a
    rewrite changes the graph (negate(reduce(x)) for reduce(negate(x)), convolution(b, a) for
    convolution(a, b)), not when only names, layouts or the order of a commutative op's
    operands do."""
    def operands(i):
        named = [o.opcode if o.parameter_number is None else f"parameter({o.parameter_number})"
                 for o in i.operands]
        return tuple(sorted(named) if i.opcode in COMMUTATIVE else named)
    return Counter((i.opcode, shape_text(i.shape), operands(i)) for i in module.instructions())


def optimize_module(module_text: str, expected_opcodes: frozenset[str],
                    rules: list[str]) -> ModuleResult:
    """Our side of one module: parse, then optimize in every mode."""
    from .. import optimize
    result = ModuleResult()
    try:
        module = parse(module_text)
    except HloError as e:
        result.parse_error = str(e)
        return result
    before = signature(module)
    result.instructions = sum(before.values())
    for mode in MODES:
        try:
            out, report = optimize(module, rules, fp_mode=mode, fusion=False, stats=True)
        except Exception as e:          # noqa: BLE001 - one module's failure is its row's note
            result.optimize_error = f"{type(e).__name__}: {e}" if not isinstance(e, HloError) \
                else str(e)
            return result
        after = signature(out)
        result.by_mode[mode] = Optimized(sum(after.values()),
                                         rewritten(before, after, expected_opcodes),
                                         Counter({k: v for k, v in report.matches.items() if v}))
    return result


def execute_error(text: str) -> str | None:
    """XLA:CPU compiles `text` and runs it on zeros: None, or the first line of why not.
    A module with an array over RUN_BYTES (some tests declare gigabytes) is compiled only."""
    from .. import xla_oracle
    try:
        compiled = xla_oracle.compile(text)
        if _small(text):
            compiled.run([np.zeros(dims, dtype) for dims, dtype in compiled.specs])
        return None
    except xla_oracle.XlaError as e:
        return reason(e.message)


def _small(text: str) -> bool:
    try:
        check_fits_in_memory(parse(text), RUN_BYTES)
        return True
    except HloError:
        return False


def xla_errors(texts: list[str]) -> list[str | None]:
    """execute_error for each text, in a child process restarted after a crash."""
    child = XlaChild(execute_error, "XLA:CPU crashed or hung on it", timeout=120.0)
    try:
        return [child.error(t) for t in texts]
    finally:
        child.close()


def unsound_tests(markdown: str) -> set[str]:
    """Test names in the `## ` headings of the unsound list (a heading may name several)."""
    return {word for heading in re.findall(r"^##(?!#)(.*)$", markdown, re.M)
            for word in re.findall(r"\w+", heading)}


def rule_tags(rules: list[str]) -> dict[str, list[RuleInfo]]:
    """Test name -> the rules (and folds) whose `# xla: ...` comment names it. A comment
    belongs to the last declaration that starts on or before its line."""
    from ..rule_compiler.rules import load_rule_set
    rule_file = load_rule_set(rules)
    by_file: dict[str, list] = {}
    for decl in (*rule_file.rules, *rule_file.folds):
        by_file.setdefault(decl.pos.file, []).append(decl)
    tags: dict[str, list[RuleInfo]] = {}
    for path, decls in by_file.items():
        decls.sort(key=lambda d: d.pos.line)
        for number, line in enumerate(read_text(path).splitlines(), 1):
            m = re.search(r"#\s*xla:(.*)$", line)
            owner = [d for d in decls if d.pos.line <= number] if m else []
            if not owner:
                continue
            info = _rule_info(owner[-1])
            for name in re.findall(r"\w+", m.group(1)):
                tags.setdefault(name, []).append(info)
    return tags


def _rule_info(decl) -> RuleInfo:
    return RuleInfo(decl.name, f"{os.path.basename(decl.pos.file)}:{decl.pos.line}",
                    getattr(decl, "mode", "fold"))


def status(test: CcTest, label: str, results: list[ModuleResult], unsound: set[str],
           tagged: set[str] = frozenset()) -> tuple[str, str, str]:
    """(status, note, mode) of one test from its modules' results; `tagged`: the rules whose
    `# xla:` comment names the test."""
    expected, running = _expecting_rewrite(test, results)
    modes = [r.weakest_mode() for _, r in running]
    if running and all(modes):
        return "done", "", max(modes, key=MODES.index)
    fired = [r.weakest_mode(lambda o: bool(tagged & set(o.fired))) for _, r in running]
    if running and all(fired):
        return "rule fires, not chosen", "the cost model keeps the input", \
            max(fired, key=MODES.index)
    if label in unsound or test.name in unsound:
        return "not sound", "", ""
    if not test.modules:
        return "not applicable", "no HLO text", ""
    if not expected:
        kinds = sorted({m.expects for m in test.modules})
        return "not applicable", "expects " + " / ".join(kinds), ""
    if not running:
        return "not applicable", f"XLA:CPU does not run it: {expected[0][1].xla_error}", ""
    failed = next(r for (_, r), m in zip(running, modes) if m is None)
    return "missing", failed.parse_error or failed.optimize_error or "", ""


def _expecting_rewrite(test: CcTest, results: list[ModuleResult]):
    """The (module, result) pairs the test expects to change, and those XLA:CPU runs."""
    expected = [(m, r) for m, r in zip(test.modules, results) if m.expects == "rewrite"]
    return expected, [(m, r) for m, r in expected if r.xla_error is None]


def make_row(test: CcTest, label: str, results: list[ModuleResult], unsound: set[str],
             tags: dict[str, list[RuleInfo]], rule_infos: dict[str, RuleInfo]) -> Row:
    tagged = tags.get(label) or tags.get(test.name, [])     # `Fixture.Name` or plain `Name`
    state, note, mode = status(test, label, results, unsound, {i.name for i in tagged})
    cells = [info.cell() for info in tagged]
    if state == "done":
        fired = Counter()
        for r in results:
            if mode in r.by_mode:
                fired.update(r.by_mode[mode].fired)
        names = [n for n, _ in sorted(fired.items(), key=lambda item: (-item[1], item[0]))
                 if n not in {i.name for i in tagged}]       # most often first, ties by name
        shown = [rule_infos[n].cell() if n in rule_infos else f"`{n}`" for n in names[:4]]
        cells += [("fired: " if not cells else "") + ", ".join(shown)] if shown else []
        if len(names) > 4:
            cells.append(f"+{len(names) - 4} more")
    shown_mode = mode or "fast"
    sizes = "; ".join(f"{r.instructions} → {r.by_mode[shown_mode].instructions}"
                      for r in results if shown_mode in r.by_mode)
    _, running = _expecting_rewrite(test, results)
    fewer = sum(1 for _, r in running
                if "xla" in r.by_mode and r.by_mode["xla"].instructions < r.instructions)
    return Row(test, label, family(test.name), state, note, mode, cells, sizes, len(running),
               fewer)


def labels(tests: list[CcTest]) -> list[str]:
    """Test names; those of fixtures other than the file's main one get `Fixture.` before."""
    main = Counter(t.fixture for t in tests).most_common(1)[0][0] if tests else ""
    return [t.name if t.fixture == main else f"{t.fixture}.{t.name}" for t in tests]


def evaluate(tests: list[CcTest], rules: list[str], use_xla: bool) -> list[list[ModuleResult]]:
    """Every module's results: XLA in a child process (one thread waits on it) while this
    process optimizes."""
    from .. import xla_oracle
    if use_xla and not xla_oracle.available():
        raise HloError(f"{xla_oracle.reason} (or run with --no-xla)")
    modules = [m for t in tests for m in t.modules]
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        xla = pool.submit(xla_errors, [m.text for m in modules]) if use_xla else None
        ours = [optimize_module(m.text, m.expected_opcodes, rules) for m in modules]
        errors = xla.result() if xla else [None] * len(modules)
    for result, error in zip(ours, errors):
        result.xla_error = error
    it = iter(ours)
    return [[next(it) for _ in t.modules] for t in tests]


def render(rows: list[Row], source: str, rules: list[str]) -> str:
    def cell(text: str, limit: int = 110) -> str:
        text = " ".join(text.split()).replace("|", "\\|")
        return text if len(text) <= limit else text[:limit - 1] + "…"

    rewrites = [r for r in rows if r.running_rewrites]
    count = Counter(r.status for r in rows)
    lines = [
        "# Parity with XLA's algebraic simplifier",
        "",
        f"Generated by `python -m hlo_opt.tools.simplifier_parity PATH/{source} --rules "
        f"{' --rules '.join(rules)} --out {TABLE}` from openxla/xla's "
        f"`xla/hlo/transforms/simplifiers/{source}`; do not edit by hand. How each status is "
        "decided: the docstring of `tools/simplifier_parity.py`. Mode: the weakest "
        "floating-point mode in which optimize does the rewrite; instructions: each module's "
        "count before → after optimize in that mode (fast where there is none).",
        "",
        "| tests | count |",
        "|---|---:|",
        f"| total | {len(rows)} |",
        f"| with HLO text | {sum(1 for r in rows if r.test.modules)} |",
        f"| expecting a rewrite and running on XLA:CPU | {len(rewrites)} |",
        *(f"| {s} | {count[s]} |" for s in STATUSES),
        "",
        f"Modules expecting a rewrite and running on XLA:CPU: "
        f"{sum(r.running_rewrites for r in rows)}; optimize in xla mode leaves "
        f"{sum(r.running_rewrites - r.fewer_in_xla_mode for r in rows)} of them without "
        f"fewer instructions. Done by weakest mode: "
        + ", ".join(f"{m} {sum(1 for r in rows if r.status == 'done' and r.mode == m)}"
                    for m in MODES) + ".",
        "",
        "| family | expecting a rewrite | " + " | ".join(STATUSES) + " |",
        "|---|---:|" + "---:|" * len(STATUSES),
    ]
    for fam in FAMILY_ORDER:
        members = [r for r in rows if r.family == fam]
        by = Counter(r.status for r in members)
        lines.append(f"| {fam} | {sum(1 for r in members if r.running_rewrites)} | "
                     + " | ".join(str(by[s]) for s in STATUSES) + " |")
    lines += ["", "| test | family | our rule(s) | mode | instructions | status |",
              "|---|---|---|---|---|---|"]
    for r in rows:
        state = f"{r.status}: {cell(r.note)}" if r.note else r.status
        lines.append(f"| {r.label} | {r.family} | {cell('; '.join(r.rules), 400)} | "
                     f"{r.mode} | {r.instructions} | {state} |")
    return "\n".join(lines) + "\n"


def parity_rows(cpp: str, rules: list[str], unsound: set[str], use_xla: bool,
                only: str | None = None) -> list[Row]:
    """One row per test; with `only`, just the tests whose label that regex searches."""
    from ..rule_compiler.rules import load_rule_set
    tests = split_tests(cpp, "simplifier")
    names = labels(tests)
    if only:
        keep = [i for i, n in enumerate(names) if re.search(only, n)]
        tests, names = [tests[i] for i in keep], [names[i] for i in keep]
    results = evaluate(tests, rules, use_xla)
    tags = rule_tags(rules)
    infos = {r.name: _rule_info(r) for r in load_rule_set(rules).rules}
    return [make_row(t, n, res, unsound, tags, infos) for t, n, res in zip(tests, names, results)]


@main_guard("simplifier_parity")
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("test_file", help="XLA's algebraic_simplifier_test.cc")
    ap.add_argument("--rules", action="append", help="rule set(s) (default: default)")
    ap.add_argument("--unsound", help=f"the unsound list (default: {UNSOUND} when present)")
    ap.add_argument("--out", help="the table's file (default: stdout)")
    ap.add_argument("--no-xla", action="store_true",
                    help="do not ask XLA:CPU; every module counts as running")
    ap.add_argument("--only", metavar="REGEX",
                    help="only the tests whose name this regex searches (to check a family)")
    args = ap.parse_args(argv)
    rules = args.rules or ["default"]
    cpp = read_text(args.test_file)
    unsound_path = args.unsound or (UNSOUND if os.path.exists(UNSOUND) else None)
    unsound = unsound_tests(read_text(unsound_path)) if unsound_path else set()
    rows = parity_rows(cpp, rules, unsound, not args.no_xla, args.only)
    write_text(args.out, render(rows, os.path.basename(args.test_file), rules))
    if args.out:
        count = Counter(r.status for r in rows)
        print(", ".join(f"{s} {count[s]}" for s in STATUSES), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
