"""hlo-opt: a declarative rewrite-rule optimizer for XLA HLO.

The public API (stable names; tools and tests use them):

    module = hlo_opt.parse(text, filename=None)   # HloError with .line/.column on bad input
    text = module.to_text()                        # the printer
    outputs = hlo_opt.evaluate(module, args)       # reference interpreter (numpy)

Stages live in sub-packages (grammar, egraph, lowering, targets, tools); they are imported
lazily here so that importing the IR never drags in the optimizer or LLVM.
"""
from __future__ import annotations

from .errors import HloError, UnsupportedError
from .ir import Computation, Instruction, Module
from .shape import Layout, Shape, TupleShape

__all__ = ["HloError", "UnsupportedError", "Module", "Computation", "Instruction", "Shape",
           "TupleShape", "Layout", "parse", "evaluate"]


def parse(text: str, filename: str | None = None) -> Module:
    """Parse HLO text (as XLA or JAX prints it) into a Module."""
    from .grammar.hlo_parser import parse_module
    return parse_module(text, filename)


def evaluate(module: Module, args):
    """Run the entry computation on numpy arrays; a tuple result comes back flattened."""
    from .interpreter import evaluate as _evaluate
    return _evaluate(module, args)
