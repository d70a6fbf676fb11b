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

A kernel that is one stored row reduction has a frame of its own (emit_gpu_reduce.py), as
has one computing a dot or convolution with its epilogue (emit_gpu_dot.py; `GPU_FRAMES`
maps a phase root to such a frame); any other reduce or reduce-window is computed per
output element by its elemental generator inside this loop (a fold over the reduced
elements per thread: correct, not fast). A kernel that needs another loop structure (sort,
scatter, ...) is an UnsupportedError naming the op and its position.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from llvmlite import ir

from ..errors import UnsupportedError
from ..ir import Computation, Instruction, Module
from ..kernels import executed_computations
from . import emit_gpu_dot, fallback, nvptx, phases
from .elemental import Elemental, Source
from .emit_gpu_reduce import ROW_THREADS, emit_rows, row_reduce, rows_of
from .emit_kernel import PHASES, array_constants, kernel_outputs, store_outputs
from .emit_loops import Index
from .gpu_loops import grid_stride_range
from .intrinsics import set_math_library
from .ltypes import I64, PTR, VOID
from .program import is_view


LOOP_THREADS = 256                 # threads per block of a loop kernel
# Ops with a loop structure of their own that a GPU thread computes one output element of
# (looping over the reduced elements or the window, as elemental.py's generators do).
PER_THREAD = frozenset({"reduce", "reduce-window"})
# Phase root opcode -> the frame of a kernel holding such a phase, with a loop structure of
# its own: frame(gen, comp, phases, stores, arch) emits the body and returns (threads, blocks).
GPU_FRAMES = {"dot": emit_gpu_dot.emit_gemm_kernel,
              "convolution": emit_gpu_dot.emit_gemm_kernel}


@dataclass
class GpuKernel:
    """An emitted kernel: its LLVM IR (NVPTX triple), what the host passes it, and how to
    launch it (`blocks` blocks of `threads` threads; any number of blocks is correct, this
    one gives each thread one element, or each block one row of a row reduction or one
    output tile of a dot; row and dot kernels need exactly `threads` threads per block).
    Shared memory is static (in the PTX)."""
    name: str
    ir: str
    n_outputs: int                     # output buffers (a tuple-shaped output has several)
    n_inputs: int                      # parameters, then array constants
    elements: int                      # output elements: the launch covers [0, elements)
    comp: Computation
    threads: int = LOOP_THREADS
    blocks: int = 1


def unsupported(inst: Instruction, why: str) -> UnsupportedError:
    return UnsupportedError(f"GPU code for {inst.opcode} ({inst.name}) is not emitted yet: "
                            f"{why}", line=inst.line, column=inst.column)


def emit_gpu_kernel(comp: Computation, name: str, arch: str = nvptx.DEFAULT_ARCH) -> GpuKernel:
    """Emit kernel `comp` as NVPTX kernel `name`: a row reduction (emit_gpu_reduce), else
    one thread per output element."""
    groups = phases.split(comp, fallback.why_not)
    for g in groups:
        if g.fallback:
            raise unsupported(g.root, g.fallback)
        if g.root.opcode in PHASES and g.root.opcode not in PER_THREAD | set(GPU_FRAMES):
            raise unsupported(g.root, "only loop kernels (elementwise, data movement) and "
                                      "reductions have GPU code so far")
    outputs = kernel_outputs(comp)
    leaves = [(o, s) for o in outputs for s in (o.shape.leaves() if o.shape.is_tuple
                                                else [o.shape])]
    inputs = comp.parameters + array_constants(comp)

    mod = nvptx.new_module(name, arch)
    set_math_library(mod, nvptx.libdevice_call)
    fn = ir.Function(mod, ir.FunctionType(VOID, [PTR] * (len(leaves) + len(inputs))), name)
    fn.calling_convention = "ptx_kernel"
    fn.attributes.add("nounwind")
    for a in fn.args:
        a.add_attribute("noalias")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    out_ptrs, in_ptrs = fn.args[:len(leaves)], fn.args[len(leaves):]
    gen = Elemental(b, {id(p): Source(ptr, p.shape) for p, ptr in zip(inputs, in_ptrs)})
    stores = _stores(outputs, leaves, out_ptrs)
    row = row_reduce(comp, groups, outputs)
    framed = [g.root.opcode for g in groups if g.root.opcode in GPU_FRAMES]
    if framed:
        launch = GPU_FRAMES[framed[0]](gen, comp, groups, stores, arch)
    elif row is not None:
        emit_rows(gen, *row, stores)
        rows, _ = rows_of(row[0][0])
        launch = (ROW_THREADS, max(1, rows))
    else:
        elements = _emit_elements(gen, stores)
        launch = (LOOP_THREADS, max(1, -(-elements // LOOP_THREADS)))
    b.ret_void()
    elements = max(s.num_elements for _, s in leaves)
    return GpuKernel(name, str(mod), len(leaves), len(inputs), elements, comp, *launch)


def _stores(outputs, leaves, out_ptrs) -> list:
    """(output, its destination per leaf) of each kernel output."""
    dests = iter(Source(ptr, s) for (_, s), ptr in zip(leaves, out_ptrs))
    return [(o, [next(dests) for _ in (o.shape.leaves() if o.shape.is_tuple else [o])])
            for o in outputs]


def _emit_elements(gen: Elemental, stores: list) -> int:
    """One thread per output element: every output stored from one grid-stride loop over
    the largest (a smaller one by the threads whose position falls inside it). Returns the
    loop's extent."""
    b = gen.b
    by_dims: dict[tuple, list] = {}
    for o, dests in stores:
        by_dims.setdefault(dests[0].dims, []).append((o, dests, None))
    elements = max(math.prod(dims) for dims in by_dims)
    with grid_stride_range(b, elements) as i:
        for dims, stores in by_dims.items():
            if math.prod(dims) == elements:
                store_outputs(gen, stores, Index(dims, linear=i), i)
                continue
            with b.if_then(b.icmp_unsigned("<", i, I64(math.prod(dims)))):
                store_outputs(gen, stores, Index(dims, linear=i), i)
    return elements


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


def emit_kernels(module: Module, arch: str = nvptx.DEFAULT_ARCH) -> list[GpuKernel]:
    return [emit_gpu_kernel(comp, name, arch) for name, comp in module_kernels(module)]


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
