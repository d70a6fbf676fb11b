"""The verifier: a module is well formed if every declared shape is what shape inference
says (layouts aside), every opcode has its operand count, and every called computation has
the signature its caller needs (reducers take 2N scalars, while bodies map the state to
itself, ...). The parser does not verify, as XLA's does not; optimizer stages call `verify`
on what they build.

    verify(module)   # None, or HloError("add.3: operand shapes f32[4] and f32[5] differ")
"""
from __future__ import annotations

import math
from typing import Sequence

from .errors import HloError
from .ir import Computation, Instruction, Module
from .ops import OPS, VARIADIC, async_wrapped
from .shape import AnyShape
from .shape_inference import INFERABLE, NUMERIC, infer_shape
from .shape_util import expect_array, fail, text


def verify(module: Module) -> None:
    """Raise HloError (with the instruction's line and column) at the first problem."""
    known = {id(c) for c in module.computations}
    if id(module.entry) not in known:
        raise HloError(f"entry computation {module.entry.name} is not in the module")
    for comp in module.computations:
        _verify_computation(comp, known)
    _check_acyclic(module)


def _fail(inst: Instruction, message: str):
    raise HloError(f"{inst.name}: {message}", line=inst.line, column=inst.column)


def _verify_computation(comp: Computation, known: set[int]) -> None:
    members = {id(i) for i in comp.instructions}
    if id(comp.root) not in members:
        raise HloError(f"computation {comp.name}: root {comp.root.name} is not one of its "
                       "instructions", line=comp.line, column=comp.column)
    names: set[str] = set()
    numbers: set[int] = set()
    for inst in comp.instructions:
        if inst.name in names:
            _fail(inst, f"name is used twice in computation {comp.name}")
        names.add(inst.name)
        if inst.opcode == "parameter":
            if inst.parameter_number is None or inst.parameter_number in numbers:
                _fail(inst, f"parameter number {inst.parameter_number} is missing or repeated")
            numbers.add(inst.parameter_number)
        for op in inst.operands:
            if id(op) not in members:
                _fail(inst, f"operand {op.name} is not in computation {comp.name}")
        for callee in inst.called_computations():
            if id(callee) not in known:
                _fail(inst, f"calls computation {callee.name}, which is not in the module")
        _verify_instruction(inst)
    if numbers != set(range(len(numbers))):
        raise HloError(f"computation {comp.name}: parameter numbers {sorted(numbers)} are not "
                       f"0..{len(numbers) - 1}", line=comp.line, column=comp.column)


def _verify_instruction(inst: Instruction) -> None:
    info = OPS.get(inst.opcode)
    if info is None:
        if async_wrapped(inst.opcode) is None:
            _fail(inst, f"unknown opcode {inst.opcode}")
        return
    if info.arity != VARIADIC and len(inst.operands) != info.arity:
        _fail(inst, f"{inst.opcode} takes {info.arity} operand"
                    f"{'s' if info.arity != 1 else ''}, got {len(inst.operands)}")
    if inst.opcode == "constant":
        _check_literal(inst)
    try:
        check_declared_shape(inst.opcode, [op.shape for op in inst.operands], inst.attrs,
                             inst.shape)
    except HloError as e:
        _fail(inst, e.message)


def _check_literal(inst: Instruction) -> None:
    def walk(value, shape):
        if shape.is_tuple:
            if not isinstance(value, tuple) or len(value) != len(shape.elements):
                _fail(inst, f"literal does not match tuple shape {shape.to_text(False)}")
            for v, s in zip(value, shape.elements):
                walk(v, s)
        elif hasattr(value, "shape") and tuple(value.shape) != shape.dims:
            _fail(inst, f"literal has dims {list(value.shape)}, shape is "
                        f"{shape.to_text(False)}")
    walk(inst.literal, inst.shape)


def _check_acyclic(module: Module) -> None:
    """HLO has no recursion: the call graph must be a DAG (checked iteratively)."""
    state: dict[int, int] = {}          # 1 = on the current path, 2 = done
    for start in module.computations:
        if state.get(id(start)) == 2:
            continue
        stack = [(start, iter(_callees(start)))]
        state[id(start)] = 1
        while stack:
            comp, callees = stack[-1]
            nxt = next(callees, None)
            if nxt is None:
                state[id(comp)] = 2
                stack.pop()
            elif state.get(id(nxt)) == 1:
                raise HloError(f"computation {nxt.name} calls itself (through "
                               f"{comp.name})", line=nxt.line, column=nxt.column)
            elif id(nxt) not in state:
                state[id(nxt)] = 1
                stack.append((nxt, iter(_callees(nxt))))


def _callees(comp: Computation) -> list[Computation]:
    return [c for inst in comp.instructions for c in inst.called_computations()]


# ------------------------------------------------------- shapes the text spells out

def _check_broadcast(operands, attrs, declared):
    operand = expect_array(operands[0], "broadcast operand")
    dims = tuple(attrs.get("dimensions", ()))
    if len(dims) != operand.rank or operand.element_type != declared.element_type:
        fail(f"broadcast of {text(operand)} to {text(declared)} needs one entry in "
             f"dimensions per operand dimension and the same element type")
    for i, d in enumerate(dims):
        if not 0 <= d < declared.rank or declared.dims[d] != operand.dims[i]:
            fail(f"broadcast dimensions {list(dims)} map {text(operand)} onto "
                 f"{text(declared)} inconsistently")


def _check_convert(operands, attrs, declared):
    operand = expect_array(operands[0], "convert operand")
    if operand.dims != declared.dims:
        fail(f"convert changes dimensions: {text(operand)} to {text(declared)}")
    src, dst = operand.dtype.kind, declared.dtype.kind
    if {src, dst} & {"token", "opaque"} or (src == "complex" and dst != "complex"):
        fail(f"cannot convert {operand.element_type} to {declared.element_type}")


def _check_bitcast_convert(operands, attrs, declared):
    operand = expect_array(operands[0], "bitcast-convert operand")
    a, b = operand.dtype.bits, declared.dtype.bits
    if not a or not b:
        fail(f"cannot bitcast-convert {operand.element_type} to {declared.element_type}")
    if a == b:
        ok = operand.dims == declared.dims
    elif a > b:            # one element becomes a trailing dimension of a // b pieces
        ok = declared.dims == operand.dims + (a // b,) and a % b == 0
    else:
        ok = operand.dims == declared.dims + (b // a,) and b % a == 0
    if not ok:
        fail(f"bitcast-convert from {text(operand)} to {text(declared)} changes the "
             "number of bits")


def _check_reshape(operands, attrs, declared):
    operand = expect_array(operands[0], "reshape operand")
    if (operand.element_type != declared.element_type
            or math.prod(operand.dims) != math.prod(declared.dims)):
        fail(f"reshape from {text(operand)} to {text(declared)} changes the element "
             "count or type")


def _check_bitcast(operands, attrs, declared):
    operand = expect_array(operands[0], "bitcast operand")
    if operand.byte_size != declared.byte_size or operand.dtype.bits != declared.dtype.bits:
        fail(f"bitcast from {text(operand)} to {text(declared)} changes the byte size")


def _check_iota(operands, attrs, declared):
    d = attrs.get("iota_dimension")
    if d is None or not 0 <= d < declared.rank or declared.dtype.kind not in NUMERIC:
        fail(f"iota_dimension={d} does not fit {text(declared)}")


def _check_contraction(opcode):
    """dot/convolution may declare any numeric result type (XLA's preferred type)."""
    def check(operands, attrs, declared):
        inferred = infer_shape(opcode, operands, attrs)
        if inferred.dims != declared.dims or declared.dtype.kind not in NUMERIC:
            fail(f"{opcode} result should be {inferred.element_type}"
                 f"[{','.join(map(str, inferred.dims))}], declared {text(declared)}")
    return check


DECLARED_CHECKS = {
    "broadcast": _check_broadcast, "convert": _check_convert,
    "bitcast-convert": _check_bitcast_convert, "reshape": _check_reshape,
    "bitcast": _check_bitcast, "iota": _check_iota,
    **{op: _check_contraction(op) for op in ("dot", "convolution", "ragged-dot")},
}


def check_declared_shape(opcode: str, operands: Sequence[AnyShape], attrs: dict,
                         declared: AnyShape) -> None:
    """Raise HloError unless `declared` is a valid result shape (layouts ignored).

    Ops with a shape rule compare against it; ops whose text carries the shape (convert,
    reshape, broadcast, ...) get their own consistency check; the rest pass unchecked.
    """
    operands = list(operands)
    check = DECLARED_CHECKS.get(opcode)
    if check is not None:
        if declared.is_tuple:
            fail(f"{opcode} cannot produce a tuple {text(declared)}")
        check(operands, attrs, declared)
    elif opcode in INFERABLE:
        inferred = infer_shape(opcode, operands, attrs)
        if not inferred.compatible(declared):
            fail(f"result shape should be {text(inferred)}, declared {text(declared)}")
