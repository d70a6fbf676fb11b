"""Bad HLO text: one HloError with the right line:column, never another exception."""
from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import hlo_opt
from hlo_opt import HloError

OK = """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  p = f32[4,8] parameter(0)
  z = f32[] constant(0)
  r = f32[4] reduce(p, z), dimensions={1}, to_apply=add
  ROOT n = f32[4] negate(r)
}
"""

# (text, expected line, expected column or None, message fragment)
CASES = [
    ("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT a = f32[2] foo(p)\n}", 4, 19, "unknown opcode 'foo'"),
    ("HloModule m\nENTRY e {\n  ROOT a = f32[2] negate(q)\n}", 3, 26, "undefined operand 'q'"),
    ("HloModule m\nENTRY e {\n  a = f32[2] negate(b)\n  b = f32[2] parameter(0)\n}", 3, 21, "undefined operand 'b'"),
    ("HloModule m\nENTRY e {\n  p = f32[] parameter(0)\n  p = f32[] negate(p)\n}", 4, 3, "duplicate instruction name 'p'"),
    ("HloModule m\nc {\n ROOT p = f32[] parameter(0)\n}\nc {\n ROOT p = f32[] parameter(0)\n}", 5, 1, "duplicate computation name 'c'"),
    ("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT r = f32[] reduce(p, p), dimensions={0}, to_apply=nosuch\n}", 4, 57, "computation 'nosuch' does not exist"),
    ("HloModule m\nENTRY e {\n  p = f32[2 parameter(0)\n}", 3, 10, "unexpected character '['"),
    ("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n", 4, None, "unexpected end of input"),
    ("HloModule m\nENTRY e {\n  p = f32[2] parameter(0) /* unterminated\n}", 3, 27, "unterminated comment"),
    ("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  r = f32[2] reverse(p), dimensions={0,x}\n}", 4, 37, "dimensions"),
    ("HloModule m\nENTRY e {\n  c = f32[3] constant({1, 2})\n}", 3, 14, "literal row has 2 elements, expected 3"),
    ("HloModule m\nENTRY e {\n  c = s32[2] constant({1.5, 2})\n}", 3, 14, "expects integer"),
    ("HloModule m\nENTRY e {\n  c = u8[1] constant({256})\n}", 3, 13, "out of range"),
    ("HloModule m\nENTRY e {\n  c = f16[1] constant({70000})\n}", 3, 14, "out of range"),
    ("HloModule m\nENTRY e {\n  c = f32[2,2] constant({{1, 2, 3}, {4}})\n}", 3, 16, "literal row has 3 elements"),
    ("HloModule m\nENTRY e {\n  c = f32[2] constant({{1}, {2}})\n}", 3, 14, "nesting does not match"),
    ("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT c = convert(p)\n}", 4, 12, "needs an explicit result shape"),
    ("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT a = f32[2] add(p)\n}", 4, 19, "add takes 2 operands, got 1"),
    ("HloModule m\nENTRY e {\n  p = f32[2] parameter(0), metadata={op_name=\"x\"}, metadata={}\n}", 3, 52, "duplicate attribute 'metadata'"),
    ("HloModule m\nENTRY e {\n  p = f32[2]{1,0} parameter(0)\n}", 3, 7, "not a permutation"),
    ("HloModule m\nENTRY e {\n  p = f33[2] parameter(0)\n}", 3, 10, "unexpected"),
    ("HloModule m\nENTRY e {\n  ROOT p = f32[2] parameter(0)\n  ROOT q = f32[2] parameter(1)\n}", 4, 3, "more than one ROOT"),
    ("HloModule m\nENTRY a {\n ROOT p = f32[] parameter(0)\n}\nENTRY b {\n ROOT p = f32[] parameter(0)\n}", 5, 1, "more than one ENTRY"),
    ("HloModule m\nENTRY e (x: f32[2]) -> f32[3] {\n  ROOT p = f32[2] parameter(0)\n}", 2, 7, "its signature says f32[3]"),
    ("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT a = f32[2] add(f32[3] p, p)\n}", 4, 30, "declared f32[3]"),
    ("HloModule m\nadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\nENTRY e {\n  p = f32[2] parameter(0)\n  z = f32[] constant(0)\n  r = f32[2] reduce-window(p, z), to_apply=add, window={size=2 bogus=1}\n}", 10, 56, "unknown window field"),
    ("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT s = f32[1] slice(p), slice={[0:1:x]}\n}", 4, 35, "bad slice"),
    ("HloModule m\nENTRY e {\n  p = f32[2] parameter(0), control-predecessors={nope}\n}", 3, 49, "control predecessor 'nope'"),
    ("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT d = f32[2] dot(p, p), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n}", None, None, ""),
    # What XLA refuses, refused here at the offending token.
    ("HloModule m\nENTRY e {\n  ROOT pé = f32[2] parameter(0)\n}", 3, 9, "unexpected 'é'"),
    ("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT t = (f32[2]) tuple(p), lhs_batch_dims={0}\n}", 4, 31, "tuple takes no attribute 'lhs_batch_dims'"),
    ("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT l = f32[2] log(p), dimensions={0}\n}", 4, 27, "log takes no attribute 'dimensions'"),
    ("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT r = f32[] reduce(p, p), dimensions={0}\n}", 4, 18, "reduce needs the attribute to_apply"),
    ("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT d = f32[] dot(p, p), lhs_contracting_dims={0}, rhs_contracting_dims={0}, algorithm=dot_f32_garbage\n}", 4, 91, "'dot_f32_garbage' is not one of"),
    ("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT d = f32[] dot(p, p), operand_precision={highest,fast}\n}", 4, 47, "'fast' is not one of default, high, highest"),
    ("HloModule m, is_sheduled=true\nENTRY e {\n  ROOT p = f32[2] parameter(0)\n}", 1, 14, "unexpected module attribute 'is_sheduled'"),
    ("HloModule m, entry_computation_layout={(f32[2]{0})}\nENTRY e {\n  ROOT p = f32[2] parameter(0)\n}", 1, 51, "expected '->'"),
    ("HloModule m\nENTRY e {\n  ROOT p = f32[8,128]{1,0:S(1)T(8,128)} parameter(0)\n}", 3, 12, "malformed layout part ':S(1)T(8,128)'"),
    ("HloModule m\nENTRY e {\n  ROOT p = f32[8,128]{:T(8,128)} parameter(0)\n}", 3, 12, "not a permutation"),
    ("HloModule m\nENTRY e {\n  ROOT c = u32[2] constant({1, -1})\n}", 3, 19, "value -1 is out of range for u32"),
    ("HloModule m\nENTRY e {\n  ROOT c = f32[2] constant({1, +2})\n}", 3, 19, "bad float value '+2'"),
    ("HloModule m\nENTRY e {\n  ROOT c = f64[] constant(1e400)\n}", 3, 18, "out of range for a double"),
    ("HloModule m\nENTRY e {\n  ROOT c = c64[] constant((1, 1e39))\n}", 3, 18, "out of range for c64"),
    ("HloModule m\nENTRY e {\n  ROOT c = bf16[] constant(nan(0x80))\n}", 3, 19, "NaN payload 0x80 is invalid"),
    ("HloModule m\nENTRY e {\n  ROOT c = f8e4m3fn[] constant(nan(0x1))\n}", 3, 23, "no NaN with a payload"),
    ("HloModule m\nENTRY e {\n  ROOT c = f32[0] constant(1)\n}", 3, 19, "has no elements"),
    ("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT a = f32[2] add(p, f32[2])\n}", 4, 26, "an operand needs a name"),
    ("%c (x: f32[2]) -> f32[2] {\n  ROOT x = f32[2] parameter(0)\n}", 1, 4, "expected '='"),
    ("HloModule m\nENTRY e {\n  ROOT p = f32[2] parameter(0), metadata={op_nme=\"x\"}\n}", 3, 42, "metadata: expected {key=value ...}"),
    ("HloModule m\nENTRY e {\n  c= f32[2] parameter(0)\n}", 3, 3, "unexpected 'c='"),
    ("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT q = f32[2] parameter(0)\n}", 4, 8, "q: parameter number 0 is missing or repeated"),
    ("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT x = f32[2] exponential(p), result_accuracy={mode=high}\n}", 4, 51, "result_accuracy: expected {mode=default|highest}"),
    ("HloModule m, input_output_alias={ {0, a}: (0, {0}) }\nENTRY e {\n  ROOT p = f32[2] parameter(0)\n}", 1, 33, "malformed input_output_alias"),
    ("HloModule m, is_scheduled=1\nENTRY e {\n  ROOT p = f32[2] parameter(0)\n}", 1, 27, "malformed is_scheduled value '1'"),
    ("HloModule m\nc {\n  a = f32[2] parameter(0)\n  ROOT n = f32[2] negate(a)\n}\nENTRY e {\n  p = f32[2] parameter(0)\n  s = (f32[2], f32[2], s32[]) async-start(p), calls=c\n  ROOT d = f32[2] async-done(s)\n}", 8, 31, "async-start needs the shape ((operands), outputs, state...)"),
    ("HloModule m\nc {\n  a = f32[2] parameter(0)\n  ROOT n = f32[2] negate(a)\n}\nENTRY e {\n  p = f32[2] parameter(0)\n  s = ((f32[2]), f32[2], s32[]) async-start(p), calls=c\n  u = ((f32[2]), f32[3], s32[]) async-update(s)\n  ROOT d = f32[2] async-done(u)\n}", 9, 33, "async-update has shape ((f32[2]), f32[3], s32[]), its operand"),
    ("HloModule m\nc {\n  a = f32[2] parameter(0)\n  ROOT n = f32[2] negate(a)\n}\nENTRY e {\n  p = f32[2] parameter(0)\n  s = ((f32[2]), f32[2], s32[]) async-start(p), calls=c\n  d = f32[2] async-done(s)\n  t = ((f32[2]), f32[2], s32[]) async-start(p), calls=c\n  ROOT e = f32[2] async-done(t)\n}", 10, 33, "computation 'c' is called by more than one async-start"),
    ("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  s = ((f32[2]), f32[2], s32[]) custom-call-start(p), custom_call_target=\"foo\"\n  ROOT d = f32[2] call-done(s)\n}", 5, 19, "call-done continues custom-call-start"),
    ("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  s = ((f32[2]), f32[2], s32[]) custom-call-start(p), custom_call_target=\"foo\"\n  ROOT d = f32[2] custom-call-done(s), async_execution_thread=\"t\"\n}", 5, 19, "async_execution_thread is 't', the async-start's is 'main'"),
    ("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT d = f32[2] custom-call-done(p)\n}", 4, 19, "takes one operand, the async-start or -update it continues"),
    ("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT c = f32[2] custom-call(p, p), custom_call_target=\"x\", operand_layout_constraints={f32[2]{0}}\n}", 4, 89, "operand_layout_constraints lists 1 shapes for 2 operands"),
    ("", 1, None, "unexpected end of input"),
    ("HloModule m\nENTRY e {\n  p = f32[2] parameter(0) $\n}", 3, 27, "unexpected '$'"),
]

# XLA's parser takes these; XLA's verifier (or compiler) refuses them, and so do we, at parse.
VERIFIER_CASES = [
    ("HloModule m, entry_computation_layout={(f32[2]{0}, f32[2]{0})->f32[2]{0}}\nENTRY e {\n  ROOT p = f32[2] parameter(0)\n}", 1, 39, "entry_computation_layout lists 2 shapes for 1 parameters"),
    ("HloModule m, entry_computation_layout={(f32[3]{0})->f32[3]{0}}\nENTRY e {\n  ROOT p = f32[2] parameter(0)\n}", 1, 39, "lists f32[3]{0} for parameter 0, which is f32[2]"),
    ("HloModule m, entry_computation_layout={(f32[2]{0})->s32[2]{0}}\nENTRY e {\n  ROOT p = f32[2] parameter(0)\n}", 1, 39, "says the result is s32[2]{0}"),
    ("HloModule m\nENTRY e {\n  ROOT p = f32[8,128]{1,0:T(0,128)} parameter(0)\n}", 3, 12, "tile (0,128) has a dimension that is not positive"),
]

# XLA's parser aborts the process on these (a CHECK failure), so it is not asked here.
XLA_ABORTS = [
    ("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT q = f32[2] parameter(2)\n}", 4, 8, "q: parameter(2) in computation e, which has 2 parameters: the numbers must be 0..1"),
    ("HloModule m\nENTRY e {\n  a = f32[4] parameter(0)\n  ROOT d = f32[4] async-done(a)\n}", 4, 19,
     "async-done takes one operand, the async-start or -update it continues"),
]


@pytest.mark.parametrize("text, line, column, fragment", CASES + VERIFIER_CASES + XLA_ABORTS)
def test_malformed_input_gives_one_positioned_error(text, line, column, fragment):
    if line is None:        # valid: must parse
        hlo_opt.parse(text)
        return
    with pytest.raises(HloError) as info:
        hlo_opt.parse(text, "bad.hlo")
    e = info.value
    assert fragment in e.message
    assert e.line == line
    if column is not None:
        assert e.column == column
    rendered = str(e)
    assert rendered.startswith(f"bad.hlo:{line}:") and "\n" not in rendered


@pytest.mark.parametrize("text, line, column, fragment", CASES)
def test_xla_parser_agrees(text, line, column, fragment, xla):
    """Each case above is accepted or refused by XLA's own parser alike."""
    if line is None:
        xla.parse(text)
    else:
        with pytest.raises(xla.XlaError):
            xla.parse(text)


@pytest.mark.parametrize("text, line, column, fragment", VERIFIER_CASES)
def test_xla_parser_takes_what_its_verifier_refuses(text, line, column, fragment, xla):
    xla.parse(text)


def test_cli_reports_error_in_one_line_with_exit_code_2(tmp_path):
    bad = tmp_path / "bad.hlo"
    bad.write_text(CASES[0][0])
    out = tmp_path / "out.hlo"
    proc = subprocess.run([sys.executable, "-m", "hlo_opt.tools.hlo_opt_cli", str(bad),
                           "--rules=none", "-o", str(out)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"{bad}:4:19: unknown opcode 'foo'"
    assert "Traceback" not in proc.stderr
    assert not out.exists() and list(tmp_path.iterdir()) == [bad]


def test_huge_nesting_in_tuple_shapes_is_refused_cleanly():
    shape = "(" * 5000 + "f32[]" + ")" * 5000
    with pytest.raises(HloError):
        hlo_opt.parse(f"HloModule m\nENTRY e {{ ROOT p = {shape} parameter(0) }}")


_MUTATIONS = st.one_of(
    st.tuples(st.just("delete"), st.integers(0, len(OK) - 1), st.integers(1, 8)),
    st.tuples(st.just("insert"), st.integers(0, len(OK)), st.text(
        alphabet="{}()[],=%:;\"/*-.0123456789abcdefxyzROOTENTRY \n", min_size=1, max_size=6)),
    st.tuples(st.just("swap"), st.integers(0, len(OK) - 2), st.integers(0, len(OK) - 2)),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_MUTATIONS, min_size=1, max_size=4))
def test_mutated_text_parses_or_raises_hlo_error(mutations):
    text = OK
    for kind, a, b in mutations:
        if kind == "delete":
            text = text[:a] + text[a + b:]
        elif kind == "insert":
            text = text[:a] + b + text[a:]
        else:
            a, b = min(a, len(text) - 1), min(b, len(text) - 1)
            if a >= 0 and b >= 0:
                chars = list(text)
                chars[a], chars[b] = chars[b], chars[a]
                text = "".join(chars)
    try:
        module = hlo_opt.parse(text)
    except HloError as e:
        assert e.line >= 0 and "\n" not in str(e)
        return
    reparsed = hlo_opt.parse(module.to_text())
    assert reparsed.to_text() == module.to_text()
