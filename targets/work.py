"""How much arithmetic an instruction does, and how much of its operands it reads: the part
of every cost model that does not depend on the machine. Targets turn these counts into
time with their own throughputs.

    vector, matrix = flops(inst.opcode, inst.shape, inst.attrs, operand_shapes)
    share = read_share(inst, 0)          # of operand 0's elements, 0 to 1
"""
from __future__ import annotations

import math
from typing import Callable, Mapping, Sequence

from ..ops import OPS, is_elementwise
from ..shape import AnyShape

# Flops per element for elementwise ops dearer than an add, on targets without a measured
# table of their own (the CPU's comes from tools/calibrate_cpu.py): how many vector
# instructions the polynomial approximations and divisions take, rounded. Keys may also
# name a reduction (flops per element reduced) or dot/convolution (a multiplier on their
# matrix flops).
OP_WEIGHT: Mapping[str, float] = {
    **dict.fromkeys(("divide", "remainder", "sqrt", "rsqrt", "cbrt"), 4.0),
    **dict.fromkeys(("exponential", "exponential-minus-one", "log", "log-plus-one",
                     "logistic", "tanh", "sine", "cosine", "tan", "atan2"), 20.0),
    "erf": 30.0, "power": 40.0,
}


# Data movement that reads of its operand 0 only as many elements as it produces (a window,
# or elements picked by index): a gather of 4096 rows reads 4096 rows of its table.
SELECTIONS = frozenset({"slice", "dynamic-slice", "gather"})


def read_share(inst, k: int) -> float:
    """The share of operand k's elements that `inst` reads: all of them, but for a
    selection's operand 0 at most as many as it produces. A kernel computing a selection
    computes its operand only there (bytes_read)."""
    if k == 0 and inst.opcode in SELECTIONS:
        total = elements(inst.operands[0].shape)
        return min(1.0, elements(inst.shape) / total) if total else 1.0
    return 1.0


def bytes_read(members: Sequence, written: Sequence, nbytes: Callable) -> float:
    """Bytes a kernel computing `members` (operands before users) and writing `written`
    reads of its inputs (`nbytes(value)`: all of one): a member is computed only where its
    output or the members reading it need it, so below a selection only the selected
    share (a gather of a few rows of x - y reads those rows of x and y)."""
    inside = {id(m) for m in members}
    need = {id(w): 1.0 for w in written}
    demand: dict[int, list] = {}
    for m in reversed(members):
        e = min(1.0, need.get(id(m), 0.0))
        for k, o in enumerate(m.operands):
            x = e * read_share(m, k)
            if id(o) in inside:
                need[id(o)] = need.get(id(o), 0.0) + x
            elif not (o.opcode == "constant" and not o.shape.is_tuple and o.shape.rank == 0):
                demand.setdefault(id(o), [o, 0.0])[1] += x
    return sum(nbytes(o) * min(1.0, d) for o, d in demand.values())


def elements(shape: AnyShape) -> int:
    if shape.is_tuple:
        return sum(max(s.num_elements, 0) for s in shape.leaves())
    return max(shape.num_elements, 0)     # a dynamic (-1) dimension counts as empty


def flops(opcode: str, shape: AnyShape, attrs: Mapping[str, object],
          operand_shapes: Sequence[AnyShape],
          weights: Mapping[str, float] = OP_WEIGHT) -> tuple[float, float]:
    """(vector flops, matrix flops): elementwise-style work, and dot/convolution work that
    runs on matrix units (FMA-blocked GEMM on CPUs, tensor cores, the TPU's MXU), each
    scaled by the op's weight (1 unless `weights` names it)."""
    out = elements(shape)
    weight = weights.get(opcode, 1.0)
    if is_elementwise(opcode):
        return out * weight, 0.0
    if opcode == "dot":
        lhs = operand_shapes[0]
        k = math.prod(lhs.dims[d] for d in attrs.get("lhs_contracting_dims", ()))
        return 0.0, 2.0 * out * k * weight
    if opcode == "convolution":
        window, labels = attrs.get("window"), attrs.get("dim_labels")
        taps = math.prod(window.size) if window is not None else 1
        features = operand_shapes[0].dims[labels.lhs_feature] if labels is not None else 1
        groups = attrs.get("feature_group_count", 1)
        return 0.0, 2.0 * out * taps * features / groups * weight
    if opcode == "reduce-window":
        window = attrs.get("window")
        return out * (math.prod(window.size) if window is not None else 1) * weight, 0.0
    info = OPS.get(opcode)
    if info is not None and info.category == "reduction":
        return weight * sum(elements(s) for s in operand_shapes if not s.is_tuple), 0.0
    return 0.0, 0.0
