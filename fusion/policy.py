"""`fuse` and `limit` declarations -> the legality predicates fusion obeys.

    fuse loop_elementwise: elementwise <- elementwise, data_movement
    fuse input_reduce: reduce <- elementwise, data_movement when num_elements(producer) <= ...
    fuse sibling_reduce: reduce ~ reduce when dims(a) == dims(b)
    limit one_hero: heroes(kernel) <= 1

A producer may be computed inside a consumer's kernel when some `<-` declaration names the
consumer's and the producer's opcodes (or their classes) and its guards hold; two kernels
whose outputs come from `~`-related opcodes may merge into one multi-output kernel; every
kernel formed must satisfy every `limit`. Guards use the rule language's functions on
`producer`, `consumer`, `a`, `b` (instructions: their types) and `kernel`, plus `target`.
Whatever the declarations say, an instruction the target's code generator cannot emit
(targets.emits) shares no kernel: it runs on its own.
"""
from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from typing import Callable, Iterable, NamedTuple

from ..egraph.rule_functions import COMPARISONS, FUNCTIONS, NoValue
from ..errors import HloError
from ..grammar.rules_parser import Call, Comparison, Fuse, Limit, Name, Number
from ..ir import Instruction
from ..ops import HEROES, OPS, is_elementwise
from ..targets import emits


def _in_class(cls: str) -> Callable[[str], bool]:
    if cls == "elementwise":
        return is_elementwise
    return lambda op: op in OPS and OPS[op].category == cls


# Op classes a `fuse` declaration may name instead of opcodes: categories of the opcode table
# ("elementwise" takes in all elementwise ones).
FUSION_OP_CLASSES = ("elementwise", "data_movement", "reduction", "contraction")


class KernelSize(NamedTuple):
    """What `limit` guards see of a kernel (fusion counts these as kernels merge)."""
    heroes: int         # distinct loop nests of its heroes (see loop_nest)
    fan_in: int         # values it reads
    members: int
    outputs: int        # values it writes


# Functions of the fusion guard language beyond the rule language's (which see types).
KERNEL_FUNCTIONS: dict[str, Callable[[KernelSize], int]] = {
    name: attrgetter(name) for name in KernelSize._fields}


def loop_nest(inst: Instruction) -> tuple | None:
    """The loop structure a hero brings to its kernel, None for other instructions: sibling
    reductions of one input over the same dims share one (and one multi-output kernel); a
    row and a column sum do not."""
    if inst.opcode not in HEROES:
        return None
    return (inst.opcode, tuple(tuple(o.shape.dims) for o in inst.operands if not o.shape.is_tuple),
            tuple(inst.attrs.get("dimensions", ()) or ()))


@dataclass(frozen=True)
class _Decl:
    name: str
    left: Callable[[str], bool]          # consumer (or a) opcode test
    right: Callable[[str], bool]         # producer (or b) opcode test
    guards: tuple


class FusionPolicy:
    """What may fuse, per the declarations of a rule set, on one target."""

    def __init__(self, fuses: Iterable[Fuse], limits: Iterable[Limit], target: str):
        self.target = target
        self.emitted = emits(target)
        self.producer_rules: list[_Decl] = []
        self.sibling_rules: list[_Decl] = []
        for f in fuses:
            decl = _Decl(f.name, _ops_test(f.consumers, f), _ops_test(f.producers, f), f.guards)
            for g in f.guards:
                _check(g, f, ("producer", "consumer") if f.relation == "<-" else ("a", "b"))
            (self.producer_rules if f.relation == "<-" else self.sibling_rules).append(decl)
        self.limits = tuple(limits)
        for lim in self.limits:
            for g in lim.guards:
                _check(g, lim, ("kernel",))
        # limits are remembered by what they read of a kernel: fusion asks about thousands
        read = sorted(set().union(*(_kernel_reads(g) for lim in self.limits for g in lim.guards)))
        self._limited_by = attrgetter(*read) if read else (lambda kernel: ())
        self._within: dict[object, bool] = {}
        self._answers: dict[tuple, bool] = {}

    @property
    def enabled(self) -> bool:
        return bool(self.producer_rules or self.sibling_rules)

    # Guards see opcodes and types only, so answers are remembered by those.
    def may_fuse(self, consumer: Instruction, producer: Instruction, users: int) -> bool:
        key = (consumer.opcode, consumer.shape, producer.opcode, producer.shape, users)
        ok = self._answers.get(key)
        if ok is None:
            env = {"producer": producer, "consumer": consumer, "users": users}
            ok = self._answers[key] = any(
                d.left(consumer.opcode) and d.right(producer.opcode) and self._holds(d, env)
                for d in self.producer_rules)
        return ok and self.emitted(consumer) and self.emitted(producer)

    def may_merge_siblings(self, a: Instruction, b: Instruction) -> bool:
        key = (a.opcode, a.shape, b.opcode, b.shape)
        ok = self._answers.get(key)
        if ok is None:
            env = {"a": a, "b": b}
            ok = self._answers[key] = any(
                ((d.left(a.opcode) and d.right(b.opcode)) or
                 (d.left(b.opcode) and d.right(a.opcode))) and self._holds(d, env)
                for d in self.sibling_rules)
        return ok and self.emitted(a) and self.emitted(b)

    def within_limits(self, kernel: KernelSize) -> bool:
        key = self._limited_by(kernel)
        ok = self._within.get(key)
        if ok is None:
            env = {"kernel": kernel}
            ok = self._within[key] = all(self._holds(lim, env) for lim in self.limits)
        return ok

    def _holds(self, decl, env) -> bool:
        try:
            return all(_value(g, env, self.target) for g in decl.guards)
        except NoValue:
            return False


def _ops_test(names: tuple[str, ...], decl) -> Callable[[str], bool]:
    tests = []
    for name in names:
        if name in FUSION_OP_CLASSES:
            tests.append(_in_class(name))
        elif name in OPS:
            tests.append(lambda op, name=name: op == name)
        else:
            raise decl.pos.error(f"'{name}' is neither an opcode nor an op class "
                                 f"({', '.join(FUSION_OP_CLASSES)})")
    return lambda op: any(t(op) for t in tests)


def _check(expr, decl, names: tuple[str, ...]) -> None:
    """Reject unknown functions and names when the rule file is loaded, not mid-fusion."""
    if isinstance(expr, Comparison):
        if expr.op not in COMPARISONS:
            raise expr.pos.error(f"unknown comparison '{expr.op}'")
        _check(expr.left, decl, names)
        _check(expr.right, decl, names)
    elif isinstance(expr, Call):
        if expr.name in KERNEL_FUNCTIONS:
            if names != ("kernel",):
                raise expr.pos.error(f"'{expr.name}' applies to a kernel, in a limit")
        elif expr.name == "users":
            if "producer" not in names:
                raise expr.pos.error("'users' applies to the producer")
        else:
            fn = FUNCTIONS.get(expr.name)
            if fn is None or not fn.public:
                raise expr.pos.error(f"unknown function '{expr.name}' in a fusion guard")
        for arg in expr.args:
            _check(arg, decl, names)
    elif isinstance(expr, Name) and expr.name in ("producer", "consumer", "a", "b", "kernel"):
        if expr.name not in names:
            raise expr.pos.error(f"'{expr.name}' is not defined here (use {', '.join(names)})")
    elif not isinstance(expr, (Name, Number)):
        raise HloError("unsupported fusion guard", decl.pos.file, decl.pos.line, decl.pos.column)


def _kernel_reads(expr) -> set[str]:
    """The KernelSize fields a limit guard reads (all, if it hands the kernel on whole)."""
    if isinstance(expr, Comparison):
        return _kernel_reads(expr.left) | _kernel_reads(expr.right)
    if isinstance(expr, Call):
        if expr.name in KERNEL_FUNCTIONS:
            return {expr.name}
        return set().union(*map(_kernel_reads, expr.args))
    if isinstance(expr, Name) and expr.name == "kernel":
        return set(KernelSize._fields)
    return set()


def _value(expr, env: dict, target: str):
    if isinstance(expr, Comparison):
        return COMPARISONS[expr.op].py(_value(expr.left, env, target),
                                       _value(expr.right, env, target))
    if isinstance(expr, Number):
        return expr.value
    if isinstance(expr, Name):
        if expr.name == "target":
            return target
        return env.get(expr.name, expr.name)
    if expr.name in KERNEL_FUNCTIONS:
        return KERNEL_FUNCTIONS[expr.name](_value(expr.args[0], env, target))
    if expr.name == "users":
        return env["users"]
    args = [_value(a, env, target) for a in expr.args]
    if any(isinstance(a, Instruction) and a.shape.is_tuple for a in args):
        raise NoValue       # the rule language's functions see arrays (as in rules)
    return FUNCTIONS[expr.name].py(*(a.shape if isinstance(a, Instruction) else a
                                     for a in args))
