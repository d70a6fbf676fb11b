"""GPU sort and top-k: a bitonic sort of each row's positions by one thread block.

A row is every index but the sort dimension. Block `ctaid.x` sorts rows ctaid.x,
ctaid.x + nctaid.x, ... (any grid is correct; the launch recorded is one block per row).
The block sorts a permutation of the row's positions, padded to a power of two P: the
padded positions (>= the row's length) are "after everything" by their position alone,
never by a value, since the comparator is arbitrary. The permutation lives in shared
memory (i32 per position) when P * 4 <= SHARED_SORT_BYTES, else in the kernel's scratch
buffer (P * 4 bytes per row); either way the block's barriers order the stages.

Bitonic sorting is a network of log2(P) * (log2(P) + 1) / 2 stages (`stages`); in each,
thread t compares pair t, t + threads, ... of the P / 2 disjoint pairs (`pair`) and swaps
them into the stage's direction; a barrier follows each stage. The order compared is the
CPU's (`emit_sort.order`: sort's comparator over all operands, top-k's total order, the
TopK custom call's comparator), with ties broken by the original position: a before b iff
cmp(a, b), or neither cmp(a, b) nor cmp(b, a) and a < b. That makes the network's answer
the stable one, the CPU's merge sort's answer whether or not is_stable is set. Finally the
block gathers every operand through the sorted permutation (top-k: the first k, and the
positions as s32), and a barrier ends the row before the next one reuses the memory.
"""
from __future__ import annotations

from llvmlite import ir

from ..errors import UnsupportedError
from .emit_loops import const, linearize
from .emit_sort import geometry, order, row_elements
from .gpu_frame import Frame, Launch, barrier, shared_array, shared_slot
from .gpu_loops import special, strided
from .ltypes import I8, I32, I64, store

SHARED_SORT_BYTES = 32 * 1024      # the permutation's shared-memory budget per block
# Threads per block at most: 256 threads fit the register file whatever number of
# registers (up to 255) ptxas gives a thread; a larger block could fail to launch.
MAX_SORT_THREADS = 256


def padded_length(length: int) -> int:
    """The row length rounded up to a power of two (the bitonic network's width)."""
    return 1 << max(0, (length - 1).bit_length())


def stages(padded: int) -> list[tuple[int, int]]:
    """The bitonic network over `padded` (a power of two) positions, in order: per stage
    (log2 of the merged run length k, log2 of the compare distance j)."""
    logp = padded.bit_length() - 1
    return [(s_k, s_j) for s_k in range(1, logp + 1) for s_j in range(s_k - 1, -1, -1)]


def pair(t, s_j):
    """The lower position of the t-th of the P / 2 pairs compared at distance 2**s_j (its
    partner is that position + 2**s_j): t with a zero bit inserted at bit s_j. Works on
    ints and on IR values wrapped in `_Int`."""
    return ((t >> s_j) << (s_j + 1)) | (t & ((1 << s_j) - 1))


def ascending(low, s_k):
    """Whether the pair at `low` sorts ascending in a stage merging runs of 2**s_k: runs
    alternate direction (the last stage's one run is ascending)."""
    return (low & (1 << s_k)) == 0


def threads_for(padded: int) -> int:
    """One thread per compared pair, in whole warps, at most MAX_SORT_THREADS."""
    return min(MAX_SORT_THREADS, max(32, -(-(padded // 2) // 32) * 32))


def scratch_bytes(inst) -> int:
    """Global memory for the permutations of rows too long for shared memory."""
    _, _, length, rows = geometry(inst)
    padded = padded_length(length)
    return 0 if padded * 4 <= SHARED_SORT_BYTES else rows * padded * 4


def emit_sort(f: Frame) -> Launch:
    inst, gen = f.root, f.gen
    b = gen.b
    dims, d, length, rows = geometry(inst)
    if length >= 2 ** 31:
        raise UnsupportedError(f"GPU sort of rows of {length} elements: positions are 32-bit "
                               "(rows up to 2**31 - 1)", line=inst.line, column=inst.column)
    if length == 0 or rows == 0:
        return Launch(32, 1)
    padded = padded_length(length)
    threads = threads_for(padded)
    shared = None if f.scratch else shared_array(b.module, I32, padded, "sort_positions")
    tid, ntid = special(b, "tid.x"), special(b, "ntid.x")
    with strided(b, special(b, "ctaid.x"), special(b, "nctaid.x"), rows) as row:
        if shared is None:
            base = b.gep(f.scratch, [b.mul(row, I64(padded * 4))], inbounds=True,
                         source_etype=I8)

            def slot(i):
                return b.gep(base, [i], inbounds=True, source_etype=I32)
        else:
            def slot(i):
                return shared_slot(b, shared, i)
        coords, element = row_elements(gen, inst, row)
        before = _stable(b, order(gen, inst, element), length)

        with strided(b, tid, ntid, padded) as i:
            b.store(b.trunc(i, I32), slot(i))
        barrier(b)
        for s_k, s_j in stages(padded):
            with strided(b, tid, ntid, padded // 2) as t:
                gen.push_scope()
                low = pair(_Int(b, t), s_j).value
                high = b.or_(low, I64(1 << s_j))
                x = b.zext(b.load(slot(low), typ=I32), I64)
                y = b.zext(b.load(slot(high), typ=I32), I64)
                up = ascending(_Int(b, low), s_k).value      # positions differ, so the
                swap = b.not_(b.xor(up, before(y, x)))       # order is total: one compare
                b.store(b.trunc(b.select(swap, y, x), I32), slot(low))
                b.store(b.trunc(b.select(swap, x, y), I32), slot(high))
                gen.pop_scope()
            barrier(b)
        out_dims = dims if inst.opcode == "sort" else inst.shape.elements[0].dims
        with strided(b, tid, ntid, out_dims[d]) as pos:
            gen.push_scope()
            source = b.zext(b.load(slot(pos), typ=I32), I64)
            at = const(linearize(b, coords(pos), out_dims))
            values = [element(k, source) for k in range(len(inst.operands))]
            if inst.opcode != "sort":                 # top-k: the values, then positions
                values = [values[0], b.trunc(source, I32)]
            for dest, v in zip(f.dests, values):
                store(b, v, dest.ptr, dest.et, at)
            gen.pop_scope()
        barrier(b)
    return Launch(threads, rows)


def _stable(b: ir.IRBuilder, before, length: int):
    """The total order the network sorts by: `before` with ties broken by position, and
    padded positions (>= length) after every real one, in position order, without
    evaluating the comparator on them (it reads position 0 instead, and is ignored)."""
    def first(x, y):
        x_pad = b.icmp_unsigned(">=", x, I64(length))
        y_pad = b.icmp_unsigned(">=", y, I64(length))
        cx = b.select(x_pad, I64(0), x)
        cy = b.select(y_pad, I64(0), y)
        in_order = b.icmp_unsigned("<", x, y)
        tie = b.and_(b.not_(before(cy, cx)), in_order)
        real = b.or_(before(cx, cy), tie)
        return b.select(b.or_(x_pad, y_pad), in_order, real)
    return first


class _Int:
    """An i64 IR value with the integer operators `pair` and `ascending` use, so the same
    index arithmetic runs on Python ints (tests) and in the kernel."""

    def __init__(self, b: ir.IRBuilder, value):
        self.b, self.value = b, value

    def _wrap(self, v):
        return _Int(self.b, v)

    def __rshift__(self, n):
        return self._wrap(self.b.lshr(self.value, I64(n)))

    def __lshift__(self, n):
        return self._wrap(self.b.shl(self.value, I64(n)))

    def __and__(self, n):
        return self._wrap(self.b.and_(self.value, I64(n)))

    def __or__(self, other):
        return self._wrap(self.b.or_(self.value, other.value))

    def __eq__(self, n):
        return self._wrap(self.b.icmp_unsigned("==", self.value, I64(n)))

    __hash__ = None

