"""GPU reduce schedules other than a block per row (`emit_gpu_columns.py`,
`emit_gpu_split.py`, short rows in `emit_gpu_reduce.py`): which schedule a reduce kernel
gets, the launch recorded with it, the structure of its PTX (barriers, shuffles, shared
memory, the ticket), that ptxas assembles it, and the index arithmetic of tiles and
partitions checked in Python. Nothing here runs on a GPU."""
from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

import hlo_opt
from hlo_opt.fusion.stage import fuse
from hlo_opt.lowering import emit_gpu, emit_gpu_columns, emit_gpu_reduce, emit_gpu_split, nvptx
from hlo_opt.lowering.emit_gpu_reduce import ROW_THREADS
from test_fusion import SOFTMAX
from test_gpu_ptx import ARGMAX, assemble, needs_ptxas, reduce_module


def _kernel(text: str, arch: str = nvptx.DEFAULT_ARCH):
    """The one kernel of the module fused for gpu, and its PTX."""
    [kernel] = emit_gpu.emit_kernels(fuse(hlo_opt.parse(text), "gpu"), arch)
    return kernel, nvptx.ptx([kernel.ir], [kernel.name], arch)


def _entry_kernel(text: str, arch: str = nvptx.DEFAULT_ARCH):
    """The module's entry computation as one kernel (a multi-output reduce kernel), and
    its PTX."""
    kernel = emit_gpu.emit_gpu_kernel(hlo_opt.parse(text).entry, "k", arch)
    return kernel, nvptx.ptx([kernel.ir], [kernel.name], arch)


def stats_module(shape: str, dims: str, kept: str) -> str:
    """The sum, the maximum and the mean of x over `dims`, as one tuple: two reduces of
    the same input and an epilogue."""
    n = 1
    for d in dims.strip("{}").split(","):
        n *= int(shape.strip("[]").split(",")[int(d)])
    return f"""HloModule m
add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}}
max {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] maximum(a, b)
}}
ENTRY e {{
  x = f32{shape} parameter(0)
  z = f32[] constant(0)
  s = f32{kept} reduce(x, z), dimensions={dims}, to_apply=add
  m = f32[] constant(-inf)
  mx = f32{kept} reduce(x, m), dimensions={dims}, to_apply=max
  n = f32[] constant({n})
  nb = f32{kept} broadcast(n), dimensions={{}}
  mean = f32{kept} divide(s, nb)
  ROOT r = (f32{kept}, f32{kept}, f32{kept}) tuple(s, mx, mean)
}}
"""


# -------------------------------------------------------------------- column reductions

COLUMNS = {         # module, tiles, blocks per tile
    "f32[1024,512] over rows": (reduce_module("f32", "add", "0", "{0}", "[1024,512]"), 16, 8),
    "f32[8,100,64] over dim 1": (reduce_module("f32", "add", "0", "{1}", "[8,100,64]"), 16, 1),
    "f32[7,50,3,40] over dims 1,2 (partial tiles)":
        (reduce_module("f32", "maximum", "-inf", "{1,2}", "[7,50,3,40]"), 14, 1),
    "f64 add": (reduce_module("f64", "add", "0", "{0}", "[300,70]"), 3, 2),
    "c64 add": (reduce_module("c64", "add", "(0, 0)", "{0}", "[300,70]"), 3, 2),
    "bf16 maximum": (reduce_module("bf16", "maximum", "-inf", "{0}", "[300,70]"), 3, 2),
    "s8 minimum": (reduce_module("s8", "minimum", "127", "{0}", "[100,70]"), 3, 1),
}


@needs_ptxas
@pytest.mark.parametrize("what", list(COLUMNS))
def test_column_reduction_is_a_block_per_tile_of_columns(what, tmp_path):
    """A reduce keeping the minor dimension: a block of ROW_THREADS threads per tile of 32
    columns of one outer index (and share of its rows); partials through shared memory
    (stored, a barrier, read transposed), combined by a butterfly over the 8 partials of a
    column, and a barrier before the next tile. A tile split over blocks adds a scratch
    buffer (a ticket counter per tile, a 16-byte partial per column and block), one
    atomic ticket and two barriers around it."""
    text, tiles, split = COLUMNS[what]
    kernel, ptx = _kernel(text)
    assert (kernel.threads, kernel.blocks) == (ROW_THREADS, tiles * split)
    scratch = 0 if split == 1 else -(-4 * tiles // 16) * 16 + tiles * 32 * split * 16
    assert kernel.scratch_bytes == scratch
    assert ptx.count("bar.sync") == (2 if split == 1 else 4)
    assert ptx.count("atom.global.add.u32") == (split > 1)
    assert "st.shared" in ptx and "ld.shared" in ptx
    pieces = 2 if what in ("f64 add", "c64 add") else 1      # 32-bit shuffles per step
    assert ptx.count("shfl.sync.bfly.b32") == 3 * pieces
    assemble(ptx, tmp_path)


@pytest.mark.parametrize("tiles, rows", [(16, 1024), (1, 1 << 20), (3, 300), (16, 100),
                                         (2000, 1 << 16), (1, 100)])
def test_column_split_fills_the_gpu_with_blocks_of_enough_rows(tiles, rows):
    split = emit_gpu_columns.column_split(tiles, rows)
    assert 1 <= split <= emit_gpu_split.MAX_SPLIT
    assert split == 1 or rows // split >= emit_gpu_columns.MIN_ROWS
    assert tiles * (split - 1) < emit_gpu_split.TARGET_BLOCKS


@needs_ptxas
def test_several_column_reduces_and_their_epilogue_are_one_pass(tmp_path):
    """The sum and the maximum over the rows, and the mean, in one kernel: each reduce's
    partials through its own shared array and scratch partials, behind the same barriers
    and ticket."""
    kernel, ptx = _entry_kernel(stats_module("[1000,300]", "{0}", "[300]"))
    assert (kernel.blocks, kernel.n_outputs) == (10 * 7, 3)      # 7 blocks per tile
    assert ptx.count("bar.sync") == 4 and ptx.count("shfl.sync.bfly.b32") == 2 * 3
    assert ptx.count("atom.global.add.u32") == 1
    assert ptx.count("st.global") == 2 + 3 and "div.rn.f32" in ptx     # 2 partials
    assemble(ptx, tmp_path)


@needs_ptxas
def test_variadic_column_reduce_has_a_column_frame(tmp_path):
    """An argmax down the columns (a reducer inlined as its computation)."""
    down_columns = ARGMAX.replace("[6,1000]", "[500,96]").replace("[6]", "[96]")
    kernel, ptx = _kernel(down_columns.replace("dimensions={1}", "dimensions={0}"))

    assert (kernel.blocks, kernel.n_outputs) == (3 * 3, 2) and ptx.count("bar.sync") == 4
    assemble(ptx, tmp_path)


def test_column_tiles_are_read_and_combined_without_bank_conflicts():
    """Every (part, column) partial of a tile is combined by exactly one thread, a group of
    PARTS consecutive lanes per column; a warp's writes (one part, 32 columns) and reads
    (a transposed 8 x 4 piece) each touch 32 different banks (32-bit slots)."""
    cols = emit_gpu_columns
    readers = [cols.combined_by(None, t) for t in range(ROW_THREADS)]
    assert sorted(readers) == sorted(itertools.product(range(cols.PARTS), range(cols.TILE)))
    for t in range(0, ROW_THREADS, cols.PARTS):
        assert {readers[t + i][1] for i in range(cols.PARTS)} == {readers[t][1]}
        assert [readers[t + i][0] for i in range(cols.PARTS)] == list(range(cols.PARTS))
    for warp in range(ROW_THREADS // 32):
        lanes = range(warp * 32, warp * 32 + 32)
        writes = {cols.partial_slot(None, t // cols.TILE, t % cols.TILE) % 32 for t in lanes}
        reads = {cols.partial_slot(None, *readers[t]) % 32 for t in lanes}
        assert len(writes) == len(reads) == 32


def test_reduces_over_different_dimensions_stay_one_thread_per_output():
    """A kernel with a row and a column reduce of one input has no common schedule."""
    text = stats_module("[100,300]", "{0}", "[300]").replace(
        "mx = f32[300] reduce(x, m), dimensions={0}", "mx = f32[100] reduce(x, m), dimensions={1}"
    ).replace("(f32[300], f32[300], f32[300])", "(f32[300], f32[100], f32[300])")
    kernel, ptx = _entry_kernel(text)
    assert "bar.sync" not in ptx and kernel.blocks == -(-300 // 256)


# --------------------------------------------------------------- rows over many blocks

@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_sum_to_a_scalar_is_split_over_blocks_and_finished_by_the_last(arch, tmp_path):
    """f32[1<<20] to a scalar: 128 blocks each fold 8192 elements and publish a partial
    (fence, atomic ticket); the block drawing the last ticket combines the 128 partials
    (three barriers in all) and stores the result. The scratch buffer is the last
    argument: the ticket counter, then a 16-byte slot per partial."""
    kernel, ptx = _kernel(reduce_module("f32", "add", "0", "{0}", "[1048576]"), arch)
    assert (kernel.threads, kernel.blocks) == (ROW_THREADS, 128)
    assert kernel.scratch_bytes == 16 + 128 * 16
    assert ptx.count(".param .u64") == kernel.n_outputs + kernel.n_inputs + 1
    assert ptx.count("atom.global.add.u32") == 1 and ptx.count("fence.acq_rel.gpu") == 2
    assert ptx.count("bar.sync") == 3 and ptx.count("st.global") == 2
    assemble(ptx, tmp_path, arch)


@needs_ptxas
def test_several_long_row_reduces_share_one_ticket(tmp_path):
    """The sum, maximum and mean of 4 rows of 2^21: 256 blocks per row (the GPU filled),
    each publishing two partials before its one ticket."""
    kernel, ptx = _entry_kernel(stats_module("[4,2097152]", "{1}", "[4]"))
    split = emit_gpu_split.split_count(4, 2097152)
    assert split == 256 and kernel.blocks == 4 * split
    assert kernel.scratch_bytes == 16 + 2 * 4 * split * 16
    assert ptx.count("atom.global.add.u32") == 1 and ptx.count("st.global") == 2 + 3
    assemble(ptx, tmp_path)


def test_long_rows_read_along_the_row_are_not_split():
    """A softmax of two long rows needs each row's maximum in every block reading the row:
    one block per row."""
    kernel, ptx = _entry_kernel(SOFTMAX.replace("64,256", "2,262144").replace("[64]", "[2]"))
    assert (kernel.blocks, kernel.scratch_bytes) == (2, 0) and "atom" not in ptx


@pytest.mark.parametrize("rows, length", [(1, 1 << 20), (1, 1 << 30), (4, 262144),
                                          (64, 65536), (6, 20000), (1000, 1 << 16),
                                          (1, 8191), (3000, 1 << 20)])
def test_split_count_fills_the_gpu_with_blocks_of_enough_work(rows, length):
    """Each block folds at least SPLIT_CHUNK elements of its row (else no split); the
    last block combines at most one partial per thread; splitting stops once rows *
    split reaches the target number of blocks."""
    split = emit_gpu_split.split_count(rows, length)
    assert 1 <= split <= emit_gpu_split.MAX_SPLIT
    assert split == 1 or length // split >= emit_gpu_split.SPLIT_CHUNK
    assert rows * (split - 1) < emit_gpu_split.TARGET_BLOCKS
    if split == 1:
        assert length < 2 * emit_gpu_split.SPLIT_CHUNK or rows >= emit_gpu_split.TARGET_BLOCKS / 2


@needs_ptxas
@pytest.mark.parametrize("shape, dims, vector", [
    ("[6,1000]", "{1}", True), ("[1048576]", "{0}", True), ("[6,1002]", "{1}", False)],
    ids=["block per row", "split over blocks", "row length not a multiple of 4"])
def test_cheap_row_folds_read_four_adjacent_elements_at_once(shape, dims, vector, tmp_path):
    """Each thread folds 4 adjacent elements per step when the row length allows it and
    the fused producer is cheap: one 16-byte load."""
    kernel, ptx = _kernel(reduce_module("f32", "add", "0", dims, shape))
    assert ("ld.global.nc.v4.b32" in ptx) == vector
    assemble(ptx, tmp_path)


@needs_ptxas
def test_cheap_row_outputs_store_four_adjacent_elements_at_once(tmp_path):
    """x - max(x) along rows: the fold and the row output both access 4 adjacent
    elements per thread step."""
    text = SOFTMAX.replace("64,256", "64,1024").replace(
        "  d = f32[64,1024] subtract(x, mxb)", "  ROOT d = f32[64,1024] subtract(x, mxb)")
    text = text[:text.index("  e = f32[64,1024]")] + "}\n"
    kernel, ptx = _entry_kernel(text)
    assert kernel.blocks == 64 and ptx.count("bar.sync") == 2
    assert re.findall(r"(?:ld|st)\.global\S*", ptx) == [
        "ld.global.nc.v4.b32", "ld.global.nc.v4.b32", "st.global.v4.b32"]
    assemble(ptx, tmp_path)


def test_expensive_producers_are_folded_one_element_at_a_time():
    """A softmax repeats no exponential four times per step."""
    _, ptx = _entry_kernel(SOFTMAX)
    assert ".v4" not in ptx and ".v2" not in ptx


def side_module(shape: str, dims: str) -> str:
    """y = x + x stored, and the sum of y over `dims`: a multi-output kernel whose
    elementwise output reads no reduce result."""
    text = reduce_module("f32", "add", "0", dims, shape)
    kept = re.search(r"ROOT s = f32(\S*) reduce", text).group(1)
    return text.replace("ROOT s =", "s =").rstrip().removesuffix("}") + \
        f"  ROOT r = (f32{shape}, f32{kept}) tuple(y, s)\n}}\n"


@needs_ptxas
@pytest.mark.parametrize("shape, dims, blocks, barriers", [
    ("[16,1000]", "{1}", 16, 2),              # a block per row
    ("[512,20]", "{1}", 512 // 8, 0),         # a warp per row
    ("[1048576]", "{0}", 128, 3),             # split over blocks
    ("[200,64]", "{0}", 2, 2),                # column tiles
    ("[2048,64]", "{0}", 2 * 16, 4),          # column tiles split over blocks
], ids=["rows", "short rows", "split rows", "columns", "split columns"])
def test_outputs_of_the_input_shape_are_stored_by_the_fold(shape, dims, blocks, barriers,
                                                           tmp_path):
    """An output over the reduce's input shape that reads no result (y = x + x beside
    sum(y)) is stored by the first fold as it visits each element once: the kernel keeps
    its reduce schedule, and x is read once for both (one load instruction)."""
    kernel, ptx = _entry_kernel(side_module(shape, dims))
    assert (kernel.blocks, kernel.n_outputs) == (blocks, 2)
    assert ptx.count("bar.sync") == barriers and ptx.count("ld.global.nc.") == 1
    assemble(ptx, tmp_path)


BATCH_NORM = reduce_module("f32", "add", "0", "{0,2,3}", "[32,64,28,28]")


@needs_ptxas
@pytest.mark.parametrize("text, blocks, scratch, vector", [
    (BATCH_NORM, 64 * 3, True, True),                                        # split rows
    (reduce_module("f32", "add", "0", "{0,2}", "[6,20,12]"), 3, False, False),  # a warp
    (reduce_module("f32", "maximum", "-inf", "{0,2}", "[40,20,300]"), 20, False, True),
], ids=["NCHW batch norm sum", "small", "block per row"])
def test_reduce_keeping_a_middle_dimension_is_a_row_reduction(text, blocks, scratch, vector,
                                                              tmp_path):
    """Reducing the major and the minor dimensions around kept ones (a batch norm's sums
    over N, H, W of NCHW) makes rows of lead x minor elements, read a minor run at a
    time, 4 adjacent elements at once where the run allows."""
    kernel, ptx = _kernel(text)
    assert kernel.blocks == blocks and (kernel.scratch_bytes > 0) == scratch
    assert "shfl.sync.bfly" in ptx and ("ld.global.nc.v4.b32" in ptx) == vector
    assemble(ptx, tmp_path)


@pytest.mark.parametrize("shape, dims", [("[3,5,8]", "{0,2}"), ("[2,3,4,5]", "{0,1,3}"),
                                         ("[7,6]", "{1}"), ("[2,3,4,5]", "{0,2,3}")])
def test_row_positions_cover_each_input_element_once_in_its_row(shape, dims):
    """Element j of row r is the input element whose kept coordinates are r, for every
    (r, j) exactly once."""
    inst = hlo_opt.parse(reduce_module("f32", "add", "0", dims, shape)).entry.root
    lead, rows, minor = emit_gpu_reduce.row_layout(inst)
    sizes = [int(n) for n in shape.strip("[]").split(",")]
    kept = [d for d in range(len(sizes)) if str(d) not in dims.strip("{}").split(",")]
    seen = []
    for r in range(rows):
        for j in range(lead * minor):
            at = emit_gpu_reduce.row_position(None, inst, r)(j)
            coords = np.unravel_index(at, sizes)
            assert np.ravel_multi_index([coords[d] for d in kept],
                                        [sizes[d] for d in kept]) == r
            seen.append(at)
    assert sorted(seen) == list(range(np.prod(sizes)))


# ------------------------------------------------------------------------- short rows

@needs_ptxas
@pytest.mark.parametrize("shape, lanes", [("[4096,8]", 8), ("[1000,20]", 32),
                                          ("[77,3]", 4), ("[500,1]", 1)])
def test_short_rows_take_a_group_of_lanes_each(shape, lanes, tmp_path):
    """Rows shorter than a block get the smallest power-of-two group of lanes covering
    them (at most a warp), ROW_THREADS / lanes rows per block: a butterfly within the
    group and no shared memory or barrier."""
    kernel, ptx = _kernel(reduce_module("f32", "add", "0", "{1}", shape))
    rows = int(shape.strip("[]").split(",")[0])
    assert (kernel.threads, kernel.blocks) == (ROW_THREADS, -(-rows // (ROW_THREADS // lanes)))
    assert ptx.count("shfl.sync.bfly.b32") == lanes.bit_length() - 1
    assert "bar.sync" not in ptx and ".shared" not in ptx
    assemble(ptx, tmp_path)


@needs_ptxas
def test_softmax_of_short_rows_is_a_warp_per_row(tmp_path):
    """Max, sum of exp(x - max) and the normalized row of rows of 100: a warp per row,
    each reduce's result in every lane after its butterfly."""
    kernel, ptx = _entry_kernel(SOFTMAX.replace("64,256", "64,100"))
    assert (kernel.threads, kernel.blocks) == (ROW_THREADS, 64 // 8)
    assert ptx.count("shfl.sync.bfly.b32") == 2 * 5 and "bar.sync" not in ptx
    assemble(ptx, tmp_path)


@needs_ptxas
@pytest.mark.parametrize("text", [
    BATCH_NORM, COLUMNS["f32[1024,512] over rows"][0], COLUMNS["c64 add"][0],
    reduce_module("f64", "add", "0", "{1}", "[4096,8]"), side_module("[2048,64]", "{0}")],
    ids=["split rows", "split columns", "complex columns", "short rows", "side outputs"])
def test_reduce_schedules_assemble_for_ampere_too(text, tmp_path):
    """The fences, atomics and shuffles used are those of sm_70 and later: sm_80 too."""
    _, ptx = _kernel(text, "sm_80") if "tuple" not in text else _entry_kernel(text, "sm_80")
    assert ".target sm_80" in ptx
    assemble(ptx, tmp_path, "sm_80")
