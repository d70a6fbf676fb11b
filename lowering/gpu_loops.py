"""Thread positions and strided loops of GPU kernels (the NVPTX special registers)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from llvmlite import ir

from ..ops import EXPENSIVE_PER_ELEMENT
from .intrinsics import declare
from .ltypes import I32, I64

# Alignment of every buffer a kernel is passed (outputs, inputs, scratch), which the host
# program guarantees (device allocations are 256-byte aligned, arena offsets multiples of
# emit_kernel.ALIGN): what lets LLVM merge adjacent accesses into 16-byte ones.
BUFFER_ALIGN = 16
VECTOR = 4                        # consecutive elements per thread step of a cheap loop


def special(b: ir.IRBuilder, register: str):
    """A PTX special register (`tid.x`, `ctaid.x`, `ntid.x`, `nctaid.x`) as i64."""
    fn = declare(b.module, f"llvm.nvvm.read.ptx.sreg.{register}", I32, [])
    return b.zext(b.call(fn, []), I64)


class strided:
    """`for (i = start; i < n; i += step)`, rotated as emit_loops.for_range is; the builder
    ends positioned after the loop."""

    def __init__(self, b: ir.IRBuilder, start, step, n: int):
        self.b, self.start, self.step, self.n = b, start, step, I64(n)

    def __enter__(self):
        b = self.b
        fn = b.block.function
        self.body, self.done = fn.append_basic_block("i.body"), fn.append_basic_block("i.done")
        b.cbranch(b.icmp_unsigned("<", self.start, self.n), self.body, self.done)
        pre = b.block
        b.position_at_end(self.body)
        self.iv = b.phi(I64, name="i")
        self.iv.add_incoming(self.start, pre)
        return self.iv

    def __exit__(self, *exc):
        if exc[0] is not None:
            return False
        b = self.b
        nxt = b.add(self.iv, self.step, name="i.next", flags=("nuw",))
        self.iv.add_incoming(nxt, b.block)
        b.cbranch(b.icmp_unsigned("<", nxt, self.n), self.body, self.done)
        b.position_at_end(self.done)
        return False


def vector_width(comp, sizes: list[int], own_ops: frozenset = frozenset()) -> int:
    """Consecutive elements each step of a loop's threads takes, over loops of `sizes`
    (a loop kernel's outputs, a reduce's rows): VECTOR, so that the accesses of inputs
    read in order merge into ld/st.v4 or v2, when the sizes are one multiple of VECTOR and
    the kernel is cheap per element: no op from EXPENSIVE_PER_ELEMENT, whose code would be
    repeated VECTOR times (XLA does not unroll such loops either), and no reduce or fft
    folded per element (except the reduces the schedule computes itself, `own_ops`); else 1."""
    cheap = not any((x.opcode in EXPENSIVE_PER_ELEMENT or x.opcode in ("reduce", "fft")) and
                    x.opcode not in own_ops for x in comp.post_order())
    same = len(set(sizes)) == 1 and sizes[0] % VECTOR == 0
    return VECTOR if cheap and same else 1


def grid_stride_range(b: ir.IRBuilder, n: int) -> strided:
    """One thread per position of [0, n): from `ctaid.x * ntid.x + tid.x` in steps of
    `ntid.x * nctaid.x`, so any launch covers the range."""
    threads = special(b, "ntid.x")
    start = b.add(b.mul(special(b, "ctaid.x"), threads), special(b, "tid.x"))
    return strided(b, start, b.mul(threads, special(b, "nctaid.x")), n)


@dataclass
class Schedule:
    """A kernel structure other than one thread per output element, chosen for a kernel:
    `emit(gen, stores, scratch)` writes its body (`stores`: each output with its
    destinations; `scratch`: the scratch pointer, or None), and the kernel is launched as
    `blocks` blocks of `threads` threads, with a zeroed buffer of `scratch_bytes` bytes
    when that is > 0, after the host's `initial_copies` (emit_gpu.GpuKernel). `emit` may
    instead return the grid it settled on while emitting (a gpu_frame.Launch)."""
    emit: Callable
    threads: int
    blocks: int
    scratch_bytes: int = 0
    initial_copies: tuple[tuple[int, int], ...] = ()
