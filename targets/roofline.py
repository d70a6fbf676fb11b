"""The cost model the three targets share: a roofline per kernel.

time = launch overhead + max(memory, compute) + (1 - overlap) * min(memory, compute), with
memory = bytes moved / bandwidth and compute = vector flops / vector throughput + matrix
flops / matrix throughput. Memory traffic and arithmetic mostly overlap (streaming kernels
are bandwidth-bound, dense ones compute-bound), but not perfectly: the hidden term still
costs a little, which is also what lets extraction prefer a multiply to a divide in a
bandwidth-bound loop. A kernel's overhead never overlaps. Targets set the
numbers (`Machine`) and may adjust what a kernel moves (`shape_bytes`, `fused_bytes`) or how
fast its matrix work runs (`matrix_seconds`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from ..ir import Instruction
from ..ops import TUPLE_OPS, VIEWS
from ..shape import AnyShape
from . import CostModel, Work
from .work import flops

# Ops that relabel memory or build tuples: no kernel of their own.
VIEW_LIKE = VIEWS | TUPLE_OPS | {"after-all"}
# Data movement that reads only as much as it writes.
SELECTIONS = frozenset({"slice", "dynamic-slice", "gather"})
# Ops whose work a model cannot see from the shapes (bodies run a data-dependent number of
# times, or libraries do the work).
OPAQUE = frozenset({"while", "conditional", "call", "custom-call", "fusion", "sort",
                    "scatter", "select-and-scatter", "fft", "cholesky", "triangular-solve"})


@dataclass(frozen=True)
class Machine:
    kernel_overhead_ns: float        # launch/dispatch cost of one kernel
    bytes_per_ns: float              # sustained memory bandwidth (1 GB/s = 1 B/ns)
    vector_flops_per_ns: float       # elementwise arithmetic throughput
    matrix_flops_per_ns: float       # dot/convolution throughput
    view_ns: float = 1.0             # bookkeeping cost of a view, tuple or scalar constant
    opaque_ns: float = 300.0         # extra for ops whose work is not visible (while, sort...)
    overlap: float = 0.9             # share of the smaller of memory/compute time hidden


class RooflineModel(CostModel):
    machine: Machine

    def node_cost(self, opcode: str, shape: AnyShape, attrs: Mapping[str, object],
                  operand_shapes: Sequence[AnyShape]) -> float:
        m = self.machine
        if opcode == "parameter":
            return 0.0
        if opcode in VIEW_LIKE or (opcode == "constant" and not shape.is_tuple and shape.rank == 0):
            return m.view_ns
        written = self.shape_bytes(shape)
        if opcode == "constant":
            return m.kernel_overhead_ns + written / m.bytes_per_ns
        read = written if opcode in SELECTIONS else sum(self.shape_bytes(s)
                                                        for s in operand_shapes)
        vector, matrix = flops(opcode, shape, attrs, operand_shapes)
        cost = self._roofline(read + written, vector, matrix)
        return cost + (m.opaque_ns if opcode in OPAQUE else 0.0)

    def member_work(self, inst: Instruction) -> Work:
        """Remembered: fusion prices thousands of candidate kernels made of the same
        instructions (a model lives as long as one fusion run)."""
        cache = self.__dict__.setdefault("_work_cache", {})
        found = cache.get(inst)
        if found is None:
            vector, matrix = flops(inst.opcode, inst.shape, inst.attrs,
                                   [o.shape for o in inst.operands])
            found = cache[inst] = Work(1, vector, matrix, int(inst.opcode in OPAQUE),
                                       self.fused_bytes(inst))
        return found

    def value_bytes(self, inst: Instruction) -> float:
        return self.shape_bytes(inst.shape)

    def fused_cost(self, work: Work, read: float, written: float) -> float:
        moved = read + (work.fused_bytes if work.members > 1 else 0.0) + written
        cost = self._roofline(moved, work.vector_flops, work.matrix_flops)
        return cost + (self.machine.opaque_ns if work.opaque else 0)

    def _roofline(self, moved: float, vector: float, matrix: float) -> float:
        m = self.machine
        compute = vector / m.vector_flops_per_ns + self.matrix_seconds(matrix)
        memory = moved / m.bytes_per_ns
        hidden = min(memory, compute) * m.overlap
        return m.kernel_overhead_ns + memory + compute - hidden

    # --- what targets adjust ------------------------------------------------------------
    def shape_bytes(self, shape: AnyShape) -> float:
        return max(shape.byte_size, 0)

    def fused_bytes(self, inst: Instruction) -> float:
        """Traffic `inst` adds to a kernel it shares with other instructions."""
        return 0.0

    def matrix_seconds(self, matrix_flops: float) -> float:
        return matrix_flops / self.machine.matrix_flops_per_ns

