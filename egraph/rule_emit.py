"""RuleIR -> egglog `rule` commands in the term encoding of schema.py.

One DSL rule becomes one egglog rule per *variant*: each commutative node matches in either
operand order, each rank-specialized function is written once per length 0..MAX_RANK, and
each right-side splat is a bare scalar (rank 0) or a broadcast of one. Variants are
discovered while emitting: `choose` raises NeedChoice the first time it meets a decision,
and `emit_rule` re-emits once per option. Lengths are chosen for *base* lists only (list
attributes, terms' dims), grouped where the pattern says they are equal; the lengths of
function results follow (Fn.length), and a variant whose lengths contradict each other or
an integer guard raises Impossible and is not emitted: the egglog program stays small. Left-side splats need no variants: they match the
IsSplat relation the analysis ruleset maintains. Everything that can fail (functions, type
lookups) is bound in the query; actions only build terms. No egglog globals appear in rules
(they can silently never match).
"""
from __future__ import annotations

import re
from collections import defaultdict

from ..ops import OPS
from ..shape_inference import ELEMENTWISE
from .rule_functions import COMPARISONS, FUNCTIONS, MAX_RANK, TypeParts, vec
from .rule_ir import (ROOT, Apply, Compare, FoldIR, Lit, MakeType, PNode, RNode, RuleIR, TypeOf,
                      Var, kind_of)
from .rule_types import CLASS_REPRESENTATIVE, OP_CLASSES
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

# (OpClass "unary" "negate"): the members of each op class (rule_types.OP_CLASSES).
CLASS_DECLARATIONS = "\n".join(["(relation OpClass (String String))"] + [
    f'(OpClass "{name}" "{op}")' for name, ops in OP_CLASSES.items() for op in ops])

_ATOMIC = re.compile(r'[A-Za-z_][\w\-]*|-?\d+|"[^"]*"|\(vec-range 0\)')


# How to make a computed copy of a value, per kind (see Emitter.value).
FILTER_COPY = {"dtype": '(+ {} "")', "int": "(+ {} 0)"}
_VARIABLE = re.compile(r"[iv]_\w+")


def term_constructor(op: str, operands: int) -> str:
    """Leaf for operand-less opcodes (parameter, constant, iota, ...), Op1..Op3 by operand
    count, OpV for the rest (after-all(), and four operands or more)."""
    if OPS[CLASS_REPRESENTATIVE.get(op, op)].arity == 0:
        return "Leaf"
    return {1: "Op1", 2: "Op2", 3: "Op3"}.get(operands, "OpV")


class Impossible(Exception):
    """This variant's list lengths contradict each other: it can never match, so it is not
    emitted at all."""


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
        # Lists known to have one length (the attributes of a slice and its operand's dims,
        # both sides of a list `==`, ...) share one rank choice: a union-find over list
        # expressions and "ty:<term>" (a term's dims), and the chosen length per class.
        self.parent: dict[str, str] = {}
        self.lengths: dict[str, int] = {}
        self.int_guards: list[Compare] = []

    def find(self, x: str) -> str:
        root = x
        while self.parent.get(root, root) != root:
            root = self.parent[root]
        while x != root:                        # path compression
            self.parent[x], x = root, self.parent[x]
        return root

    def same_length(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return
        self.parent[ra] = rb
        if ra in self.lengths:
            if self.lengths.setdefault(rb, self.lengths[ra]) != self.lengths[ra]:
                raise Impossible                # two chosen lengths meet

    def fix_length(self, key: str, k: int) -> None:
        if not 0 <= k <= MAX_RANK:
            raise Impossible
        if self.lengths.setdefault(self.find(key), k) != k:
            raise Impossible

    # --- the length algebra: lengths of list values, values of integer ones ----------------
    # Every rank choice is made on a *base* list (a list attribute, a term's dims); lengths
    # of function results follow from their arguments (Fn.length), so a rule's variants are
    # the combinations of its base lists' lengths that do not contradict each other.

    def check_int_guards(self) -> None:
        """A variant whose lengths make an integer guard false (`rank(x) <= 4` where x has
        rank 5 in it) can never match: it is dropped."""
        for v in self.int_guards:
            a, b = self.int_of(v.left, choose=False), self.int_of(v.right, choose=False)
            if a is not None and b is not None and not COMPARISONS[v.op].py(a, b):
                raise Impossible

    def length_of(self, v, choose: bool = True) -> int | None:
        """The length of a list value; `choose`: a base list of unknown length gets a
        variant choice (else the answer is None)."""
        if isinstance(v, Lit):
            return len(v.value) if v.kind == "ints" else None
        if isinstance(v, MakeType):
            return self.length_of(v.dims, choose)
        if isinstance(v, (Var, TypeOf)):
            key = self.find(v.name if isinstance(v, Var) else f"ty:{v.term}")
            if key not in self.lengths and choose:
                self.lengths[key] = self.choose(("rank", key), MAX_RANK + 1)
            return self.lengths.get(key)
        if isinstance(v, Apply):
            return self.derived(v, choose)
        return None

    def int_of(self, v, choose: bool = True) -> int | None:
        if isinstance(v, Lit) and v.kind == "int":
            return v.value
        return self.derived(v, choose) if isinstance(v, Apply) else None

    def derived(self, v: Apply, choose: bool = True) -> int | None:
        fn = FUNCTIONS[v.fn]
        if fn.length is None:
            return None
        lens = [self.length_of(a, choose) if kind in ("ints", "type") else None
                for a, kind in zip(v.args, fn.params)]
        ints = [self.int_of(a, choose) if kind == "int" else None
                for a, kind in zip(v.args, fn.params)]
        out = fn.length(lens, ints)
        if out is not None and fn.result == "ints" and not 0 <= out <= MAX_RANK:
            raise Impossible
        return out

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
            if kind_of(v.left) == "int":
                self.int_guards.append(v)       # decided after the variant's choices
            left, right = self.value(v.left), self.value(v.right)
            if v.op == "==" and kind_of(v.left) == "ints":
                self.same_length(left, right)
            if v.op == "==" and kind_of(v.left) in FILTER_COPY \
                    and _VARIABLE.fullmatch(left) and _VARIABLE.fullmatch(right):
                # `(= a b)` lets egglog unify a and b and join on them, and a dtype or a
                # small integer matches nearly every row: a rule guarding dtype(x) ==
                # dtype(y) enumerated the x and y candidates apart (~10 ms a run on a
                # 1,000-node graph). Comparing two computed copies is a check made once the
                # pattern has bound both.
                copy = FILTER_COPY[kind_of(v.left)]
                left, right = copy.format(left), copy.format(right)
            self.atom(f"({COMPARISONS[v.op].egg} {left} {right})")
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
        if isinstance(t, TypeOf):
            self.same_length(f"ty:{t.term}", parts.dims)
        return parts

    def apply(self, v: Apply) -> str:
        fn = FUNCTIONS[v.fn]
        args = [self.parts(a) if kind == "type" else self.value(a)
                for a, kind in zip(v.args, fn.params)]
        self.calls[fn.name].add(tuple(a.value if isinstance(a, Lit) else None for a in v.args))
        k = None
        if fn.rank_of is not None:
            vecs = [a.dims if isinstance(a, TypeParts) else a for a in args]
            group = (fn.rank_of, *fn.same_rank)
            for i in group[1:]:
                self.same_length(vecs[group[0]], vecs[i])
            k = self.length_of(v.args[fn.rank_of])
            if k is None:       # no rule for this value's length: a choice of its own
                key = self.find(vecs[fn.rank_of])
                k = self.lengths.get(key)
                if k is None:
                    k = self.choose(("rank", key), MAX_RANK + 1)
            self.fix_length(vecs[fn.rank_of], k)
            for i in group:
                self.fix_length(vecs[i], k)
                if static_length(v.args[i]) is None:
                    self.atom(f"(= {k} (vec-length {vecs[i]}))")
        if fn.value_of is not None:
            n = self.int_of(v.args[fn.value_of])
            if n is None:
                n = self.choose(("value", args[fn.value_of]), MAX_RANK + 1)
                self.atom(f"(= {n} {args[fn.value_of]})")
            if not 0 <= n <= MAX_RANK:
                raise Impossible
            k = (k, n)
        out = fn.egg(self, args, k)
        if fn.result == "bool":
            return ""
        result = self.bind(out)
        if fn.result == "ints":
            n = self.derived(v, choose=False)
            if n is not None:
                self.fix_length(result, n)
        return result

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
        for a, b in rank_links(node):
            self.same_length(a, b)
        if node.commutative and self.choose(("swap", node.var), 2):
            children.reverse()
        if node.op_var:
            self.atom(f'(OpClass "{node.op}" {node.op_var})')
        expr = self.term(node.op, children, node.attrs, node.type_var, key=f"{node.var}_k",
                         operands=f"{node.var}_xs", op_var=node.op_var)
        self.atom(f"(= {node.var} {expr})")
        if node.var == ROOT:
            self.root_expr = expr
        return node.var

    def term(self, op: str, children: list[str], attrs, type_text: str, key: str,
             operands: str | None = None, op_var: str = "") -> str:
        """A term; with `operands`, an OpV's operands are matched through that variable;
        with `op_var`, its opcode is that variable's (an op class)."""
        attr = f"({attr_constructor(op)} {' '.join(self.value(v) for _, v in attrs)})"
        ctor = term_constructor(op, len(children))
        name = op_var or f'"{op}"'
        if ctor == "Leaf":
            return f'(Leaf {name} {key} {attr} {type_text})'
        if ctor != "OpV":
            return f'({ctor} {name} {" ".join(children)} {attr} {type_text})'
        if operands is None:
            items = f"(vec-of {' '.join(children)})" if children else "(vec-empty)"
            return f'(OpV {name} {items} {attr} {type_text})'
        self.atom(f"(= {len(children)} (vec-length {operands}))")
        for i, child in enumerate(children):
            self.atom(f"(= {child} (vec-get {operands} {i}))")
        return f'(OpV {name} {operands} {attr} {type_text})'

    # --- right side ----------------------------------------------------------------------

    def build(self, node: RNode) -> str:
        if node.kind == "ref":
            return node.ref
        type_text = self.value(node.type)
        if node.kind == "splat":
            parts = self.parts(node.type)
            text = egg_string(node.splat) if node.value is None else self.bind(
                f"(to-string {self.value(node.value)})")
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
        return self.term(node.op, children, node.attrs, type_text, key="0", op_var=node.op_var)


# Attributes whose length is the rank of the op's first operand.
_RANK_FIELDS = {"slice": ("start", "limit", "stride"), "pad": ("low", "high", "interior"),
                "transpose": ("dimensions",), "broadcast": ("dimensions",)}
# Ops whose result has the rank of their first operand (besides the elementwise ones).
_SAME_RANK = frozenset({"slice", "pad", "reverse", "transpose", "copy", "convert",
                        "reduce-precision", "concatenate", "dynamic-slice"})


def rank_links(node: PNode) -> list[tuple[str, str]]:
    """Pairs of list keys of a left-side node known to have one length: "ty:<term>" for a
    term's dims, variable names for list attributes."""
    op = CLASS_REPRESENTATIVE.get(node.op, node.op)
    if not node.children:
        return []
    first = f"ty:{node.children[0].var}"
    links = [(first, v.name) for name, v in node.attrs
             if name in _RANK_FIELDS.get(op, ()) and isinstance(v, Var)]
    attrs = dict(node.attrs)
    if op == "dot":                 # as many lhs as rhs contracting (and batch) dims
        for side in ("contracting", "batch"):
            a, b = attrs.get(f"lhs_{side}_dims"), attrs.get(f"rhs_{side}_dims")
            if isinstance(a, Var) and isinstance(b, Var):
                links.append((a.name, b.name))
    if op in _SAME_RANK or op in ELEMENTWISE and op not in ("select", "clamp"):
        links.append((first, f"ty:{node.var}"))
        if op == "concatenate" or op in ELEMENTWISE:
            links += [(first, f"ty:{c.var}") for c in node.children[1:]]
    if op in ("select", "clamp"):
        links.append((f"ty:{node.children[1].var}", f"ty:{node.var}"))
    return links


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
        em.check_int_guards()
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
        except Impossible:
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
