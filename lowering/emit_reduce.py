"""reduce and reduce-window: loops with the reducer computation inlined.

An associative single-op reducer (add, multiply, maximum, minimum, and, or, xor; one per
output for variadic reduces) is emitted as that op directly: narrow floats then accumulate in
f32 and round once at the end (as the interpreter and XLA's CPU backend do), and float add
and multiply carry the `reassoc` flag so the loop vectorizer may split the sum into vector
lanes (XLA leaves the order of a reduction unspecified). Any other reducer is inlined as its
computation, in its own types, in order.

Two loop structures for a stored reduce:
* row: the input's minor-most dimension is reduced. One output element at a time, the
  reduction loop innermost over contiguous input (vectorized by LLVM).
* column: the minor dimensions are kept. A tile of up to COLUMN_TILE adjacent outputs keeps
  its accumulators in a stack array; the loop over the reduced dimensions is outside, the
  loop over the tile inside, so every input row is read contiguously.
Sibling reduces of one step (same input dimensions and reduced dimensions) share these loops,
reading their common inputs once; a stored reduce also stores its tees (Phase.tees: a result
that is its input) where it reads them. A reduce inside a fused expression (e.g. reduce then
an elementwise op at the same index) is computed at its index with the row structure.

reduce-window folds the window of one output at a time, padding skipped by loop bounds. A
stored reduce-window whose window leaves a minor run alone (a pool over NHWC, a cumulative
op down the columns) uses the column structure instead: window rows folded into tiles. One
whose window spans a whole dimension from one side (cumsum, cumprod, cummax) is a running
fold instead: each output is its neighbour's folded with one more element, O(n) not O(n^2).
"""
from __future__ import annotations

import math
from contextlib import ExitStack, contextmanager

from llvmlite import ir

from ..ops import ASSOCIATIVE
from . import emit_elementwise
from .elemental import Elemental, register
from .emit_kernel import emit_loop, plan_loop
from .emit_kernel import register as register_phase
from .emit_loops import Index, add, clamp, const, delinearize, for_range, mul, nest, placed, sub
from .ltypes import I64, elem, round_to, store

COLUMN_TILE = 256                 # outputs per column tile (1 KiB of f32 accumulators)


def simple_reducer(comp) -> list | None:
    """Per output i, the root op of `op(p_i, p_{n+i})` if the reducer is only that; else
    None (then the computation is inlined as written)."""
    params = comp.parameters
    n = len(params) // 2
    roots = comp.root.operands if comp.root.opcode == "tuple" else [comp.root]
    if len(params) % 2 or len(roots) != n:
        return None
    for i, r in enumerate(roots):
        if r.opcode not in ASSOCIATIVE or len(r.operands) != 2 or \
                {id(o) for o in r.operands} != {id(params[i]), id(params[n + i])} or \
                r.shape.element_type != params[i].shape.element_type:
            return None
    return roots


class Reducer:
    """Applies a reduce's computation to accumulator and element values."""

    def __init__(self, gen: Elemental, comp):
        self.gen, self.comp = gen, comp
        self.ops = simple_reducer(comp)
        self.types = [elem(p.shape.element_type) for p in comp.parameters[:len(comp.parameters) // 2]]

    def __call__(self, accs: list, xs: list) -> list:
        b = self.gen.b
        if self.ops is None:
            return self.gen.apply(self.comp, accs + xs)
        out = []
        for op, acc, x in zip(self.ops, accs, xs):
            v = emit_elementwise.emit(b, op, [acc, x], rounded=False)
            if isinstance(v, ir.Instruction) and v.opname in ("fadd", "fmul"):
                v.flags.append("reassoc")
            out.append(v)
        return out

    def finish(self, accs: list) -> list:
        """Round narrow-float accumulators of a single-op reducer once, at the end."""
        if self.ops is None:
            return accs
        return [round_to(self.gen.b, a, t) for a, t in zip(accs, self.types)]


def stack_slots(gen: Elemental, values: list) -> list:
    """Stack slots holding accumulators (a complex value takes two)."""
    slots = []
    for v in values:
        parts = v if isinstance(v, tuple) else (v,)
        ss = [gen.alloca(p.type) for p in parts]
        for s, p in zip(ss, parts):
            gen.b.store(p, s)
        slots.append(ss)
    return slots


def read_slots(gen: Elemental, slots) -> list:
    vals = []
    for ss in slots:
        parts = [gen.b.load(s, typ=s.allocated_type) for s in ss]
        vals.append(tuple(parts) if len(parts) > 1 else parts[0])
    return vals


def write_slots(gen: Elemental, slots, values) -> None:
    for ss, v in zip(slots, values):
        for s, p in zip(ss, v if isinstance(v, tuple) else (v,)):
            gen.b.store(p, s)


def reduce_operands(inst):
    n = len(inst.operands) // 2
    return inst.operands[:n], inst.operands[n:]


def reduce_value(gen: Elemental, inst, index: Index):
    """The reduce's output(s) at `index`: a loop over the reduced dimensions."""
    return reduce_values(gen, [inst], index)[0]


def reduce_values(gen: Elemental, insts: list, index: Index, read=None) -> list:
    """The outputs at `index` of reduces over the same input index space and dimensions
    (siblings: one loop reads the inputs they share once). `read(idx)` runs where the loop
    has read the inputs at input index idx (a stored phase stores its tees there)."""
    b = gen.b
    first = insts[0]
    reduced = sorted(first.attrs["dimensions"])
    in_dims = reduce_operands(first)[0][0].shape.dims
    kept = [d for d in range(len(in_dims)) if d not in reduced]
    reducers = [Reducer(gen, inst.attrs["to_apply"]) for inst in insts]
    slots = [stack_slots(gen, [gen.value(i, Index.scalar()) for i in reduce_operands(inst)[1]])
             for inst in insts]
    outs = index.values(b)
    with nest(b, [in_dims[d] for d in reduced], "r") as rvals:
        gen.push_scope()
        idx = Index(in_dims, values=placed(len(in_dims), (kept, outs), (reduced, rvals)))
        xs = [[gen.value(x, idx) for x in reduce_operands(inst)[0]] for inst in insts]
        if read:
            read(idx)
        for reducer, ss, x in zip(reducers, slots, xs):
            write_slots(gen, ss, reducer(read_slots(gen, ss), x))
        gen.pop_scope()
    results = [reducer.finish(read_slots(gen, ss)) for reducer, ss in zip(reducers, slots)]
    return [r if inst.shape.is_tuple else r[0] for inst, r in zip(insts, results)]


# ----------------------------------------------------------------- stored reduce phase

def _column_layout(inst):
    """(outer kept dims, reduced dims, tile run T) if the column structure applies."""
    inputs, _ = reduce_operands(inst)
    in_dims = inputs[0].shape.dims
    reduced = sorted(inst.attrs["dimensions"])
    if not reduced or not in_dims:
        return None
    run = math.prod(in_dims[reduced[-1] + 1:])
    if run < 8 or _has_complex(inst):
        return None
    outer = [d for d in range(reduced[-1]) if d not in reduced]
    return outer, reduced, run


def plan_reduce(inst):
    inputs, _ = reduce_operands(inst)
    work = float(inputs[0].shape.num_elements * len(inputs))
    layout = _column_layout(inst)
    out_elems = max(1, math.prod(inst.shape.leaves()[0].dims if inst.shape.is_tuple
                                 else inst.shape.dims))
    if layout is None:
        return out_elems, work, 0
    outer, _, run = layout
    in_dims = inputs[0].shape.dims
    return math.prod(in_dims[d] for d in outer) * -(-run // COLUMN_TILE), work, 0


def same_loops(a, b) -> bool:
    """Do reduces a and b run the same loops (input dims, reduced dimensions, structure),
    so that one loop nest can compute both (emit_kernel.plan_steps)?"""
    return reduce_operands(a)[0][0].shape.dims == reduce_operands(b)[0][0].shape.dims and \
        sorted(a.attrs["dimensions"]) == sorted(b.attrs["dimensions"]) and \
        _column_layout(a) == _column_layout(b) and \
        simple_reducer(a.attrs["to_apply"]) is not None and \
        simple_reducer(b.attrs["to_apply"]) is not None


def emit_reduce(kb, inst, dests, lo, hi):
    """A stored reduce and its siblings in the step (kb.siblings, same_loops): one loop
    nest computes them all."""
    group = [(inst, dests)] + kb.siblings
    layout = _column_layout(inst)
    if layout is None:
        _emit_rows(kb, group, lo, hi)
    else:
        _emit_columns(kb, group, lo, hi, *layout)


def _emit_rows(kb, group, lo, hi):
    b = kb.b
    gen = kb.elemental()
    out_dims = group[0][1][0].dims
    with for_range(b, lo, hi, "o", vectorize=False) as i:
        gen.push_scope()
        values = reduce_values(gen, [inst for inst, _ in group], Index(out_dims, linear=i),
                               lambda idx: kb.store_tees(gen, idx))
        for (inst, dests), v in zip(group, values):
            for dest, x in zip(dests, v if inst.shape.is_tuple else [v]):
                dest.store(b, x, i)
        gen.pop_scope()


def _emit_columns(kb, group, lo, hi, outer, reduced, run):
    """Tiles of adjacent outputs along the kept minor run, folding every input row of the
    reduced dimensions into them."""
    in_dims = reduce_operands(group[0][0])[0][0].shape.dims

    @contextmanager
    def rows(b, outer_vals):
        with nest(b, [in_dims[d] for d in reduced], "r") as rvals:
            yield placed(reduced[-1] + 1, (outer, outer_vals), (reduced, rvals))
    _emit_tiles(kb, group, lo, hi, [in_dims[d] for d in outer], run, rows)


def _emit_tiles(kb, group, lo, hi, outer_dims, run, rows):
    """Tiles of up to COLUMN_TILE adjacent outputs along a contiguous run of `run`
    elements, one tile per (outer index, part of the run), for each (reduce or
    reduce-window, dests) of `group` (siblings over one input index space); accumulators in
    stack arrays. `rows(b, outer coordinates)` loops over the input rows folded into the
    tile and yields the coordinates of a row's leading dimensions; the loop over the tile is
    innermost, so each row is read contiguously and the tile's independent folds
    vectorize."""
    b = kb.b
    gen = kb.elemental()
    in_dims = reduce_operands(group[0][0])[0][0].shape.dims
    tile = min(run, COLUMN_TILE)
    tiles = -(-run // tile)
    folds = []                  # (inputs, reducer, initial values, accumulators, dests)
    for inst, dests in group:
        inputs, inits = reduce_operands(inst)
        init_values = [gen.value(i, Index.scalar()) for i in inits]
        folds.append((inputs, Reducer(gen, inst.attrs["to_apply"]), init_values,
                      [gen.alloca(ir.ArrayType(v.type, tile)) for v in init_values], dests))
    with for_range(b, lo, hi, "tile", vectorize=False) as t:
        o = b.udiv(t, I64(tiles))
        start = b.mul(b.urem(t, I64(tiles)), I64(tile))
        width = b.select(b.icmp_signed("<", b.add(start, I64(tile)), I64(run)), I64(tile),
                         b.sub(I64(run), start))
        with for_range(b, 0, width, "w") as w:
            for _, _, init_values, accs, _ in folds:
                for acc, v in zip(accs, init_values):
                    b.store(v, _at(b, acc, w))
        with rows(b, delinearize(b, o, outer_dims)) as leading:
            with for_range(b, 0, width, "w") as w:
                gen.push_scope()
                minor = delinearize(b, b.add(start, w), in_dims[len(leading):])
                idx = Index(in_dims, values=list(leading) + minor)
                xs = [[gen.value(x, idx) for x in inputs] for inputs, *_ in folds]
                kb.store_tees(gen, idx)
                for (_, reducer, _, accs, _), x in zip(folds, xs):
                    current = [b.load(_at(b, acc, w), typ=acc.allocated_type.element)
                               for acc in accs]
                    for acc, v in zip(accs, reducer(current, x)):
                        b.store(v, _at(b, acc, w))
                gen.pop_scope()
        base = b.add(b.mul(o, I64(run)), start)
        with for_range(b, 0, width, "w") as w:
            for _, reducer, _, accs, dests in folds:
                values = reducer.finish([b.load(_at(b, acc, w), typ=acc.allocated_type.element)
                                         for acc in accs])
                for dest, v in zip(dests, values):
                    dest.store(b, v, b.add(base, w))


def _at(b, array, i):
    return b.gep(array, [I64(0), i], inbounds=True)


# ------------------------------------------------------------------------ reduce-window

def reduce_window_value(gen: Elemental, inst, index: Index):
    """Fold the window at `index` in row-major order. Padding is skipped by the loop bounds
    (no test per position: a window along a row is a plain loop that vectorizes); the
    holes of base (lhs) dilation by a test per position."""
    b = gen.b
    inputs, inits = reduce_operands(inst)
    in_dims = inputs[0].shape.dims
    window = inst.attrs.get("window")
    rank = len(in_dims)
    size = window.size if window else (1,) * rank
    stride = window.stride if window else (1,) * rank
    pad = window.pad if window else ((0, 0),) * rank
    base = window.lhs_dilate if window else (1,) * rank
    dil = window.rhs_dilate if window else (1,) * rank
    reducer = Reducer(gen, inst.attrs["to_apply"])
    slots = stack_slots(gen, [gen.value(i, Index.scalar()) for i in inits])
    outs = index.values(b)
    spans = [_window_span(b, outs[d], stride[d], dil[d], pad[d], size[d], in_dims[d])
             if base[d] == 1 else (0, size[d]) for d in range(rank)]
    with _span_nest(b, spans, "k") as ks:
        gen.push_scope()
        ok, coords = None, []
        for d in range(rank):
            pos = sub(b, add(b, mul(b, outs[d], stride[d]), mul(b, ks[d], dil[d])), pad[d][0])
            if base[d] > 1:
                pos = const(pos)
                good = b.and_(b.icmp_signed(">=", pos, I64(0)),
                              b.icmp_signed("==", b.srem(pos, I64(base[d])), I64(0)))
                pos = b.sdiv(pos, I64(base[d]))
                good = b.and_(good, b.icmp_signed("<", pos, I64(in_dims[d])))
                ok = good if ok is None else b.and_(ok, good)
                pos = b.select(good, pos, I64(0))
            coords.append(pos)
        if ok is None:
            _fold(gen, reducer, slots, inputs, Index(in_dims, values=coords))
        else:
            with b.if_then(ok):
                _fold(gen, reducer, slots, inputs, Index(in_dims, values=coords))
        gen.pop_scope()
    result = reducer.finish(read_slots(gen, slots))
    return result if inst.shape.is_tuple else result[0]


def _fold(gen: Elemental, reducer, slots, inputs, index: Index) -> None:
    xs = [gen.value(x, index) for x in inputs]
    write_slots(gen, slots, reducer(read_slots(gen, slots), xs))


def _window_span(b, o, stride: int, dil: int, pad, size: int, n: int):
    """[k_lo, k_hi): the window positions k < size whose input position
    o * stride + k * dil - pad_lo lies in [0, n). Without padding all of them do."""
    if pad == (0, 0):
        return 0, size
    start = sub(b, mul(b, o, stride), pad[0])
    return (clamp(b, _ceil_div(b, sub(b, 0, start), dil), 0, size),
            clamp(b, _ceil_div(b, sub(b, n, start), dil), 0, size))


def _ceil_div(b, x, d: int):
    """x / d rounded up for x > 0; some value <= 0 for x <= 0 (callers clamp at 0)."""
    if isinstance(x, int):
        return -(-x // d)
    return x if d == 1 else b.sdiv(b.add(x, I64(d - 1)), I64(d))


@contextmanager
def _span_nest(b, spans, name: str):
    """Nested loops over [lo, hi) per dimension, outermost first (see emit_loops.nest);
    yields the coordinates."""
    values: list = []
    last = max((d for d, (lo, hi) in enumerate(spans) if not _single(lo, hi)), default=-1)
    with ExitStack() as stack:
        for d, (lo, hi) in enumerate(spans):
            if _single(lo, hi):
                values.append(lo)
            else:
                values.append(stack.enter_context(
                    for_range(b, lo, hi, f"{name}{d}", vectorize=d == last)))
        yield values


def _single(lo, hi) -> bool:
    return isinstance(lo, int) and isinstance(hi, int) and hi - lo == 1


# ----------------------------------------------------------- stored reduce-window phase

def _window_layout(inst):
    """(m, run) when the window leaves the dimensions from m on alone (size 1, stride 1,
    no padding or dilation) and they hold a run of at least 8 elements: a window over
    rows (a cumulative max down the columns, a pool over NHWC) then folds whole input rows
    into tiles of adjacent outputs, as a column reduce does, instead of one output at a
    time down a strided column."""
    window = inst.attrs.get("window")
    in_dims = reduce_operands(inst)[0][0].shape.dims
    if window is None or any(x != 1 for x in window.lhs_dilate) or _has_complex(inst):
        return None
    m = len(in_dims)
    while m and (window.size[m - 1], window.stride[m - 1], window.pad[m - 1],
                 window.rhs_dilate[m - 1]) == (1, 1, (0, 0), 1):
        m -= 1
    run = math.prod(in_dims[m:])
    return (m, run) if m and run >= 8 else None


def _has_complex(inst) -> bool:
    leaves = inst.shape.leaves() if inst.shape.is_tuple else [inst.shape]
    return any(elem(s.element_type).kind == "complex" for s in leaves)


def plan_reduce_window(inst):
    """(extent, work, scratch): tiles of a running fold, or of the row structure, else
    emit_loop's plan."""
    scan = _scan_layout(inst)
    if scan is not None:
        dims = reduce_operands(inst)[0][0].shape.dims
        rows, _, chunks = _scan_tiles(dims, scan[0])
        work = float(math.prod(dims) * len(reduce_operands(inst)[0]))
        return -(-math.prod(dims[:scan[0]]) // rows) * chunks, work, 0
    layout = _window_layout(inst)
    if layout is None:
        return plan_loop([inst], set())
    m, run = layout
    out_dims = inst.shape.leaves()[0].dims if inst.shape.is_tuple else inst.shape.dims
    work = float(math.prod(out_dims) * math.prod(inst.attrs["window"].size))
    return math.prod(out_dims[:m]) * -(-run // COLUMN_TILE), work, 0


def emit_reduce_window(kb, inst, dests, lo, hi):
    """A stored reduce-window: a running fold (see _scan_layout), tiles of outputs (see
    _window_layout), else one output at a time in the loop over its index space
    (reduce_window_value)."""
    scan = _scan_layout(inst)
    if scan is not None:
        _emit_scan(kb, inst, dests, lo, hi, *scan)
        return
    layout = _window_layout(inst)
    if layout is None:
        emit_loop(kb, [(inst, dests, None)], lo, hi)
        return
    m, run = layout
    win = inst.attrs["window"]
    in_dims = reduce_operands(inst)[0][0].shape.dims

    @contextmanager
    def rows(b, outs):
        spans = [_window_span(b, outs[d], win.stride[d], win.rhs_dilate[d], win.pad[d],
                              win.size[d], in_dims[d]) for d in range(m)]
        with _span_nest(b, spans, "k") as ks:
            yield [sub(b, add(b, mul(b, outs[d], win.stride[d]),
                              mul(b, ks[d], win.rhs_dilate[d])), win.pad[d][0])
                   for d in range(m)]
    out_dims = dests[0].dims
    _emit_tiles(kb, [(inst, dests)], lo, hi, out_dims[:m], run, rows)


# Most rows folded side by side when the scanned dimension is (nearly) the minor one:
# independent accumulator chains (in registers) hide the reducer's latency; few enough that
# the rows' cache lines (often a power-of-two stride apart) stay within one L1 set's ways.
SCAN_ROWS = 8


def _scan_layout(inst):
    """(d, reverse) when the reduce-window is a running fold along dimension d: the window
    is 1 in every other dimension, and along d (stride 1, no dilation) it spans the whole
    dimension with the padding on one side: size - 1 low and none high (a cumulative sum,
    product, max, ...: output i folds inputs 0..i) or, `reverse`, the mirror image (inputs
    i..n-1). Output i is then output i - 1 (i + 1) folded with input i: O(n), not
    O(n * size). Folding forwards is the window's own order (the same rounding); reverse
    folds i..n-1 from the end, a different order of the same terms. Single-op reducers
    only: associative and commutative."""
    window = inst.attrs.get("window")
    if window is None or simple_reducer(inst.attrs["to_apply"]) is None or _has_complex(inst):
        return None
    in_dims = reduce_operands(inst)[0][0].shape.dims
    scanned = [d for d in range(len(in_dims)) if (window.size[d], window.pad[d]) != (1, (0, 0))]
    if len(scanned) != 1 or any(x != 1 for x in window.stride + window.lhs_dilate
                                + window.rhs_dilate):
        return None
    d = scanned[0]
    size = window.size[d]
    if size < in_dims[d] or window.pad[d] not in ((size - 1, 0), (0, size - 1)):
        return None
    return d, window.pad[d] == (0, size - 1)


def _scan_tiles(dims, d: int) -> tuple[int, int, int]:
    """(rows, width, chunks) of one tile of a running fold along d: `rows` indices of the
    dimensions before d, times `width` adjacent elements of the run after it; `chunks`
    tiles cover a run. A run of 8 or more is split into chunks of up to COLUMN_TILE (the
    folds along it vectorize); a shorter one is whole, with up to SCAN_ROWS rows: the most
    that divides the rows, so every tile has as many and its loop over them unrolls."""
    run = math.prod(dims[d + 1:])
    if run >= 8:
        width = min(run, COLUMN_TILE)
        return 1, width, -(-run // width)
    outer = math.prod(dims[:d])
    return max(r for r in range(1, SCAN_ROWS + 1) if outer % r == 0), run, 1


def _emit_scan(kb, inst, dests, lo, hi, d: int, reverse: bool):
    """Tiles [lo, hi) of a running fold along dimension d (see _scan_layout, _scan_tiles):
    a tile's accumulators start at the initial value and step along d together, each
    step folding in one input element per lane and storing the lane's output."""
    b, gen = kb.b, kb.elemental()
    inputs, inits = reduce_operands(inst)
    dims = inputs[0].shape.dims
    n, run = dims[d], math.prod(dims[d + 1:])
    rows, width, chunks = _scan_tiles(dims, d)
    reducer = Reducer(gen, inst.attrs["to_apply"])
    init_values = [gen.value(i, Index.scalar()) for i in inits]
    accs = [gen.alloca(ir.ArrayType(v.type, rows * width)) for v in init_values]
    with for_range(b, lo, hi, "tile", vectorize=False) as t:
        first = b.mul(b.udiv(t, I64(chunks)), I64(rows))
        start = b.mul(b.urem(t, I64(chunks)), I64(width))
        span = run if width == run else b.select(
            b.icmp_signed("<", b.add(start, I64(width)), I64(run)), I64(width),
            b.sub(I64(run), start))
        with for_range(b, 0, rows * width, "lane") as lane:
            for acc, v in zip(accs, init_values):
                b.store(v, _at(b, acc, lane))
        with for_range(b, 0, n, "k", vectorize=False) as k:
            pos = b.sub(I64(n - 1), k) if reverse else k
            with for_range(b, 0, rows, "g", vectorize=False) as g:
                o = add(b, first, g)
                with for_range(b, 0, span, "w") as w:
                    gen.push_scope()
                    inner = add(b, start, w)
                    lane = add(b, mul(b, g, width), w)
                    at = add(b, mul(b, add(b, mul(b, o, n), pos), run), inner)
                    index = Index(dims, linear=at, make_values=lambda o=o, pos=pos, inner=inner:
                                  delinearize(b, o, dims[:d]) + [pos]
                                  + delinearize(b, inner, dims[d + 1:]))
                    xs = [gen.value(x, index) for x in inputs]
                    current = [b.load(_at(b, acc, const(lane)), typ=acc.allocated_type.element)
                               for acc in accs]
                    new = reducer(current, xs)
                    for acc, v in zip(accs, new):
                        b.store(v, _at(b, acc, const(lane)))
                    for dest, v in zip(dests, reducer.finish(new)):
                        store(b, v, dest.ptr, dest.et, const(at))
                    gen.pop_scope()


register({"reduce": reduce_value, "reduce-window": reduce_window_value})
register_phase("reduce", emit_reduce, plan_reduce, same_loops)
register_phase("reduce-window", emit_reduce_window, plan_reduce_window)
