"""A rule after semantic analysis: what the egglog emitter (rule_emit.py) writes and what the
rule checker (soundness.py) evaluates. Both read this one form, so a rule cannot mean one
thing in the e-graph and another in its soundness check.

Names are egglog query variables: `v_<name>` for the rule's own variables, `i_...` for the
compiler's (LHS node `i_n<k>` with type `i_t<k>`, unnamed attribute fields `i_a<k>_<j>`).
Values are small expression trees over them (Lit, Var, TypeOf, Apply, MakeType, Compare);
`evaluate` gives their Python meaning from bindings of those variables.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..grammar.rules_parser import Fold, Pos, Rule
from .rule_functions import COMPARISONS, FUNCTIONS, type_value

ROOT = "i_n0"       # the matched term's e-class variable


@dataclass(frozen=True)
class Lit:
    value: object
    kind: str


@dataclass(frozen=True)
class Var:
    """A query variable: a term ("term"), or an attribute value of some kind."""
    name: str
    kind: str


@dataclass(frozen=True)
class TypeOf:
    term: str           # query variable of a term


@dataclass(frozen=True)
class Apply:
    fn: str             # row of rule_functions.FUNCTIONS
    args: tuple


@dataclass(frozen=True)
class MakeType:
    dtype: object
    dims: object


@dataclass(frozen=True)
class Compare:
    op: str
    left: object
    right: object


def kind_of(value) -> str:
    if isinstance(value, (Lit, Var)):
        return value.kind
    if isinstance(value, Apply):
        return FUNCTIONS[value.fn].result
    if isinstance(value, Compare):
        return "bool"
    return "type"


def evaluate(value, env: dict):
    """Python value of `value`; env maps query variables to values (terms to their Shape).
    Raises rule_functions.NoValue where the egglog rule would not match."""
    if isinstance(value, Lit):
        return value.value
    if isinstance(value, Var):
        return env[value.name]
    if isinstance(value, TypeOf):
        return env[value.term]
    if isinstance(value, Apply):
        return FUNCTIONS[value.fn].py(*(evaluate(a, env) for a in value.args))
    if isinstance(value, MakeType):
        return type_value(evaluate(value.dtype, env), evaluate(value.dims, env))
    return COMPARISONS[value.op].py(evaluate(value.left, env), evaluate(value.right, env))


@dataclass
class PNode:
    """One node of the left side. `op` None: a variable (`var` is its v_ name); `splat`: the
    canonical text of a splat constant (scalar, or a broadcast of one)."""
    var: str
    op: str | None
    pos: Pos
    children: list[PNode] = field(default_factory=list)
    attrs: list[tuple[str, object]] = field(default_factory=list)   # schema order, then rest
    type_var: str = ""
    splat: str | None = None
    commutative: bool = False
    op_var: str = ""        # set when `op` is an op class: the variable naming the matched op


@dataclass
class RNode:
    """One node of the right side: a reference to a bound term ("ref"), a new instruction
    ("op"), or a splat constant ("splat", of the text `splat` or the integer `value`);
    `type` is the value of its result type."""
    kind: str
    id: int
    pos: Pos
    type: object
    ref: str = ""
    op: str = ""
    children: list[RNode] = field(default_factory=list)
    attrs: list[tuple[str, object]] = field(default_factory=list)
    splat: str = ""
    value: object = None    # a computed splat: its integer value (splat is then "")
    op_var: str = ""        # a new op of an op class: the variable naming it


@dataclass
class RuleIR:
    rule: Rule
    lhs: PNode
    guards: list            # bool values: the rule's guards, then the compiler's own
    rhs: RNode
    subsume: bool           # the right side is a fresh constant: retire the matched node


@dataclass
class FoldIR:
    fold: Fold
    guards: list            # bool values over TypeOf(ROOT)
