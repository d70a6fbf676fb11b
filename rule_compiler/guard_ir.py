"""Guards and attribute values after analysis (guard_analysis.py), and their one Python meaning.

Every declaration of a rule file has guards: rules (compiled to egglog by rule_emit.py and
checked by the rule checker with `evaluate`), folds and fusion declarations (evaluated with
`evaluate` while optimizing). They are small expression trees over named values; each node
knows its kind ("ints", "int", "str", "dtype", "type", "term", "kernel", "bool"):

    Lit    a literal                       Var      a value the scope binds
    TypeOf the type of a term              Apply    a function of rule_functions.FUNCTIONS
    MakeType a type from dtype and dims    Compare  a comparison (a guard)

In rules, Var names are egglog query variables (`v_<name>` for the rule's own, `i_...` for
the compiler's); elsewhere they are what the declaration's scope binds (`root`, `producer`,
`users(producer)`, `heroes(kernel)`, `target`, ...).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import assert_never

from ..shape import Shape
from .rule_functions import COMPARISONS, FUNCTIONS, NoValue, Splat, type_value


@dataclass(frozen=True)
class Lit:
    value: object
    kind: str


@dataclass(frozen=True)
class Var:
    """A bound value: a term ("term"), a kernel, or an attribute value of some kind."""
    name: str
    kind: str


@dataclass(frozen=True)
class TypeOf:
    term: str           # the Var name of a term
    kind = "type"


@dataclass(frozen=True)
class Apply:
    fn: str             # row of rule_functions.FUNCTIONS
    args: tuple

    @property
    def kind(self) -> str:
        return FUNCTIONS[self.fn].result


@dataclass(frozen=True)
class MakeType:
    dtype: object
    dims: object
    kind = "type"


@dataclass(frozen=True)
class Compare:
    op: str             # row of rule_functions.COMPARISONS
    left: object
    right: object
    kind = "bool"


Value = Lit | Var | TypeOf | Apply | MakeType | Compare


def evaluate(value: Value, env: dict):
    """Python value of `value`; env maps Var names to values (terms to their Shape).
    Raises rule_functions.NoValue where the guard has no value (an egglog rule would not
    match)."""
    match value:
        case Lit(literal, _):
            return literal
        case Var(name, _):
            return env[name]
        case TypeOf(term):
            return array_type(env[term])
        case Apply(fn, args):
            return FUNCTIONS[fn].py(*(evaluate(a, env) for a in args))
        case MakeType(dtype, dims):
            return type_value(evaluate(dtype, env), evaluate(dims, env))
        case Compare(op, left, right):
            return COMPARISONS[op].py(evaluate(left, env), evaluate(right, env))
        case _:
            assert_never(value)


def guards_hold(guards, env: dict) -> bool:
    """All guards are true (a guard without a value is false)."""
    try:
        return all(evaluate(g, env) for g in guards)
    except NoValue:
        return False


def array_type(shape) -> Shape:
    """The rule language's functions see arrays: a tuple-shaped term has no type for them
    (in egglog, its (TT ...) type matches no (T dtype dims extra))."""
    if isinstance(shape, Splat):
        shape = shape.shape
    if shape.is_tuple:
        raise NoValue
    return shape


def names_read(value: Value) -> set[str]:
    """The Var names a value reads (TypeOf reads its term)."""
    match value:
        case Lit():
            return set()
        case Var(name, _) | TypeOf(name):
            return {name}
        case Apply(_, args):
            return set().union(*map(names_read, args))
        case MakeType(dtype, dims):
            return names_read(dtype) | names_read(dims)
        case Compare(_, left, right):
            return names_read(left) | names_read(right)
        case _:
            assert_never(value)
