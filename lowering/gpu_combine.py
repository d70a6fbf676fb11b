"""Combining per-thread reduction values on the GPU: butterfly shuffles within a warp,
warp values through shared memory within a block, and the shared-memory slots, barriers
and fences the reduce schedules (emit_gpu_reduce, emit_gpu_split, emit_gpu_columns) use.

Values are lists of a reducer's accumulators, each a scalar register or a complex pair,
combined by `emit_reduce.Reducer` (the CPU's reducer code) in a tree: like XLA's GPU
backend, this relies on the reducer being associative and commutative."""
from __future__ import annotations

from llvmlite import ir

from .emit_reduce import read_slots, stack_slots, write_slots
from .gpu_frame import barrier, shared_array, shared_slot
from .intrinsics import declare
from .ltypes import I32, I64

WARP = 32
FULL_MASK = -1                    # every lane of the warp takes part in the shuffle


def combine(b, reducer, values: list, lanes: int) -> list:
    """Butterfly over aligned groups of `lanes` lanes (a power of two <= WARP): afterwards
    every lane of a group holds the reducer applied over the group's values. Every lane
    of the warp must execute it."""
    offset = lanes // 2
    while offset:
        others = [rebuild(v, [_shuffle(b, p, offset) for p in parts(v)]) for v in values]
        values = reducer(values, others)
        offset //= 2
    return values


def block_combine(gen, reducer, values: list, tid, threads: int) -> list:
    """The reducer over the `values` of a block's `threads` threads (a multiple of WARP,
    at most WARP * WARP): each warp's butterfly, the warp values through shared memory
    (one barrier), then warp 0's butterfly. The result is valid in warp 0 only; every
    thread of the block must execute it."""
    b = gen.b
    warps = threads // WARP
    shared = shared_like(b, values, warps, "warp_values")
    lane, warp = b.urem(tid, I64(WARP)), b.udiv(tid, I64(WARP))
    warp_value = combine(b, reducer, values, WARP)
    with b.if_then(b.icmp_unsigned("==", lane, I64(0))):
        store_parts(b, shared, warp_value, warp)
    barrier(b)
    slots = stack_slots(gen, values)
    with b.if_then(b.icmp_unsigned("==", warp, I64(0))):
        mine = load_parts(b, shared, values, b.urem(lane, I64(warps)))
        write_slots(gen, slots, combine(b, reducer, mine, warps))
    return read_slots(gen, slots)


def gpu_fence(b) -> None:
    """fence.acq_rel.gpu: orders this thread's memory accesses before and after it for
    every thread of the device (what makes a block's partial visible to the block that
    takes the last ticket after it)."""
    b.fence("acq_rel", "device")


def parts(v) -> list:
    """A value's scalar registers (a complex value is a pair)."""
    return list(v) if isinstance(v, tuple) else [v]


def rebuild(like, registers: list):
    return tuple(registers) if isinstance(like, tuple) else registers[0]


def _bits(t: ir.Type) -> int:
    if isinstance(t, ir.IntType):
        return t.width
    return {ir.HalfType: 16, ir.FloatType: 32, ir.DoubleType: 64}[type(t)]


def _shuffle(b, v, offset: int):
    """`v` of the lane whose number differs in bit `offset`, moved as 32-bit pieces
    (shfl.sync moves one i32 per call)."""
    shfl = declare(b.module, "llvm.nvvm.shfl.sync.bfly.i32", I32, [I32, I32, I32, I32])
    bits = _bits(v.type)
    as_int = v if isinstance(v.type, ir.IntType) else b.bitcast(v, ir.IntType(bits))
    pieces = -(-bits // 32)
    wide = ir.IntType(32 * pieces)
    x = b.zext(as_int, wide) if bits < 32 * pieces else as_int
    out = None
    for k in range(pieces):
        piece = b.trunc(b.lshr(x, wide(32 * k)), I32) if pieces > 1 else x
        moved = b.call(shfl, [I32(FULL_MASK), piece, I32(offset), I32(WARP - 1)])
        moved = b.shl(b.zext(moved, wide), wide(32 * k)) if pieces > 1 else moved
        out = moved if out is None else b.or_(out, moved)
    out = b.trunc(out, ir.IntType(bits)) if bits < 32 * pieces else out
    return out if isinstance(v.type, ir.IntType) else b.bitcast(out, v.type)


def shared_like(b, values: list, n: int, name: str) -> list:
    """Shared arrays of n slots for each register of `values` (parts of accumulators)."""
    return [[shared_array(b.module, p.type, n, name) for p in parts(v)] for v in values]


def store_parts(b, shared, values, i) -> None:
    for arrays, v in zip(shared, values):
        for a, p in zip(arrays, parts(v)):
            b.store(p, shared_slot(b, a, i))


def load_parts(b, shared, like, i) -> list:
    return [rebuild(v, [b.load(shared_slot(b, a, i), typ=a.value_type.element) for a in arrays])
            for arrays, v in zip(shared, like)]
