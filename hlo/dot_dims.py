"""The three roles of a dot operand's dimensions, read once from its attributes.

Batch dimensions pair up between the operands and lead the result; contracting ones pair up
and are summed over; the rest ("free") follow in the result, lhs's then rhs's, each in
operand order. Shape inference, the interpreter and the lowering all split dimensions so.
"""
from __future__ import annotations

from typing import Mapping, NamedTuple, Sequence


class OperandDims(NamedTuple):
    batch: list[int]
    contracting: list[int]
    free: list[int]


def free_dims(rank: int, batch: Sequence[int], contracting: Sequence[int]) -> list[int]:
    """The dimensions of an operand of this rank that are neither batch nor contracting."""
    return [d for d in range(rank) if d not in batch and d not in contracting]


def dot_dims(attrs: Mapping[str, object], lhs_rank: int,
             rhs_rank: int) -> tuple[OperandDims, OperandDims]:
    """(lhs, rhs) dimension roles of a dot with these attributes (absent lists are empty)."""
    def side(name: str, rank: int) -> OperandDims:
        batch = list(attrs.get(f"{name}_batch_dims", ()))
        contracting = list(attrs.get(f"{name}_contracting_dims", ()))
        return OperandDims(batch, contracting, free_dims(rank, batch, contracting))
    return side("lhs", lhs_rank), side("rhs", rhs_rank)
