"""gather, scatter and select-and-scatter: reads and writes at computed indices.

gather is elemental: an output index splits into batch coordinates (which pick an index
vector from start_indices) and offset coordinates (a position in the slice), as XLA's
operation semantics define; start indices are clamped so the slice fits.

scatter and select-and-scatter write through indices, so they are phases of their own: copy
the operand (or the init value) to the output, then apply the updates one by one in order
with the combiner inlined. Updates whose window would leave the operand are skipped whole,
as XLA's CPU backend (and the interpreter) does. These loops run on one thread: updates may
hit the same element.
"""
from __future__ import annotations

import math

from llvmlite import ir

from .elemental import Elemental, register
from .emit_kernel import emit_loop
from .emit_kernel import register as register_phase
from .emit_loops import Index, add, const, delinearize, for_range, linearize, mul, nest, placed
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

def _plan_serial(inst):
    n = sum(o.shape.num_elements for o in inst.operands)
    return 1, float(n), 0


def scatter_layout(inst) -> tuple[list, list]:
    """(update dims that pick the index vector, update window dims) of a scatter."""
    upd_dims = inst.operands[-1].shape.dims
    window_dims = list(inst.attrs.get("update_window_dims", ()))
    return [d for d in range(len(upd_dims)) if d not in window_dims], window_dims


def scatter_start(gen: Elemental, inst, batch: list) -> tuple[list, ir.Value]:
    """(operand coordinates where the window of update batch index `batch` starts, whether
    the whole window fits in the operand: a window that would not is skipped)."""
    b = gen.b
    a = inst.attrs
    n = len(inst.operands) // 2
    indices = inst.operands[n]
    ivd = a["index_vector_dim"]
    shape = inst.operands[0].shape.dims
    inserted = set(a.get("inserted_window_dims", ())) | set(a.get("input_batching_dims", ()))
    sizes = iter(inst.operands[-1].shape.dims[d] for d in scatter_layout(inst)[1])
    window = [1 if d in inserted else next(sizes) for d in range(len(shape))]
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


def scatter_position(b: ir.IRBuilder, inst, starts: list, window: list):
    """Linear position in the operand of window element `window` of a window at `starts`."""
    a = inst.attrs
    inserted = set(a.get("inserted_window_dims", ())) | set(a.get("input_batching_dims", ()))
    shape = inst.operands[0].shape.dims
    it = iter(window)
    coords = [starts[d] if d in inserted else add(b, starts[d], next(it))
              for d in range(len(shape))]
    return const(linearize(b, coords, shape))


def emit_scatter(kb, inst, dests, lo, hi):
    b = kb.b
    n = len(inst.operands) // 2
    inputs, updates = inst.operands[:n], inst.operands[n + 1:]
    for x, dest in zip(inputs, dests):
        emit_loop(kb, [(x, [dest], None)], 0, x.shape.num_elements, flat=True)
    gen = kb.elemental()
    upd_dims = updates[0].shape.dims
    scatter_dims, window_dims = scatter_layout(inst)
    reducer = Reducer(gen, inst.attrs["to_apply"])
    with nest(b, [upd_dims[d] for d in scatter_dims], "s") as batch:
        gen.push_scope()
        starts, ok = scatter_start(gen, inst, batch)
        with b.if_then(ok):
            with nest(b, [upd_dims[d] for d in window_dims], "w") as wv:
                gen.push_scope()
                ucoords = placed(len(upd_dims), (scatter_dims, batch), (window_dims, wv))
                lin = scatter_position(b, inst, starts, wv)
                current = [load(b, dest.ptr, dest.et, lin) for dest in dests]
                new = [gen.value(u, Index(upd_dims, values=ucoords)) for u in updates]
                for dest, v in zip(dests, reducer(current, new)):
                    store(b, v, dest.ptr, dest.et, lin)
                gen.pop_scope()
        gen.pop_scope()


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
    _, work, _ = _plan_serial(inst)
    return math.prod(inst.operands[0].shape.dims[:_apart(inst)]), work, 0


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


register_phase("scatter", emit_scatter, _plan_serial)
register_phase("select-and-scatter", emit_select_and_scatter, _plan_select_and_scatter)
