"""RuleIR -> egglog `rule` commands in the term encoding of schema.py.

One DSL rule becomes one egglog rule per *variant*: each commutative node matches in either
operand order, each right-side splat of unknown rank is a bare scalar (rank 0) or a
broadcast of one, and each operand list (`i...`) has one of a few lengths, which decides
whether its terms are Op1..Op3 or OpV (Emitter.with_operands). Variants are discovered while emitting: `choose` raises NeedChoice the
first time it meets a decision, and `emit_rule` re-emits once per option. Left-side splats
need no variants: they match the constant analysis (schema.CONSTANT) in any form. Everything
that can fail (functions, type lookups) is bound in the query; actions only build terms. A
host function (a list function Python computes, host_calls.py) is a lookup in its answer
table, plus a *request rule*: the query up to that lookup, adding the request. No egglog
globals appear in rules (they can silently never match).
"""
from __future__ import annotations

import re
from collections import defaultdict

from ..egraph.host_calls import answer_table, request_table
from ..egraph import schema
from ..egraph.schema import (array_type, atom, attr, attr_constructor, eq, query_vec as vec,
                             relation, rule, splat_atom, union)
from ..egraph.terms import egg_string
from ..ops import OPS
from .guard_ir import Apply, Compare, Lit, MakeType, SplatOf, TypeOf, Var, names_read
from .rule_functions import COMPARISONS, FUNCTIONS, TypeParts
from .rule_ir import ROOT, PNode, RNode, RuleIR
from .rule_types import CLASS_REPRESENTATIVE, REWRITE_OP_CLASSES

# (OpClass "unary" "negate"): the members of each op class (rule_types.REWRITE_OP_CLASSES).
CLASS_DECLARATIONS = "\n".join([relation("OpClass", ["String", "String"])] + [
    atom("OpClass", egg_string(name), egg_string(op))
    for name, ops in REWRITE_OP_CLASSES.items() for op in ops])

_ATOMIC = re.compile(r'[A-Za-z_][\w\-]*|-?\d+|"[^"]*"|\(vec-range 0\)')


# The lengths a `name...` operand list is matched at: exactly 1, 2 or 3, or 4 and more
# (Emitter.with_operands); a list a function reads (`starts(i)`) at each exact length up
# to MAX_READ_OPERANDS (functions of longer lists have no value).
REST_LENGTHS = (1, 2, 3, 4)
MAX_READ_OPERANDS = 8
READ_LENGTHS = tuple(range(1, MAX_READ_OPERANDS + 1))

# How to make a computed copy of a value, per kind (see Emitter.value).
FILTER_COPY = {"dtype": '""', "int": "0"}     # the value added to make the copy
_VARIABLE = re.compile(r"[iv]_\w+")


def is_leaf(op: str) -> bool:
    """Operand-less opcodes (parameter, constant, iota, ...) are Leaf terms; after-all() is
    an OpV without operands."""
    return OPS[CLASS_REPRESENTATIVE.get(op, op)].arity == 0


class Infeasible(Exception):
    """This combination of choices can never match (a variant not worth a rule)."""


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
        # host calls and the OperandOf rows rules read: (query, action)
        self.requests: list[tuple[str, str]] = []
        self.lookups: dict[str, str] = {}       # host lookup atom -> the variable it binds
        # Checks of values computed in the query (an operand list's length): egglog
        # evaluates `(= 1 (vec-length v))` where it stands, so they go after every binding.
        self.checks: list[str] = []
        self.read_lists: set[str] = set()       # operand lists some function reads
        self.lengths: dict[str, int] = {}       # operand lists a function built: their length
        # Where a list's operands are: the variables that hold them, or (the operand vector
        # of the OpV they are in, the position of the first, its opcode); see `element`.
        self.items: dict[str, list[str]] = {}
        self.sources: dict[str, tuple[str, int]] = {}
        self.built: list[tuple[str, str]] = []  # right side: (opcode, term) of each new node

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
            self.atom(eq(var, expr))
        return var

    # --- values --------------------------------------------------------------------------

    def value(self, v) -> str:
        if isinstance(v, Lit):
            return literal(v)
        if isinstance(v, Var):
            return v.name
        if isinstance(v, TypeOf):
            if v.term not in self.types:
                self.types[v.term] = self.bind(atom("tyof", v.term))
            return self.types[v.term]
        if isinstance(v, MakeType):
            return array_type(self.value(v.dtype), self.value(v.dims), '""')
        if isinstance(v, SplatOf):                  # the text of the constant analysis
            text = f"i_s{v.term}"
            self.atom(splat_atom(v.term, text, f"i_cs{v.term}"))
            return text
        if isinstance(v, Compare):
            left, right = self.value(v.left), self.value(v.right)
            if v.op == "==" and v.left.kind in FILTER_COPY \
                    and _VARIABLE.fullmatch(left) and _VARIABLE.fullmatch(right):
                # `(= a b)` lets egglog unify a and b and join on them, and a dtype or a
                # small integer matches nearly every row: a rule guarding dtype(x) ==
                # dtype(y) enumerated the x and y candidates apart (~10 ms a run on a
                # 1,000-node graph). Comparing two computed copies is a check made once the
                # pattern has bound both.
                zero = FILTER_COPY[v.left.kind]
                left, right = atom("+", left, zero), atom("+", right, zero)
            self.atom(atom(COMPARISONS[v.op].egg, left, right))
            return ""
        return self.apply(v)

    def parts(self, t) -> TypeParts:
        if isinstance(t, MakeType):
            return TypeParts(self.value(t.dtype), self.value(t.dims), '""')
        var = self.value(t)
        parts = self.type_parts.get(var)
        if parts is None:
            n = len(self.type_parts)
            parts = self.type_parts[var] = TypeParts(f"i_dt{n}", f"i_d{n}", f"i_x{n}")
            self.atom(eq(var, array_type(f"i_dt{n}", f"i_d{n}", f"i_x{n}")))
        return parts

    def apply(self, v: Apply) -> str:
        fn = FUNCTIONS[v.fn]
        args = [self.parts(a) if kind == "type" else self.value(a)
                for a, kind in zip(v.args, fn.params)]
        self.calls[fn.name].add(tuple(a.value if isinstance(a, Lit) else None for a in v.args))
        if fn.host:
            return self.host_call(fn, args)
        out = fn.egg(self, args)
        return "" if fn.result == "bool" else self.bind(out)

    def host_call(self, fn, args) -> str:
        """The lookup of a host function's answer, after a request rule asking for it."""
        columns = []
        for a, kind in zip(args, fn.params):
            columns += [self.bind(a.dtype), self.bind(a.dims), self.bind(a.extra)] if kind == "type" \
                else [self.bind(a)]
        lookup = atom(answer_table(fn), *columns)
        if lookup in self.lookups or lookup in self.bound:    # asked for already
            return self.bound.get(lookup, "")
        request = (self.request_query(" ".join(columns)), atom(request_table(fn), *columns))
        if request not in self.requests:
            self.requests.append(request)
        if fn.result == "bool":
            self.atom(lookup)
            self.lookups[lookup] = ""
            return ""
        var = self.bind(lookup)
        self.lookups[eq(var, lookup)] = var
        return var

    def request_query(self, call: str) -> str:
        """The atoms so far, less the host lookups the call's arguments do not depend on:
        independent calls are then asked for in the same round."""
        kept = [a for a in self.atoms if a not in self.lookups]
        while True:
            used = set(_VARIABLE.findall(" ".join(kept) + " " + call))
            more = [a for a in self.atoms if a not in kept and self.lookups.get(a) in used]
            if not more:
                return " ".join(a for a in self.atoms if a in kept or a in more)
            kept += more

    # --- left side -----------------------------------------------------------------------

    def pattern(self, node: PNode) -> str:
        """Adds the atoms matching `node`; returns the variable of its e-class."""
        if node.op is None:
            return node.var
        if node.splat is not None:              # its type, if needed, comes from tyof
            self.atom(splat_atom(node.var, egg_string(node.splat), f"i_c{node.var}"))
            return node.var
        self.types[node.var] = node.type_var
        children = [self.pattern(c) for c in node.children]
        if node.commutative and self.choose(("swap", node.var), 2):
            children.reverse()
        if node.op_var:
            self.atom(atom("OpClass", egg_string(node.op), node.op_var))
        expr = self.term(node.op, children, node.attrs, node.type_var, key=f"{node.var}_k",
                         operands=f"{node.var}_xs", op_var=node.op_var, rest=node.rest)
        self.atom(eq(node.var, expr))
        if node.var == ROOT:
            self.root_expr = expr
        return node.var

    def term(self, op: str, children: list[str], attrs, type_text: str, key: str,
             operands: str | None = None, op_var: str = "", rest: str = "") -> str:
        """A term; with `operands`, an OpV's operands are matched through that variable;
        with `op_var`, its opcode is that variable's (an op class); with `rest`, the
        operand list variable of `name...` follows the children."""
        fields = attr(attr_constructor(op), [self.value(v) for _, v in attrs])
        name = op_var or egg_string(op)
        if is_leaf(op):
            return schema.leaf(name, key, fields, type_text)
        if rest:
            return self.with_operands(name, children, rest, fields, type_text, operands)
        if operands is None or 1 <= len(children) <= 3:
            return schema.node(name, children, fields, type_text)
        self.atom(eq(len(children), atom("vec-length", operands)))
        for i, child in enumerate(children):
            self.atom(eq(child, atom("vec-get", operands, i)))
        return atom("OpV", name, operands, fields, type_text)

    def with_operands(self, name: str, children: list[str], rest: str, fields: str,
                      type_text: str, operands: str | None) -> str:
        """A term whose operands are `children` then the list `rest` (`name...`). The list's
        length is one choice per list variable (1, 2, 3, or more: REST_LENGTHS), the same
        at every use, and decides the term's form (Op1..Op3, or OpV from 4 operands on). On
        the left side (`operands` given) the list is bound from the matched operands, on
        the right side its elements are read from it."""
        length = self.operand_length(rest)
        if len(children) + length <= 3:
            if operands is not None:
                items = self.items[rest] = [f"{operands}_{j}" for j in range(length)]
                self.atom(eq(rest, atom("vec-of", *items)))
            else:
                items = [self.bind(atom("vec-get", rest, j)) for j in range(length)]
            return schema.node(name, children + items, fields, type_text)
        if operands is None:
            return atom("OpV", name, atom("vec-append", schema.vec_of(children), rest),
                        fields, type_text)
        for i, child in enumerate(children):
            self.atom(eq(child, atom("vec-get", operands, i)))
        dropped = operands
        for _ in children:
            dropped = atom("vec-remove", dropped, 0)
        self.atom(eq(rest, dropped))
        self.sources[rest] = (operands, len(children), name)
        return atom("OpV", name, operands, fields, type_text)

    def operand_length(self, rest: str) -> int:
        """The length of operand list `rest` in this variant (REST_LENGTHS' last: at least
        that), checked once the query has bound everything."""
        if rest in self.lengths:
            return self.lengths[rest]
        lengths = READ_LENGTHS if rest in self.read_lists else REST_LENGTHS
        length = lengths[self.choose(("rest", rest), len(lengths))]
        size = atom("vec-length", rest)
        open_ended = lengths is REST_LENGTHS and length == lengths[-1]
        check = atom("<=", length, size) if open_ended else eq(length, size)
        if check not in self.checks:
            self.checks.append(check)
        return length

    def operand_values(self, rest: str) -> str:
        """`starts(i)`: the vector of the integer values of the constants in list `rest`."""
        items = [self.value(Apply("value", (SplatOf(self.element(rest, j)),)))
                 for j in range(self.operand_length(rest))]
        return atom("vec-of", *items)

    def element(self, rest: str, j: int) -> str:
        """A variable bound to operand j of list `rest`, by a table atom where the list
        comes from the left side: egglog joins those, while it would enumerate every
        candidate of a variable that only a vec-get computes."""
        if rest in self.items:
            return self.items[rest][j]
        if rest in self.sources:
            operands, first, op = self.sources[rest]
            var = f"{operands}_{first + j}"
            self.atom(atom(schema.OPERAND_OF, operands, first + j, var))
            if schema.operand_of(op, first + j) not in self.requests:
                self.requests.append(schema.operand_of(op, first + j))
            return var
        return self.bind(atom("vec-get", rest, j))

    def pick_operands(self, rest: str, picked: str) -> str:
        """`pick(i, d)`: the operands of list `rest` at the positions `picked`, in order (its
        length is a choice, at most the list's)."""
        length = self.operand_length(rest)
        count = READ_LENGTHS[self.choose(("pick", rest, picked), len(READ_LENGTHS))]
        if count > length:
            raise Infeasible
        self.checks.append(eq(count, atom("vec-length", picked)))
        items = [self.bind(atom("vec-get", rest, atom("vec-get", picked, j)))
                 for j in range(count)]
        out = self.bind(atom("vec-of", *items))
        self.lengths[out] = count
        return out

    # --- right side ----------------------------------------------------------------------

    def build(self, node: RNode) -> str:
        if node.kind == "ref":
            return node.ref
        type_text = self.value(node.type)
        if node.kind == "splat":
            parts = self.parts(node.type)
            text = egg_string(node.splat) if node.value is None else self.bind(
                atom("to-string", self.value(node.value)))
            value = attr(attr_constructor("constant"), [text, '""'])
            rank = static_length(node.type)
            if rank == 0 or rank is None and self.choose(("rsplat", node.id), 2) == 0:
                if rank is None:
                    self.atom(eq(0, atom("vec-length", parts.dims)))
                return self.made('"constant"', schema.leaf('"constant"', 0, value, type_text))
            if rank is None:
                self.atom(atom("<", 0, atom("vec-length", parts.dims)))
            scalar = schema.leaf('"constant"', 0, value, array_type(parts.dtype, vec([]), '""'))
            return self.made('"broadcast"', schema.node(
                '"broadcast"', [self.made('"constant"', scalar)],
                attr(attr_constructor("broadcast"), [vec([]), '""']), type_text))
        rest = self.value(node.children[-1].value) \
            if node.children and node.children[-1].kind == "operands" else ""
        children = [self.build(c) for c in node.children[:len(node.children) - bool(rest)]]
        return self.made(node.op_var or egg_string(node.op),
                         self.term(node.op, children, node.attrs, type_text, key="0",
                                   op_var=node.op_var, rest=rest))

    def made(self, opcode: str, term: str) -> str:
        """Notes a term the right side builds (explain mode records who made it)."""
        self.built.append((opcode, term))
        return term


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


# (Rewrote rule opcode e): rule `rule` built a term of `opcode` in e-class e, or ("" opcode)
# unioned e with a term it matched. Written only by rules compiled for explaining (egraph/
# explain.py reads it after saturation to say which rule produced an instruction).
REWROTE = "Rewrote"
REWROTE_DECLARATION = relation(REWROTE, ["String", "String", "Term"])


def emit_rule(ir: RuleIR, explain: bool = False) -> tuple[list[tuple[str, str]],
                                                          list[tuple[str, str]],
                                                          dict[str, set]]:
    """[(query, actions)] per distinct variant, [(query, action)] per distinct host-call
    request, and the function calls the variants make. With `explain`, each variant also
    records the terms its right side builds in REWROTE."""
    read = read_lists(ir)

    def emit(em: Emitter) -> str:
        em.read_lists = read
        em.pattern(ir.lhs)
        for g in ir.guards:
            em.value(g)
        actions = [union(ROOT, em.build(ir.rhs))]
        if explain:
            name = egg_string(ir.rule.name)
            made = em.built or [('""', ROOT)]
            actions += [atom(REWROTE, name, op, term) for op, term in made]
        for check in em.checks:
            em.atom(check)
        if ir.subsume:
            actions.append(schema.subsume(em.root_expr))
        return " ".join(actions)

    out, requests, calls = [], [], defaultdict(set)
    for em, actions in _variants(emit):
        body = (" ".join(em.atoms), actions)
        if body not in out:
            out.append(body)
        requests += [r for r in em.requests if r not in requests]
        for name, c in em.calls.items():
            calls[name] |= c
    return out, requests, calls


def read_lists(ir: RuleIR) -> set[str]:
    """The operand lists (`i...`) that the rule's guards and attribute values read."""
    lists, values = set(), list(ir.guards)
    nodes: list = [ir.lhs, ir.rhs]
    while nodes:
        node = nodes.pop()
        lists.add(getattr(node, "rest", ""))
        values += [v for _, v in node.attrs if v is not None]
        if isinstance(node, RNode):
            values += [node.type, node.value] if node.kind == "operands" else [node.type]
        nodes += node.children
    return lists & set().union(*(names_read(v) for v in values if v is not None))


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
        except Infeasible:
            continue
        yield em, result


def rule_command(query: str, actions: str, ruleset: str, name: str) -> str:
    return rule([query], [actions], ruleset, name)
