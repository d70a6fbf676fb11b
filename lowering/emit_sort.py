"""sort and top-k: a stable bottom-up merge sort of each row, the order inlined.

Each row along the sort dimension is first copied into per-thread scratch, one contiguous
array per operand (and, for top-k, one of positions), computing what is fused into the sort;
the merge passes then compare values read from there and move every array's element
together (as raw bytes), between two buffers per array. No comparison reads through an
index or a strided operand, so a sort along a non-minor dimension costs one strided read
per element, not one per comparison. Each merge fills its output from both ends at once
(the smallest remaining element to the front, the largest to the back): two independent
dependency chains per step instead of one. The front takes from the right run only when
its element is strictly before, the back from the left run only when the right's is
strictly before, which makes the sort stable: the answer the interpreter gives
whether or not is_stable is set. Rows are independent, so threads split them.

Top-k of at most SELECT_K elements keeps the best k of each row in order instead,
inserting each element that beats the k-th: usually one comparison per element.

The order is `sort`'s comparator `cmp(op0[a], op0[b], op1[a], op1[b], ...)`; for XLA:CPU's
`TopK` custom call its comparator on the one operand; for `topk` IEEE totalOrder (NaN above
+inf), descending when `largest`. Top-k writes the first k values and their positions (s32)
along the last dimension.
"""
from __future__ import annotations

import math

from llvmlite import ir

from .emit_elementwise import _total_order_key
from .emit_kernel import register as register_phase
from .emit_loops import Index, const, delinearize, for_range, linearize
from .ltypes import I8, I32, I64, elem, load, store


def geometry(inst):
    dims = inst.operands[0].shape.dims
    d = inst.attrs["dimensions"][0] if inst.opcode == "sort" else len(dims) - 1
    length = dims[d]
    rows = math.prod(dims) // max(length, 1)
    return dims, d, length, rows


def plan_sort(inst):
    dims, d, length, rows = geometry(inst)
    passes = max(1, math.ceil(math.log2(max(length, 2))))
    return rows, float(rows * length * passes * len(inst.operands)), scratch_bytes(inst)


def _carried(inst) -> list[int]:
    """Bytes per element of the arrays a row sorts together: the operands, and for top-k
    the positions (s32)."""
    sizes = [o.shape.dtype.numpy.itemsize for o in inst.operands]
    return sizes if inst.opcode == "sort" else sizes + [4]


def scratch_bytes(inst) -> int:
    """Per thread: two buffers (merge source and destination) of each carried array."""
    length = geometry(inst)[2]
    return sum(2 * _padded(length * size) for size in _carried(inst)) + 64


def _padded(n: int) -> int:
    return (n + 63) // 64 * 64


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
    before = value_order(gen, inst)
    n = len(inst.operands)
    return lambda x, y: before([element(k, x) for k in range(n)],
                               [element(k, y) for k in range(n)])


def value_order(gen, inst):
    """before(xs, ys): whether an element whose operands' values are xs sorts strictly before
    one whose values are ys."""
    b = gen.b
    if inst.opcode == "sort":
        comp = inst.attrs["to_apply"]
        return lambda xs, ys: gen.apply(comp, [v for x, y in zip(xs, ys) for v in (x, y)])[0]
    if inst.opcode == "custom-call":               # TopK: its comparator on the values
        comp = inst.attrs["called_computations"][0]
        return lambda xs, ys: gen.apply(comp, [xs[0], ys[0]])[0]
    et = elem(inst.operands[0].shape.element_type)
    largest = inst.attrs.get("largest", True)

    def key(v):
        return _total_order_key(b, v) if et.is_float else v

    def before(xs, ys):
        kx, ky = key(xs[0]), key(ys[0])
        op = ">" if largest else "<"
        return b.icmp_unsigned(op, kx, ky) if et.kind == "uint" else b.icmp_signed(op, kx, ky)
    return before


# Top-k with k up to this keeps the best k of a row in order, inserting each element that
# beats the k-th (O(length * k) at worst, usually one comparison per element).
SELECT_K = 16


def emit_sort(kb, inst, dests, lo, hi):
    b = kb.b
    gen = kb.elemental()
    dims, d, length, rows = geometry(inst)
    if length == 0:
        return
    sizes = _carried(inst)
    raw = [ir.IntType(8 * size) for size in sizes]
    base = kb.workspace()
    buffers, offset = ([], []), 0
    for size in sizes:
        for half in buffers:
            half.append(b.gep(base, [I64(offset)], inbounds=True, source_etype=I8))
            offset += _padded(length * size)
    out_dims = dims if inst.opcode == "sort" else inst.shape.elements[0].dims
    count = out_dims[d]

    def move(src, dst, k, at, to):
        b.store(b.load(_at(b, src[k], at, raw[k]), typ=raw[k]), _at(b, dst[k], to, raw[k]))

    with for_range(b, lo, hi, "row", vectorize=False) as r:
        coords, element = row_elements(gen, inst, r)
        if inst.opcode != "sort" and count <= SELECT_K and count < length:
            final = _select(gen, inst, element, buffers[0], length, count, move)
        else:
            final = _merge_sort(gen, inst, element, buffers, length, move)
        with for_range(b, 0, count, "out") as pos:
            lin = const(linearize(b, coords(pos), out_dims))
            for q in range(len(dests)):
                move(final, [x.ptr for x in dests], q, pos, lin)


def _merge_sort(gen, inst, element, buffers, length, move):
    """Sort one row: copy it to buffers[0] (contiguous), merge runs of 1, 2, 4, ...
    between the two buffers; returns the buffers holding the sorted row."""
    b = gen.b
    ets = [elem(o.shape.element_type) for o in inst.operands]
    with for_range(b, 0, length, "init") as pos:
        gen.push_scope()
        for k, et in enumerate(ets):
            store(b, element(k, pos), buffers[0][k], et, pos)
        if len(buffers[0]) > len(ets):
            b.store(b.trunc(pos, I32), _at(b, buffers[0][-1], pos, I32))
        gen.pop_scope()
    passes = math.ceil(math.log2(length)) if length > 1 else 0
    i_slot, j_slot, ii_slot, jj_slot = (gen.alloca(I64) for _ in range(4))
    for p in range(passes):
        src, dst = buffers[p % 2], buffers[(p + 1) % 2]
        before = order(gen, inst, lambda k, pos, src=src: load(b, src[k], ets[k], pos))
        width = 1 << p
        blocks = -(-length // (2 * width))
        with for_range(b, 0, blocks, "blk", vectorize=False) as blk:
            start = b.mul(blk, I64(2 * width))
            mid = _min(b, b.add(start, I64(width)), I64(length))
            end = _min(b, b.add(start, I64(2 * width)), I64(length))
            last = b.sub(end, I64(1))
            for slot, value in ((i_slot, start), (j_slot, mid), (ii_slot, b.sub(mid, I64(1))),
                                (jj_slot, last)):
                b.store(value, slot)
            half = b.lshr(b.add(b.sub(end, start), I64(1)), I64(1))
            with for_range(b, 0, half, "m", vectorize=False) as step:
                gen.push_scope()
                i, j, ii, jj = (b.load(s, typ=I64) for s in (i_slot, j_slot, ii_slot, jj_slot))
                # The largest remaining element goes to the back (ties: the right run's
                # first), the smallest to the front: two independent chains per step.
                a, c = _max(b, ii, start), _max(b, jj, mid)
                take_left = b.and_(b.icmp_signed(">=", ii, start), b.or_(
                    b.icmp_signed("<", jj, mid), before(c, a)))
                back = b.select(take_left, a, c)
                b.store(b.sub(ii, b.zext(take_left, I64)), ii_slot)
                b.store(b.sub(jj, b.zext(b.not_(take_left), I64)), jj_slot)
                a, c = _min(b, i, b.sub(mid, I64(1))), _min(b, j, last)
                take_right = b.and_(b.icmp_signed("<", j, end), b.or_(
                    b.icmp_signed(">=", i, mid), before(c, a)))
                front = b.select(take_right, c, a)
                b.store(b.add(i, b.zext(b.not_(take_right), I64)), i_slot)
                b.store(b.add(j, b.zext(take_right, I64)), j_slot)
                # An odd block's last step has no back half: its store lands where the
                # front's goes, which follows it.
                for q in range(len(buffers[0])):
                    move(src, dst, q, back, b.sub(last, step))
                    move(src, dst, q, front, b.add(start, step))
                gen.pop_scope()
    return buffers[passes % 2]


def _select(gen, inst, element, buf, length, k, move):
    """Top-k of one row by insertion into a list of the best k so far (values, positions
    in `buf`): an element enters when the list is not full or it sorts strictly before
    the last, and moves up past the entries it sorts strictly before, so ties keep the
    row's order (a stable sort's first k). Returns `buf`."""
    b = gen.b
    et = elem(inst.operands[0].shape.element_type)
    before = value_order(gen, inst)
    filled, j_slot = gen.alloca(I64), gen.alloca(I64)
    b.store(I64(0), filled)
    with for_range(b, 0, length, "sel", vectorize=False) as pos:
        gen.push_scope()
        x = element(0, pos)
        n = b.load(filled, typ=I64)
        full = b.icmp_signed("==", n, I64(k))
        enters = b.or_(b.not_(full), before([x], [load(b, buf[0], et, I64(k - 1))]))
        with b.if_then(enters):
            b.store(b.select(full, n, b.add(n, I64(1))), filled)
            b.store(b.select(full, I64(k - 1), n), j_slot)
            test = b.append_basic_block("sel.up")
            up = b.append_basic_block("sel.move")
            done = b.append_basic_block("sel.put")
            b.branch(test)
            b.position_at_end(test)
            j = b.load(j_slot, typ=I64)
            above = b.select(b.icmp_signed(">", j, I64(0)), b.sub(j, I64(1)), I64(0))
            moves = b.and_(b.icmp_signed(">", j, I64(0)),
                           before([x], [load(b, buf[0], et, above)]))
            b.cbranch(moves, up, done)
            b.position_at_end(up)
            for q in range(2):
                move(buf, buf, q, above, j)
            b.store(above, j_slot)
            b.branch(test)
            b.position_at_end(done)
            store(b, x, buf[0], et, j)
            b.store(b.trunc(pos, I32), _at(b, buf[1], j, I32))
        gen.pop_scope()
    return buf


def _at(b, base, i, typ=I64):
    return b.gep(base, [i], inbounds=True, source_etype=typ)


def _max(b, x, y):
    return b.select(b.icmp_signed(">", x, y), x, y)


def _min(b, x, y):
    return b.select(b.icmp_signed("<", x, y), x, y)


for _opcode in ("sort", "topk", "custom-call"):
    register_phase(_opcode, emit_sort, plan_sort)
