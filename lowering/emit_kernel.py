"""One kernel = one LLVM function computing a fused computation.

The computation's parameters (then its array constants) are input buffers, its root's leaves
output buffers. Inside, phases.split cuts the computation into phases: each phase stores
one instruction (an output, or a temporary a later phase reads, e.g. a reduce that a loop
fusion broadcasts; a reduce's phase may also store its input, Phase.tees) and computes
everything fused into it inline. The phase's emitter is chosen by its hero (PHASES; its
root, or the GEMM whose epilogue the root is): reduce, dot, convolution, scatter, sort, top-k
and select-and-scatter have loop structures of their own; everything else is a loop over the
output's elements. Phases that do not read each other share one step (one loop nest): loops
over one index space, and roots whose emitter joins them (sibling reduces over the same
input dimensions).

Entry points, all `void`:
    NAME.impl(ptr noalias out..., ptr noalias in..., ptr temps..., ptr scratch,
              i64 begin, i64 end, i64 slot)       internal, inlined into NAME
    NAME(ptr args, i64 begin, i64 end, i64 slot)  args: array of the pointers above
    NAME.par(ptr data)                            only for kernels worth threading; data:
      {ptr args, i64 extent, i64 ftz, i64 next}   run by each OpenMP thread: takes chunks
                                                  of [0, extent) from the counter `next`
A single-phase kernel splits its outermost loop over [begin, end), a row pass (row_pass.py:
steps that all go through the same rows) its rows; with several phases otherwise each runs
whole and the kernel is not split. `slot` picks the thread's part of the scratch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from llvmlite import ir

from ..errors import UnsupportedError
from ..ir import Computation, Instruction
from ..shape import default_layout
from ..targets import cpu_facts
from . import fallback, jit, phases, row_pass, vecmath
from .elemental import Elemental, Source, start_indices
from .emit_loops import (Index, add, clamp, const, delinearize, for_range, linearize,
                         mul, outer_positions, ranges, row_split)
from .fingerprint import fingerprint
from .phases import Phase
from .intrinsics import declare, restore_fp_mode, set_flush_denormals
from .ltypes import I32, I64, PTR, VOID, array_bytes, opaque, store

ALIGN = 64
CHUNKS_PER_THREAD = 8


@dataclass
class KernelCode:
    """An emitted (not yet compiled) kernel and what the host must give it."""
    name: str
    ir: str
    n_outputs: int
    n_inputs: int
    constants: list[Instruction]        # array constants, passed after the parameters
    temps: list[int]                    # bytes of each temporary buffer
    scratch_per_thread: int             # bytes of per-thread workspace (dot packing)
    extent: int                         # [0, extent) is what NAME splits across threads
    work: float                         # estimated element-operations, for that decision
    key: str = ""
    comp: Computation | None = None     # what it computes (for listings and debugging)
    addresses: dict = field(default_factory=dict)
    updates: tuple = ()                 # emit_kernel's `updates` and `packed` it was made with
    packed: tuple = ()

    @property
    def n_args(self) -> int:
        return self.n_outputs + self.n_inputs + len(self.temps) + 1

    def parallel(self, threads: int, min_work: float) -> bool:
        return threads > 1 and self.extent > 1 and self.work >= min_work


class KernelBuilder:
    """State shared by the phase emitters of one kernel function."""

    def __init__(self, fn: ir.Function, b: ir.IRBuilder, sources: dict[int, Source],
                 begin, end, slot, scratch, scratch_per_thread: int):
        self.fn, self.b = fn, b
        self.sources = sources
        self.begin, self.end, self.slot, self.scratch = begin, end, slot, scratch
        self.scratch_per_thread = scratch_per_thread
        # of the step being emitted: its other roots (siblings computed in the same loops)
        # and what its phases store besides their roots (Phase.tees), as (inst, dests)
        self.siblings: list = []
        self.tees: list = []
        # ids of parameters whose buffers hold a GEMM operand already packed (`packed`)
        self.packed: set[int] = set()

    def store_tees(self, gen: Elemental, index: Index) -> None:
        """Store the phase's tees (Phase.tees: inputs of its reduce) at `index`, where the
        reduce reads them: their values come from the generator's cache."""
        for inst, dests in self.tees:
            dests[0].store(self.b, gen.value(inst, index), index.linear(self.b))

    def elemental(self) -> Elemental:
        return Elemental(self.b, self.sources)

    def workspace(self):
        """This thread's part of the scratch buffer (an i8 pointer). Its stride is the
        kernel's per-thread scratch, the largest any of its phases needs: a phase that
        strode by its own need could overlap another thread's part while that thread runs
        a phase needing more (a base-dilated convolution's GEMMs differ in size)."""
        return self.b.gep(self.scratch, [self.b.mul(self.slot, I64(self.scratch_per_thread))],
                          inbounds=True, source_etype=ir.IntType(8))


# hero opcode -> (emit(kb, root, dests, lo, hi), plan(root) -> (extent, work, scratch bytes),
#                 joins(a, b) -> whether roots a and b run in one step, or None);
# a GEMM's emit and plan also take `gemm=` when the root is its epilogue (Phase.gemm)
PHASES: dict[str, tuple] = {}
# root opcode -> (emit, plan, None) of a root whose output buffer already holds its operand
# 0 (emit_kernel's `updates`, in_place.py): it writes only what changes
IN_PLACE: dict[str, tuple] = {}
# root opcode -> (emit, plan, None) of a root into a buffer of its own that changes a part of
# its operand 0: the operand is copied, then only that part is written
COPY_THEN_UPDATE: dict[str, tuple] = {}


def register(opcode: str, emit, plan, joins=None, in_place=None) -> None:
    """`joins`: phases with roots of this opcode that one loop nest can compute together
    (the emitter then gets the step's other roots as kb.siblings). `in_place`: (emit,
    plan) of such a root updating its operand 0 in place (IN_PLACE)."""
    PHASES[opcode] = (emit, plan, joins)
    if in_place:
        IN_PLACE[opcode] = (*in_place, None)


def kernel_outputs(comp: Computation) -> list[Instruction]:
    """What a kernel writes: its root's elements, or its root."""
    root = comp.root
    return list(root.operands) if root.opcode == "tuple" else [root]


def _leaves(inst: Instruction):
    return inst.shape.leaves() if inst.shape.is_tuple else [inst.shape]


def emit_kernel(comp: Computation, name: str, key: str = "",
                updates: tuple[int, ...] = (), packed: tuple[int, ...] = ()) -> KernelCode:
    """Emit `comp` as kernel `name` (UnsupportedError if some op has no emitter); `key` is
    its fingerprint when the caller has it. `updates`: positions among its outputs of
    roots in IN_PLACE (dynamic-update-slices, scatters) whose output buffer the host passes
    already holding operand 0 (in_place.py): the kernel writes only their updates.
    `packed`: numbers of parameters the host passes as a dot's B operand already packed
    (emit_dot.pack_b_panel; loop_packing.py)."""
    groups, steps, plans = plan_steps(comp, updates)
    where = _Stores(comp, groups, steps)
    rows = row_pass_of(comp, steps, plans, where, updates)
    temp_roots = [] if rows else where.temps
    temp_sizes = [_padded(array_bytes(s)) for t in temp_roots for s in _leaves(t)]
    joint = None if steps else where.joint_copy()
    single = (len(steps) == 1 and not where.copies) or rows is not None or joint is not None
    work = sum(p[1] for p in plans) + (joint or 0) * len(where.copies)
    extent = rows.rows if rows else joint if joint else plans[0][0] if single else 1
    scratch = max([p[2] for p in plans] + [0])

    mod = jit.new_module(name)
    params, constants = comp.parameters, array_constants(comp)
    n_in = len(params) + len(constants)
    n_out = len(where.out_shapes)
    n_buf = n_out + n_in + len(temp_sizes) + 1
    impl = ir.Function(mod, ir.FunctionType(VOID, [PTR] * n_buf + [I64, I64, I64]),
                       f"{name}.impl")
    impl.linkage = "internal"
    impl.attributes.add("alwaysinline")
    jit.tune(impl)
    for a in impl.args[:n_out + n_in]:
        a.add_attribute("noalias")
    b = ir.IRBuilder(impl.append_basic_block("entry"))
    args = list(impl.args)
    out_ptrs = args[:n_out]
    in_ptrs = args[n_out:n_out + n_in]
    temp_ptrs = iter(args[n_out + n_in:n_buf - 1])
    begin, end, slot = args[n_buf:]
    # an input the only output is written over (in_place.elementwise_updates: the host
    # passes one buffer for both) is read through the output's pointer: one pointer per
    # buffer keeps every argument noalias, so loops vectorize without overlap checks
    from .in_place import elementwise_updates       # in_place builds on this module
    shared = set(elementwise_updates(comp, updates) if updates else [])
    sources = {id(p): Source(out_ptrs[0] if n in shared else ptr, p.shape)
               for n, (p, ptr) in enumerate(zip(params + constants, in_ptrs))}
    kb = KernelBuilder(impl, b, sources, begin, end, slot, args[n_buf - 1], scratch)
    kb.packed = {id(params[n]) for n in packed}

    def output(root):
        off = where.first[id(root)]
        return [Source(out_ptrs[off + j], s) for j, s in enumerate(_leaves(root))]
    if rows:
        _emit_row_pass(kb, comp, steps, rows, output, where.direct)
    for step, plan in ([] if rows else zip(steps, plans)):
        outs = [(root, output(root) if id(root) in where.direct else
                 [Source(next(temp_ptrs), s) for s in _leaves(root)])
                for g in step for root in g.stored()]
        _emit_step(kb, comp, step, outs, *((begin, end) if single else (0, plan[0])),
                   updates)
    if joint:
        emit_loop(kb, [(o, [Source(out_ptrs[off], o.shape)], None) for o, off in where.copies],
                  begin, end, flat=True)
    for o, off in ([] if joint else where.copies):
        for j, s in enumerate(_leaves(o)):
            pick = (lambda v, j=j: v[j]) if o.shape.is_tuple else None
            emit_loop(kb, [(o, [Source(out_ptrs[off + j], s)], pick)], 0, s.num_elements,
                      flat=True)
    b.ret_void()
    code = KernelCode(name, "", n_out, n_in, constants, temp_sizes, scratch,
                      extent, work, key=key or fingerprint(comp), comp=comp,
                      updates=updates, packed=packed)
    _entry_points(mod, impl, name, n_buf, jit.has_openmp() and code.parallel(
        cpu_facts.threads(), cpu_facts.PARALLEL_MIN_WORK))
    vecmath.finish(mod)
    code.ir = str(mod)
    return code


class _Stores:
    """Where a kernel's stored values go: `direct` (ids): roots and tees stored straight
    into an output (at `first[id]`, the position of its first leaf among the output
    buffers); `temps`: the others, in step order; `copies`: (output, position) of the
    outputs written by a copy loop at the end (an input or an array constant returned, a
    value returned twice)."""

    def __init__(self, comp: Computation, groups: list[Phase], steps: list[list[Phase]]):
        outputs = kernel_outputs(comp)
        offsets = [sum(len(_leaves(o)) for o in outputs[:k]) for k in range(len(outputs))]
        self.out_shapes = [s for o in outputs for s in _leaves(o)]
        self.first: dict[int, int] = {}
        for o, off in zip(outputs, offsets):
            self.first.setdefault(id(o), off)
        self.direct = {id(r) for g in groups for r in g.stored() if id(r) in self.first}
        self.temps = [r for step in steps for g in step for r in g.stored()
                      if id(r) not in self.direct]
        self.copies = [(o, off) for o, off in zip(outputs, offsets)
                       if id(o) not in self.direct or self.first[id(o)] != off]

    def joint_copy(self) -> int | None:
        """The element count of the copies when they are arrays of one shape: then one
        flat loop, split across threads, stores them all, reading each source element
        once (in_place.py's copies of one buffer into several), else None."""
        shapes = {o.shape.dims for o, _ in self.copies if not o.shape.is_tuple}
        if len(shapes) != 1 or any(o.shape.is_tuple for o, _ in self.copies):
            return None
        return math.prod(shapes.pop()) or None


def kernel_row_pass(comp: Computation) -> row_pass.RowPass | None:
    """How the kernel computing `comp` runs its steps as one loop over blocks of rows
    (row_pass.py), or None if it does not."""
    groups, steps, plans = plan_steps(comp)
    return row_pass_of(comp, steps, plans, _Stores(comp, groups, steps))


def row_pass_of(comp: Computation, steps, plans, where: _Stores,
                updates: tuple[int, ...] = ()) -> row_pass.RowPass | None:
    """The kernel's steps as one loop over blocks of rows (row_pass.py), if they can be."""
    if updates or where.copies:
        return None
    kinds = ["loop" if _entry(comp, step[0], updates) is None else
             "reduce" if step[0].hero.opcode == "reduce" else None for step in steps]
    inputs = comp.parameters + array_constants(comp)
    return row_pass.plan(steps, plans, kinds, where.temps, inputs)


def _emit_step(kb: KernelBuilder, comp: Computation, step: list[Phase], outs, lo, hi,
               updates) -> None:
    """One step over its iterations [lo, hi): `outs` (root, dests) of every value its
    phases store; afterwards later steps read them there."""
    entry = _entry(comp, step[0], updates)
    if entry:
        roots = {id(g.root) for g in step}
        main = [o for o in outs if id(o[0]) in roots]
        kb.siblings, kb.tees = main[1:], [o for o in outs if id(o[0]) not in roots]
        entry[0](kb, main[0][0], main[0][1], lo, hi, **_epilogue(step[0]))
    else:
        emit_loop(kb, [(root, dests, None) for root, dests in outs], lo, hi)
    for root, dests in outs:
        kb.sources[id(root)] = _TupleSource(dests) if root.shape.is_tuple else dests[0]


def _emit_row_pass(kb: KernelBuilder, comp: Computation, steps, rows: row_pass.RowPass,
                   output, direct) -> None:
    """Rows [begin, end) of the kernel in blocks of rows.block: every step runs over the
    block before the next block starts. Temporaries are windows on the stack holding the
    block's rows (rows.windows); outputs are stored in place."""
    b = kb.b
    span = b.sub(kb.end, kb.begin)
    blocks = b.udiv(b.add(span, I64(rows.block - 1)), I64(rows.block))
    windows = {}
    for key, (nbytes, _) in rows.windows.items():
        window = b.alloca(ir.ArrayType(ir.IntType(8), nbytes))
        window.align = ALIGN
        windows[key] = opaque(b, window)
    with for_range(b, 0, blocks, "block", vectorize=False) as blk:
        r0 = b.add(kb.begin, b.mul(blk, I64(rows.block)))
        r1 = b.add(r0, I64(rows.block))
        r1 = b.select(b.icmp_signed("<", r1, kb.end), r1, kb.end)
        for step, per_row in zip(steps, rows.per_row):
            outs = []
            for root in (r for g in step for r in g.stored()):
                if id(root) in direct:
                    outs.append((root, output(root)))
                    continue
                n = rows.windows[id(root)][1]
                outs.append((root, [Source(windows[id(root)], root.shape, b.mul(r0, I64(n)))]))
            _emit_step(kb, comp, step, outs, b.mul(r0, I64(per_row)),
                       b.mul(r1, I64(per_row)), ())


def plan_steps(comp: Computation, updates: tuple[int, ...] = ()
               ) -> tuple[list[Phase], list[list[Phase]], list[tuple]]:
    """The kernel's phases (UnsupportedError if some op has no emitter), its steps (the
    phases in an order where each runs after what it reads; phases that do not read each
    other merged into one loop computing several outputs: loops over the same index space,
    roots whose emitter joins them) and each step's plan (extent, work, scratch bytes).
    `updates`: see emit_kernel."""
    groups = phases.split(comp, fallback.why_not, epilogues=True, tees=True)
    for g in groups:
        if g.fallback:
            raise UnsupportedError(f"{g.root.opcode} in {comp.name}: {g.fallback}")
    steps: list[list[Phase]] = []
    for g in groups:
        _place(steps, g, lambda g: _entry(comp, g, updates))
    stored = {id(x) for x in comp.parameters + array_constants(comp)} | \
        {id(r) for g in groups for r in g.stored()}
    return groups, steps, [_plan(comp, step, stored, updates) for step in steps]


def threaded_steps(comp: Computation) -> list[list[Phase]] | None:
    """The steps of a kernel to run as kernels of their own, each split across threads if
    worth it: when it has several and one of them would be (a kernel of several steps runs
    whole on one thread). None to run it as one kernel."""
    groups, steps, plans = plan_steps(comp)
    if len(steps) > 1 and row_pass_of(comp, steps, plans, _Stores(comp, groups, steps)):
        return None                     # one loop over rows, threaded as a whole
    if len(steps) > 1 and jit.has_openmp() and any(
            extent > 1 and work >= cpu_facts.PARALLEL_MIN_WORK for extent, work, _ in plans) \
            and cpu_facts.threads() > 1:
        return steps
    return None


def array_constants(comp: Computation) -> list[Instruction]:
    """Constants a kernel reads from the executable's constant table (after its
    parameters); scalar ones are immediates."""
    return [i for i in comp.post_order()
            if i.opcode == "constant" and not phases.is_scalar_constant(i)]


def _place(steps: list[list[Phase]], g: Phase, entry_of) -> None:
    """Append phase g to the steps: into the latest step it joins, if g reads nothing the
    steps after that one store (g runs earlier), or if none of them reads that step (the
    step runs later, with g); else as a step of its own. `entry_of(phase)`: its emitter
    (PHASES entry), None for a loop."""
    reads = {id(i) for i in g.inputs()}
    for k in reversed(range(len(steps))):
        if not _joins(steps[k], g, entry_of):
            continue
        later = steps[k + 1:]
        if not reads & {id(r) for step in later for p in step for r in p.stored()}:
            steps[k].append(g)
            return
        mine = {id(r) for p in steps[k] for r in p.stored()}
        if not any(mine & {id(i) for i in p.inputs()} for step in later for p in step):
            steps.append(steps.pop(k) + [g])
            return
    steps.append([g])


def _joins(step: list[Phase], g: Phase, entry_of) -> bool:
    """Does phase g run in the loops of `step` (phases already one step)?"""
    if {id(i) for i in g.inputs()} & {id(r) for p in step for r in p.stored()}:
        return False
    mine, its = entry_of(step[0]), entry_of(g)
    if mine is None and its is None:
        return _dims(step[0].root) == _dims(g.root)
    joins = mine[2] if mine is not None and mine == its else None
    return joins is not None and joins(step[0].hero, g.hero)


def _dims(inst):
    return (inst.shape.leaves()[0] if inst.shape.is_tuple else inst.shape).dims


class _TupleSource:
    """A stored tuple-shaped root (variadic reduce, sort): its leaves' values as a list,
    which get-tuple-element picks from."""

    def __init__(self, leaves):
        self.leaves = leaves

    def load(self, b, index):
        return [leaf.load(b, index) for leaf in self.leaves]


def _padded(n: int) -> int:
    return max(ALIGN, (n + ALIGN - 1) // ALIGN * ALIGN)


def _entry(comp: Computation, g: Phase, updates: tuple[int, ...]):
    """(emit, plan, joins) of phase g, None for a loop phase (emit_loop)."""
    if g.root.opcode in IN_PLACE and any(g.root is kernel_outputs(comp)[k] for k in updates):
        return IN_PLACE[g.root.opcode]
    if g.gemm is None and g.root.opcode in COPY_THEN_UPDATE:
        return COPY_THEN_UPDATE[g.root.opcode]
    return PHASES.get(g.hero.opcode)


def _plan(comp, step: list[Phase], stored, updates):
    entry = _entry(comp, step[0], updates)
    roots = [g.root for g in step]
    if entry:
        extent, _, scratch = entry[1](roots[0], **_epilogue(step[0]))
        return extent, sum(entry[1](g.root, **_epilogue(g))[1] for g in step), scratch
    return plan_loop(roots, stored - {id(r) for r in roots})


def _epilogue(g: Phase) -> dict:
    """The extra argument of a GEMM phase's emitter and plan: the GEMM whose epilogue the
    phase's root is (they are then given the root)."""
    return {"gemm": g.gemm} if g.gemm else {}


# --------------------------------------------------------------------- loop phases

# Rows shorter than this are not worth a loop of their own: such outputs use one flat loop
# and divide for coordinates (vectorizable), instead of a short inner loop LLVM unrolls.
SHORT_ROW = 16

COORDINATE_OPS = frozenset("""transpose slice pad concatenate reverse iota dynamic-slice
dynamic-update-slice gather reduce reduce-window""".split())


def needs_coordinates(root, sources) -> bool:
    """True if some op fused under `root` maps indices by coordinates; otherwise the whole
    expression reads every array at the output's linear position (one flat loop)."""
    stack, seen = [root], set()
    while stack:
        inst = stack.pop()
        if id(inst) in seen or id(inst) in sources:
            continue
        seen.add(id(inst))
        if inst.opcode in COORDINATE_OPS or (inst.opcode == "broadcast" and inst.attrs.get(
                "dimensions")) or (inst.opcode == "bitcast" and _layout_changes(inst)):
            return True
        stack.extend(inst.operands)
    return False


def _layout_changes(inst) -> bool:
    return any(s.layout is not None and s.layout.minor_to_major !=
               default_layout(s.rank).minor_to_major for s in (inst.shape, inst.operands[0].shape))


def plan_loop(roots, stored):
    """(outer extent, work, scratch) of emit_loop over `roots`: elements of a flat loop,
    else rows. `stored`: ids of the values the loop reads from memory."""
    dims = _dims(roots[0])
    n = math.prod(dims)
    return (n if _flat(dims, roots, stored) else row_split(dims)[0], float(n * len(roots)), 0)


def _flat(dims, roots, stored) -> bool:
    return len(dims) <= 1 or dims[-1] < SHORT_ROW or not any(
        needs_coordinates(r, stored) for r in roots)


def emit_loop(kb: KernelBuilder, outputs: list, lo, hi, flat: bool = False):
    """For each element in [lo, hi) of one index space, store the value of every output
    (root, dests, pick): every leaf of a tuple-shaped root into its own dest, or the leaf
    `pick` selects. The loop is flat when no fused op needs coordinates (or rows are short:
    coordinates then come from dividing the position), else rows x columns with the columns
    (contiguous) innermost. [lo, hi) counts elements of a flat loop, else rows."""
    b = kb.b
    gen = kb.elemental()
    dims = outputs[0][1][0].dims

    def emit(index, linear):
        store_outputs(gen, outputs, index, linear)
    if flat or _flat(dims, [r for r, _, _ in outputs], kb.sources):
        with for_range(b, lo, hi, "i") as i:
            emit(Index(dims, linear=i), i)
        return
    _, n = row_split(dims)
    if n > TILE_COLS and reads_across_rows([r for r, _, _ in outputs], kb.sources):
        _emit_tiles(b, dims, lo, hi, emit)
        return
    with for_range(b, lo, hi, "row", vectorize=False) as r:
        outer = delinearize(b, r, dims[:-1])
        base = b.mul(r, I64(n))
        with for_range(b, 0, n, "col") as j:
            linear = b.add(base, j)
            emit(Index(dims, values=outer + [j], linear=linear), linear)


# A loop reading an operand transposed walks it down columns: one cache line per element.
# In tiles of TILE_ROWS x TILE_COLS the lines it touches (TILE_COLS of them, each holding
# half a tile's rows) stay in L1 until every row of the tile used them; rows 128 wide keep
# the streams of the operands read along rows long (Adam's update reads four, writes three:
# twice as fast as with 32 x 32 tiles here, a single-stream update 0.8x as fast).
TILE_ROWS = 32
TILE_COLS = 128


def reads_across_rows(roots, sources) -> bool:
    """True if some op fused under `roots` reads its operand with the output's contiguous
    (last) dimension mapped to a non-contiguous one: a transpose that moves the last
    dimension, or a bitcast that changes the layout."""
    stack, seen = list(roots), set()
    while stack:
        inst = stack.pop()
        if id(inst) in seen or id(inst) in sources:
            continue
        seen.add(id(inst))
        if inst.opcode == "transpose" and inst.shape.rank > 1 and \
                inst.attrs["dimensions"][-1] != inst.shape.rank - 1:
            return True
        if inst.opcode == "bitcast" and _layout_changes(inst):
            return True
        stack.extend(inst.operands)
    return False


def _emit_tiles(b, dims, lo, hi, emit) -> None:
    """Rows [lo, hi) of a rows x columns loop in tiles of TILE_ROWS x TILE_COLS (the last
    ones cut short), each tile row by row with the columns innermost."""
    _, n = row_split(dims)
    blocks = b.udiv(b.add(b.sub(const(hi), const(lo)), I64(TILE_ROWS - 1)), I64(TILE_ROWS))
    with for_range(b, 0, blocks, "rows", vectorize=False) as rb:
        r0 = b.add(const(lo), b.mul(rb, I64(TILE_ROWS)))
        r1 = b.add(r0, I64(TILE_ROWS))
        r1 = b.select(b.icmp_signed("<", r1, const(hi)), r1, const(hi))
        with for_range(b, 0, -(-n // TILE_COLS), "cols", vectorize=False) as cb:
            c0 = b.mul(cb, I64(TILE_COLS))
            c1 = b.add(c0, I64(TILE_COLS))
            c1 = b.select(b.icmp_signed("<", c1, I64(n)), c1, I64(n))
            with for_range(b, r0, r1, "row", vectorize=False) as r:
                outer = delinearize(b, r, dims[:-1])
                base = b.mul(r, I64(n))
                with for_range(b, c0, c1, "col") as j:
                    linear = b.add(base, j)
                    emit(Index(dims, values=outer + [j], linear=linear), linear)


def plan_update(inst):
    """(parts, elements, scratch) of emit_update: positions along the update's outermost
    dimension of more than one position."""
    dims = inst.operands[1].shape.dims
    return outer_positions(dims)[1], float(math.prod(dims)), 0


def emit_update(kb: KernelBuilder, inst: Instruction, dests, lo, hi):
    """Positions [lo, hi) along that dimension of the update of dynamic-update-slice `inst`
    stored at its clamped start in dests[0], which already holds operand 0 (the host
    updates that buffer in place): the cost is the update's size, not the whole array's."""
    dims = inst.operands[1].shape.dims
    bounds = [(0, d) for d in dims]
    s = outer_positions(dims)[0]
    if s is not None:
        bounds[s] = (lo, hi)
    _store_update(kb.b, kb.elemental(), inst, dests[0], bounds)


def plan_copy_update(inst):
    """(parts, elements, scratch) of emit_copy_update: positions along the output's
    outermost dimension of more than one position (emit_loops.outer_positions)."""
    update = inst.operands[1].shape.num_elements
    return outer_positions(inst.shape.dims)[1], float(inst.shape.num_elements + update), 0


def emit_copy_update(kb: KernelBuilder, inst: Instruction, dests, lo, hi):
    """Positions [lo, hi) along the output's outermost dimension of more than one of
    dynamic-update-slice `inst` into a buffer of its own: operand 0 copied there, then the
    part of the update that falls there stored over it. A copy and the update's size, not
    a choice between the two per element of the whole array; threads own parts."""
    b, gen, out = kb.b, kb.elemental(), dests[0]
    s, _, inner = outer_positions(out.dims)
    emit_loop(kb, [(inst.operands[0], dests, None)], mul(b, lo, inner), mul(b, hi, inner),
              flat=True)
    dims = inst.operands[1].shape.dims
    bounds = [(0, d) for d in dims]
    if s is not None:
        start = const(start_indices(gen, [inst.operands[2 + s]], [out.dims[s]], [dims[s]])[0])
        bounds[s] = (clamp(b, b.sub(const(lo), start), 0, dims[s]),
                     clamp(b, b.sub(const(hi), start), 0, dims[s]))
    _store_update(b, gen, inst, out, bounds)


def _store_update(b, gen: Elemental, inst: Instruction, out, bounds):
    """Store the elements of the update of dynamic-update-slice `inst` within `bounds`
    (per update dimension) at their clamped place in `out`."""
    update = inst.operands[1]
    dims = update.shape.dims
    starts = start_indices(gen, inst.operands[2:], out.dims, dims)
    with ranges(b, bounds, "u") as coords:
        gen.push_scope()
        v = gen.value(update, Index(dims, values=coords))
        at = linearize(b, [add(b, c, s) for c, s in zip(coords, starts)], out.dims)
        store(b, v, out.ptr, out.et, const(at))
        gen.pop_scope()


IN_PLACE["dynamic-update-slice"] = (emit_update, plan_update, None)
COPY_THEN_UPDATE["dynamic-update-slice"] = (emit_copy_update, plan_copy_update, None)


def store_outputs(gen: Elemental, outputs: list, index: Index, linear) -> None:
    """Store the value at `index` of every output (root, dests, pick) at position `linear`
    of its dests: the body of every loop kernel, on every target."""
    gen.push_scope()
    for root, dests, pick in outputs:
        v = gen.value(root, index)
        values = [pick(v)] if pick else (list(v) if isinstance(v, list) else [v])
        for dest, x in zip(dests, values):
            dest.store(gen.b, x, linear)
    gen.pop_scope()


# ------------------------------------------------------------------------ entry points

def _entry_points(mod: ir.Module, impl: ir.Function, name: str, n_buf: int,
                  parallel: bool) -> None:
    """NAME(args, begin, end, slot) unpacks the pointer array; for a kernel worth splitting,
    NAME.par(data) runs one OpenMP thread's contiguous share of [0, extent) (calling NAME,
    not inlining it: one copy of the loops is enough)."""
    fn = ir.Function(mod, ir.FunctionType(VOID, [PTR, I64, I64, I64]), name)
    jit.tune(fn)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    arr, begin, end, slot = fn.args
    ptrs = [b.load(b.gep(arr, [I64(k)], inbounds=True, source_etype=PTR), typ=PTR)
            for k in range(n_buf)]
    b.call(impl, ptrs + [begin, end, slot])
    b.ret_void()
    if not parallel:
        return
    par = ir.Function(mod, ir.FunctionType(VOID, [PTR]), f"{name}.par")
    jit.tune(par)
    b = ir.IRBuilder(par.append_basic_block("entry"))
    data = par.args[0]
    arr = b.load(data, typ=PTR)
    field = lambda k: b.gep(data, [I64(k)], inbounds=True, source_etype=I64)   # noqa: E731
    extent = b.load(field(1), typ=I64)
    ftz = b.load(field(2), typ=I64)
    saved = set_flush_denormals(b, b.icmp_unsigned("!=", ftz, I64(0)))
    tid = b.sext(b.call(declare(mod, "omp_get_thread_num", I32, []), []), I64)
    nth = b.sext(b.call(declare(mod, "omp_get_num_threads", I32, []), []), I64)
    # Chunks of about 1/(CHUNKS_PER_THREAD * threads) of the range, taken from a shared
    # counter: a thread that runs slow (another process on its core) takes fewer.
    per = b.mul(nth, I64(CHUNKS_PER_THREAD))
    chunk = b.udiv(b.add(extent, b.sub(per, I64(1))), per)
    loop = par.append_basic_block("take")
    body = par.append_basic_block("run")
    done = par.append_basic_block("done")
    b.branch(loop)
    b.position_at_end(loop)
    lo = b.atomic_rmw("add", field(3), chunk, "monotonic")
    b.cbranch(b.icmp_signed("<", lo, extent), body, done)
    b.position_at_end(body)
    hi = b.select(b.icmp_signed("<", b.add(lo, chunk), extent), b.add(lo, chunk), extent)
    b.call(fn, [arr, lo, hi, tid], attrs=("noinline",))
    b.branch(loop)
    b.position_at_end(done)
    restore_fp_mode(b, saved)
    b.ret_void()
