"""Layout assignment for --target=tpu: every array gets a minor-to-major order and XLA's TPU
tiles, XLA's parser takes the printed module and ours reads it back unchanged, a dot reads its
operands with a contracting dimension minor, and a copy appears only where it is cheaper than
changing the producer's layout."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from random_programs import Program, programs

from conftest import CORPUS, assert_same_ir, corpus_files, corpus_ids
from hlo_opt import evaluate, optimize, parse, xla_oracle
from hlo_opt.targets.tpu_layout import assign_layouts
from hlo_opt.tools.hlo_opt_cli import main as hlo_opt_main
from hlo_opt.tools.hlo_run import random_inputs

FILES = corpus_files()
requires_xla = pytest.mark.skipif(not xla_oracle.available(),
                                  reason=xla_oracle.reason or "jax")


def _assigned(text: str):
    module = assign_layouts(parse(text))
    return module, {i.name: i for i in module.instructions()}


def _assert_same_values(text_a: str, text_b: str, args) -> None:
    """Both modules give the same outputs, bit for bit (NaNs included)."""
    for a, b in zip(evaluate(text_a, args), evaluate(text_b, args)):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _array_leaves(module):
    for inst in module.instructions():
        for leaf in (inst.shape.leaves() if inst.shape.is_tuple else [inst.shape]):
            if leaf.dtype.is_array:
                yield inst, leaf


@requires_xla
@pytest.mark.parametrize("path", FILES, ids=corpus_ids(FILES))
def test_corpus_module_tiled_for_xla_and_read_back(path):
    module = assign_layouts(parse(path.read_text()))
    for inst, leaf in _array_leaves(module):
        assert leaf.layout is not None and leaf.layout.tail.startswith("T("), inst
    text = module.to_text()
    xla_oracle.parse(text)
    assert_same_ir(module, parse(text))


SMALL = [f for f in FILES if f.parent.name == "shared" and not f.name.endswith(".xla_opt.hlo")]
SMALL_XLA_OPT = [f for f in FILES if f.parent.name == "shared" and f.name.endswith(".xla_opt.hlo")]


@requires_xla
@pytest.mark.parametrize("path", SMALL, ids=corpus_ids(SMALL))
def test_optimized_for_tpu_tiled_for_xla_same_values(path):
    # The --target=tpu pipeline: our extraction and fusions, then layouts, which change no value.
    source = parse(path.read_text())
    optimized = optimize(source, target="tpu", time_limit=20)
    untiled = optimized.to_text()
    module = assign_layouts(optimized)
    text = module.to_text()
    xla_oracle.parse(text)
    assert_same_ir(module, parse(text))
    _assert_same_values(untiled, text, random_inputs(source))


@pytest.mark.parametrize("path", SMALL_XLA_OPT, ids=corpus_ids(SMALL_XLA_OPT))
def test_layouts_keep_the_meaning(path):
    # XLA's optimized modules hold bitcasts, rewritten to layout-free ops before layouts change.
    text = path.read_text()
    _assert_same_values(text, assign_layouts(parse(text)).to_text(),
                        random_inputs(parse(text)))


@settings(max_examples=150, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(programs())
def test_random_programs_keep_their_values_and_read_back(program: Program):
    # Transposes, dots, reduces and slices of ranks 0-4 with dims 0-4: layouts (and the
    # copies they bring) change no value, and the text reads back to the same IR.
    module = assign_layouts(parse(program.text))
    text = module.to_text()
    assert_same_ir(module, parse(text))
    if xla_oracle.available() and _xla_parses(program.text):
        xla_oracle.parse(text)
    _assert_same_values(program.text, text, random_inputs(module))


def _xla_parses(text: str) -> bool:
    """Whether XLA takes the untiled program (it refuses a few the generator makes): the
    tiled one must be taken wherever the untiled one is."""
    try:
        xla_oracle.parse(text)
    except xla_oracle.XlaError:
        return False
    return True


def test_transposing_bitcast_relaid_as_a_bitcast_again():
    # p{0,1} read as {1,0} is p's transpose (hlo/layout_free.py): p then takes the layout
    # that makes that transpose free.
    module, by_name = _assigned("""HloModule m
ENTRY e {
  p = f32[2,3]{0,1} parameter(0)
  ROOT b = f32[3,2]{1,0} bitcast(p)
}
""")
    assert by_name["p"].shape.layout.minor_to_major == (0, 1)
    assert [i.opcode for i in module.entry.instructions] == ["parameter", "transpose", "reshape"]


def test_dot_reads_contracting_dims_minor():
    # x[64,256] contracts dim 1, w[256,512] dim 0: x stays {1,0}, w becomes {0,1}, no copy.
    module, by_name = _assigned("""HloModule m
ENTRY e {
  x = f32[64,256] parameter(0)
  w = f32[256,512] parameter(1)
  ROOT d = f32[64,512] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
""")
    assert by_name["x"].shape.to_text() == "f32[64,256]{1,0:T(8,128)}"
    assert by_name["w"].shape.to_text() == "f32[256,512]{0,1:T(8,128)}"
    assert by_name["d"].shape.to_text() == "f32[64,512]{1,0:T(8,128)}"
    assert "copy" not in {i.opcode for i in module.instructions()}


def test_producer_relaid_instead_of_a_copy():
    # The rhs comes through exp and its only other reader is elementwise too: giving the
    # whole chain the K-minor layout (no padding either way: 256x512) avoids any copy.
    module, by_name = _assigned("""HloModule m
ENTRY e {
  x = bf16[64,256] parameter(0)
  p = bf16[256,512] parameter(1)
  w = bf16[256,512] exponential(p)
  d = bf16[64,512] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  n = bf16[256,512] negate(w)
  ROOT t = (bf16[64,512], bf16[256,512]) tuple(d, n)
}
""")
    for name in ("p", "w", "n"):
        assert by_name[name].shape.to_text() == "bf16[256,512]{0,1:T(8,128)(2,1)}", name
    assert "copy" not in {i.opcode for i in module.instructions()}


def test_copy_where_relaying_the_producer_would_pad():
    # e = exp(p) is f32[8,4096]: {1,0} stores 8x4096 words; the dot wants K = dim 0 (8) minor,
    # {0,1}, which pads 8 lanes to 128: 16x the bytes, for e, p and r (tied to e by the
    # elementwise ops). One copy for the dot is cheaper, so e keeps {1,0}.
    module, by_name = _assigned("""HloModule m
ENTRY e {
  y = f32[64,8] parameter(0)
  p = f32[8,4096] parameter(1)
  e = f32[8,4096] exponential(p)
  d = f32[64,4096] dot(y, e), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  r = f32[8,4096] add(e, p)
  ROOT t = (f32[64,4096], f32[8,4096]) tuple(d, r)
}
""")
    assert by_name["e"].shape.layout.minor_to_major == (1, 0)
    [copy] = [i for i in module.instructions() if i.opcode == "copy"]
    assert copy.operands == [by_name["e"]] and by_name["d"].operands[1] is copy
    assert copy.shape.to_text() == "f32[8,4096]{0,1:T(8,128)}"


def test_copy_for_two_dots_that_disagree():
    # x feeds one dot contracting its dim 1 and another contracting its dim 0: one layout
    # cannot serve both, so exactly one of them reads a copy.
    module, by_name = _assigned("""HloModule m
ENTRY e {
  x = f32[256,256] parameter(0)
  w = f32[256,128] parameter(1)
  a = f32[256,128] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  b = f32[256,128] dot(x, w), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  ROOT t = (f32[256,128], f32[256,128]) tuple(a, b)
}
""")
    copies = [i for i in module.instructions() if i.opcode == "copy"]
    assert len(copies) == 1 and copies[0].operands == [by_name["x"]]
    for dot, contracting in (("a", 1), ("b", 0)):
        lhs = by_name[dot].operands[0]
        assert lhs.shape.layout.minor_to_major[0] == contracting, dot


def test_reduce_along_lanes_when_free():
    # Both layouts of f32[256,128] are whole tiles: the reduced dim 0 is made minor.
    _, by_name = _assigned("""HloModule m
add { a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b) }
ENTRY e {
  x = f32[256,128] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[128] reduce(x, z), dimensions={0}, to_apply=add
}
""")
    assert by_name["x"].shape.layout.minor_to_major == (0, 1)
    assert by_name["z"].shape.to_text() == "f32[]{:T(128)}"


def test_while_values_share_one_layout():
    module, by_name = _assigned("""HloModule m
cond { c = (s32[], f32[8,256]) parameter(0)
  i = s32[] get-tuple-element(c), index=0
  n = s32[] constant(4)
  ROOT lt = pred[] compare(i, n), direction=LT }
body { b = (s32[], f32[8,256]) parameter(0)
  i = s32[] get-tuple-element(b), index=0
  one = s32[] constant(1)
  j = s32[] add(i, one)
  v = f32[8,256] get-tuple-element(b), index=1
  w = f32[8,256] exponential(v)
  ROOT t = (s32[], f32[8,256]) tuple(j, w) }
ENTRY e {
  x = f32[8,256] parameter(0)
  z = s32[] constant(0)
  init = (s32[], f32[8,256]) tuple(z, x)
  ROOT loop = (s32[], f32[8,256]) while(init), condition=cond, body=body
}
""")
    texts = {inst.shape.to_text() for inst in module.instructions()
             if inst.opcode in ("tuple", "while", "parameter") and inst.shape.is_tuple}
    assert texts == {"(s32[]{:T(128)}, f32[8,256]{1,0:T(8,128)})"}


@requires_xla
def test_hlo_opt_target_tpu_prints_tiled_layouts(tmp_path, capsys):
    out = tmp_path / "out.hlo"
    assert hlo_opt_main([str(CORPUS / "mlp_fwd_bf16.hlo"), "--target=tpu",
                         "-o", str(out)]) == 0
    text = out.read_text()
    assert "{1,0:T(8,128)(2,1)}" in text
    xla_oracle.parse(text)



def test_large_second_minor_tiles_on_request():
    # bf16[32,256]: 32 rows take XLA's large (16,128)(2,1) tile when the mode is on; 17 rows
    # do not divide by 16 and keep (8,128)(2,1).
    text = """HloModule m
ENTRY e {
  x = bf16[32,256] parameter(0)
  y = bf16[17,256] parameter(1)
  a = bf16[32,256] negate(x)
  ROOT t = (bf16[32,256], bf16[17,256]) tuple(a, y)
}
"""
    module = assign_layouts(parse(text), large_tiles=True)
    by_name = {i.name: i for i in module.instructions()}
    assert by_name["a"].shape.to_text() == "bf16[32,256]{1,0:T(16,128)(2,1)}"
    assert by_name["y"].shape.to_text() == "bf16[17,256]{1,0:T(8,128)(2,1)}"
    if xla_oracle.available():
        xla_oracle.parse(module.to_text())


def test_size_one_dims_are_laid_out_major_not_padded_to_lanes():
    # f32[2,32,1]{2,1,0} would pad its size-1 minor dim to 128 lanes (2x32x128 elements,
    # 99% padding). With the size-1 dim major, {1,0,2:T(2,128)}, it is one 2x128 tile, the
    # same bytes as p's f32[2,32]{1,0:T(2,128)}: the reshape is a bitcast, and no copy.
    module, by_name = _assigned("""HloModule m
ENTRY e {
  p = f32[2,32] parameter(0)
  r = f32[2,32,1] reshape(p)
  e = f32[2,32,1] exponential(r)
  ROOT t = (f32[2,32,1], f32[2,32]) tuple(e, p)
}
""")
    assert by_name["p"].shape.to_text() == "f32[2,32]{1,0:T(2,128)}"
    for name in ("r", "e"):
        assert by_name[name].shape.to_text() == "f32[2,32,1]{1,0,2:T(2,128)}"
    assert "copy" not in {i.opcode for i in module.instructions()}


def test_reshape_takes_the_layout_that_makes_it_a_bitcast():
    # f32[8,256] -> f32[8,2,128] moves data with the result in {2,1,0} (2-row tiles) but
    # not in {2,0,1} (the split-off dim major): the assignment picks the free one.
    _, by_name = _assigned("""HloModule m
ENTRY e {
  p = f32[8,256] parameter(0)
  r = f32[8,2,128] reshape(p)
  ROOT n = f32[8,2,128] negate(r)
}
""")
    assert by_name["r"].shape.to_text() == "f32[8,2,128]{2,0,1:T(8,128)}"
    assert by_name["n"].shape.to_text() == "f32[8,2,128]{2,0,1:T(8,128)}"


def test_transformer_kernels_keep_size_one_dims_out_of_tiles():
    # issue 14: gather_fusion's f32[2,32,1] was {2,1,0}, padded to [2,32,128].
    module = assign_layouts(optimize(parse((CORPUS / "transformer_lm.hlo").read_text()),
                                     target="tpu"))
    for inst, leaf in _array_leaves(module):
        order = leaf.layout.minor_to_major
        if leaf.rank >= 2 and any(d != 1 for d in leaf.dims):
            assert leaf.dims[order[0]] != 1, (inst.name, leaf.to_text())
