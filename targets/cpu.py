"""The CPU cost model: one core streaming through memory, one kernel per instruction.

cost = launch overhead + bytes moved / bandwidth + flops × per-op weight / throughput.
Every number lives in `CpuParameters`; they are round figures for a current x86 core
(order of magnitude matters, not the last digit: extraction compares programs).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from ..ops import OPS, is_elementwise
from ..shape import AnyShape
from . import CostModel


@dataclass(frozen=True)
class CpuParameters:
    kernel_overhead_ns: float = 30.0     # loop setup and dispatch of one materialized op
    view_ns: float = 1.0                 # ops that only relabel memory (bitcast, tuple, gte)
    bytes_per_ns: float = 10.0           # sustained single-core memory bandwidth, 10 GB/s
    flops_per_ns: float = 8.0            # SIMD elementwise throughput, 8 GFLOP/s
    matmul_flops_per_ns: float = 50.0    # blocked GEMM / convolution with FMA, 50 GFLOP/s
    opaque_ns: float = 300.0             # calls whose work the model cannot see (while, ...)
    # Flops per element for ops dearer than one add (polynomial approximations, divisions).
    op_weight: Mapping[str, float] = field(default_factory=lambda: {
        **dict.fromkeys(("divide", "remainder", "sqrt", "rsqrt", "cbrt"), 4.0),
        **dict.fromkeys(("exponential", "exponential-minus-one", "log", "log-plus-one",
                         "logistic", "tanh", "sine", "cosine", "tan", "atan2"), 20.0),
        "erf": 30.0, "power": 40.0,
    })


VIEWS = frozenset({"bitcast", "tuple", "get-tuple-element", "reshape", "after-all"})
# Data movement that reads only as much as it writes.
SELECTIONS = frozenset({"slice", "dynamic-slice", "gather"})
OPAQUE = frozenset({"while", "conditional", "call", "custom-call", "fusion", "sort",
                    "scatter", "select-and-scatter", "fft", "cholesky", "triangular-solve"})


class CpuCostModel(CostModel):
    name = "cpu"

    def __init__(self, parameters: CpuParameters = CpuParameters()):
        self.p = parameters

    def node_cost(self, opcode: str, shape: AnyShape, attrs: Mapping[str, object],
                  operand_shapes: Sequence[AnyShape]) -> float:
        p = self.p
        if opcode == "parameter":
            return 0.0
        if opcode in VIEWS:
            return p.view_ns
        out_bytes = shape.byte_size
        if opcode == "constant":
            return p.view_ns if not shape.is_tuple and shape.rank == 0 else \
                p.kernel_overhead_ns + out_bytes / p.bytes_per_ns
        read = out_bytes if opcode in SELECTIONS else sum(s.byte_size for s in operand_shapes)
        memory = p.kernel_overhead_ns + (read + out_bytes) / p.bytes_per_ns
        if opcode in OPAQUE:
            return memory + p.opaque_ns
        # max(): a dynamic dimension (size -1) must not make a cost negative
        return max(memory + self._flops(opcode, shape, attrs, operand_shapes), p.view_ns)

    def _flops(self, opcode: str, shape: AnyShape, attrs, operand_shapes) -> float:
        """Compute time in ns (0 for pure data movement)."""
        p = self.p
        if shape.is_tuple:
            out = sum(s.num_elements for s in shape.leaves())
        else:
            out = shape.num_elements
        if is_elementwise(opcode):
            return out * p.op_weight.get(opcode, 1.0) / p.flops_per_ns
        if opcode == "dot":
            lhs = operand_shapes[0]
            k = math.prod(lhs.dims[d] for d in attrs.get("lhs_contracting_dims", ()))
            return 2.0 * out * k / p.matmul_flops_per_ns
        if opcode == "convolution":
            window, labels = attrs.get("window"), attrs.get("dim_labels")
            taps = math.prod(window.size) if window is not None else 1
            features = operand_shapes[0].dims[labels.lhs_feature] if labels is not None else 1
            groups = attrs.get("feature_group_count", 1)
            return 2.0 * out * taps * features / groups / p.matmul_flops_per_ns
        if opcode == "reduce-window":
            window = attrs.get("window")
            return out * (math.prod(window.size) if window is not None else 1) / p.flops_per_ns
        if OPS.get(opcode) is not None and OPS[opcode].category == "reduction":
            return sum(s.num_elements for s in operand_shapes if not s.is_tuple) / p.flops_per_ns
        return 0.0
