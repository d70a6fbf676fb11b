"""Dots read transposed computed transposed, before kernels form.

A dot's result lists its batch dimensions, then lhs's free ones, then rhs's. A transpose that
keeps the batch dimensions and swaps the two free blocks (a gradient's `transpose(dot(a, b))`
in 2-D) reads the dot with its operands' roles swapped: the same as `dot(b, a)`, the same
GEMM with no transposing pass after it. JAX's reverse mode writes such transposes where XLA
makes them layout changes (the dot writes its result in the transposed layout); here the
dot itself is rewritten, so an elementwise reader (a weight gradient's accumulation) becomes
its epilogue instead of a kernel of its own that reads it through the transpose.
"""
from __future__ import annotations

from ..dot_dims import dot_dims
from ..ir import Computation, Instruction

SWAPPED_ATTRIBUTES = (("lhs_contracting_dims", "rhs_contracting_dims"),
                      ("lhs_batch_dims", "rhs_batch_dims"))


def fold_transposed_dots(comp: Computation) -> int:
    """Replace, in `comp` (changed in place), each dot that is read only through transposes
    swapping its free blocks by the dot of its operands swapped, which those transposes'
    readers read instead; returns how many."""
    users: dict[int, list[Instruction]] = {id(i): [] for i in comp.instructions}
    for inst in comp.instructions:
        for op in inst.operands:
            users.setdefault(id(op), []).append(inst)
    swapped: dict[int, Instruction] = {}        # id(dot or transpose) -> the swapped dot
    for inst in comp.instructions:
        readers = users[id(inst)]
        if inst.opcode != "dot" or inst is comp.root or not readers:
            continue
        swap = _swapping(inst)
        if swap and all(u.opcode == "transpose" and list(u.attrs["dimensions"]) == swap
                        for u in readers):
            swapped[id(inst)] = _swapped_dot(inst, readers[0])
            swapped.update({id(u): swapped[id(inst)] for u in readers})
    if not swapped:
        return 0
    kept: list[Instruction] = []
    for inst in comp.instructions:              # the dot's place: its operands come before
        if inst.opcode == "dot" and id(inst) in swapped:
            kept.append(swapped[id(inst)])
        elif id(inst) not in swapped:
            kept.append(inst)
    for inst in kept:
        inst.operands = [swapped.get(id(o), o) for o in inst.operands]
    comp.instructions = kept
    comp.root = swapped.get(id(comp.root), comp.root)
    return len({id(d) for d in swapped.values()})


def _swapping(dot: Instruction) -> list[int] | None:
    """The permutation that keeps `dot`'s batch dimensions and puts rhs's free block before
    lhs's; None when either block is empty (such a transpose moves nothing or is not one)."""
    lhs, rhs = dot_dims(dot.attrs, dot.operands[0].shape.rank, dot.operands[1].shape.rank)
    batch, n_lhs, n_rhs = len(lhs.batch), len(lhs.free), len(rhs.free)
    if not n_lhs or not n_rhs or len(dot.operands) != 2:
        return None
    return [*range(batch), *range(batch + n_lhs, batch + n_lhs + n_rhs),
            *range(batch, batch + n_lhs)]


def _swapped_dot(dot: Instruction, transpose: Instruction) -> Instruction:
    """`dot(rhs, lhs)`, of the transpose's shape."""
    attrs = dict(dot.attrs)
    for lhs_key, rhs_key in SWAPPED_ATTRIBUTES:
        for key, other in ((lhs_key, rhs_key), (rhs_key, lhs_key)):
            if other in dot.attrs:
                attrs[key] = dot.attrs[other]
            else:
                attrs.pop(key, None)
    if "operand_precision" in attrs:
        attrs["operand_precision"] = tuple(reversed(attrs["operand_precision"]))
    return Instruction(dot.name, "dot", transpose.shape,
                       dot.operands[::-1], attrs, line=dot.line, column=dot.column)
