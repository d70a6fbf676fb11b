"""Targets: what extraction minimizes, per machine.

A cost model prices one instruction from its opcode, result shape, attributes and operand
shapes; extraction sums the prices of the instructions a program runs, counting a shared
instruction once. Fusion-aware models (GPU, TPU) extend the same interface.

    model = cost_model("cpu")
    model.node_cost("add", f32_8x128, {}, [f32_8x128, f32_8x128])   # -> nanoseconds
"""
from __future__ import annotations

import abc
from typing import Mapping, Sequence

from ..shape import AnyShape


class CostModel(abc.ABC):
    """Estimated run time, in nanoseconds, of one instruction executed on its own."""

    name: str

    @abc.abstractmethod
    def node_cost(self, opcode: str, shape: AnyShape, attrs: Mapping[str, object],
                  operand_shapes: Sequence[AnyShape]) -> float:
        """Must be positive for anything but parameters, so that fewer instructions are
        always preferred at equal traffic. `attrs` holds the instruction's typed attributes
        (e.g. "dimensions", "lhs_contracting_dims", "window")."""


def cost_model(target: str) -> CostModel:
    """The cost model of a target by name ("cpu"); KeyError names the known ones."""
    if target == "cpu":
        from .cpu import CpuCostModel
        return CpuCostModel()
    raise KeyError(f"unknown target '{target}' (known: {', '.join(TARGETS)})")


TARGETS = ("cpu",)
