"""GPU reductions of few long rows (a sum of a whole array to a scalar): each row split over
several blocks, in one launch, combined in a fixed order by the block that finishes last.

With one block per row, a reduce to a scalar of a million elements runs on one of the
GPU's streaming multiprocessors. Here row r takes blocks r * SPLIT .. r * SPLIT + SPLIT - 1
(`split_count`): block k of the row folds elements k * ROW_THREADS + t, then every
SPLIT * ROW_THREADS further (each step of the block reads a contiguous run), combines its
threads' values (`gpu_combine.block_combine`), and thread 0 writes the block's partial
(still in the accumulator type) to the kernel's scratch buffer, makes it visible to the
device (fence.acq_rel.gpu) and takes a ticket: an atomic increment of the row's counter in
the scratch buffer, which the host zeroes before each launch. The block that draws the
last ticket (SPLIT - 1) knows every partial of the row is written: after a barrier and a
fence of its own, its thread k reads partial k, the block combines them in the same tree
whichever block came last (so the result does not depend on timing), and thread 0 rounds
it and stores the outputs and epilogue.

Scratch layout: the rows' ticket counters (u32), then for each accumulator of each reduce
a [rows, SPLIT] array of SLOT-byte partials (room for the widest, c128's two f64 parts).

Only kernels whose outputs read the results at the output position are split (no row
outputs, no reduce reading another's result: those need the row's result in every block).
The kernel is correct only for the launch it records: ROW_THREADS threads, rows * SPLIT
blocks (extra blocks do nothing; fewer would leave rows unfinished)."""
from __future__ import annotations

from llvmlite import ir

from .elemental import Elemental
from .emit_gpu_reduce import (ROW_THREADS, fold_row, of_kind, result_readers, row_vector,
                              rows_of)
from .emit_kernel import store_outputs
from .emit_loops import Index
from .emit_reduce import Reducer, read_slots, reduce_operands, stack_slots, write_slots
from .gpu_combine import barrier, block_combine, gpu_fence, parts, rebuild, shared_array
from .gpu_loops import Schedule, special, strided
from .ltypes import I32, I64

SPLIT_CHUNK = 32 * ROW_THREADS    # elements below which a block is not worth splitting off
TARGET_BLOCKS = 1024              # enough blocks to fill a GPU (an H100 has 132 SMs)
MAX_SPLIT = ROW_THREADS           # partials per row: the last block reads one per thread
SLOT = 16                         # scratch bytes per partial accumulator
I8 = ir.IntType(8)


def split_count(rows: int, length: int) -> int:
    """Blocks per row: as many as fill the GPU, each folding at least SPLIT_CHUNK."""
    return max(1, min(length // SPLIT_CHUNK, -(-TARGET_BLOCKS // max(rows, 1)), MAX_SPLIT))


def split_reduce(comp, reduces: list, kinds: dict) -> Schedule | None:
    """The split-row schedule for a row-reduce kernel (`emit_gpu_reduce.row_reduce`) whose
    rows are long and few, if no output or reduce reads a result along the row."""
    rows, length = rows_of(reduces[0])
    split = split_count(rows, length)
    readers = result_readers(comp, reduces)
    if split == 1 or "row" in readers.values():
        return None
    vector = row_vector(comp, reduces[0])

    def emit(gen, stores, ptr):
        emit_split(gen, reduces, kinds, stores, ptr, split, vector)

    return Schedule(emit, ROW_THREADS, rows * split, scratch_bytes(reduces, rows, rows * split))


def scratch_bytes(reduces: list, counters: int, partials: int) -> int:
    """Scratch for `counters` ticket counters and `partials` partials of each accumulator
    of `reduces`."""
    accumulators = sum(len(r.operands) // 2 for r in reduces)
    return _tickets_bytes(counters) + accumulators * partials * SLOT


def _tickets_bytes(counters: int) -> int:
    return -(-4 * counters // SLOT) * SLOT


def emit_split(gen: Elemental, reduces: list, kinds: dict, stores: list, scratch, split: int,
               vector: int) -> None:
    """The body of a split-row kernel: block `ctaid.x` = row * split + k folds its share of
    the row (storing the side outputs there), publishes its partials and takes a ticket;
    the last block of the row combines and stores the results and the epilogue."""
    b = gen.b
    rows, length = rows_of(reduces[0])
    tid, block = special(b, "tid.x"), special(b, "ctaid.x")
    row, k = b.udiv(block, I64(split)), b.urem(block, I64(split))
    thread0 = b.icmp_unsigned("==", tid, I64(0))
    with b.if_then(b.icmp_unsigned("<", block, I64(rows * split))):
        reducers, slot = [], 0
        side = of_kind(stores, kinds, "side")
        for inst in reduces:
            _, inits = reduce_operands(inst)
            reducer = Reducer(gen, inst.attrs["to_apply"])
            init = [gen.value(i, Index.scalar()) for i in inits]
            slots = stack_slots(gen, init)
            fold_row(gen, inst, reducer, slots, row, b.add(b.mul(k, I64(ROW_THREADS)), tid),
                     split * ROW_THREADS, vector, side)
            side = []
            total = block_combine(gen, reducer, read_slots(gen, slots), tid, ROW_THREADS)
            partials = [partials_at(b, scratch, rows, rows * split, slot + n)
                        for n in range(len(init))]
            with b.if_then(thread0):
                for v, at in zip(total, partials):
                    store_partial(b, v, at(block))
            reducers.append((inst, reducer, init, partials))
            slot += len(init)
        last = last_ticket(b, scratch, row, split, thread0)
        with b.if_then(last):
            gpu_fence(b)
            for inst, reducer, init, partials in reducers:
                slots = stack_slots(gen, init)
                with strided(b, tid, I64(ROW_THREADS), split) as p:
                    mine = [load_partial(b, v, at(b.add(b.mul(row, I64(split)), p)))
                            for v, at in zip(init, partials)]
                    write_slots(gen, slots, reducer(read_slots(gen, slots), mine))
                total = block_combine(gen, reducer, read_slots(gen, slots), tid, ROW_THREADS)
                total = reducer.finish(total)
                gen.bindings[id(inst)] = total if inst.shape.is_tuple else total[0]
            with b.if_then(thread0):
                out_dims = (reduces[0].shape.leaves()[0] if reduces[0].shape.is_tuple
                            else reduces[0].shape).dims
                store_outputs(gen, of_kind(stores, kinds, "at"), Index(out_dims, linear=row), row)
            for inst in reduces:
                del gen.bindings[id(inst)]


def last_ticket(b, scratch, counter, split: int, thread0):
    """Thread 0 publishes the block's partials (stored by itself, or by threads that
    fenced and passed a barrier since) and draws a ticket from counter number `counter`;
    after a barrier every thread knows whether the block drew the last of `split`."""
    flag = shared_array(b.module, I32, 1, "last_ticket")
    at = b.gep(flag, [I64(0), I64(0)], inbounds=True)
    with b.if_then(thread0):
        gpu_fence(b)
        at_counter = b.gep(scratch, [b.mul(counter, I64(4))], source_etype=I8)
        ticket = b.atomic_rmw("add", at_counter, I32(1), "monotonic")
        b.store(b.zext(b.icmp_unsigned("==", ticket, I32(split - 1)), I32), at)
    barrier(b)
    return b.icmp_unsigned("!=", b.load(at, typ=I32), I32(0))


def partials_at(b, scratch, counters: int, partials: int, accumulator: int):
    """i -> address of partial i of accumulator number `accumulator` (scratch laid out by
    `scratch_bytes(reduces, counters, partials)`)."""
    base = _tickets_bytes(counters) + accumulator * partials * SLOT
    return lambda i: b.gep(scratch, [b.add(I64(base), b.mul(i, I64(SLOT)))], source_etype=I8)


def store_partial(b, value, ptr) -> None:
    for n, p in enumerate(parts(value)):
        b.store(p, b.gep(ptr, [I64(8 * n)], source_etype=I8))


def load_partial(b, like, ptr):
    return rebuild(like, [b.load(b.gep(ptr, [I64(8 * n)], source_etype=I8), typ=p.type)
                          for n, p in enumerate(parts(like))])
