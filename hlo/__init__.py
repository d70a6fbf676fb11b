"""hlo-opt: a declarative rewrite-rule optimizer for XLA HLO.

The public API (stable names; tools and tests use them):

    module = hlo_opt.parse(text, filename=None)   # HloError with .line/.column on bad input
    text = module.to_text()                        # the printer
    outputs = hlo_opt.evaluate(module, args)       # reference interpreter (numpy)
    run = hlo_opt.compile(module)                  # native code (LLVM); run(*args) -> outputs
    module = hlo_opt.optimize(module)              # rewrite rules + cost-based extraction

evaluate, compile and optimize verify the module first (hlo_opt.verifier; an ill-typed module
is an HloError naming the instruction, not a crash or a wrong answer); `verify=False` skips
that for callers that already verified it.

Stages live in sub-packages (grammar, egraph, lowering, targets, tools); they are imported
lazily here so that importing the IR never drags in the optimizer or LLVM.
"""
from __future__ import annotations

from .errors import HloError, UnsupportedError
from .ir import Computation, Instruction, Module
from .shape import Layout, Shape, TupleShape

__all__ = ["HloError", "UnsupportedError", "Module", "Computation", "Instruction", "Shape",
           "TupleShape", "Layout", "parse", "evaluate", "compile", "optimize"]


def parse(text: str, filename: str | None = None) -> Module:
    """Parse HLO text (as XLA or JAX prints it) into a Module."""
    from .grammar.hlo_parser import parse_module
    return parse_module(text, filename)


def _module(module: Module | str) -> Module:
    """The entry points take a Module or HLO text."""
    if isinstance(module, str):
        return parse(module)
    if not isinstance(module, Module):
        raise HloError(f"expected a Module or HLO text, got {type(module).__name__}")
    return module


def evaluate(module: Module | str, args, verify: bool = True):
    """Run the entry computation on numpy arrays; a tuple result comes back flattened.
    The module (or HLO text) is verified first unless `verify` is False."""
    from .interpreter import evaluate as _evaluate
    return _evaluate(_module(module), args, verify)


def compile(module: Module | str, target: str = "cpu", verify: bool = True,  # noqa: A001
            **options):
    """Compile a module (or HLO text) to native code; returns a callable on numpy arrays
    whose outputs come back flattened, like `evaluate` (options: flush_denormals). The
    module is verified first unless `verify` is False."""
    from .lowering import compile as _compile
    return _compile(_module(module), target, verify=verify, **options)


def optimize(module: Module | str, rules="default", fp_mode: str = "xla", target: str = "cpu",
             time_limit: float = 60.0, node_limit: int = 200_000, iteration_limit: int = 30,
             stats: bool = False, fusion: bool = True, verify: bool = True,
             tpu_gen: str | None = None, explain: bool = False):
    """The module rewritten by the rule set, extracted at least cost for `target` and fused
    where the rules allow and the target's model gains; with `stats`, (module, report); with
    `explain`, (module, explanation): which rules fired, per kernel the cost before and
    after, and what became of each instruction (`.text()`, `.as_json()`; docs/explain.md).
    The input is verified first unless `verify` is False. `tpu_gen`: the TPU generation
    the tpu target models (v4, v5e, v5p, v6e; default v5e). See egraph/pipeline.py."""
    from .egraph.pipeline import optimize as _optimize
    return _optimize(_module(module), rules, fp_mode, target, time_limit, node_limit,
                     iteration_limit, stats, fusion, verify, tpu_gen, explain)
