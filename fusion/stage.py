"""The fusion stage on its own, as `hlo_opt.compile` runs it on a module without fusions.

    fused = fuse(module)                 # the default declarations, the cpu cost model

`optimize` runs the same partition after extraction, with its rule set's declarations; both
fuse the entry and the computations its control flow runs (hlo_opt.kernels), with calls
inlined and only what the results need (as extraction leaves them: `flattened`); `fuse` also
merges equal instructions first (merge_equal.py), as the e-graph does for `optimize`, and
computes dots read transposed in the order they are read (transposed_dots.py). The default
declarations live in rules/default/fusion.rules; they are read once per process.
"""
from __future__ import annotations

import functools
from importlib import resources

from ..grammar.rules_parser import RuleFile, load_rules
from ..interpreter.control import IDENTITY_CUSTOM_CALLS
from ..ir import Computation, Instruction, Module, post_order
from ..kernels import executed_computations
from ..ops import CONTROL
from ..targets import cost_model
from .merge_equal import merge_equal
from .transposed_dots import fold_transposed_dots
from . import unroll
from .outline import clone, fuse_module, unique_local
from .policy import FusionPolicy

DEFAULT_DECLARATIONS = "fusion.rules"


@functools.lru_cache(maxsize=None)
def _default_declarations() -> RuleFile:
    folder = resources.files("hlo_opt.rules").joinpath("default")
    with resources.as_file(folder.joinpath(DEFAULT_DECLARATIONS)) as path:
        return load_rules(str(path))


def default_policy(target: str = "cpu") -> FusionPolicy:
    """The default rule set's `fuse` and `limit` declarations, for `target`. A new policy
    each time: what it remembers of the instructions it was asked about goes with it."""
    declared = _default_declarations()
    return FusionPolicy(declared.fuses, declared.limits, target)


def fuse(module: Module, target: str = "cpu") -> Module:
    """`module` with its kernels formed as `fusion` instructions (a new Module)."""
    module = flattened(module)
    executed = executed_computations(module)
    for comp in executed:       # flattened's copies: changing them leaves `module` alone
        merge_equal(comp)
        fold_transposed_dots(comp)
    return fuse_module(module, executed, default_policy(target),
                       cost_model(target))


def flattened(module: Module) -> Module:
    """`module` with each `call` replaced by the called computation's instructions, and each
    loop of a few iterations known beforehand by its body's, once per iteration
    (unroll.py), so that kernels may span a call's or an iteration's boundary; an element
    of a tuple read where it is made, and without instructions no result needs; the same
    for the computations its while and conditional instructions run (a new Module)."""
    rebuilt: dict[int, Computation] = {}

    def rebuild(comp: Computation) -> Computation:
        if id(comp) not in rebuilt:
            taken = {i.name for i in comp.instructions}
            out: list[Instruction] = []
            value = {id(p): clone(p, []) for p in comp.parameters}
            out.extend(value.values())
            root = _inline(comp, value, out, taken, rebuild, top=True)
            needed = {id(i) for i in post_order([root], lambda i: i.operands, id)}
            out = [i for i in out if id(i) in needed or i.opcode == "parameter"]
            rebuilt[id(comp)] = Computation(comp.name, out, root, comp.execution_thread,
                                            comp.line, comp.column)
        return rebuilt[id(comp)]

    entry = rebuild(module.entry)
    comps = [rebuilt.get(id(c), c) for c in module.computations]
    return Module(module.name, comps, entry, dict(module.attrs), module.extra_sections)


def _inline(comp: Computation, value: dict[int, Instruction], out: list[Instruction],
            taken: set[str], rebuild, top: bool) -> Instruction:
    """Clones of what `comp`'s root needs appended to `out` (`value`: the clones so far, its
    parameters bound); returns the root's clone. Names of inlined instructions are made
    unique among `taken`."""
    for inst in comp.post_order():
        if id(inst) in value:
            continue
        operands = [value[id(o)] for o in inst.operands]
        if inst.opcode == "call":
            callee = inst.attrs["to_apply"]
            bound = {id(p): o for p, o in zip(callee.parameters, operands)}
            value[id(inst)] = _inline(callee, bound, out, taken, rebuild, top=False)
            continue
        if inst.opcode == "get-tuple-element" and operands[0].opcode == "tuple":
            value[id(inst)] = operands[0].operands[inst.attrs["index"]]
            continue
        if inst.opcode == "while" and (n := unroll.trips(inst, operands[0])) is not None:
            state, body = operands[0], inst.attrs["body"]
            for _ in range(n):
                state = _inline(body, {id(body.parameters[0]): state}, out, taken, rebuild,
                                top=False)
            value[id(inst)] = state
            continue
        attrs = {k: _rebuilt(v, rebuild) for k, v in inst.attrs.items()} \
            if inst.opcode in CONTROL else dict(inst.attrs)
        name = inst.name if top else unique_local(taken, inst.name)
        value[id(inst)] = _as_copy(inst, operands, name) or clone(inst, operands, name, attrs)
        out.append(value[id(inst)])
    return value[id(comp.root)]


def _as_copy(inst: Instruction, operands: list[Instruction], name: str) -> Instruction | None:
    """An identity custom call (a layout constraint, a sharding annotation on one device:
    interpreter.control.IDENTITY_CUSTOM_CALLS) as the copy into its layout that it is, which
    has kernels; None for any other instruction, or one that changes the type or dims."""
    if inst.opcode != "custom-call" or \
            inst.attrs.get("custom_call_target") not in IDENTITY_CUSTOM_CALLS or \
            len(operands) != 1 or operands[0].shape.is_tuple or inst.shape.is_tuple or \
            (operands[0].shape.element_type, operands[0].shape.dims) != \
            (inst.shape.element_type, inst.shape.dims):
        return None
    return Instruction(name, "copy", inst.shape, operands, line=inst.line, column=inst.column)


def _rebuilt(attr, rebuild):
    if isinstance(attr, Computation):
        return rebuild(attr)
    if isinstance(attr, tuple) and attr and isinstance(attr[0], Computation):
        return tuple(rebuild(c) for c in attr)
    return attr


def has_fusions(module: Module) -> bool:
    """Kernels already formed (by optimize, or XLA): compile keeps them as they are."""
    return any(i.opcode == "fusion" for i in module.instructions())
