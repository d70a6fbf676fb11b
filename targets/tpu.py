"""The TPU cost model: one chip of a TPU generation (v4, v5e, v5p, v6e; default v5e), with
its tiled memory layout, its MXUs and its VMEM.

A kernel's time is a roofline: per-kernel overhead + max(compute, HBM time). HBM time moves
every value at tile granularity; compute is the vector work over padded dims at the vector
units' rate plus whole MXU passes at the bf16 peak (an f32 dot at its precision's pass
count): tpu_kernels.py says how each is counted, tpu_generations.py where every rate comes
from. A kernel whose VMEM blocks exceed one TensorCore's VMEM is refused (`fits`), so fusion
never forms it.
"""
from __future__ import annotations

from typing import Mapping, NamedTuple, Sequence

from ..ir import Instruction
from ..kernels import is_kernel
from ..shape import AnyShape
from . import Work
from .roofline import Machine, RooflineModel
from .tpu_generations import DEFAULT_GENERATION, TpuGeneration, generation
from .tpu_kernels import moves_data, op_flops, stored_bytes, vmem_bytes

# Not measured: a TPU kernel's fixed cost, the DMA setup and pipeline fill and drain of one
# fusion inside the single program XLA runs per step (no host launch per kernel).
KERNEL_OVERHEAD_NS = 500.0
DOUBLE_BUFFERED = 2              # every block has a second buffer being copied meanwhile


class TimeSplit(NamedTuple):
    """A kernel's estimated time in its parts, ns."""
    overhead: float
    compute: float
    memory: float

    @property
    def total(self) -> float:
        return self.overhead + max(self.compute, self.memory)

    @property
    def bound(self) -> str:
        """What the time is spent on most: compute, memory, or the fixed overhead."""
        if self.overhead >= max(self.compute, self.memory):
            return "overhead"
        return "compute" if self.compute >= self.memory else "memory"


def machine(gen: TpuGeneration) -> Machine:
    return Machine(
        kernel_overhead_ns=KERNEL_OVERHEAD_NS,
        bytes_per_ns=gen.hbm_bytes_per_ns,
        vector_flops_per_ns=gen.vector_flops_per_ns,
        matrix_flops_per_ns=gen.bf16_flops_per_ns,
        view_ns=1.0,                 # not a time: keeps node_cost positive (fewer ops win)
        opaque_ns=300.0,             # not measured: a short extra step for control flow
        overlap=1.0,                 # the roofline: DMA of the next block hides under compute
    )


class TpuCostModel(RooflineModel):
    name = "tpu"

    def __init__(self, tpu_gen: str | None = None):
        self.generation = generation(tpu_gen or DEFAULT_GENERATION)
        self.machine = machine(self.generation)

    def shape_bytes(self, shape: AnyShape) -> float:
        return stored_bytes(shape)

    def node_cost(self, opcode: str, shape: AnyShape, attrs: Mapping[str, object],
                  operand_shapes: Sequence[AnyShape]) -> float:
        """A reshape that moves data (tpu_kernels.moves_data) costs a copy."""
        relayout = moves_data(opcode, shape, operand_shapes)
        return super().node_cost("copy" if relayout else opcode, shape, attrs, operand_shapes)

    def runs_as_kernel(self, inst: Instruction) -> bool:
        return is_kernel(inst) or moves_data(inst.opcode, inst.shape,
                                             [o.shape for o in inst.operands])

    def op_flops(self, opcode: str, shape: AnyShape, attrs: Mapping[str, object],
                 operand_shapes: Sequence[AnyShape]) -> tuple[float, float]:
        return op_flops(self.generation, opcode, shape, attrs, operand_shapes,
                        self.machine.op_weights)

    def local_bytes(self, opcode: str, shape: AnyShape, attrs: Mapping[str, object],
                    operand_shapes: Sequence[AnyShape]) -> float:
        return vmem_bytes(self.generation, opcode, shape, attrs, operand_shapes)

    def vmem_footprint(self, work: Work) -> float:
        """VMEM a kernel whose members add up to `work` holds on one TensorCore."""
        return DOUBLE_BUFFERED * work.local_bytes

    def fits(self, work: Work) -> bool:
        return self.vmem_footprint(work) <= self.generation.vmem_bytes

    def time_split(self, work: Work, read: float, written: float) -> TimeSplit:
        """fused_cost's parts (opaque members add to the overhead)."""
        m = self.machine
        return TimeSplit(m.kernel_overhead_ns + (m.opaque_ns if work.opaque else 0.0),
                         work.vector_flops / m.vector_flops_per_ns
                         + self.matrix_seconds(work.matrix_flops),
                         self._memory(read + written))
