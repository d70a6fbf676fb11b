"""sort and top-k: a stable bottom-up merge sort of each row, the order inlined.

Each row along the sort dimension sorts a permutation of positions (two i64 arrays per
thread in scratch); the outputs are then the operands gathered through the permutation, so
variadic sorts move all operands together. Merging takes from the right run only when its
element is strictly before, which makes the sort stable: the answer the interpreter gives
whether or not is_stable is set. Rows are independent, so threads split them.

The order is `sort`'s comparator `cmp(op0[a], op0[b], op1[a], op1[b], ...)`; for XLA:CPU's
`TopK` custom call its comparator on the one operand; for `topk` IEEE totalOrder (NaN above
+inf), descending when `largest`. Top-k writes the first k values and their positions (s32)
along the last dimension.
"""
from __future__ import annotations

import math

from .emit_elementwise import _total_order_key
from .emit_kernel import register as register_phase
from .emit_loops import Index, const, delinearize, for_range, linearize
from .ltypes import I8, I32, I64, elem, store


def geometry(inst):
    dims = inst.operands[0].shape.dims
    d = inst.attrs["dimensions"][0] if inst.opcode == "sort" else len(dims) - 1
    length = dims[d]
    rows = math.prod(dims) // max(length, 1)
    return dims, d, length, rows


def plan_sort(inst):
    dims, d, length, rows = geometry(inst)
    passes = max(1, math.ceil(math.log2(max(length, 2))))
    return rows, float(rows * length * passes * len(inst.operands)), 2 * 8 * max(length, 1) + 64


def row_elements(gen, inst, row):
    """(coords(position), element(k, position)) of sort row `row` (the linear index over
    every dimension but the sorted one): a position's coordinates, operand k's value there."""
    dims, d, _, _ = geometry(inst)
    outer = delinearize(gen.b, row, [n for k, n in enumerate(dims) if k != d])

    def coords(position):
        c = list(outer)
        c.insert(d, position)
        return c

    def element(k, position):
        return gen.value(inst.operands[k], Index(dims, values=coords(position)))
    return coords, element


def order(gen, inst, element):
    """before(x, y): whether position x sorts strictly before position y."""
    b = gen.b
    if inst.opcode == "sort":
        comp = inst.attrs["to_apply"]
        return lambda x, y: gen.apply(comp, [v for k in range(len(inst.operands))
                                             for v in (element(k, x), element(k, y))])[0]
    if inst.opcode == "custom-call":               # TopK: its comparator on the values
        comp = inst.attrs["called_computations"][0]
        return lambda x, y: gen.apply(comp, [element(0, x), element(0, y)])[0]
    et = elem(inst.operands[0].shape.element_type)
    largest = inst.attrs.get("largest", True)

    def key(v):
        return _total_order_key(b, v) if et.is_float else v

    def before(x, y):
        kx, ky = key(element(0, x)), key(element(0, y))
        op = ">" if largest else "<"
        return b.icmp_unsigned(op, kx, ky) if et.kind == "uint" else b.icmp_signed(op, kx, ky)
    return before


def emit_sort(kb, inst, dests, lo, hi):
    b = kb.b
    gen = kb.elemental()
    dims, d, length, rows = geometry(inst)
    if length == 0:
        return
    per_thread = 2 * 8 * length + 64
    scratch = b.gep(kb.scratch, [b.mul(kb.slot, I64(per_thread))], inbounds=True, source_etype=I8)
    buffers = [scratch, b.gep(scratch, [I64(length)], inbounds=True, source_etype=I64)]
    passes = math.ceil(math.log2(length)) if length > 1 else 0
    i_slot, j_slot = gen.alloca(I64), gen.alloca(I64)

    with for_range(b, lo, hi, "row", vectorize=False) as r:
        coords, element = row_elements(gen, inst, r)
        before = order(gen, inst, element)

        with for_range(b, 0, length, "init") as i:
            b.store(i, _at(b, buffers[0], i))
        for p in range(passes):
            src, dst = buffers[p % 2], buffers[(p + 1) % 2]
            width = 1 << p
            blocks = -(-length // (2 * width))
            with for_range(b, 0, blocks, "blk", vectorize=False) as blk:
                start = b.mul(blk, I64(2 * width))
                mid = _min(b, b.add(start, I64(width)), I64(length))
                end = _min(b, b.add(start, I64(2 * width)), I64(length))
                b.store(start, i_slot)
                b.store(mid, j_slot)
                with for_range(b, start, end, "m", vectorize=False) as k:
                    gen.push_scope()
                    i, j = b.load(i_slot, typ=I64), b.load(j_slot, typ=I64)
                    left_ok = b.icmp_signed("<", i, mid)
                    right_ok = b.icmp_signed("<", j, end)
                    a = b.load(_at(b, src, _min(b, i, b.sub(mid, I64(1)))), typ=I64)
                    c = b.load(_at(b, src, _min(b, j, b.sub(end, I64(1)))), typ=I64)
                    take_right = b.and_(right_ok, b.or_(b.not_(left_ok), before(c, a)))
                    b.store(b.select(take_right, c, a), _at(b, dst, k))
                    b.store(b.add(i, b.zext(b.not_(take_right), I64)), i_slot)
                    b.store(b.add(j, b.zext(take_right, I64)), j_slot)
                    gen.pop_scope()
        final = buffers[passes % 2]
        if inst.opcode == "sort":
            out_dims, count = dims, length
        else:
            out_dims = (inst.shape.elements[0].dims)
            count = out_dims[-1]
        with for_range(b, 0, count, "out") as pos:
            gen.push_scope()
            src_pos = b.load(_at(b, final, pos), typ=I64)
            lin = const(linearize(b, coords(pos), out_dims))
            if inst.opcode == "sort":
                for k, dest in enumerate(dests):
                    store(b, element(k, src_pos), dest.ptr, dest.et, lin)
            else:
                store(b, element(0, src_pos), dests[0].ptr, dests[0].et, lin)
                store(b, b.trunc(src_pos, I32), dests[1].ptr, dests[1].et, lin)
            gen.pop_scope()


def _at(b, base, i):
    return b.gep(base, [i], inbounds=True, source_etype=I64)


def _min(b, x, y):
    return b.select(b.icmp_signed("<", x, y), x, y)


for _opcode in ("sort", "topk", "custom-call"):
    register_phase(_opcode, emit_sort, plan_sort)
