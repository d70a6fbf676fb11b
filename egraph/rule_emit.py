"""RuleIR -> egglog `rule` commands in the term encoding of schema.py.

One DSL rule becomes one egglog rule per *variant*: each commutative node matches in either
operand order, each rank-specialized function is written once per length 0..MAX_RANK, and
each right-side splat is a bare scalar (rank 0) or a broadcast of one. Variants are
discovered while emitting: `choose` raises NeedChoice the first time it meets a decision,
and `emit_rule` re-emits once per option. Left-side splats need no variants: they match the
IsSplat relation the analysis ruleset maintains. Everything that can fail (functions, type
lookups) is bound in the query; actions only build terms. No egglog globals appear in rules
(they can silently never match).
"""
from __future__ import annotations

import re
from collections import defaultdict

from ..ops import OPS
from .rule_functions import COMPARISONS, FUNCTIONS, MAX_RANK, TypeParts, vec
from .rule_ir import ROOT, Apply, Compare, FoldIR, Lit, MakeType, PNode, RNode, RuleIR, TypeOf, Var
from .schema import attr_constructor
from .terms import egg_string

SPLAT_RELATION = "IsSplat"
# (IsSplat e "1"): e-class e is a constant whose every element is 1 (a scalar constant, or
# broadcasts of one). Computed with the analysis: left-side splats match any class holding
# such a term, in one rule instead of one per form.
SPLAT_DECLARATIONS = f"""(relation {SPLAT_RELATION} (Term String))
(rule ((= e (Leaf "constant" k ({attr_constructor("constant")} v r) t)))
      (({SPLAT_RELATION} e v)) :ruleset analysis :name "hlo-opt/splat-constant")
(rule ((= e (Op1 "broadcast" c a t)) ({SPLAT_RELATION} c v))
      (({SPLAT_RELATION} e v)) :ruleset analysis :name "hlo-opt/splat-broadcast")"""

_ATOMIC = re.compile(r'[A-Za-z_][\w\-]*|-?\d+|"[^"]*"|\(vec-range 0\)')


def term_constructor(op: str, operands: int) -> str:
    """Leaf for operand-less opcodes (parameter, constant, iota, ...), Op1..Op3 by operand
    count, OpV for the rest (after-all(), and four operands or more)."""
    if OPS[op].arity == 0:
        return "Leaf"
    return {1: "Op1", 2: "Op2", 3: "Op3"}.get(operands, "OpV")


class NeedChoice(Exception):
    def __init__(self, key, options: int):
        super().__init__(key)
        self.key, self.options = key, options


class Emitter:
    """Query atoms and action text of one variant (fixed by `choices`)."""

    def __init__(self, choices: dict, types: dict[str, str] | None = None):
        self.choices = choices
        self.atoms: list[str] = []
        self.bound: dict[str, str] = {}                   # expression -> variable
        self.type_parts: dict[str, TypeParts] = {}
        self.types: dict[str, str] = dict(types or {})    # term variable -> its type variable
        self.calls: dict[str, set] = defaultdict(set)     # function row -> literal arguments

    def choose(self, key, options: int) -> int:
        if key not in self.choices:
            raise NeedChoice(key, options)
        return self.choices[key]

    def atom(self, text: str) -> None:
        if text not in self.atoms:
            self.atoms.append(text)

    def bind(self, expr: str) -> str:
        """A query variable equal to `expr` (atoms and literals are returned as they are)."""
        if _ATOMIC.fullmatch(expr):
            return expr
        var = self.bound.get(expr)
        if var is None:
            var = self.bound[expr] = f"i_e{len(self.bound)}"
            self.atom(f"(= {var} {expr})")
        return var

    # --- values --------------------------------------------------------------------------

    def value(self, v) -> str:
        if isinstance(v, Lit):
            return literal(v)
        if isinstance(v, Var):
            return v.name
        if isinstance(v, TypeOf):
            if v.term not in self.types:
                self.types[v.term] = self.bind(f"(tyof {v.term})")
            return self.types[v.term]
        if isinstance(v, MakeType):
            return f'(T {self.value(v.dtype)} {self.value(v.dims)} "")'
        if isinstance(v, Compare):
            self.atom(f"({COMPARISONS[v.op].egg} {self.value(v.left)} {self.value(v.right)})")
            return ""
        return self.apply(v)

    def parts(self, t) -> TypeParts:
        if isinstance(t, MakeType):
            return TypeParts(self.value(t.dtype), self.value(t.dims))
        var = self.value(t)
        parts = self.type_parts.get(var)
        if parts is None:
            n = len(self.type_parts)
            parts = self.type_parts[var] = TypeParts(f"i_dt{n}", f"i_d{n}")
            self.atom(f"(= {var} (T i_dt{n} i_d{n} i_x{n}))")
        return parts

    def apply(self, v: Apply) -> str:
        fn = FUNCTIONS[v.fn]
        args = [self.parts(a) if kind == "type" else self.value(a)
                for a, kind in zip(v.args, fn.params)]
        self.calls[fn.name].add(tuple(a.value if isinstance(a, Lit) else None for a in v.args))
        k = None
        if fn.rank_of is not None:
            vecs = [a.dims if isinstance(a, TypeParts) else a for a in args]
            k = static_length(v.args[fn.rank_of])
            if k is None:
                k = self.choose(("rank", vecs[fn.rank_of]), MAX_RANK + 1)
            for i in (fn.rank_of, *fn.same_rank):
                if static_length(v.args[i]) is None:
                    self.atom(f"(= {k} (vec-length {vecs[i]}))")
                elif static_length(v.args[i]) != k:
                    self.atom("(= 0 1)")        # lengths differ: the rule never applies
        out = fn.egg(self, args, k)
        return "" if fn.result == "bool" else self.bind(out)

    # --- left side -----------------------------------------------------------------------

    def pattern(self, node: PNode) -> str:
        """Adds the atoms matching `node`; returns the variable of its e-class."""
        if node.op is None:
            return node.var
        if node.splat is not None:              # its type, if needed, comes from tyof
            self.atom(f"({SPLAT_RELATION} {node.var} {egg_string(node.splat)})")
            return node.var
        self.types[node.var] = node.type_var
        children = [self.pattern(c) for c in node.children]
        if node.commutative and self.choose(("swap", node.var), 2):
            children.reverse()
        expr = self.term(node.op, children, node.attrs, node.type_var, key=f"{node.var}_k",
                         operands=f"{node.var}_xs")
        self.atom(f"(= {node.var} {expr})")
        if node.var == ROOT:
            self.root_expr = expr
        return node.var

    def term(self, op: str, children: list[str], attrs, type_text: str, key: str,
             operands: str | None = None) -> str:
        """A term; with `operands`, an OpV's operands are matched through that variable."""
        attr = f"({attr_constructor(op)} {' '.join(self.value(v) for _, v in attrs)})"
        ctor = term_constructor(op, len(children))
        if ctor == "Leaf":
            return f'(Leaf "{op}" {key} {attr} {type_text})'
        if ctor != "OpV":
            return f'({ctor} "{op}" {" ".join(children)} {attr} {type_text})'
        if operands is None:
            items = f"(vec-of {' '.join(children)})" if children else "(vec-empty)"
            return f'(OpV "{op}" {items} {attr} {type_text})'
        self.atom(f"(= {len(children)} (vec-length {operands}))")
        for i, child in enumerate(children):
            self.atom(f"(= {child} (vec-get {operands} {i}))")
        return f'(OpV "{op}" {operands} {attr} {type_text})'

    # --- right side ----------------------------------------------------------------------

    def build(self, node: RNode) -> str:
        if node.kind == "ref":
            return node.ref
        type_text = self.value(node.type)
        if node.kind == "splat":
            parts = self.parts(node.type)
            text = egg_string(node.splat)
            leaf = f'(Leaf "constant" 0 ({attr_constructor("constant")} {text} "") {{}})'
            rank = static_length(node.type)
            if rank == 0 or rank is None and self.choose(("rsplat", node.id), 2) == 0:
                if rank is None:
                    self.atom(f"(= 0 (vec-length {parts.dims}))")
                return leaf.format(type_text)
            if rank is None:
                self.atom(f"(< 0 (vec-length {parts.dims}))")
            scalar = leaf.format(f'(T {parts.dtype} {vec([])} "")')
            return f'(Op1 "broadcast" {scalar} ({attr_constructor("broadcast")} {vec([])} "") ' \
                   f"{type_text})"
        children = [self.build(c) for c in node.children]
        return self.term(node.op, children, node.attrs, type_text, key="0")


def static_length(v) -> int | None:
    """Length of a list value (or rank of a type value) known when compiling, else None."""
    if isinstance(v, MakeType):
        v = v.dims
    return len(v.value) if isinstance(v, Lit) and v.kind == "ints" else None


def literal(v: Lit) -> str:
    if v.kind == "ints":
        return vec(map(str, v.value))
    if v.kind == "int":
        return str(v.value)
    return egg_string(v.value)


def emit_rule(ir: RuleIR) -> tuple[list[tuple[str, str]], dict[str, set]]:
    """[(query, actions)] per distinct variant, and the function calls the variants make."""
    def emit(em: Emitter) -> str:
        em.pattern(ir.lhs)
        for g in ir.guards:
            em.value(g)
        actions = [f"(union {ROOT} {em.build(ir.rhs)})"]
        if ir.subsume:
            actions.append(f"(subsume {em.root_expr})")
        return " ".join(actions)

    out, calls = [], defaultdict(set)
    for em, actions in _variants(emit):
        body = (" ".join(em.atoms), actions)
        if body not in out:
            out.append(body)
        for name, c in em.calls.items():
            calls[name] |= c
    return out, calls


def _variants(emit, types: dict[str, str] | None = None):
    """Run `emit(emitter)` once per combination of the choices it meets; yields
    (emitter, result) in a deterministic order."""
    stack: list[dict] = [{}]
    while stack:
        choices = stack.pop()
        em = Emitter(choices, types)
        try:
            result = emit(em)
        except NeedChoice as need:
            stack.extend({**choices, need.key: i} for i in reversed(range(need.options)))
            continue
        yield em, result


def rule_command(query: str, actions: str, ruleset: str, name: str) -> str:
    return f"(rule ({query})\n      ({actions})\n      :ruleset {ruleset} :name {egg_string(name)})"


def fold_guard_variants(fold: FoldIR, type_var: str) -> list[list[str]]:
    """Query atoms for a fold's guards about a term of type `type_var` (a query variable),
    one list per variant (rank-specialized guards such as num_elements give several)."""
    def emit(em: Emitter) -> None:
        for g in fold.guards:
            em.value(g)

    return [list(em.atoms) for em, _ in _variants(emit, types={ROOT: type_var})]
