"""A rule after semantic analysis: what the egglog emitter (rule_emit.py) writes and what the
rule checker (soundness.py) evaluates. Both read this one form, so a rule cannot mean one
thing in the e-graph and another in its soundness check.

Names are egglog query variables: `v_<name>` for the rule's own variables, `i_...` for the
compiler's (LHS node `i_n<k>` with type `i_t<k>`, unnamed attribute fields `i_a<k>_<j>`).
Guards and attribute values are guard IR over them (guard_ir.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..grammar.rules_parser import Fold, Pos, Rule

ROOT = "i_n0"       # the matched term's e-class variable


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
    rest: str = ""          # `idx...` after the children: the variable of the remaining operands


@dataclass
class RNode:
    """One node of the right side: a reference to a bound term ("ref"), a new instruction
    ("op"), a splat constant ("splat", of the text `splat` or the integer `value`), or, as
    an op's last child, a list of operands ("operands": `value` is the list, `i` bound by
    `i...` or a function of such lists); `type` is the value of its result type (None for
    "operands")."""
    kind: str
    id: int
    pos: Pos
    type: object
    ref: str = ""
    op: str = ""
    children: list[RNode] = field(default_factory=list)
    attrs: list[tuple[str, object]] = field(default_factory=list)
    splat: str = ""
    value: object = None    # a computed splat: its integer value (splat is then ""); a list
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
    guards: list            # bool values over `root` (guard_analysis.fold_scope)
