"""XLA's C++ pass tests read as data: each test, its HLO modules, and what it expects of the
pass's run on each module.

A test is `TEST(...)`, `TEST_F(...)` or `TEST_P(Fixture, Name) { body }`; its modules are the raw
strings xla_parse_rate recognizes as HLO. Each module is paired with the first run of the
pass that follows it in the body (`pass.Run(m)` or `RunHloPass(pass, m)`, where the pass is a
name or constructor containing `pass_name`), and that run's boolean result with what the
test asserts about it:

* `rewrite`: `EXPECT_TRUE(<run>.value())`, `ASSERT_THAT(<run>, IsOkAndHolds(true))`, or the
  result assigned (`bool changed = <run>`, `TF_ASSERT_OK_AND_ASSIGN(bool changed, <run>)`)
  and later `EXPECT_TRUE(changed)`; ASSERT_ and EXPECT_ alike;
* `no change`: the same with FALSE / false;
* `parametric`: the result compared with a test parameter (`EXPECT_EQ(changed, param)`);
* `unchecked`: the result is not asserted (the test checks only the module afterwards);
* `no run`: no run of the pass follows the module.

The opcodes the test's matchers name after the run (`m::Multiply(...)`, `op::Reshape(...)`)
say what the rewritten module should contain.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..ops import OPS
from .xla_parse_rate import _RAW_STRING, hlo_raw_strings

_HEAD = re.compile(r"^[ \t]*TEST(?:_F|_P)?\(\s*(\w+)\s*,\s*(\w+)\s*\)\s*\{", re.M)
# What a comment, string or character literal spans (so braces in them are not counted).
_SKIPPED = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
_ASSERTION = re.compile(r"(?:EXPECT|ASSERT)_(TRUE|FALSE)\(")
_HOLDS = re.compile(r"IsOkAndHolds\((true|false)\)")
# `bool changed = <run>`, `auto g = <run>`, `TF_ASSERT_OK_AND_ASSIGN(bool changed, <run>)`.
_ASSIGNED = re.compile(r"(?:TF_ASSERT_OK_AND_ASSIGN\(\s*)?(?:bool\s+|auto\s+)?(\w+)\s*[,=]")
_MATCHER = re.compile(r"\b(?:m|op)::([A-Z]\w*?)(?:AnyOrder)?\(")
# Matcher names that are not the opcode's name spelled in CamelCase.
_MATCHER_OPCODES = {"Exp": "exponential", "ConstantScalar": "constant",
                    "ConstantEffectiveScalar": "constant", "Cos": "cosine", "Sin": "sine",
                    "Expm1": "exponential-minus-one", "Log1p": "log-plus-one",
                    "OptimizationBarrier": "opt-barrier", "Atan2": "atan2"}


@dataclass(frozen=True)
class CcModule:
    text: str                       # the HLO module
    line: int                       # where its raw string starts in the file
    expects: str                    # rewrite, no change, parametric, unchecked, no run
    expected_opcodes: frozenset[str]


@dataclass(frozen=True)
class CcTest:
    fixture: str
    name: str
    line: int
    modules: tuple[CcModule, ...]
    expects: str                    # of the body's first run (for tests without HLO text)


def split_tests(cpp: str, pass_name: str) -> list[CcTest]:
    """Every test in the C++ source `cpp`, in file order."""
    tests = []
    for head in _HEAD.finditer(cpp):
        body_start = head.end()
        body = cpp[body_start:_closing_brace(cpp, body_start)]
        code = _blank_comments_and_strings(body)
        modules = []
        raws = hlo_raw_strings(body)
        for k, (match, text) in enumerate(raws):
            end = raws[k + 1][0].start() if k + 1 < len(raws) else len(code)
            expects, after = _expectation(code, match.end(), end, pass_name)
            modules.append(CcModule(text, cpp.count("\n", 0, body_start + match.start()) + 1,
                                    expects, _matcher_opcodes(code[after:end])))
        tests.append(CcTest(head.group(1), head.group(2), cpp.count("\n", 0, head.start()) + 1,
                            tuple(modules), _expectation(code, 0, len(code), pass_name)[0]))
    return tests


def _closing_brace(cpp: str, start: int) -> int:
    """Index of the `}` closing the block that opens just before `start`."""
    depth, i = 1, start
    token = re.compile(r"[{}]|R\"|//|/\*|\"|'")
    while (m := token.search(cpp, i)) is not None:
        if m.group() in "{}":
            depth += 1 if m.group() == "{" else -1
            if depth == 0:
                return m.start()
            i = m.end()
            continue
        skip = _RAW_STRING.match(cpp, m.start()) if m.group() == 'R"' else None
        skip = skip or _SKIPPED.match(cpp, m.start() + (m.group() == 'R"'))
        i = skip.end() if skip else m.end()
    raise ValueError("unbalanced braces")


def _blank_comments_and_strings(code: str) -> str:
    """`code` with comments and string literals (raw ones included) replaced by spaces, so
    offsets stay and what is left is code."""
    def blank(m: re.Match) -> str:
        return re.sub(r"[^\n]", " ", m.group())
    return re.compile(f"{_RAW_STRING.pattern}|{_SKIPPED.pattern}", re.S).sub(blank, code)


def _run_pattern(pass_name: str) -> re.Pattern:
    p = rf"(?:\w*{pass_name}\w*|\w*{pass_name}\w*\([^()]*\))"
    return re.compile(rf"\b{p}\.Run\(|\bRunHloPass\(\s*&?{p}\s*,", re.I)


def _expectation(code: str, start: int, end: int, pass_name: str) -> tuple[str, int]:
    """What the test asserts about the first run of the pass in code[start:end], and where
    that run's statement ends."""
    run = _run_pattern(pass_name).search(code, start, end)
    if run is None:
        return "no run", start
    stmt_start = max(code.rfind(c, 0, run.start()) for c in ";{}") + 1
    stmt_end = code.find(";", run.end()) + 1 or len(code)
    stmt = " ".join(code[stmt_start:stmt_end].split())
    if m := _ASSERTION.match(stmt):
        return _verdict(m.group(1) == "TRUE"), stmt_end
    if m := _HOLDS.search(stmt):
        return _verdict(m.group(1) == "true"), stmt_end
    if m := _ASSIGNED.match(stmt):
        var = re.escape(m.group(1))
        check = re.compile(rf"(?:EXPECT|ASSERT)_(?:(TRUE|FALSE)\(\s*(!?)\s*{var}\s*\)"
                           rf"|(?:EQ|NE)\(\s*{var}\s*,)")
        if c := check.search(code, stmt_end, end):
            if c.group(1) is None:
                return "parametric", stmt_end
            return _verdict((c.group(1) == "TRUE") != bool(c.group(2))), stmt_end
    return "unchecked", stmt_end


def _verdict(changed: bool) -> str:
    return "rewrite" if changed else "no change"


def _matcher_opcodes(code: str) -> frozenset[str]:
    """HLO opcodes the pattern matchers in `code` name."""
    out = set()
    for name in _MATCHER.findall(code):
        opcode = _MATCHER_OPCODES.get(name) or re.sub(r"(?<!^)(?=[A-Z])", "-", name).lower()
        if opcode in OPS:
            out.add(opcode)
    return frozenset(out)
