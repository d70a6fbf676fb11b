"""The reference interpreter: evaluates any module we parse with numpy, per XLA's operation
semantics. It is the project's ground truth (rule soundness checks, equivalence checks).

    outputs = evaluate(module, [np.ones(4, np.float32), ...])   # tuple results flattened

One dispatch table maps every supported opcode to its implementation; the implementations
live in a few modules by kind of op.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .. import verifier
from ..ir import Module
from ..errors import UnsupportedError
from ..ir import Instruction
from ..memory import allocating, check_fits_in_memory
from ..ops import never_merged
from . import (composite, contractions, control, data_movement, elementwise, indexing,
               reductions, sorting)
from .control import CUSTOM_CALLS
from .evaluator import TOKEN, Evaluator, evaluate_module

DISPATCH = {
    **elementwise.IMPLS, **data_movement.IMPLS, **indexing.IMPLS, **reductions.IMPLS,
    **sorting.IMPLS, **contractions.IMPLS, **control.IMPLS, **composite.IMPLS,
}

# custom-call is dispatched only to explain that it has no reference semantics.
SUPPORTED_OPCODES = (frozenset(DISPATCH) | {"parameter"}) - {"custom-call"}


def interpretable(inst: Instruction) -> bool:
    """Whether the interpreter has a rule for `inst` (a custom call: for its target)."""
    if inst.opcode == "custom-call":
        return inst.attrs.get("custom_call_target") in CUSTOM_CALLS
    return inst.opcode in DISPATCH


def refuse_unrunnable_side_effects(module: Module) -> None:
    """The interpreter and compiled programs run only what the results depend on, so an
    instruction whose effect is more than its value (I/O, a custom call marked as having
    side effects: ops.never_merged) would be skipped without a word where no result uses
    it. One that the interpreter cannot run (compiled code runs none natively) is refused
    wherever it is, before anything runs."""
    for inst in module.instructions():
        if never_merged(inst.opcode, inst.attrs) and not interpretable(inst):
            target = inst.attrs.get("custom_call_target")
            what = f" (custom-call target {target!r})" if target is not None else ""
            raise UnsupportedError(f"{inst.opcode} ({inst.name}) cannot run: it has side "
                                   f"effects{what} that neither compiled code nor the "
                                   "interpreter produces", line=inst.line, column=inst.column)


def evaluate(module: Module, args: Sequence, verify: bool = True) -> list[np.ndarray]:
    """Run the entry computation on `args` (in parameter order). Returns the result's
    arrays; a tuple result comes back flattened in order. Raises UnsupportedError for ops
    without reference semantics (custom-call, ...), HloError for inconsistent modules: the
    module is verified first unless `verify` is False (for callers that already did), and
    arrays larger than this machine's memory and side effects it cannot run are refused
    before any is allocated."""
    if verify:
        verifier.verify(module)
    check_fits_in_memory(module)
    refuse_unrunnable_side_effects(module)
    with allocating("evaluating the module"):
        return evaluate_module(module, args, DISPATCH)


__all__ = ["evaluate", "Evaluator", "DISPATCH", "SUPPORTED_OPCODES", "TOKEN", "interpretable",
           "refuse_unrunnable_side_effects"]
