"""The functions and guards of the rule language, one table row each: the egglog text the
rule compiler emits and the Python the rule checker evaluates, side by side, so the two
meanings cannot drift apart (tests/test_rule_functions.py compares them on random inputs).

Egglog has no loops and Python callbacks cost ~27 µs a call, so list-valued functions are
*rank-specialized*: a row with `rank_of` is emitted once per length k of that argument
(0..MAX_RANK), the compiler adding `(= k (vec-length arg))` to the rule's query. Where egglog
would fail to match (an index out of range, a division by zero), Python raises NoValue.

Value kinds: "ints" (IVec), "int" (i64), "str" (String), "dtype" (String naming an element
type), "type" (a term's Type; Python: a Shape), "bool" (a guard: emitted as query atoms).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from ..dtypes import DTYPES
from ..shape import Shape, array
from .constants import representable
from .schema import DTYPE_CLASSES

MAX_RANK = 6        # rank-specialized functions apply to lists of at most this length


class NoValue(Exception):
    """The function has no value here; the egglog rule would not match."""


@dataclass(frozen=True)
class TypeParts:
    """Egglog text of a Type's element type and dims (what rows with "type" params get)."""
    dtype: str
    dims: str


@dataclass(frozen=True)
class Fn:
    name: str
    params: tuple[str, ...]
    result: str
    # egg(ctx, args, k) -> expression text (None for guards, which call ctx.atom instead);
    # ctx.bind(expr) binds an expression to a query variable, ctx.atom(text) adds a fact.
    egg: Callable
    py: Callable
    doc: str
    rank_of: int | None = None          # argument whose length k specializes `egg`
    same_rank: tuple[int, ...] = ()     # arguments of that same length
    public: bool = True                 # False: used by the compiler only (type derivation)
    # facts(calls) -> egglog declarations/facts the rows refer to; `calls` is the set of
    # argument tuples used in the program, literal values or None.
    facts: Callable | None = field(default=None, compare=False)


def vec(items) -> str:
    """An i64 vector; the empty one is written (vec-range 0) because egglog cannot infer
    the element type of a bare (vec-empty) in a query."""
    items = list(items)
    return f"(vec-of {' '.join(items)})" if items else "(vec-range 0)"


def _get(v: str, i) -> str:
    return f"(vec-get {v} {i})"


def _sum(terms: list[str]) -> str:
    out = "0"
    for t in terms:
        out = t if out == "0" else f"(+ {out} {t})"
    return out


def _product(terms: list[str]) -> str:
    out = "1"
    for t in terms:
        out = t if out == "1" else f"(* {out} {t})"
    return out


def _check_index(values, length: int) -> None:
    if any(not 0 <= v < length for v in values):
        raise NoValue


# --- list functions ------------------------------------------------------------------------

def _compose_egg(ctx, a, k):
    p, q = a
    return vec(_get(p, _get(q, i)) for i in range(k))


def _compose_py(p, q):
    _check_index(q, len(p))
    return tuple(p[i] for i in q)


def _invert_egg(ctx, a, k):
    (p,) = a
    # r[j] = sum_i i*[p[i] == j] (no search primitive); exact when p is a permutation, and
    # p[r[j]] == j for every j holds exactly when it is one.
    delta = lambda i, j: f"(- 1 (min 1 (abs (- {_get(p, i)} {j}))))"
    r = ctx.bind(vec(_sum([f"(* {i} {delta(i, j)})" for i in range(1, k)]) for j in range(k)))
    ctx.atom(f"(= (vec-range {k}) {vec(_get(p, _get(r, j)) for j in range(k))})")
    return r


def _invert_py(p):
    if sorted(p) != list(range(len(p))):
        raise NoValue
    out = [0] * len(p)
    for i, v in enumerate(p):
        out[v] = i
    return tuple(out)


def _is_sorted_egg(ctx, a, k):
    (p,) = a
    for i in range(k - 1):
        ctx.atom(f"(< {_get(p, i)} {_get(p, i + 1)})")


def _slice_dims_egg(ctx, a, k):
    start, limit, stride = a
    for i in range(k):
        s, l, st = _get(start, i), _get(limit, i), _get(stride, i)
        ctx.atom(f"(<= 0 {s})")
        ctx.atom(f"(<= {s} {l})")
        ctx.atom(f"(< 0 {st})")
    return vec(f"(/ (+ (- {_get(limit, i)} {_get(start, i)}) (- {_get(stride, i)} 1)) "
               f"{_get(stride, i)})" for i in range(k))


def _slice_dims_py(start, limit, stride):
    if not len(start) == len(limit) == len(stride):
        raise NoValue
    if any(not (0 <= s <= l and st > 0) for s, l, st in zip(start, limit, stride)):
        raise NoValue
    return tuple((l - s + st - 1) // st for s, l, st in zip(start, limit, stride))


def _pad_dims_egg(ctx, a, k):
    dims, low, high, interior = a
    r = ctx.bind(vec(
        f"(+ (+ (+ {_get(dims, i)} {_get(low, i)}) {_get(high, i)}) "
        f"(* (max (- {_get(dims, i)} 1) 0) {_get(interior, i)}))" for i in range(k)))
    for i in range(k):
        ctx.atom(f"(<= 0 {_get(interior, i)})")
        ctx.atom(f"(<= 0 {_get(r, i)})")
    return r


def _pad_dims_py(dims, low, high, interior):
    if not len(dims) == len(low) == len(high) == len(interior):
        raise NoValue
    out = tuple(d + lo + hi + max(d - 1, 0) * n for d, lo, hi, n in zip(dims, low, high, interior))
    if any(n < 0 for n in interior) or any(d < 0 for d in out):
        raise NoValue
    return out


def _num_elements_py(t: Shape):
    n = math.prod(t.dims)
    if n >= 2 ** 63:
        raise NoValue
    return n


# --- tables of facts -----------------------------------------------------------------------

def _array_dtypes() -> list[str]:
    return sorted(name for name, d in DTYPES.items() if d.is_array and name != "opaque_type")


_COMPLEX_PART = {"c64": "f32", "c128": "f64"}


def _real_type_facts(calls) -> str:
    sets = "\n".join(f'(set (RealType "{d}") "{_COMPLEX_PART.get(d, d)}")' for d in _array_dtypes())
    return "(function RealType (String) String :no-merge)\n" + sets


def _real_type_py(dtype: str) -> str:
    if dtype not in DTYPES or not DTYPES[dtype].is_array:
        raise NoValue
    return _COMPLEX_PART.get(dtype, dtype)


def _can_hold_facts(calls) -> str:
    texts = sorted({c[0] for c in calls if c[0] is not None})
    facts = [f'(CanHold "{t}" "{d}")' for t in texts for d in _array_dtypes()
             if representable(t, d)]
    return "\n".join(["(relation CanHold (String String))", *facts])


# --- the table -----------------------------------------------------------------------------

def _dtype_class(fn_name: str, relation: str) -> Fn:
    members = frozenset(DTYPE_CLASSES[relation])
    return Fn(fn_name, ("type",), "bool",
              egg=lambda ctx, a, k: ctx.atom(f"({relation} {a[0].dtype})"),
              py=lambda t: t.element_type in members,
              doc=f"the element type of x is one of {', '.join(sorted(members))}")


_ROWS = [
    *(_dtype_class("is_" + rel[2:].lower(), rel) for rel in DTYPE_CLASSES),
    Fn("is_scalar", ("type",), "bool",
       egg=lambda ctx, a, k: ctx.atom(f"(= 0 (vec-length {a[0].dims}))"),
       py=lambda t: t.rank == 0, doc="x has rank 0"),
    Fn("is_identity", ("ints",), "bool",
       egg=lambda ctx, a, k: ctx.atom(f"(= {a[0]} (vec-range (vec-length {a[0]})))"),
       py=lambda p: tuple(p) == tuple(range(len(p))), doc="p is {0, 1, ..., n-1}"),
    Fn("is_sorted", ("ints",), "bool", egg=_is_sorted_egg,
       py=lambda p: all(a < b for a, b in zip(p, p[1:])), doc="p is strictly increasing",
       rank_of=0),
    Fn("compose", ("ints", "ints"), "ints", egg=_compose_egg, py=_compose_py,
       doc="r[i] = p[q[i]] (transpose of a transpose)", rank_of=1),
    Fn("invert", ("ints",), "ints", egg=_invert_egg, py=_invert_py,
       doc="the inverse permutation", rank_of=0),
    Fn("iota", ("int",), "ints", egg=lambda ctx, a, k: f"(vec-range {a[0]})",
       py=lambda n: tuple(range(n)), doc="{0, 1, ..., n-1}"),
    Fn("size", ("ints",), "int", egg=lambda ctx, a, k: f"(vec-length {a[0]})",
       py=lambda p: len(p), doc="the length of a list"),
    Fn("dims", ("type",), "ints", egg=lambda ctx, a, k: a[0].dims,
       py=lambda t: tuple(t.dims), doc="the dimensions of x"),
    Fn("rank", ("type",), "int", egg=lambda ctx, a, k: f"(vec-length {a[0].dims})",
       py=lambda t: t.rank, doc="the rank of x"),
    Fn("dtype", ("type",), "dtype", egg=lambda ctx, a, k: a[0].dtype,
       py=lambda t: t.element_type, doc="the element type of x"),
    Fn("num_elements", ("type",), "int",
       egg=lambda ctx, a, k: _product([_get(a[0].dims, i) for i in range(k)]),
       py=_num_elements_py, doc="the number of elements of x", rank_of=0),
    # Used by the compiler to derive the types of new terms and to guard their constants.
    Fn("slice_dims", ("ints", "ints", "ints"), "ints", egg=_slice_dims_egg, py=_slice_dims_py,
       doc="result dims of a slice", rank_of=0, same_rank=(1, 2), public=False),
    Fn("pad_dims", ("ints", "ints", "ints", "ints"), "ints", egg=_pad_dims_egg, py=_pad_dims_py,
       doc="result dims of a pad", rank_of=0, same_rank=(1, 2, 3), public=False),
    Fn("real_type", ("dtype",), "dtype", egg=lambda ctx, a, k: f"(RealType {a[0]})",
       py=_real_type_py, doc="c64 -> f32, c128 -> f64, others unchanged", public=False,
       facts=_real_type_facts),
    Fn("can_hold", ("str", "dtype"), "bool",
       egg=lambda ctx, a, k: ctx.atom(f"(CanHold {a[0]} {a[1]})"),
       py=lambda text, dtype: representable(text, dtype),
       doc="the constant text is exactly a value of that element type", public=False,
       facts=_can_hold_facts),
]

FUNCTIONS: dict[str, Fn] = {row.name: row for row in _ROWS}

@dataclass(frozen=True)
class Comparison:
    op: str
    egg: str            # egglog primitive, applied as (egg a b)
    py: Callable
    ordered: bool       # only for integers


COMPARISONS: dict[str, Comparison] = {
    "==": Comparison("==", "=", lambda a, b: a == b, False),
    "!=": Comparison("!=", "!=", lambda a, b: a != b, False),
    "<": Comparison("<", "<", lambda a, b: a < b, True),
    "<=": Comparison("<=", "<=", lambda a, b: a <= b, True),
    ">": Comparison(">", ">", lambda a, b: a > b, True),
    ">=": Comparison(">=", ">=", lambda a, b: a >= b, True),
}


def type_value(dtype: str, dims) -> Shape:
    """The Python value of a "type" expression built by the compiler."""
    if dtype not in DTYPES or any(d < 0 for d in dims):
        raise NoValue
    return array(dtype, tuple(dims))
