"""Rewrites of XLA's algebraic simplifier, as our default rules do them: HLO text in (the
modules of XLA's algebraic_simplifier_test.cc, by test name), the expected structure out,
and the same function before and after (test_rules_families.optimized checks it with the
interpreter on random inputs). One section per rewrite family; append new families."""
from __future__ import annotations

import pytest

import hlo_opt
from hlo_opt.egraph.pipeline import prove_equivalent
from test_rules_families import module, opcodes, optimized


def ops_left(m: hlo_opt.Module) -> set[str]:
    return set(opcodes(m)) - {"parameter", "constant", "broadcast"}


def root_constant(m: hlo_opt.Module):
    """The value of the root's constant operand (a scalar or a broadcast of one)."""
    [c] = [o for o in m.entry.root.operands if o.opcode in ("constant", "broadcast")]
    while c.opcode == "broadcast":
        c = c.operands[0]
    return c.literal.item()


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
