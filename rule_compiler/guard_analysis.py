"""Guards of every declaration -> guard IR (guard_ir.py), or an HloError at the offending
position.

One analysis for rules, folds and fusion declarations; what differs is the *scope*, the names
a declaration's guards may use:

    rule                 its left side's variables, and `root` (the matched term)
    fold                 `root` (the folded term)
    fuse C <- P          `producer`, `consumer`, `users(producer)`, `target`
    fuse A ~ B           `a`, `b`, `target`
    limit                `heroes(kernel)`, `fan_in(kernel)`, `members(kernel)`,
                         `outputs(kernel)`, `target`

Terms stand for their types in the rule language's functions (rule_functions.FUNCTIONS);
functions of the term itself (`is_constant`) or of a constant's value (`log2`) read the
e-graph, so only rules have them.
"""
from __future__ import annotations

import contextlib
import difflib
from dataclasses import dataclass, field

from ..dtypes import DTYPES
from ..errors import HloError
from ..grammar.rules_parser import Call, Comparison, IntList, Name, Number, String, to_text
from ..ops import OPS
from .guard_ir import Apply, Compare, Lit, SplatOf, TypeOf, Var
from .rule_functions import COMPARISONS, FUNCTIONS

KIND_NAMES = {"ints": "a list of integers", "int": "an integer", "str": "a name or string",
              "op": "an op class", "dtype": "an element type", "type": "a term",
              "splat": "a constant", "term": "a term", "kernel": "a kernel", "bool": "a guard",
              "operands": "a list of operands (name...)"}
# Parameter kinds that read the e-graph (a term itself, a constant's value): rules only.
EGRAPH_KINDS = frozenset({"term", "splat"})
# Kinds that are not values: a term is compared through its type, a kernel through its facts,
# and a guard is a condition (egglog has no truth values to compare).
NOT_COMPARABLE = {"term": "terms are compared through their types, e.g. dims(x) == dims(y)",
                  "kernel": "a kernel is compared through its counts, e.g. heroes(kernel) <= 1",
                  "bool": "guards are conditions, not values to compare: join them with 'and'"}
# Values a fusion scope supplies beyond the types of what it names: fact -> what it is of.
# `users`: how many instructions read the producer; `rows`: how many rows its loop goes
# through, each computed on its own (fusion/policy.rows); the others count what a kernel
# holds (fusion/policy.KernelSize).
FACTS = {"users": "producer", "rows": "producer", "heroes": "kernel", "fan_in": "kernel",
         "members": "kernel", "outputs": "kernel"}
TARGET = Var("target", "str")


def fact_var(fact: str) -> Var:
    """The value a scope binds for `fact(its argument)`, e.g. `users(producer)`."""
    return Var(f"{fact}({FACTS[fact]})", "int")


@dataclass
class Scope:
    """What a declaration's guards may name."""
    what: str                           # "a fold guard", ... (said in errors)
    names: dict[str, Var]
    facts: frozenset[str] = frozenset()
    reads_egraph: bool = False          # functions of terms themselves (rules only)
    unbound: str = ""                   # what an unbound name error adds
    reserved: dict[str, str] = field(default_factory=dict)     # name -> why not here

    def hint(self) -> str:
        return self.unbound or f"{self.what} names {', '.join(sorted(self.names))}"


def fold_scope() -> Scope:
    return Scope("a fold guard", {"root": Var("root", "term")})


def producer_scope() -> Scope:
    return Scope("a fuse guard", {"producer": Var("producer", "term"),
                                  "consumer": Var("consumer", "term"), "target": TARGET},
                 frozenset({"users", "rows"}))


def sibling_scope() -> Scope:
    return Scope("a sibling fuse guard", {"a": Var("a", "term"), "b": Var("b", "term"),
                                          "target": TARGET})


def kernel_scope() -> Scope:
    return Scope("a limit", {"kernel": Var("kernel", "kernel"), "target": TARGET},
                 frozenset(f for f, of in FACTS.items() if of == "kernel"))


def analyze_guards(guards, scope: Scope) -> list:
    return [GuardAnalysis(scope).guard(g) for g in guards]


@contextlib.contextmanager
def naming(what: str):
    """Errors say which declaration they are about, besides where."""
    try:
        yield
    except HloError as e:
        e.message = f"{what}: {e.message}"
        e.args = (e.message,)
        raise


def suggest(name: str, choices) -> str:
    close = difflib.get_close_matches(name, list(choices), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def is_variable_name(name: str) -> bool:
    return name[0].islower() or name[0] == "_"


class GuardAnalysis:
    """Guards and values in one scope (the rule analysis adds its variables as it binds)."""

    def __init__(self, scope: Scope):
        self.scope = scope

    def guard(self, g):
        if isinstance(g, Comparison):
            left, right = self.value(g.left), self.value(g.right)
            left, right = self.resolve_dtype(left, right), self.resolve_dtype(right, left)
            for kind in (left.kind, right.kind):
                if kind in NOT_COMPARABLE:
                    raise g.pos.error(NOT_COMPARABLE[kind])
            if left.kind != right.kind:
                raise g.pos.error(f"cannot compare {KIND_NAMES[left.kind]} with "
                                  f"{KIND_NAMES[right.kind]}")
            if COMPARISONS[g.op].ordered and left.kind != "int":
                raise g.pos.error(f"'{g.op}' compares integers, not {KIND_NAMES[left.kind]}")
            return Compare(g.op, left, right)
        if isinstance(g, Call) and (g.name in FACTS or g.name in FUNCTIONS
                                    and FUNCTIONS[g.name].public):
            value = self.value(g)
            if value.kind != "bool":
                raise g.pos.error(f"'{g.name}' is {KIND_NAMES[value.kind]}, not a guard; "
                                  f"compare it, e.g. {g.name}(...) == ...")
            return value
        name = getattr(g, "name", "")
        guards = sorted(n for n, f in FUNCTIONS.items()
                        if self.available(n) and f.result == "bool")
        raise g.pos.error(f"unknown guard '{name}'{suggest(name, guards)} (guards: "
                          f"{', '.join(guards)}, or comparisons)")

    def available(self, name: str) -> bool:
        """A function of the rule language this scope can use."""
        fn = FUNCTIONS.get(name)
        return fn is not None and fn.public and (self.scope.reads_egraph or
                                                 not EGRAPH_KINDS & set(fn.params))

    def resolve_dtype(self, value, other):
        """`dtype(x) == f32`: a bare element type name next to a dtype is that dtype."""
        if isinstance(value, Lit) and value.kind == "str" and other.kind == "dtype":
            return Lit(value.value, "dtype") if value.value in DTYPES else value
        return value

    def value(self, v):
        if isinstance(v, Name):
            return self.name(v)
        if isinstance(v, Number):
            try:
                return Lit(int(v.text), "int")
            except ValueError:
                raise v.pos.error(f"expected an integer, got {v.text}") from None
        if isinstance(v, IntList):
            return Lit(tuple(v.values), "ints")
        if isinstance(v, String):
            return Lit(v.value, "str")
        if isinstance(v, Call):
            return self.call(v)
        raise v.pos.error(f"unexpected {describe(v)}")

    def name(self, v: Name):
        var = self.scope.names.get(v.name)
        if var is not None:
            return var
        if v.name in self.scope.reserved:
            raise v.pos.error(self.scope.reserved[v.name])
        if v.name in DTYPES:
            return Lit(v.name, "dtype")
        if not is_variable_name(v.name):
            return Lit(v.name, "str")
        quote = f"; a name of a target is quoted, e.g. target == \"{v.name}\"" \
            if "target" in self.scope.names else ""
        raise v.pos.error(f"unbound variable '{v.name}' ({self.scope.hint()}){quote}")

    def call(self, v: Call):
        if v.name in FACTS:
            return self.fact(v)
        fn = FUNCTIONS.get(v.name)
        if not self.available(v.name):
            if v.name in OPS:
                raise v.pos.error(f"'{v.name}' is an operation; only the values "
                                  f"{self.scope.what} sees and functions of them can appear here")
            if fn is not None and fn.public:
                raise v.pos.error(f"'{v.name}' reads the e-graph: only rules can use it")
            known = sorted(n for n in FUNCTIONS if self.available(n))
            raise v.pos.error(f"unknown function '{v.name}'{suggest(v.name, known)}")
        if v.keywords:
            raise v.pos.error(f"{v.name} takes no named arguments")
        if len(v.args) != len(fn.params):
            raise v.pos.error(f"{v.name} takes {len(fn.params)} argument"
                              f"{'' if len(fn.params) == 1 else 's'}, got {len(v.args)}")
        args = tuple(self.expect(self.value(a), kind, a) for a, kind in zip(v.args, fn.params))
        return Apply(fn.name, args)

    def fact(self, v: Call):
        """`users(producer)`, `heroes(kernel)`: a value the scope supplies."""
        of = FACTS[v.name]
        if v.name not in self.scope.facts:
            where = "in a limit" if of == "kernel" else "in a producer-consumer fuse"
            raise v.pos.error(f"'{v.name}' applies to the {of}, {where}")
        if len(v.args) != 1 or v.keywords or v.args[0] != Name(of, pos=v.pos):
            raise v.pos.error(f"'{v.name}' applies to the {of}: write {v.name}({of})")
        return fact_var(v.name)

    def expect(self, value, kind: str, node):
        """`value` as an argument of `kind`; a term stands for its type, or for its value
        where a function reads a constant's."""
        got = value.kind
        if kind == "type" and got == "term":
            return TypeOf(value.name)
        if kind == "splat" and got == "term":
            return SplatOf(value.name)
        if kind == "dtype" and isinstance(value, Lit) and got == "str":
            if value.value in DTYPES:
                return Lit(value.value, "dtype")
        if got != kind:
            raise node.pos.error(f"expected {KIND_NAMES[kind]}, got {to_text(node)} "
                                 f"({KIND_NAMES[got]})")
        return value


def describe(node) -> str:
    if isinstance(node, IntList):
        return "a list"
    if isinstance(node, String):
        return "a string"
    if isinstance(node, Number):
        return f"the number {node.text}"
    if isinstance(node, Name):
        return f"the name '{node.name}'"
    return type(node).__name__
