"""gather, scatter and select-and-scatter: reads and writes at computed indices.

gather is elemental: an output index splits into batch coordinates (which pick an index
vector from start_indices) and offset coordinates (a position in the slice), as XLA's
operation semantics define; start indices are clamped so the slice fits.

scatter and select-and-scatter write through indices, so they are phases of their own: copy
the operand (or the init value) to the output, then apply the updates one by one in order
with the combiner inlined. Updates whose window would leave the operand are skipped whole,
as XLA's CPU backend (and the interpreter) does. Updates may hit the same element, so
threads never split them: a scatter's threads own rows of the output instead, each copying
its rows and applying to them the part of every window that falls there, in order.
"""
from __future__ import annotations

import math
from functools import partial

from llvmlite import ir

from .elemental import Elemental, register
from ..targets import cpu_facts
from .emit_kernel import CHUNKS_PER_THREAD, emit_loop
from .emit_kernel import register as register_phase
from .emit_loops import (Index, add, const, delinearize, for_range, linearize, mul, nest,
                         outer_positions, placed, ranges, udiv)
from .emit_reduce import Reducer
from .ltypes import I1, I64, elem, load, store


def _index_value(gen: Elemental, indices, coords: list) -> tuple:
    """(value as i64, is_unsigned) of one element of an integer indices array."""
    et = elem(indices.shape.element_type)
    v = gen.value(indices, Index(indices.shape.dims, values=coords))
    if v.type.width < 64:
        v = (gen.b.sext if et.signed else gen.b.zext)(v, I64)
    return v, not et.signed


def _vector_coords(batch: list, k: int, ivd: int, rank: int) -> list:
    """Coordinates in start_indices of component k of the index vector at `batch`."""
    if ivd == rank:
        return list(batch)
    return list(batch[:ivd]) + [k] + list(batch[ivd:])


def _clamp_start(b: ir.IRBuilder, v, unsigned: bool, hi: int):
    if unsigned:
        return b.select(b.icmp_unsigned(">", v, I64(hi)), I64(hi), v)
    v = b.select(b.icmp_signed("<", v, I64(0)), I64(0), v)
    return b.select(b.icmp_signed(">", v, I64(hi)), I64(hi), v)


def gather_value(gen: Elemental, inst, index: Index):
    b = gen.b
    operand, indices = inst.operands
    a = inst.attrs
    ivd = a["index_vector_dim"]
    sizes = a["slice_sizes"]
    offset_dims = list(a.get("offset_dims", ()))
    collapsed = set(a.get("collapsed_slice_dims", ())) | set(a.get("operand_batching_dims", ()))
    outs = index.values(b)
    batch = [v for d, v in enumerate(outs) if d not in offset_dims]
    offsets = [outs[d] for d in offset_dims]
    rank = len(operand.shape.dims)
    starts: list = [0] * rank
    for k, d in enumerate(a["start_index_map"]):
        v, unsigned = _index_value(gen, indices, _vector_coords(batch, k, ivd, indices.shape.rank))
        starts[d] = _clamp_start(b, v, unsigned, operand.shape.dims[d] - sizes[d])
    for od, idd in zip(a.get("operand_batching_dims", ()), a.get("start_indices_batching_dims", ())):
        starts[od] = batch[idd - (idd > ivd)]
    window = iter(offsets)
    coords = [starts[d] if d in collapsed else add(b, starts[d], next(window)) for d in range(rank)]
    return gen.value(operand, Index(operand.shape.dims, values=coords))


register({"gather": gather_value})


# --------------------------------------------------------------------------- scatter

# element-operations that finding one update's window (its index vector, the fit test and
# the part's share of it) costs: what each extra part pays once per update
SCAN_COST = 8.0


def scatter_layout(inst) -> tuple[list, list]:
    """(update dims that pick the index vector, update window dims) of a scatter."""
    upd_dims = inst.operands[-1].shape.dims
    window_dims = list(inst.attrs.get("update_window_dims", ()))
    return [d for d in range(len(upd_dims)) if d not in window_dims], window_dims


def _inserted(inst) -> set:
    a = inst.attrs
    return set(a.get("inserted_window_dims", ())) | set(a.get("input_batching_dims", ()))


def scatter_start(gen: Elemental, inst, batch: list) -> tuple[list, ir.Value]:
    """(operand coordinates where the window of update batch index `batch` starts, whether
    the whole window fits in the operand: a window that would not is skipped)."""
    b = gen.b
    a = inst.attrs
    n = len(inst.operands) // 2
    indices = inst.operands[n]
    ivd = a["index_vector_dim"]
    shape = inst.operands[0].shape.dims
    window = _window(inst)
    starts: list = [0] * len(shape)
    for k, d in enumerate(a["scatter_dims_to_operand_dims"]):
        starts[d], _ = _index_value(gen, indices, _vector_coords(batch, k, ivd, indices.shape.rank))
    for od, idd in zip(a.get("input_batching_dims", ()),
                       a.get("scatter_indices_batching_dims", ())):
        starts[od] = batch[idd - (idd > ivd)]
    ok = I1(1)
    for d in range(len(shape)):
        fits = b.icmp_unsigned("<=", const(starts[d]), I64(shape[d] - window[d])) \
            if shape[d] >= window[d] else I1(0)
        ok = b.and_(ok, fits)
    return starts, ok


def _window(inst) -> list[int]:
    """The extent of an update window along each operand dimension."""
    inserted = _inserted(inst)
    sizes = iter(inst.operands[-1].shape.dims[d] for d in scatter_layout(inst)[1])
    return [1 if d in inserted else next(sizes) for d in range(inst.operands[0].shape.rank)]


def scatter_position(b: ir.IRBuilder, inst, starts: list, window: list):
    """Linear position in the operand of window element `window` of a window at `starts`."""
    inserted = _inserted(inst)
    shape = inst.operands[0].shape.dims
    it = iter(window)
    coords = [starts[d] if d in inserted else add(b, starts[d], next(it))
              for d in range(len(shape))]
    return const(linearize(b, coords, shape))


def _rows(inst) -> tuple[int | None, int, int]:
    """The operand's outer_positions: the parts of a scatter."""
    return outer_positions(inst.operands[0].shape.dims)


def plan_scatter(inst, in_place: bool = False):
    """(parts, work, scratch) of emit_scatter: the operand's rows (_rows) when splitting
    pays, else one part. Every part finds every update's window (SCAN_COST each) but
    copies and updates only its rows, so many small updates into few rows stay serial."""
    n = len(inst.operands) // 2
    scatter_dims, window_dims = scatter_layout(inst)
    upd = inst.operands[-1].shape.dims
    updates = math.prod(upd[d] for d in scatter_dims)
    copy = 0 if in_place else n * inst.operands[0].shape.num_elements
    work = copy + updates * (n * math.prod(upd[d] for d in window_dims) + SCAN_COST)
    rows = _rows(inst)[1]
    extra = (min(rows, CHUNKS_PER_THREAD * cpu_facts.threads()) - 1) * updates * SCAN_COST
    if rows < 2 or 2 * extra > work:
        return 1, float(work), 0
    return rows, float(work + extra), 0


def emit_scatter(kb, inst, dests, lo, hi, in_place: bool = False):
    """Parts [lo, hi) of the operand's rows (plan_scatter): copy them from the operand
    (unless `in_place`: dests already hold it), then apply every update in order to the
    part of its window in those rows, with the combiner inlined and the innermost window
    dimension as the vector loop. Each element belongs to one part, so parts run on
    threads and every element sees its updates in order, whatever the combiner."""
    b = kb.b
    n = len(inst.operands) // 2
    inputs, updates = inst.operands[:n], inst.operands[n + 1:]
    s, rows, inner = _rows(inst)
    parts = plan_scatter(inst, in_place)[0]
    r0, r1 = ((v if parts == rows else udiv(b, mul(b, v, rows), parts)) for v in (lo, hi))
    if not in_place:
        for x, dest in zip(inputs, dests):
            emit_loop(kb, [(x, [dest], None)], mul(b, r0, inner), mul(b, r1, inner), flat=True)
    gen = kb.elemental()
    upd_dims = updates[0].shape.dims
    scatter_dims, window_dims = scatter_layout(inst)
    reducer = Reducer(gen, inst.attrs["to_apply"])
    with nest(b, [upd_dims[d] for d in scatter_dims], "s") as batch:
        gen.push_scope()
        starts, ok = scatter_start(gen, inst, batch)
        bounds, ok = _rows_of_window(b, inst, starts, ok, r0, r1)
        with b.if_then(ok):
            with ranges(b, bounds, "w") as wv:
                gen.push_scope()
                ucoords = placed(len(upd_dims), (scatter_dims, batch), (window_dims, wv))
                lin = scatter_position(b, inst, starts, wv)
                current = [load(b, dest.ptr, dest.et, lin) for dest in dests]
                new = [gen.value(u, Index(upd_dims, values=ucoords)) for u in updates]
                for dest, v in zip(dests, reducer(current, new)):
                    store(b, v, dest.ptr, dest.et, lin)
                gen.pop_scope()
        gen.pop_scope()


def _rows_of_window(b: ir.IRBuilder, inst, starts: list, ok, r0, r1) -> tuple[list, ir.Value]:
    """(range of each window dimension within operand rows [r0, r1) of _rows, whether the
    window is applied: it fits and reaches those rows)."""
    s = _rows(inst)[0]
    window = _window(inst)
    inserted = _inserted(inst)
    bounds = [(0, window[d]) for d in range(len(window)) if d not in inserted]
    if s is None:
        return bounds, ok
    start = const(starts[s])
    if s in inserted:
        inside = b.and_(b.icmp_signed("<=", const(r0), start), b.icmp_signed("<", start, const(r1)))
        return bounds, b.and_(ok, inside)
    k = sum(d not in inserted for d in range(s))
    first, last = b.sub(const(r0), start), b.sub(const(r1), start)
    bounds[k] = (b.select(b.icmp_signed(">", first, I64(0)), first, I64(0)),
                 b.select(b.icmp_signed("<", last, I64(window[s])), last, I64(window[s])))
    return bounds, ok


# ----------------------------------------------------------------- select-and-scatter

def selected(gen: Elemental, inst, svals: list) -> tuple:
    """(whether the window of source element `svals` has an operand element, the linear
    position of the one `select` prefers): the first wins unless select(best, candidate)
    is false; padding never wins."""
    b = gen.b
    operand = inst.operands[0]
    w = inst.attrs.get("window")
    rank = operand.shape.rank
    size = w.size if w else (1,) * rank
    stride = w.stride if w else (1,) * rank
    pad = w.pad if w else ((0, 0),) * rank
    dims = operand.shape.dims
    et = elem(operand.shape.element_type)
    best, best_at, have = gen.alloca(et.compute), gen.alloca(I64), gen.alloca(I1)
    b.store(I1(0), have)
    with nest(b, list(size), "k") as ks:
        gen.push_scope()
        ok, coords = I1(1), []
        for d in range(rank):
            pos = b.sub(b.add(b.mul(const(svals[d]), I64(stride[d])), const(ks[d])),
                        I64(pad[d][0]))
            good = b.and_(b.icmp_signed(">=", pos, I64(0)), b.icmp_signed("<", pos, I64(dims[d])))
            ok = b.and_(ok, good)
            coords.append(b.select(good, pos, I64(0)))
        with b.if_then(ok):
            x = gen.value(operand, Index(dims, values=coords))
            had = b.load(have, typ=I1)
            keep = gen.apply(inst.attrs["select"], [b.load(best, typ=et.compute), x])[0]
            take = b.or_(b.not_(had), b.not_(keep))
            b.store(b.select(take, x, b.load(best, typ=et.compute)), best)
            lin = const(linearize(b, coords, dims))
            b.store(b.select(take, lin, b.load(best_at, typ=I64)), best_at)
            b.store(I1(1), have)
        gen.pop_scope()
    return b.load(have, typ=I1), b.load(best_at, typ=I64)


def _apart(inst) -> int:
    """How many leading dimensions of a select-and-scatter no window spans (size 1, stride
    1, no padding: a pool's batch): the outputs of one index there come only from the
    sources of that index, so those indices run apart, on threads."""
    w = inst.attrs.get("window")
    if w is None:
        return inst.operands[0].shape.rank
    m = 0
    while m < len(w.size) and (w.size[m], w.stride[m], tuple(w.pad[m])) == (1, 1, (0, 0)):
        m += 1
    return m


def _plan_select_and_scatter(inst):
    work = sum(o.shape.num_elements for o in inst.operands)
    return math.prod(inst.operands[0].shape.dims[:_apart(inst)]), float(work), 0


def emit_select_and_scatter(kb, inst, dests, lo, hi):
    """Per source element: the window's element `select` prefers, then scatter onto it.
    [lo, hi) counts indices of the leading dimensions no window spans (_apart)."""
    b = kb.b
    operand, source, init = inst.operands
    dest = dests[0]
    gen = kb.elemental()
    m = _apart(inst)
    inner = math.prod(operand.shape.dims[m:])
    with for_range(b, mul(b, lo, inner), mul(b, hi, inner), "i") as i:
        store(b, gen.value(init, Index.scalar()), dest.ptr, dest.et, i)
    scatter = Reducer(gen, inst.attrs["scatter"])
    with for_range(b, lo, hi, "o", vectorize=False) as o:
        outer = delinearize(b, o, source.shape.dims[:m])
        with nest(b, list(source.shape.dims[m:]), "s") as rest:
            gen.push_scope()
            svals = outer + list(rest)
            have, at = selected(gen, inst, svals)
            with b.if_then(have):
                s = gen.value(source, Index(source.shape.dims, values=svals))
                current = load(b, dest.ptr, dest.et, at)
                store(b, scatter([current], [s])[0], dest.ptr, dest.et, at)
            gen.pop_scope()


register_phase("scatter", emit_scatter, plan_scatter,
               in_place=(partial(emit_scatter, in_place=True), partial(plan_scatter, in_place=True)))
register_phase("select-and-scatter", emit_select_and_scatter, _plan_select_and_scatter)
