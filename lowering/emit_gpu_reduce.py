"""GPU row reductions: a thread block per output row, combined through warp shuffles and
shared memory; a group of a warp's lanes per row for short rows.

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
3. after a barrier, warp 0 combines the warp values the same way and lane 0 rounds the
   result and writes it to shared memory, which every thread reads after a second barrier.

Then thread 0 stores the results and the epilogue, and the block the row outputs. Every
write to shared memory in the next row comes after a barrier that this row's readers of
that memory have passed, so a row ends without one.

A row shorter than ROW_THREADS would leave most of a block idle: it gets a group of
`lanes` lanes instead (the power of two covering it, at most a warp), several rows per
block, and the butterfly within the group leaves the result in every lane of the group:
no shared memory, no barrier. Few long rows are split over several blocks
(emit_gpu_split.py).

The fold and every combination apply the reducer as the CPU does (`emit_reduce.Reducer`:
single-op reducers as the op with narrow floats accumulated in f32, any other computation
inlined), but in a tree rather than in order, and each thread starts from the init value:
like XLA's GPU backend, this relies on the reducer being associative and commutative and
the init value being its identity, as the reduce semantics allow."""
from __future__ import annotations

import math

from ..ops import is_elementwise
from .elemental import Elemental
from .emit_kernel import store_outputs
from .emit_loops import Index
from .emit_reduce import Reducer, read_slots, reduce_operands, stack_slots, write_slots
from .gpu_combine import (WARP, barrier, block_combine, combine, load_parts, shared_like,
                          store_parts)
from .emit_loops import add, mul, udiv, urem
from .gpu_loops import Schedule, special, strided, vector_width
from .ltypes import I64

ROW_THREADS = 256                 # threads per block of a row reduction


def row_reduce(comp, phases_, outputs):
    """(reduces, output kinds) of a row-reduce kernel, else None: the kernel's reduces all
    reduce the same minor-most dimensions of one input shape (and possibly the major-most
    ones: `row_layout`), a later one possibly reading an earlier one's result broadcast
    along the row (a softmax's max, then its sum of exp(x - max)); its other outputs are
    an epilogue, elementwise functions of the results at the same output position (a
    mean, the rsqrt of a variance), which thread 0 computes, row outputs: elementwise
    functions over the input shape that read the results broadcast along the row (x - max,
    x / sum), which the block computes last, or side outputs of the input shape reading no
    result (`output_kinds`)."""
    reduces = [p.root for p in phases_ if p.root.opcode == "reduce"]
    if not reduces or len({(r.operands[0].shape.dims, tuple(sorted(r.attrs["dimensions"])))
                           for r in reduces}) != 1 or row_layout(reduces[0]) is None:
        return None
    kinds = output_kinds(comp, reduces, outputs)
    if kinds is None or (row_layout(reduces[0])[0] > 1 and
                         "row" in result_readers(comp, reduces).values()):
        return None
    return reduces, kinds


def row_layout(inst) -> tuple[int, int, int] | None:
    """(lead, rows, minor) of a reduce over the minor-most dimensions and possibly the
    major-most ones too: its input seen as [lead, rows, minor] (the reduced major run, the
    kept dimensions, the reduced minor run: a batch norm's [N, C, H*W] keeping C), a row
    being the lead x minor elements of one kept position; else None. A row read along
    (`result_readers`' "row") is only supported with lead 1."""
    dims = inst.operands[0].shape.dims
    reduced = sorted(inst.attrs["dimensions"])
    minor = 0
    while minor < len(reduced) and reduced[-1 - minor] == len(dims) - 1 - minor:
        minor += 1
    lead = reduced[:len(reduced) - minor]
    if not minor or lead != list(range(len(lead))):
        return None
    return (math.prod(dims[:len(lead)]), math.prod(dims[len(lead):len(dims) - minor]),
            math.prod(dims[len(dims) - minor:]))


def row_position(b, inst, row):
    """j -> input position of element j of `row` (j = lead index * minor + minor index;
    ints or IR values)."""
    lead, rows, minor = row_layout(inst)
    if lead == 1:
        return lambda j: add(b, mul(b, row, minor), j)
    return lambda j: add(b, mul(b, udiv(b, j, minor), rows * minor),
                         add(b, mul(b, row, minor), urem(b, j, minor)))


def output_kinds(comp, reduces, outputs) -> dict | None:
    """id(output) -> how a reduce kernel stores it: "at" (a reduce's leaf, or an epilogue
    of the results at the output position: stored once per result), "row" (read along
    the row: see `result_readers`), or "side" (an output of the input's shape that reads
    no result: stored at each element as the first reduce's fold visits it, every
    element once); None if an output is none of these."""
    readers = result_readers(comp, reduces)
    if readers is None:
        return None
    whole = reduces[0].operands[0].shape.dims
    kinds = {}
    for o in outputs:
        side = not o.shape.is_tuple and o.shape.dims == whole
        kinds[id(o)] = readers.get(id(o), "side" if side else None)
    return None if None in kinds.values() else kinds


def of_kind(stores: list, kinds: dict, kind: str) -> list:
    """The (output, dests, None) entries of the outputs of `kind` (store_outputs' form)."""
    return [(o, dests, None) for o, dests in stores if kinds[id(o)] == kind]


def result_readers(comp, reduces) -> dict | None:
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


def row_schedule(comp, reduces: list, kinds: dict) -> Schedule:
    """A block of ROW_THREADS threads per row (each reading `vector_width` adjacent
    elements at a time), or for rows shorter than that a group of `lanes` lanes of a warp
    per row (the smallest power of two covering the row, at most a warp), ROW_THREADS //
    lanes rows per block."""
    rows, length = rows_of(reduces[0])
    lanes = ROW_THREADS if length >= ROW_THREADS else min(WARP, 1 << (length - 1).bit_length())
    vector = row_vector(comp, reduces[0]) if lanes == ROW_THREADS else 1

    def emit(gen, stores, _):
        emit_rows(gen, reduces, kinds, stores, lanes, vector)

    return Schedule(emit, ROW_THREADS, max(1, -(-rows // (ROW_THREADS // lanes))))


def emit_rows(gen: Elemental, reduces: list, kinds: dict, stores: list,
              lanes: int, vector: int) -> None:
    """The body of a row-reduce kernel, `lanes` threads per row: per row, each reduce's
    result in turn (shared with the row's threads, bound for what reads it; the first
    fold stores the side outputs), then each output (root, dests) by its kind: the row's
    first thread stores the reduces' leaves and the epilogue, the row's threads the row
    outputs. Blocks stride over the rows, so any grid of ROW_THREADS-thread blocks is
    correct."""
    b = gen.b
    rows, length = rows_of(reduces[0])
    per_block = ROW_THREADS // lanes
    tid = special(b, "tid.x")
    lane, group = (tid, I64(0)) if per_block == 1 else \
        (b.urem(tid, I64(lanes)), b.udiv(tid, I64(lanes)))
    start = b.mul(special(b, "ctaid.x"), I64(per_block))
    step = b.mul(special(b, "nctaid.x"), I64(per_block))
    with strided(b, start, step, -(-rows // per_block) * per_block) as first:
        row = b.add(first, group)                        # the loop is uniform in the block;
        here = b.icmp_unsigned("<", row, I64(rows))      # a group past the end idles
        side = of_kind(stores, kinds, "side")
        for inst in reduces:
            total = _row_result(gen, inst, row, here, lane, lanes, vector, side)
            gen.bindings[id(inst)] = total if inst.shape.is_tuple else total[0]
            side = []
        with b.if_then(b.and_(here, b.icmp_unsigned("==", lane, I64(0)))):
            store_outputs(gen, of_kind(stores, kinds, "at"),
                          Index(_row_shape(reduces[0]).dims, linear=row), row)
        outs = of_kind(stores, kinds, "row")
        if outs:
            in_dims = reduces[0].operands[0].shape.dims
            with b.if_then(here):
                for_row(b, row_position(b, reduces[0], row), length, lane, lanes, vector,
                        lambda at: store_outputs(gen, outs, Index(in_dims, linear=at), at))
        for inst in reduces:
            del gen.bindings[id(inst)]


def row_vector(comp, inst) -> int:
    """Adjacent elements a thread of a row takes at once: `vector_width` of the row's
    contiguous runs."""
    return vector_width(comp, [row_layout(inst)[2]], frozenset({"reduce"}))


def for_row(b, position, length: int, start, step: int, vector: int, body) -> None:
    """body(position(j) + k), k < vector, for the elements j of a row (of `length`
    elements, whose contiguous runs are multiples of `vector`) from j = start * vector,
    every step * vector: a thread's adjacent accesses, which LLVM merges into vector loads
    and stores."""
    with strided(b, start, I64(step), length // vector) as v:
        # j as v * vector without wrap-around: LLVM carries that factor through the
        # position's divisions, so it knows the first element's alignment
        j = b.mul(v, I64(vector), flags=("nuw",)) if vector > 1 else v
        at = position(j)
        for k in range(vector):
            body(add(b, at, k))


def fold_row(gen: Elemental, inst, reducer, slots, row, start, step: int, vector: int,
             side: list) -> None:
    """Fold reduce `inst`'s elements of `row` that `for_row` gives a thread."""
    inputs, _ = reduce_operands(inst)
    in_dims = inputs[0].shape.dims
    _, length = rows_of(inst)
    for_row(gen.b, row_position(gen.b, inst, row), length, start, step, vector,
            lambda at: fold(gen, reducer, inputs, slots, Index(in_dims, linear=at), side))


def fold(gen: Elemental, reducer, inputs, slots, index: Index, side: list) -> None:
    """Accumulate the reduce's input elements at `index` into `slots`, and store the
    `side` outputs there (sharing the values computed for the fold)."""
    gen.push_scope()
    xs = [gen.value(x, index) for x in inputs]
    write_slots(gen, slots, reducer(read_slots(gen, slots), xs))
    if side:
        at = index.linear(gen.b)
        store_outputs(gen, side, index, at)
    gen.pop_scope()


def _row_result(gen: Elemental, inst, row, here, lane, lanes: int, vector: int,
                side: list) -> list:
    """Reduce `inst`'s result for `row`, in each of its `lanes` threads: strided folds,
    then a butterfly within the group of lanes, or for a whole block the block's
    combination and lane 0's result through shared memory (behind a barrier)."""
    b = gen.b
    _, inits = reduce_operands(inst)
    reducer = Reducer(gen, inst.attrs["to_apply"])
    init = [gen.value(i, Index.scalar()) for i in inits]
    slots = stack_slots(gen, init)                     # set to the init values per row
    with b.if_then(here):
        fold_row(gen, inst, reducer, slots, row, lane, lanes, vector, side)
    if lanes <= WARP:
        return reducer.finish(combine(b, reducer, read_slots(gen, slots), lanes))
    total = block_combine(gen, reducer, read_slots(gen, slots), lane, lanes)
    result_like = reducer.finish(init)                 # the row's result: its types
    result = shared_like(b, result_like, 1, "row_result")
    with b.if_then(b.icmp_unsigned("==", lane, I64(0))):
        store_parts(b, result, reducer.finish(total), I64(0))
    barrier(b)
    return load_parts(b, result, result_like, I64(0))
