"""Ops with loop structures of their own, lowered to CPU code, against the interpreter:
dot (dimension numbers, batch dims, every accumulation type), convolution (padding, strides,
dilations, groups), reduce (row and column shapes, variadic, narrow accumulation),
reduce-window, gather, scatter, sort, select-and-scatter, and data movement fused into them.
"""
from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest

import hlo_opt
from hlo_opt.tools.hlo_run import random_inputs
from hlo_opt.lowering.conv_lanes import channelwise
from hlo_opt.lowering.conv_pack import InputRuns, input_runs
from hlo_opt.lowering.emit_conv import conv_gemms, one_gemm
from lowering_helpers import ARGMAX_REDUCER, assert_matches, run_both

def check(text: str, seed: int = 0, rel: float = 2e-6):
    """Ours = interpreter on normal random inputs (edge values are the elementwise tests'
    business: here +-max would make sums depend on their order)."""
    module = hlo_opt.parse(text)
    ours, want = run_both(module, random_inputs(module, seed))
    for k, (g, w) in enumerate(zip(ours, want)):
        if w.dtype.kind in "fc" or w.dtype.name == "bfloat16":
            scale = float(np.abs(w.astype(np.complex128 if w.dtype.kind == "c" else np.float64)).max()) if w.size else 0.0
            narrow = w.dtype.itemsize == 2
            assert_matches(g, w, 2 if narrow else 8, f"out{k}",
                           atol=(1e-2 if narrow else rel) * scale)
        else:
            assert_matches(g, w, 0, f"out{k}")


def module(body: str, computations: str = "") -> str:
    return f"HloModule t\n{computations}\nENTRY e {{\n  " + "\n  ".join(
        l.strip() for l in body.strip().splitlines()) + "\n}\n"


ADD = {t: f"add_{t} {{ a = {t}[] parameter(0)\n b = {t}[] parameter(1)\n ROOT r = {t}[] add(a, b) }}"
       for t in ("f32", "bf16", "s32", "f64", "pred", "u8")}
MAX_F32 = "max_f32 { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = f32[] maximum(a, b) }"
MUL_F32 = "mul_f32 { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = f32[] multiply(a, b) }"


# ------------------------------------------------------------------------------ dot

@pytest.mark.parametrize("lhs,rhs,dims,out", [
    ("f32[64,48]", "f32[48,80]", "lhs_contracting_dims={1}, rhs_contracting_dims={0}", "f32[64,80]"),
    ("f32[7,5]", "f32[5,3]", "lhs_contracting_dims={1}, rhs_contracting_dims={0}", "f32[7,3]"),
    ("f32[48,64]", "f32[80,48]", "lhs_contracting_dims={0}, rhs_contracting_dims={1}", "f32[64,80]"),
    ("f32[3,20,30]", "f32[3,30,40]", "lhs_batch_dims={0}, lhs_contracting_dims={2}, "
     "rhs_batch_dims={0}, rhs_contracting_dims={1}", "f32[3,20,40]"),
    ("f32[2,4,16,8]", "f32[2,4,24,8]", "lhs_batch_dims={0,1}, lhs_contracting_dims={3}, "
     "rhs_batch_dims={0,1}, rhs_contracting_dims={3}", "f32[2,4,16,24]"),
    ("f32[6,5,4]", "f32[5,4,7]", "lhs_contracting_dims={1,2}, rhs_contracting_dims={0,1}", "f32[6,7]"),
    ("f32[300,2]", "f32[2,40]", "lhs_contracting_dims={1}, rhs_contracting_dims={0}", "f32[300,40]"),
    ("f32[64,700]", "f32[700]", "lhs_contracting_dims={1}, rhs_contracting_dims={0}", "f32[64]"),
    ("f32[33,17]", "f32[17,65]", "lhs_contracting_dims={1}, rhs_contracting_dims={0}", "f32[33,65]"),
    ("f32[8,0]", "f32[0,5]", "lhs_contracting_dims={1}, rhs_contracting_dims={0}", "f32[8,5]"),
    ("f64[40,30]", "f64[30,50]", "lhs_contracting_dims={1}, rhs_contracting_dims={0}", "f64[40,50]"),
    ("bf16[40,300]", "bf16[300,50]", "lhs_contracting_dims={1}, rhs_contracting_dims={0}", "bf16[40,50]"),
    ("f16[20,30]", "f16[30,50]", "lhs_contracting_dims={1}, rhs_contracting_dims={0}", "f32[20,50]"),
    ("s8[20,30]", "s8[30,10]", "lhs_contracting_dims={1}, rhs_contracting_dims={0}", "s32[20,10]"),
    ("s32[9,30]", "s32[30,10]", "lhs_contracting_dims={1}, rhs_contracting_dims={0}", "s32[9,10]"),
    ("u8[9,30]", "u8[30,10]", "lhs_contracting_dims={1}, rhs_contracting_dims={0}", "u8[9,10]"),
    ("pred[9,30]", "pred[30,10]", "lhs_contracting_dims={1}, rhs_contracting_dims={0}", "pred[9,10]"),
    ("c64[9,30]", "c64[30,10]", "lhs_contracting_dims={1}, rhs_contracting_dims={0}", "c64[9,10]"),
])
def test_dot(lhs, rhs, dims, out):
    check(module(f"""
        x = {lhs} parameter(0)
        y = {rhs} parameter(1)
        ROOT d = {out} dot(x, y), {dims}"""), rel=1e-6)


@pytest.mark.parametrize("m, k, n, dtype", [
    (13, 257, 17, "f32"),       # one full and one ragged tile each way; K past one FMA chain
    (25, 1601, 35, "f32"),      # K in three blocks (partial sums kept in C)
    (97, 300, 50, "f32"),       # rows past a block of A
    (11, 1601, 21, "bf16"),     # K blocks summed in a stack tile, rounded once
    (7, 513, 9, "f64"),
])
def test_packed_gemm_off_the_micro_tile(m, k, n, dtype):
    """M, N, K no multiples of any ISA's micro-tile (MR 6 or 12, NR 16 or 32 f32 lanes) nor of
    the chain or K block: every ragged edge of the micro-kernel, whose B prefetch also
    reaches past its panel, equals the interpreter. tests/test_native_portability.py runs
    this for AVX2 (haswell) too."""
    from hlo_opt.lowering.emit_dot import dot_gemm
    text = module(f"""
        x = {dtype}[{m},{k}] parameter(0)
        y = {dtype}[{k},{n}] parameter(1)
        ROOT d = {dtype}[{m},{n}] dot(x, y), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}""")
    assert dot_gemm(hlo_opt.parse(text).entry.root).packed()
    check(text, rel=1e-5)


def test_dot_reads_fused_transpose_and_convert():
    check(module("""
        x = bf16[32,48] parameter(0)
        y = f32[40,32] parameter(1)
        xc = f32[32,48] convert(x)
        yt = f32[32,40] transpose(y), dimensions={1,0}
        ROOT d = f32[48,40] dot(xc, yt), lhs_contracting_dims={0}, rhs_contracting_dims={0}"""),
          rel=1e-5)


@pytest.mark.parametrize("t", ["f32", "f64", "bf16"])
@pytest.mark.parametrize("m,n,k", [(13, 33, 17), (12, 32, 16), (1, 65, 300), (50, 7, 129)])
@pytest.mark.parametrize("lhs_k,rhs_k", [(1, 0), (0, 0), (1, 1), (0, 1)])
def test_dot_of_transposed_operands_at_panel_edges(t, m, n, k, lhs_k, rhs_k):
    """Operands read straight from memory are packed by vectors (gemm_pack.py): along the
    panel where its rows are contiguous, in transposed lanes x lanes blocks where K is
    (x^T y, x y^T): sizes one past, at and below the micro-tile and vector widths."""
    lhs = f"{t}[{m},{k}]" if lhs_k == 1 else f"{t}[{k},{m}]"
    rhs = f"{t}[{k},{n}]" if rhs_k == 0 else f"{t}[{n},{k}]"
    check(module(f"""
        x = {lhs} parameter(0)
        y = {rhs} parameter(1)
        ROOT d = {t}[{m},{n}] dot(x, y), lhs_contracting_dims={{{lhs_k}}}, rhs_contracting_dims={{{rhs_k}}}"""),
          rel=1e-6)


def test_batched_dot_with_merged_free_dims_and_transposed_operands():
    """Batch dims outermost, two free dims that merge into one strided run (x), K
    contiguous in y: both packed by vectors, batch by batch."""
    check(module("""
        x = f32[3,20,4,6] parameter(0)
        y = f32[3,37,20] parameter(1)
        ROOT d = f32[3,4,6,37] dot(x, y), lhs_batch_dims={0}, lhs_contracting_dims={1}, rhs_batch_dims={0}, rhs_contracting_dims={2}"""),
          rel=1e-6)


def test_dot_of_a_reshaped_input_reads_its_buffer():
    """A scan's step slice squeezed by a reshape is packed from the sliced buffer, in its
    row-major order, like the input itself."""
    check(module("""
        x = f32[64,1,40] parameter(0)
        y = f32[2,32,5,8] parameter(1)
        xs = f32[64,40] reshape(x)
        ys = f32[64,40] reshape(y)
        ROOT d = f32[40,40] dot(xs, ys), lhs_contracting_dims={0}, rhs_contracting_dims={0}"""),
          rel=1e-6)


def test_large_dot_runs_on_threads():
    from hlo_opt.lowering.runtime import kernel_for
    from hlo_opt.targets import cpu_facts
    text = module("""
        x = f32[256,512] parameter(0)
        y = f32[512,384] parameter(1)
        ROOT d = f32[256,384] dot(x, y), lhs_contracting_dims={1}, rhs_contracting_dims={0}""")
    exe = hlo_opt.compile(text)
    kernel = next(iter(exe.kernels.values()))
    assert kernel.parallel(2, cpu_facts.PARALLEL_MIN_WORK) and kernel.extent > 1
    check(text, rel=1e-5)
    del kernel_for


def test_deep_f32_dot_is_as_accurate_as_blas():
    """K = 768 products per element (a transformer's QKV projection): the micro-kernel sums
    them in FMA chains of at most GEMM_CHAIN, added to C, so rounding errors stay at BLAS's
    level (the interpreter's np.matmul); one 768-long chain was ~30% worse on average,
    enough to push attention's softmax past the interpreter check."""
    text = module("""
        x = f32[192,768] parameter(0)
        y = f32[768,256] parameter(1)
        ROOT d = f32[192,256] dot(x, y), lhs_contracting_dims={1}, rhs_contracting_dims={0}""")
    m = hlo_opt.parse(text)
    args = random_inputs(m, 0)
    exact = np.asarray(args[0], np.float64) @ np.asarray(args[1], np.float64)
    [ours], [blas] = run_both(m, args)
    assert np.abs(ours - exact).mean() <= np.abs(blas - exact).mean()


@pytest.mark.parametrize("m, k, n, threads, cols, parts", [
    (512, 768, 768, 2, 2, 1),       # two column blocks of 384: one each, no rows split
    (128, 4096, 4096, 2, 8, 1),     # eight column blocks: no 96 + 32 row split
    (2048, 768, 3072, 2, 6, 1),
    (2050, 300, 64, 2, 1, 2),       # too narrow to split columns: rows in two parts
    (301, 200, 130, 3, 1, 3),       # ragged rows in three parts
    (64, 64, 64, 2, 1, 1),          # not worth threading: one task
])
def test_threads_get_their_own_columns_of_b_else_their_own_rows(m, k, n, threads, cols,
                                                                 parts, monkeypatch):
    """How a GEMM is cut into tasks (column blocks x row parts) for `threads` threads: every
    task packs its block of B once per K block, so columns are split first (no two threads
    pack the same B) and rows only when the blocks would get too narrow; the answer is the
    interpreter's either way."""
    from hlo_opt.lowering.emit_dot import dot_gemm
    from hlo_opt.targets import cpu_facts
    monkeypatch.setattr(cpu_facts, "threads", lambda: threads)
    text = module(f"""
        x = f32[{m},{k}] parameter(0)
        y = f32[{k},{n}] parameter(1)
        ROOT d = f32[{m},{n}] dot(x, y), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}""")
    g = dot_gemm(hlo_opt.parse(text).entry.root)
    assert g.split() == (cols, parts)
    assert g.tasks() == cols * parts
    if m * k * n <= 1 << 26:
        check(text, rel=1e-5)


# ---------------------------------------------------------------------- convolution

@pytest.mark.parametrize("x,w,attrs,out", [
    ("f32[2,9,9,3]", "f32[3,3,3,8]", "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f", "f32[2,9,9,8]"),
    ("f32[2,10,10,4]", "f32[3,3,4,6]", "window={size=3x3 stride=2x2}, dim_labels=b01f_01io->b01f", "f32[2,4,4,6]"),
    ("f32[1,12,12,2]", "f32[3,3,2,4]", "window={size=3x3 pad=2_2x2_2 rhs_dilate=2x2}, dim_labels=b01f_01io->b01f", "f32[1,12,12,4]"),
    ("f32[1,5,5,2]", "f32[2,2,2,3]", "window={size=2x2 pad=1_1x1_1 lhs_dilate=2x2}, dim_labels=b01f_01io->b01f", "f32[1,10,10,3]"),
    ("f32[2,3,8,8]", "f32[5,3,3,3]", "window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_oi01->bf01", "f32[2,5,8,8]"),
    ("f32[2,8,8,4]", "f32[3,3,2,6]", "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, feature_group_count=2", "f32[2,8,8,6]"),
    ("f32[4,6,6,3]", "f32[3,3,3,4]", "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, batch_group_count=2", "f32[2,6,6,4]"),
    ("f32[2,16,3]", "f32[5,3,4]", "window={size=5 pad=2_2 rhs_reversal=1}, dim_labels=b0f_0io->b0f", "f32[2,16,4]"),
    ("bf16[1,6,6,2]", "bf16[3,3,2,3]", "window={size=3x3}, dim_labels=b01f_01io->b01f", "bf16[1,4,4,3]"),
    ("c64[1,5,5,2]", "c64[3,3,2,3]", "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f", "c64[1,5,5,3]"),
    ("c128[2,7,3]", "c128[3,3,2]", "window={size=3 pad=1_1 lhs_dilate=2}, dim_labels=b0f_0io->b0f", "c128[2,13,2]"),
])
def test_convolution(x, w, attrs, out):
    check(conv_module(x, w, attrs, out), rel=1e-5)


# (batch, input channels, output channels) of 8x8 "same" 3x3 convolutions whose input
# packer's rows (neighbouring indices x, x+1, ...) made LLVM 22's SLP vectorizer abort
# ("Expected valid number of unscheduled deps": lowering/jit.py).
@pytest.mark.parametrize("batch,cin,cout", [(2, 3, 4), (2, 5, 8), (2, 7, 8), (3, 5, 3),
                                            (3, 7, 3), (4, 6, 7)])
def test_convolution_shapes_that_aborted_llvm(batch, cin, cout):
    check(conv_module(f"f32[{batch},8,8,{cin}]", f"f32[3,3,{cin},{cout}]",
                      "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f",
                      f"f32[{batch},8,8,{cout}]"), rel=1e-5)


def conv_module(x: str, w: str, attrs: str, out: str) -> str:
    return module(f"""
        x = {x} parameter(0)
        w = {w} parameter(1)
        ROOT c = {out} convolution(x, w), {attrs}""")


# Convolutions on the fast paths, every window feature against the interpreter:
# "runs": input packing copies contiguous runs (conv_pack.input_runs); sizes make them
# packed GEMMs; the K of the first (3*3*100 = 900) crosses K blocks in the middle of runs,
# its M (2*7*7) is no multiple of MR. "lanes": one output feature per group, groups
# innermost, groups in vector lanes (conv_lanes.channelwise): depthwise convolutions, their
# input gradients (reversed kernel, "oi" labels) and their weight gradients (batch groups,
# input batch innermost).
@pytest.mark.parametrize("path,x,w,attrs,out", [
    ("runs", "f32[2,7,7,100]", "f32[3,3,100,8]", "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f", "f32[2,7,7,8]"),
    ("runs", "f32[2,9,9,5]", "f32[3,3,5,16]", "window={size=3x3 pad=-1_2x2_-1}, dim_labels=b01f_01io->b01f", "f32[2,8,8,16]"),
    ("runs", "f32[2,11,10,6]", "f32[3,2,6,16]", "window={size=3x2 stride=2x3 pad=1_0x0_2}, dim_labels=b01f_01io->b01f", "f32[2,5,4,16]"),
    ("runs", "f32[1,12,12,4]", "f32[3,3,4,16]", "window={size=3x3 pad=2_2x1_3 rhs_dilate=2x3}, dim_labels=b01f_01io->b01f", "f32[1,12,10,16]"),
    ("runs", "f32[2,5,6,7]", "f32[3,3,7,16]", "window={size=3x3 pad=1_2x2_1 lhs_dilate=2x3}, dim_labels=b01f_01io->b01f", "f32[2,10,17,16]"),
    ("runs", "f32[2,8,8,12]", "f32[3,3,4,18]", "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, feature_group_count=3", "f32[2,8,8,18]"),
    ("runs", "f32[6,8,8,5]", "f32[3,3,5,12]", "window={size=3x3 pad=1_1x0_0}, dim_labels=b01f_01io->b01f, batch_group_count=3", "f32[2,8,6,12]"),
    ("runs", "f32[2,20,4]", "f32[5,4,16]", "window={size=5 pad=3_1 rhs_reversal=1}, dim_labels=b0f_0io->b0f", "f32[2,20,16]"),
    ("runs", "f32[2,6,6,2]", "f32[2,2,16,2]", "window={size=2x2 pad=1_1x1_1 lhs_dilate=2x2 rhs_dilate=2x2}, dim_labels=b01f_01oi->b01f", "f32[2,11,11,16]"),
    ("runs", "f32[2,6,9,8]", "f32[3,3,8,16]", "window={size=3x3 stride=1x2 pad=1_2x0_0 lhs_dilate=2x1}, dim_labels=b01f_01io->b01f", "f32[2,12,4,16]"),
    ("runs", "f32[2,6,6,8]", "f32[3,4,8,16]", "window={size=3x4 pad=-1_2x3_0 lhs_dilate=2x3 rhs_dilate=3x2}, dim_labels=b01f_01io->b01f", "f32[2,6,13,16]"),
    ("runs", "f32[2,6,6,8]", "f32[1,2,8,16]", "window={size=1x2 pad=0_0x1_1 lhs_dilate=2x2}, dim_labels=b01f_01io->b01f", "f32[2,11,12,16]"),
    ("runs", "f32[2,6,6,8]", "f32[3,3,4,16]", "window={size=3x3 pad=1_2x1_2 lhs_dilate=2x2}, dim_labels=b01f_01io->b01f, feature_group_count=2", "f32[2,12,12,16]"),
    ("runs", "f32[2,9,9,8]", "f32[2,7,7,16]", "window={size=7x7}, dim_labels=f01b_i01o->01bf", "f32[3,3,8,16]"),
    ("runs", "f32[4,9,9,8]", "f32[4,4,4,16]", "window={size=4x4 pad=1_0x1_0 rhs_dilate=2x2}, dim_labels=f01b_i01o->01bf", "f32[4,4,8,16]"),
    ("runs", "f32[4,9,9,8]", "f32[4,9,9,32]", "window={size=9x9 pad=1_1x1_1}, dim_labels=f01b_i01o->01bf, batch_group_count=2", "f32[3,3,4,32]"),
    ("runs", "f32[2,20,9,9]", "f32[16,20,3,3]", "window={size=3x3 stride=2x1 pad=1_1x0_2}, dim_labels=bf01_oi01->bf01", "f32[2,16,5,9]"),
    ("runs", "f64[2,7,7,9]", "f64[3,3,9,16]", "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f", "f64[2,7,7,16]"),
    ("runs", "f32[40,33]", "f32[33,16]", "dim_labels=bf_io->bf", "f32[40,16]"),
    ("runs", "bf16[2,7,7,20]", "bf16[3,3,20,16]", "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f", "bf16[2,7,7,16]"),
    ("runs", "f16[4,9,9,8]", "f16[4,7,7,16]", "window={size=7x7 pad=1_0x0_1}, dim_labels=f01b_i01o->01bf", "f16[4,4,8,16]"),
    ("lanes", "f32[2,9,9,20]", "f32[3,3,1,20]", "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, feature_group_count=20", "f32[2,9,9,20]"),
    ("lanes", "f32[2,9,8,16]", "f32[3,3,16,1]", "window={size=3x3 stride=2x1 pad=-1_2x2_0 rhs_reversal=1x1}, dim_labels=b01f_01oi->b01f, feature_group_count=16", "f32[2,4,8,16]"),
    ("lanes", "f32[1,5,5,8]", "f32[2,2,1,8]", "window={size=2x2 pad=1_1x1_1 lhs_dilate=2x2 rhs_dilate=1x2}, dim_labels=b01f_01io->b01f, feature_group_count=8", "f32[1,10,9,8]"),
    ("lanes", "f64[3,7,7,17]", "f64[3,7,7,17]", "window={size=7x7 pad=1_1x1_1}, dim_labels=f01b_i01o->01bf, batch_group_count=17", "f64[3,3,1,17]"),
    ("lanes", "f32[4,8,8,16]", "f32[4,4,4,16]", "window={size=4x4 pad=1_0x1_0 rhs_dilate=2x2}, dim_labels=f01b_i01o->01bf, batch_group_count=16", "f32[3,3,1,16]"),
])
def test_convolution_fast_paths(path, x, w, attrs, out):
    text = conv_module(x, w, attrs, out)
    conv = hlo_opt.parse(text).entry.root
    if path == "runs":
        assert input_runs(conv) is not None and any(g.packed() for g in conv_gemms(conv))
    else:
        assert channelwise(conv) is not None and not one_gemm(conv)
    check(text, rel=1e-5)


def _with_denormals(shape, rng, share=0.3):
    """Normal random values, `share` of them replaced by denormals of both signs."""
    x = rng.standard_normal(shape).astype(np.float32)
    tiny = (rng.random(shape) * 2.0 ** -126 * np.sign(x)).astype(np.float32)
    return np.where(rng.random(shape) < share, tiny, x)


@pytest.mark.parametrize("text", [
    module("""
        x = f32[96,200] parameter(0)
        y = f32[200,80] parameter(1)
        ROOT d = f32[96,80] dot(x, y), lhs_contracting_dims={1}, rhs_contracting_dims={0}"""),
    conv_module("f32[2,7,7,100]", "f32[3,3,100,8]",
                "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f", "f32[2,7,7,8]"),
])
def test_gemm_over_denormal_operands_equals_the_interpreter(text):
    """Packing reads denormal operands as zero (vector_ops.flush_denormal): each product it
    drops is below 2^-126 times the other factor, far inside the tolerance of a sum of
    normal products."""
    module_ = hlo_opt.parse(text)
    rng = np.random.default_rng(3)
    args = [_with_denormals(p.shape.dims, rng) for p in module_.entry.parameters]
    assert all(np.count_nonzero(np.abs(a) < 2.0 ** -126) > a.size // 5 for a in args)
    (got,), (want,) = run_both(module_, args)
    assert_matches(got, want, 8, atol=2e-6 * float(np.abs(want).max()))


def test_gemm_whose_products_are_all_denormal_scale_gives_zero():
    """The documented difference from IEEE arithmetic: a sum of denormal-scale products
    (every row of x denormal) is 0 where the interpreter gives a denormal-scale value."""
    text = module("""
        x = f32[64,48] parameter(0)
        y = f32[48,80] parameter(1)
        ROOT d = f32[64,80] dot(x, y), lhs_contracting_dims={1}, rhs_contracting_dims={0}""")
    rng = np.random.default_rng(4)
    x = _with_denormals((64, 48), rng, share=1.0)
    y = rng.standard_normal((48, 80)).astype(np.float32)
    (got,), (want,) = run_both(text, [x, y])
    assert np.abs(want).max() < 2.0 ** -120 and np.count_nonzero(want) > want.size // 2
    assert_matches(got, np.zeros_like(want))


def test_nhwc_convolution_input_runs():
    """Per output position and tap row, the taps of the innermost spatial dim times the
    input features are one run (3x64 elements) when there are no feature groups; the
    features of one tap (16) with them; and nothing contiguous along K when the features
    are not innermost."""
    def runs(x, w, attrs, out):
        return input_runs(hlo_opt.parse(conv_module(x, w, attrs, out)).entry.root)
    assert runs("f32[1,8,8,64]", "f32[3,3,64,8]", "window={size=3x3 pad=1_1x1_1}, "
                "dim_labels=b01f_01io->b01f", "f32[1,8,8,8]") == InputRuns((0,), 1, 192)
    assert runs("f32[1,8,8,64]", "f32[3,3,16,8]", "window={size=3x3 pad=1_1x1_1}, "
                "dim_labels=b01f_01io->b01f, feature_group_count=4", "f32[1,8,8,8]") == \
        InputRuns((0, 1), None, 16)
    assert runs("f32[1,8,8,64]", "f32[3,3,64,8]", "window={size=3x3 rhs_dilate=1x2}, "
                "dim_labels=b01f_01io->b01f", "f32[1,6,4,8]") == InputRuns((0, 1), None, 64)
    assert runs("f32[1,64,8,8]", "f32[8,64,3,3]", "window={size=3x3 pad=1_1x1_1}, "
                "dim_labels=bf01_oi01->bf01", "f32[1,8,8,8]") == InputRuns((0, 1), None, 64, 64)
    text = conv_module("f32[2,8,8,64]", "f32[3,3,64,8]", "window={size=3x3 pad=1_1x1_1}, "
                       "dim_labels=b01f_01io->b01f", "f32[2,8,8,8]")
    [kernel] = hlo_opt.compile(text).kernels.values()
    assert "llvm.masked.load.v16f32" in kernel.ir      # the runs, 16 lanes at a time


def test_base_dilated_convolution_skips_dilation_holes():
    """With lhs_dilate=2x2 (an input gradient of a stride-2 convolution), each of the four
    output phases meets the input under its own taps only: 2x2, 2x1, 1x2 and 1x1 of the
    3x3 window, as four GEMMs over the undilated input."""
    text = conv_module("f32[2,8,8,32]", "f32[3,3,32,16]", "window={size=3x3 pad=1_2x1_2 "
                       "lhs_dilate=2x2}, dim_labels=b01f_01io->b01f", "f32[2,16,16,16]")
    conv = hlo_opt.parse(text).entry.root
    gemms = conv_gemms(conv)
    assert sorted((g.m, g.k) for g in gemms) == [(128, 32), (128, 64), (128, 64), (128, 128)]
    assert not one_gemm(conv)
    check(text, rel=1e-5)


def test_threaded_base_dilated_convolution_gives_each_thread_its_own_workspace():
    """A stride-2 convolution's input gradient (cnn_train) large enough to run on threads:
    its four phase GEMMs pack into workspaces of different sizes, and a thread in one GEMM
    must not stride into the part of another thread that is in a bigger one (each thread's
    part is the kernel's largest need apart). Runs repeatedly: the overlap was a race."""
    from hlo_opt.targets import cpu_facts
    text = conv_module("f32[64,8,8,128]", "f32[3,3,64,128]", "window={size=3x3 pad=1_2x1_2 "
                       "lhs_dilate=2x2}, dim_labels=b01f_01oi->b01f", "f32[64,16,16,64]")
    m = hlo_opt.parse(text)
    assert len({g.scratch() for g in conv_gemms(m.entry.root)}) > 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exe = hlo_opt.compile(m)
    [kernel] = exe.kernels.values()
    assert kernel.parallel(2, cpu_facts.PARALLEL_MIN_WORK) and kernel.extent > 1
    args = random_inputs(m, 0)
    [want] = hlo_opt.evaluate(m, args)
    for _ in range(6):
        [ours] = exe.run(args)
        assert_matches(ours, want, 8, "out0", atol=1e-5 * float(np.abs(want).max()))


def test_depthwise_convolution_with_fused_reversed_kernel():
    """The kernel's reverse is computed inline (dot_operands) in the vector loop: one
    kernel."""
    text = module("""
        x = f32[2,8,8,24] parameter(0)
        w = f32[3,3,24,1] parameter(1)
        r = f32[3,3,24,1] reverse(w), dimensions={0,1}
        ROOT c = f32[2,8,8,24] convolution(x, r), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01oi->b01f, feature_group_count=24""")
    assert channelwise(hlo_opt.parse(text).entry.root) is not None
    assert len(hlo_opt.compile(text).kernels) == 1
    check(text, rel=1e-5)


# ---------------------------------------------------------------------------- reduce

@pytest.mark.parametrize("shape,dims,t", [
    ("[8,100]", "{1}", "f32"), ("[100,8]", "{0}", "f32"), ("[4,50,33]", "{1}", "f32"),
    ("[4,50,33]", "{0,2}", "f32"), ("[6,7,8]", "{0,1,2}", "f32"), ("[300,40]", "{0}", "bf16"),
    ("[40,300]", "{1}", "bf16"), ("[17,19]", "{0}", "s32"), ("[17,19]", "{1}", "pred"),
    ("[5,0]", "{1}", "f32"), ("[64,64]", "{1}", "f64"), ("[3,1000]", "{1}", "u8"),
])
def test_reduce_sum(shape, dims, t):
    rank = shape.count(",") + 1
    dset = {int(d) for d in dims.strip("{}").split(",")}
    sizes = [int(s) for s in shape.strip("[]").split(",")]
    out = "[" + ",".join(str(s) for i, s in enumerate(sizes) if i not in dset) + "]"
    init = {"pred": "false"}.get(t, "0")
    check(module(f"""
        x = {t}{shape} parameter(0)
        z = {t}[] constant({init})
        ROOT r = {t}{out} reduce(x, z), dimensions={dims}, to_apply=add_{t}""",
                 ADD[t]), rel=1e-5)
    del rank


def test_reduce_max_keeps_nan_and_signed_zero():
    text = module("""
        x = f32[4,64] parameter(0)
        z = f32[] constant(-inf)
        ROOT r = f32[4] reduce(x, z), dimensions={1}, to_apply=max_f32""", MAX_F32)
    x = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    x[0, 17] = np.nan
    x[1] = -0.0
    x[2] = 0.0
    x[2, 5] = -0.0
    ours, want = run_both(text, [x])
    assert_matches(ours[0], want[0], 0, "max")


def test_variadic_argmax_reduce_with_fused_producers():
    comp = ARGMAX_REDUCER
    text = module("""
        x = f32[12,70] parameter(0)
        e = f32[12,70] exponential(x)
        i = s32[12,70] iota(), iota_dimension=1
        m = f32[] constant(-inf)
        z = s32[] constant(0)
        ROOT r = (f32[12], s32[12]) reduce(e, i, m, z), dimensions={1}, to_apply=argmax""",
                  comp)
    check(text)
    # One kernel; its reduce folds in order (scalar), so the exp is a vectorized loop phase
    # first; the iota and the initial values are computed inline.
    from hlo_opt.lowering.fallback import why_not
    from hlo_opt.lowering.phases import split
    [kernel] = hlo_opt.compile(text).kernels.values()
    assert [(p.root.opcode, sorted(m.opcode for m in p.members))
            for p in split(kernel.comp, why_not)] == [
        ("exponential", ["exponential"]), ("reduce", ["constant", "constant", "iota", "reduce"])]


def test_reduce_window_with_padding_strides_and_dilation():
    check(module("""
        x = f32[2,11,13,3] parameter(0)
        z = f32[] constant(-inf)
        ROOT r = f32[2,6,4,3] reduce-window(x, z), window={size=1x3x3x1 stride=1x2x3x1 pad=0_0x1_1x1_1x0_0 rhs_dilate=1x1x2x1}, to_apply=max_f32""",
                 MAX_F32))
    check(module("""
        x = f32[9,8] parameter(0)
        z = f32[] constant(0)
        ROOT r = f32[17,8] reduce-window(x, z), window={size=2x1 pad=1_0x0_0 lhs_dilate=2x1}, to_apply=add_f32""",
                 ADD["f32"]))


@pytest.mark.parametrize("body", [
    # A pool over NHWC: the channels are a run the window leaves alone.
    """x = f32[2,11,13,16] parameter(0)
       z = f32[] constant(-inf)
       ROOT r = f32[2,6,4,16] reduce-window(x, z), window={size=1x3x3x1 stride=1x2x3x1 pad=0_0x1_1x1_1x0_0 rhs_dilate=1x1x2x1}, to_apply=max_f32""",
    # A cumulative max down the columns of a fused product; two tiles, the last partial.
    """x = f32[16,300] parameter(0)
       sq = f32[16,300] multiply(x, x)
       z = f32[] constant(-inf)
       ROOT r = f32[16,300] reduce-window(sq, z), window={size=16x1 pad=15_0x0_0}, to_apply=max_f32""",
    # Narrow floats accumulate in f32; integers exactly.
    """x = bf16[10,40] parameter(0)
       z = bf16[] constant(0)
       ROOT r = bf16[5,40] reduce-window(x, z), window={size=3x1 stride=2x1 pad=1_1x0_0}, to_apply=add_bf16""",
    """x = s32[7,3,12] parameter(0)
       z = s32[] constant(0)
       ROOT r = s32[7,3,12] reduce-window(x, z), window={size=7x2x1 pad=6_0x1_0x0_0}, to_apply=add_s32""",
])
def test_reduce_window_over_rows_folds_tiles_of_columns(body):
    """Windows that leave a minor run of 8 or more alone fold whole input rows into tiles
    of adjacent outputs (emit_reduce._window_layout)."""
    check(module(body, "\n".join([MAX_F32, ADD["bf16"], ADD["s32"]])))


# a fused product near 1 (a cumulative product of normal samples would over/underflow)
NEAR_ONE = """h = f32[] constant(0.1)
  hb = f32[40,300] broadcast(h), dimensions={}
  y = f32[40,300] multiply(x, hb)
  ob = f32[40,300] broadcast(z), dimensions={}
  x1 = f32[40,300] add(y, ob)"""


@pytest.mark.parametrize("shape,init,window,reducer,producer,reverse", [
    # cumsum along rows (the minor dimension): 8 rows folded side by side
    ("f32[16,300]", "0", "size=1x300 pad=0_0x299_0", "add_f32", "", False),
    # cumprod down the columns of a fused product: a vectorized tile and a partial one
    ("f32[40,300]", "1", "size=40x1 pad=39_0x0_0", "mul_f32", NEAR_ONE, False),
    # cummax along a middle dimension, a run of 3 after it, 7 rows before it (no 8 divides)
    ("f32[7,30,3]", "-inf", "size=1x30x1 pad=0_0x29_0x0_0", "max_f32", "", False),
    # narrow floats accumulate in f32, rounded per output; a window wider than the dimension
    ("bf16[6,50]", "0", "size=1x64 pad=0_0x63_0", "add_bf16", "", False),
    # reversed (jnp.cumsum(reverse=True)): folded from the end
    ("s32[20,12]", "0", "size=20x1 pad=0_19x0_0", "add_s32", "", True),
    ("f32[5,33]", "0", "size=1x33 pad=0_0x0_32", "add_f32", "", True),
])
def test_cumulative_windows_are_running_folds(shape, init, window, reducer, producer, reverse):
    """A window spanning a whole dimension from one side (jnp.cumsum, cumprod, cummax) is a
    running fold: O(n) work, not O(n * window). Forwards it folds in the window's own
    order, so even float sums equal the interpreter's bit for bit; reversed, the same terms
    are added from the other end (rounding differs)."""
    from hlo_opt.lowering.emit_reduce import plan_reduce_window
    t = shape.split("[")[0]
    text = module(f"""x = {shape} parameter(0)
        z = {t}[] constant({init})
        {producer}
        ROOT r = {shape} reduce-window({"x1" if producer else "x"}, z), window={{{window}}}, to_apply={reducer}""",
                  "\n".join([MAX_F32, MUL_F32, ADD["f32"], ADD["bf16"], ADD["s32"]]))
    m = hlo_opt.parse(text)
    assert plan_reduce_window(m.entry.root)[1] == m.entry.root.shape.num_elements
    if reverse:
        check(text)
        return
    ours, want = run_both(m, random_inputs(m, 0))
    assert_matches(ours[0], want[0], 0, "running fold")


def test_variadic_reduce_window_over_rows():
    comp = """argmax {
  a = f32[] parameter(0)
  i = s32[] parameter(1)
  b = f32[] parameter(2)
  j = s32[] parameter(3)
  gt = pred[] compare(a, b), direction=GT
  v = f32[] select(gt, a, b)
  k = s32[] select(gt, i, j)
  ROOT t = (f32[], s32[]) tuple(v, k)
}"""
    check(module("""
        x = f32[6,20] parameter(0)
        i = s32[6,20] iota(), iota_dimension=0
        m = f32[] constant(-inf)
        z = s32[] constant(-1)
        ROOT r = (f32[6,20], s32[6,20]) reduce-window(x, i, m, z), window={size=3x1 pad=1_1x0_0}, to_apply=argmax""",
                 comp))


# ------------------------------------------------------------------------------ fft

@pytest.mark.parametrize("x,out,attrs", [
    ("c64[3,16]", "c64[3,16]", "fft_type=FFT, fft_length={16}"),
    ("c64[3,12]", "c64[3,12]", "fft_type=IFFT, fft_length={12}"),
    ("f32[3,10]", "c64[3,6]", "fft_type=RFFT, fft_length={10}"),
    ("c64[3,9]", "f32[3,16]", "fft_type=IRFFT, fft_length={16}"),
    ("c64[2,4,6]", "c64[2,4,6]", "fft_type=FFT, fft_length={4,6}"),
    ("f32[4,6]", "c64[4,4]", "fft_type=RFFT, fft_length={4,6}"),
    ("c128[2,8]", "c128[2,8]", "fft_type=FFT, fft_length={8}"),
    ("c64[2,100]", "c64[2,100]", "fft_type=IFFT, fft_length={100}"),
    ("c64[2,66]", "f32[2,130]", "fft_type=IRFFT, fft_length={130}"),
    ("c64[2,3,70]", "c64[2,3,70]", "fft_type=FFT, fft_length={3,70}"),
    # Every radix of emit_fft.RADICES in one length; lengths with a prime factor above them
    # (Bluestein's chirp-z through a power-of-two FFT), in f32 and f64.
    ("c64[2,60060]", "c64[2,60060]", "fft_type=FFT, fft_length={60060}"),
    ("c64[3,17]", "c64[3,17]", "fft_type=FFT, fft_length={17}"),
    ("c64[2,1009]", "c64[2,1009]", "fft_type=IFFT, fft_length={1009}"),
    ("f32[2,34]", "c64[2,18]", "fft_type=RFFT, fft_length={34}"),
    ("c128[2,1009]", "c128[2,1009]", "fft_type=FFT, fft_length={1009}"),
    # Transforms of any size run compiled (no interpreter fallback).
    ("c64[2,65536]", "c64[2,65536]", "fft_type=FFT, fft_length={65536}"),
    ("f32[64,64]", "c64[64,33]", "fft_type=RFFT, fft_length={64,64}"),
    # Multi-dimensional IRFFT: complex inverse passes over the leading dims, then the real one.
    ("c64[2,8,5]", "f32[2,8,8]", "fft_type=IRFFT, fft_length={8,8}"),
    ("c64[3,4,9]", "f32[3,4,16]", "fft_type=IRFFT, fft_length={3,4,16}"),
    ("f32[2,3,5,7]", "c64[2,3,5,4]", "fft_type=RFFT, fft_length={3,5,7}"),
    ("c64[3,1]", "f32[3,1]", "fft_type=IRFFT, fft_length={1}"),
])
def test_fft(x, out, attrs):
    check(module(f"""
        x = {x} parameter(0)
        ROOT f = {out} fft(x), {attrs}"""), rel=1e-6)


def test_fft_of_no_points_sums_nothing():
    """fft_length 0 (numpy refuses it): an RFFT's one output per row is 0; empty batches
    and empty outputs compute nothing."""
    exe = hlo_opt.compile(module("""
        x = f32[3,0] parameter(0)
        ROOT f = c64[3,1] fft(x), fft_type=RFFT, fft_length={0}"""))
    assert np.array_equal(exe(np.ones((3, 0), np.float32))[0], np.zeros((3, 1), np.complex64))
    exe = hlo_opt.compile(module("""
        x = c64[0,8] parameter(0)
        ROOT f = c64[0,8] fft(x), fft_type=FFT, fft_length={8}"""))
    assert exe(np.ones((0, 8), np.complex64))[0].shape == (0, 8)


def test_fft_reads_fused_producers_and_feeds_consumers():
    """Producers are computed as the first pass reads its lines; consumers read the stored
    transform."""
    check(module("""
        x = f32[4,48] parameter(0)
        y = f32[4,48] parameter(1)
        e = f32[4,48] exponential(x)
        z = c64[4,48] complex(e, y)
        f = c64[4,48] fft(z), fft_type=FFT, fft_length={48}
        h = c64[] constant((0.5, 0))
        hb = c64[4,48] broadcast(h), dimensions={}
        ROOT m = c64[4,48] multiply(f, hb)"""), rel=1e-6)


# ----------------------------------------------------------------- gather, scatter, sort

def test_gather_rows_and_windows():
    check(module("""
        x = f32[10,6] parameter(0)
        i = s32[5] parameter(1)
        ROOT g = f32[5,6] gather(x, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,6}"""))
    check(module("""
        x = f32[8,9,4] parameter(0)
        i = s32[3,2] parameter(1)
        ROOT g = f32[3,2,3,4] gather(x, i), offset_dims={1,2,3}, collapsed_slice_dims={}, start_index_map={0,1}, index_vector_dim=1, slice_sizes={2,3,4}"""))


def test_scatter_add_with_repeated_and_out_of_range_indices():
    text = module("""
        x = f32[10,4] parameter(0)
        i = s32[6,1] parameter(1)
        u = f32[6,4] parameter(2)
        ROOT s = f32[10,4] scatter(x, i, u), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add_f32""",
                  ADD["f32"])
    rng = np.random.default_rng(0)
    x = rng.standard_normal((10, 4)).astype(np.float32)
    i = np.array([[3], [3], [-1], [9], [10], [0]], np.int32)
    u = rng.standard_normal((6, 4)).astype(np.float32)
    ours, want = run_both(text, [x, i, u])
    assert_matches(ours[0], want[0], 0, "scatter")


def test_scatter_overwrite_last_update_wins():
    overwrite = "set { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = f32[] copy(b) }"
    text = module("""
        x = f32[5] parameter(0)
        i = s32[4,1] parameter(1)
        u = f32[4] parameter(2)
        ROOT s = f32[5] scatter(x, i, u), update_window_dims={}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=set""",
                  overwrite)
    ours, want = run_both(text, [np.zeros(5, np.float32), np.array([[1], [2], [1], [4]], np.int32),
                                 np.array([1, 2, 3, 4], np.float32)])
    assert_matches(ours[0], want[0], 0, "scatter set")


@pytest.mark.parametrize("combiner", ["set", "add_f32"])
def test_scatter_split_into_row_parts_applies_updates_in_order(combiner):
    """A scatter large enough for threads runs as parts owning rows of the output (windows
    of 3 rows straddle the parts); repeated starts, negative and past-the-end ones (whole
    windows skipped) give the interpreter's result exactly: the last update wins for
    `set`, and each element's sum is taken in update order."""
    from hlo_opt.lowering.emit_gather import plan_scatter
    overwrite = "set { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = f32[] copy(b) }"
    text = module(f"""
        x = f32[1024,256] parameter(0)
        i = s32[300,1] parameter(1)
        u = f32[300,3,256] parameter(2)
        ROOT s = f32[1024,256] scatter(x, i, u), update_window_dims={{1,2}}, inserted_window_dims={{}}, scatter_dims_to_operand_dims={{0}}, index_vector_dim=1, to_apply={combiner}""",
                  overwrite + "\n" + ADD["f32"])
    rng = np.random.default_rng(0)
    starts = rng.integers(0, 1022, (300, 1)).astype(np.int32)
    starts[::7] = starts[3]                                       # repeated windows
    starts[5], starts[6], starts[9] = -1, 1022, 1021              # skipped; the last fits
    args = [rng.standard_normal((1024, 256)).astype(np.float32), starts,
            rng.standard_normal((300, 3, 256)).astype(np.float32)]
    [scatter] = [i for i in hlo_opt.parse(text).instructions() if i.opcode == "scatter"]
    assert plan_scatter(scatter)[0] == 1024
    ours, want = run_both(text, args)
    assert_matches(ours[0], want[0], 0, "scatter")


def test_many_scalar_updates_into_few_rows_stay_one_part():
    """Every part looks at every update: where that costs more than the parts save, the
    scatter runs whole."""
    from hlo_opt.lowering.emit_gather import plan_scatter
    text = module("""
        x = f32[64,4] parameter(0)
        i = s32[100000,2] parameter(1)
        u = f32[100000] parameter(2)
        ROOT s = f32[64,4] scatter(x, i, u), update_window_dims={}, inserted_window_dims={0,1}, scatter_dims_to_operand_dims={0,1}, index_vector_dim=1, to_apply=add_f32""",
                  ADD["f32"])
    [scatter] = [i for i in hlo_opt.parse(text).instructions() if i.opcode == "scatter"]
    assert plan_scatter(scatter)[0] == 1


def comparator(types, direction: str) -> str:
    """Sort computation `cmp` over operands of `types`, comparing the first's values."""
    params = [f"  p{k} = {t}[] parameter({k})" for k, t in enumerate(t for t in types
                                                                      for _ in "ab")]
    return "cmp {\n" + "\n".join(params) + \
        f"\n  ROOT r = pred[] compare(p0, p1), direction={direction}\n}}"


def test_sort_variadic_stable_descending():
    text = module("""
        x = f32[3,57] parameter(0)
        i = s32[3,57] iota(), iota_dimension=1
        ROOT s = (f32[3,57], s32[3,57]) sort(x, i), dimensions={1}, is_stable=true, to_apply=cmp""",
                  comparator(["f32", "s32"], "GT"))
    x = np.round(np.random.default_rng(0).standard_normal((3, 57)).astype(np.float32) * 2)
    ours, want = run_both(text, [x])
    for g, w in zip(ours, want):
        assert_matches(g, w, 0, "sort")


@pytest.mark.parametrize("n", [1, 2, 3, 9, 100])
def test_sort_of_any_length_is_stable(n):
    """Merge runs of every length, odd ones too (the front and back halves of a merge
    meet in the middle); rows ascending, descending, constant and with many ties."""
    text = module(f"""
        x = s32[4,{n}] parameter(0)
        i = s32[4,{n}] iota(), iota_dimension=1
        ROOT s = (s32[4,{n}], s32[4,{n}]) sort(x, i), dimensions={{1}}, to_apply=cmp""",
                  comparator(["s32", "s32"], "LT"))
    x = np.stack([np.arange(n), np.arange(n)[::-1], np.zeros(n),
                  np.random.default_rng(n).integers(0, 3, n)]).astype(np.int32)
    ours, want = run_both(text, [x])
    for g, w in zip(ours, want):
        assert_matches(g, w, 0, "sort")


def test_sort_along_a_major_dimension_carries_every_operand_type():
    """Rows along dimension 0 (strided) are copied to contiguous scratch once; the merge
    moves bf16, pred, c64 and f64 elements with the key, and equal keys keep their order."""
    text = module("""
        x = bf16[37,3] parameter(0)
        n = bf16[37,3] negate(x)
        p = pred[37,3] parameter(1)
        c = c64[37,3] parameter(2)
        e = f64[37,3] parameter(3)
        ROOT s = (bf16[37,3], pred[37,3], c64[37,3], f64[37,3]) sort(n, p, c, e), dimensions={0}, to_apply=cmp""",
                  comparator(["bf16", "pred", "c64", "f64"], "LT"))
    rng = np.random.default_rng(3)
    x = np.round(rng.standard_normal((37, 3)) * 2).astype(ml_dtypes.bfloat16)
    p = rng.standard_normal((37, 3)) > 0
    c = (rng.standard_normal((37, 3)) + 1j * rng.standard_normal((37, 3))).astype(np.complex64)
    e = rng.standard_normal((37, 3))
    ours, want = run_both(text, [x, p, c, e])
    for g, w in zip(ours, want):
        assert_matches(g, w, 0, "sort")


@pytest.mark.parametrize("largest", ["true", "false"])
def test_topk_orders_nan_first_and_keeps_ties_in_place(largest):
    text = module(f"""
        x = f32[4,33] parameter(0)
        ROOT t = (f32[4,5], s32[4,5]) topk(x), k=5, largest={largest}""")
    x = np.round(np.random.default_rng(0).standard_normal((4, 33)).astype(np.float32))
    x[0, 3], x[1, 7], x[2, 9] = np.nan, np.inf, -np.inf
    ours, want = run_both(text, [x])
    for g, w in zip(ours, want):
        assert_matches(g, w, 0, "topk")


@pytest.mark.parametrize("k", [1, 16, 17, 300])
@pytest.mark.parametrize("largest", ["true", "false"])
def test_topk_with_many_ties_equals_a_stable_sort(k, largest):
    """Up to emit_sort.SELECT_K by insertion into the best k, above it by merge sort: the
    same answer, ties in row order. Rows ascending, descending and random (few values)."""
    text = module(f"""
        x = s32[3,300] parameter(0)
        ROOT t = (s32[3,{k}], s32[3,{k}]) topk(x), k={k}, largest={largest}""")
    x = np.stack([np.arange(300) // 7, np.arange(300)[::-1] // 7,
                  np.random.default_rng(5).integers(0, 9, 300)]).astype(np.int32)
    ours, want = run_both(text, [x])
    for g, w in zip(ours, want):
        assert_matches(g, w, 0, "topk")


def test_xla_topk_custom_call():
    gt = "gt { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = pred[] compare(a, b), direction=GT }"
    text = module("""
        x = f32[3,20] parameter(0)
        ROOT t = (f32[3,4], s32[3,4]) custom-call(x), custom_call_target="TopK", called_computations={gt}""", gt)
    x = np.round(np.random.default_rng(1).standard_normal((3, 20)).astype(np.float32) * 3)
    ours, want = run_both(text, [x])
    for g, w in zip(ours, want):
        assert_matches(g, w, 0, "TopK")


def test_select_and_scatter_max_pool_gradient():
    ge = "ge { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = pred[] compare(a, b), direction=GE }"
    check(module("""
        x = f32[2,8,8,3] parameter(0)
        s = f32[2,4,4,3] parameter(1)
        z = f32[] constant(0)
        ROOT r = f32[2,8,8,3] select-and-scatter(x, s, z), window={size=1x2x2x1 stride=1x2x2x1}, select=ge, scatter=add_f32""",
                 ge + "\n" + ADD["f32"]))


def test_a_convolution_of_one_input_channel_counts_its_packing_as_work():
    """Eight output channels make few flops per packed element: the work that decides
    threading counts the packing (one element-operation per element of the implicit
    im2col), so the kernel is split across threads."""
    from hlo_opt.targets import cpu_facts
    text = module("""
        x = f32[8,64,64,1] parameter(0)
        w = f32[3,3,1,8] parameter(1)
        ROOT c = f32[8,64,64,8] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f""")
    [kernel] = hlo_opt.compile(text).kernels.values()
    flops = 2 * 8 * 64 * 64 * 8 * 9
    assert flops / cpu_facts.GEMM_FLOPS_PER_WORK < cpu_facts.PARALLEL_MIN_WORK <= kernel.work
    assert kernel.extent > 1
    check(text)


def test_select_and_scatter_runs_apart_over_the_dimensions_no_window_spans():
    """A max pool's gradient over NHWC: the windows span neither batch nor channels, so the
    kernel splits over the batch (extent 16) and threads run images apart; overlapping
    windows over every dimension leave one part."""
    from hlo_opt.targets import cpu_facts
    ge = "ge { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = pred[] compare(a, b), direction=GE }"
    for window, out, extent in (("size=1x2x2x1 stride=1x2x2x1", "16,16,16,16", 16),
                                ("size=2x2x2x1 stride=1x1x1x1", "15,31,31,16", 1)):
        text = module(f"""
            x = f32[16,32,32,16] parameter(0)
            s = f32[{out}] parameter(1)
            z = f32[] constant(0)
            ROOT r = f32[16,32,32,16] select-and-scatter(x, s, z), window={{{window}}}, select=ge, scatter=add_f32""",
                      ge + "\n" + ADD["f32"])
        [kernel] = hlo_opt.compile(text).kernels.values()
        assert kernel.extent == extent and kernel.work >= cpu_facts.PARALLEL_MIN_WORK
        check(text)


# ------------------------------------------------------------------- data movement

def test_data_movement_fused_into_one_kernel():
    text = module("""
        x = f32[4,6] parameter(0)
        y = f32[3] parameter(1)
        t = f32[6,4] transpose(x), dimensions={1,0}
        s = f32[6,2] slice(t), slice={[0:6], [1:4:2]}
        r = f32[12] reshape(s)
        k = f32[2] constant({1.5, -2})
        c = f32[17] concatenate(r, y, k), dimensions={0}
        v = f32[17] reverse(c), dimensions={0}
        z = f32[] constant(0)
        p = f32[22] pad(v, z), padding=2_3_0
        q = f32[33] pad(v, z), padding=-1_1_1
        b = f32[3,22] broadcast(p), dimensions={1}
        i = s32[] parameter(2)
        d = f32[3,5] dynamic-slice(b, i, i), dynamic_slice_sizes={3,5}
        ROOT o = (f32[3,22], f32[33], f32[3,5]) tuple(b, q, d)""")
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((4, 6)).astype(np.float32), rng.standard_normal(3).astype(np.float32),
            np.int32(7)]
    ours, want = run_both(text, args)
    for g, w in zip(ours, want):
        assert_matches(g, w, 0, "data movement")


def test_dynamic_update_slice_and_bitcast_with_layouts():
    text = module("""
        x = f32[6,5] parameter(0)
        u = f32[2,3] parameter(1)
        i = s32[] parameter(2)
        j = s32[] parameter(3)
        d = f32[6,5] dynamic-update-slice(x, u, i, j)
        b = f32[5,6]{0,1} bitcast(d)
        e = f32[5,6] add(b, b)
        ROOT o = (f32[6,5], f32[5,6]) tuple(d, e)""")
    rng = np.random.default_rng(0)
    for i, j in ((1, 1), (-3, 9), (5, 4)):
        args = [rng.standard_normal((6, 5)).astype(np.float32),
                rng.standard_normal((2, 3)).astype(np.float32), np.int32(i), np.int32(j)]
        ours, want = run_both(text, args)
        for g, w in zip(ours, want):
            assert_matches(g, w, 0, f"dus at {i},{j}")


def test_large_kernels_split_across_threads_give_the_same_answer():
    """Loops, row and column reductions big enough for the OpenMP team (chunks taken from
    a shared counter), against the interpreter."""
    from hlo_opt.targets import cpu_facts
    text = module("""
        x = f32[1024,600] parameter(0)
        e = f32[1024,600] exponential(x)
        z = f32[] constant(0)
        r = f32[1024] reduce(e, z), dimensions={1}, to_apply=add_f32
        c = f32[600] reduce(e, z), dimensions={0}, to_apply=add_f32
        ROOT t = (f32[1024,600], f32[1024], f32[600]) tuple(e, r, c)""", ADD["f32"])
    exe = hlo_opt.compile(text)
    assert any(k.parallel(2, cpu_facts.PARALLEL_MIN_WORK) for k in exe.kernels.values())
    check(text, rel=1e-5)


def test_a_long_elementwise_chain_compiles_without_recursing_per_link():
    """3,000 dependent elementwise ops in one kernel (deeper than Python's recursion limit)."""
    lines = ["a0 = f32[64] parameter(0)", "y = f32[64] parameter(1)"]
    for i in range(1, 3001):
        op = "negate(a{0})" if i % 3 == 0 else ("add", "multiply", "maximum")[i % 3 - 1] + "(a{0}, y)"
        lines.append(f"a{i} = f32[64] " + op.format(i - 1))
    module = hlo_opt.parse("HloModule m\nENTRY e {\n" + "\n".join(lines) + "\n}\n")
    x = np.linspace(-1, 1, 64, dtype=np.float32)
    np.testing.assert_array_equal(hlo_opt.compile(module)(x, x * 0.5)[0],
                                  hlo_opt.evaluate(module, [x, x * 0.5])[0])
