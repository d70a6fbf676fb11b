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

from llvmlite import ir

from .elemental import Elemental, register
from .emit_kernel import emit_loop
from .emit_kernel import register as register_phase
from .emit_loops import Index, add, const, for_range, linearize, nest, placed
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


def emit_scatter(kb, inst, dests, lo, hi):
    b = kb.b
    n = len(inst.operands) // 2
    inputs, indices, updates = inst.operands[:n], inst.operands[n], inst.operands[n + 1:]
    for x, dest in zip(inputs, dests):
        emit_loop(kb, [(x, [dest], None)], 0, x.shape.num_elements, flat=True)
    gen = kb.elemental()
    a = inst.attrs
    ivd = a["index_vector_dim"]
    window_dims = list(a.get("update_window_dims", ()))
    inserted = set(a.get("inserted_window_dims", ())) | set(a.get("input_batching_dims", ()))
    shape = inputs[0].shape.dims
    upd_dims = updates[0].shape.dims
    scatter_dims = [d for d in range(len(upd_dims)) if d not in window_dims]
    sizes = iter(upd_dims[d] for d in window_dims)
    window = [1 if d in inserted else next(sizes) for d in range(len(shape))]
    reducer = Reducer(gen, a["to_apply"])
    with nest(b, [upd_dims[d] for d in scatter_dims], "s") as batch:
        gen.push_scope()
        starts: list = [0] * len(shape)
        ok = I1(1)
        for k, d in enumerate(a["scatter_dims_to_operand_dims"]):
            v, unsigned = _index_value(gen, indices, _vector_coords(batch, k, ivd, indices.shape.rank))
            starts[d] = v
        for od, idd in zip(a.get("input_batching_dims", ()), a.get("scatter_indices_batching_dims", ())):
            starts[od] = batch[idd - (idd > ivd)]
        for d in range(len(shape)):
            s = const(starts[d])
            fits = b.icmp_unsigned("<=", s, I64(shape[d] - window[d])) if shape[d] >= window[d] \
                else I1(0)
            ok = b.and_(ok, fits)
        with b.if_then(ok):
            with nest(b, [upd_dims[d] for d in window_dims], "w") as wv:
                gen.push_scope()
                ucoords = placed(len(upd_dims), (scatter_dims, batch), (window_dims, wv))
                it = iter(wv)
                ocoords = [starts[d] if d in inserted else add(b, starts[d], next(it))
                           for d in range(len(shape))]
                lin = const(linearize(b, ocoords, shape))
                current = [load(b, dest.ptr, dest.et, lin) for dest in dests]
                new = [gen.value(u, Index(upd_dims, values=ucoords)) for u in updates]
                for dest, v in zip(dests, reducer(current, new)):
                    store(b, v, dest.ptr, dest.et, lin)
                gen.pop_scope()
        gen.pop_scope()


# ----------------------------------------------------------------- select-and-scatter

def emit_select_and_scatter(kb, inst, dests, lo, hi):
    """Per source element: the window's element that `select` prefers (the first wins unless
    select(best, candidate) is false; padding never wins), then scatter onto it."""
    b = kb.b
    operand, source, init = inst.operands
    dest = dests[0]
    gen = kb.elemental()
    with for_range(b, 0, operand.shape.num_elements, "i") as i:
        store(b, gen.value(init, Index.scalar()), dest.ptr, dest.et, i)
    w = inst.attrs.get("window")
    rank = operand.shape.rank
    size = w.size if w else (1,) * rank
    stride = w.stride if w else (1,) * rank
    pad = w.pad if w else ((0, 0),) * rank
    dims = operand.shape.dims
    et = elem(operand.shape.element_type)
    best = gen.alloca(et.compute)
    best_at = gen.alloca(I64)
    have = gen.alloca(I1)
    select = inst.attrs["select"]
    scatter = Reducer(gen, inst.attrs["scatter"])
    with nest(b, list(source.shape.dims), "s") as svals:
        gen.push_scope()
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
                keep = gen.apply(select, [b.load(best, typ=et.compute), x])[0]
                take = b.or_(b.not_(had), b.not_(keep))
                b.store(b.select(take, x, b.load(best, typ=et.compute)), best)
                lin = const(linearize(b, coords, dims))
                b.store(b.select(take, lin, b.load(best_at, typ=I64)), best_at)
                b.store(I1(1), have)
            gen.pop_scope()
        with b.if_then(b.load(have, typ=I1)):
            at = b.load(best_at, typ=I64)
            s = gen.value(source, Index(source.shape.dims, values=svals))
            current = load(b, dest.ptr, dest.et, at)
            store(b, scatter([current], [s])[0], dest.ptr, dest.et, at)
        gen.pop_scope()


register_phase("scatter", emit_scatter, _plan_serial)
register_phase("select-and-scatter", emit_select_and_scatter, _plan_serial)
