"""Targets: what extraction and fusion minimize, per machine.

A cost model estimates run time in nanoseconds. `node_cost` prices one instruction run on its
own (extraction sums these over the chosen program, a shared instruction once);
`kernel_cost` prices a kernel: a group of instructions computed together that reads its
inputs from memory once and writes only its outputs (fusion compares these). A kernel's price
depends on its members only through the sum of their `Work` and on its inputs and outputs
only through their bytes, so fusion keeps these sums per kernel and adds to them as kernels
merge (`fused_cost`) instead of re-reading every member of a growing kernel.

    model = cost_model("gpu")
    model.kernel_cost(KernelView(members, inputs, outputs))
    model.fused_cost(model.member_work(a) + model.member_work(b), read_bytes, written_bytes)
    model.fits(work)        # False: no such kernel may be formed (the TPU's VMEM)
"""
from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Callable, Mapping, NamedTuple, Sequence

from ..ir import Instruction
from ..shape import AnyShape
from .work import bytes_read

TARGETS = ("cpu", "gpu", "tpu")


@dataclass(frozen=True)
class KernelView:
    """One kernel as a cost model sees it. `members` are computed once each per kernel (an
    instruction fused into two kernels appears in both); `inputs` are the distinct values it
    reads from memory (as much of each as its members read: work.bytes_read), `outputs`
    those it writes; members come operands first."""
    members: Sequence[Instruction]
    inputs: Sequence[Instruction]
    outputs: Sequence[Instruction]


class Work(NamedTuple):
    """What members contribute to a kernel's cost, summed over the members. The counts are
    whole numbers (held in floats), so a total kept as members come and go is exact."""
    members: int = 0
    vector_flops: float = 0.0
    matrix_flops: float = 0.0
    opaque: int = 0                 # members whose work the model cannot see (while, sort...)
    fused_bytes: float = 0.0        # traffic a member adds only when fused with others
    local_bytes: float = 0.0        # on-chip memory a member holds while its kernel runs

    def __add__(self, other: Work) -> Work:
        return Work(self[0] + other[0], self[1] + other[1], self[2] + other[2],
                    self[3] + other[3], self[4] + other[4], self[5] + other[5])

    def __sub__(self, other: Work) -> Work:
        return Work(self[0] - other[0], self[1] - other[1], self[2] - other[2],
                    self[3] - other[3], self[4] - other[4], self[5] - other[5])


class CostModel(abc.ABC):
    name: str

    @abc.abstractmethod
    def node_cost(self, opcode: str, shape: AnyShape, attrs: Mapping[str, object],
                  operand_shapes: Sequence[AnyShape]) -> float:
        """One instruction executed as its own kernel. Must be positive for anything but
        parameters, so that fewer instructions are preferred at equal traffic."""

    def kernel_cost(self, kernel: KernelView) -> float:
        """A fused kernel: launch overhead, traffic at its boundary, its arithmetic."""
        work = sum((self.member_work(m) for m in kernel.members), Work())
        read = bytes_read(kernel.members, kernel.outputs, self.value_bytes)
        return self.fused_cost(work, read, sum(self.value_bytes(o) for o in kernel.outputs))

    @abc.abstractmethod
    def member_work(self, inst: Instruction) -> Work:
        """One member's share of the work of any kernel it is computed in."""

    @abc.abstractmethod
    def value_bytes(self, inst: Instruction) -> float:
        """The bytes that reading or writing the value of `inst` moves."""

    @abc.abstractmethod
    def fused_cost(self, work: Work, read: float, written: float) -> float:
        """A kernel whose members add up to `work`, reading and writing these many bytes."""

    def fits(self, work: Work) -> bool:
        """Whether a kernel whose members add up to `work` can run as one kernel at all
        (on the TPU: its blocks fit in VMEM). Fusion makes no kernel that does not."""
        return True

    def runs_as_kernel(self, inst: Instruction) -> bool:
        """Whether `inst` of an optimized module runs as a kernel of its own
        (hlo_opt.kernels.is_kernel; the TPU adds the reshapes that move data)."""
        from ..kernels import is_kernel
        return is_kernel(inst)

    def module_cost(self, module) -> float:
        """Estimated time of one run of a module: its kernels (runs_as_kernel), each
        priced as a kernel, a fusion by its fused computation. Loop bodies count once."""
        from ..kernels import executed_computations
        total = 0.0
        for comp in executed_computations(module):
            for inst in comp.instructions:
                if self.runs_as_kernel(inst):
                    total += self.kernel_cost(kernel_view(inst))
        return total


def kernel_view(inst: Instruction) -> KernelView:
    """A kernel instruction of a module (hlo_opt.kernels.is_kernel) as its model sees it: a
    fusion's body's members, its body's parameters (what its members read of them: work.bytes_read) and its body's results; an op alone, itself."""
    if inst.opcode != "fusion":
        return KernelView([inst], list(inst.operands), [inst])
    body = inst.attrs["calls"]
    root = body.root
    outputs = list(root.operands) if root.opcode == "tuple" else [root]
    members = [i for i in body.instructions
               if i.opcode != "parameter" and not (i is root and root.opcode == "tuple")]
    return KernelView(members, list(body.parameters), outputs)


def cost_model(target: str, tpu_gen: str | None = None) -> CostModel:
    """The cost model of a target by name; KeyError names the known ones. `tpu_gen`: the
    TPU generation the tpu target models (tpu_generations.GENERATIONS; default v5e)."""
    if target == "cpu":
        from .cpu import CpuCostModel
        return CpuCostModel()
    if target == "gpu":
        from .gpu import GpuCostModel
        return GpuCostModel()
    if target == "tpu":
        from .tpu import TpuCostModel
        return TpuCostModel(tpu_gen)
    raise KeyError(f"unknown target '{target}' (known: {', '.join(TARGETS)})")


def emits(target: str) -> Callable[[Instruction], bool]:
    """Whether the target's code generator computes an instruction in a kernel. One it
    cannot emit runs on its own (on the CPU: through the interpreter, lowering/fallback.py),
    so fusion never puts it in a kernel with others. The GPU and TPU models have no code
    generator here: everything counts as emitted."""
    if target == "cpu":
        from .cpu_facts import emits as cpu_emits
        return cpu_emits
    return _always


def _always(inst: Instruction) -> bool:
    return True
