"""The functions and guards of the rule language, one table row each: the egglog text the
rule compiler emits and the Python the rule checker evaluates, side by side, so the two
meanings cannot drift apart (tests/test_rule_compiler.py compares them on random inputs).

Egglog has no loops and Python callbacks cost ~27 µs a call, so list-valued functions are
*rank-specialized*: a row with `rank_of` is emitted once per length k of that argument
(0..MAX_RANK), the compiler adding `(= k (vec-length arg))` to the rule's query (`value_of`
does the same for an integer argument's value). Where egglog would fail to match (an index
out of range, a division by zero), Python raises NoValue. Sorting and set differences go
through egglog's Set (ordered) and Map containers, whose lookups fail instead of panicking.
Tables of facts are kept to element types (a few dozen rows): egglog may join a table
before its keys are computed, and a few tables of lists in one rule (127 rows each) made
millions of candidate rows per match.
Rows say how long their result is (`length`), so the compiler chooses lengths only for the
lists a rule matches and derives the rest.

Value kinds: "ints" (IVec), "int" (i64), "str" (String), "dtype" (String naming an element
type), "type" (a term's Type; Python: a Shape), "term" (the term itself), "bool" (a guard:
emitted as query atoms).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Callable

import ml_dtypes
import numpy as np

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
    # An integer argument whose value (0..MAX_RANK) specializes `egg` too: `egg` then gets
    # k = (length, value). The emitter knows the value from its length algebra (rank(x) in
    # a variant where x's rank is chosen) or makes it a choice of its own.
    value_of: int | None = None
    same_rank: tuple[int, ...] = ()     # arguments of that same length
    public: bool = True                 # False: used by the compiler only (type derivation)
    # facts(calls) -> egglog declarations/facts the rows refer to; `calls` is the set of
    # argument tuples used in the program, literal values or None.
    facts: Callable | None = field(default=None, compare=False)
    # The emitter's length algebra: length(lens, ints) is the length of a list result (or the
    # value of an integer result) from the arguments' list lengths and integer values (None
    # where unknown), so that rank-specialized rows need no choice of their own.
    length: Callable | None = field(default=None, compare=False)


def _known(f):
    """A length rule that is None whenever an argument it reads is unknown."""
    def rule(lens, ints):
        try:
            return f(lens, ints)
        except TypeError:           # None in arithmetic
            return None
    return rule


_FIRST = _known(lambda lens, ints: lens[0])


def vec(items) -> str:
    """An i64 vector; the empty one is written (vec-range 0) because egglog cannot infer
    the element type of a bare (vec-empty) in a query."""
    items = list(items)
    return f"(vec-of {' '.join(items)})" if items else "(vec-range 0)"


def _get(v: str, i) -> str:
    return f"(vec-get {v} {i})"


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
    """Through an egglog Map {p[i]: i}: r[j] is the entry for j, and every j in 0..k-1 has
    one exactly when p is a permutation (a missing key fails the match)."""
    (p,) = a
    m = "(map-empty)"
    for i in range(k):
        m = f"(map-insert {m} {_get(p, i)} {i})"
    m = ctx.bind(m)
    return vec(f"(map-get {m} {j})" for j in range(k))


def _invert_facts(calls) -> str:
    return "(sort IMap (Map i64 i64))"


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


# --- integer and list arithmetic ----------------------------------------------------------

def _delta(i, j: int) -> str:
    """1 when the i64 expression i equals the constant j, else 0 (egglog has no `if`)."""
    return f"(- 1 (min 1 (abs (- {i} {j}))))"


def _set_egg(ctx, a, k):
    lst, i, v = a
    ctx.atom(f"(<= 0 {i})")
    ctx.atom(f"(< {i} {k})")
    return vec(f"(+ {_get(lst, j)} (* {_delta(i, j)} (- {v} {_get(lst, j)})))"
               for j in range(k))


def _set_py(lst, i, v):
    if not 0 <= i < len(lst):
        raise NoValue
    return tuple(v if j == i else x for j, x in enumerate(lst))


def _get_py(lst, i):
    if not 0 <= i < len(lst):
        raise NoValue
    return lst[i]


def _each(op: str, py):
    """An elementwise operation on two lists of the same length."""
    def egg(ctx, a, k):
        return vec(f"({op} {_get(a[0], i)} {_get(a[1], i)})" for i in range(k))

    def run(x, y):
        if len(x) != len(y):
            raise NoValue
        return tuple(py(p, q) for p, q in zip(x, y))
    return egg, run


def _is_all_egg(ctx, a, k):
    lst, v = a
    for i in range(k):
        ctx.atom(f"(= {v} {_get(lst, i)})")


def _min_of_egg(ctx, a, k):
    (lst,) = a
    if k == 0:
        ctx.atom("(= 0 1)")             # no minimum of nothing: the rule does not apply
        return "0"
    out = _get(lst, 0)
    for i in range(1, k):
        out = f"(min {out} {_get(lst, i)})"
    return out


def _min_of_py(lst):
    if not lst:
        raise NoValue
    return min(lst)


def _sort_egg(ctx, a, k):
    """Through an egglog Set, whose elements set-get returns in increasing order."""
    (lst,) = a
    if k == 0:
        return vec([])
    for i in range(k):          # a Set orders its elements as unsigned: no negatives
        ctx.atom(f"(<= 0 {_get(lst, i)})")
    elements = ctx.bind(f"(set-of {' '.join(_get(lst, i) for i in range(k))})")
    ctx.atom(f"(= {k} (set-length {elements}))")        # distinct elements
    return vec(f"(set-get {elements} {i})" for i in range(k))


CONSTANT_RELATION = "IsConstant"


def _is_constant_facts(calls) -> str:
    """(IsConstant e): e-class e holds a constant (a literal, or broadcasts of one)."""
    r = CONSTANT_RELATION
    return f"""(relation {r} (Term))
(rule ((= e (Leaf "constant" k a t))) (({r} e)) :ruleset analysis :name "hlo-opt/constant")
(rule ((= e (Op1 "broadcast" c a t)) ({r} c)) (({r} e)) :ruleset analysis
      :name "hlo-opt/constant-broadcast")"""


def _set_facts(calls) -> str:
    return "(sort ISet (Set i64))"


def _sort_py(lst):
    if len(set(lst)) != len(lst) or any(i < 0 for i in lst):
        raise NoValue
    return tuple(sorted(lst))


def _complement_egg(ctx, a, k):
    """Through egglog Sets: {0..n-1} minus the elements, read back in increasing order."""
    lst, _ = a
    length, n = k
    if n < length:
        ctx.atom("(= 0 1)")
        return vec([])
    for i in range(length):
        ctx.atom(f"(<= 0 {_get(lst, i)})")
        ctx.atom(f"(< {_get(lst, i)} {n})")
    removed = "(set-empty)"
    for i in range(length):
        removed = f"(set-insert {removed} {_get(lst, i)})"
    removed = ctx.bind(removed)
    ctx.atom(f"(= {length} (set-length {removed}))")          # distinct
    if n == length:
        return vec([])
    kept = ctx.bind(f"(set-diff (set-of {' '.join(map(str, range(n)))}) {removed})")
    return vec(f"(set-get {kept} {j})" for j in range(n - length))


def _complement_py(lst, n):
    if not 0 <= n <= MAX_RANK or len(set(lst)) != len(lst) or any(
            not 0 <= i < n for i in lst):
        raise NoValue
    return tuple(i for i in range(n) if i not in lst)


# --- element types -------------------------------------------------------------------------

def _values_preserved(src: str, dst: str) -> bool:
    """Every value of element type src converts to dst and back unchanged (NaN to a NaN),
    so convert(convert(x, dst), src) == x and convert(x, dst) loses nothing."""
    a, b = DTYPES[src], DTYPES[dst]
    if not (a.is_array and b.is_array):
        return False
    if src == dst:
        return True
    if a.kind == "pred":                # false, true -> 0, 1 -> false, true
        return b.kind in ("int", "uint") or _values_preserved("s8", dst)
    if b.kind == "pred" or a.kind == "complex" and b.kind != "complex":
        return False
    if b.kind == "complex":
        if a.kind == "complex":
            return (src, dst) == ("c64", "c128")
        return _values_preserved(src, {"c64": "f32", "c128": "f64"}[dst])
    if a.kind in ("int", "uint"):
        lo, hi = _int_range(a)
        if b.kind in ("int", "uint"):
            blo, bhi = _int_range(b)
            return blo <= lo and hi <= bhi
        exact = _exact_int_limit(dst) if b.kind == "float" else -1
        return -exact <= lo and hi <= exact
    if b.kind != "float":
        return False
    if a.bits > 16:
        return (src, dst) == ("f32", "f64")
    return _float_roundtrip(a.numpy, b.numpy)


def _int_range(d) -> tuple[int, int]:
    if d.kind == "uint":
        return 0, (1 << d.bits) - 1
    return -(1 << (d.bits - 1)), (1 << (d.bits - 1)) - 1


@functools.lru_cache(maxsize=None)
def _exact_int_limit(dtype: str) -> int:
    """The largest L <= 2**mantissa_bits such that every integer n with |n| <= L is a value of
    this float type (-1 if not even 0 is); within it a value's canonical text is the decimal
    integer, so computed constants can be written as text."""
    npdt = DTYPES[dtype].numpy
    limit = min(1 << ml_dtypes.finfo(npdt).nmant, int(float(ml_dtypes.finfo(npdt).max)))
    if DTYPES[dtype].bits <= 16:
        ints = np.arange(-limit, limit + 1, dtype=np.float64)
    else:                           # IEEE f32/f64: check the ends and the small integers
        ints = np.array([-limit, 1 - limit, *range(-64, 65), limit - 1, limit], np.float64)
    with np.errstate(all="ignore"):
        ok = ints.astype(npdt).astype(np.float64) == ints
    return limit if ok.all() else -1


@functools.lru_cache(maxsize=None)
def _float_roundtrip(src, dst) -> bool:
    """Exhaustive for types of at most 16 bits: every bit pattern survives src -> dst -> src
    (NaNs as NaNs, -0 as -0)."""
    bits = np.arange(1 << (src.itemsize * 8), dtype=np.uint64).astype(f"u{src.itemsize}")
    x = bits.view(src)
    with np.errstate(all="ignore"):
        back = x.astype(np.float32).astype(dst).astype(np.float32).astype(src)
    nan = np.isnan(x.astype(np.float32))
    same = back.view(f"u{src.itemsize}") == bits
    return bool(np.all(same | (nan & np.isnan(back.astype(np.float32)))))


@functools.lru_cache(maxsize=None)
def _preserving_pairs() -> tuple[tuple[str, str], ...]:
    names = _array_dtypes()
    return tuple((a, b) for a in names for b in names
                 if DTYPES[a].bits >= 8 and DTYPES[b].bits >= 8 and _values_preserved(a, b))


def _preserves_facts(calls) -> str:
    facts = [f'(PreservesValues "{a}" "{b}")' for a, b in _preserving_pairs()]
    return "\n".join(["(relation PreservesValues (String String))", *facts])


def _preserves_py(src, dst):
    return (src, dst) in _preserving_pairs()


def _int_limits() -> dict[str, tuple[int, int]]:
    """dtype -> (lo, hi): the integers a computed constant of that type may take."""
    out = {}
    for name in _array_dtypes():
        d = DTYPES[name]
        if d.kind == "pred":
            out[name] = (0, 1)
        elif d.kind in ("int", "uint") and d.bits >= 8:
            lo, hi = _int_range(d)
            out[name] = (lo, min(hi, (1 << 63) - 1))     # egglog integers are i64
        elif d.kind == "float" and d.bits >= 8 and _exact_int_limit(name) >= 0:
            limit = _exact_int_limit(name)
            out[name] = (-limit, limit)
    return out


def _fits_facts(calls) -> str:
    rows = [f'(set (IntLimits "{d}") (vec-of {lo} {hi}))' for d, (lo, hi) in _int_limits().items()]
    return "\n".join(["(function IntLimits (String) IVec :no-merge)", *rows])


def _fits_egg(ctx, a, k):
    n, dtype = a
    limits = ctx.bind(f"(IntLimits {dtype})")
    ctx.atom(f"(<= {_get(limits, 0)} {n})")
    ctx.atom(f"(<= {n} {_get(limits, 1)})")


def _fits_py(n, dtype):
    lo_hi = _int_limits().get(dtype)
    return lo_hi is not None and lo_hi[0] <= n <= lo_hi[1]


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
    # The rule checker instantiates a variable this guard names as a constant (instantiate.py),
    # so in Python the guard holds.
    Fn("is_constant", ("term",), "bool",
       egg=lambda ctx, a, k: ctx.atom(f"({CONSTANT_RELATION} {a[0]})"), py=lambda t: True,
       facts=_is_constant_facts, doc="x is a constant: a literal or a broadcast of one"),
    Fn("is_identity", ("ints",), "bool",
       egg=lambda ctx, a, k: ctx.atom(f"(= {a[0]} (vec-range (vec-length {a[0]})))"),
       py=lambda p: tuple(p) == tuple(range(len(p))), doc="p is {0, 1, ..., n-1}"),
    Fn("is_sorted", ("ints",), "bool", egg=_is_sorted_egg,
       py=lambda p: all(a < b for a, b in zip(p, p[1:])), doc="p is strictly increasing",
       rank_of=0),
    Fn("compose", ("ints", "ints"), "ints", egg=_compose_egg, py=_compose_py,
       doc="r[i] = p[q[i]] (transpose of a transpose)", rank_of=1,
       length=_known(lambda lens, ints: lens[1])),
    Fn("invert", ("ints",), "ints", egg=_invert_egg, py=_invert_py, facts=_invert_facts,
       doc="the inverse permutation", rank_of=0,
       length=_FIRST),
    Fn("iota", ("int",), "ints", egg=lambda ctx, a, k: f"(vec-range {a[0]})",
       py=lambda n: tuple(range(n)), doc="{0, 1, ..., n-1}",
       length=_known(lambda lens, ints: ints[0])),
    Fn("size", ("ints",), "int", egg=lambda ctx, a, k: f"(vec-length {a[0]})",
       py=lambda p: len(p), doc="the length of a list",
       length=_FIRST),
    Fn("dims", ("type",), "ints", egg=lambda ctx, a, k: a[0].dims,
       py=lambda t: tuple(t.dims), doc="the dimensions of x",
       length=_FIRST),
    Fn("rank", ("type",), "int", egg=lambda ctx, a, k: f"(vec-length {a[0].dims})",
       py=lambda t: t.rank, doc="the rank of x",
       length=_FIRST),
    Fn("dtype", ("type",), "dtype", egg=lambda ctx, a, k: a[0].dtype,
       py=lambda t: t.element_type, doc="the element type of x"),
    Fn("num_elements", ("type",), "int",
       egg=lambda ctx, a, k: _product([_get(a[0].dims, i) for i in range(k)]),
       py=_num_elements_py, doc="the number of elements of x", rank_of=0),
    Fn("product", ("ints",), "int",
       egg=lambda ctx, a, k: _product([_get(a[0], i) for i in range(k)]),
       py=lambda p: math.prod(p), doc="the product of a list's elements (1 for {})", rank_of=0),
    Fn("min_of", ("ints",), "int", egg=_min_of_egg, py=_min_of_py,
       doc="the smallest element of a non-empty list", rank_of=0),
    Fn("get", ("ints", "int"), "int", egg=lambda ctx, a, k: f"(vec-get {a[0]} {a[1]})",
       py=_get_py, doc="element i of a list (counting from 0)"),
    Fn("set", ("ints", "int", "int"), "ints", egg=_set_egg, py=_set_py,
       doc="the list with element i replaced by v", rank_of=0,
       length=_FIRST),
    Fn("concat", ("ints", "ints"), "ints", egg=lambda ctx, a, k: f"(vec-append {a[0]} {a[1]})",
       py=lambda p, q: tuple(p) + tuple(q), doc="the elements of p, then those of q",
       length=_known(lambda lens, ints: lens[0] + lens[1])),
    Fn("complement", ("ints", "int"), "ints", egg=_complement_egg, py=_complement_py,
       facts=_set_facts, doc="{0, ..., n-1} without the elements of p (distinct, n <= 6)",
       rank_of=0, value_of=1, length=_known(lambda lens, ints: ints[1] - lens[0])),
    Fn("sort", ("ints",), "ints", egg=_sort_egg, py=_sort_py, facts=_set_facts,
       doc="a list of distinct non-negative integers in increasing order", rank_of=0,
       length=_FIRST),
    Fn("plus", ("int", "int"), "int", egg=lambda ctx, a, k: f"(+ {a[0]} {a[1]})",
       py=lambda a, b: a + b, doc="a + b",
       length=_known(lambda lens, ints: ints[0] + ints[1])),
    Fn("minus", ("int", "int"), "int", egg=lambda ctx, a, k: f"(- {a[0]} {a[1]})",
       py=lambda a, b: a - b, doc="a - b",
       length=_known(lambda lens, ints: ints[0] - ints[1])),
    Fn("times", ("int", "int"), "int", egg=lambda ctx, a, k: f"(* {a[0]} {a[1]})",
       py=lambda a, b: a * b, doc="a * b",
       length=_known(lambda lens, ints: ints[0] * ints[1])),
    Fn("plus_each", ("ints", "ints"), "ints", *_each("+", lambda a, b: a + b),
       doc="elementwise p + q", rank_of=0, same_rank=(1,),
       length=_FIRST),
    Fn("times_each", ("ints", "ints"), "ints", *_each("*", lambda a, b: a * b),
       doc="elementwise p * q", rank_of=0, same_rank=(1,),
       length=_FIRST),
    Fn("min_each", ("ints", "ints"), "ints", *_each("min", min),
       doc="elementwise min(p, q)", rank_of=0, same_rank=(1,),
       length=_FIRST),
    Fn("is_all", ("ints", "int"), "bool", egg=_is_all_egg,
       py=lambda p, v: all(x == v for x in p), doc="every element of p is v (true for {})",
       rank_of=0),
    Fn("is_widening", ("dtype", "dtype"), "bool",
       egg=lambda ctx, a, k: ctx.atom(f"(PreservesValues {a[0]} {a[1]})"), py=_preserves_py,
       facts=_preserves_facts,
       doc="every value of element type a is a value of b (a -> b -> a is the identity)"),
    Fn("fits", ("int", "dtype"), "bool", egg=_fits_egg, py=_fits_py, facts=_fits_facts,
       doc="the integer n is exactly a value of the element type (floats: |n| <= 2^mantissa)"),
    # Used by the compiler to derive the types of new terms and to guard their constants.
    Fn("slice_dims", ("ints", "ints", "ints"), "ints", egg=_slice_dims_egg, py=_slice_dims_py,
       doc="result dims of a slice", rank_of=0, same_rank=(1, 2), public=False,
       length=_FIRST),
    Fn("pad_dims", ("ints", "ints", "ints", "ints"), "ints", egg=_pad_dims_egg, py=_pad_dims_py,
       doc="result dims of a pad", rank_of=0, same_rank=(1, 2, 3), public=False,
       length=_FIRST),
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
