"""The tiles XLA gives an array on TPU (v4 and later), and the padding they cost.

An array on TPU is stored in tiles over its minor physical dimensions (its layout's
minor_to_major order), printed after a colon: f32[3,129]{1,0:T(4,128)}. Each tile is padded to
whole size, so a dimension that is not a multiple of the tile moves and stores whole tiles.
The rules below are the ones XLA prints for v4, v5e, v5p and v6e; a lane is 128 elements wide
and a vector register holds 8 sublanes of 32 bits.

* Rank >= 2: the two most minor physical dimensions are tiled (rows, 128): the lane dimension
  by 128 and the second-minor dimension by 8 rows. A narrow type packs 32/bits elements of
  one column into a 32-bit word, which XLA writes as a second tile: 16-bit (8,128)(2,1),
  8-bit (8,128)(4,1), 4-bit (8,128)(8,1).
* Small second-minor dimensions take smaller tiles: the smallest power of two >= the
  dimension, from `packing` rows (one 32-bit sublane: 1 for 32-bit, 2 for 16-bit, 4 for
  8-bit) up to 8. So f32[1,N] is T(1,128), f32[2,N] T(2,128), f32[3..4,N] T(4,128),
  bf16[1..2,N] T(2,128)(2,1), pred[1,N] T(4,128)(4,1).
* Rank 1: a linear tile of 128*k elements, (128)(p,1)-subtiled for narrow types, with k the
  same row rule applied to ceil(n/128): f32[6] T(128), s32[301] T(512), f32[2048] T(1024),
  bf16[128] T(256)(128)(2,1), pred[7] T(512)(128)(4,1).
* Scalars: one 1-D tile of 128*packing elements without subtiles: f32[]{:T(128)},
  bf16[]{:T(256)}, pred[]{:T(512)}.
* pred is a byte on TPU now and tiles like 8-bit; wider than 32-bit (s64, f64, c64, c128)
  have no public TPU rule: they are given the 32-bit tiles here (an assumption).

Sources (read through the project's search tools):
- openxla/xla docs/tiled_layout.md (https://openxla.org/xla/tiled_layout): tile semantics,
  padding, that only the first tile pads; (8,128) for 32-bit; BF16 (8,128)(2,1) packing two
  rows of a column into one 32-bit word; 8-bit (8,128)(4,1); "2x128 for a second-minor of
  1-2, 4x128 for 3-4"; pred 4 bytes per element.
- jax-ml/jax jaxlib/mosaic/dialect/tpu/transforms/infer_memref_layout.cc (getTilingFactor,
  inferLayout; now also in openxla/xla xla/mosaic/...): the rules above as code: minimum
  tile of `packing` rows from generation 4 on (twice that before), doubling up to 8; rank-1
  tiles 128*k with (128)(p,1) subtiles, "1D tiling is always compact" (k <= 8); and XLA's
  optional "large second-minor" tiles: (16,128)(2,1), (32,128)(4,1), (64,128)(8,1), used
  when the second-minor dimension is a multiple of them.
- openxla/xla xla/shape_util.cc ShapeUtil::ArraySize: bytes come from the first tile only
  (subtiles never pad), and tile dimensions beyond the rank count as size 1 (a scalar under
  T(128) holds 128 elements).
- TPU HLO printed by XLA in public tests and dumps (openxla/xla tests, jax/torch_xla issues):
  f32[1,6144]{1,0:T(1,128)}, bf16[1,6144]{1,0:T(2,128)(2,1)}, pred[1,1]{1,0:T(4,128)(4,1)},
  s32[16]{0:T(128)}, s32[301]{0:T(512)}, s32[2048]{0:T(1024)}, bf16[6144]{0:T(1024)(128)(2,1)},
  pred[1]{0:T(512)(128)(4,1)}, f32[]{:T(128)}, bf16[]{:T(256)}, pred[]{:T(512)},
  pred[14,40,100,128]{3,0,2,1:T(8,128)(4,1)}.

Where the sources disagree, and the choice made here:
- Small second-minor tiles: tiled_layout.md's 2x128 for a dimension of 1 is the pre-v4
  rule (Mosaic doubles the minimum tile for generation < 4, and old v2/v3 dumps show
  f32[10]{0:T(256)}, bf16[]{:T(512)}); dumps from v4 on print T(1,128). v4+ is modelled.
- 16-bit: (8,128)(2,1) or (16,128)(2,1)? XLA's default HBM layout on every modelled
  generation is (8,128)(2,1) (tiled_layout.md, XLA's own TPU tests). (16,128)(2,1) fills a
  whole 8x128x32-bit register and appears when XLA's large-second-minor tiling is enabled;
  Mosaic picks it by itself inside kernels on v6 (generation >= 6), but not for kernel
  arguments, "because the layout of those is controlled by XLA". So v6e prints (8,128)(2,1)
  too unless that mode is on: `large=True` models the mode.
- 8-bit: tiled_layout.md and XLA's tests print (8,128)(4,1); the earlier model here, Pallas
  block-shape advice and some XLA tests (an s8 operand in VMEM, f8 weights) use (32,128)(4,1),
  which is the large-second-minor tile of 8-bit. Default (8,128)(4,1); `large=True` for
  (32,128)(4,1).
- pred: tiled_layout.md says 4 bytes per element (and old dumps print E(32)); current dumps
  tile pred as a packed byte, (8,128)(4,1). The byte form is used.
"""
from __future__ import annotations

import math

from ..dtypes import DTYPES, DType
from ..shape import default_layout

LANES = 128             # elements of a 32-bit vector register row
SUBLANES = 8            # rows of a vector register
WORD_BITS = 32

Tiles = tuple[tuple[int, ...], ...]
ElementType = str | DType           # "bf16" or DTYPES["bf16"]


def _bits(element_type: ElementType) -> int:
    return (DTYPES[element_type] if isinstance(element_type, str) else element_type).bits


def packing(element_type: ElementType) -> int:
    """Elements of the type one 32-bit word holds: 2 for bf16, 4 for s8 and pred."""
    bits = _bits(element_type)
    return max(1, WORD_BITS // bits) if bits else 1


def tiling(element_type: ElementType, dims: tuple[int, ...], minor_to_major: tuple[int, ...],
           large: bool = False) -> Tiles:
    """XLA's tile list for an array, e.g. ((8, 128), (2, 1)) for bf16[64,256]{1,0}; () for
    token and opaque values. `large` models XLA's large-second-minor tiling mode."""
    if not _bits(element_type):
        return ()
    pack = packing(element_type)
    if not dims:
        return ((LANES * pack,),)
    if len(dims) == 1:
        lead = LANES * _rows(math.ceil(dims[0] / LANES), pack, large=False)
        return ((lead,),) + (((LANES,), (pack, 1)) if pack > 1 else ())
    rows = _rows(dims[minor_to_major[1]], pack, large)
    return ((rows, LANES),) + (((pack, 1),) if pack > 1 else ())


def _rows(second_minor: int, pack: int, large: bool) -> int:
    """Rows of the first tile for a second-minor dimension of this size (in rank 1, the
    number of 128-element rows): a full register's 8 rows (or the large tile, when enabled
    and it divides the dimension) once the dimension is that tall, else the smallest power
    of two >= the dimension, from one 32-bit sublane's `pack` rows up."""
    full = max(SUBLANES, pack)
    if large and pack > 1 and second_minor % (SUBLANES * pack) == 0 \
            and second_minor >= SUBLANES * pack:
        return SUBLANES * pack
    if second_minor >= full:
        return full
    rows = pack
    while rows < min(second_minor, full):
        rows *= 2
    return rows


def _physical(dims: tuple[int, ...], minor_to_major: tuple[int, ...] | None) -> tuple[int, ...]:
    return tuple(minor_to_major) if minor_to_major is not None else \
        default_layout(len(dims)).minor_to_major


def padded_dims(element_type: ElementType, dims: tuple[int, ...],
                minor_to_major: tuple[int, ...] | None = None, large: bool = False
                ) -> tuple[int, ...]:
    """The dims (logical order) rounded up to whole first tiles; the default layout is
    minor-to-major descending. Later tiles only rearrange a tile and never pad."""
    order = _physical(dims, minor_to_major)
    tiles = tiling(element_type, tuple(dims), order, large)
    out = list(dims)
    if tiles:
        for size, dim in zip(reversed(tiles[0]), order):
            out[dim] = math.ceil(out[dim] / size) * size
    return tuple(out)


def storage_bytes(element_type: ElementType, dims: tuple[int, ...],
                  minor_to_major: tuple[int, ...] | None = None, large: bool = False) -> int:
    """Bytes the array occupies in TPU memory, padding included. A tile with more
    dimensions than the array (a scalar's T(128)) pads the missing ones from 1."""
    order = _physical(dims, minor_to_major)
    tiles = tiling(element_type, tuple(dims), order, large)
    elements = math.prod(padded_dims(element_type, dims, order, large))
    if tiles:
        elements *= math.prod(tiles[0][:max(0, len(tiles[0]) - len(dims))])
    return math.ceil(elements * _bits(element_type) / 8)


def padding_waste(element_type: ElementType, dims: tuple[int, ...],
                  minor_to_major: tuple[int, ...] | None = None, large: bool = False) -> float:
    """Fraction of the stored bytes that is padding: 0.0 for an array of whole tiles."""
    stored = storage_bytes(element_type, dims, minor_to_major, large)
    if not stored:
        return 0.0
    logical = math.ceil(math.prod(dims) * _bits(element_type) / 8)
    return 1.0 - logical / stored


Factor = tuple[int, int, tuple | None]     # (stride in the row-major index, extent, padding)


def memory_image(element_type: ElementType, dims: tuple[int, ...],
                 minor_to_major: tuple[int, ...] | None = None, large: bool = False
                 ) -> tuple[Factor, ...]:
    """Where the array's elements lie in memory, in a form two arrays can be compared by: its
    dims tiled as XLA tiles them (each tile splits the minor dims it covers into tile
    counts, placed before the dims, and the tile's own dims, placed after), listed major to
    minor as (stride of the row-major element index, extent, padding) factors, with factors
    of extent 1 dropped and contiguous ones merged. A dimension a tile does not divide
    carries a padding mark. Two arrays of equal images hold every element (by row-major
    index) at the same offset: a reshape or bitcast between them moves nothing."""
    if math.prod(dims) == 0:
        return ()
    order = _physical(dims, minor_to_major)
    stride = {d: math.prod(dims[d + 1:]) for d in range(len(dims))}
    factors: list[Factor] = [(stride[d], dims[d], None) for d in reversed(order)] or [(1, 1, None)]
    for tile in tiling(element_type, tuple(dims), order, large):
        factors = [(0, 1, None)] * (len(tile) - len(factors)) + factors
        head, covered = factors[:len(factors) - len(tile)], factors[len(factors) - len(tile):]
        outer, inner = [], []
        for (step, extent, pad), size in zip(covered, tile):
            if extent % size:
                pad = (step, extent, size)
            outer.append((step * size, -(-extent // size), pad))
            inner.append((step, size, pad))
        factors = head + outer + inner
    image: list[Factor] = []
    for step, extent, pad in factors:
        if extent == 1:
            continue
        if image and pad is None and image[-1][2] is None and image[-1][0] == step * extent:
            image[-1] = (step, image[-1][1] * extent, None)
        else:
            image.append((step, extent, pad))
    return tuple(image)


def tile_text(tiles: Tiles) -> str:
    """Tiles as XLA prints them after the layout's colon: T(8,128)(2,1)."""
    return "T" + "".join("(" + ",".join(map(str, t)) + ")" for t in tiles) if tiles else ""
