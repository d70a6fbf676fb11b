"""Which instructions of a module run as kernels, and what they write to memory.

This is the unit fusion reduces and the benchmark compares with XLA: a kernel is a `fusion`
or any other instruction that does work of its own; parameters, constants, tuples, views
(bitcast, reshape) and control flow (whose bodies are counted instead) are not kernels.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .ir import Computation, Instruction, Module
from .ops import CONTROL, NOT_KERNELS


@dataclass
class KernelReport:
    kernels: int = 0
    fusions: int = 0
    fused_ops: int = 0          # instructions inside fusion computations (parameters excluded)
    unfused_ops: int = 0        # kernels that are single instructions
    bytes_written: int = 0      # bytes the kernels materialize between kernels
    by_kind: dict[str, int] = field(default_factory=dict)

    def summary(self) -> str:
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(self.by_kind.items()))
        return (f"{self.kernels} kernels ({self.fusions} fusions{': ' + kinds if kinds else ''}; "
                f"{self.unfused_ops} unfused ops), {self.fused_ops} fused ops, "
                f"{self.bytes_written:,} bytes materialized")


def kernel_report(module: Module) -> KernelReport:
    """Kernels of the entry computation and of the control-flow bodies it runs."""
    report = KernelReport()
    for comp in executed_computations(module):
        for inst in comp.instructions:
            if inst.opcode in NOT_KERNELS:
                continue
            report.kernels += 1
            report.bytes_written += inst.shape.byte_size
            if inst.opcode == "fusion":
                report.fusions += 1
                kind = inst.attrs.get("kind", "kLoop")
                report.by_kind[kind] = report.by_kind.get(kind, 0) + 1
                body = inst.attrs["calls"]
                report.fused_ops += sum(1 for i in body.instructions if i.opcode != "parameter")
            else:
                report.unfused_ops += 1
    return report


def executed_computations(module: Module) -> list[Computation]:
    """The entry and, transitively, the computations its control flow runs (while bodies
    and conditions, conditional branches, call targets); not reducers or fused bodies."""
    out: list[Computation] = []
    seen: set[int] = set()
    stack = [module.entry]
    while stack:
        comp = stack.pop()
        if id(comp) in seen:
            continue
        seen.add(id(comp))
        out.append(comp)
        for inst in comp.instructions:
            if inst.opcode in CONTROL:
                stack.extend(inst.called_computations())
    return out


def is_kernel(inst: Instruction) -> bool:
    return inst.opcode not in NOT_KERNELS
