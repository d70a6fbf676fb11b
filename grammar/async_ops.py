"""The rules XLA's parser sets for async chains: start -> update* -> done.

An async op is generic (`async-start(...), calls=c`) or wraps an opcode (`call-start`,
`custom-call-done`, ...). Start and update have the shape ((operands), outputs, state...);
update and done continue the op in front of them, with the same wrapped opcode, called
computation and execution thread; no computation is run by two generic async-starts.
"""
from __future__ import annotations

from ..ir import Computation, Instruction
from ..ops import async_wrapped

_FORM = "((operands), outputs, state...)"
MAIN_THREAD = "main"


def async_step(opcode: str) -> tuple[str, str | None] | None:
    """("start" | "update" | "done", wrapped opcode or None when generic); None if `opcode`
    is not an async op (all-reduce-start and copy-start are ops of their own)."""
    if opcode in ("async-start", "async-update", "async-done"):
        return opcode[len("async-"):], None
    wrapped = async_wrapped(opcode)
    if wrapped is None:
        return None
    return wrapped[1][len("async-"):], wrapped[0]


def check_async(inst: Instruction, started: set[int]) -> str | None:
    """What is wrong with async op `inst` (None if nothing); `started` holds the ids of the
    computations generic async-starts already call."""
    step, wrapped = async_step(inst.opcode)
    if step != "done" and not _has_async_form(inst.shape):
        return f"{inst.opcode} needs the shape {_FORM}, not {inst.shape}"
    if step == "start":
        calls = inst.attrs.get("calls")
        if isinstance(calls, Computation):
            if id(calls) in started:
                return f"computation '{calls.name}' is called by more than one async-start"
            started.add(id(calls))
        return None
    before = inst.operands[0] if len(inst.operands) == 1 else None
    before_step = async_step(before.opcode) if before is not None else None
    if before_step is None or before_step[0] == "done":
        return f"{inst.opcode} takes one operand, the async-start or -update it continues"
    if not _has_async_form(before.shape):
        return f"the operand of {inst.opcode} needs the shape {_FORM}"
    if step == "update" and not inst.shape.compatible(before.shape):
        return f"{inst.opcode} has shape {inst.shape}, its operand {before.shape}"
    start = _start_of(before)
    if wrapped is not None and wrapped != _wrapped_opcode(start):
        return f"{inst.opcode} continues {start.opcode}, which wraps another opcode"
    thread = inst.attrs.get("async_execution_thread")
    start_thread = start.attrs.get("async_execution_thread", MAIN_THREAD)
    if thread is not None and thread != start_thread:
        return f"async_execution_thread is '{thread}', the async-start's is '{start_thread}'"
    calls = inst.attrs.get("calls")
    if calls is not None and calls is not start.attrs.get("calls"):
        return f"{inst.opcode} calls '{calls.name}', its async-start another computation"
    return None


def _has_async_form(shape) -> bool:
    return shape.is_tuple and len(shape.elements) >= 2 and shape.elements[0].is_tuple


def _start_of(inst: Instruction) -> Instruction:
    while async_step(inst.opcode)[0] == "update":
        inst = inst.operands[0]
    return inst


def _wrapped_opcode(start: Instruction) -> str | None:
    step = async_step(start.opcode)
    if step[1] is not None:
        return step[1]
    calls = start.attrs.get("calls")
    return calls.root.opcode if isinstance(calls, Computation) else None
