"""The evaluation loop: one computation at a time, instructions in post order, no recursion
over the instruction graph (only over called-computation nesting).

A value is an np.ndarray, a tuple of values, or TOKEN. Values are never mutated after they are
produced, so constants, copies and broadcasts may share memory. Each result is checked against
the instruction's declared type and dims: a module whose declared shapes disagree with its
semantics fails loudly here rather than producing a plausible wrong answer.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ..errors import HloError, UnsupportedError
from ..ir import Computation, Instruction, Module
from ..shape import AnyShape
from .apply import SCALAR_DATA_MOVEMENT


class _Token:
    """The value of token-typed instructions (after-all, ...)."""
    __slots__ = ()

    def __repr__(self) -> str:
        return "TOKEN"


TOKEN = _Token()

Impl = Callable[[Instruction, list, "Evaluator"], object]


class _Plan:
    """A computation compiled for repeated runs (while bodies, reducers): post order, operand
    slots, and which slots die after each step so long chains do not hold every value."""
    __slots__ = ("order", "operands", "release", "root")

    def __init__(self, comp: Computation):
        self.order = comp.post_order()
        slot = {id(inst): i for i, inst in enumerate(self.order)}
        self.operands = [tuple(slot[id(op)] for op in inst.operands) for inst in self.order]
        last_use: dict[int, int] = {}
        for i, ops in enumerate(self.operands):
            for s in ops:
                last_use[s] = i
        self.root = slot[id(comp.root)]
        self.release: list[list[int]] = [[] for _ in self.order]
        for s, i in last_use.items():
            if s != self.root:
                self.release[i].append(s)


class Evaluator:
    """Runs computations of one module; caches per-computation plans and analyses."""

    def __init__(self, dispatch: dict[str, Impl]):
        self.dispatch = dispatch
        self.batched_dispatch = {**dispatch, **SCALAR_DATA_MOVEMENT}
        self._plans: dict[int, _Plan] = {}
        self.cache: dict[tuple, object] = {}     # analyses keyed by (purpose, id(object))

    def plan(self, comp: Computation) -> _Plan:
        plan = self._plans.get(id(comp))
        if plan is None:
            plan = self._plans[id(comp)] = _Plan(comp)
        return plan

    def call(self, comp: Computation, args: Sequence, batched: bool = False):
        """Evaluate `comp` on argument values. With `batched`, the computation is scalar and
        every value carries extra (broadcastable) dims: apply.py maps it over arrays."""
        plan = self.plan(comp)
        dispatch = self.batched_dispatch if batched else self.dispatch
        values: list = [None] * len(plan.order)
        for i, inst in enumerate(plan.order):
            try:
                if inst.opcode == "parameter":
                    value = args[inst.parameter_number]
                else:
                    impl = dispatch.get(inst.opcode)
                    if impl is None:
                        raise UnsupportedError(
                            f"the interpreter does not support {inst.opcode}")
                    value = impl(inst, [values[s] for s in plan.operands[i]], self)
                    if isinstance(value, np.generic):   # numpy indexing or comparing a
                        value = np.asarray(value)       # 0-d array gives a scalar
                _check(value, inst.shape, batched)
            except HloError as e:
                if getattr(e, "instruction", None) is not None:
                    raise                 # already names the innermost instruction
                located = type(e)(f"{inst.name}: {e.message}", e.filename, inst.line,
                                  inst.column)
                located.instruction = inst.name
                raise located from e
            values[i] = value
            for s in plan.release[i]:
                values[s] = None
        return values[plan.root]


def _check(value, shape: AnyShape, batched: bool) -> None:
    if shape.is_tuple:
        if not isinstance(value, tuple) or len(value) != len(shape.elements):
            raise HloError(f"computed {_describe(value)} for tuple shape {shape.to_text(False)}")
        for v, s in zip(value, shape.elements):
            _check(v, s, batched)
        return
    expected = shape.dtype.numpy
    if expected is None:
        if value is not TOKEN:
            raise HloError(f"computed {_describe(value)} for {shape.to_text(False)}")
        return
    if not isinstance(value, np.ndarray) or value.dtype != expected or (
            not batched and value.shape != shape.dims):
        raise HloError(f"computed {_describe(value)} but the instruction declares "
                       f"{shape.to_text(False)}")


def _describe(value) -> str:
    if isinstance(value, np.ndarray):
        return f"{value.dtype}{list(value.shape)}"
    if isinstance(value, tuple):
        return "(" + ", ".join(_describe(v) for v in value) + ")"
    return repr(value)


def coerce_argument(arg, shape: AnyShape, position: int):
    """An entry argument as a value of `shape`: arrays must match its type and dims exactly;
    Python scalars and lists are converted."""
    if shape.is_tuple:
        if not isinstance(arg, (tuple, list)) or len(arg) != len(shape.elements):
            raise HloError(f"argument {position} must be a tuple {shape.to_text(False)}")
        return tuple(coerce_argument(a, s, position) for a, s in zip(arg, shape.elements))
    expected = shape.dtype.numpy
    if expected is None:
        return TOKEN
    if isinstance(arg, (np.ndarray, np.generic)):
        value = np.asarray(arg)
        if value.dtype != expected:
            raise HloError(f"argument {position} has dtype {value.dtype}, parameter is "
                           f"{shape.to_text(False)}")
    else:
        value = np.asarray(arg, dtype=expected)
    if value.shape != shape.dims:
        raise HloError(f"argument {position} has dims {list(value.shape)}, parameter is "
                       f"{shape.to_text(False)}")
    return value


def flatten(value) -> list[np.ndarray]:
    if isinstance(value, tuple):
        return [leaf for v in value for leaf in flatten(v)]
    return [value]


def evaluate_module(module: Module, args: Sequence, dispatch: dict[str, Impl]) -> list[np.ndarray]:
    params = module.entry.parameters
    if len(args) != len(params):
        raise HloError(f"{module.entry.name} takes {len(params)} arguments, got {len(args)}")
    values = [coerce_argument(a, p.shape, p.parameter_number) for a, p in zip(args, params)]
    with np.errstate(all="ignore"):
        result = Evaluator(dispatch).call(module.entry, values)
    # Fresh, writable arrays: results may be views of arguments, constants or broadcasts.
    return [np.array(v) if isinstance(v, np.ndarray) else v for v in flatten(result)]
