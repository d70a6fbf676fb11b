"""GPU row reductions: one thread block per output row, combined through warp shuffles and
shared memory.

A kernel whose reduces all reduce the minor-most dimensions of one input shape (a layer
norm's row sums, a softmax's max and then sum, a reduce to a scalar), whose other outputs
read their results at or along the row (`row_reduce`), runs as blocks of ROW_THREADS
threads, each block taking rows `ctaid.x, ctaid.x + nctaid.x, ...`. For one row, for each
reduce in turn:

1. thread t folds elements t, t + ROW_THREADS, ... of the row into its accumulators,
   starting from the init values (read through the shared elemental code, so fused
   producers, and earlier reduces' results, are computed inline);
2. each warp combines its 32 accumulators by butterfly shuffles (`shfl.sync.bfly`), after
   which lane 0 holds the warp's value and writes it to shared memory;
3. after a barrier, warp 0 combines the WARPS values the same way and lane 0 rounds the
   result and writes it to shared memory, which every thread reads after a second barrier.

Then thread 0 stores the results and the epilogue, and the block the row outputs. Every
write to shared memory in the next row comes after a barrier that this row's readers of
that memory have passed, so a row ends without one.

The fold and every combination apply the reducer as the CPU does (`emit_reduce.Reducer`:
single-op reducers as the op with narrow floats accumulated in f32, any other computation
inlined), but in a tree rather than in order, and each thread starts from the init value:
like XLA's GPU backend, this relies on the reducer being associative and commutative and
the init value being its identity, as the reduce semantics allow."""
from __future__ import annotations

import math

from llvmlite import ir

from ..ops import is_elementwise
from .elemental import Elemental
from .emit_kernel import store_outputs
from .emit_loops import Index
from .emit_reduce import Reducer, read_slots, reduce_operands, stack_slots, write_slots
from .gpu_frame import barrier, shared_array, shared_slot
from .gpu_loops import special, strided
from .intrinsics import declare
from .ltypes import I32, I64

ROW_THREADS = 256                 # threads per block of a row reduction
WARP = 32
WARPS = ROW_THREADS // WARP
FULL_MASK = -1                    # every lane of the warp takes part in the shuffle


def row_reduce(comp, phases_, outputs):
    """(reduces, row outputs) of a row-reduce kernel, else None: the kernel's reduces all
    reduce the minor-most dimensions of one input shape, a later one possibly reading an
    earlier one's result broadcast along the row (a softmax's max, then its sum of
    exp(x - max)); its other outputs are an epilogue, elementwise functions of the results
    at the same output position (a mean, the rsqrt of a variance), which thread 0 computes,
    or row outputs: elementwise functions over the input shape that read the results
    broadcast along the row (x - max, x / sum), which the block computes last."""
    reduces = [p.root for p in phases_ if p.root.opcode == "reduce"]
    if not reduces or len({(r.operands[0].shape.dims, _row_shape(r).dims)
                           for r in reduces}) != 1:
        return None
    for inst in reduces:
        rank = inst.operands[0].shape.rank
        reduced = sorted(inst.attrs["dimensions"])
        if not reduced or reduced != list(range(rank - len(reduced), rank)):
            return None
    readers = _row_readers(comp, reduces)
    if readers is None or not all(id(o) in readers for o in outputs):
        return None
    return reduces, [o for o in outputs if readers[id(o)] == "row"]


def _row_readers(comp, reduces) -> dict | None:
    """id -> "at" for the reduces and what reads their results at the output's own position
    (elementwise ops, get-tuple-element), "row" for what reads them broadcast along the row
    (a broadcast over the reduced dimensions, then elementwise ops); None if something
    reads them otherwise (or a reduce's init value depends on one)."""
    kept = _row_shape(reduces[0]).dims
    whole = reduces[0].operands[0].shape.dims
    kinds: dict[int, str] = {}
    is_reduce = {id(r) for r in reduces}
    for x in comp.post_order():
        read = {kinds[id(o)] for o in x.operands if id(o) in kinds}
        if id(x) in is_reduce:
            inputs, inits = reduce_operands(x)
            if read - {"row"} or any(id(i) in kinds for i in inits):
                return None
            kinds[id(x)] = "at"
            continue
        if not read or (x is comp.root and x.opcode == "tuple"):
            continue
        per_element = is_elementwise(x.opcode) or x.opcode == "get-tuple-element"
        if read == {"at"} and per_element and not x.shape.is_tuple and x.shape.dims == kept:
            kinds[id(x)] = "at"
        elif read == {"at"} and x.opcode == "broadcast" and x.shape.dims == whole and \
                list(x.attrs.get("dimensions", ())) == list(range(len(kept))):
            kinds[id(x)] = "row"
        elif read == {"row"} and per_element and x.shape.dims == whole:
            kinds[id(x)] = "row"
        else:
            return None
    return kinds


def _row_shape(inst):
    return inst.shape.leaves()[0] if inst.shape.is_tuple else inst.shape


def rows_of(inst) -> tuple[int, int]:
    """(output rows, elements per row) of a row reduce."""
    in_dims = inst.operands[0].shape.dims
    length = math.prod(in_dims[d] for d in inst.attrs["dimensions"])
    return _row_shape(inst).num_elements, length


def emit_rows(gen: Elemental, reduces: list, row_outputs: list, stores: list) -> None:
    """The body of a row-reduce kernel: per row, each reduce's result in turn (shared with
    the whole block, bound for what reads it), then each output (root, dests): thread 0
    stores the reduces' leaves and the epilogue, the block the `row_outputs`."""
    b = gen.b
    rows, length = rows_of(reduces[0])
    tid = special(b, "tid.x")
    with strided(b, special(b, "ctaid.x"), special(b, "nctaid.x"), rows) as row:
        for inst in reduces:
            total = _row_result(gen, inst, row, tid)
            gen.bindings[id(inst)] = total if inst.shape.is_tuple else total[0]
        with b.if_then(b.icmp_unsigned("==", tid, I64(0))):
            store_outputs(gen, [(o, dests, None) for o, dests in stores
                                if all(o is not r for r in row_outputs)],
                          Index(_row_shape(reduces[0]).dims, linear=row), row)
        if row_outputs:
            in_dims = reduces[0].operands[0].shape.dims
            with strided(b, tid, I64(ROW_THREADS), length) as j:
                at = b.add(b.mul(row, I64(length)), j)
                store_outputs(gen, [(o, dests, None) for o, dests in stores
                                    if any(o is r for r in row_outputs)],
                              Index(in_dims, linear=at), at)
        for inst in reduces:
            del gen.bindings[id(inst)]


def _row_result(gen: Elemental, inst, row, tid) -> list:
    """Reduce `inst`'s result for `row`, in every thread of the block: strided folds,
    warp butterflies, warp values through shared memory, warp 0's butterfly, and lane 0's
    result through shared memory, each hand-over behind a barrier."""
    b = gen.b
    inputs, inits = reduce_operands(inst)
    in_dims = inputs[0].shape.dims
    _, length = rows_of(inst)
    reducer = Reducer(gen, inst.attrs["to_apply"])
    init = [gen.value(i, Index.scalar()) for i in inits]
    slots = stack_slots(gen, init)                     # set to the init values per row
    shared = [[shared_array(b.module, p.type, WARPS, "warp_values") for p in _parts(v)]
              for v in init]
    result_like = reducer.finish(init)                 # the row's result: its types
    result = [[shared_array(b.module, p.type, 1, "row_result") for p in _parts(v)]
              for v in result_like]
    lane, warp = b.urem(tid, I64(WARP)), b.udiv(tid, I64(WARP))
    with strided(b, tid, I64(ROW_THREADS), length) as j:
        gen.push_scope()
        index = Index(in_dims, linear=b.add(b.mul(row, I64(length)), j))
        xs = [gen.value(x, index) for x in inputs]
        write_slots(gen, slots, reducer(read_slots(gen, slots), xs))
        gen.pop_scope()
    warp_value = _combine(b, reducer, read_slots(gen, slots), WARP)
    with b.if_then(b.icmp_unsigned("==", lane, I64(0))):
        _store_parts(b, shared, warp_value, warp)
    barrier(b)
    with b.if_then(b.icmp_unsigned("==", warp, I64(0))):
        mine = _load_parts(b, shared, init, b.urem(lane, I64(WARPS)))
        total = reducer.finish(_combine(b, reducer, mine, WARPS))
        with b.if_then(b.icmp_unsigned("==", lane, I64(0))):
            _store_parts(b, result, total, I64(0))
    barrier(b)
    return _load_parts(b, result, result_like, I64(0))


def _combine(b, reducer, values: list, lanes: int) -> list:
    """Butterfly over `lanes` lanes: afterwards lane 0 (and every lane) holds the reducer
    applied over the values of lanes 0..lanes-1."""
    offset = lanes // 2
    while offset:
        others = [_rebuild(v, [_shuffle(b, p, offset) for p in _parts(v)]) for v in values]
        values = reducer(values, others)
        offset //= 2
    return values


def _parts(v) -> list:
    """A value's scalar registers (a complex value is a pair)."""
    return list(v) if isinstance(v, tuple) else [v]


def _rebuild(like, parts: list):
    return tuple(parts) if isinstance(like, tuple) else parts[0]


def _bits(t: ir.Type) -> int:
    if isinstance(t, ir.IntType):
        return t.width
    return {ir.HalfType: 16, ir.FloatType: 32, ir.DoubleType: 64}[type(t)]


def _shuffle(b, v, offset: int):
    """`v` of the lane whose number differs in bit `offset`, moved as 32-bit pieces
    (shfl.sync moves one i32 per call)."""
    shfl = declare(b.module, "llvm.nvvm.shfl.sync.bfly.i32", I32, [I32, I32, I32, I32])
    bits = _bits(v.type)
    as_int = v if isinstance(v.type, ir.IntType) else b.bitcast(v, ir.IntType(bits))
    pieces = -(-bits // 32)
    wide = ir.IntType(32 * pieces)
    x = b.zext(as_int, wide) if bits < 32 * pieces else as_int
    out = None
    for k in range(pieces):
        piece = b.trunc(b.lshr(x, wide(32 * k)), I32) if pieces > 1 else x
        moved = b.call(shfl, [I32(FULL_MASK), piece, I32(offset), I32(WARP - 1)])
        moved = b.shl(b.zext(moved, wide), wide(32 * k)) if pieces > 1 else moved
        out = moved if out is None else b.or_(out, moved)
    out = b.trunc(out, ir.IntType(bits)) if bits < 32 * pieces else out
    return out if isinstance(v.type, ir.IntType) else b.bitcast(out, v.type)


def _store_parts(b, shared, values, i) -> None:
    for arrays, v in zip(shared, values):
        for a, p in zip(arrays, _parts(v)):
            b.store(p, shared_slot(b, a, i))


def _load_parts(b, shared, like, i) -> list:
    return [_rebuild(v, [b.load(shared_slot(b, a, i), typ=a.value_type.element)
                         for a in arrays]) for arrays, v in zip(shared, like)]
