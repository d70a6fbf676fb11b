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
from ..memory import allocating, check_fits_in_memory
from . import (composite, contractions, control, data_movement, elementwise, indexing,
               reductions, sorting)
from .evaluator import TOKEN, Evaluator, evaluate_module

DISPATCH = {
    **elementwise.IMPLS, **data_movement.IMPLS, **indexing.IMPLS, **reductions.IMPLS,
    **sorting.IMPLS, **contractions.IMPLS, **control.IMPLS, **composite.IMPLS,
}

# custom-call is dispatched only to explain that it has no reference semantics.
SUPPORTED_OPCODES = (frozenset(DISPATCH) | {"parameter"}) - {"custom-call"}


def evaluate(module: Module, args: Sequence, verify: bool = True) -> list[np.ndarray]:
    """Run the entry computation on `args` (in parameter order). Returns the result's
    arrays; a tuple result comes back flattened in order. Raises UnsupportedError for ops
    without reference semantics (custom-call, ...), HloError for inconsistent modules: the
    module is verified first unless `verify` is False (for callers that already did), and
    arrays larger than this machine's memory are refused before any is allocated."""
    if verify:
        verifier.verify(module)
    check_fits_in_memory(module)
    with allocating("evaluating the module"):
        return evaluate_module(module, args, DISPATCH)


__all__ = ["evaluate", "Evaluator", "DISPATCH", "SUPPORTED_OPCODES", "TOKEN"]
