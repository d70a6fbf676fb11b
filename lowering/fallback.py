"""What cannot be lowered yet, and running it through the reference interpreter instead.

`why_not(inst)` is the one place that decides whether an instruction (with its called
computations) has a kernel emitter. The fusion stage asks it (`missing_emitter`, through
targets.emits) so that no such instruction shares a kernel, and every "no" becomes a
fallback step that the compiled program runs by calling back into Python, where the
interpreter evaluates that one instruction on the step's buffers. Fallbacks are loud: they
are listed in `Executable.stats["fallbacks"]` and announced with a FallbackWarning.
"""
from __future__ import annotations

import ctypes
import warnings

import numpy as np

from ..errors import UnsupportedError
from ..interpreter import DISPATCH, Evaluator, interpretable
from ..ir import Instruction
from ..ops import HOST_OPS, TUPLE_OPS, VIEWS
from . import elemental, emit_elementwise, emit_kernel
from .ltypes import elem, supported


class FallbackWarning(UserWarning):
    """Some instructions of a compiled module run in the interpreter, not in kernels."""


_SCALAR_OK = {"parameter", "constant", "broadcast", "copy"} | TUPLE_OPS | VIEWS


def why_not(inst: Instruction) -> str | None:
    """None if `inst` can be emitted as (part of) a kernel, else the reason it cannot (and
    the interpreter runs it). An instruction neither can run is refused here, at compile
    time: an UnsupportedError at its line and column."""
    reason = missing_emitter(inst)
    if reason and not interpretable(inst):
        raise UnsupportedError(f"{inst.opcode} ({inst.name}) cannot run: {reason}, and the "
                               f"interpreter has no rule for it", line=inst.line, column=inst.column)
    return reason


def missing_emitter(inst: Instruction) -> str | None:
    """What why_not says, without refusing an op the interpreter cannot run either (fusion
    asks this of every op: targets.cpu_facts.emits)."""
    op = inst.opcode
    if op in HOST_OPS:
        return None
    if not _has_emitter(op):
        return f"no kernel emitter for {op}"
    for shape in _shapes(inst):
        if not supported(shape.element_type):
            return f"element type {shape.element_type}"
    if emit_elementwise.is_elementwise_op(op):
        return emit_elementwise.lowerable(inst)
    check = _CHECKS.get(op)
    return check(inst) if check else None


def _has_emitter(op: str) -> bool:
    """Elementwise ops, ops with a per-element generator (elemental.py) or a loop structure
    of their own (emit_kernel.PHASES), and fusions of those."""
    return (emit_elementwise.is_elementwise_op(op) or op in elemental.GENERATORS
            or op in emit_kernel.PHASES or op == "fusion")


def _shapes(inst):
    for s in [inst.shape] + [o.shape for o in inst.operands]:
        yield from (s.leaves() if s.is_tuple else [s])


def scalar_computation_why_not(comp) -> str | None:
    """Reducers, comparators and map functions are inlined per element: only scalar
    elementwise ops (and constants, tuples) may appear in them."""
    for inst in comp.post_order():
        if inst.opcode in _SCALAR_OK:
            if inst.opcode != "tuple" and inst.opcode != "get-tuple-element" and \
                    any(s.rank for s in _shapes(inst)):
                return f"non-scalar {inst.opcode} in {comp.name}"
            if any(not supported(s.element_type) for s in _shapes(inst)):
                return f"element type in {comp.name}"
            continue
        if not emit_elementwise.is_elementwise_op(inst.opcode):
            return f"{inst.opcode} in called computation {comp.name}"
        reason = emit_elementwise.lowerable(inst)
        if reason:
            return reason
    return None


def _calls(attr):
    return lambda inst: scalar_computation_why_not(inst.attrs[attr])


def _fusion(inst):
    for member in inst.attrs["calls"].post_order():
        if member.opcode == "constant":
            continue
        reason = why_not(member)
        if reason:
            return reason
    return None


def _bitcast(inst):
    a, b = inst.operands[0].shape, inst.shape
    return None if elem(a.element_type).bits == elem(b.element_type).bits else \
        "bitcast between element types of different widths"


def _dot(inst):
    if len(inst.operands) != 2:
        return "dot with sparsity metadata"
    return None


def _convolution(inst):
    if inst.attrs.get("batch_group_count", 1) > 1 and inst.attrs.get("feature_group_count", 1) > 1:
        return "convolution with both feature and batch groups"
    return None


def _sort(inst):
    return scalar_computation_why_not(inst.attrs["to_apply"])


def _topk(inst):
    return None if inst.operands[0].shape.rank >= 1 else "topk of a scalar"


def _custom_call(inst):
    """Only XLA:CPU's TopK has a meaning we know (the interpreter's too)."""
    target = inst.attrs.get("custom_call_target", "")
    if target != "TopK" or len(inst.operands) != 1 or not inst.shape.is_tuple:
        return f"custom-call target {target!r}"
    return scalar_computation_why_not(inst.attrs["called_computations"][0])


def _select_and_scatter(inst):
    return scalar_computation_why_not(inst.attrs["select"]) or \
        scalar_computation_why_not(inst.attrs["scatter"])


_CHECKS = {
    "reduce": _calls("to_apply"), "reduce-window": _calls("to_apply"),
    "scatter": _calls("to_apply"), "map": _calls("to_apply"), "sort": _sort,
    "select-and-scatter": _select_and_scatter, "fusion": _fusion, "bitcast": _bitcast,
    "dot": _dot, "convolution": _convolution, "topk": _topk, "custom-call": _custom_call,
}


# --------------------------------------------------------------------- running fallbacks

class FallbackStep:
    """One instruction (or, when a kernel failed to emit, the group computation standing for
    it) that the compiled program hands to the interpreter. Operands and results are flat
    lists of array leaves; tuples are rebuilt from the shapes."""

    def __init__(self, inst: Instruction, reason: str, comp=None, inputs=None):
        self.inst, self.reason, self.comp = inst, reason, comp
        operands = inputs if inputs is not None else inst.operands
        self.arg_shapes = [o.shape for o in operands]
        self.in_shapes = [s for o in operands
                          for s in (o.shape.leaves() if o.shape.is_tuple else [o.shape])]
        self.out_shapes = inst.shape.leaves() if inst.shape.is_tuple else [inst.shape]

    def run(self, pointers: list[int]) -> None:
        n_out = len(self.out_shapes)
        leaves = [_view(p, s) for p, s in zip(pointers[n_out:], self.in_shapes)]
        args = [_rebuild(shape, leaves) for shape in self.arg_shapes]
        ev = Evaluator(DISPATCH)
        with np.errstate(all="ignore"):
            if self.comp is not None:
                result = ev.call(self.comp, args)
            else:
                result = DISPATCH[self.inst.opcode](self.inst, args, ev)
        flat = _flatten(result)
        for p, s, value in zip(pointers[:n_out], self.out_shapes, flat):
            _view(p, s)[...] = value


def _view(address: int, shape) -> np.ndarray:
    dt = shape.dtype.numpy
    n = shape.num_elements
    if n == 0:
        return np.empty(shape.dims, dt)
    buf = (ctypes.c_char * (n * dt.itemsize)).from_address(address)
    return np.frombuffer(buf, dt, n).reshape(shape.dims)


def _rebuild(shape, leaves: list):
    if shape.is_tuple:
        return tuple(_rebuild(s, leaves) for s in shape.elements)
    return leaves.pop(0)


def _flatten(value) -> list:
    if isinstance(value, tuple):
        return [x for v in value for x in _flatten(v)]
    return [value]


def announce(steps: list[FallbackStep], module_name: str) -> None:
    if steps:
        names = ", ".join(f"{s.inst.name} ({s.inst.opcode}: {s.reason})" for s in steps[:8])
        more = f" and {len(steps) - 8} more" if len(steps) > 8 else ""
        warnings.warn(f"{module_name}: {len(steps)} instruction(s) run in the interpreter: "
                      f"{names}{more}", FallbackWarning, stacklevel=3)
