"""GPU scatter and select-and-scatter.

scatter: one thread per update element (grid-stride), combined atomically. Its index
vector gives the window's start (emit_gather.scatter_start, the CPU's code; a window that
would leave the operand is skipped whole), its window coordinates the target
(scatter_position). The output starts as the operand: the gpu fusion stage stores a
scatter's operand before the scatter, so it is a kernel input, which the host copies into
the output before the launch (GpuKernel.initial_copies = ((0, that input),)); the kernel
is then correct for any grid.

The combination is one atomic read-modify-write (`combine`): the update computation's
single op (emit_reduce.simple_reducer: add, maximum, minimum, and, or, xor of its two
parameters) as an `atomicrmw` where PTX has that atom for the type (integer add / min / max
/ and / or / xor and float add on 32- and 64-bit elements: `atom.add`, `atom.max`, ...);
anything else (multiply, float max, a general computation, 8- and 16-bit types, c64) as a
compare-and-swap loop on the aligned 32- or 64-bit word holding the element (`atom.cas`),
the computation applied by emit_reduce.Reducer as on the CPU. c128 (no 128-bit CAS) and
variadic scatters (several outputs combined together) are UnsupportedErrors. Updates that
hit the same element are combined in an unspecified order, as XLA allows. One difference
from the CPU, as in XLA:GPU: PTX's `atom.add.f32` on global memory flushes subnormal inputs
and results to zero (the f64 and integer atoms and the CAS loop are exact). An 8- or 16-bit
element's CAS reads and rewrites (unchanged) its neighbours in the same aligned 32-bit
word: device buffers must cover whole words (allocations are 256-byte aligned).

select-and-scatter: a gather instead, one thread per output element (see
emit_select_and_scatter): deterministic, in the CPU's order, no atomics, any grid.
"""
from __future__ import annotations

import math

from llvmlite import ir

from .emit_gather import scatter_layout, scatter_position, scatter_start, selected
from .emit_loops import Index, const, delinearize, nest
from .emit_reduce import Reducer, read_slots, stack_slots, write_slots
from .gpu_frame import Frame, Launch, unsupported
from .gpu_loops import grid_stride_range
from .ltypes import I1, I64, PTR, elem, from_storage, gep, store, to_storage

SCATTER_THREADS = 256              # threads per block

# (update op, element kind) -> atomicrmw operation, for 32- and 64-bit elements.
ATOMIC_RMW = {
    ("add", "int"): "add", ("add", "uint"): "add", ("add", "float"): "fadd",
    ("maximum", "int"): "max", ("maximum", "uint"): "umax",
    ("minimum", "int"): "min", ("minimum", "uint"): "umin",
    **{(op, kind): op for op in ("and", "or", "xor") for kind in ("int", "uint")},
}


def emit_scatter(f: Frame) -> Launch:
    inst, gen = f.root, f.gen
    b = gen.b
    if len(inst.operands) != 3:
        raise unsupported(inst, "a variadic scatter (its outputs are combined together, "
                                 "which no atomic operation does)")
    operand, _, updates = inst.operands
    _check_width(inst)
    copies = _initial_copy(f, operand)
    upd_dims = updates.shape.dims
    count = math.prod(upd_dims)
    reducer = Reducer(gen, inst.attrs["to_apply"])
    scatter_dims, window_dims = scatter_layout(inst)
    with grid_stride_range(b, count) as u:
        gen.push_scope()
        ucoords = delinearize(b, u, upd_dims)
        starts, ok = scatter_start(gen, inst, [ucoords[d] for d in scatter_dims])
        with b.if_then(ok):
            at = scatter_position(b, inst, starts, [ucoords[d] for d in window_dims])
            combine(gen, reducer, f.dests[0], at,
                    gen.value(updates, Index(upd_dims, values=ucoords)))
        gen.pop_scope()
    return Launch(SCATTER_THREADS, max(1, -(-count // SCATTER_THREADS)), copies)


def emit_select_and_scatter(f: Frame) -> Launch:
    """One thread per output element, which folds, from the init value and in the order of
    the source elements (the CPU's order), the source values of the windows covering it
    that select it (emit_gather.selected, the CPU's choice): a gather, so no atomics, no
    initial output and any grid. A window is re-examined by every element it covers."""
    inst, gen = f.root, f.gen
    b = gen.b
    operand, source, init = inst.operands
    reducer = Reducer(gen, inst.attrs["scatter"])
    dest = f.dests[0]
    dims = operand.shape.dims
    windows = covering_windows(inst)
    with grid_stride_range(b, math.prod(dims)) as o:
        gen.push_scope()
        coords = delinearize(b, o, dims)
        acc = stack_slots(gen, [gen.value(init, Index.scalar())])
        with nest(b, [count for _, count, _, _ in windows], "w") as ks:
            gen.push_scope()
            svals, inside = [], I1(1)
            for c, k, window, n in zip(coords, ks, windows, source.shape.dims):
                s, ok = _covering(b, c, k, window, n)
                svals.append(s)
                inside = b.and_(inside, ok)
            with b.if_then(inside):
                have, at = selected(gen, inst, svals)
                with b.if_then(b.and_(have, b.icmp_unsigned("==", at, o))):
                    x = gen.value(source, Index(source.shape.dims, values=svals))
                    # rounded after each combination, as the CPU's store rounds
                    write_slots(gen, acc, reducer.finish(reducer(read_slots(gen, acc), [x])))
            gen.pop_scope()
        store(b, read_slots(gen, acc)[0], dest.ptr, dest.et, o)
        gen.pop_scope()
    n = math.prod(dims)
    return Launch(SCATTER_THREADS, max(1, -(-n // SCATTER_THREADS)))


def covering_windows(inst) -> list[tuple[int, int, int, int]]:
    """Per dimension (stride, candidates: windows that can cover one position, low
    padding, size) of a select-and-scatter's window; candidates = ceil(size / stride)."""
    rank = inst.operands[0].shape.rank
    w = inst.attrs.get("window")
    size = w.size if w else (1,) * rank
    stride = w.stride if w else (1,) * rank
    pad = w.pad if w else ((0, 0),) * rank
    return [(st, -(-sz // st), p[0], sz) for sz, st, p in zip(size, stride, pad)]


def _covering(b, position, k, window, n: int):
    """(candidate k's source index along one dimension, whether that source exists and
    its window covers `position`). Source s's window spans [s * stride - pad_low, + size),
    so the candidates are t / stride - (candidates - 1) + k for t = position + pad_low, in
    increasing order (t < 0: no window covers the position, and every candidate fails the
    check). A window that does not cover the position could not select it: the check only
    saves examining it."""
    stride, candidates, pad_low, size = window
    t = b.add(const(position), I64(pad_low))
    s = b.add(b.sub(b.sdiv(t, I64(stride)), I64(candidates - 1)), const(k))
    start = b.mul(s, I64(stride))
    ok = b.and_(b.icmp_signed(">=", s, I64(0)), b.icmp_signed("<", s, I64(n)))
    ok = b.and_(ok, b.and_(b.icmp_signed("<=", start, t),
                           b.icmp_signed("<", t, b.add(start, I64(size)))))
    return b.select(ok, s, I64(0)), ok


def _initial_copy(f: Frame, operand) -> tuple:
    """The output starts as the operand, copied by the host from the kernel input it is
    (the gpu fusion stage stores a scatter's operand before the scatter)."""
    for j, x in enumerate(f.inputs):
        if x is operand:
            return ((0, j),)
    raise unsupported(f.root, "its operand is computed in the kernel (the host copies a "
                               "kernel input into the output before the launch)")


# ------------------------------------------------------------------- atomic combination

def atomic_op(reducer: Reducer, et) -> str | None:
    """The atomicrmw operation that applies the update computation, if there is one."""
    if reducer.ops is None or et.bits not in (32, 64) or et.kind == "complex":
        return None
    return ATOMIC_RMW.get((reducer.ops[0].opcode, et.kind))


def combine(gen, reducer: Reducer, dest, at, update) -> None:
    """dest[at] = computation(dest[at], update), atomically."""
    b = gen.b
    et = dest.et
    addr = gep(b, dest.ptr, et, at)
    op = atomic_op(reducer, et)
    if op is not None:
        b.atomic_rmw(op, addr, to_storage(b, update, et), "monotonic")
        return
    bits = et.bits
    word = ir.IntType(64 if bits == 64 else 32)
    address = b.ptrtoint(addr, I64)
    word_ptr = b.inttoptr(b.and_(address, I64(-(word.width // 8))), PTR)
    before = b.block
    loop = b.append_basic_block("cas")
    done = b.append_basic_block("cas.done")
    first = b.load(word_ptr, typ=word)
    b.branch(loop)
    b.position_at_end(loop)
    old = b.phi(word)
    old.add_incoming(first, before)
    if bits == word.width:
        current = _from_bits(b, old, et)
        replaced = _to_bits(b, reducer([current], [update])[0], et)
    else:                                   # the element's bits within the 32-bit word
        shift = b.trunc(b.shl(b.and_(address, I64(3)), I64(3)), word)
        current = _from_bits(b, b.trunc(b.lshr(old, shift), ir.IntType(bits)), et)
        new = b.zext(_to_bits(b, reducer([current], [update])[0], et), word)
        keep = b.not_(b.shl(word((1 << bits) - 1), shift))
        replaced = b.or_(b.and_(old, keep), b.shl(new, shift))
    swapped = b.cmpxchg(word_ptr, old, replaced, "monotonic", "monotonic")
    old.add_incoming(b.extract_value(swapped, 0), b.block)
    b.cbranch(b.extract_value(swapped, 1), done, loop)
    b.position_at_end(done)


def _from_bits(b: ir.IRBuilder, bits, et):
    """An element's compute value from its storage bits (complex: re low, im high)."""
    if et.kind == "complex":
        half = ir.IntType(et.bits // 2)
        parts = (bits, b.lshr(bits, bits.type(et.bits // 2)))
        return tuple(b.bitcast(b.trunc(p, half), et.storage) for p in parts)
    raw = bits if isinstance(et.storage, ir.IntType) else b.bitcast(bits, et.storage)
    return from_storage(b, raw, et)


def _to_bits(b: ir.IRBuilder, value, et):
    """An element's storage bits from its compute value (rounded to its type)."""
    if et.kind == "complex":
        wide, half = ir.IntType(et.bits), ir.IntType(et.bits // 2)
        re, im = (b.zext(b.bitcast(p, half), wide) for p in value)
        return b.or_(re, b.shl(im, wide(et.bits // 2)))
    raw = to_storage(b, value, et)
    return raw if isinstance(raw.type, ir.IntType) else b.bitcast(raw, ir.IntType(et.bits))


def _check_width(inst) -> None:
    et = elem(inst.shape.element_type)
    if et.bits > 64:
        raise unsupported(inst, f"{et.name} elements (no atomic operation is wider than "
                                 "64 bits)")
