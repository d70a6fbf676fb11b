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


# --- gather and scatter (gather_scatter.rules) ---------------------------------------------

def attr_of(m: hlo_opt.Module, opcode: str, name: str):
    [value] = [i.attrs[name] for i in m.entry.instructions if i.opcode == opcode]
    return value


def test_gather_from_one_element_is_a_broadcast():              # GatherOfScalarToBroadcast
    after = optimized("""
  o = f32[1,1] parameter(0)
  i = s32[100,2] parameter(1)
  ROOT g = f32[100] gather(o, i), collapsed_slice_dims={0,1}, start_index_map={0,1},
    index_vector_dim=1, offset_dims={}, slice_sizes={1,1}""")
    assert after.entry.root.opcode == "broadcast"
    assert form(after.entry.root) == "reshape(p0)"          # form() shows a splat's scalar


GATHER_OF_PAD = """
  x = f32[6,2] parameter(0)
  zero = f32[] constant(0)
  pad = f32[6,8] pad(x, zero), padding=0_0x0_6
  i = s32[4,1] parameter(1)
  ROOT g = f32[4,8] gather(pad, i), offset_dims={1}, collapsed_slice_dims={0},
    start_index_map={0}, index_vector_dim=1, slice_sizes={1,SIZE}"""


def test_gather_of_a_pad_pads_the_gather_of_the_unpadded_array():          # GatherOfPad
    after = optimized(GATHER_OF_PAD.replace("SIZE", "8"))
    assert form(after.entry.root) == "pad(gather(p0, p1), 0)"
    assert attr_of(after, "gather", "slice_sizes") == (1, 2)
    assert after.entry.root.attrs["padding"] == ((0, 0, 0), (0, 6, 0))


def test_a_gather_window_that_ends_inside_the_padding_stays():
    body = GATHER_OF_PAD.replace("SIZE", "5").replace("f32[4,8] gather", "f32[4,5] gather")
    assert form(optimized(body).entry.root) == "gather(pad(p0, 0), p1)"


def test_gather_of_a_reshaped_pad():                                       # GatherOfReshapeOfPad
    after = optimized("""
  x = f32[2,3,2] parameter(0)
  zero = f32[] constant(0)
  pad = f32[2,3,8] pad(x, zero), padding=0_0x0_0x0_6
  r = f32[6,8] reshape(pad)
  i = s32[4,1] parameter(1)
  ROOT g = f32[4,8] gather(r, i), offset_dims={1}, collapsed_slice_dims={0},
    start_index_map={0}, index_vector_dim=1, slice_sizes={1,8}""")
    assert form(after.entry.root) == "pad(gather(reshape(p0), p1), 0)"


PADDED_BATCH = """
  x = f32[4,3,5] parameter(0)
  zero = f32[] constant(0)
  operand = f32[6,3,7] pad(x, zero), padding=2_0x0_0x0_2
  j = s32[4,9,1] parameter(1)
  s0 = s32[] constant(0)
  indices = s32[INDICES] pad(j, s0), padding=JPAD
  ROOT g = f32[RESULT] gather(operand, indices), offset_dims={2}, collapsed_slice_dims={1},
    start_index_map={1}, index_vector_dim=2, slice_sizes={1,1,7},
    operand_batching_dims={0}, start_indices_batching_dims={0}"""


def test_gather_of_pads_on_paired_batching_dims():         # GatherOfPadWithPaddedBatchDims
    after = optimized(PADDED_BATCH.replace("INDICES", "6,9,1").replace("RESULT", "6,9,7")
                      .replace("JPAD", "2_0x0_0x0_0"))
    assert form(after.entry.root) == "pad(gather(p0, p1), 0)"
    assert after.entry.root.attrs["padding"] == ((2, 0, 0), (0, 0, 0), (0, 2, 0))


@pytest.mark.parametrize("indices_padding, indices, result", [
    ("1_1x0_0x0_0", "6,9,1", "6,9,7"),      # GatherOfPadStartIndicesPaddedDifferently
    ("2_0x1_0x0_0", "6,10,1", "6,10,7"),    # GatherOfPadStartIndicesPaddedMoreDims
])
def test_indices_padded_unlike_the_operand_stay_a_gather_of_pads(indices_padding, indices, result):
    after = optimized(PADDED_BATCH.replace("INDICES", indices).replace("RESULT", result)
                      .replace("JPAD", indices_padding))
    assert form(after.entry.root) == "gather(pad(p0, 0), pad(p1, 0))"


SCATTER_ADDS = """
  z = T[] constant(0)
  init = T[OPERAND] broadcast(z), dimensions={}
  shared = T[OPERAND] parameter(0)
  index0 = s32[I0] parameter(1)
  index1 = s32[I1] parameter(2)
  update0 = T[U0] parameter(3)
  update1 = T[U1] parameter(4)
  scatter.0 = T[OPERAND] scatter(init, index0, update0), to_apply=add, DNUMS
  scatter.1 = T[OPERAND] scatter(init, index1, update1), to_apply=add, DNUMS
  add.0 = T[OPERAND] add(shared, scatter.0)
  ROOT add.1 = T[OPERAND] add(add.0, scatter.1)"""
ADD_T = ADD.replace("f32", "T")
ONE_SCATTER = "scatter(p0, concatenate(p1, p2), concatenate(p3, p4))"


def scatter_adds(dtype: str, **shapes) -> tuple[str, str]:
    body = SCATTER_ADDS
    for name, value in shapes.items():
        body = body.replace(name, value)
    return body.replace("T[", f"{dtype}["), ADD_T.replace("T[", f"{dtype}[")


def simple_scatter_adds(dtype: str) -> tuple[str, str]:
    return scatter_adds(dtype, OPERAND="10,4", I0="5", I1="3", U0="5,4", U1="3,4",
                        DNUMS="update_window_dims={1}, inserted_window_dims={0}, "
                              "scatter_dims_to_operand_dims={0}, index_vector_dim=1")


def test_integer_scatter_adds_into_a_sum_become_one_scatter():  # ScatterAddCombined
    after = optimized(*simple_scatter_adds("s32"))
    assert form(after.entry.root) == ONE_SCATTER


def test_float_scatter_adds_combine_in_fast_mode_only():        # ScatterAddCombined
    assert opcodes(optimized(*simple_scatter_adds("f32"))).count("scatter") == 2
    after = optimized(*simple_scatter_adds("f32"), fp_mode="fast")
    assert form(after.entry.root) == ONE_SCATTER


def test_scatter_adds_with_batching_dims_join_after_them():     # ScatterAddCombinedWithBatchDim
    # (a large operand: one scatter saves a pass over it, more than the joins cost)
    after = optimized(*scatter_adds(
        "s32", OPERAND="3,100,4", I0="3,1,4,5", I1="3,1,2,5", U0="3,4,4,5", U1="3,2,4,5",
        DNUMS="update_window_dims={2}, inserted_window_dims={1}, "
              "scatter_dims_to_operand_dims={1}, index_vector_dim=1, "
              "input_batching_dims={0}, scatter_indices_batching_dims={0}"))
    joined = [i for i in after.entry.instructions if i.opcode == "concatenate"]
    assert form(after.entry.root) == ONE_SCATTER
    assert [(c.operands[0].parameter_number, c.attrs["dimensions"]) for c in joined] == \
        [(1, (2,)), (3, (1,))]
# --- layout and data movement (layout.rules, convert.rules; with MultiplyBroadcastReassoc,
# SinkCbrtThroughMax from arithmetic.rules and minmax_logic.rules) --------------------------

def test_a_transpose_of_size_one_dims_is_a_reshape():                # TransposeIsReshape
    out = optimized("""
  p = f32[10] parameter(0)
  r = f32[1,1,10] reshape(p)
  t = f32[10,1,1] transpose(r), dimensions={2,1,0}
  ROOT back = f32[10] reshape(t)""")
    assert opcodes(out) == ["parameter"]
    swapped = optimized("""
  p = f32[2,1,3] parameter(0)
  ROOT t = f32[3,1,2] transpose(p), dimensions={2,1,0}""")
    assert swapped.entry.root.opcode == "transpose"                  # 2 and 3 trade places


def test_bitcasts_that_undo_each_other_vanish():                     # BitcastUndoesBitcast
    out = optimized("""
  p0 = f32[32]{0} parameter(0)
  b0 = f32[1,32]{1,0} bitcast(p0)
  b1 = f32[32]{0} bitcast(b0)
  ROOT out = f32[1,32,32]{2,1,0} broadcast(b1), dimensions={1}""")
    assert opcodes(out) == ["parameter", "broadcast"]


def test_a_chain_of_bitcasts_through_another_layout_is_one_bitcast():
    # the middle bitcast reads the bytes column-major: the chain is one reinterpretation
    out = optimized("""
  p = f32[2,3]{1,0} parameter(0)
  b0 = f32[3,2]{0,1} bitcast(p)
  ROOT b1 = f32[6]{0} bitcast(b0)""")
    assert opcodes(out) == ["parameter", "bitcast"]
    assert out.entry.root.shape.to_text() == "f32[6]{0}"


def test_bitcast_converts_around_a_concatenate_cancel():         # SimplifyRedundantBitcastConvert
    out = optimized("""
  p0 = s32[10] parameter(0)
  p1 = s32[10] parameter(1)
  b0 = u32[10] bitcast-convert(p0)
  b1 = u32[10] bitcast-convert(p1)
  c = u32[20] concatenate(b0, b1), dimensions={0}
  ROOT out = s32[20] bitcast-convert(c)""")
    assert opcodes(out) == ["parameter", "parameter", "concatenate"]


@pytest.mark.parametrize("layout, expected", [
    ("{0,1,2}", ["parameter"]),                                      # LayoutConstraintToNoop
    ("{2,0,1}", ["parameter", "copy"])])                             # LayoutConstraintToCopy
def test_a_layout_constraint_is_a_copy_into_its_layout(layout, expected):
    out = optimized(f"""
  p = f32[6,4,3]{{0,1,2}} parameter(0)
  ROOT c = f32[6,4,3]{layout} custom-call(p), custom_call_target="LayoutConstraint" """)
    assert opcodes(out) == expected
    assert out.entry.root.shape.to_text() == f"f32[6,4,3]{layout}"


def test_a_splat_operand_sinks_below_a_broadcast():   # ElementwiseSinkMultipleBroadcastsConstantMix
    out = optimized("""
  p0 = f32[4] parameter(0)
  c0 = f32[] constant(2)
  b0 = f32[4,2] broadcast(c0), dimensions={}
  b1 = f32[4,2] broadcast(p0), dimensions={0}
  ROOT m = f32[4,2] multiply(b1, b0)""")
    assert form(out.entry.root) == "broadcast(multiply(p0, 2))"
    assert out.entry.root.operands[0].shape.dims == (4,)


MULTIPLY_BROADCAST = """
  p0 = T[2,2] parameter(0)
  p1 = T[] parameter(1)
  two = T[] constant(2)
  c = T[2,2] broadcast(two), dimensions={}
  x = T[2,2] multiply(p0, c)
  y = T[2,2] broadcast(p1), dimensions={}
  ROOT z = T[2,2] multiply(y, x)"""


@pytest.mark.parametrize("element_type, fp_mode, expected", [     # MultiplyBroadcastReassoc
    ("s32", "strict", "multiply(p0, multiply(p1, 2))"),
    ("f32", "fast", "multiply(p0, multiply(p1, 2))"),
    ("f32", "xla", "multiply(p1, multiply(p0, 2))")])              # rounds differently
def test_a_constant_factor_joins_a_broadcast_factor(element_type, fp_mode, expected):
    body = MULTIPLY_BROADCAST.replace("T[", f"{element_type}[")
    assert root_form(body, fp_mode=fp_mode) == expected


@pytest.mark.parametrize("op", ["maximum", "minimum"])
def test_cube_roots_sink_below_max_and_min(op):                      # SinkCbrtThroughMax
    out = optimized(f"""
  a = bf16[17,96,120] parameter(0)
  b = bf16[17,96,120] parameter(1)
  ca = bf16[17,96,120] cbrt(a)
  cb = bf16[17,96,120] cbrt(b)
  ROOT m = bf16[17,96,120] {op}(ca, cb)""", fp_mode="strict")
    assert form(out.entry.root) == f"cbrt({op}(p0, p1))"


def test_a_copy_that_keeps_the_order_in_memory_is_a_bitcast():        # BitcastCopyChainSmall
    out = optimized("""
  p = f32[4,1,1,32,32]{3,4,0,1,2} parameter(0)
  c0 = f32[4,1,1,32,32]{4,3,0,2,1} copy(p)
  b = f32[1024,4,1,1]{0,3,2,1} bitcast(c0)
  ROOT c1 = f32[1024,4,1,1]{0,1,3,2} copy(b)""")
    assert form(out.entry.root) == "bitcast(copy(p0))"               # c0 reorders: it stays


def test_a_bitcast_that_transposes_a_broadcast_is_a_broadcast():    # TransposeBitcastOfBroadcast
    out = optimized("""
  p = f32[2,4]{1,0} parameter(0)
  b = f32[10,2,3,4]{3,2,1,0} broadcast(p), dimensions={1,3}
  ROOT t = f32[2,3,10,4]{3,1,0,2} bitcast(b)""")
    assert form(out.entry.root) == "broadcast(p0)"
    assert out.entry.root.attrs["dimensions"] == (0, 3)


def test_tiled_layouts_keep_their_bitcasts():           # like BitcastBroadcastDifferentLayout
    out = optimized("""
  p = f32[16]{0:T(8)} parameter(0)
  b = f32[16,8]{1,0:T(8,8)} broadcast(p), dimensions={0}
  ROOT c = f32[16,8]{1,0:T(8)} bitcast(b)""")
    assert opcodes(out) == ["parameter", "broadcast", "bitcast"]
# --- slicing & joining: slice, reverse, concatenate, pad (slicing.rules, layout.rules) -----

def slice_window(inst) -> list[tuple[int, int, int]]:
    return [tuple(d) for d in inst.attrs["slice"]]


PAD_3X4 = """
  p0 = f32[3,4] parameter(0)
  c = f32[] constant(7)
  pad = f32[8,10] pad(p0, c), padding=3_2x1_5
  ROOT s = {shape} slice(pad), slice={window}"""


@pytest.mark.parametrize("shape, window", [
    ("f32[1,1]", "{[2:3], [0:1]}"),                    # SliceOfPadLow: rows before p0
    ("f32[1,1]", "{[6:7], [9:10]}"),                   # SliceOfPadHigh: rows after p0
    ("f32[1,1]", "{[5:6], [9:10]}"),                   # SliceOfPadMidScalarConstant
    ("f32[2,2]", "{[0:8:4], [5:10:3]}")])              # strided, columns after p0
def test_slice_reading_only_padding_is_the_padding_value(shape, window):
    out = optimized(PAD_3X4.format(shape=shape, window=window))
    assert form(out.entry.root) == "7" and out.entry.root.opcode == "broadcast"


@pytest.mark.parametrize("shape, window, expected", [
    ("f32[2,3]", "{[4:6], [2:5]}", [(1, 3, 1), (1, 4, 1)]),      # SliceOfPad
    ("f32[1,1]", "{[5:6], [4:5]}", [(2, 3, 1), (3, 4, 1)]),      # SliceOfPadMidNonScalar
    ("f32[2,2]", "{[3:6:2], [1:5:3]}", [(0, 3, 2), (0, 4, 3)])])
def test_slice_reading_only_the_operand_slices_the_operand(shape, window, expected):
    out = optimized(PAD_3X4.format(shape=shape, window=window))
    assert form(out.entry.root) == "slice(p0)" and slice_window(out.entry.root) == expected


def test_slice_reading_operand_and_padding_keeps_the_pad():
    out = optimized(PAD_3X4.format(shape="f32[2,2]", window="{[2:4], [0:2]}"))
    assert "pad" in opcodes(out)


def test_slice_of_the_whole_padded_operand_is_the_operand():     # SliceOfPadMidScalar
    out = optimized("""
  p0 = f32[1,1] parameter(0)
  c = f32[] constant(0)
  pad = f32[8,10] pad(p0, c), padding=3_4x4_5
  ROOT s = f32[1,1] slice(pad), slice={[3:4], [4:5]}""")
    assert form(out.entry.root) == "p0"


def test_slice_of_interior_padding_keeps_the_pad():
    out = optimized("""
  p0 = f32[3] parameter(0)
  c = f32[] constant(0)
  pad = f32[7] pad(p0, c), padding=1_1_1
  ROOT s = f32[2] slice(pad), slice={[1:3]}""")
    assert "pad" in opcodes(out)


def test_slice_of_broadcast_slices_the_operand():                # SliceOfBroadcast(PreserveLayout)
    out = optimized("""
  p0 = f32[10,20] parameter(0)
  b = f32[10,30,20]{2,0,1} broadcast(p0), dimensions={0,2}
  ROOT s = f32[5,5,5]{2,0,1} slice(b), slice={[0:5:1], [5:25:4], [5:15:2]}""")
    root = out.entry.root
    assert form(root) == "broadcast(slice(p0))" and root.shape.layout.minor_to_major == (2, 0, 1)
    assert slice_window(root.operands[0]) == [(0, 5, 1), (5, 15, 2)]


@pytest.mark.parametrize("reversed_dims, shape, window, expected", [
    ("{0,2}", "f32[1,7,32]", "{[2:3:1], [0:7:1], [0:32:1]}", [(3, 4, 1), (0, 7, 1), (0, 32, 1)]),
    ("{0,1,2}", "f32[1,2,7]", "{[2:3:2], [0:7:4], [0:32:5]}", [(3, 4, 2), (2, 7, 4), (1, 32, 5)]),
    ("{1}", "f32[6,3,2]", "{[0:6:1], [1:6:2], [0:32:31]}", [(0, 6, 1), (1, 6, 2), (0, 32, 31)])])
def test_slice_of_reverse_is_reverse_of_mirrored_slice(reversed_dims, shape, window, expected):
    # SliceReverse, SliceReverseNonUnitEvenOddStrides (there over a pad the slice then skips)
    out = optimized(f"""
  p0 = f32[6,7,32] parameter(0)
  rev = f32[6,7,32] reverse(p0), dimensions={reversed_dims}
  ROOT s = {shape} slice(rev), slice={window}""")
    assert form(out.entry.root) == "reverse(slice(p0))"
    assert slice_window(out.entry.root.operands[0]) == expected


def test_reverse_of_reverse_reverses_the_dims_reversed_once():   # ShrinkNestedReverse
    out = optimized("""
  p0 = bf16[10,1,10,8] parameter(0)
  r0 = bf16[10,1,10,8] reverse(p0), dimensions={1,2,3}
  ROOT r1 = bf16[10,1,10,8] reverse(r0), dimensions={0,1,2}""")
    assert form(out.entry.root) == "reverse(p0)" and out.entry.root.attrs["dimensions"] == (0, 3)


def test_reverse_moves_through_an_op_with_a_splat():             # SwapConstantEwboWithReverse
    out = optimized("""
  p0 = bf16[10,1,10,8] parameter(0)
  c = bf16[] constant(1)
  b = bf16[10,1,10,8] broadcast(c), dimensions={}
  r0 = bf16[10,1,10,8] reverse(p0), dimensions={0}
  s = bf16[10,1,10,8] subtract(b, r0)
  ROOT r1 = bf16[10,1,10,8] reverse(s), dimensions={0}""")
    assert form(out.entry.root) == "subtract(1, p0)"


CONCAT_OF_THREE = """
  p0 = f32[2] parameter(0)
  p1 = f32[1] parameter(1)
  p2 = f32[3] parameter(2)
  concat = f32[6] concatenate(p0, p1, p2), dimensions={0}
  ROOT s = f32[%d] slice(concat), slice={[%d:%d]}"""


@pytest.mark.parametrize("start, limit, expected", [
    (2, 3, "p1"),                                           # SliceOfConcatScalarInput
    (4, 5, "slice(p2)"),                                    # SliceOfConcatNonScalarInput
    (0, 3, "concatenate(p0, p1)"), (2, 6, "concatenate(p1, p2)")])
def test_slice_of_concatenate_reads_only_the_operands_it_needs(start, limit, expected):
    out = optimized(CONCAT_OF_THREE % (limit - start, start, limit))
    assert form(out.entry.root) == expected


def test_slice_of_four_operand_concatenate():                     # SliceOfMultipleConcatOperands
    out = optimized("""
  p0 = f32[5,5] parameter(0)
  p1 = f32[5,5] parameter(1)
  p2 = f32[5,5] parameter(2)
  p3 = f32[5,5] parameter(3)
  c0 = f32[20,5] concatenate(p0, p1, p2, p3), dimensions={0}
  ROOT s0 = f32[8,5] slice(c0), slice={[6:14], [0:5]}""")
    assert form(out.entry.root) == "slice(concatenate(p1, p2))"
    assert slice_window(out.entry.root) == [(1, 9, 1), (0, 5, 1)]


@pytest.mark.parametrize("inner, outer", [("concatenate(p0, p1)", "concatenate(c0, p2)"),
                                          ("concatenate(p1, p2)", "concatenate(p0, c0)")])
def test_nested_concatenates_become_one(inner, outer):          # UnnestConcatenate
    out = optimized(f"""
  p0 = f32[2,10] parameter(0)
  p1 = f32[3,10] parameter(1)
  p2 = f32[4,10] parameter(2)
  c0 = f32[{7 if 'p2' in inner else 5},10] {inner}, dimensions={{0}}
  ROOT c1 = f32[9,10] {outer}, dimensions={{0}}""")
    assert form(out.entry.root) == "concatenate(p0, p1, p2)"


def test_copies_along_a_unit_dimension_are_a_broadcast():       # ConcatToBroadcast (2 copies)
    out = optimized("""
  p = f32[64,1,256] parameter(0)
  ROOT concat = f32[64,2,256] concatenate(p, p), dimensions={1}""")
    assert form(out.entry.root) == "broadcast(reshape(p0))"


@pytest.mark.parametrize("operand, dims, padding, expected", [
    # BroadcastAndPadReorder(WithUse), SimplifyShardedPad: the pad on a [32] broadcast
    ("pred[]", "{}", "0_4064x0_0x0_0", "broadcast(pad(1, 0))"),
    # BroadcastAndPadReorderWithNonScalar: the pad on the operand
    ("pred[32]", "{0}", "0_4064x0_0x0_0", "broadcast(pad(p0, 0))")])
def test_pad_of_broadcast_pads_before_broadcasting(operand, dims, padding, expected):
    source = "c1" if operand == "pred[]" else "p0"
    out = optimized(f"""
  p0 = {operand} parameter(0)
  c1 = pred[] constant(true)
  b2 = pred[32,1,768] broadcast({source}), dimensions={dims}
  c3 = pred[] constant(false)
  ROOT p4 = pred[4096,1,768] pad(b2, c3), padding={padding}""")
    root = out.entry.root
    assert form(root) == expected and root.operands[0].shape.dims == (4096,)


def test_slices_reading_the_same_elements_are_one():           # SliceRedundantStrides
    out = optimized("""
  p0 = f32[6,7,32] parameter(0)
  a = f32[1,2,7] slice(p0), slice={[2:3:2], [0:7:4], [0:32:5]}
  b = f32[1,2,7] slice(p0), slice={[2:6:5], [0:5:4], [0:31:5]}
  ROOT t = (f32[1,2,7], f32[1,2,7]) tuple(a, b)""")
    assert opcodes(out).count("slice") == 1


# --- reduce and reduce-window (reduce.rules, reduce_window.rules) ----------------------------

def reducer(op: str, t: str = "f32") -> str:
    """A computation named `op` applying `op` to its two parameters."""
    return (f"{op} {{\n  a = {t}[] parameter(0)\n  b = {t}[] parameter(1)\n"
            f"  ROOT r = {t}[] {op}(a, b)\n}}\n")


def reduced_form(body: str, computations: str, fp_mode: str = "xla") -> str:
    return form(optimized(body, computations, fp_mode=fp_mode).entry.root)


def reduce_of_broadcast(dims: str, result: str, reduced: str) -> str:
    return f"""
  a = f32[64,11] parameter(0)
  b = f32{dims} broadcast(a), dimensions={{0,3}}
  init = f32[] constant(0)
  ROOT r = f32{result} reduce(b, init), dimensions={{{reduced}}}, to_apply=add"""


def test_sum_of_an_integer_broadcast_is_a_product_plus_init():    # ReduceOfConstantBroadcastS32
    out = optimized("""
  two = s32[] constant(2)
  init = s32[] constant(10)
  b = s32[1,7,7,1] broadcast(two), dimensions={}
  ROOT r = s32[1,7,1] reduce(b, init), dimensions={1}, to_apply=add""", reducer("add", "s32"))
    assert form(out.entry.root) == "24" and "reduce" not in opcodes(out)


def test_float_sum_of_a_broadcast_is_a_product_in_fast_mode():   # ReduceOfNonScalarBroadcast
    body = reduce_of_broadcast("[64,7,5,11]", "[64,7,11]", "2")
    assert reduced_form(body, ADD, "fast") == "broadcast(multiply(p0, 5))"
    assert "reduce" in opcodes(optimized(body, ADD))             # five roundings, not one
    few = reduce_of_broadcast("[64,2,2,11]", "[64,11]", "1,2")
    assert reduced_form(few, ADD) == "multiply(p0, 4)"


def test_max_of_a_partial_broadcast_is_one_max():
    out = optimized("""
  a = f32[300] parameter(0)
  init = f32[] constant(1)
  b = f32[300,40,20] broadcast(a), dimensions={0}
  ROOT r = f32[300,20] reduce(b, init), dimensions={1}, to_apply=maximum""", reducer("maximum"))
    assert form(out.entry.root) == "broadcast(maximum(p0, 1))"
    assert out.entry.root.attrs["dimensions"] == (0,)


@pytest.mark.parametrize("operand, reshaped, reduced, result, inner", [
    ("[3,5,7]", "[15,7]", "1", "[15]", "[3,5]"),             # ReduceOfMergeNoncontractingDims
    ("[3,35]", "[3,5,7]", "0", "[5,7]", "[35]")])           # ReduceOfSplitNoncontractingDims
def test_reduce_of_a_reshape_that_leaves_the_reduced_dims_alone(operand, reshaped, reduced,
                                                                result, inner):
    out = optimized(f"""
  p = f32{operand} parameter(0)
  r = f32{reshaped} reshape(p)
  zero = f32[] constant(0)
  ROOT s = f32{result} reduce(r, zero), dimensions={{{reduced}}}, to_apply=add""", ADD)
    root = out.entry.root
    assert root.opcode == "reshape" and root.operands[0].opcode == "reduce"
    assert root.operands[0].shape.to_text().startswith(f"f32{inner}")


def test_reduce_of_a_reshape_that_splits_the_reduced_dim_stays():
    out = optimized("""
  p = f32[3,35] parameter(0)
  r = f32[3,5,7] reshape(p)
  zero = f32[] constant(0)
  ROOT s = f32[3,7] reduce(r, zero), dimensions={1}, to_apply=add""", ADD)
    assert opcodes(out)[-1] == "reduce" and "reshape" in opcodes(out)


@pytest.mark.parametrize("bits, removed", [("exponent_bits=8, mantissa_bits=7", True),
                                           ("exponent_bits=7, mantissa_bits=8", False),
                                           ("exponent_bits=5, mantissa_bits=7", False)])
def test_reduce_precision_to_the_operands_own_precision_is_removed(bits, removed):
    out = optimized(f"""
  p = bf16[64] parameter(0)
  ROOT r = bf16[64] reduce-precision(p), {bits}""")    # ReducePrecisionWithSamePrecision...
    assert (out.entry.root.opcode == "parameter") == removed


@pytest.mark.parametrize("op, init, window, expected", [
    ("add", "0", "size=1x1", "p0"),                                  # TrivialReduceWindow_Add
    ("maximum", "-inf", "size=1x1", "p0"),                           # TrivialReduceWindow_Max
    ("minimum", "inf", "size=1x1", "p0"),                            # TrivialReduceWindow_Min
    ("maximum", "-inf", "size=1x1 pad=1_2x3_4", "pad(p0, -inf)"),    # ...WithPad
    ("maximum", "-inf", "size=1x2", "reduce-window(p0, -inf)")])
def test_reduce_window_of_one_element_windows_is_elementwise(op, init, window, expected):
    assert reduced_form(f"""
  p = f32[16,32] parameter(0)
  c = f32[] constant({init})
  ROOT r = reduce-window(p, c), window={{{window}}}, to_apply={op}""", reducer(op)) == expected


@pytest.mark.parametrize("op, value, folded", [("add", "0", True), ("maximum", "5", True),
                                               ("add", "5", False)])   # FoldPadIntoReduceWindow
def test_pad_folds_into_reduce_window_where_padded_elements_change_nothing(op, value, folded):
    out = optimized(f"""
  p = f32[1,2,3,4] parameter(0)
  c = f32[] constant({value})
  pad = f32[1,3,3,6] pad(p, c), padding=0_0x1_0x0_0x0_2
  ROOT r = reduce-window(pad, c), to_apply={op},
    window={{size=2x2x2x2 lhs_dilate=1x1x1x3 pad=1_2x1_2x1_2x1_2}}""", reducer(op))
    root = out.entry.root
    assert ("pad" not in opcodes(out)) == folded and root.opcode == "reduce-window"
    if folded:
        assert root.attrs["window"].pad == ((1, 2), (2, 2), (1, 2), (1, 8))


def test_reduce_window_attributes_survive_optimization():
    window = "size=2x3 stride=2x1 pad=0_1x2_0 lhs_dilate=1x2 rhs_dilate=2x1"
    out = optimized(f"""
  p = f32[6,5] parameter(0)
  c = f32[] constant(-inf)
  ROOT r = reduce-window(p, c), window={{{window}}}, to_apply=maximum""", reducer("maximum"))
    assert f"window={{{window}}}" in out.to_text()


@pytest.mark.parametrize("op, element_type, fp_mode, split", [
    ("add", "f32", "fast", True),        # SimplifyReduceOfConcatWithDifferentShapes
    ("add", "f32", "xla", False),        # the sums regroup: exact for real numbers only
    ("add", "s32", "xla", True), ("maximum", "f32", "strict", True)])
def test_reduce_over_a_concatenated_dim_reduces_each_operand(op, element_type, fp_mode, split):
    t = element_type
    out = optimized(f"""
  p0 = {t}[10,10,10] parameter(0)
  p1 = {t}[10,10,10] parameter(1)
  p2 = {t}[10,9,10] parameter(2)
  cat = {t}[10,29,10] concatenate(p0, p1, p2), dimensions={{1}}
  c = {t}[] constant(0)
  ROOT r = {t}[10] reduce(cat, c), dimensions={{1,2}}, to_apply={op}""", reducer(op, t), fp_mode)
    assert ("concatenate" not in opcodes(out)) == split
    assert opcodes(out).count("reduce") == (3 if split else 1)


TUPLED_ADD = """fn {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  s = f32[] add(a, b)
  ROOT t = (f32[]) tuple(s)
}
"""


def test_reduce_window_with_a_tupled_reducer_is_a_tuple_of_a_plain_one():
    out = optimized("""
  p = f32[32,8,6,7] parameter(0)
  c = f32[] constant(0)
  ROOT r = (f32[32,8,6,7]) reduce-window(p, c), to_apply=fn, window={size=1x1x1x1}""",
                    TUPLED_ADD)                                  # UnaryVariadicReduceWindow
    assert form(out.entry.root) == "tuple(p0)"


@pytest.mark.parametrize("body", [
    """
  p = f32[3,5,7] parameter(0)
  r = f32[15,7] reshape(p)
  c = f32[] constant(0)
  ROOT s = (f32[15]) reduce(r, c), dimensions={1}, to_apply=fn""",
    """
  p = f32[3,0] parameter(0)
  c = f32[] constant(0)
  ROOT s = (f32[3]) reduce(p, c), dimensions={1}, to_apply=fn"""])
def test_reduce_with_a_tupled_reducer_keeps_its_tuple_type(body):
    out = optimized(body, TUPLED_ADD)     # checked valid: no rule makes the tuple an array
    assert out.entry.root.shape.is_tuple


@pytest.mark.parametrize("operand, window, slice_, result, reduced", [
    ("[2,8]", "size=1x8 pad=0_0x7_0", "[0:2], [7:8]", "[2,1]", (1,)),   # SliceOfReduceWindow-
                                                                         # OneReduceDim
    ("[3,4,2]", "size=1x4x2 pad=0_0x3_0x1_0", "[0:3], [3:4], [1:2]", "[3,1,1]",
     (1, 2)),                                                            # ...TwoReduceDims
    ("[2,8]", "size=1x8 pad=0_0x7_0", "[0:2], [6:7]", "[2,1]", None),   # a partial sum
    ("[2,8]", "size=1x8 pad=0_0x7_0", "[0:1], [7:8]", "[1,1]", None)])  # a dim sliced
def test_slice_of_a_reduce_window_keeping_whole_windows_is_a_reduce(operand, window, slice_,
                                                                   result, reduced):
    out = optimized(f"""
  p = s32{operand} parameter(0)
  c = s32[] constant(0)
  r = s32{operand} reduce-window(p, c), window={{{window}}}, to_apply=add
  ROOT s = s32{result} slice(r), slice={{{slice_}}}""", reducer("add", "s32"))
    if reduced is None:
        assert "reduce-window" in opcodes(out)
    else:
        assert form(out.entry.root) == "reshape(reduce(p0, 0))"
        assert out.entry.root.operands[0].attrs["dimensions"] == reduced


def test_reduce_with_a_tupled_reducer_equals_a_tuple_of_a_plain_one():   # UnaryVariadicReduce
    before = module("""
  p = f32[32,8,6,7] parameter(0)
  c = f32[] constant(0)
  ROOT r = (f32[8,6,7]) reduce(p, c), dimensions={0}, to_apply=fn""", TUPLED_ADD)
    after = module("""
  p = f32[32,8,6,7] parameter(0)
  c = f32[] constant(0)
  r = f32[8,6,7] reduce(p, c), dimensions={0}, to_apply=add
  ROOT t = (f32[8,6,7]) tuple(r)""", ADD)
    assert prove_equivalent(before, after, fp_mode="strict")[0]


def test_variadic_reduce_window_of_empty_operands_is_its_inits():  # ZeroSizedVariadicReduceWindow
    pair = """pair {
  a0 = f32[] parameter(0)
  a1 = f32[] parameter(1)
  b0 = f32[] parameter(2)
  b1 = f32[] parameter(3)
  s0 = f32[] add(a0, b0)
  s1 = f32[] add(a1, b1)
  ROOT t = (f32[], f32[]) tuple(s0, s1)
}
"""
    before = module("""
  p = f32[3,0] parameter(0)
  c = f32[] constant(0)
  d = f32[] constant(1)
  ROOT r = (f32[5,2], f32[5,2]) reduce-window(p, p, c, d), window={size=1x1 pad=1_1x1_1},
    to_apply=pair""", pair)
    after = module("""
  p = f32[3,0] parameter(0)
  c = f32[] constant(0)
  d = f32[] constant(1)
  bc = f32[5,2] broadcast(c), dimensions={}
  bd = f32[5,2] broadcast(d), dimensions={}
  ROOT t = (f32[5,2], f32[5,2]) tuple(bc, bd)""")
    assert prove_equivalent(before, after, fp_mode="strict")[0]


def test_sum_of_a_broadcast_too_long_for_a_constant_multiplies_dim_by_dim():
    out = optimized("""
  a = bf16[] parameter(0)
  n = bf16[] negate(a)
  b = bf16[2,5,11,17,19] broadcast(n), dimensions={}
  zero = bf16[] constant(0)
  ROOT r = bf16[2] reduce(b, zero), dimensions={1,2,3,4}, to_apply=add""",
                    reducer("add", "bf16"), "fast")  # ReduceBroadcastScalarToBroadcastMultiply
    assert opcodes(out)[-2:] == ["multiply", "broadcast"]     # 17765 copies: 17792 in bf16
    assert form(out.entry.root) == "multiply(negate(p0), 17792)"
# --- dynamic slicing (dynamic_slice.rules) ---------------------------------------------------

def test_dynamic_slices_of_broadcasts_and_transposes_slice_their_operand():
    # DynamicSliceOfBroadcast: the broadcast's operand takes the indices of its dimensions.
    assert root_form("""
  p0 = f32[10,20] parameter(0)
  i0 = s32[] parameter(1)
  i1 = s32[] parameter(2)
  i2 = s32[] parameter(3)
  b = f32[10,30,20] broadcast(p0), dimensions={0,2}
  ROOT ds = f32[5,5,5] dynamic-slice(b, i0, i1, i2), dynamic_slice_sizes={5,5,5}""") \
        == "broadcast(dynamic-slice(p0, p1, p3))"
    # DynamicSliceOfTranspose: the indices follow the inverse permutation.
    assert root_form("""
  param = f32[12,10,8] parameter(0)
  i0 = s32[] parameter(1)
  i1 = s32[] parameter(2)
  i2 = s32[] parameter(3)
  t = f32[12,8,10] transpose(param), dimensions={0,2,1}
  ROOT ds = f32[2,3,5] dynamic-slice(t, i0, i1, i2), dynamic_slice_sizes={2,3,5}""") \
        == "transpose(dynamic-slice(p0, p1, p3, p2))"


def test_constant_start_indices_become_the_clamped_window():
    # DynamicSliceConvertedToConstantSliceWithConstantIndices, with starts out of range:
    # XLA clamps row 5 to 1 (the last full window) before reading.
    m = optimized("""
  p0 = s32[2,4] parameter(0)
  c5 = u32[] constant(5)
  c1 = u32[] constant(1)
  ROOT ds = s32[1,2] dynamic-slice(p0, c5, c1), dynamic_slice_sizes={1,2}""")
    assert form(m.entry.root) == "slice(p0)"
    assert m.entry.root.attrs["slice"] == ((1, 2, 1), (1, 3, 1))


def test_updating_a_splat_at_a_constant_window_is_a_pad():
    # DynamicUpdateSliceOfBroadcastToPadOob: start 2 clamps to 1, so one zero goes before.
    m = optimized("""
  z = f32[] constant(0)
  b = f32[2] broadcast(z), dimensions={}
  p0 = f32[1] parameter(0)
  c2 = s32[] constant(2)
  ROOT dus = f32[2] dynamic-update-slice(b, p0, c2)""")
    assert form(m.entry.root) == "pad(p0, 0)"
    assert m.entry.root.attrs["padding"] == ((1, 0, 0),)


def test_adding_an_update_of_zeros_adds_inside_the_window_only():
    # AddDynamicUpdateSliceToAddSliceOnLhs; x + 0 is x up to the sign of zero: not strict.
    body = """
  param0 = f32[4,12,512] parameter(0)
  constant = f32[] constant(0)
  broadcast = f32[4,12,512] broadcast(constant), dimensions={}
  param1 = f32[1,12,512] parameter(1)
  param2 = s32[] parameter(2)
  constant.1 = s32[] constant(0)
  dus = f32[4,12,512] dynamic-update-slice(broadcast, param1, param2, constant.1, constant.1)
  ROOT add = f32[4,12,512] add(dus, param0)"""
    assert root_form(body) == \
        "dynamic-update-slice(p0, add(dynamic-slice(p0, p2, 0, 0), p1), p2, 0, 0)"
    assert "dynamic-slice" not in opcodes(optimized(body, fp_mode="strict"))


@pytest.mark.parametrize("kept", [False, True])
def test_select_against_a_dynamic_update_slice_selects_in_the_window(kept):
    # SelectDUSWithShapedPred (kept: ReverseSelectDUSWithShapedPred). Whether it pays is
    # the cost model's choice; the rewrite is in the e-graph.
    dus = "dynamic-update-slice(xs, x, i)"
    before = module(f"""
  p = pred[8] parameter(0)
  xs = f32[8] parameter(1)
  x = f32[2] parameter(2)
  i = u32[] parameter(3)
  dus = f32[8] {dus}
  ROOT out = f32[8] select(p, {"xs, dus" if kept else "dus, xs"})""")
    window = "ps = pred[2] dynamic-slice(p, i), dynamic_slice_sizes={2}\n" \
             "  old = f32[2] dynamic-slice(xs, i), dynamic_slice_sizes={2}"
    after = module(f"""
  p = pred[8] parameter(0)
  xs = f32[8] parameter(1)
  x = f32[2] parameter(2)
  i = u32[] parameter(3)
  {window}
  s = f32[2] select(ps, {"old, x" if kept else "x, old"})
  ROOT out = f32[8] dynamic-update-slice(xs, s, i)""")
    assert prove_equivalent(before, after, fp_mode="strict")[0]


def test_a_window_as_large_as_the_array_is_the_array():
    # Every start clamps to 0, whatever the index.
    assert root_form("""
  p0 = f32[3,4] parameter(0)
  i = s32[] parameter(1)
  ROOT ds = f32[3,4] dynamic-slice(p0, i, i), dynamic_slice_sizes={3,4}""") == "p0"
    assert root_form("""
  p0 = f32[3,4] parameter(0)
  p1 = f32[3,4] parameter(1)
  i = s32[] parameter(2)
  ROOT dus = f32[3,4] dynamic-update-slice(p0, p1, i, i)""") == "p1"


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


@pytest.mark.parametrize("window, result", [
    ("size=6x6 pad=5_5x5_5", "f64[8,8,8,4]"),                        # not reversed
    ("size=6x6 stride=2x2 pad=5_5x5_5 rhs_reversal=1x1", "f64[8,4,4,4]"),
    ("size=6x6 pad=2_2x2_2 rhs_reversal=1x1", "f64[8,2,2,4]")])     # the kernel padded by -1
def test_a_convolution_that_is_not_a_true_one_keeps_its_operands(window, result):
    assert dot_form(f"""
  a = f64[3,3,4,4] parameter(0)
  b = f64[8,6,6,4] parameter(1)
  ROOT c = {result} convolution(a, b), window={{{window}}}, dim_labels=01bf_o01i->f01b""",
                    fp_mode="fast") == "convolution(p0, p1)"
