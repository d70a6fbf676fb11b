"""GPU kernels: one NVPTX kernel per kernel the fusion stage forms, as PTX.

Only what differs from the CPU lives here. Kernels are formed by the same fusion stage and
cut into phases by the same `phases.py`; the value of every fused instruction at an index
comes from the same elemental generator (`elemental.py`, with `emit_elementwise.py`'s table
and mathlib's polynomials), and each element is stored by `emit_kernel.store_outputs`, the
body of every CPU loop too. The GPU's part is the frame around that body:

* the signature `void NAME(ptr noalias out..., ptr noalias in...)`, marked a kernel by the
  `ptx_kernel` calling convention (LLVM's successor of the `nvvm.annotations` kernel entry),
  whose pointer parameters the NVPTX backend treats as global memory;
* one thread per output element: a grid-stride loop over the flat output position, from
  `ctaid.x * ntid.x + tid.x` in steps of `ntid.x * nctaid.x` (any launch covers the output).
  Every output is stored from that one loop (an output smaller than the largest by the
  threads whose position falls inside it); what the CPU stores between two loops (an
  expensive producer read several times per element, an output another output reads) is
  recomputed by each thread instead, since another thread's store is not visible without
  a grid-wide barrier;
* math that the CPU takes from libm (f64 functions, f32 ones mathlib.py does not inline)
  from libdevice (nvptx.py).

Kernels with another structure get a schedule of their own, chosen by GPU_SCHEDULES per
opcode the kernel holds: reductions by rows (emit_gpu_reduce.py, emit_gpu_split.py) or
columns (emit_gpu_columns.py), transposes through shared-memory tiles
(emit_gpu_transpose.py), dots and convolutions with their epilogue as tiled
GEMMs (emit_gpu_dot.py), and kernels that are one sort, top-k, scatter or
select-and-scatter (emit_gpu_sort.py, emit_gpu_scatter.py: a `gpu_frame.Frame` in, the
`Launch` it settled on out). Any other reduce or reduce-window is computed per output
element by its elemental generator inside this loop (a fold over the reduced elements per
thread: correct, not fast). A kernel that needs another loop structure is an
UnsupportedError naming the op and its position.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from llvmlite import ir

from ..ir import Computation, Module
from ..kernels import executed_computations
from . import emit_gpu_dot, emit_gpu_scatter, emit_gpu_sort, fallback, nvptx, phases
from . import emit_gpu_fft  # noqa: F401  # registers fft's per-element generator
from .elemental import Elemental, Source
from .emit_gpu_columns import column_reduce
from .emit_gpu_reduce import row_schedule, row_reduce
from .emit_gpu_split import split_reduce
from .emit_gpu_transpose import tiled_transpose
from .emit_kernel import PHASES, array_constants, kernel_outputs, store_outputs
from .emit_loops import Index
from .gpu_frame import Frame, Launch, SplitNeeded, unsupported
from .gpu_loops import BUFFER_ALIGN, Schedule, grid_stride_range, vector_width
from .intrinsics import set_math_library
from .ltypes import I64, PTR, VOID
from .program import is_view


LOOP_THREADS = 256                 # threads per block of a loop kernel
# Ops with a loop structure of their own that a GPU thread computes one output element of
# (looping over the reduced elements or the window, as elemental.py's generators do, or over
# the transformed points: emit_gpu_fft).
PER_THREAD = frozenset({"reduce", "reduce-window", "fft"})
# Phase root opcode -> the frame of a kernel holding such a phase, with a loop structure of
# its own: frame(gen, comp, phases, stores, arch) emits the body and returns (threads, blocks).


@dataclass
class GpuKernel:
    """An emitted kernel: its LLVM IR (NVPTX triple), what the host passes it, and how to
    launch it (`blocks` blocks of `threads` threads; the schedule's docstring says whether
    other grids are correct: a kernel split over blocks with a scratch buffer needs this
    one).

    What the host program (gpu_runtime.py) does around each launch: `shared_bytes` of
    dynamic shared memory per block; when `scratch_bytes` > 0, one more pointer argument,
    last: a device buffer of that many bytes zeroed before every launch; each pair
    (output leaf i, input j) of `initial_copies` copies input j's bytes into output i
    before the launch (a scatter's output starts as its operand; the kernel then only
    writes the updated elements)."""
    name: str
    ir: str
    n_outputs: int                     # output buffers (a tuple-shaped output has several)
    n_inputs: int                      # parameters, then array constants
    elements: int                      # output elements: the launch covers [0, elements)
    comp: Computation
    threads: int = LOOP_THREADS
    blocks: int = 1
    shared_bytes: int = 0
    scratch_bytes: int = 0
    initial_copies: tuple[tuple[int, int], ...] = ()


def emit_gpu_kernel(comp: Computation, name: str, arch: str = nvptx.DEFAULT_ARCH) -> GpuKernel:
    """Emit kernel `comp` as NVPTX kernel `name`: in the schedule GPU_SCHEDULES chooses for
    it, else one thread per output element."""
    groups = phases.split(comp, fallback.why_not)
    outputs = kernel_outputs(comp)
    _check(groups, outputs)
    leaves = [(o, s) for o in outputs for s in (o.shape.leaves() if o.shape.is_tuple
                                                else [o.shape])]
    inputs = comp.parameters + array_constants(comp)

    schedule = _schedule(comp, groups, outputs, arch)
    scratch = schedule is not None and schedule.scratch_bytes > 0

    mod = nvptx.new_module(name, arch)
    set_math_library(mod, nvptx.libdevice_call)
    fn = ir.Function(mod, ir.FunctionType(VOID, [PTR] * (len(leaves) + len(inputs) + scratch)),
                     name)
    fn.calling_convention = "ptx_kernel"
    fn.attributes.add("nounwind")
    for a in fn.args:
        a.add_attribute("noalias")
        a.attributes.align = BUFFER_ALIGN
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    out_ptrs, in_ptrs = fn.args[:len(leaves)], fn.args[len(leaves):len(leaves) + len(inputs)]
    gen = Elemental(b, {id(p): Source(ptr, p.shape) for p, ptr in zip(inputs, in_ptrs)})
    stores = _stores(outputs, leaves, out_ptrs)
    if schedule is not None:
        grid = schedule.emit(gen, stores, fn.args[-1] if scratch else None) or schedule
        launch = dict(threads=grid.threads, blocks=grid.blocks,
                      scratch_bytes=schedule.scratch_bytes, initial_copies=grid.initial_copies)
    else:
        steps = _emit_elements(gen, stores, comp)
        launch = dict(threads=LOOP_THREADS, blocks=max(1, -(-steps // LOOP_THREADS)))
    b.ret_void()
    elements = max(s.num_elements for _, s in leaves)
    return GpuKernel(name, str(mod), len(leaves), len(inputs), elements, comp, **launch)


def _check(groups, outputs) -> None:
    """UnsupportedError for a kernel without GPU code: an op the CPU runs in the
    interpreter, an op with a loop structure of its own that no schedule has, or a
    single-op kernel (SINGLE_OP) fused with other outputs or phases."""
    for g in groups:
        if g.fallback:
            raise unsupported(g.root, g.fallback)
        op = g.root.opcode
        alone = len(groups) == 1 and len(outputs) == 1 and outputs[0] is g.root
        if op in SINGLE_OP and not alone:
            raise unsupported(g.root, "it is fused with other outputs or phases (a kernel "
                                      f"with a {op} has GPU code when that is all it stores)",
                              split=True)
        if op in PHASES and op not in PER_THREAD | set(SINGLE_OP) | set(CONTRACTIONS):
            raise unsupported(g.root, "only loop kernels (elementwise, data movement), "
                                      "reductions, dots, sort and scatter have GPU code so far")


def _single_op(frame, scratch=lambda root: 0):
    """The schedule of a kernel that is one op with a frame of its own (gpu_frame): the
    frame is handed the op and returns the grid it settled on while emitting."""
    def choose(comp, groups, outputs, arch) -> Schedule:
        root, inputs = groups[0].root, comp.parameters + array_constants(comp)
        return Schedule(lambda gen, stores, buffer: frame(
            Frame(gen, root, stores[0][1], inputs, buffer)), 0, 0, scratch(root))
    return choose


def _contraction(comp, groups, outputs, arch) -> Schedule:
    """A kernel computing a dot or convolution: a tiled GEMM with the epilogue applied as
    each output tile is stored (emit_gpu_dot), or an UnsupportedError for what it cannot
    fuse."""
    return Schedule(lambda gen, stores, _: Launch(*emit_gpu_dot.emit_gemm_kernel(
        gen, comp, groups, stores, arch)), 0, 0)


def _reduce_schedule(comp, groups, outputs, arch) -> Schedule | None:
    """Row reductions (few long rows split over blocks), else column reductions."""
    row = row_reduce(comp, groups, outputs)
    if row is None:
        return column_reduce(comp, groups, outputs)
    return split_reduce(comp, *row) or row_schedule(comp, *row)


# Schedules by an opcode the kernel holds, tried in this order: each looks at the whole
# kernel (and the architecture) and returns a Schedule for it (how its work is laid on the
# grid) or declines (None).
SINGLE_OP = {"sort": _single_op(emit_gpu_sort.emit_sort, emit_gpu_sort.scratch_bytes),
             "topk": _single_op(emit_gpu_sort.emit_sort, emit_gpu_sort.scratch_bytes),
             "custom-call": _single_op(emit_gpu_sort.emit_sort,     # XLA:CPU's TopK
                                       emit_gpu_sort.scratch_bytes),
             "scatter": _single_op(emit_gpu_scatter.emit_scatter),
             "select-and-scatter": _single_op(emit_gpu_scatter.emit_select_and_scatter)}
CONTRACTIONS = {"dot": _contraction, "convolution": _contraction}
GPU_SCHEDULES = {**SINGLE_OP, **CONTRACTIONS, "reduce": _reduce_schedule,
                 "transpose": lambda comp, groups, outputs, arch:       # any architecture
                 tiled_transpose(comp, groups, outputs)}


def _schedule(comp, groups, outputs, arch) -> Schedule | None:
    held = {x.opcode for x in comp.post_order()}
    for opcode, choose in GPU_SCHEDULES.items():
        schedule = choose(comp, groups, outputs, arch) if opcode in held else None
        if schedule is not None:
            return schedule
    return None


def _stores(outputs, leaves, out_ptrs) -> list:
    """(output, its destination per leaf) of each kernel output."""
    dests = iter(Source(ptr, s) for (_, s), ptr in zip(leaves, out_ptrs))
    return [(o, [next(dests) for _ in (o.shape.leaves() if o.shape.is_tuple else [o])])
            for o in outputs]


def _emit_elements(gen: Elemental, stores: list, comp: Computation) -> int:
    """One thread per output element (or per `vector_width` consecutive elements): every
    output stored from one grid-stride loop over the largest (a smaller one by the
    threads whose position falls inside it). Returns the loop's extent."""
    b = gen.b
    by_dims: dict[tuple, list] = {}
    for o, dests in stores:
        by_dims.setdefault(dests[0].dims, []).append((o, dests, None))
    elements = max(math.prod(dims) for dims in by_dims)
    vector = vector_width(comp, [math.prod(dims) for dims in by_dims])
    with grid_stride_range(b, elements // vector) as step:
        for k in range(vector):
            i = b.add(b.mul(step, I64(vector)), I64(k)) if vector > 1 else step
            for dims, stores in by_dims.items():
                if math.prod(dims) == elements:
                    store_outputs(gen, stores, Index(dims, linear=i), i)
                    continue
                with b.if_then(b.icmp_unsigned("<", i, I64(math.prod(dims)))):
                    store_outputs(gen, stores, Index(dims, linear=i), i)
    return elements // vector


# ------------------------------------------------------------------------- whole modules

def module_kernels(module: Module) -> list[tuple[str, Computation]]:
    """(name, computation) of every kernel the module runs, in program order: each fusion,
    and each other instruction with work of its own, of the entry and the computations its
    control flow runs. Views (reshape, copy, a layout-keeping bitcast) move no data and are
    not kernels; what the CPU path would run through the interpreter is an
    UnsupportedError (the GPU has no interpreter fallback). Names are PTX identifiers,
    distinct within the module."""
    out, taken = [], set()
    for comp in executed_computations(module):
        position = {id(i): n for n, i in enumerate(comp.post_order())}
        for phase in phases.kernels(comp, fallback.why_not):
            root = phase.root
            if phase.fallback and root.opcode != "fusion":    # a fusion's member is named
                raise unsupported(root, phase.fallback)          # by emit_gpu_kernel
            if root.opcode == "constant" or is_view(root):
                continue
            body = root.attrs["calls"] if root.opcode == "fusion" else \
                phases.computation([phase], position, root.name)
            out.append((_symbol(root.name, taken), body))
    return out


def _symbol(name: str, taken: set[str]) -> str:
    """A PTX identifier for an HLO name (`fusion.3` -> `fusion_3`), not one in `taken`."""
    base = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    symbol, n = base, 1
    while symbol in taken:
        symbol, n = f"{base}_{n}", n + 1
    taken.add(symbol)
    return symbol


def launch_units(comp: Computation) -> list[list[phases.Phase]]:
    """The launches a kernel whose phases cannot share one (SplitNeeded) runs as, in phase
    order: each contraction or single-op phase alone, each run of other phases together
    (a softmax after the dot of its logits stays one row kernel). Values between them go
    through memory, as between kernels."""
    apart = set(SINGLE_OP) | set(CONTRACTIONS)
    units: list[list[phases.Phase]] = []
    for g in phases.split(comp, fallback.why_not):
        if g.root.opcode in apart or not units or units[-1][-1].root.opcode in apart:
            units.append([g])
        else:
            units[-1].append(g)
    return units


def emit_kernels(module: Module, arch: str = nvptx.DEFAULT_ARCH) -> list[GpuKernel]:
    """Every launch of the module, in order: one per kernel, several (`NAME_k`) for a
    kernel whose phases cannot share a launch."""
    named = module_kernels(module)
    taken = {name for name, _ in named}
    out = []
    for name, comp in named:
        try:
            out.append(emit_gpu_kernel(comp, name, arch))
        except SplitNeeded:
            position = {id(i): n for n, i in enumerate(comp.post_order())}
            out.extend(emit_gpu_kernel(phases.computation(unit, position, comp.name),
                                       _symbol(f"{name}_{k}", taken), arch)
                       for k, unit in enumerate(launch_units(comp)))
    return out


def emit_llvm(module: Module, arch: str = nvptx.DEFAULT_ARCH, optimized: bool = True) -> str:
    """NVPTX LLVM IR of the module's kernels as one module (after -O3, libdevice linked,
    unless `optimized` is False: then each kernel's own module)."""
    kernels = emit_kernels(module, arch)
    if not optimized:
        return "\n".join(f"; ---- {k.name}\n{k.ir}" for k in kernels)
    return str(nvptx.compile_module([k.ir for k in kernels], [k.name for k in kernels], arch))


def emit_ptx(module: Module, arch: str = nvptx.DEFAULT_ARCH) -> str:
    """PTX of every kernel the module runs, as one PTX module for `arch` (what ptxas
    assembles and the CUDA driver loads)."""
    kernels = emit_kernels(module, arch)
    return nvptx.ptx([k.ir for k in kernels], [k.name for k in kernels], arch)
