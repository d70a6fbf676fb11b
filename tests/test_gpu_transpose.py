"""GPU tiled transposes (`emit_gpu_transpose.py`): which loop kernels read their transposes
through shared-memory tiles, the launch recorded, the PTX structure, ptxas, and the tile
index arithmetic checked in Python (every output element written once; a warp's global
reads and writes contiguous; its shared-memory accesses in 32 banks). Nothing here runs on
a GPU."""
from __future__ import annotations

import itertools

import pytest

import hlo_opt
from hlo_opt.lowering import emit_gpu, emit_gpu_transpose, nvptx
from test_gpu_ptx import assemble, needs_ptxas

tiles = emit_gpu_transpose


def _entry_kernel(text: str):
    """The entry computation as one kernel (the gpu fusion stage leaves a transpose alone),
    and its PTX."""
    kernel = emit_gpu.emit_gpu_kernel(hlo_opt.parse(text).entry, "k")
    return kernel, nvptx.ptx([kernel.ir], [kernel.name])


def transpose_module(ty: str, dims: str, perm: str, tail: str = "") -> str:
    """x: ty[dims] transposed by perm (t), then `tail` (ROOT defaults to t)."""
    sizes = [int(n) for n in dims.split(",")]
    out = ",".join(str(sizes[int(p)]) for p in perm.split(","))
    root = "ROOT " if not tail else ""
    return f"""HloModule m
ENTRY e {{
  x = {ty}[{dims}] parameter(0)
  {root}t = {ty}[{out}] transpose(x), dimensions={{{perm}}}
{tail}
}}
"""


ADD = transpose_module("f32", "1024,768", "1,0", """  y = f32[768,1024] parameter(1)
  ROOT a = f32[768,1024] add(t, y)""")
EXP_BEFORE = """HloModule m
ENTRY e {
  x = f32[1024,768] parameter(0)
  y = f32[768,1024] parameter(1)
  e = f32[1024,768] exponential(x)
  t = f32[768,1024] transpose(e), dimensions={1,0}
  u = f32[768,1024] transpose(x), dimensions={1,0}
  m = f32[768,1024] multiply(t, u)
  ROOT a = f32[768,1024] add(m, y)
}
"""

TILED = {
    "f32[1024,768] -> {1,0}": (transpose_module("f32", "1024,768", "1,0"), 24 * 32, 1),
    "transpose + add": (ADD, 24 * 32, 1),
    "two transposes of fused producers": (EXP_BEFORE, 24 * 32, 2),
    "f64[4,100,50] -> {0,2,1} (partial tiles)":
        (transpose_module("f64", "4,100,50", "0,2,1"), 4 * 2 * 4, 1),
    "c64[40,3,64] -> {2,1,0} (a tile per part)":
        (transpose_module("c64", "40,3,64", "2,1,0"), 3 * 2 * 2, 2),
    "pred[64,64] -> {1,0}": (transpose_module("pred", "64,64", "1,0"), 4, 1),
}


@needs_ptxas
@pytest.mark.parametrize("what", list(TILED))
def test_transpose_moving_the_minor_dimension_goes_through_shared_tiles(what, tmp_path):
    """A block of 256 threads per 32 x 32 tile of the output (the other dimensions one per
    tile): the operand stored to a shared [32][33] array per transpose (and complex part),
    a barrier, the outputs computed from the array, a barrier before the next tile."""
    text, blocks, arrays = TILED[what]
    kernel, ptx = _entry_kernel(text)
    assert (kernel.threads, kernel.blocks) == (256, blocks)
    assert ptx.count("bar.sync") == 2
    assert ptx.count(".shared .align 8 .b8 tile") == arrays
    assert "ld.shared" in ptx and "st.shared" in ptx
    assemble(ptx, tmp_path)


@pytest.mark.parametrize("text", [
    transpose_module("f32", "8,64,32", "1,0,2"),                   # minor dimension kept
    transpose_module("f32", "1000,8", "1,0"),                      # a side narrower than 16
    transpose_module("f32", "64,64", "1,0", """  r = f32[64,64] reverse(t), dimensions={0}
  ROOT n = f32[64,64] negate(r)"""),                               # read at another position
], ids=["minor kept", "narrow", "read reversed"])
def test_other_transposes_stay_a_grid_stride_loop(text):
    _, ptx = _entry_kernel(text)
    assert "bar.sync" not in ptx and ".shared" not in ptx


@pytest.mark.parametrize("dims, across", [((70, 45), 0), ((3, 40, 33), 1), ((33, 2, 65), 0)])
def test_tiles_write_every_output_element_once_and_access_memory_in_order(dims, across):
    """Over every tile and every thread's offsets, each output position comes once; a warp
    (32 consecutive x, one y) reads 32 operand elements along the operand's minor
    dimension (output dimension `across`) and writes 32 consecutive output elements; its
    shared-memory slots fall in 32 different banks both ways."""
    count = 1
    for n in tiles._tiles(dims, across):
        count *= n
    seen = []
    for tile, a, m in itertools.product(range(count), range(tiles.TILE), range(tiles.TILE)):
        coords = tiles.tile_coordinates(None, dims, across, tile, a, m)
        if coords[across] < dims[across] and coords[-1] < dims[-1]:
            seen.append(tuple(coords))
    assert sorted(seen) == list(itertools.product(*map(range, dims)))
    for y in range(tiles.ROWS):
        read = [tiles.tile_coordinates(None, dims, across, 0, x, y) for x in range(32)]
        assert [c[across] for c in read] == list(range(32)) and len({c[-1] for c in read}) == 1
        write = [tiles.tile_coordinates(None, dims, across, 0, y, x) for x in range(32)]
        assert [c[-1] for c in write] == list(range(32)) and len({c[across] for c in write}) == 1
        assert len({tiles.tile_slot(None, y, x) % 32 for x in range(32)}) == 32
        assert len({tiles.tile_slot(None, x, y) % 32 for x in range(32)}) == 32


@needs_ptxas
def test_tiled_transpose_assembles_for_ampere_too(tmp_path):
    kernel = emit_gpu.emit_gpu_kernel(hlo_opt.parse(ADD).entry, "k", "sm_80")
    ptx = nvptx.ptx([kernel.ir], [kernel.name], "sm_80")
    assert ".target sm_80" in ptx and ptx.count("bar.sync") == 2
    assemble(ptx, tmp_path, "sm_80")
