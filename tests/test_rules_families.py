"""The default rules at work, one section per rule family (rules/default/<family>.rules):
HLO text in, `optimize(rules="default")` out, an expected pattern, and the same function
(interpreter, random inputs) before and after."""
from __future__ import annotations

import numpy as np
import pytest

import hlo_opt
from hlo_opt.egraph.pipeline import prove_equivalent
from hlo_opt.tools.hlo_equiv import first_difference, random_array


def module(body: str, computations: str = "") -> hlo_opt.Module:
    return hlo_opt.parse(f"HloModule m\n{computations}\nENTRY main {{\n{body}\n}}\n")


def optimized(body: str, computations: str = "", fp_mode: str = "xla") -> hlo_opt.Module:
    """The optimized module, checked to compute what the input computes."""
    before = module(body, computations)
    after = hlo_opt.optimize(before, rules="default", fp_mode=fp_mode, fusion=False)
    after = hlo_opt.parse(after.to_text())          # the printed text is what ships
    rng = np.random.default_rng(0)
    args = [random_array(p.shape, rng, edges=fp_mode != "fast") for p in before.entry.parameters]
    assert first_difference(hlo_opt.evaluate(before, args), hlo_opt.evaluate(after, args)) is None
    return after


def opcodes(m: hlo_opt.Module) -> list[str]:
    return [i.opcode for i in m.entry.instructions]


def root_is_parameter(m: hlo_opt.Module, number: int = 0) -> bool:
    root = m.entry.root
    return root.opcode == "parameter" and root.parameter_number == number


ADD = "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT r = f32[] add(a, b)\n}\n"
ADD_S32 = "add_s32 {\n  a = s32[] parameter(0)\n  b = s32[] parameter(1)\n" \
          "  ROOT r = s32[] add(a, b)\n}\n"
MAX = "max {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT r = f32[] maximum(a, b)\n}\n"


# --- arithmetic.rules --------------------------------------------------------------------

def test_arithmetic_identities_vanish():
    out = optimized("""
  x = f32[8] parameter(0)
  one = f32[] constant(1)
  ones = f32[8] broadcast(one), dimensions={}
  z = f32[] constant(-0)
  zs = f32[8] broadcast(z), dimensions={}
  m = f32[8] multiply(ones, x)
  a = f32[8] add(m, zs)
  n = f32[8] negate(a)
  nn = f32[8] negate(n)
  ROOT d = f32[8] divide(nn, ones)""")
    assert root_is_parameter(out)


def test_integer_self_subtraction_is_zero_but_float_needs_fast_mode():
    ints = optimized("""
  x = s32[4] parameter(0)
  ROOT s = s32[4] subtract(x, x)""")
    assert "subtract" not in opcodes(ints) and ints.entry.root.opcode in ("constant", "broadcast")
    floats = """
  x = f32[4] parameter(0)
  ROOT s = f32[4] subtract(x, x)"""
    assert "subtract" in opcodes(optimized(floats))             # inf - inf = NaN
    assert "subtract" not in opcodes(optimized(floats, fp_mode="fast"))


def test_integer_constants_gather_and_fold():
    out = optimized("""
  x = s32[4] parameter(0)
  two = s32[] constant(2)
  b2 = s32[4] broadcast(two), dimensions={}
  three = s32[] constant(3)
  b3 = s32[4] broadcast(three), dimensions={}
  a = s32[4] add(x, b2)
  ROOT s = s32[4] subtract(a, b3)""")
    root = out.entry.root
    assert root.opcode == "add" and [o.opcode for o in root.operands] == ["parameter", "broadcast"]
    assert root.operands[1].operands[0].literal == -1                 # (x + 2) - 3 = x + -1


def test_division_by_a_power_of_two_is_a_multiplication():
    out = optimized("""
  x = f32[4] parameter(0)
  two = f32[] constant(2)
  t = f32[4] broadcast(two), dimensions={}
  ROOT d = f32[4] divide(x, t)""")
    assert "divide" not in opcodes(out) and "multiply" in opcodes(out)


# --- minmax_logic.rules ------------------------------------------------------------------

def test_idempotent_and_absorbing_operands():
    out = optimized("""
  x = f32[4] parameter(0)
  p = pred[4] parameter(1)
  m = f32[4] maximum(x, x)
  ninf = f32[] constant(-inf)
  b = f32[4] broadcast(ninf), dimensions={}
  mm = f32[4] maximum(m, b)
  np = pred[4] not(p)
  f = pred[4] and(p, np)
  t = pred[] constant(true)
  tt = pred[4] broadcast(t), dimensions={}
  o = pred[4] or(f, tt)
  ROOT r = (f32[4], pred[4], pred[4]) tuple(mm, f, o)""")
    mm, f, o = out.entry.root.operands
    assert mm.opcode == "parameter"
    assert f.opcode in ("constant", "broadcast") and o.opcode in ("constant", "broadcast")


# --- select_compare.rules ----------------------------------------------------------------

def test_select_and_compare_fold_where_nan_cannot_interfere():
    out = optimized("""
  x = f32[4] parameter(0)
  y = f32[4] parameter(1)
  i = s32[4] parameter(2)
  t = pred[] constant(true)
  tt = pred[4] broadcast(t), dimensions={}
  s = f32[4] select(tt, x, y)
  e = pred[4] compare(i, i), direction=EQ
  lt = pred[4] compare(x, x), direction=LT
  eq = pred[4] compare(x, x), direction=EQ
  ROOT r = (f32[4], pred[4], pred[4], pred[4]) tuple(s, e, lt, eq)""")
    s, e, lt, eq = out.entry.root.operands
    assert s.opcode == "parameter" and s.parameter_number == 0
    assert e.opcode != "compare" and lt.opcode != "compare"
    assert eq.opcode == "compare"                                # NaN == NaN is false


# --- convert.rules -----------------------------------------------------------------------

def test_widening_round_trips_vanish_and_narrowing_ones_stay():
    out = optimized("""
  h = f16[4] parameter(0)
  i = s32[4] parameter(1)
  w = f32[4] convert(h)
  back = f16[4] convert(w)
  f = f32[4] convert(i)
  lossy = s32[4] convert(f)
  ROOT r = (f16[4], s32[4]) tuple(back, lossy)""")
    back, lossy = out.entry.root.operands
    assert back.opcode == "parameter"
    assert lossy.opcode == "convert"                             # s32 -> f32 rounds


# --- layout.rules ------------------------------------------------------------------------

def test_transposes_reshapes_and_broadcasts_collapse():
    out = optimized("""
  x = f32[2,3,4] parameter(0)
  t1 = f32[4,2,3] transpose(x), dimensions={2,0,1}
  n = f32[4,2,3] negate(t1)
  t2 = f32[2,3,4] transpose(n), dimensions={1,2,0}
  r1 = f32[6,4] reshape(t2)
  r2 = f32[24] reshape(r1)
  r3 = f32[2,3,4] reshape(r2)
  s = f32[] constant(3)
  b1 = f32[3] broadcast(s), dimensions={}
  b2 = f32[2,3,4] broadcast(b1), dimensions={1}
  ROOT m = f32[2,3,4] multiply(r3, b2)""")
    ops = opcodes(out)
    assert "transpose" not in ops and "reshape" not in ops
    assert ops.count("broadcast") == 1 and ops.count("negate") == 1


# --- slicing.rules -----------------------------------------------------------------------

def test_slices_of_concatenates_and_adjacent_slices():
    out = optimized("""
  x = f32[4,6] parameter(0)
  y = f32[4,6] parameter(1)
  c = f32[8,6] concatenate(x, y), dimensions={0}
  second = f32[4,6] slice(c), slice={[4:8], [0:6]}
  a = f32[4,2] slice(x), slice={[0:4], [0:2]}
  b = f32[4,4] slice(x), slice={[0:4], [2:6]}
  whole = f32[4,6] concatenate(a, b), dimensions={1}
  z = f32[] constant(0)
  p = f32[4,6] pad(whole, z), padding=0_0x0_0
  r = f32[4,6] reverse(p), dimensions={1}
  rr = f32[4,6] reverse(r), dimensions={1}
  ROOT t = (f32[4,6], f32[4,6]) tuple(second, rr)""")
    second, whole = out.entry.root.operands
    assert second.opcode == "parameter" and second.parameter_number == 1
    assert whole.opcode == "parameter" and whole.parameter_number == 0


# --- reduce.rules ------------------------------------------------------------------------

def test_reduce_of_broadcast_and_of_size_one_dims():
    out = optimized("""
  y = f32[8,16] parameter(0)
  b = f32[4,8,16] broadcast(y), dimensions={1,2}
  z = f32[] constant(0)
  r = f32[8,16] reduce(b, z), dimensions={0}, to_apply=add
  x = f32[1,8] parameter(1)
  one = f32[8] reduce(x, z), dimensions={0}, to_apply=add
  ROOT t = (f32[8,16], f32[8]) tuple(r, one)""", ADD)
    assert "reduce" not in opcodes(out)


def test_integer_reduces_merge_and_max_of_broadcast_is_max():
    out = optimized("""
  x = s32[2,3,4] parameter(0)
  z = s32[] constant(0)
  inner = s32[2,4] reduce(x, z), dimensions={1}, to_apply=add_s32
  ROOT outer = s32[4] reduce(inner, z), dimensions={0}, to_apply=add_s32""", ADD_S32)
    assert opcodes(out).count("reduce") == 1
    out = optimized("""
  y = f32[8] parameter(0)
  b = f32[3,8] broadcast(y), dimensions={1}
  m = f32[] constant(-inf)
  ROOT r = f32[8] reduce(b, m), dimensions={0}, to_apply=max""", MAX)
    assert root_is_parameter(out)


# --- dot.rules ---------------------------------------------------------------------------

def test_dot_of_a_transpose_folds_into_the_dimension_numbers():
    out = optimized("""
  x = f32[8,4] parameter(0)
  y = f32[8,5] parameter(1)
  xt = f32[4,8] transpose(x), dimensions={1,0}
  ROOT d = f32[4,5] dot(xt, y), lhs_contracting_dims={1}, rhs_contracting_dims={0}""")
    assert opcodes(out) == ["parameter", "parameter", "dot"]
    assert out.entry.root.attrs["lhs_contracting_dims"] == (0,)


def test_dot_over_size_one_dims_is_an_outer_product():
    dot = module("""
  u = f32[6,1] parameter(0)
  v = f32[1,7] parameter(1)
  ROOT o = f32[6,7] dot(u, v), lhs_contracting_dims={1}, rhs_contracting_dims={0}""")
    product = module("""
  u = f32[6,1] parameter(0)
  v = f32[1,7] parameter(1)
  a = f32[6] reshape(u)
  b = f32[7] reshape(v)
  ba = f32[6,7] broadcast(a), dimensions={0}
  bb = f32[6,7] broadcast(b), dimensions={1}
  ROOT o = f32[6,7] multiply(ba, bb)""")
    proved, report = prove_equivalent(dot, product, rules="default")
    assert proved and report.matches["dot_outer_product"] >= 1
    optimized("""
  u = f32[6,1] parameter(0)
  v = f32[1,7] parameter(1)
  ROOT o = f32[6,7] dot(u, v), lhs_contracting_dims={1}, rhs_contracting_dims={0}""")


def test_dot_with_a_zero_operand():
    body = """
  x = {t}[3,4] parameter(0)
  z = {t}[] constant(0)
  zs = {t}[4,5] broadcast(z), dimensions={{}}
  ROOT d = {t}[3,5] dot(x, zs), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}"""
    assert "dot" not in opcodes(optimized(body.format(t="s32")))
    assert "dot" in opcodes(optimized(body.format(t="f32")))       # NaN * 0
    assert "dot" not in opcodes(optimized(body.format(t="f32"), fp_mode="fast"))


# --- math.rules --------------------------------------------------------------------------

def test_powers_and_exp_log_pairs():
    out = optimized("""
  x = f32[4] parameter(0)
  two = f32[] constant(2)
  t = f32[4] broadcast(two), dimensions={}
  ROOT p = f32[4] power(x, t)""")
    assert "power" not in opcodes(out) and "multiply" in opcodes(out)
    body = """
  x = f32[4] parameter(0)
  e = f32[4] exponential(x)
  ROOT l = f32[4] log(e)"""
    assert not root_is_parameter(optimized(body))
    assert root_is_parameter(optimized(body, fp_mode="fast"))


# --- folding.rules -----------------------------------------------------------------------

def test_small_constants_fold_and_splats_stay_splats():
    out = optimized("""
  c = f32[3] constant({1, 2, 3})
  two = f32[] constant(2)
  t = f32[3] broadcast(two), dimensions={}
  m = f32[3] multiply(c, t)
  big = f32[] constant(5)
  bb = f32[1024,1024] broadcast(big), dimensions={}
  n = f32[1024,1024] negate(bb)
  ROOT r = (f32[3], f32[1024,1024]) tuple(m, n)""")
    m, n = out.entry.root.operands
    assert m.opcode == "constant" and m.literal.tolist() == [2, 4, 6]
    assert n.opcode == "broadcast" and n.operands[0].literal == -5


def test_iota_absorbs_broadcast_transpose_and_exact_converts():
    out = optimized("""
  i = s32[4] iota(), iota_dimension=0
  b = s32[3,4] broadcast(i), dimensions={1}
  t = s32[4,3] transpose(b), dimensions={1,0}
  ROOT f = f32[4,3] convert(t)""")
    assert opcodes(out) == ["iota"] and out.entry.root.attrs["iota_dimension"] == 0


@pytest.mark.parametrize("fp_mode", ["strict", "xla", "fast"])
def test_every_mode_keeps_the_function(fp_mode):
    out = optimized("""
  x = f32[4,4] parameter(0)
  z = f32[] constant(0)
  zs = f32[4,4] broadcast(z), dimensions={}
  a = f32[4,4] add(x, zs)
  m = f32[4,4] multiply(a, zs)
  t = f32[4,4] transpose(m), dimensions={1,0}
  ROOT s = f32[4,4] subtract(t, t)""", fp_mode=fp_mode)
    ops = opcodes(out)
    assert ("add" in ops) == (fp_mode == "strict")              # x + 0 changes -0 only
    assert ("subtract" not in ops) == (fp_mode == "fast")       # x*0 - x*0 = 0 for reals
