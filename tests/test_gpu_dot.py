"""GPU dot and convolution kernels (`lowering/emit_gpu_dot.py`, `gpu_views.py`): a tiled GEMM
with the fused epilogue at the store, on tensor cores (wmma) for f16/bf16 and (precision
allowing) tf32, else SIMT multiply-adds.

No GPU runs these tests: the tiling the kernel uses (its index functions, run on integers)
is checked by a numpy model of the kernel against numpy's matmul; kernels are run on the
host CPU from their own LLVM IR (gpu_sim.py: the block's threads as fibers meeting at real
barriers, wmma computed as PTX defines it in a fragment layout of the simulator's own)
against the interpreter; the PTX of every kind is assembled by ptxas. Neither the NVPTX
backend's code nor the hardware's fragment layout is executed."""
from __future__ import annotations

import itertools
import re
import shutil
import subprocess

import numpy as np
import pytest

import hlo_opt
from hlo_opt.errors import UnsupportedError
from hlo_opt.fusion.stage import fuse
from hlo_opt.lowering import emit_gpu, emit_gpu_dot as gd, gpu_views, nvptx
from hlo_opt.lowering.emit_loops import Index
from gpu_sim import run_kernel

PTXAS = shutil.which("ptxas")
needs_ptxas = pytest.mark.skipif(PTXAS is None, reason="ptxas (CUDA) is not on PATH")
INT = gd.IntArith()


# ------------------------------------------------------------ the tiling, on integers

def _covered(positions) -> list:
    return sorted(map(tuple, positions))


def test_each_tile_element_is_loaded_by_exactly_one_thread():
    for rows, cols in ((gd.BM, gd.BK), (gd.BK, gd.BN)):
        loaded = [p for tid in range(gd.TILE_THREADS)
                  for p in gd.load_positions(INT, tid, rows, cols)]
        assert _covered(loaded) == list(itertools.product(range(rows), range(cols)))


def test_register_tiles_and_warp_fragments_cover_the_output_tile_once():
    simt = [(r, c) for tid in range(gd.TILE_THREADS)
            for r, c in itertools.product(*gd.simt_positions(INT, tid))]
    fragments = []
    for warp in range(gd.TILE_THREADS // 32):
        row, col = gd.warp_origin(INT, 32 * warp)
        for f in range(gd.WARP_COLS // 16):
            _, _, c = gd.fragment_offsets(INT, row, col, 0, f)
            fragments += [divmod(c + i * gd.BN + j, gd.BN) for i in range(16) for j in range(16)]
    stored = [gd.store_position(INT, e) for e in range(gd.BM * gd.BN)]
    whole = list(itertools.product(range(gd.BM), range(gd.BN)))
    assert _covered(simt) == _covered(fragments) == _covered(stored) == whole


def _model(a: np.ndarray, b: np.ndarray, k_step: int | None) -> np.ndarray:
    """The kernel on numpy arrays a[batch, m, k], b[batch, k, n], through its own index
    functions: tiles loaded with zero fill, SIMT register tiles (k_step None) or wmma
    fragments of depth k_step, the accumulated tile stored masked."""
    batch, m, k = a.shape
    n = b.shape[2]
    m_tiles, n_tiles = -(-m // gd.BM), -(-n // gd.BN)
    c = np.full((batch, m, n), np.nan)
    for t in range(batch * m_tiles * n_tiles):
        bi, m0, n0 = gd.tile_origin(INT, t, m_tiles, n_tiles)
        acc = np.zeros(gd.BM * gd.BN)
        for k0 in range(0, k, gd.BK):
            a_s, b_s = np.full(gd.BM * gd.BK, np.nan), np.full(gd.BK * gd.BN, np.nan)
            for tid in range(gd.TILE_THREADS):
                for row, col in gd.load_positions(INT, tid, gd.BM, gd.BK):
                    inside = m0 + row < m and k0 + col < k
                    a_s[row * gd.BK + col] = a[bi, m0 + row, k0 + col] if inside else 0
                for row, col in gd.load_positions(INT, tid, gd.BK, gd.BN):
                    inside = n0 + col < n and k0 + row < k
                    b_s[row * gd.BN + col] = b[bi, k0 + row, n0 + col] if inside else 0
            acc += _simt(a_s, b_s) if k_step is None else _wmma(a_s, b_s, k_step)
        for tid in range(gd.TILE_THREADS):
            for e in range(tid, gd.BM * gd.BN, gd.TILE_THREADS):
                row, col = gd.store_position(INT, e)
                if m0 + row < m and n0 + col < n:
                    c[bi, m0 + row, n0 + col] = acc[e]
    return c


def _simt(a_s, b_s) -> np.ndarray:
    out = np.zeros(gd.BM * gd.BN)
    for tid in range(gd.TILE_THREADS):
        rows, cols = gd.simt_positions(INT, tid)
        for kk in range(gd.BK):
            x = a_s[[r * gd.BK + kk for r in rows]]
            y = b_s[[kk * gd.BN + col for col in cols]]
            for (i, r), (j, col) in itertools.product(enumerate(rows), enumerate(cols)):
                out[r * gd.BN + col] += x[i] * y[j]
    return out


def _wmma(a_s, b_s, k_step: int) -> np.ndarray:
    """Fragments read as wmma's row-major loads do: 16 rows of a leading dimension."""
    out = np.zeros(gd.BM * gd.BN)
    for warp in range(gd.TILE_THREADS // 32):
        row, col = gd.warp_origin(INT, 32 * warp)
        for kk in range(0, gd.BK, k_step):
            for f in range(gd.WARP_COLS // 16):
                ao, bo, co = gd.fragment_offsets(INT, row, col, kk, f)
                x = np.array([[a_s[ao + i * gd.BK + j] for j in range(k_step)] for i in range(16)])
                y = np.array([[b_s[bo + i * gd.BN + j] for j in range(16)] for i in range(k_step)])
                d = x @ y
                for i, j in itertools.product(range(16), range(16)):
                    out[co + i * gd.BN + j] += d[i, j]
    return out


@pytest.mark.parametrize("shape", [(1, 70, 33, 50), (2, 5, 16, 130), (3, 64, 1, 64),
                                   (1, 129, 40, 7)], ids=str)
@pytest.mark.parametrize("k_step", [None, 16, 8], ids=["simt", "wmma_k16", "wmma_k8"])
def test_the_kernels_tiling_computes_the_product_on_ragged_shapes(shape, k_step):
    batch, m, k, n = shape
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((batch, m, k)), rng.standard_normal((batch, k, n))
    np.testing.assert_allclose(_model(a, b, k_step), a @ b, rtol=1e-12, atol=1e-12)


# -------------------------------------------------------------------------- the PTX

def _kernels(text: str, arch: str = "sm_90") -> list:
    module = fuse(hlo_opt.parse(text), "gpu")
    return [emit_gpu.emit_gpu_kernel(comp, name, arch) for name, comp in
            emit_gpu.module_kernels(module)]


def _ptx(kernel, arch: str, tmp_path) -> str:
    """The kernel's PTX, assembled by ptxas for `arch`."""
    ptx = nvptx.ptx([kernel.ir], [kernel.name], arch)
    src = tmp_path / "k.ptx"
    src.write_text(ptx)
    r = subprocess.run([PTXAS, "--gpu-name", arch, str(src), "-o", str(tmp_path / "k.cubin")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[:2000]
    return ptx


def _dot(t: str, m: int, k: int, n: int, attrs: str = "") -> str:
    return f"""HloModule m
ENTRY e {{
  a = {t}[{m},{k}] parameter(0)
  b = {t}[{k},{n}] parameter(1)
  ROOT d = {t}[{m},{n}] dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}{attrs}
}}
"""


def _tiles(*extents) -> int:
    batch, m, n = extents
    return batch * -(-m // gd.BM) * -(-n // gd.BN)


WMMA = re.compile(r"wmma\.mma\.sync\.aligned\.row\.row\.(m16n16k\d+\.[\w.]+)")


@needs_ptxas
@pytest.mark.parametrize("t, mma", [("f32", "m16n16k8.f32.tf32.tf32.f32"),
                                    ("f16", "m16n16k16.f32.f32"),
                                    ("bf16", "m16n16k16.f32.bf16.bf16.f32"),
                                     ("f64", None), ("s32", None), ("u8", None),
                                     ("pred", None)])
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_dot_is_one_tiled_kernel_on_tensor_cores_where_the_type_has_them(t, mma, arch, tmp_path):
    """A 70 x 33 x 50 product (no dimension a multiple of the tile): one block per output
    tile, the K loop through shared memory between barriers; f16/bf16 (and f32 by default,
    as tf32) on wmma, other types on SIMT multiply-adds."""
    [kernel] = _kernels(_dot(t, 70, 33, 50), arch)
    assert (kernel.threads, kernel.blocks) == (gd.TILE_THREADS, _tiles(1, 70, 50))
    ptx = _ptx(kernel, arch, tmp_path)
    assert ".shared" in ptx and "bar.sync" in ptx
    assert set(WMMA.findall(ptx)) == ({mma} if mma else set())
    if t in ("f64", "f32"):
        assert ("fma.rn.f64" in ptx) == (t == "f64")


@needs_ptxas
def test_tf32_operands_are_rounded_to_nearest_on_their_way_into_the_tile(tmp_path):
    [kernel] = _kernels(_dot("f32", 64, 64, 64))
    assert "cvt.rna.tf32.f32" in _ptx(kernel, "sm_90", tmp_path)


@needs_ptxas
@pytest.mark.parametrize("attrs", [", operand_precision={highest,default}",
                                   ", operand_precision={default,highest}"])
def test_f32_dot_at_highest_precision_stays_in_f32(attrs, tmp_path):
    [kernel] = _kernels(_dot("f32", 64, 64, 64, attrs))
    ptx = _ptx(kernel, "sm_90", tmp_path)
    assert "wmma" not in ptx and "fma.rn.f32" in ptx


@needs_ptxas
@pytest.mark.parametrize("t, wmma", [("f16", True), ("bf16", False), ("f32", False)])
def test_before_ampere_only_f16_has_tensor_cores(t, wmma, tmp_path):
    [kernel] = _kernels(_dot(t, 64, 64, 64), "sm_75")
    assert ("wmma.mma" in _ptx(kernel, "sm_75", tmp_path)) == wmma


BATCHED = """HloModule m
ENTRY e {
  a = bf16[3,40,70] parameter(0)
  b = bf16[3,90,40] parameter(1)
  ROOT d = bf16[3,70,90] dot(a, b), lhs_batch_dims={0}, rhs_batch_dims={0},
      lhs_contracting_dims={1}, rhs_contracting_dims={2}
}
"""


@needs_ptxas
def test_batched_dot_with_transposed_operands_is_a_block_per_batch_and_tile(tmp_path):
    """Batch dimensions and contracting dimensions on either side of the operands: the
    tile loads read through the dimension numbers; batches are more tiles."""
    [kernel] = _kernels(BATCHED)
    assert kernel.blocks == _tiles(3, 70, 90)
    assert "wmma.mma" in _ptx(kernel, "sm_80", tmp_path)


MLP = """HloModule m
ENTRY e {
  x = f32[100,96] parameter(0)
  w = f32[96,130] parameter(1)
  bias = f32[130] parameter(2)
  xb = bf16[100,96] convert(x)
  wb = bf16[96,130] convert(w)
  d = bf16[100,130] dot(xb, wb), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  df = f32[100,130] convert(d)
  bb = f32[100,130] broadcast(bias), dimensions={1}
  s = f32[100,130] add(df, bb)
  z = f32[] constant(0)
  zb = f32[100,130] broadcast(z), dimensions={}
  ROOT r = f32[100,130] maximum(s, zb)
}
"""


@needs_ptxas
def test_dot_with_bias_and_relu_is_one_kernel(tmp_path):
    """The gpu fusion stage fuses the bias and relu after the dot: they are applied where
    the tile is stored, one kernel and one launch writing only the final f32 values."""
    kernel = _kernels(MLP)[-1]
    assert (kernel.n_outputs, kernel.n_inputs, kernel.blocks) == (1, 3, _tiles(1, 100, 130))
    ptx = _ptx(kernel, "sm_90", tmp_path)
    assert "wmma.mma.sync.aligned.row.row.m16n16k16.f32.bf16" in ptx and "max.NaN.f32" in ptx
    assert ptx.count("st.global") == 1


@needs_ptxas
def test_operand_converts_before_the_dot_happen_in_the_tile_loads(tmp_path):
    """The whole computation as one kernel: the f32 -> bf16 converts of the operands are
    computed as the tiles are loaded (f32 read from global memory, bf16 written to the
    shared tiles, no kernel of their own)."""
    kernel = emit_gpu.emit_gpu_kernel(hlo_opt.parse(MLP).entry, "k")
    assert kernel.n_inputs == 3
    ptx = _ptx(kernel, "sm_90", tmp_path)
    assert "ld.global.nc.b32" in ptx and "st.shared.b16" in ptx and ptx.count("st.global") == 1
    assert "wmma.mma.sync.aligned.row.row.m16n16k16.f32.bf16" in ptx


def _conv(window: str, lhs: str, rhs: str, out: str, extra: str = "") -> str:
    return f"""HloModule m
ENTRY e {{
  x = {lhs} parameter(0)
  k = {rhs} parameter(1)
  ROOT c = {out} convolution(x, k), window={{{window}}}, dim_labels=b01f_01io->b01f{extra}
}}
"""


CONVS = {
    "padded_strided": _conv("size=3x3 stride=2x2 pad=1_1x1_1", "f32[2,15,15,5]",
                            "f32[3,3,5,12]", "f32[2,8,8,12]"),
    "dilated_f16": _conv("size=3x3 rhs_dilate=2x2", "f16[1,12,12,16]", "f16[3,3,16,32]",
                         "f16[1,8,8,32]"),
    "transposed": _conv("size=3x3 pad=2_2x2_2 lhs_dilate=2x2", "f64[1,5,5,3]",
                        "f64[3,3,3,4]", "f64[1,11,11,4]"),
    "grouped": _conv("size=3x3 pad=1_1x1_1", "f32[2,9,9,8]", "f32[3,3,2,8]",
                     "f32[2,9,9,8]", ", feature_group_count=4"),
    "batch_grouped": _conv("size=3x3", "bf16[4,8,8,3]", "bf16[3,3,3,4]", "bf16[2,6,6,4]",
                           ", batch_group_count=2"),
}
GROUPS = {"grouped": 4, "batch_grouped": 2}


@needs_ptxas
@pytest.mark.parametrize("what", list(CONVS))
def test_convolution_is_an_implicit_gemm_kernel(what, tmp_path):
    """M = batch x output pixels, N = output features (per group), K = taps x input
    features; padding, strides, dilations and groups are index arithmetic in the loads."""
    [kernel] = _kernels(CONVS[what])
    out = kernel.comp.root.shape.dims
    groups = GROUPS.get(what, 1)
    assert kernel.blocks == _tiles(groups, out[0] * out[1] * out[2], out[3] // groups)
    ptx = _ptx(kernel, "sm_90", tmp_path)
    assert ("wmma.mma" in ptx) == (what != "transposed")


QKV = """HloModule m
ENTRY e {
  x = f16[2,16,64] parameter(0)
  w = f16[64,192] parameter(1)
  bias = f16[192] parameter(2)
  d = f16[2,16,192] dot(x, w), lhs_contracting_dims={2}, rhs_contracting_dims={0}
  bb = f16[2,16,192] broadcast(bias), dimensions={2}
  s = f16[2,16,192] add(d, bb)
  q = f16[2,16,64] slice(s), slice={[0:2], [0:16], [0:64]}
  qr = f16[2,16,4,16] reshape(q)
  qt = f16[2,4,16,16] transpose(qr), dimensions={0,2,1,3}
  k = f16[2,16,64] slice(s), slice={[0:2], [0:16], [64:128]}
  kr = f16[2,16,4,16] reshape(k)
  kt = f16[2,4,16,16] transpose(kr), dimensions={0,2,1,3}
  v = f16[2,16,32] slice(s), slice={[0:2], [0:16], [129:192:2]}
  vr = f16[2,16,2,16] bitcast(v)
  ROOT r = (f16[2,4,16,16], f16[2,4,16,16], f16[2,16,2,16]) tuple(qt, kt, vr)
}
"""


def test_each_element_lands_where_the_outputs_views_read_it():
    """Split, reshape, transpose, strided slice and bitcast of the result, run on
    integers: every result position lands where numpy's views put it, and every output
    element is reached exactly once."""
    entry = hlo_opt.parse(QKV).entry
    d = next(i for i in entry.instructions if i.name == "d")
    result = np.arange(np.prod(d.shape.dims)).reshape(d.shape.dims)
    s = result.reshape(2, 16, 192)
    expected = [s[:, :, 0:64].reshape(2, 16, 4, 16).transpose(0, 2, 1, 3),
                s[:, :, 64:128].reshape(2, 16, 4, 16).transpose(0, 2, 1, 3),
                s[:, :, 129:192:2].reshape(2, 16, 2, 16)]
    paths = gd.epilogue_paths(entry, d, [(o, None) for o in entry.root.operands])
    for out, want in zip(entry.root.operands, expected):
        got = np.full(want.shape, -1)
        for p in itertools.product(*map(range, d.shape.dims)):
            valid, where = gpu_views.landing(None, paths[id(out)], Index(d.shape.dims, values=p))
            if valid is not False:
                assert got[tuple(where.values(None))] == -1
                got[tuple(where.values(None))] = result[p]
        np.testing.assert_array_equal(got, want)


@needs_ptxas
def test_split_projection_is_one_kernel_storing_each_part_where_it_lands(tmp_path):
    """A fused QKV projection: the dot and bias computed once per element, stored into
    the one of three outputs (split, reshaped, transposed) it lands in."""
    kernel = emit_gpu.emit_gpu_kernel(hlo_opt.parse(QKV).entry, "k")
    assert (kernel.n_outputs, kernel.blocks) == (3, _tiles(1, 32, 192))
    ptx = _ptx(kernel, "sm_90", tmp_path)
    assert "wmma.mma" in ptx and ptx.count("st.global") == 3


ROW_SUMS = """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
ENTRY e {
  a = f32[16,8] parameter(0)
  b = f32[8,24] parameter(1)
  d = f32[16,24] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  z = f32[] constant(0)
  ROOT r = f32[16] reduce(d, z), dimensions={1}, to_apply=add
}
"""
SYMMETRIZED = """HloModule m
ENTRY e {
  a = f32[16,8] parameter(0)
  b = f32[8,16] parameter(1)
  d = f32[16,16] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  t = f32[16,16] transpose(d), dimensions={1,0}
  ROOT s = f32[16,16] add(d, t)
}
"""
COMPLEX = _dot("c64", 8, 8, 8)


@pytest.mark.parametrize("text, why", [
    (ROW_SUMS, r"reduce \(r\) reads its result other than at one position per element"),
    (SYMMETRIZED, r"add \(s\) reads its result at two positions"),
    (COMPLEX, "complex contractions have no GPU code yet"),
])
def test_refused_forms_are_one_line_errors_at_the_op(text, why):
    module = hlo_opt.parse(text)
    with pytest.raises(UnsupportedError, match=why) as e:
        emit_gpu.emit_gpu_kernel(module.entry, "k")
    assert e.value.line > 0 and "\n" not in str(e.value)


# ------------------------------------------------------------ kernels, executed

HIGHEST = ", operand_precision={highest,highest}"


def _highest(text: str) -> str:
    """The module with its f32 contraction kept off tensor cores (full f32 products)."""
    return re.sub(r"(\b(dot|convolution)\(.*)$", lambda m: m[1] + HIGHEST, text, count=1,
                  flags=re.M)


def _arguments(entry, rng) -> list[np.ndarray]:
    args = []
    for p in entry.parameters:
        if p.shape.dtype.kind == "float":
            args.append(rng.standard_normal(p.shape.dims).astype(p.shape.dtype.numpy))
        else:
            args.append(rng.integers(-50, 50, p.shape.dims).astype(p.shape.dtype.numpy))
    return args


EXACT, ROUNDED = 1e-5, 1e-2     # f32/f64 products; f16/bf16 results or tf32 products
RUNNABLE = {          # HLO, architecture, tolerance relative to the largest result
    "f32_bias_relu": (_highest(MLP.replace("bf16", "f32")), "sm_90", EXACT),
    "f64_ragged": (_dot("f64", 70, 33, 50), "sm_90", EXACT),
    "s32_ragged": (_dot("s32", 5, 130, 67), "sm_90", 0),
    "bf16_bias_relu_simt_before_ampere": (MLP, "sm_75", EXACT),
    "f64_batched_transposed": (BATCHED.replace("bf16", "f64"), "sm_90", EXACT),
    "qkv_split_views": (_highest(QKV.replace("f16", "f32")), "sm_90", EXACT),
    "conv_padded_strided": (_highest(CONVS["padded_strided"]), "sm_90", EXACT),
    "conv_transposed": (CONVS["transposed"], "sm_90", EXACT),
    "conv_grouped": (_highest(CONVS["grouped"]), "sm_90", EXACT),
    "wmma_f16_ragged": (_dot("f16", 70, 33, 50), "sm_90", ROUNDED),
    "wmma_bf16_bias_relu": (MLP, "sm_90", ROUNDED),
    "wmma_bf16_batched_transposed": (BATCHED, "sm_80", ROUNDED),
    "wmma_tf32_qkv_split_views": (QKV.replace("f16", "f32"), "sm_90", ROUNDED),
    "wmma_f16_dilated_conv": (CONVS["dilated_f16"], "sm_90", ROUNDED),
    "wmma_bf16_batch_grouped_conv": (CONVS["batch_grouped"], "sm_80", ROUNDED),
}


@pytest.mark.parametrize("what", list(RUNNABLE))
def test_kernel_run_on_the_host_matches_the_interpreter(what):
    """The kernel's IR executed with its recorded launch (every block, 256 threads each,
    barriers between them; wmma as PTX defines it) gives the interpreter's result on every
    output, to the precision of its types (tf32 keeps 10 mantissa bits of each operand)."""
    text, arch, tolerance = RUNNABLE[what]
    module = hlo_opt.parse(text)
    kernel = emit_gpu.emit_gpu_kernel(module.entry, "k", arch)
    assert ("wmma" in kernel.ir) == what.startswith("wmma")
    args = _arguments(module.entry, np.random.default_rng(1))
    want = hlo_opt.evaluate(module, args)
    want = want if isinstance(want, list) else [want]
    got = [np.full(w.shape, -7, w.dtype) for w in want]
    run_kernel(kernel, got, args)
    for g, w in zip(got, want):
        g, w = g.astype(np.float64), w.astype(np.float64)
        np.testing.assert_allclose(g, w, rtol=0, atol=tolerance * np.abs(w).max())


@pytest.mark.parametrize("t, arch", [("f16", "sm_70"), ("bf16", "sm_80"), ("f32", "sm_80")])
def test_tensor_core_product_of_small_integers_is_exact(t, arch):
    """Integers in [-8, 8]: every wmma product and partial sum is exact (in f16, bf16, tf32
    and f32 alike), so the kernel's result equals the interpreter's bit for bit: each
    element of each fragment went to its place in the product."""
    module = hlo_opt.parse(_dot(t, 70, 33, 50))
    kernel = emit_gpu.emit_gpu_kernel(module.entry, "k", arch)
    assert "wmma.m16n16" in kernel.ir
    rng = np.random.default_rng(3)
    args = [rng.integers(-8, 9, p.shape.dims).astype(p.shape.dtype.numpy)
            for p in module.entry.parameters]
    [want] = hlo_opt.evaluate(module, args)
    got = np.full(want.shape, -7, want.dtype)
    run_kernel(kernel, [got], args)
    np.testing.assert_array_equal(got, want)
