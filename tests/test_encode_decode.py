"""IR -> e-graph -> IR with no rules: the same function comes back, as HLO XLA accepts.

Hash-consing alone removes duplicated subexpressions and dead code; calls and fusions are
inlined; constants, layouts, names and metadata survive.
"""
from __future__ import annotations

import numpy as np
import pytest

import hlo_opt
from conftest import corpus_files, corpus_ids, counted_loop
from hlo_opt import UnsupportedError
from hlo_opt.tools.hlo_equiv import random_array

FILES = corpus_files()


def roundtrip(text: str) -> hlo_opt.Module:
    return hlo_opt.optimize(hlo_opt.parse(text), rules="none")


def same_bits(outs_a, outs_b) -> bool:
    pairs = [(np.asarray(a), np.asarray(b)) for a, b in zip(outs_a, outs_b)]
    return len(outs_a) == len(outs_b) and all(
        a.shape == b.shape and a.tobytes() == b.tobytes() for a, b in pairs)


def entry(body: str, computations: str = "") -> str:
    return f"HloModule m\n{computations}\nENTRY main {{\n{body}\n}}\n"


def instructions(module) -> list[str]:
    return [f"{i.opcode}" for i in module.entry.instructions]


@pytest.mark.parametrize("path", FILES, ids=corpus_ids(FILES))
def test_corpus_roundtrip_is_the_same_function(path):
    module = hlo_opt.parse(path.read_text(), str(path))
    out = hlo_opt.optimize(module, rules="none")
    again = hlo_opt.parse(out.to_text(), "roundtrip")           # our parser takes it back
    assert [p.shape for p in again.entry.parameters] == [p.shape for p in module.entry.parameters]
    assert again.entry.root.shape.compatible(module.entry.root.shape)
    assert len(list(again.instructions())) <= len(list(module.instructions()))
    rng = np.random.default_rng(0)
    args = [random_array(p.shape, rng, edges=False) for p in module.entry.parameters]
    try:
        expected = hlo_opt.evaluate(module, args)
    except UnsupportedError:
        pytest.skip("the interpreter cannot run this module")
    assert same_bits(expected, hlo_opt.evaluate(again, args))


@pytest.mark.parametrize("path", FILES, ids=corpus_ids(FILES))
def test_xla_parses_the_roundtrip(path, xla):
    out = hlo_opt.optimize(hlo_opt.parse(path.read_text(), str(path)), rules="none")
    xla.parse(out.to_text())


def test_duplicated_subexpressions_collapse():
    out = roundtrip(entry("""
  x = f32[8] parameter(0)
  a = f32[8] exponential(x)
  b = f32[8] exponential(x)
  c = f32[8] add(a, b)
  d = f32[8] add(a, b)
  ROOT r = f32[8] multiply(c, d)"""))
    assert instructions(out) == ["parameter", "exponential", "add", "multiply"]
    mul = out.entry.root
    assert mul.operands[0] is mul.operands[1]


def test_dead_code_goes_and_parameters_stay():
    out = roundtrip(entry("""
  x = f32[8] parameter(0)
  unused = f32[8] parameter(1)
  dead = f32[8] negate(x)
  ROOT r = f32[8] abs(x)"""))
    assert instructions(out) == ["parameter", "parameter", "abs"]
    assert [p.parameter_number for p in out.entry.parameters] == [0, 1]


def test_names_metadata_and_layouts_survive():
    out = roundtrip(entry("""
  x = f32[4,8]{0,1} parameter(0)
  t = f32[4,8]{0,1} tanh(x), metadata={op_name="jit(f)/tanh" source_line=3}
  ROOT c = f32[4,8]{1,0} copy(t)"""))
    by_name = {i.name: i for i in out.entry.instructions}
    assert set(by_name) == {"x", "t", "c"}
    assert by_name["t"].attrs["metadata"].text == '{op_name="jit(f)/tanh" source_line=3}'
    assert by_name["t"].shape.layout.minor_to_major == (0, 1)
    assert by_name["c"].shape.layout.minor_to_major == (1, 0)


def test_constants_scalar_splat_and_array():
    out = roundtrip(entry("""
  x = f32[3] parameter(0)
  s = f32[] constant(-0)
  splat = f32[3] constant({2.5, 2.5, 2.5})
  arr = f32[3] constant({1, 2, 3})
  arr2 = f32[3] constant({1, 2, 3})
  a = f32[3] add(x, splat)
  b = f32[3] multiply(arr, arr2)
  bs = f32[3] broadcast(s), dimensions={}
  c = f32[3] add(a, b)
  ROOT r = f32[3] add(c, bs)"""))
    ops = instructions(out)
    assert ops.count("constant") == 3                     # -0, 2.5 and one {1, 2, 3}
    splat = out.entry.root.operands[0].operands[0].operands[1]
    assert splat.opcode == "broadcast" and splat.operands[0].literal == np.float32(2.5)
    negzero = out.entry.root.operands[1].operands[0]
    assert np.signbit(negzero.literal)
    args = [np.array([1, 2, 3], np.float32)]
    assert same_bits(hlo_opt.evaluate(out, args), [np.array([4.5, 8.5, 14.5], np.float32)])


def test_calls_and_fusions_are_inlined():
    out = roundtrip(entry("""
  x = f32[4] parameter(0)
  c = f32[4] call(x), to_apply=double
  ROOT f = (f32[4], f32[4]) fusion(c), kind=kLoop, calls=fused""", computations="""
double {
  p = f32[4] parameter(0)
  ROOT a = f32[4] add(p, p)
}
fused {
  q = f32[4] parameter(0)
  n = f32[4] negate(q)
  e = f32[4] exponential(q)
  ROOT t = (f32[4], f32[4]) tuple(n, e)
}"""))
    assert [c.name for c in out.computations] == ["main"]
    assert instructions(out) == ["parameter", "add", "negate", "exponential", "tuple"]


def test_get_tuple_element_of_an_inlined_tuple_takes_the_element():
    out = roundtrip(entry("""
  x = f32[4] parameter(0)
  f = (f32[4], f32[4]) fusion(x), kind=kLoop, calls=fused
  g = f32[4] get-tuple-element(f), index=1
  ROOT r = f32[4] abs(g)""", computations="""
fused {
  q = f32[4] parameter(0)
  n = f32[4] negate(q)
  e = f32[4] exponential(q)
  ROOT t = (f32[4], f32[4]) tuple(n, e)
}"""))
    assert instructions(out) == ["parameter", "exponential", "abs"]


def test_equal_reducers_are_one_and_others_stay_whole():
    out = roundtrip(entry("""
  x = f32[4,8] parameter(0)
  z = f32[] constant(0)
  r1 = f32[4] reduce(x, z), dimensions={1}, to_apply=add1
  r2 = f32[4] reduce(x, z), dimensions={1}, to_apply=add2
  r3 = f32[4] reduce(x, z), dimensions={1}, to_apply=weird
  s = f32[4] add(r1, r2)
  ROOT r = f32[4] add(s, r3)""", computations="""
add1 { a = f32[] parameter(0)
       b = f32[] parameter(1)
       ROOT c = f32[] add(a, b) }
add2 { a2 = f32[] parameter(0)
       b2 = f32[] parameter(1)
       ROOT c2 = f32[] add(b2, a2) }
weird { a3 = f32[] parameter(0)
        b3 = f32[] parameter(1)
        s3 = f32[] multiply(b3, b3)
        ROOT c3 = f32[] add(a3, s3) }"""))
    assert instructions(out).count("reduce") == 2
    assert sorted(c.name for c in out.computations) == ["add1", "main", "weird"]


def test_while_body_is_optimized_with_its_interface_kept():
    out = roundtrip(counted_loop("""
  e1 = f32[4] exponential(v)
  e2 = f32[4] exponential(v)
  new = f32[4] add(e1, e2)"""))
    body = out.computation("body")
    assert [i.opcode for i in body.instructions].count("exponential") == 1
    assert body.parameters[0].shape.to_text(False) == "(s32[], f32[4])"
    assert body.root.shape.to_text(False) == "(s32[], f32[4])"
    x = np.array([-3, -2.5, -2, -4], np.float32)
    expected = x
    for _ in range(3):
        expected = 2 * np.exp(expected)
    assert np.allclose(hlo_opt.evaluate(out, [x])[1], expected)


def test_side_effecting_instructions_are_never_merged_or_dropped():
    out = roundtrip(entry("""
  lo = f32[] constant(0)
  hi = f32[] constant(1)
  a = f32[4] rng(lo, hi), distribution=rng_uniform
  b = f32[4] rng(lo, hi), distribution=rng_uniform
  unused = f32[4] rng(lo, hi), distribution=rng_uniform
  ROOT s = f32[4] add(a, b)"""))
    assert instructions(out).count("rng") == 3


@pytest.mark.parametrize("body, window", [
    ("""  x = f32[1,5,2] parameter(0)
  k = f32[3,2,4] parameter(1)
  ROOT c = f32[1,3,4] convolution(x, k), window={size=3 stride=2 pad=1_2 rhs_reversal=1},
    dim_labels=b0f_0io->b0f""", "window={size=3 stride=2 pad=1_2 rhs_reversal=1}"),
    ("""  x = f32[4,6] parameter(0)
  ROOT r = f32[2,6] reduce-window(x, f32[] constant(0)),
    window={size=2x2 stride=2x1 pad=0_0x1_1 rhs_dilate=1x2}, to_apply=add""",
     "window={size=2x2 stride=2x1 pad=0_0x1_1 rhs_dilate=1x2}"),
    # A window of no dims prints as nothing: XLA's parser rejects `window={}`.
    ("""  x = f32[2,3] parameter(0)
  k = f32[3,4] parameter(1)
  ROOT c = f32[2,4] convolution(x, k), dim_labels=bf_io->bf""", None),
    ("""  x = f32[] parameter(0)
  ROOT r = f32[] reduce-window(x, f32[] constant(0)), to_apply=add""", None)])
def test_windows_survive_part_by_part(body, window):
    # A convolution's or reduce-window's window is one schema field per part (rules match
    # and build sizes, paddings, ...).
    text = entry(body, "add {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n"
                       " ROOT r = f32[] add(a, b)\n}")
    out = roundtrip(text).to_text()
    if window is None:
        assert "window=" not in out
    else:
        assert window in out


def test_gather_and_scatter_dimension_numbers_survive():
    # Their dimension numbers are schema fields (rules match them); batching dims print only
    # where they are not empty, unique_indices stays with its scatter.
    text = entry("""
  x = f32[3,5,4] parameter(0)
  i = s32[3,2,1] parameter(1)
  g = f32[3,2,4] gather(x, i), offset_dims={2}, collapsed_slice_dims={1},
    start_index_map={1}, index_vector_dim=2, slice_sizes={1,1,4},
    operand_batching_dims={0}, start_indices_batching_dims={0}
  j = s32[2,1] parameter(2)
  u = f32[2,4] parameter(3)
  o = f32[5,4] parameter(4)
  s = f32[5,4] scatter(o, j, u), update_window_dims={1},
    inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1,
    unique_indices=true, to_apply=add
  ROOT t = (f32[3,2,4], f32[5,4]) tuple(g, s)""",
                 "add {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n"
                 " ROOT r = f32[] add(a, b)\n}")
    before = hlo_opt.parse(text)
    after = roundtrip(text)
    attrs = {i.opcode: i.attrs for i in after.entry.instructions}
    assert attrs["gather"]["operand_batching_dims"] == (0,)
    assert attrs["gather"]["slice_sizes"] == (1, 1, 4)
    assert "input_batching_dims" not in attrs["scatter"]
    assert attrs["scatter"]["unique_indices"] is True
    rng = np.random.default_rng(0)
    args = [random_array(p.shape, rng, edges=True) for p in before.entry.parameters]
    assert same_bits(hlo_opt.evaluate(before, args), hlo_opt.evaluate(after, args))
