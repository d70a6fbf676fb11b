"""What a GPU kernel frame of its own (sort, scatter, ...) is given and what it returns.

emit_gpu.py builds the kernel function and hands a frame in `SINGLE_OP` a `Frame`: the
elemental generator over the kernel's inputs, the phase root it computes, where its output
leaves go, the inputs in argument order, and the scratch buffer when the frame asked for
one. The frame emits the body and returns its `Launch`: the grid it is correct for, and
what the host must do before launching it.
"""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from ..errors import UnsupportedError
from ..ir import Instruction
from .elemental import Elemental, Source
from .intrinsics import declare
from .ltypes import I64, VOID


class SplitNeeded(UnsupportedError):
    """The kernel's phases cannot share one launch (a dot whose result a reduce reads, a
    sort fused with other outputs): each runs as a launch of its own (emit_gpu.launch_units),
    with the values between them in memory."""


def unsupported(inst: Instruction, why: str, split: bool = False) -> UnsupportedError:
    """The one-line error for a kernel op without GPU code, at the op's position; with
    `split`, the SplitNeeded that makes its kernel run as several launches."""
    error = SplitNeeded if split else UnsupportedError
    return error(f"GPU code for {inst.opcode} ({inst.name}) is not emitted yet: {why}",
                 line=inst.line, column=inst.column)


@dataclass
class Frame:
    gen: Elemental
    root: Instruction
    dests: list[Source]                # one per leaf of root's shape
    inputs: list[Instruction]          # the kernel's inputs, in argument order
    scratch: ir.Value | None = None    # the zeroed scratch buffer, if the frame has one


@dataclass
class Launch:
    """`blocks` blocks of `threads` threads; before the launch the host copies input
    `j` into output leaf `i` for each (i, j) of `initial_copies` (same bytes)."""
    threads: int
    blocks: int
    initial_copies: tuple[tuple[int, int], ...] = ()


def barrier(b: ir.IRBuilder) -> None:
    """`bar.sync 0`: every thread of the block waits here; shared and global memory writes
    before it are visible to the block after it."""
    b.call(declare(b.module, "llvm.nvvm.barrier0", VOID, []), [])


def shared_array(mod: ir.Module, t: ir.Type, n: int, name: str):
    """n slots of type `t` in the block's shared memory (address space 3)."""
    arr = ir.ArrayType(t, n)
    gv = ir.GlobalVariable(mod, arr, mod.get_unique_name(name), addrspace=3)
    gv.linkage = "internal"
    gv.initializer = ir.Constant(arr, ir.Undefined)
    gv.align = 8
    return gv


def shared_slot(b: ir.IRBuilder, array, i):
    return b.gep(array, [I64(0), i], inbounds=True)
