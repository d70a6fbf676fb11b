"""Rewrites of XLA's algebraic simplifier, as our default rules do them: HLO text in (the
modules of XLA's algebraic_simplifier_test.cc, by test name), the expected structure out,
and the same function before and after (test_rules_families.optimized checks it with the
interpreter on random inputs). One section per rewrite family; append new families."""
from __future__ import annotations

import pytest

import hlo_opt
from hlo_opt.egraph.pipeline import prove_equivalent
from test_rules_families import ADD, module, opcodes, optimized


def ops_left(m: hlo_opt.Module) -> set[str]:
    return set(opcodes(m)) - {"parameter", "constant", "broadcast"}


def root_constant(m: hlo_opt.Module):
    """The value of the root's constant operand (a scalar or a broadcast of one)."""
    [c] = [o for o in m.entry.root.operands if o.opcode in ("constant", "broadcast")]
    while c.opcode == "broadcast":
        c = c.operands[0]
    return c.literal.item()


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


# --- reassociation and merging of constants (arithmetic.rules) ---------------------------

def two_constants(op: str) -> tuple[str, set[str]]:
    """(p0 op 2) op 3 with broadcast constants, element type T; the op is all that stays."""
    return f"""
  p0 = T[4] parameter(0)
  c0 = T[] constant(2)
  b0 = T[4] broadcast(c0), dimensions={{}}
  c1 = T[] constant(3)
  b1 = T[4] broadcast(c1), dimensions={{}}
  r0 = T[4] {op}(p0, b0)
  ROOT r1 = T[4] {op}(r0, b1)""", {op}


CONSTANT_CHAINS = {   # XLA test -> (body with element type T, the opcodes left)
    "MultiplyReassociateMergeConstants": two_constants("multiply"),
    "AddReassociateMergeBroadcastedConstants": two_constants("add"),
    "SubAddReassociateMergeConstants": ("""
  p0 = T[] parameter(0)
  c0 = T[] constant(1)
  c1 = T[] constant(2)
  s = T[] subtract(c0, p0)
  ROOT a = T[] add(s, c1)""", {"subtract"}),
    "MultiplyChain": ("""
  p0 = T[] parameter(0)
  p1 = T[] parameter(1)
  c = T[] constant(2)
  d = T[] constant(4)
  x = T[] multiply(p0, c)
  y = T[] multiply(p1, d)
  ROOT z = T[] multiply(x, y)""", {"multiply"}),
}


@pytest.mark.parametrize("test", sorted(CONSTANT_CHAINS))
def test_constants_merge_exactly_for_integers_and_in_fast_mode_for_floats(test):
    body, left = CONSTANT_CHAINS[test]
    ints = optimized(body.replace("T[", "s32["))
    assert ops_left(ints) == left and opcodes(ints).count("constant") == 1
    exact = optimized(body.replace("T[", "f32["))          # x*2*3 may overflow where x*6 does not
    assert opcodes(exact).count("constant") == 2
    fast = optimized(body.replace("T[", "f32["), fp_mode="fast")
    assert ops_left(fast) == left and opcodes(fast).count("constant") == 1


def test_merged_constants_are_folded():
    out = optimized(CONSTANT_CHAINS["MultiplyChain"][0].replace("T[", "s32["))
    assert root_constant(out) == 8


FACTOR = """
  p0 = T[8] parameter(0)
  p1 = T[8] parameter(1)
  p2 = T[8] parameter(2)
  x = T[8] multiply(p0, p2)
  y = T[8] multiply(p1, p2)
  ROOT sum = T[8] add(x, y)"""


def test_common_factor_is_taken_out_of_integer_sums():          # FactorIntegerAddition
    out = optimized(FACTOR.replace("T[", "s32["))
    assert opcodes(out).count("multiply") == 1 and out.entry.root.opcode == "multiply"


@pytest.mark.parametrize("dtype", ["f32", "bf16"])  # FactorFpAddition(WithBroadcast, Bfloat16)
def test_float_factoring_needs_fast_mode(dtype):
    body = f"""
  p0 = {dtype}[4] parameter(0)
  p1 = {dtype}[4] parameter(1)
  c = {dtype}[] constant(0.125)
  b = {dtype}[4] broadcast(c), dimensions={{}}
  x = {dtype}[4] multiply(p0, b)
  y = {dtype}[4] multiply(p1, b)
  ROOT sum = {dtype}[4] add(x, y)"""
    assert opcodes(optimized(body)).count("multiply") == 2       # x*c + y*c overflows apart
    fast = optimized(body, fp_mode="fast")
    assert opcodes(fast).count("multiply") == 1 and fast.entry.root.opcode == "multiply"


def test_regrouping_stays_bounded_on_long_products_of_constants():
    # Every factor a constant times the previous product; x*0 = 0 in fast mode makes
    # classes of constants that regrouping must not mine for new constants.
    lines = ["  p = f32[4] parameter(0)", "  z = f32[] constant(0)",
             "  zs = f32[4] broadcast(z), dimensions={}", "  m0 = f32[4] multiply(p, zs)"]
    for i in range(1, 12):
        lines += [f"  c{i} = f32[] constant({i + 1})",
                  f"  b{i} = f32[4] broadcast(c{i}), dimensions={{}}",
                  f"  m{i} = f32[4] multiply(m{i - 1}, b{i})"]
    lines += ["  ROOT r = f32[4] add(m11, p)"]
    out, report = hlo_opt.optimize(module("\n".join(lines)), rules="default", fp_mode="fast",
                                   fusion=False, stats=True)
    assert report.stop == "saturated" and report.enodes < 400     # 253: quadratic in the length
    assert ops_left(out) == set()                             # p + 0 = p


# --- strength reduction (strength.rules, arithmetic.rules, math.rules) --------------------

def by_power_of_two(op: str, dtype: str, n: int = 8) -> str:
    return f"""
  p = {dtype}[4] parameter(0)
  c = {dtype}[] constant({n})
  b = {dtype}[4] broadcast(c), dimensions={{}}
  ROOT r = {dtype}[4] {op}(p, b)"""


def test_unsigned_division_by_a_power_of_two_is_a_shift():   # UnsignedDivideByPowerOf2
    out = optimized(by_power_of_two("divide", "u32"))
    assert out.entry.root.opcode == "shift-right-logical" and root_constant(out) == 3


def test_unsigned_remainder_by_a_power_of_two_is_a_mask():   # UnsignedRemainderByPowerOf2
    out = optimized(by_power_of_two("remainder", "u32"))
    assert out.entry.root.opcode == "and" and root_constant(out) == 7


def test_other_divisors_stay_divisions():
    assert "divide" in opcodes(optimized(by_power_of_two("divide", "u32", n=6)))
    assert "remainder" in opcodes(optimized(by_power_of_two("remainder", "u32", n=6)))


SIGNED = {  # the sign-corrected forms of XLA's SignedDivideByPowerOf2 / SignedRemainderByPowerOf2
    "divide": "shift-right-logical(a, k3)", "remainder": "and(a, k7)"}


@pytest.mark.parametrize("op", sorted(SIGNED))
def test_signed_division_by_a_power_of_two_rounds_toward_zero(op):
    expected = module(f"""
  p = s32[4] parameter(0)
  zero = s32[] constant(0)
  zs = s32[4] broadcast(zero), dimensions={{}}
  neg = pred[4] compare(p, zs), direction=LT
  a = s32[4] abs(p)
  three = s32[] constant(3)
  k3 = s32[4] broadcast(three), dimensions={{}}
  seven = s32[] constant(7)
  k7 = s32[4] broadcast(seven), dimensions={{}}
  q = s32[4] {SIGNED[op]}
  nq = s32[4] negate(q)
  ROOT r = s32[4] select(neg, nq, q)""")
    proved, _ = prove_equivalent(module(by_power_of_two(op, "s32")), expected)
    assert proved
    optimized(by_power_of_two(op, "s32", n=1024))        # the interpreter agrees


def test_division_by_a_power_of_two_float_is_an_exact_multiplication():
    out = optimized(by_power_of_two("divide", "f32", n=256))   # DivideByBroadcastedConstant
    assert out.entry.root.opcode == "multiply" and root_constant(out) == 2.0 ** -8
    assert "divide" in opcodes(optimized(by_power_of_two("divide", "f32", n=3)))
    tiny = optimized(by_power_of_two("divide", "f32", n=2.0 ** -140))  # 1/c is no f32
    assert "divide" in opcodes(tiny)


SQRT_FAMILY = {  # XLA test -> (body, [strict], [fast]: the opcodes left in each mode)
    "PowHalf": ("""
  p0 = f32[1,32] parameter(0)
  c0 = f32[] constant(0.5)
  br0 = f32[1,32] broadcast(c0), dimensions={}
  abs0 = f32[1,32] abs(p0)
  ROOT pow = f32[1,32] power(abs0, br0)""", {"abs", "sqrt"}, {"abs", "sqrt"}),
    "SquareOfAbs": ("""
  p = f32[] parameter(0)
  a = f32[] abs(p)
  ROOT z = f32[] multiply(a, a)""", {"multiply"}, {"multiply"}),
    "AbsEliminationMultiply": ("""
  p = f32[32] parameter(0)
  m = f32[32] multiply(p, p)
  ROOT a = f32[32] abs(m)""", {"multiply"}, {"multiply"}),
    "RsqrtDivide": ("""
  p0 = f32[1,32] parameter(0)
  abs0 = f32[1,32] abs(p0)
  c1 = f32[] constant(1)
  b1 = f32[1,32] broadcast(c1), dimensions={}
  d = f32[1,32] divide(b1, abs0)
  ROOT r = f32[1,32] rsqrt(d)""", {"abs", "divide", "rsqrt"}, {"abs", "sqrt"}),
    "RsqrtOfRPower2": ("""
  p0 = f32[1,32] parameter(0)
  abs0 = f32[1,32] abs(p0)
  c1 = f32[] constant(-2)
  b = f32[1,32] broadcast(c1), dimensions={}
  pw = f32[1,32] power(abs0, b)
  ROOT r = f32[1,32] rsqrt(pw)""", {"abs", "power", "rsqrt"}, {"abs"}),
    "MultiplySelfSqrt": ("""
  p0 = f32[1,32] parameter(0)
  abs0 = f32[1,32] abs(p0)
  s = f32[1,32] sqrt(abs0)
  ROOT m = f32[1,32] multiply(s, s)""", {"abs", "sqrt", "multiply"}, {"abs"}),
    "SqrtOfSelfMultiply": ("""
  p0 = f32[32] parameter(0)
  m0 = f32[32] multiply(p0, p0)
  ROOT s0 = f32[32] sqrt(m0)""", {"multiply", "sqrt"}, {"abs"}),
}


@pytest.mark.parametrize("test", sorted(SQRT_FAMILY))
def test_roots_and_powers_simplify_as_far_as_the_mode_allows(test):
    body, strict, fast = SQRT_FAMILY[test]
    assert ops_left(optimized(body)) == strict
    assert ops_left(optimized(body, fp_mode="fast")) == fast


def test_a_product_with_a_converted_predicate_is_a_select():     # MultiplyOfConvertedPred
    product = """
  p = pred[2,2] parameter(0)
  cv = T[2,2] convert(p)
  x = T[2,2] parameter(1)
  ROOT m = T[2,2] multiply(x, cv)"""
    select = """
  p = pred[2,2] parameter(0)
  x = T[2,2] parameter(1)
  z = T[] constant(0)
  zs = T[2,2] broadcast(z), dimensions={}
  ROOT s = T[2,2] select(p, x, zs)"""
    ints, floats = ([module(text.replace("T[", f"{t}[")) for text in (product, select)]
                    for t in ("s32", "f32"))
    assert prove_equivalent(*ints)[0]
    assert not prove_equivalent(*floats)[0]                     # inf * 0 = NaN
    assert prove_equivalent(*floats, fp_mode="fast")[0]


def test_dividing_a_converted_predicate_takes_one_reciprocal():   # ScalarDividePredicate
    before = module("""
  p0 = pred[2] parameter(0)
  cvt = f32[2] convert(p0)
  p1 = f32[] parameter(1)
  b = f32[2] broadcast(p1), dimensions={}
  ROOT d = f32[2] divide(cvt, b)""")
    after = module("""
  p0 = pred[2] parameter(0)
  cvt = f32[2] convert(p0)
  p1 = f32[] parameter(1)
  one = f32[] constant(1)
  r = f32[] divide(one, p1)
  b = f32[2] broadcast(r), dimensions={}
  ROOT m = f32[2] multiply(cvt, b)""")
    assert not prove_equivalent(before, after)[0]          # 0 / 1e-45 = 0, 0 * inf = NaN
    assert prove_equivalent(before, after, fp_mode="fast")[0]


# --- dot and convolution (dot.rules) --------------------------------------------------------

def dot_form(body: str, fp_mode: str = "fast") -> str:
    """The optimized root as a formula, with the dot's dimension numbers checked by the
    interpreter (optimized compares both functions on random inputs)."""
    return root_form(body, fp_mode=fp_mode)


@pytest.mark.parametrize("body", [
    """
  lhs = f32[3,4,5] parameter(0)
  rhs = f32[6,3,4] parameter(1)
  dot = f32[5,6] dot(lhs, rhs), lhs_contracting_dims={0,1}, rhs_contracting_dims={1,2}
  ROOT t = f32[6,5] transpose(dot), dimensions={1,0}""",                   # TransposeOfDot
    """
  lhs = f32[2,3,4,5] parameter(0)
  rhs = f32[2,3,6,4] parameter(1)
  dot = f32[2,3,5,6] dot(lhs, rhs), lhs_batch_dims={0,1}, rhs_batch_dims={0,1},
        lhs_contracting_dims={2}, rhs_contracting_dims={3}
  ROOT t = f32[2,3,6,5] transpose(dot), dimensions={0,1,3,2}"""])         # TransposeOfBatchDot
def test_a_transposed_dot_swaps_its_operands(body):
    assert dot_form(body) == "dot(p1, p0)"
    assert dot_form(body, fp_mode="xla") == "transpose(dot(p0, p1))"  # the GEMM sums in another order


def test_a_sum_over_batch_dims_of_a_dot_is_a_contraction():  # ReduceOfBatchDotToContractingDimension
    out = optimized("""
  p0 = f32[6,4,5,3] parameter(0)
  p1 = f32[4,6,3,7] parameter(1)
  d = f32[6,4,5,7] dot(p0, p1), lhs_batch_dims={0,1}, rhs_batch_dims={1,0},
      lhs_contracting_dims={3}, rhs_contracting_dims={2}
  c = f32[] constant(0)
  ROOT r = f32[4,5,7] reduce(d, c), dimensions={0}, to_apply=add""", ADD, fp_mode="fast")
    root = out.entry.root
    assert form(root) == "dot(p0, p1)"
    assert root.attrs["lhs_contracting_dims"] == (3, 0) and root.attrs["lhs_batch_dims"] == (1,)


@pytest.mark.parametrize("slice_, expected", [
    ("f32[8,64] slice(dot), slice={[0:8],[0:64]}", "dot(slice(p0), p1)"),      # SliceDotReorder
    ("f32[2,16] slice(dot), slice={[0:8:4],[0:64:4]}",                          # ...WithStrides
     "dot(slice(p0), slice(p1))")])
def test_a_slice_of_a_dot_slices_its_operands(slice_, expected):
    assert dot_form(f"""
  a = f32[64,2] parameter(0)
  b = f32[2,64] parameter(1)
  dot = f32[64,64] dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  ROOT s = {slice_}""") == expected


def test_a_reversed_contracting_dim_moves_to_the_smaller_operand():   # DotReverseLeftReorder
    body = """
  a = f32[64,8] parameter(0)
  b = f32[8,2] parameter(1)
  r = f32[64,8] reverse(a), dimensions={1}
  ROOT d = f32[64,2] dot(r, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}"""
    assert dot_form(body) == "dot(p0, reverse(p1))"
    assert dot_form(body, fp_mode="xla") == "dot(reverse(p0), p1)"


@pytest.mark.parametrize("body, expected", [
    ("""
  zero = f32[] constant(0)
  a = f32[8,5] parameter(0)
  b = f32[10,6] parameter(1)
  pad = f32[8,10] pad(a, zero), padding=0_0x0_5
  ROOT dot = f32[8,6] dot(pad, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}""",
     "dot(p0, slice(p1))"),                                                   # DotPadLeftReorder
    ("""
  zero = f32[] constant(0)
  a = f32[4,24] parameter(0)
  b = f32[8,8] parameter(1)
  pad = f32[24,24] pad(b, zero), padding=8_8x8_8
  ROOT dot = f32[4,24] dot(a, pad), lhs_contracting_dims={1}, rhs_contracting_dims={0}""",
     "dot(slice(p0), pad(p1, 0))")])                                          # DotPadRightReorder
def test_zero_padding_of_a_contracting_dim_slices_the_other_operand(body, expected):
    assert dot_form(body) == expected


def test_a_sum_over_free_dims_of_a_dot_sums_the_operand_first():      # ReduceDotReorder
    out = optimized("""
  a = f32[2,3,16,5] parameter(0)
  b = f32[3,5,32] parameter(1)
  d = f32[2,16,32] dot(a, b), lhs_contracting_dims={1,3}, rhs_contracting_dims={0,1}
  c = f32[] constant(0)
  ROOT r = f32[2,32] reduce(d, c), dimensions={1}, to_apply=add""", ADD, fp_mode="fast")
    assert form(out.entry.root) == "dot(reduce(p0, 0), p1)"


@pytest.mark.parametrize("body, expected", [
    ("""
  a = f32[] parameter(0)
  b = f32[64,64] parameter(1)
  bc = f32[4,8,64] broadcast(a), dimensions={}
  ROOT d = f32[4,8,64] dot(bc, b), lhs_contracting_dims={2}, rhs_contracting_dims={0}""",
     "dot(p0, reduce(p1, 0))"),                                         # DotBroadcastLeftReorder
    ("""
  a = f32[16,20,4] parameter(0)
  b = f32[16,16] parameter(1)
  bc = f32[16,20,16] broadcast(b), dimensions={0,2}
  ROOT d = f32[4,16] dot(a, bc), lhs_contracting_dims={0,1}, rhs_contracting_dims={0,1}""",
     "dot(reduce(p0, 0), p1)")])                                        # DotBroadcastRightReorder
def test_contracting_a_broadcast_dim_sums_the_other_operand_first(body, expected):
    assert dot_form(body, fp_mode="fast") == expected


# (a b) c for a m x k, b k x m and c m x k matrices.
MATRIX_CHAIN = """
  a = f32[{m},{k}] parameter(0)
  b = f32[{k},{m}] parameter(1)
  c = f32[{m},{k}] parameter(2)
  inner = f32[{m},{m}] dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  ROOT outer = f32[{m},{k}] dot(inner, c), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}"""


@pytest.mark.parametrize("body, expected", [
    ("""
  a = f32[2,3,4,5] parameter(0)
  b = f32[6,7,5] parameter(1)
  c = f32[4,7] parameter(2)
  inner = f32[2,3,4,6,7] dot(a, b), lhs_contracting_dims={3}, rhs_contracting_dims={2}
  ROOT outer = f32[2,3,6] dot(inner, c), lhs_contracting_dims={2,4}, rhs_contracting_dims={0,1}""",
     "dot(p0, dot(p1, p2))"),                                           # DotAssociativeReorder
    ("""
  a = f32[5,150,5] parameter(0)
  b = f32[5,5,5] parameter(1)
  c = f32[5,5,5] parameter(2)
  inner = f32[5,150,5] dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2},
          rhs_batch_dims={0}, rhs_contracting_dims={2}
  ROOT outer = f32[5,150,5] dot(inner, c), lhs_batch_dims={0}, lhs_contracting_dims={2},
               rhs_batch_dims={0}, rhs_contracting_dims={2}""",
     "dot(p0, dot(p1, p2))"),                                           # DotLeftDotSharedBatchReorder
    ("""
  a = f32[2,3,3] parameter(0)
  b = f32[2,3,3] parameter(1)
  c = f32[2,3,16] parameter(2)
  inner = f32[2,3,16] dot(b, c), lhs_batch_dims={0}, lhs_contracting_dims={2},
          rhs_batch_dims={0}, rhs_contracting_dims={1}
  ROOT outer = f32[2,3,16] dot(a, inner), lhs_batch_dims={0}, lhs_contracting_dims={2},
               rhs_batch_dims={0}, rhs_contracting_dims={1}""",
     "dot(dot(p0, p1), p2)"),                                           # DotRightDotSharedBatchReorder
    (MATRIX_CHAIN.format(m=16, k=2), "dot(p0, dot(p1, p2))"),   # 1024 + 1024 flops vs 128 + 128
    (MATRIX_CHAIN.format(m=2, k=16), "dot(dot(p0, p1), p2)")])  # already the cheaper order
def test_a_chain_of_dots_is_contracted_in_the_cheaper_order(body, expected):
    assert dot_form(body) == expected
    assert dot_form(body, fp_mode="xla").count("dot") == 2


def test_a_dot_without_contraction_is_an_outer_product():    # CanDisableDotToMultiplyRewrite
    dot = module("""
  x = f32[64] parameter(0)
  y = f32[64] parameter(1)
  ROOT d = f32[64,64] dot(x, y), lhs_contracting_dims={}, rhs_contracting_dims={}""")
    product = module("""
  x = f32[64] parameter(0)
  y = f32[64] parameter(1)
  bx = f32[64,64] broadcast(x), dimensions={0}
  by = f32[64,64] broadcast(y), dimensions={1}
  ROOT m = f32[64,64] multiply(bx, by)""")
    proved, report = prove_equivalent(dot, product, rules="default")
    assert proved and report.matches["dot_outer_product"] >= 1


# A 1-D convolution of p0 [16,8,6] by p1 [16,8,4] over the 16 positions, one operand scaled.
SCALED_CONVOLUTION = """
  p0 = f32[16,8,6] parameter(0)
  p1 = f32[16,8,4] parameter(1)
  h = f32[] constant(0.5)
  hs = f32[16,8,{n}] broadcast(h), dimensions={{}}
  ms = f32[16,8,{n}] multiply({scaled}, hs)
  ROOT c = f32[6,4,1] convolution({lhs}, {rhs}), window={{size=16}}, dim_labels=0fb_0io->bf0"""


@pytest.mark.parametrize("body, before", [
    (SCALED_CONVOLUTION.format(n=6, scaled="p0", lhs="ms", rhs="p1"),
     "convolution(multiply(p0, 0.5), p1)"),
    (SCALED_CONVOLUTION.format(n=4, scaled="p1", lhs="p0", rhs="ms"),
     "convolution(p0, multiply(p1, 0.5))")])
def test_a_scalar_factor_of_a_convolution_operand_scales_the_result(body, before):
    # ScalarMultiplyReduction (XLA's test also lifts the factor out of a longer product)
    assert dot_form(body) == "multiply(convolution(p0, p1), 0.5)"
    assert dot_form(body, fp_mode="xla") == before


def test_a_scalar_factor_of_a_dot_operand_scales_the_smaller_result():
    assert dot_form("""
  x = f32[64,32] parameter(0)
  y = f32[32,2] parameter(1)
  h = f32[] constant(0.5)
  hs = f32[64,32] broadcast(h), dimensions={}
  xs = f32[64,32] multiply(x, hs)
  ROOT d = f32[64,2] dot(xs, y), lhs_contracting_dims={1}, rhs_contracting_dims={0}""") \
        == "multiply(dot(p0, p1), 0.5)"


def test_a_true_convolution_with_the_larger_operand_as_kernel_swaps_them():   # SwapConvOperands
    body = """
  a = f64[3,3,4,4] parameter(0)
  b = f64[8,6,6,4] parameter(1)
  ROOT c = f64[8,8,8,4] convolution(a, b), window={size=6x6 pad=5_5x5_5 rhs_reversal=1x1},
           dim_labels=01bf_o01i->f01b"""          # f64: the sums cancel, summed in another order
    root = optimized(body, fp_mode="fast").entry.root
    assert form(root) == "convolution(p1, p0)"
    window = root.attrs["window"]
    assert window.size == (3, 3) and window.pad == ((2, 2), (2, 2)) and all(window.rhs_reversal)
    assert dot_form(body, fp_mode="xla") == "convolution(p0, p1)"
