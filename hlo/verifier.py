"""The verifier: a module is well formed if every declared shape is what shape inference
says (layouts aside; declared_shapes.py), every array's byte size fits in int64, every
opcode has its operand count, parameters are numbered 0..N-1, and every called computation
has the signature its caller needs (reducers take 2N scalars, while bodies map the state to
itself, ...). The parser does not verify, as XLA's does not; the public entry points
(optimize, compile, evaluate) and optimizer stages call `verify`.

    verify(module)   # None, or HloError("add.3: operand shapes f32[4] and f32[5] differ")
"""
from __future__ import annotations

from .declared_shapes import check_declared_shape
from .errors import HloError
from .ir import Computation, Instruction, Module
from .memory import human_bytes
from .ops import OPS, VARIADIC, async_wrapped
from .shape_util import array_leaves, text

# XLA's limit: an array's byte size (and every offset into it) is an int64.
MAX_ARRAY_BYTES = 2**63 - 1


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
    check_parameter_numbers(comp.name, comp.instructions)
    for inst in comp.instructions:
        if inst.name in names:
            _fail(inst, f"name is used twice in computation {comp.name}")
        names.add(inst.name)
        for op in inst.operands:
            if id(op) not in members:
                _fail(inst, f"operand {op.name} is not in computation {comp.name}")
        for callee in inst.called_computations():
            if id(callee) not in known:
                _fail(inst, f"calls computation {callee.name}, which is not in the module")
        _verify_instruction(inst)


def check_parameter_numbers(name: str, instructions: Sequence[Instruction]) -> None:
    """Parameters are numbered 0..N-1, each once (XLA's parser refuses anything else, so
    ours calls this too); the error points at the first offending parameter."""
    numbers: set[int] = set()
    count = sum(1 for inst in instructions if inst.opcode == "parameter")
    for inst in instructions:
        if inst.opcode != "parameter":
            continue
        n = inst.parameter_number
        if n is None or n in numbers:
            _fail(inst, f"parameter number {n} is missing or repeated")
        if not 0 <= n < count:
            _fail(inst, f"parameter({n}) in computation {name}, which has {count} "
                        f"parameter{'s' if count != 1 else ''}: the numbers must be "
                        f"0..{count - 1}")
        numbers.add(n)


def _verify_instruction(inst: Instruction) -> None:
    info = OPS.get(inst.opcode)
    if info is None and async_wrapped(inst.opcode) is None:
        _fail(inst, f"unknown opcode {inst.opcode}")
    if info is not None and info.arity != VARIADIC and len(inst.operands) != info.arity:
        _fail(inst, f"{inst.opcode} takes {info.arity} operand"
                    f"{'s' if info.arity != 1 else ''}, got {len(inst.operands)}")
    _check_size(inst)
    if inst.opcode == "constant":
        _check_literal(inst)
    try:
        check_declared_shape(inst.opcode, [op.shape for op in inst.operands], inst.attrs,
                             inst.shape)
    except HloError as e:
        _fail(inst, e.message)


def _check_size(inst: Instruction) -> None:
    """Sizes are int64 everywhere (buffer assignment, index arithmetic, XLA itself): an
    array too big for one is not a shape, whatever the opcode (custom-call included)."""
    for leaf in array_leaves(inst.shape):
        if -1 not in leaf.dims and leaf.byte_size > MAX_ARRAY_BYTES:
            _fail(inst, f"{text(leaf)} has {human_bytes(leaf.byte_size)}, more than an "
                        f"array can hold (2^63 - 1 bytes)")


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
