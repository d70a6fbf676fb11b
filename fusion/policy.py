"""`fuse` and `limit` declarations -> the legality predicates fusion obeys.

    fuse loop_elementwise: elementwise <- elementwise, data_movement
    fuse input_reduce: reduce <- elementwise, data_movement when num_elements(producer) <= ...
    fuse sibling_reduce: reduce ~ reduce when dims(a) == dims(b)
    limit one_hero: heroes(kernel) <= 1

A producer may be computed inside a consumer's kernel when some `<-` declaration names the
consumer's and the producer's opcodes (or their classes) and its guards hold; two kernels
whose outputs come from `~`-related opcodes may merge into one multi-output kernel; every
kernel formed must satisfy every `limit`. Guards are analyzed and evaluated as every rule
file's guards are (rule_compiler/guard_analysis.py says what each declaration may name).
Whatever the declarations say, an instruction the target's code generator cannot emit
(targets.emits) shares no kernel: it runs on its own.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from operator import attrgetter
from typing import Callable, Iterable, NamedTuple

from ..rule_compiler.guard_analysis import (analyze_guards, fact_var, kernel_scope, naming,
                                     producer_scope, sibling_scope)
from ..rule_compiler.guard_ir import guards_hold, names_read
from ..grammar.rules_parser import Fuse, Limit
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


# What `limit` guards read of a kernel: heroes(kernel) and so on (guard_analysis.FACTS).
KERNEL_FACTS = {fact_var(name).name: name for name in KernelSize._fields}


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
    guards: list            # guard IR (guard_analysis)


@functools.lru_cache(maxsize=8)
def _analyzed(fuses: tuple[Fuse, ...], limits: tuple[Limit, ...]):
    """The declarations' analyzed guards: producer and sibling declarations, limits, and the
    kernel facts the limits read. Kept per process: analysis costs ~2 ms, a tenth of a small
    module's optimization, and every optimize call builds a policy."""
    producer_rules: list[_Decl] = []
    sibling_rules: list[_Decl] = []
    for f in fuses:
        with naming(f"fuse {f.name}"):
            scope = producer_scope() if f.relation == "<-" else sibling_scope()
            decl = _Decl(f.name, _ops_test(f.consumers, f), _ops_test(f.producers, f),
                         analyze_guards(f.guards, scope))
        (producer_rules if f.relation == "<-" else sibling_rules).append(decl)
    analyzed_limits: list[list] = []
    for lim in limits:
        with naming(f"limit {lim.name}"):
            analyzed_limits.append(analyze_guards(lim.guards, kernel_scope()))
    read = sorted({KERNEL_FACTS[n] for guards in analyzed_limits for g in guards
                   for n in names_read(g) if n in KERNEL_FACTS})
    return tuple(producer_rules), tuple(sibling_rules), tuple(analyzed_limits), read


class FusionPolicy:
    """What may fuse, per the declarations of a rule set, on one target."""

    def __init__(self, fuses: Iterable[Fuse], limits: Iterable[Limit], target: str):
        self.target = target
        self._emits = emits(target)
        producer_rules, sibling_rules, analyzed_limits, read = \
            _analyzed(tuple(fuses), tuple(limits))
        self.producer_rules: list[_Decl] = list(producer_rules)
        self.sibling_rules: list[_Decl] = list(sibling_rules)
        self.limits: list[list] = list(analyzed_limits)
        # limits are remembered by what they read of a kernel: fusion asks about thousands
        self._limited_by = attrgetter(*read) if read else (lambda kernel: ())
        self._within: dict[object, bool] = {}
        self._answers: dict[tuple, bool] = {}
        self._emitted: dict[int, bool] = {}     # id(instruction) -> emits(target)(it)

    def emitted(self, inst: Instruction) -> bool:
        """Whether the target emits `inst` in a kernel, asked once per instruction (a
        producer is asked about for each of its consumers)."""
        known = self._emitted.get(id(inst))
        if known is None:
            known = self._emitted[id(inst)] = self._emits(inst)
        return known

    @property
    def enabled(self) -> bool:
        return bool(self.producer_rules or self.sibling_rules)

    # Guards see opcodes, types and facts only, so answers are remembered by those.
    def may_fuse(self, consumer: Instruction, producer: Instruction, users: int) -> bool:
        n_rows = rows(producer)
        key = (consumer.opcode, consumer.shape, producer.opcode, producer.shape, users, n_rows)
        ok = self._answers.get(key)
        if ok is None:
            env = {"producer": producer.shape, "consumer": consumer.shape,
                   fact_var("users").name: users, fact_var("rows").name: n_rows,
                   "target": self.target}
            ok = self._answers[key] = any(
                d.left(consumer.opcode) and d.right(producer.opcode)
                and guards_hold(d.guards, env)
                for d in self.producer_rules)
        return ok and self.emitted(consumer) and self.emitted(producer)

    def may_merge_siblings(self, a: Instruction, b: Instruction) -> bool:
        key = (a.opcode, a.shape, b.opcode, b.shape)
        ok = self._answers.get(key)
        if ok is None:
            env = {"a": a.shape, "b": b.shape, "target": self.target}
            ok = self._answers[key] = any(
                ((d.left(a.opcode) and d.right(b.opcode)) or
                 (d.left(b.opcode) and d.right(a.opcode))) and guards_hold(d.guards, env)
                for d in self.sibling_rules)
        return ok and self.emitted(a) and self.emitted(b)

    def within_limits(self, kernel: KernelSize) -> bool:
        key = self._limited_by(kernel)
        ok = self._within.get(key)
        if ok is None:
            env = {fact: getattr(kernel, name) for fact, name in KERNEL_FACTS.items()}
            env["target"] = self.target
            ok = self._within[key] = all(guards_hold(lim, env) for lim in self.limits)
        return ok


def rows(inst: Instruction) -> int:
    """How many rows `inst`'s loop goes through, each computed on its own: a reduce's are
    the elements of its input's dimensions before the first one it reduces (a softmax's
    rows; 1 for a reduction to a scalar or over the leading dimension), any other
    instruction's its elements. A kernel reading a reduce's result can run row by row
    (lowering/row_pass.py) only when there are rows to go through."""
    if inst.opcode == "reduce" and inst.attrs.get("dimensions"):
        return math.prod(inst.operands[0].shape.dims[:min(inst.attrs["dimensions"])])
    return math.prod(s.num_elements for s in inst.shape.leaves()) if inst.shape.is_tuple \
        else inst.shape.num_elements


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

