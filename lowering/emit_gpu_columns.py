"""GPU column reductions: a reduce over dimensions that are not the minor-most, read by
warps along the kept minor dimension (coalesced), its partials transposed through shared
memory and combined by warp shuffles.

The input is seen as [outer, rows, columns]: the kept dimensions before the reduced ones,
the reduced ones (one contiguous run), the kept ones after them. A block of ROW_THREADS
threads takes a tile of TILE consecutive columns of one outer index (blocks stride over
the tiles): thread (part, lane) = (tid / TILE, tid % TILE) folds rows part, part + PARTS,
... of column lane, so a warp reads TILE consecutive elements of a row. The PARTS partials
of each column go to shared memory (a row of the tile per part), and after a barrier each
warp reads them transposed: lanes PARTS * k .. PARTS * k + PARTS - 1 of warp w take the
partials of column GROUPS * w + k, combined by a butterfly over PARTS lanes; the first of
those lanes stores the column's outputs. Several reduces of the same input shape and
dimensions (a multi-output fusion), and an epilogue reading their results at the output
position, run in the same pass. A second barrier ends a tile, since the next tile's
partials overwrite this one's.

Few tiles of many rows (a [1024, 512] sum over the rows is 16 tiles) would leave most of
the GPU idle: each tile's rows are then split over `column_split` blocks (block k of a
tile folds rows k * PARTS + part, then every split * PARTS further). Each block's column
totals go to the kernel's scratch buffer, and as for long rows (emit_gpu_split.py) the
block drawing a tile's last ticket folds each column's partials in block order and stores
the outputs. Blocks stride over (tile, k) pairs, so any grid is correct.
"""
from __future__ import annotations

import math

from .elemental import Elemental
from .emit_gpu_reduce import ROW_THREADS, fold, of_kind, output_kinds, result_readers
from .emit_kernel import store_outputs
from .emit_loops import Index, add, mul, sub, udiv, urem
from .emit_gpu_split import (MAX_SPLIT, TARGET_BLOCKS, last_ticket, load_partial, partials_at,
                             scratch_bytes, store_partial)
from .emit_reduce import Reducer, read_slots, reduce_operands, stack_slots, write_slots
from .gpu_combine import (WARP, barrier, combine, gpu_fence, load_parts, shared_like,
                          store_parts)
from .gpu_loops import Schedule, special, strided
from .ltypes import I64

TILE = WARP                       # columns per block: one warp reads them in one access
PARTS = ROW_THREADS // TILE       # threads along the rows per column: partials per column
GROUPS = WARP // PARTS            # columns a warp combines at once
# Shared memory row stride, in slots: a warp writes one row (TILE consecutive slots) and
# reads PARTS rows of GROUPS columns; with the stride 4 (mod 32) past a multiple of the 32
# banks, both touch 32 different banks for 32-bit values.
STRIDE = TILE + 4
MIN_ROWS = 16 * PARTS             # rows a block folds at least when a tile is split


def column_layout(inst) -> tuple[int, int, int] | None:
    """(outer, rows, columns) of a reduce over one contiguous run of dimensions followed by
    kept ones, else None."""
    dims = inst.operands[0].shape.dims
    reduced = sorted(inst.attrs["dimensions"])
    if not reduced or reduced != list(range(reduced[0], reduced[-1] + 1)) or \
            reduced[-1] == len(dims) - 1:
        return None
    first, end = reduced[0], reduced[-1] + 1
    return math.prod(dims[:first]), math.prod(dims[first:end]), math.prod(dims[end:])


def column_reduce(comp, phases_, outputs) -> Schedule | None:
    """The column schedule for a kernel whose reduces all reduce the same dimensions of one
    input shape, column-wise, and whose other outputs are an epilogue of their results at
    the output position or side outputs of the input's shape; else None."""
    reduces = [p.root for p in phases_ if p.root.opcode == "reduce"]
    if not reduces or len({(r.operands[0].shape.dims, tuple(sorted(r.attrs["dimensions"])))
                           for r in reduces}) != 1:
        return None
    layout = column_layout(reduces[0])
    kinds = output_kinds(comp, reduces, outputs)
    if layout is None or kinds is None or "row" in result_readers(comp, reduces).values():
        return None
    outer, rows, columns = layout
    tiles = outer * -(-columns // TILE)
    split = column_split(tiles, rows)
    scratch = 0 if split == 1 else scratch_bytes(reduces, tiles, tiles * TILE * split)

    def emit(gen, stores, ptr):
        emit_columns(gen, reduces, kinds, stores, layout, split, ptr)

    return Schedule(emit, ROW_THREADS, tiles * split, scratch)


def column_split(tiles: int, rows: int) -> int:
    """Blocks per tile: as many as fill the GPU, each folding at least MIN_ROWS rows."""
    return max(1, min(rows // MIN_ROWS, -(-TARGET_BLOCKS // tiles), MAX_SPLIT))


def partial_slot(b, part, column):
    """Shared-memory slot of the partial of tile column `column` from thread row `part`
    (ints or IR values)."""
    return add(b, mul(b, part, STRIDE), column)


def combined_by(b, tid):
    """(part, column): which partial thread `tid` reads in the transposed combination."""
    lane, warp = urem(b, tid, WARP), udiv(b, tid, WARP)
    return urem(b, lane, PARTS), add(b, mul(b, warp, GROUPS), udiv(b, lane, PARTS))


def emit_columns(gen: Elemental, reduces: list, kinds: dict, stores: list, layout,
                 split: int, scratch) -> None:
    """The body of a column-reduce kernel (any grid of ROW_THREADS-thread blocks), each
    tile's rows split over `split` blocks."""
    b = gen.b
    outer, rows, columns = layout
    tiles = -(-columns // TILE)
    in_dims = reduces[0].operands[0].shape.dims
    out_dims = (reduces[0].shape.leaves()[0] if reduces[0].shape.is_tuple
                else reduces[0].shape).dims
    tid = special(b, "tid.x")
    part, lane = udiv(b, tid, TILE), urem(b, tid, TILE)
    my_part, my_column = combined_by(b, tid)
    blocks = outer * tiles * split
    with strided(b, special(b, "ctaid.x"), special(b, "nctaid.x"), blocks) as block:
        tile, share = udiv(b, block, split), urem(b, block, split)
        o, first = udiv(b, tile, tiles), mul(b, urem(b, tile, tiles), TILE)
        column = add(b, first, lane)
        partials = []
        side = of_kind(stores, kinds, "side")      # stored by the first fold
        for inst in reduces:
            inputs, inits = reduce_operands(inst)
            reducer = Reducer(gen, inst.attrs["to_apply"])
            init = [gen.value(i, Index.scalar()) for i in inits]
            slots = stack_slots(gen, init)
            start = add(b, mul(b, share, PARTS), part)
            with b.if_then(b.icmp_unsigned("<", column, I64(columns))), \
                    strided(b, start, I64(split * PARTS), rows) as r:
                at = add(b, mul(b, add(b, mul(b, o, rows), r), columns), column)
                fold(gen, reducer, inputs, slots, Index(in_dims, linear=at), side)
            side = []
            shared = shared_like(b, init, PARTS * STRIDE, "column_partials")
            store_parts(b, shared, read_slots(gen, slots), partial_slot(b, part, lane))
            partials.append((reducer, shared, init))
        barrier(b)
        totals = [combine(b, reducer, load_parts(b, shared, init,
                                                 partial_slot(b, my_part, my_column)), PARTS)
                  for reducer, shared, init in partials]
        out_column = add(b, first, my_column)
        storing = b.and_(b.icmp_unsigned("==", my_part, I64(0)),
                         b.icmp_unsigned("<", out_column, I64(columns)))
        if split > 1:
            totals, storing = _across_blocks(gen, partials, totals, storing, scratch,
                                             (outer * tiles, split, tile, share, my_column))
        with b.if_then(storing):
            for inst, (reducer, _, _), total in zip(reduces, partials, totals):
                total = reducer.finish(total)
                gen.bindings[id(inst)] = total if inst.shape.is_tuple else total[0]
            at = add(b, mul(b, o, columns), out_column)
            store_outputs(gen, of_kind(stores, kinds, "at"), Index(out_dims, linear=at), at)
            for inst in reduces:
                del gen.bindings[id(inst)]
        barrier(b)


def _across_blocks(gen: Elemental, partials: list, totals: list, storing, scratch, where):
    """The tile's columns combined over its `split` blocks: each block's column totals to
    the scratch buffer, a ticket per tile, and the block drawing the last one folds the
    column's partials in block order. Returns (totals, storing) for the last block."""
    b = gen.b
    counters, split, tile, share, my_column = where
    entry = add(b, mul(b, add(b, mul(b, tile, TILE), my_column), split), share)
    addresses, n = [], 0
    for _, _, init in partials:
        addresses.append([partials_at(b, scratch, counters, counters * TILE * split, n + k)
                          for k in range(len(init))])
        n += len(init)
    with b.if_then(storing):
        for total, ats in zip(totals, addresses):
            for v, at in zip(total, ats):
                store_partial(b, v, at(entry))
        gpu_fence(b)
    barrier(b)                          # every column's partial stored before the ticket
    thread0 = b.icmp_unsigned("==", special(b, "tid.x"), I64(0))
    storing = b.and_(storing, last_ticket(b, scratch, tile, split, thread0))
    folded = []
    for (reducer, _, init), ats in zip(partials, addresses):
        slots = stack_slots(gen, init)
        with b.if_then(storing):
            gpu_fence(b)
            first = sub(b, entry, share)
            with strided(b, I64(0), I64(1), split) as k:
                mine = [load_partial(b, v, at(add(b, first, k))) for v, at in zip(init, ats)]
                write_slots(gen, slots, reducer(read_slots(gen, slots), mine))
        folded.append(read_slots(gen, slots))
    return folded, storing
