"""Loops that run a few times, known before they start, to be unrolled before kernels form.

A loop body runs as a program of its own: each iteration reads its state arrays from memory
and writes them back. JAX's threefry random bits are such a loop: five iterations of adds,
shifts and xors over the whole key array, each a pass over memory. Unrolled, the iterations
are one elementwise chain that fusion computes inside the kernel using the bits, reading
and writing memory once (XLA has the same transformation, its WhileLoopUnroller).

A loop is counted when its condition compares one state element with a constant, that
element starts from a constant and the body adds a constant to it, and nothing else decides:
then the trip count is known by running the counter alone. Loops of at most MAX_TRIPS
iterations whose unrolled body stays under MAX_UNROLLED instructions are unrolled, when their
state arrays hold MIN_STATE_BYTES or more: the passes over memory are what unrolling saves,
and a larger kernel costs compile time.
"""
from __future__ import annotations

import numpy as np

from ..ir import Computation, Instruction
from ..kernels import executed_computations
from ..ops import CONTROL

MAX_TRIPS = 8
MAX_UNROLLED = 2000             # body instructions (with what it calls) times trips
MIN_STATE_BYTES = 1 << 20       # smaller state arrays stay in cache between iterations

_COMPARE = {"LT": lambda a, b: a < b, "LE": lambda a, b: a <= b,
            "GT": lambda a, b: a > b, "GE": lambda a, b: a >= b}
_SWAPPED = {"LT": "GT", "LE": "GE", "GT": "LT", "GE": "LE"}


def any_to_unroll(module) -> bool:
    """Does a computation `module` runs hold a loop `trips` unrolls?"""
    return any(i.opcode == "while" and trips(i, i.operands[0]) is not None
               for c in executed_computations(module) for i in c.instructions)


def trips(loop: Instruction, init: Instruction) -> int | None:
    """How often `loop` (a while whose initial state is the tuple instruction `init`) runs
    its body, when it is counted and worth unrolling (see the module doc); else None."""
    body, cond = loop.attrs["body"], loop.attrs["condition"]
    if init.opcode != "tuple" or sum(max(s.byte_size, 0) for s in loop.shape.leaves()
                                     if s.rank) < MIN_STATE_BYTES:
        return None
    test = _counter_test(cond)
    if test is None:
        return None
    k, direction, bound = test
    start, step = _constant(init.operands[k]), _step(body, k)
    if start is None or step is None or step == 0:
        return None
    count, i = 0, start
    while _COMPARE[direction](i, bound):
        count, i = count + 1, i + step
        if count > MAX_TRIPS:
            return None
    return count if count * _size(body) <= MAX_UNROLLED else None


def _counter_test(cond: Computation) -> tuple[int, str, int] | None:
    """(state element, direction, constant) of a condition `element DIRECTION constant`."""
    root = cond.root
    if root.opcode != "compare" or root.attrs.get("direction") not in _COMPARE:
        return None
    a, b = root.operands
    direction = root.attrs["direction"]
    if _constant(a) is not None:
        a, b, direction = b, a, _SWAPPED[direction]
    k, bound = _element_of(a, cond.parameters), _constant(b)
    return None if k is None or bound is None else (k, direction, bound)


def _step(body: Computation, k: int) -> int | None:
    """The constant the body adds to state element k, if that is all it does to it."""
    root = body.root
    if root.opcode != "tuple" or root.operands[k].opcode != "add":
        return None
    a, b = root.operands[k].operands
    if _constant(a) is not None:
        a, b = b, a
    return _constant(b) if _element_of(a, body.parameters) == k else None


def _element_of(inst: Instruction, params: list[Instruction]) -> int | None:
    """k when `inst` is element k of the computation's one (tuple) parameter."""
    if inst.opcode == "get-tuple-element" and len(params) == 1 and inst.operands[0] is params[0]:
        return inst.attrs["index"]
    return None


def _constant(inst: Instruction) -> int | None:
    if inst.opcode != "constant" or inst.shape.is_tuple or inst.shape.rank or \
            inst.shape.dtype.kind not in ("int", "uint"):
        return None
    return int(np.asarray(inst.literal))


def _size(comp: Computation) -> int:
    """Instructions of `comp` and of the computations its control flow runs."""
    return len(comp.instructions) + sum(
        _size(c) for i in comp.instructions if i.opcode in CONTROL for c in i.called_computations())
