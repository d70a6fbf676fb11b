"""Shape inference: result shapes the text leaves out, and the errors for bad operands.

Most cases are HLO text whose shapes the parser infers; the expected shapes are spelled out.
Where the XLA oracle is installed, XLA's own parser infers the same module for comparison.
"""
from __future__ import annotations

import pytest

from hlo_opt import HloError, parse
from hlo_opt.attributes import ConvDimLabels, Window
from hlo_opt.ops import _INFERABLE
from hlo_opt.shape import array
from hlo_opt.shape_inference import INFERABLE, infer_shape

COMPS = """
add { a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] add(a, b) }
argmax { a = f32[] parameter(0)
  i = s32[] parameter(1)
  b = f32[] parameter(2)
  j = s32[] parameter(3)
  ge = pred[] compare(a, b), direction=GE
  v = f32[] select(ge, a, b)
  k = s32[] select(ge, i, j)
  ROOT r = (f32[], s32[]) tuple(v, k) }
lt { a = f32[] parameter(0)
  b = f32[] parameter(1)
  c = s32[] parameter(2)
  d = s32[] parameter(3)
  ROOT r = pred[] compare(a, b), direction=LT }
ge { a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = pred[] compare(a, b), direction=GE }
to_int { a = f32[] parameter(0)
  b = f32[] parameter(1)
  s = f32[] add(a, b)
  ROOT r = s32[] convert(s) }
cond { s = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(3)
  ROOT c = pred[] compare(i, n), direction=LT }
body { s = (s32[], f32[4]) parameter(0)
  ROOT t = (s32[], f32[4]) copy(s) }
pair { x = f32[4] parameter(0)
  ROOT t = (f32[4], f32[4]) tuple(x, x) }
neg_pair { x = f32[4] parameter(0)
  n = f32[4] negate(x)
  ROOT t = (f32[4], f32[4]) tuple(n, x) }
"""

# (instruction lines, {name: expected shape}); operands are parameters declared in `lines`.
CASES = {
    "tuple_and_gte": ("a = f32[2,3] parameter(0)\nb = s32[] parameter(1)\nt = tuple(a, b)\n"
                      "g = get-tuple-element(t), index=1",
                      {"t": "(f32[2,3], s32[])", "g": "s32[]"}),
    "elementwise": ("a = f32[4] parameter(0)\nb = f32[4] parameter(1)\nc = add(a, b)\n"
                    "d = compare(a, b), direction=LT\ne = is-finite(a)\nf = complex(a, b)\n"
                    "g = abs(f)\nh = real(f)\ni = select(d, a, b)\nj = clamp(b, a, b)\n"
                    "k = atan2(a, b)",
                    {"c": "f32[4]", "d": "pred[4]", "e": "pred[4]", "f": "c64[4]",
                     "g": "f32[4]", "h": "f32[4]", "i": "f32[4]", "j": "f32[4]", "k": "f32[4]"}),
    "ints": ("a = s32[3] parameter(0)\nb = s32[3] parameter(1)\nc = shift-left(a, b)\n"
             "d = popcnt(a)\ne = not(a)\nf = count-leading-zeros(a)\ng = remainder(a, b)",
             {"c": "s32[3]", "d": "s32[3]", "e": "s32[3]", "f": "s32[3]", "g": "s32[3]"}),
    "dot": ("a = f32[2,3,4] parameter(0)\nb = f32[2,4,5] parameter(1)\n"
            "d = dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, "
            "rhs_contracting_dims={1}\nm = f32[7,3] parameter(2)\nn = f32[3] parameter(3)\n"
            "v = dot(m, n), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
            "o = dot(n, n)",
            {"d": "f32[2,3,5]", "v": "f32[7]", "o": "f32[3,3]"}),
    "reduce": ("a = f32[2,3,4] parameter(0)\nz = f32[] constant(0)\n"
               "r = reduce(a, z), dimensions={0,2}, to_apply=add\n"
               "i = s32[2,3,4] iota(), iota_dimension=2\nk = s32[] constant(0)\n"
               "m = reduce(a, i, z, k), dimensions={2}, to_apply=argmax",
               {"r": "f32[3]", "m": "(f32[2,3], s32[2,3])"}),
    "reduce_window": ("a = f32[2,9,9,3] parameter(0)\nz = f32[] constant(0)\n"
                      "r = reduce-window(a, z), window={size=1x3x3x1 stride=1x2x2x1 "
                      "pad=0_0x1_1x1_1x0_0}, to_apply=add\n"
                      "d = reduce-window(a, z), window={size=1x2x2x1 lhs_dilate=1x2x1x1 "
                      "rhs_dilate=1x1x3x1}, to_apply=add",
                      {"r": "f32[2,5,5,3]", "d": "f32[2,16,6,3]"}),
    "select_and_scatter": ("a = f32[4,6] parameter(0)\ns = f32[2,2] parameter(1)\n"
                           "z = f32[] constant(0)\nr = select-and-scatter(a, s, z), "
                           "window={size=2x3 stride=2x3}, select=ge, scatter=add",
                           {"r": "f32[4,6]"}),
    "convolution": ("x = f32[8,32,32,3] parameter(0)\nw = f32[5,5,3,16] parameter(1)\n"
                    "c = convolution(x, w), window={size=5x5 stride=2x2 pad=2_2x2_2}, "
                    "dim_labels=b01f_01io->b01f\n"
                    "g = f32[2,6,9,8] parameter(2)\nk = f32[6,2,3,2] parameter(3)\n"
                    "h = convolution(g, k), window={size=3x2 stride=1x3 pad=1_-1x0_1 "
                    "lhs_dilate=2x1 rhs_dilate=1x2}, dim_labels=bf01_oi01->bf01, "
                    "feature_group_count=3\n"
                    "p = f32[4,3,5,5] parameter(4)\nq = f32[2,2,3,6] parameter(5)\n"
                    "b = convolution(p, q), window={size=2x2}, dim_labels=bf01_01io->01fb, "
                    "batch_group_count=2",
                    {"c": "f32[8,16,16,16]", "h": "f32[2,6,15,3]", "b": "f32[4,4,6,2]"}),
    "gather_scatter": ("o = f32[3,3] parameter(0)\ni = s32[2] parameter(1)\n"
                       "g = gather(o, i), offset_dims={1}, collapsed_slice_dims={0}, "
                       "start_index_map={0}, index_vector_dim=1, slice_sizes={1,3}\n"
                       "b = f32[2,3,4] parameter(2)\nj = s32[2,5] parameter(3)\n"
                       "h = gather(b, j), offset_dims={2}, collapsed_slice_dims={2}, "
                       "start_index_map={2}, index_vector_dim=2, slice_sizes={1,3,1}, "
                       "operand_batching_dims={0}, start_indices_batching_dims={0}\n"
                       "k = s32[4,7,2] parameter(4)\n"
                       "w = gather(b, k), offset_dims={0,3}, collapsed_slice_dims={0}, "
                       "start_index_map={1,2}, index_vector_dim=2, slice_sizes={1,2,2}\n"
                       "u = f32[2,3] parameter(5)\n"
                       "s = scatter(o, i, u), update_window_dims={1}, inserted_window_dims={0}, "
                       "scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add",
                       {"g": "f32[2,3]", "h": "f32[2,5,3]", "w": "f32[2,4,7,2]",
                        "s": "f32[3,3]"}),
    "data_movement": ("a = f32[2,3] parameter(0)\nz = f32[] constant(0)\n"
                      "p = pad(a, z), padding=1_-1_2x0_2\nt = transpose(a), dimensions={1,0}\n"
                      "c = concatenate(a, a, a), dimensions={0}\nr = reverse(a), dimensions={0,1}\n"
                      "b = broadcast(z), dimensions={}\nx = broadcast(a), dimensions={5}",
                      {"p": "f32[4,5]", "t": "f32[3,2]", "c": "f32[6,3]", "r": "f32[2,3]",
                       "b": "f32[]", "x": "f32[5,2,3]"}),
    "sort_map": ("a = f32[5] parameter(0)\nb = s32[5] parameter(1)\n"
                 "s = sort(a, b), dimensions={0}, to_apply=lt\n"
                 "m = map(a, a), dimensions={0}, to_apply=to_int",
                 {"s": "(f32[5], s32[5])", "m": "s32[5]"}),
    "control_flow": ("x = f32[4] parameter(0)\nz = s32[] constant(0)\ns = tuple(z, x)\n"
                     "w = while(s), condition=cond, body=body\nc = call(x), to_apply=pair\n"
                     "p = pred[] parameter(1)\n"
                     "d = conditional(p, x, x), true_computation=pair, false_computation=neg_pair\n"
                     "i = s32[] parameter(2)\n"
                     "e = conditional(i, x, x, x), branch_computations={pair, neg_pair, pair}",
                     {"w": "(s32[], f32[4])", "c": "(f32[4], f32[4])", "d": "(f32[4], f32[4])",
                      "e": "(f32[4], f32[4])"}),
    "library_ops": ("a = f32[3,8] parameter(0)\nf = fft(a), fft_type=RFFT, fft_length={8}\n"
                    "k = topk(a), k=2\nm = f32[2,4,4] parameter(1)\nc = cholesky(m), lower=true\n"
                    "b = f32[2,4,3] parameter(2)\nt = triangular-solve(m, b), left_side=true, "
                    "lower=true, unit_diagonal=false, transpose_a=NO_TRANSPOSE\n"
                    "s = f32[8] parameter(3)\n"
                    "n = batch-norm-training(a, s, s), epsilon=0.001, feature_index=1\n"
                    "g = get-dimension-size(a), dimensions={1}\nr = replica-id()\n"
                    "l = after-all()",
                    {"f": "c64[3,5]", "k": "(f32[3,2], s32[3,2])", "c": "f32[2,4,4]",
                     "t": "f32[2,4,3]", "n": "(f32[3,8], f32[8], f32[8])", "g": "s32[]",
                     "r": "u32[]", "l": "token[]"}),
}


def _module_text(lines: str) -> str:
    names = [line.split("=")[0].strip() for line in lines.splitlines()]
    return (f"HloModule m\n{COMPS}\nENTRY e {{\n{lines}\n"
            f"ROOT root = tuple({', '.join(names)})\n}}\n")


@pytest.mark.parametrize("case", sorted(CASES))
def test_inferred_shapes(case):
    lines, expected = CASES[case]
    module = parse(_module_text(lines))
    found = {i.name: i.shape for i in module.entry.instructions}
    for name, shape in expected.items():
        assert found[name].to_text(with_layout=False) == shape, name


@pytest.mark.parametrize("case", sorted(CASES))
def test_inferred_shapes_match_xla(xla, case):
    """XLA's parser infers every instruction of the same module; dims and types agree."""
    lines, _ = CASES[case]
    text = _module_text(lines)
    # XLA renames instructions to be unique in the module; the root tuple lists them in order.
    ours = parse(text).entry.root.shape.elements
    theirs = parse(xla.parse(text).to_string()).entry.root.shape.elements
    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        assert a.compatible(b), f"operand {i} of the root: {a} vs XLA {b}"


@pytest.mark.parametrize("opcode, operands, attrs, expected", [
    ("slice", [array("f32", (9, 8))], {"slice": ((1, 8, 3), (0, 8, 1))}, "f32[3,8]"),
    ("dynamic-slice", [array("f32", (9, 8)), array("s32", ()), array("s32", ())],
     {"dynamic_slice_sizes": (2, 8)}, "f32[2,8]"),
    ("dynamic-update-slice", [array("f32", (9, 8)), array("f32", (2, 8)), array("u32", ()),
                              array("u32", ())], {}, "f32[9,8]"),
    ("opt-barrier", [array("f32", (2,))], {}, "f32[2]"),
    ("reduce-precision", [array("f32", (2,))], {"exponent_bits": 5, "mantissa_bits": 2},
     "f32[2]"),
    ("fft", [array("c64", (4, 5))], {"fft_type": "IRFFT", "fft_length": (8,)}, "f32[4,8]"),
    # ragged-dot, XLA's three modes: the ragged lhs dimension is non-contracting (rhs has
    # a group dimension), contracting (one result per group, leading), or a batch one.
    ("ragged-dot", [array("f32", (11, 5)), array("f32", (3, 5, 7)), array("u32", (3,))],
     {"lhs_contracting_dims": (1,), "rhs_contracting_dims": (1,), "lhs_ragged_dims": (0,),
      "rhs_group_dims": (0,)}, "f32[11,7]"),
    ("ragged-dot", [array("f32", (11, 5)), array("f32", (5, 7)), array("u32", (3,))],
     {"lhs_contracting_dims": (1,), "rhs_contracting_dims": (0,), "lhs_ragged_dims": (1,)},
     "f32[3,11,7]"),
    ("ragged-dot", [array("f32", (15, 33, 64)), array("f32", (15, 64, 9)),
                    array("u32", (15, 4))],
     {"lhs_batch_dims": (0,), "rhs_batch_dims": (0,), "lhs_contracting_dims": (2,),
      "rhs_contracting_dims": (1,), "lhs_ragged_dims": (2,)}, "f32[4,15,33,9]"),
    ("ragged-dot", [array("f32", (19, 11, 5)), array("f32", (19, 5, 7)), array("u32", (3,))],
     {"lhs_batch_dims": (0,), "rhs_batch_dims": (0,), "lhs_contracting_dims": (2,),
      "rhs_contracting_dims": (1,), "lhs_ragged_dims": (0,)}, "f32[19,11,7]"),
])
def test_shapes_the_text_usually_spells_out(opcode, operands, attrs, expected):
    assert infer_shape(opcode, operands, attrs).to_text(False) == expected


def test_results_get_default_layouts():
    module = parse("HloModule m\nENTRY e {\na = f32[2,3]{0,1} parameter(0)\n"
                   "ROOT t = transpose(a), dimensions={1,0}\n}")
    assert module.entry.root.shape.layout.minor_to_major == (1, 0)


def test_every_inferable_opcode_has_a_rule():
    assert set(_INFERABLE) <= INFERABLE


F4, F5 = array("f32", (4,)), array("f32", (5,))


@pytest.mark.parametrize("opcode, operands, attrs, message", [
    ("add", [F4, F5], {}, "operand shapes f32[4] and f32[5] differ"),
    ("add", [F4, array("s32", (4,))], {}, "operand types"),
    ("and", [F4, F4], {}, "and does not accept element type f32"),
    ("complex", [array("bf16", (4,))] * 2, {}, "complex needs f32 or f64"),
    ("compare", [F4, F4], {"direction": "XX"}, "direction"),
    ("compare", [F4, F4], {"direction": "LT", "type": "SIGNED"}, "type=SIGNED"),
    ("select", [array("s32", (4,)), F4, F4], {}, "predicate must be pred"),
    ("dot", [array("f32", (2, 3)), array("f32", (4, 5))],
     {"lhs_contracting_dims": (1,), "rhs_contracting_dims": (0,)}, "contracting dimensions differ"),
    ("transpose", [array("f32", (2, 3))], {"dimensions": (0,)}, "permutation"),
    ("transpose", [array("f32", (2, 3))], {"dimensions": (0, 2)}, "out of range"),
    ("concatenate", [F4, array("f32", (4, 1))], {"dimensions": (0,)}, "differ outside"),
    ("pad", [F4, array("f32", ())], {"padding": ((-3, -3, 0),)}, "invalid"),
    ("slice", [F4], {"slice": ((0, 5, 1),)}, "invalid for a dimension of size 4"),
    ("dynamic-slice", [F4, array("s32", ())], {"dynamic_slice_sizes": (5,)}, "do not fit"),
    ("dynamic-slice", [F4, array("f32", ())], {"dynamic_slice_sizes": (2,)}, "integers"),
    ("get-tuple-element", [F4], {"index": 0}, "must be a tuple"),
    ("convolution", [array("f32", (1, 4, 5)), array("f32", (3, 2, 2))],
     {"dim_labels": ConvDimLabels("bf0", "oi0", "bf0"), "window": Window.default(1, (2,))},
     "input features 4"),
    ("convolution", [array("f32", (1, 2, 5)), array("f32", (3, 2, 2))],
     {"dim_labels": ConvDimLabels("bf0", "oi0", "bf0"), "window": Window.default(1, (3,))},
     "window size"),
    ("gather", [array("f32", (3, 3)), array("s32", (2,))],
     {"offset_dims": (1,), "collapsed_slice_dims": (0,), "start_index_map": (0,),
      "index_vector_dim": 1, "slice_sizes": (2, 3)}, "slice size <= 1"),
    ("convert", [F4], {}, "cannot be inferred"),
])
def test_inconsistent_operands_raise(opcode, operands, attrs, message):
    with pytest.raises(HloError, match=message.replace("[", r"\[").replace("]", r"\]")
                       .replace("(", r"\(")):
        infer_shape(opcode, operands, attrs)


def _computation(text: str):
    module = parse(f"HloModule m\n{text}\nENTRY e {{\nROOT p = f32[] parameter(0)\n}}")
    return module.computations[0]


def test_called_computation_signatures_are_checked():
    three = _computation("c { a = f32[] parameter(0)\n b = f32[] parameter(1)\n"
                         " x = f32[] parameter(2)\n ROOT r = f32[] add(a, b) }")
    with pytest.raises(HloError, match=r"takes \(f32\[\], f32\[\], f32\[\]\), expected "
                                       r"\(f32\[\], f32\[\]\)"):
        infer_shape("reduce", [F4, array("f32", ())], {"dimensions": (0,), "to_apply": three})
    to_int = _computation("c { a = f32[] parameter(0)\n b = f32[] parameter(1)\n"
                          " ROOT r = s32[] convert(a) }")
    with pytest.raises(HloError, match="returns s32"):
        infer_shape("reduce", [F4, array("f32", ())], {"dimensions": (0,), "to_apply": to_int})
    not_pred = _computation("c { a = f32[] parameter(0)\n b = f32[] parameter(1)\n"
                            " ROOT r = f32[] add(a, b) }")
    with pytest.raises(HloError, match="sort comparator"):
        infer_shape("sort", [F4], {"dimensions": (0,), "to_apply": not_pred})
    with pytest.raises(HloError, match="while body"):
        infer_shape("while", [F4], {"condition": _computation(
            "c { a = f32[4] parameter(0)\n ROOT r = pred[] constant(true) }"),
            "body": not_pred})


def test_computation_references_resolve_by_name():
    from hlo_opt.attributes import ComputationRef
    adder = _computation("add { a = f32[] parameter(0)\n b = f32[] parameter(1)\n"
                         " ROOT r = f32[] add(a, b) }")
    shape = infer_shape("reduce", [F4, array("f32", ())],
                        {"dimensions": (0,), "to_apply": ComputationRef("add")},
                        computations={"add": adder})
    assert shape.to_text(False) == "f32[]"
    with pytest.raises(HloError, match="computation nope is not defined"):
        infer_shape("reduce", [F4, array("f32", ())],
                    {"dimensions": (0,), "to_apply": ComputationRef("nope")})


def _shape(text: str):
    return parse(f"HloModule m\nENTRY e {{ ROOT p = {text} parameter(0) }}").entry.root.shape


# Results XLA fixes for transfers and collectives (the parser wants them written out, as
# XLA's does; the verifier compares with these).
@pytest.mark.parametrize("opcode, operands, attrs, expected", [
    ("copy-start", ["f32[4]"], {}, "(f32[4], f32[4], u32[])"),
    ("copy-done", ["(f32[4], f32[4], u32[])"], {}, "f32[4]"),
    ("send", ["f32[4]", "token[]"], {}, "(f32[4], u32[], token[])"),
    ("send-done", ["(f32[4], u32[], token[])"], {}, "token[]"),
    ("recv-done", ["(f32[4], u32[], token[])"], {}, "(f32[4], token[])"),
    ("outfeed", ["f32[4]", "token[]"], {}, "token[]"),
    ("async-done", ["((f32[4]), s32[2], s32[])"], {}, "s32[2]"),
    ("rng-get-and-update-state", [], {}, "u64[2]"),
    ("all-reduce", ["f32[4]", "s32[2]"], {}, "(f32[4], s32[2])"),
    ("all-reduce-done", ["f32[4]"], {}, "f32[4]"),
    ("all-gather-done", ["(f32[2], f32[8])"], {}, "f32[8]"),
    ("all-to-all", ["f32[4]", "f32[4]"], {}, "(f32[4], f32[4])"),
    ("all-to-all", ["f32[8,2]"], {"dimensions": (0,)}, "f32[8,2]"),
    ("collective-permute", ["f32[4]"], {"source_target_pairs": ((0, 1),)}, "f32[4]"),
    ("collective-permute-done", ["(f32[4], f32[4], u32[], u32[])"], {}, "f32[4]"),
    ("collective-broadcast", ["f32[4]"], {}, "f32[4]"),
    ("ragged-all-to-all", ["f32[8]", "f32[16]"] + ["s32[2]"] * 4, {}, "f32[16]"),
])
def test_transfer_and_collective_results(opcode, operands, attrs, expected):
    shape = infer_shape(opcode, [_shape(s) for s in operands], attrs)
    assert shape.to_text(False) == expected


@pytest.mark.parametrize("opcode, operands, message", [
    ("send", ["f32[4]", "f32[4]"], r"send operand 1 must be a token, got f32\[4\]"),
    ("copy-done", ["f32[4]"], r"copy-done needs the tuple its start produced, got f32\[4\]"),
    ("copy-done", ["(f32[4], f32[5], u32[])"], "source f32\\[5\\] and destination f32\\[4\\]"),
    ("all-to-all", ["f32[4]", "f32[5]"], "all-to-all operands f32\\[4\\], f32\\[5\\] differ"),
])
def test_transfer_and_collective_errors(opcode, operands, message):
    with pytest.raises(HloError, match=message):
        infer_shape(opcode, [_shape(s) for s in operands], {})
