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

This slice emits loop kernels (elementwise ops and data movement fused into one pass over
the output); a kernel that needs another loop structure (reduce, dot, convolution, sort,
scatter, ...) is an UnsupportedError naming the op and its position.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from llvmlite import ir

from ..errors import UnsupportedError
from ..ir import Computation, Instruction, Module
from ..kernels import executed_computations
from . import fallback, nvptx, phases
from .elemental import Elemental, Source
from .emit_kernel import PHASES, array_constants, kernel_outputs, store_outputs
from .emit_loops import Index
from .intrinsics import declare, set_math_library
from .ltypes import I32, I64, PTR, VOID
from .program import is_view


@dataclass
class GpuKernel:
    """An emitted kernel: its LLVM IR (NVPTX triple) and what the host passes it."""
    name: str
    ir: str
    n_outputs: int
    n_inputs: int                      # parameters, then array constants
    elements: int                      # output elements: the launch covers [0, elements)
    comp: Computation


def unsupported(inst: Instruction, why: str) -> UnsupportedError:
    return UnsupportedError(f"GPU code for {inst.opcode} ({inst.name}) is not emitted yet: "
                            f"{why}", line=inst.line, column=inst.column)


def emit_gpu_kernel(comp: Computation, name: str, arch: str = nvptx.DEFAULT_ARCH) -> GpuKernel:
    """Emit loop kernel `comp` as NVPTX kernel `name`."""
    for g in phases.split(comp, fallback.why_not):
        if g.fallback:
            raise unsupported(g.root, g.fallback)
        if g.root.opcode in PHASES:
            raise unsupported(g.root, "only loop kernels (elementwise and data movement) "
                                      "have GPU code so far")
    outputs = kernel_outputs(comp)
    for o in outputs:
        if o.shape.is_tuple:
            raise unsupported(o, "a tuple-shaped kernel output")
    inputs = comp.parameters + array_constants(comp)

    mod = nvptx.new_module(name, arch)
    set_math_library(mod, nvptx.libdevice_call)
    fn = ir.Function(mod, ir.FunctionType(VOID, [PTR] * (len(outputs) + len(inputs))), name)
    fn.calling_convention = "ptx_kernel"
    fn.attributes.add("nounwind")
    for a in fn.args:
        a.add_attribute("noalias")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    out_ptrs, in_ptrs = fn.args[:len(outputs)], fn.args[len(outputs):]
    gen = Elemental(b, {id(p): Source(ptr, p.shape) for p, ptr in zip(inputs, in_ptrs)})
    by_dims: dict[tuple, list] = {}
    for o, ptr in zip(outputs, out_ptrs):
        by_dims.setdefault(o.shape.dims, []).append((o, [Source(ptr, o.shape)], None))
    elements = max(math.prod(dims) for dims in by_dims)
    with grid_stride_range(b, elements) as i:
        for dims, stores in by_dims.items():
            if math.prod(dims) == elements:
                store_outputs(gen, stores, Index(dims, linear=i), i)
                continue
            with b.if_then(b.icmp_unsigned("<", i, I64(math.prod(dims)))):
                store_outputs(gen, stores, Index(dims, linear=i), i)
    b.ret_void()
    return GpuKernel(name, str(mod), len(outputs), len(inputs), elements, comp)


def _special(b: ir.IRBuilder, register: str):
    """A PTX special register (`tid.x`, ...) as i64."""
    fn = declare(b.module, f"llvm.nvvm.read.ptx.sreg.{register}", I32, [])
    return b.zext(b.call(fn, []), I64)


class grid_stride_range:
    """`for (i = ctaid.x * ntid.x + tid.x; i < n; i += ntid.x * nctaid.x)`, rotated as
    emit_loops.for_range is; the builder ends positioned after the loop."""

    def __init__(self, b: ir.IRBuilder, n: int):
        self.b, self.n = b, I64(n)

    def __enter__(self):
        b = self.b
        block, threads = _special(b, "ctaid.x"), _special(b, "ntid.x")
        start = b.add(b.mul(block, threads), _special(b, "tid.x"))
        self.stride = b.mul(threads, _special(b, "nctaid.x"))
        fn = b.block.function
        self.body, self.done = fn.append_basic_block("i.body"), fn.append_basic_block("i.done")
        b.cbranch(b.icmp_unsigned("<", start, self.n), self.body, self.done)
        pre = b.block
        b.position_at_end(self.body)
        self.iv = b.phi(I64, name="i")
        self.iv.add_incoming(start, pre)
        return self.iv

    def __exit__(self, *exc):
        if exc[0] is not None:
            return False
        b = self.b
        nxt = b.add(self.iv, self.stride, name="i.next", flags=("nuw",))
        self.iv.add_incoming(nxt, b.block)
        b.cbranch(b.icmp_unsigned("<", nxt, self.n), self.body, self.done)
        b.position_at_end(self.done)
        return False


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
