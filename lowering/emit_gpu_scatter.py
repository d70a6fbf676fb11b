"""GPU scatter and select-and-scatter: one thread per update, combined atomically.

scatter: thread u (grid-stride) takes update element u: its index vector gives the window's
start (emit_gather.scatter_start, the CPU's code; a window that would leave the operand is
skipped whole), its window coordinates the target (scatter_position). select-and-scatter:
thread s takes source element s, finds the element its window selects (emit_gather.selected)
and combines the source value into it.

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
and results to zero (the f64 and integer atoms and the CAS loop are exact).

The output starts as the operand (scatter) or the init value (select-and-scatter). A
scatter whose operand is a kernel input leaves that to the host: the Launch records
`initial_copies` (output 0 <- that input) and the kernel is correct for any grid. Otherwise
(select-and-scatter's scalar init; a computed scatter operand, which the gpu fusion stage
does not form today) the kernel is ONE block: it writes the initial output, waits at a
barrier, then scatters; it is correct only for one block.
"""
from __future__ import annotations

import math

from llvmlite import ir

from ..errors import UnsupportedError
from .emit_gather import scatter_layout, scatter_position, scatter_start, selected
from .emit_loops import Index, delinearize
from .emit_reduce import Reducer
from .gpu_frame import Frame, Launch, barrier
from .gpu_loops import grid_stride_range
from .ltypes import I64, PTR, elem, from_storage, gep, store, to_storage

SCATTER_THREADS = 256              # threads per block when the grid covers the updates
ONE_BLOCK_THREADS = 256            # the one block of a kernel that initialises its output
                                   # (256: it launches whatever registers a thread takes)

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
        raise _unsupported(inst, "a variadic scatter (its outputs are combined together, "
                                 "which no atomic operation does)")
    operand, _, updates = inst.operands
    _check_width(inst)
    copies = _start(f, operand)
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
    return _launch(copies, count)


def emit_select_and_scatter(f: Frame) -> Launch:
    inst, gen = f.root, f.gen
    b = gen.b
    _, source, init = inst.operands
    _check_width(inst)
    copies = _start(f, init)
    reducer = Reducer(gen, inst.attrs["scatter"])
    dims = source.shape.dims
    with grid_stride_range(b, math.prod(dims)) as s:
        gen.push_scope()
        svals = delinearize(b, s, dims)
        have, at = selected(gen, inst, svals)
        with b.if_then(have):
            combine(gen, reducer, f.dests[0], at, gen.value(source, Index(dims, values=svals)))
        gen.pop_scope()
    return _launch(copies, math.prod(dims))


def _start(f: Frame, initial) -> tuple | None:
    """Make the output start as `initial` (an array of its shape, or a scalar): by a host
    copy when it is a kernel input (returns the copies), else by the block itself before
    a barrier (returns None: the kernel must be one block)."""
    dest = f.dests[0]
    for j, x in enumerate(f.inputs):
        if x is initial and x.shape.dims == dest.dims:
            return ((0, j),)
    b = f.gen.b
    n = math.prod(dest.dims)
    with grid_stride_range(b, n) as i:
        f.gen.push_scope()
        index = Index(dest.dims, linear=i) if initial.shape.rank else Index.scalar()
        store(b, f.gen.value(initial, index), dest.ptr, dest.et, i)
        f.gen.pop_scope()
    barrier(b)
    return None


def _launch(copies, count: int) -> Launch:
    if copies is None:
        return Launch(ONE_BLOCK_THREADS, 1)
    return Launch(SCATTER_THREADS, max(1, -(-count // SCATTER_THREADS)), copies)


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
        raise _unsupported(inst, f"{et.name} elements (no atomic operation is wider than "
                                 "64 bits)")


def _unsupported(inst, why: str) -> UnsupportedError:
    return UnsupportedError(f"GPU code for {inst.opcode} ({inst.name}) is not emitted: {why}",
                            line=inst.line, column=inst.column)
