"""A name-independent hash of a computation: two kernels with the same fingerprint compute
the same function of their inputs, so they share one compiled kernel.

Instructions are numbered (parameters by parameter number, then post order); each line holds
opcode, shape with layout, operand numbers, attributes (called computations by their own
fingerprint; metadata and other attributes that do not change the value are left out) and
the literal's bytes.
"""
from __future__ import annotations

import hashlib

import numpy as np

from ..attributes import Raw, encode
from ..ir import Computation

_IGNORED = frozenset({"metadata", "sharding", "frontend_attributes", "backend_config",
                      "statistics_viz", "control-predecessors", "origin"})


def fingerprint(comp: Computation, _memo: dict | None = None) -> str:
    memo = {} if _memo is None else _memo
    if id(comp) in memo:
        return memo[id(comp)]
    order = list(comp.parameters)
    seen = {id(i) for i in order}
    order += [i for i in comp.post_order() if id(i) not in seen]
    number = {id(inst): n for n, inst in enumerate(order)}
    h = hashlib.sha256()
    for inst in order:
        ops = ",".join(str(number[id(o)]) for o in inst.operands)
        attrs = []
        for name in sorted(inst.attrs):
            if name in _IGNORED:
                continue
            attrs.append(f"{name}={_attr(name, inst.attrs[name], memo)}")
        line = f"{inst.opcode} {inst.shape.to_text()} ({ops}) {' '.join(attrs)}"
        if inst.parameter_number is not None:
            line += f" p{inst.parameter_number}"
        h.update(line.encode())
        if isinstance(inst.literal, np.ndarray):
            h.update(f"{inst.literal.dtype}{inst.literal.shape}".encode())
            h.update(np.ascontiguousarray(inst.literal).tobytes())
        elif inst.literal is not None:
            h.update(repr(inst.literal).encode())
        h.update(b"\n")
    h.update(f"root {number[id(comp.root)]}".encode())
    memo[id(comp)] = h.hexdigest()[:32]
    return memo[id(comp)]


def _attr(name: str, value, memo) -> str:
    if isinstance(value, Computation):
        return fingerprint(value, memo)
    if isinstance(value, tuple) and value and isinstance(value[0], Computation):
        return "(" + ",".join(fingerprint(c, memo) for c in value) + ")"
    if isinstance(value, Raw):
        return value.text
    try:
        return encode(name, value)
    except Exception:
        return repr(value)
