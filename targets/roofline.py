"""The cost model the three targets share: a roofline per kernel.

time = launch overhead + max(memory, compute) + (1 - overlap) * min(memory, compute), with
memory = bytes moved / bandwidth and compute = vector flops / vector throughput + matrix
flops / matrix throughput (flops weighted per op, work.flops). How much of the shorter of
memory and arithmetic time a kernel hides is the machine's `overlap`: on a GPU nearly all
(warps in flight cover each other's loads), on one CPU core measured to be little, so that
dearer arithmetic costs time even in a bandwidth-bound loop. A kernel's overhead never
overlaps. A machine whose large kernels run on several cores (`Threads`) prices their work
beyond the splitting size at the threaded rates. Targets set the numbers (`Machine`) and may
adjust what a kernel moves (`shape_bytes`, `fused_bytes`), what its members compute
(`op_flops`) and hold on chip (`local_bytes`), or how fast its matrix work runs
(`matrix_seconds`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from ..ir import Instruction
from ..ops import TUPLE_OPS, VIEWS
from ..shape import AnyShape
from . import CostModel, Work
from .work import OP_WEIGHT, SELECTIONS, flops

# Ops that relabel memory or build tuples: no kernel of their own.
VIEW_LIKE = VIEWS | TUPLE_OPS | {"after-all"}
# Ops whose work a model cannot see from the shapes (bodies run a data-dependent number of
# times, or libraries do the work).
OPAQUE = frozenset({"while", "conditional", "call", "custom-call", "fusion", "sort",
                    "scatter", "select-and-scatter", "fft", "cholesky", "triangular-solve"})


@dataclass(frozen=True)
class Threads:
    """Rates of a kernel split across every core, and from what size a kernel is split.
    A kernel above that size is priced as its first `min_bytes` (or `min_matrix_flops`) at
    one core's rates and the rest at these: continuous and growing with size, so the model
    never prefers a larger kernel for being threaded."""
    min_bytes: float                 # bytes written from which a loop kernel is split
    min_matrix_flops: float          # matrix flops from which a dot/convolution is split
    bytes_per_ns: float
    vector_flops_per_ns: float
    matrix_flops_per_ns: float


@dataclass(frozen=True)
class Machine:
    kernel_overhead_ns: float        # launch/dispatch cost of one kernel
    bytes_per_ns: float              # sustained memory bandwidth (1 GB/s = 1 B/ns)
    vector_flops_per_ns: float       # elementwise arithmetic throughput (adds)
    matrix_flops_per_ns: float       # dot/convolution throughput
    view_ns: float                   # bookkeeping cost of a view, tuple or scalar constant
    opaque_ns: float                 # extra for ops whose work is not visible (while, sort...)
    overlap: float                   # share of the smaller of memory/compute time hidden
    op_weights: Mapping[str, float] = field(default_factory=lambda: OP_WEIGHT)  # work.flops
    threads: Threads | None = None   # None: kernels run on one core (or the model is whole-chip)
    # A cache: a kernel's first `cache_bytes` of traffic at `bytes_per_ns`, the rest at
    # `far_bytes_per_ns` (None: one bandwidth for any size).
    cache_bytes: float = 0.0
    far_bytes_per_ns: float | None = None


class RooflineModel(CostModel):
    machine: Machine

    def node_cost(self, opcode: str, shape: AnyShape, attrs: Mapping[str, object],
                  operand_shapes: Sequence[AnyShape]) -> float:
        m = self.machine
        if opcode == "parameter":
            return 0.0
        if opcode in VIEW_LIKE or (opcode == "constant" and not shape.is_tuple and shape.rank == 0):
            return m.view_ns
        if opcode == "broadcast" and operand_shapes and operand_shapes[0].rank == 0:
            return m.view_ns    # a splat: every target computes it inside its readers' kernels
        written = self.shape_bytes(shape)
        if opcode == "constant":
            return m.kernel_overhead_ns + self._memory(written)
        read = written if opcode in SELECTIONS else sum(self.shape_bytes(s)
                                                        for s in operand_shapes)
        vector, matrix = self.op_flops(opcode, shape, attrs, operand_shapes)
        cost = self._roofline(read + written, vector, matrix, written)
        return cost + (m.opaque_ns if opcode in OPAQUE else 0.0)

    def member_work(self, inst: Instruction) -> Work:
        """Remembered: fusion prices thousands of candidate kernels made of the same
        instructions (a model lives as long as one fusion run)."""
        cache = self.__dict__.setdefault("_work_cache", {})
        found = cache.get(inst)
        if found is None:
            operand_shapes = [o.shape for o in inst.operands]
            vector, matrix = self.op_flops(inst.opcode, inst.shape, inst.attrs, operand_shapes)
            found = cache[inst] = Work(1, vector, matrix, int(inst.opcode in OPAQUE),
                                       self.fused_bytes(inst),
                                       self.local_bytes(inst.opcode, inst.shape, inst.attrs,
                                                        operand_shapes))
        return found

    def value_bytes(self, inst: Instruction) -> float:
        return self.shape_bytes(inst.shape)

    def fused_cost(self, work: Work, read: float, written: float) -> float:
        moved = read + (work.fused_bytes if work.members > 1 else 0.0) + written
        cost = self._roofline(moved, work.vector_flops, work.matrix_flops, written)
        return cost + (self.machine.opaque_ns if work.opaque else 0)

    def _roofline(self, moved: float, vector: float, matrix: float, written: float) -> float:
        m, t = self.machine, self.machine.threads
        time = self._overlapped(self._memory(moved),
                                vector / m.vector_flops_per_ns + self.matrix_seconds(matrix))
        if t is not None:
            serial_share = min(1.0, t.min_bytes / written if written else 1.0,
                               t.min_matrix_flops / matrix if matrix else 1.0)
            if serial_share < 1.0:
                threaded = self._overlapped(moved / t.bytes_per_ns,
                                            vector / t.vector_flops_per_ns
                                            + matrix / t.matrix_flops_per_ns)
                time = serial_share * time + (1.0 - serial_share) * threaded
        return m.kernel_overhead_ns + time

    def _memory(self, moved: float) -> float:
        """One core's time to move `moved` bytes, from its cache as far as it holds them."""
        m = self.machine
        if m.far_bytes_per_ns is None:
            return moved / m.bytes_per_ns
        near = min(moved, m.cache_bytes)
        return near / m.bytes_per_ns + (moved - near) / m.far_bytes_per_ns

    def _overlapped(self, memory: float, compute: float) -> float:
        return memory + compute - min(memory, compute) * self.machine.overlap

    # --- what targets adjust ------------------------------------------------------------
    def shape_bytes(self, shape: AnyShape) -> float:
        return max(shape.byte_size, 0)

    def op_flops(self, opcode: str, shape: AnyShape, attrs: Mapping[str, object],
                 operand_shapes: Sequence[AnyShape]) -> tuple[float, float]:
        """(vector, matrix) flops of one instruction (work.flops)."""
        return flops(opcode, shape, attrs, operand_shapes, self.machine.op_weights)

    def local_bytes(self, opcode: str, shape: AnyShape, attrs: Mapping[str, object],
                    operand_shapes: Sequence[AnyShape]) -> float:
        """On-chip memory one member holds in its kernel (Work.local_bytes)."""
        return 0.0

    def fused_bytes(self, inst: Instruction) -> float:
        """Traffic `inst` adds to a kernel it shares with other instructions."""
        return 0.0

    def matrix_seconds(self, matrix_flops: float) -> float:
        return matrix_flops / self.machine.matrix_flops_per_ns

