"""Equal instructions computed once, before kernels form (common subexpressions).

JAX traces each use of a value on its own, so a module may compute one value twice (its
softmax computes the row maximum and the exponentials twice). `optimize`'s e-graph merges
such copies; `compile` fuses a module as written, where each copy would cost its own work
and often its own pass over memory. Two instructions are equal when their opcode, shape,
attributes (metadata aside) and operands are, and for constants their values. Instructions
whose two instances are two events (`ops.never_merged`: random draws, I/O, communication,
side-effecting custom-calls) stay apart, as do parameters, ordering ops (tokens, barriers),
constants whose values are elided, and instructions with control predecessors.
"""
from __future__ import annotations

import numpy as np

from ..ir import Computation, Instruction
from ..ops import ORDERING, never_merged

IGNORED_ATTRIBUTES = frozenset({"metadata", "statistics"})


def merge_equal(comp: Computation) -> int:
    """Replace, in `comp` (changed in place), each instruction equal to an earlier one by
    that one; returns how many were merged away. Operands are merged first, so a chain
    computed twice merges link by link."""
    kept: dict[tuple, Instruction] = {}
    same: dict[int, Instruction] = {}
    out: list[Instruction] = []
    for inst in comp.post_order():
        inst.operands = [same.get(id(o), o) for o in inst.operands]
        key = _key(inst)
        earlier = kept.get(key) if key is not None else None
        if earlier is not None:
            same[id(inst)] = earlier
            continue
        if key is not None:
            kept[key] = inst
        out.append(inst)
    if same:
        reached = {id(i) for i in out}
        unused = [i for i in comp.instructions if i.opcode == "parameter" and id(i) not in reached]
        comp.instructions = unused + out
        comp.root = same.get(id(comp.root), comp.root)
    return len(same)


def _key(inst: Instruction) -> tuple | None:
    """What equal instructions share, or None when `inst` must stay itself."""
    if (inst.opcode == "parameter" or inst.opcode in ORDERING
            or never_merged(inst.opcode, inst.attrs) or "control-predecessors" in inst.attrs):
        return None
    value = None
    if inst.opcode == "constant":
        if not isinstance(inst.literal, np.ndarray):
            return None         # elided, or a tuple of literals
        value = (inst.literal.dtype.str, inst.literal.shape, inst.literal.tobytes())
    attrs = tuple(sorted((k, v) for k, v in inst.attrs.items() if k not in IGNORED_ATTRIBUTES))
    key = (inst.opcode, inst.shape, attrs, tuple(id(o) for o in inst.operands), value)
    try:
        hash(key)
    except TypeError:           # an attribute value we cannot compare cheaply
        return None
    return key
