"""The elemental generator: the value of any instruction at one index, computed inline.

`Elemental.value(inst, index)` returns the compute value of `inst` at `index`: a load for a
materialized array (a kernel argument or a phase's temporary), index arithmetic for data
movement (broadcast, reshape, transpose, slice, pad, concatenate, reverse, iota, bitcast,
dynamic-slice, gather, ...), the elementwise table for arithmetic, and an inner loop for a
reduce or reduce-window. Fused expressions are therefore computed per output element and
nothing between a kernel's inputs and outputs is stored.

Values of one instruction at one index are cached within the innermost loop being emitted,
so a producer used twice at the same index is computed once.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
from llvmlite import ir

from ..dtypes import DTYPES
from ..errors import UnsupportedError
from ..ir import post_order
from ..shape import default_layout
from . import emit_elementwise, ltypes
from .convert import bitcast_convert, convert
from .emit_loops import Index, add, clamp, const, delinearize, linearize, mul, reshape_index, sub
from .ltypes import I64, elem, select


class Source:
    """A materialized array the kernel reads or writes: base pointer, element type and
    dims. `first`: the buffer is a window holding the array's elements from this position
    on (an LLVM value; a row pass's temporaries hold the rows of one block)."""
    __slots__ = ("ptr", "et", "dims", "first")

    def __init__(self, ptr, shape, first=None):
        self.ptr, self.et, self.dims = ptr, elem(shape.element_type), shape.dims
        self.first = first

    def position(self, b: ir.IRBuilder, linear):
        """Where element `linear` of the array is in the buffer."""
        return linear if self.first is None else b.sub(linear, self.first)

    def load(self, b: ir.IRBuilder, index: Index):
        return ltypes.load(b, self.ptr, self.et, self.position(b, const(index.linear(b))))

    def store(self, b: ir.IRBuilder, value, linear) -> None:
        ltypes.store(b, value, self.ptr, self.et, self.position(b, const(linear)))


class Elemental:
    """Generates values of instructions at indices, at the builder's position."""

    def __init__(self, b: ir.IRBuilder, sources: dict[int, Source] | None = None,
                 bindings: dict[int, object] | None = None):
        self.b = b
        self.sources = sources or {}          # id(inst) -> Source
        self.bindings = bindings or {}        # id(inst) -> value (scalar parameters)
        self._cache: list[dict] = [{}]

    # ----------------------------------------------------------------------- driving
    def value(self, inst, index: Index):
        key = (id(inst), index.key())
        for scope in reversed(self._cache):
            if key in scope:
                return scope[key][0]
        if self._inline_elementwise(inst):
            chain = post_order([inst], lambda i: self._pending_operands(i, index), id)
            for producer in chain[:-1]:          # deepest first: no recursion per link
                self.value(producer, index)
        if id(inst) in self.bindings:
            v = self.bindings[id(inst)]
        elif id(inst) in self.sources:
            v = self.sources[id(inst)].load(self.b, index)
        else:
            emit = GENERATORS.get(inst.opcode)
            if emit is None:
                if not emit_elementwise.is_elementwise_op(inst.opcode):
                    raise UnsupportedError(f"no elemental generator for {inst.opcode}")
                emit = _elementwise
            v = emit(self, inst, index)
        self._cache[-1][key] = (v, index)        # the index keeps the key's ids alive
        return v

    def _inline_elementwise(self, inst) -> bool:
        """Computed here from its operands at the same index."""
        return (id(inst) not in self.bindings and id(inst) not in self.sources
                and inst.opcode not in GENERATORS
                and emit_elementwise.is_elementwise_op(inst.opcode))

    def _pending_operands(self, inst, index: Index) -> list:
        """The operands of an inline elementwise `inst` that are themselves inline
        elementwise at `index` and not computed yet: a long elementwise chain is emitted
        from its far end, so the generator never recurses once per link."""
        if not self._inline_elementwise(inst):
            return []
        key = index.key()
        return [op for op in inst.operands
                if op.shape.rank == len(index.dims) and self._inline_elementwise(op)
                and not any((id(op), key) in scope for scope in self._cache)]

    def operand(self, inst, i: int, index: Index):
        """Operand i at the same index (a rank-0 operand, e.g. select's scalar predicate or
        clamp's bounds, at the scalar index)."""
        op = inst.operands[i]
        if op.shape.rank != len(index.dims):
            index = Index.scalar()
        return self.value(op, index)

    def push_scope(self) -> None:
        self._cache.append({})

    def pop_scope(self) -> None:
        self._cache.pop()

    def alloca(self, typ: ir.Type):
        """A stack slot in the entry block, where mem2reg promotes it to registers."""
        b = self.b
        fn = b.block.function
        saved = b.block
        entry = fn.entry_basic_block
        with b.goto_block(entry):
            if entry.instructions:
                b.position_before(entry.instructions[0])
            slot = b.alloca(typ)
        b.position_at_end(saved)
        return slot

    def apply(self, comp, args: list) -> list:
        """A scalar computation (reducer, comparator, map function) applied to values; one
        value per root tuple element."""
        params = comp.parameters
        gen = Elemental(self.b, bindings={id(p): a for p, a in zip(params, args)})
        root = comp.root
        if root.opcode == "tuple":
            return [gen.value(r, Index.scalar()) for r in root.operands]
        v = gen.value(root, Index.scalar())
        return list(v) if root.shape.is_tuple else [v]


Generator = Callable[[Elemental, object, Index], object]


def _elementwise(gen: Elemental, inst, index: Index):
    args = [gen.operand(inst, i, index) for i in range(len(inst.operands))]
    return emit_elementwise.emit(gen.b, inst, args)


def _constant(gen: Elemental, inst, index: Index):
    value = inst.literal
    if getattr(value, "shape", None) != ():
        raise UnsupportedError("array constants are kernel inputs, not immediates")
    return immediate(value[()], elem(inst.shape.element_type))


def immediate(v, et: ltypes.ElemType):
    """A scalar as a compute-type constant (narrow floats rounded to their own type)."""
    if et.kind == "complex":
        v = complex(v)
        return (et.compute(v.real), et.compute(v.imag))
    if et.kind == "pred":
        return ltypes.I1(int(bool(v)))
    if et.is_float:
        return et.compute(float(np.asarray(v).astype(DTYPES[et.name].numpy)))
    return et.compute(int(v) & ((1 << et.compute.width) - 1))


def _broadcast(gen: Elemental, inst, index: Index):
    dims = inst.attrs.get("dimensions", ())
    op = inst.operands[0]
    if not dims:
        return gen.value(op, Index.scalar())
    b = gen.b
    return gen.value(op, Index(op.shape.dims, make_values=lambda: [index.values(b)[d]
                                                                   for d in dims]))


def _reshape(gen: Elemental, inst, index: Index):
    op = inst.operands[0]
    return gen.value(op, reshape_index(gen.b, index, op.shape.dims))


def _major_to_minor(shape) -> list[int]:
    layout = shape.layout or default_layout(shape.rank)
    return list(reversed(layout.minor_to_major))


def _bitcast(gen: Elemental, inst, index: Index):
    """Physical reinterpretation: the result's layout-ordered position is the operand's."""
    op = inst.operands[0]
    b = gen.b
    out_order, in_order = _major_to_minor(inst.shape), _major_to_minor(op.shape)
    if out_order == list(range(inst.shape.rank)) and in_order == list(range(op.shape.rank)):
        value = gen.value(op, reshape_index(b, index, op.shape.dims))
    else:
        def values():
            outs = index.values(b)
            phys = linearize(b, [outs[d] for d in out_order], [inst.shape.dims[d] for d in out_order])
            ins = delinearize(b, phys, [op.shape.dims[d] for d in in_order])
            result = [0] * op.shape.rank
            for k, d in enumerate(in_order):
                result[d] = ins[k]
            return result
        value = gen.value(op, Index(op.shape.dims, make_values=values))
    src, dst = elem(op.shape.element_type), elem(inst.shape.element_type)
    return value if src.name == dst.name else bitcast_convert(b, value, src, dst)


def _transpose(gen: Elemental, inst, index: Index):
    perm = inst.attrs["dimensions"]
    op = inst.operands[0]

    def values():
        outs = index.values(gen.b)
        result = [0] * len(perm)
        for i, p in enumerate(perm):
            result[p] = outs[i]
        return result
    return gen.value(op, Index(op.shape.dims, make_values=values))


def _slice(gen: Elemental, inst, index: Index):
    op, b = inst.operands[0], gen.b
    spec = inst.attrs["slice"]
    return gen.value(op, Index(op.shape.dims, make_values=lambda: [
        add(b, mul(b, v, stride), start) for v, (start, _, stride) in zip(index.values(b), spec)]))


def _reverse(gen: Elemental, inst, index: Index):
    op, b = inst.operands[0], gen.b
    dims = set(inst.attrs["dimensions"])
    n = op.shape.dims
    return gen.value(op, Index(n, make_values=lambda: [
        sub(b, n[d] - 1, v) if d in dims else v for d, v in enumerate(index.values(b))]))


def _iota(gen: Elemental, inst, index: Index):
    et = elem(inst.shape.element_type)
    v = const(index.values(gen.b)[inst.attrs["iota_dimension"]])
    return convert(gen.b, v, elem("s64"), et)


def _copy(gen: Elemental, inst, index: Index):
    return gen.value(inst.operands[0], index)


def _pad(gen: Elemental, inst, index: Index):
    """Operand where the position falls on it, else the padding value; the operand is read
    at a clamped position so the select needs no branch."""
    op, b = inst.operands[0], gen.b
    outs = index.values(b)
    inside = ltypes.I1(1)
    coords: list = []
    for v, n, (lo, _, interior) in zip(outs, op.shape.dims, inst.attrs["padding"]):
        pos = sub(b, v, lo)
        step = interior + 1
        if step > 1:
            on_grid = b.icmp_unsigned("==", b.urem(const(pos), I64(step)), I64(0))
            pos_ok = b.and_(b.icmp_signed(">=", const(pos), I64(0)), on_grid)
            pos = b.sdiv(const(pos), I64(step))
            ok = b.and_(pos_ok, b.icmp_signed("<", pos, I64(n)))
        else:
            ok = b.icmp_unsigned("<", const(pos), I64(n))
        inside = b.and_(inside, ok)
        coords.append(b.select(ok, const(pos), I64(0)))
    x = gen.value(op, Index(op.shape.dims, values=coords))
    fill = gen.value(inst.operands[1], Index.scalar())
    return select(b, inside, x, fill)


def _concatenate(gen: Elemental, inst, index: Index):
    b = gen.b
    d = inst.attrs["dimensions"][0]
    outs = index.values(b)
    result, offset = None, 0
    for op in inst.operands:
        n = op.shape.dims[d]
        if n == 0:
            continue
        rel = sub(b, outs[d], offset)
        ok = b.icmp_unsigned("<", const(rel), I64(n))
        coords = list(outs)
        coords[d] = b.select(ok, const(rel), I64(0))
        x = gen.value(op, Index(op.shape.dims, values=coords))
        result = x if result is None else select(b, ok, x, result)
        offset += n
    return result


def _get_tuple_element(gen: Elemental, inst, index: Index):
    return gen.value(inst.operands[0], index)[inst.attrs["index"]]


def _map(gen: Elemental, inst, index: Index):
    args = [gen.value(op, index) for op in inst.operands]
    return gen.apply(inst.attrs["to_apply"], args)[0]


def scalar_index(gen: Elemental, operand) -> ir.Value:
    """A rank-0 integer operand (a dynamic index) as a signed i64."""
    v = gen.value(operand, Index.scalar())
    et = elem(operand.shape.element_type)
    if v.type.width == 64:
        return v
    return (gen.b.sext if et.signed else gen.b.zext)(v, I64)


def start_indices(gen: Elemental, operands, dims, sizes) -> list:
    """Dynamic start indices clamped so the window [start, start+size) fits, as XLA does."""
    return [clamp(gen.b, scalar_index(gen, o), 0, n - s) for o, n, s in zip(operands, dims, sizes)]


def _dynamic_slice(gen: Elemental, inst, index: Index):
    op, b = inst.operands[0], gen.b
    starts = start_indices(gen, inst.operands[1:], op.shape.dims, inst.attrs["dynamic_slice_sizes"])
    return gen.value(op, Index(op.shape.dims, values=[
        add(b, v, s) for v, s in zip(index.values(b), starts)]))


def _dynamic_update_slice(gen: Elemental, inst, index: Index):
    op, update, b = inst.operands[0], inst.operands[1], gen.b
    starts = start_indices(gen, inst.operands[2:], op.shape.dims, update.shape.dims)
    inside = ltypes.I1(1)
    coords = []
    for v, s, n in zip(index.values(b), starts, update.shape.dims):
        rel = sub(b, v, s)
        ok = b.icmp_unsigned("<", const(rel), I64(n))
        inside = b.and_(inside, ok)
        coords.append(b.select(ok, const(rel), I64(0)))
    new = gen.value(update, Index(update.shape.dims, values=coords))
    old = gen.value(op, index)
    return select(b, inside, new, old)


GENERATORS: dict[str, Generator] = {
    "constant": _constant, "broadcast": _broadcast, "reshape": _reshape, "bitcast": _bitcast,
    "transpose": _transpose, "slice": _slice, "reverse": _reverse, "iota": _iota,
    "copy": _copy, "pad": _pad, "concatenate": _concatenate,
    "get-tuple-element": _get_tuple_element, "map": _map,
    "dynamic-slice": _dynamic_slice, "dynamic-update-slice": _dynamic_update_slice,
}


def register(table: dict[str, Generator]) -> None:
    """Other modules (reductions, gather) add their generators here."""
    GENERATORS.update(table)

