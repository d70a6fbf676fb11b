"""XLA's algebraic simplifier, rewrite by rewrite: the module of an XLA test (named in each
section; docs/simplifier_unsound.md lists the rewrites we leave out) in, `optimize` out, the
expected structure, and the same function before and after (tests/test_rules_families.py's
`optimized` checks that on random inputs with edge values)."""
from __future__ import annotations

import pytest

from test_rules_families import ADD, optimized


def form(inst) -> str:
    """An instruction as a formula over p0, p1, ...: constants by value, splats as their
    scalar, a compare with its direction: `compare.LT(p0, 10)`."""
    if inst.opcode == "parameter":
        return f"p{inst.parameter_number}"
    if inst.opcode == "constant" and inst.shape.rank == 0:
        value = inst.literal.item()
        return f"{value:g}" if isinstance(value, float) else str(int(value))
    if inst.opcode == "broadcast" and inst.operands[0].shape.rank == 0:
        return form(inst.operands[0])
    name = inst.opcode + (f".{inst.attrs['direction']}" if inst.opcode == "compare" else "")
    return f"{name}({', '.join(form(o) for o in inst.operands)})"


def root_form(body: str, fp_mode: str = "xla") -> str:
    return form(optimized(body, fp_mode=fp_mode).entry.root)


# --- compare/select (select_compare.rules, minmax_logic.rules, arithmetic.rules) -----------

SELECT_OF_COMPARE = """
  p0 = {t}[8] parameter(0)
  p1 = {t}[8] parameter(1)
  c = pred[8] compare(p0, p1), direction={d}
  ROOT s = {t}[8] select(c, p0, p1)"""


@pytest.mark.parametrize("direction, expected", [
    ("GT", "maximum(p1, p0)"), ("GE", "maximum(p1, p0)"),        # SelectGtCompare
    ("LT", "minimum(p0, p1)"), ("LE", "minimum(p0, p1)"),        # SelectLtCompare
    ("EQ", "p1"), ("NE", "p0")])                                 # SelectEq/NeCompare
@pytest.mark.parametrize("element_type", ["pred", "s32"])
def test_select_of_a_compare_of_its_operands(direction, expected, element_type):
    body = SELECT_OF_COMPARE.format(t=element_type, d=direction)
    assert root_form(body) in (expected, expected.replace("p1, p0", "p0, p1"))


@pytest.mark.parametrize("direction, fast_only", [("GT", True), ("EQ", False)])
def test_select_of_a_float_compare_needs_fast_mode_for_max(direction, fast_only):
    """select(x > y, x, y) is not max(x, y) when y is NaN; select(x == y, x, y) is y up to
    the sign of a zero."""
    body = SELECT_OF_COMPARE.format(t="f32", d=direction)
    assert ("select" in root_form(body)) == fast_only
    assert "select" not in root_form(body, fp_mode="fast")


@pytest.mark.parametrize("left, right, expected", [
    ("m", "a", {"compare.LT(p0, p1)", "compare.GT(p1, p0)"}),      # CompareGtMaxA
    ("m", "b", {"compare.LT(p1, p0)", "compare.GT(p0, p1)"}),      # CompareGtMaxB
])
def test_compare_of_a_maximum_with_its_operand(left, right, expected):
    body = f"""
  a = f32[4] parameter(0)
  b = f32[4] parameter(1)
  m = f32[4] maximum(a, b)
  ROOT c = pred[4] compare({left}, {right}), direction=GT"""
    assert root_form(body) in expected


@pytest.mark.parametrize("left, expected", [
    ("a", {"compare.LT(p1, p0)", "compare.GT(p0, p1)"}),           # CompareGtAMin
    ("b", {"compare.LT(p0, p1)", "compare.GT(p1, p0)"}),           # CompareGtBMin
])
def test_compare_of_an_operand_with_its_minimum(left, expected):
    body = f"""
  a = f32[4] parameter(0)
  b = f32[4] parameter(1)
  m = f32[4] minimum(a, b)
  ROOT c = pred[4] compare({left}, m), direction=GT"""
    assert root_form(body) in expected


def test_total_order_compare_of_a_minimum_stays():
    """In TOTALORDER the NaN minimum returns is ordered: min(x, y) < x is not y < x."""
    body = """
  a = f32[4] parameter(0)
  b = f32[4] parameter(1)
  m = f32[4] minimum(a, b)
  ROOT c = pred[4] compare(m, a), direction=LT, type=TOTALORDER"""
    assert "minimum" in root_form(body)


@pytest.mark.parametrize("left, direction, right, expected", [
    ("x", "LT", "zero", "0"), ("zero", "GT", "x", "0"),           # CompareLtZero, CompareZeroGt
    ("x", "GE", "zero", "1"), ("zero", "LE", "x", "1"),           # CompareGeZero, CompareZeroLe
    ("x", "LE", "zero", "compare.LE(p0, 0)"),                     # CompareLeZero: XLA keeps it
    ("x", "GT", "zero", "compare.GT(p0, 0)"),                     # CompareGtZero
    ("zero", "LT", "x", "compare.LT(0, p0)"),                     # CompareZeroLt
    ("zero", "GE", "x", "compare.GE(0, p0)")])                    # CompareZeroGe
def test_unsigned_compare_with_zero(left, direction, right, expected):
    body = f"""
  zero = u32[] constant(0)
  x = u32[] parameter(0)
  ROOT c = pred[] compare({left}, {right}), direction={direction}"""
    assert root_form(body) in (expected, expected.replace("GE(0, p0)", "LE(p0, 0)"))


@pytest.mark.parametrize("element_type, size, direction, expected", [
    ("s32", 128, "LT", "0"), ("s32", 128, "GE", "1"),             # CompareIota
    ("f32", 128, "LT", "0"),
    ("s8", 300, "LT", "compare.LT(iota(), 0)")])                  # 128..299 wrap below 0
def test_compare_of_an_iota_with_zero(element_type, size, direction, expected):
    body = f"""
  zero = {element_type}[] constant(0)
  iota = {element_type}[{size}] iota(), iota_dimension=0
  broad = {element_type}[{size}] broadcast(zero), dimensions={{}}
  ROOT c = pred[{size}] compare(iota, broad), direction={direction}"""
    assert root_form(body) == expected


@pytest.mark.parametrize("element_type, expected", [
    ("f32", "0"),
    ("s32", "compare.LT(abs(p0), 0)")])     # abs(-2^31) < 0: docs/simplifier_unsound.md
def test_abs_below_zero(element_type, expected):                  # CompareAbsLtZeroBecomesFalse
    body = f"""
  p = {element_type}[5] parameter(0)
  a = {element_type}[5] abs(p)
  z = {element_type}[] constant(0)
  b = {element_type}[5] broadcast(z), dimensions={{}}
  ROOT r = pred[5] compare(a, b), direction=LT"""
    assert root_form(body) == expected


def test_compare_with_itself():                                   # CompareSame
    assert root_form("""
  p = s32[123] parameter(0)
  ROOT c = pred[123] compare(p, p), direction=GE""") == "1"


@pytest.mark.parametrize("second", [
    "compare(p, c2), direction=LT",                               # CompareSimplified
    "compare(c2, p), direction=GT"])                              # CompareSimplifiedReversed
def test_two_upper_bounds_keep_the_tighter(second):
    body = f"""
  p = s32[] parameter(0)
  c1 = s32[] constant(10)
  c2 = s32[] constant(100)
  cmp1 = pred[] compare(p, c1), direction=LT
  cmp2 = pred[] {second}
  ROOT out = pred[] and(cmp1, cmp2)"""
    assert root_form(body) == "compare.LT(p0, 10)"


def test_two_lower_bounds_keep_the_tighter():
    body = """
  p = f32[] parameter(0)
  c1 = f32[] constant(10)
  c2 = f32[] constant(100)
  cmp1 = pred[] compare(p, c1), direction=GT
  cmp2 = pred[] compare(p, c2), direction=GT
  ROOT out = pred[] and(cmp1, cmp2)"""
    assert root_form(body) in ("compare.LT(100, p0)", "compare.GT(p0, 100)")


def test_predicate_as_one_or_zero_compared_with_zero():          # CompareSelectCompare
    body = """
  a = s32[4,4] parameter(0)
  b = s32[4,4] parameter(1)
  cmp0 = pred[4,4] compare(a, b), direction=GE
  c1 = f32[] constant(1)
  ones = f32[4,4] broadcast(c1)
  c0 = f32[] constant(0)
  zeros = f32[4,4] broadcast(c0)
  sel0 = f32[4,4] select(cmp0, ones, zeros)
  ROOT cmp1 = pred[4,4] compare(sel0, zeros), direction=NE"""
    assert root_form(body) in ("compare.GE(p0, p1)", "compare.LE(p1, p0)")


@pytest.mark.parametrize("inner, outer, lo, hi, expected", [
    ("maximum(b0, p0)", "minimum(m0, b1)", 3, 4, "clamp(3, p0, 4)"),    # MinOfMaxToClamp
    ("minimum(p0, b1)", "maximum(b0, m0)", 3, 4, "clamp(3, p0, 4)"),    # MaxOfMinToClamp
    ("minimum(p0, b1)", "maximum(b0, m0)", 4, 3, "clamp(4, p0, 4)")])   # lo > hi: always lo
def test_constant_bounds_become_a_clamp(inner, outer, lo, hi, expected):
    body = f"""
  p0 = f32[4] parameter(0)
  c0 = f32[] constant({lo})
  c1 = f32[] constant({hi})
  b0 = f32[4] broadcast(c0), dimensions={{}}
  b1 = f32[4] broadcast(c1), dimensions={{}}
  m0 = f32[4] {inner}
  ROOT m1 = f32[4] {outer}"""
    assert root_form(body) == expected


def test_clamp_of_clamp():                                        # ClampOfClamp
    assert root_form("""
  p0 = f32[] parameter(0)
  p1 = f32[] parameter(1)
  p2 = f32[] parameter(2)
  c0 = f32[] clamp(p0, p1, p2)
  ROOT c1 = f32[] clamp(p0, c0, p2)""") == "clamp(p0, p1, p2)"


@pytest.mark.parametrize("lo, hi, expected", [
    ("p1", "p2", "maximum(p1, clamp(p1, p0, p2))"),   # MaxOfClamp: wrong for lo > hi, kept
    ("c0", "c1", "clamp(2, p0, 5)"),
    ("c1", "c0", "clamp(5, p0, 5)")])
def test_maximum_of_a_clamp_and_its_lower_bound(lo, hi, expected):
    body = f"""
  p0 = f32[] parameter(0)
  p1 = f32[] parameter(1)
  p2 = f32[] parameter(2)
  c0 = f32[] constant(2)
  c1 = f32[] constant(5)
  c = f32[] clamp({lo}, p0, {hi})
  ROOT m = f32[] maximum({lo}, c)"""
    assert root_form(body) == expected


def test_abs_of_a_select_of_non_negative_values():               # AbsEliminationSelMaxBcast
    assert root_form("""
  p0 = f32[32] parameter(0)
  p1 = pred[32] parameter(1)
  zero = f32[] constant(0)
  bcast = f32[32] broadcast(zero), dimensions={}
  m = f32[32] maximum(p0, bcast)
  s = f32[32] select(p1, bcast, m)
  ROOT a = f32[32] abs(s)""") in ("select(p1, 0, maximum(p0, 0))", "select(p1, 0, maximum(0, p0))")


# --- reductions (reduce.rules, arithmetic.rules) ---------------------------------------------

@pytest.mark.parametrize("element_type", ["s32", "u8", "f32"])
def test_remainder_of_a_remainder_by_the_same_divisor(element_type):   # RepeatedRemainder
    assert root_form(f"""
  p = {element_type}[1000] parameter(0)
  q = {element_type}[1000] parameter(1)
  r = {element_type}[1000] remainder(p, q)
  ROOT rr = {element_type}[1000] remainder(r, q)""") == "remainder(p0, p1)"


def test_sum_of_negations_is_the_negated_sum():                  # ReduceOfNegate
    out = optimized("""
  p = f32[15,7] parameter(0)
  n = f32[15,7] negate(p)
  zero = f32[] constant(0)
  ROOT r = f32[15] reduce(n, zero), dimensions={1}, to_apply=add""", computations=ADD)
    assert form(out.entry.root) == "negate(reduce(p0, -0))"      # -(x + -0) is -x + 0


@pytest.mark.parametrize("element_type, size, divisor, plus, expected", [
    ("s32", 5, 5, False, "iota()"),                                    # RemainderOfIota
    ("s32", 6, 5, False, "remainder(iota(), 5)"),
    ("s32", 5, 5, True, "iota()"),                                     # RemainderOfNPlusIota
    ("s8", 126, 5, True, "remainder(add(iota(), 5), 5)"),              # ...Overflow: 125 + 5
    ("s32", 5, -5, True, "remainder(add(iota(), -5), -5)")])           # sign of the dividend
def test_remainder_of_an_iota_by_a_constant(element_type, size, divisor, plus, expected):
    t = f"{element_type}[{size}]"
    sum_ = f"sum = {t} add(iota, c)" if plus else f"sum = {t} copy(iota)"
    assert root_form(f"""
  iota = {t} iota(), iota_dimension=0
  five = {element_type}[] constant({divisor})
  c = {t} broadcast(five), dimensions={{}}
  {sum_}
  ROOT r = {t} remainder(sum, c)""") == expected
