"""The functions and guards of the rule language, one table row each: the egglog text the
rule compiler emits and the Python the rule checker evaluates, side by side, so the two
meanings cannot drift apart (tests/test_rule_compiler.py compares them on random inputs).

Egglog has no loops, so a function over a whole list is a *host* function (`host=True`):
rules ask for its value and Python answers between iterations with the same `py` the
checker runs (host_calls.py). Where there is no value (an index out of range, a division
by zero), Python raises NoValue and the rule does not match. The others are egglog
expressions or atoms (`egg`). Tables of facts are kept to element types (a few dozen rows):
egglog may join a table before its keys are computed.

Value kinds: "ints" (IVec), "int" (i64), "str" (String), "dtype" (String naming an element
type), "type" (a term's Type; Python: a Shape), "splat" (the canonical text of the scalar a
constant term is a splat of), "term" (the term itself), "bool" (a guard: emitted as query
atoms).
"""
from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field
from typing import Callable, NamedTuple

import numpy as np

from ..attributes import Window
from ..dtypes import COMPLEX_PART, DTYPES, float_info, int_info
from ..errors import HloError
from ..shape import Shape, array
from ..egraph.constants import number_text, representable
from ..grammar.hlo_parser import shape_from_text
from ..egraph.schema import (DTYPE_CLASSES, atom, constant_atom, function, operand_of_relation,
                             relation, set_value, vec_of)
from ..egraph.terms import egg_string
from ..shape_rules import window_output_dims
from ..attributes import AttributeError_
from . import conv_functions

class NoValue(Exception):
    """The function has no value here; the egglog rule would not match."""


class TypeParts(NamedTuple):
    """Egglog text of a Type's element type, dims and extra (the full shape text where the
    layout is not the default, else ""): what rows with "type" params get."""
    dtype: str
    dims: str
    extra: str


@dataclass(frozen=True)
class Fn:
    name: str
    params: tuple[str, ...]
    result: str
    # egg(ctx, args) -> expression text (None for guards, which call ctx.atom instead);
    # ctx.bind(expr) binds an expression to a query variable, ctx.atom(text) adds a fact.
    # None for host functions.
    egg: Callable | None
    py: Callable
    doc: str
    host: bool = False                  # computed by Python between iterations
    public: bool = True                 # False: used by the compiler only (type derivation)
    # facts(calls) -> egglog declarations/facts the rows refer to; `calls` is the set of
    # argument tuples used in the program, literal values or None.
    facts: Callable | None = field(default=None, compare=False)
    # draw(dtype, rng) -> the text of a splat where the function has a value: what the rule
    # checker gives a constant this function reads (a "splat" parameter); None: a splat of
    # the checker's usual constant values.
    draw: Callable | None = field(default=None, compare=False)


def _check_index(values, length: int) -> None:
    if any(not 0 <= v < length for v in values):
        raise NoValue


# --- list functions (host) -----------------------------------------------------------------

def _compose_py(p, q):
    _check_index(q, len(p))
    return tuple(p[i] for i in q)


def _invert_py(p):
    if sorted(p) != list(range(len(p))):
        raise NoValue
    out = [0] * len(p)
    for i, v in enumerate(p):
        out[v] = i
    return tuple(out)


def _slice_dims_py(start, limit, stride):
    if not len(start) == len(limit) == len(stride):
        raise NoValue
    if any(not (0 <= s <= l and st > 0) for s, l, st in zip(start, limit, stride)):
        raise NoValue
    return tuple((l - s + st - 1) // st for s, l, st in zip(start, limit, stride))


def _pad_dims_py(dims, low, high, interior):
    if not len(dims) == len(low) == len(high) == len(interior):
        raise NoValue
    out = tuple(d + lo + hi + max(d - 1, 0) * n for d, lo, hi, n in zip(dims, low, high, interior))
    if any(n < 0 for n in interior) or any(d < 0 for d in out):
        raise NoValue
    return out


def _moves_unit_dims_only_py(p, d):
    """A transpose by p of an array of dims d that is a reshape: only size-1 dims move."""
    if sorted(p) != list(range(len(d))):
        raise NoValue
    kept = [i for i in p if d[i] != 1]
    return kept == sorted(kept)


def _memory_order(t: Shape) -> tuple[int, ...]:
    """The dims of t from major to minor in memory; no value where a layout tail (tiles,
    memory space...) or a dynamic dimension makes memory more than the order of dims."""
    if t.dynamic or t.layout is None or t.layout.tail:
        raise NoValue
    return tuple(reversed(t.layout.minor_to_major))


def _same_memory_order_py(x: Shape, y: Shape) -> bool:
    """Same dims, and the same order of the dims larger than 1 in memory."""
    big = lambda t: [d for d in _memory_order(t) if t.dims[d] != 1]  # noqa: E731
    return x.dims == y.dims and big(x) == big(y)


def _bitcast_permutation_py(x: Shape, y: Shape):
    """p with y[k] = x[p[k]] whose memory orders match through p: reading x's bytes as y is
    transpose(x, p)."""
    mx, my = _memory_order(x), _memory_order(y)
    if len(mx) != len(my):
        raise NoValue
    p = [0] * len(my)
    for a, b in zip(my, mx):
        p[a] = b
    if any(y.dims[k] != x.dims[p[k]] for k in range(len(p))):
        raise NoValue
    return tuple(p)


def _i64(n: int) -> int:
    """A result egglog can hold (its integers are i64)."""
    if not -2 ** 63 <= n < 2 ** 63:
        raise NoValue
    return n


def _num_elements_py(t: Shape):
    return _i64(math.prod(t.dims))


# --- constant values ----------------------------------------------------------------------

def _int_of_text_py(text):
    try:
        return _i64(int(text))
    except ValueError:
        raise NoValue from None


def _starts_py(operands):
    """The integers of an operand list (instructions, in the checker) whose every operand is
    a scalar integer constant."""
    if any(o.opcode != "constant" or o.shape.rank or not DTYPES[o.shape.element_type].is_integral
           for o in operands):
        raise NoValue
    return tuple(int(o.literal) for o in operands)


def _pick_py(items, positions):
    _check_index(positions, len(items))
    if not positions:           # an empty list of operands: no term holds one
        raise NoValue
    return tuple(items[i] for i in positions)


def _clamp_starts_py(starts, dims, window):
    if not len(starts) == len(dims) == len(window) or any(w > n for n, w in zip(dims, window)):
        raise NoValue
    return tuple(min(max(s, 0), n - w) for s, n, w in zip(starts, dims, window))


# --- tables of facts -----------------------------------------------------------------------

def _array_dtypes() -> list[str]:
    return sorted(name for name, d in DTYPES.items() if d.is_array and name != "opaque_type")


def _real_type_facts(calls) -> str:
    sets = [set_value(atom("RealType", egg_string(d)), egg_string(COMPLEX_PART.get(d, d)))
            for d in _array_dtypes()]
    return "\n".join([function("RealType", ["String"], "String"), *sets])


def _real_type_py(dtype: str) -> str:
    if dtype not in DTYPES or not DTYPES[dtype].is_array:
        raise NoValue
    return COMPLEX_PART.get(dtype, dtype)


def _can_hold_facts(calls) -> str:
    texts = sorted({c[0] for c in calls if c[0] is not None})
    facts = [atom("CanHold", egg_string(t), egg_string(d)) for t in texts for d in _array_dtypes()
             if representable(t, d)]
    return "\n".join([relation("CanHold", ["String", "String"]), *facts])


# --- integer and list arithmetic ----------------------------------------------------------

def _set_py(lst, i, v):
    if not 0 <= i < len(lst):
        raise NoValue
    return tuple(v if j == i else x for j, x in enumerate(lst))


def _get_py(lst, i):
    if not 0 <= i < len(lst):
        raise NoValue
    return lst[i]


def _each(py):
    """An elementwise operation on two lists of the same length."""
    def run(x, y):
        if len(x) != len(y):
            raise NoValue
        return tuple(_i64(py(p, q)) for p, q in zip(x, y))
    return run


def _choose_py(d, p, q):
    if len(p) != len(q):
        raise NoValue
    _check_index(d, len(p))
    return tuple(a if i in d else b for i, (a, b) in enumerate(zip(p, q)))


def _slice_span_py(counts, strides):
    if len(counts) != len(strides) or any(m < 1 or t < 1 for m, t in zip(counts, strides)):
        raise NoValue
    return tuple(_i64((m - 1) * t + 1) for m, t in zip(counts, strides))


def _min_of_py(lst):
    if not lst:
        raise NoValue
    return min(lst)


def _sort_py(lst):
    if len(set(lst)) != len(lst) or any(i < 0 for i in lst):
        raise NoValue
    return tuple(sorted(lst))


def _complement_py(lst, n):
    if n < 0 or len(set(lst)) != len(lst) or any(not 0 <= i < n for i in lst):
        raise NoValue
    return tuple(i for i in range(n) if i not in lst)


def _reshape_source_dims_py(x, y, r):
    """For each dim d of r: the dim e of x that reshaping x to y leaves alone as d (the
    same size, and the same number of elements before it), so that reducing d of the
    reshape reduces e of x, element for element in the same order."""
    if 0 in x or 0 in y or math.prod(x) != math.prod(y):
        raise NoValue
    before_x = [math.prod(x[:e]) for e in range(len(x))]
    out = []
    for d in r:
        if not 0 <= d < len(y) or y[d] == 1:
            raise NoValue
        before = math.prod(y[:d])
        match = [e for e in range(len(x)) if before_x[e] == before and x[e] == y[d]]
        if not match:
            raise NoValue
        out.append(match[0])
    return tuple(out)


def _window_dims_py(dims, size, stride, low, high, lhs_dilate, rhs_dilate):
    """The result dims of a reduce-window of an operand of these dims."""
    n = len(dims)
    if any(len(part) != n for part in (size, stride, low, high, lhs_dilate, rhs_dilate)):
        raise NoValue
    window = Window(tuple(size), tuple(stride), tuple(zip(low, high)), tuple(lhs_dilate),
                    tuple(rhs_dilate), (False,) * n)
    try:
        return tuple(window_output_dims(dims, window))
    except HloError:
        raise NoValue from None


def _window_covered_dims_py(dims, size, stride, low, high, lhs_dilate, rhs_dilate, start,
                            limit, slice_stride):
    """The dims a slice of a reduce-window reduces whole: where the slice keeps one result
    (at `start`) whose window covers every element of the operand dim; every other dim must
    be untouched (a window of 1 without padding, stride or base dilation, sliced whole).
    No value if some dim is neither, or none is reduced."""
    parts = (size, stride, low, high, lhs_dilate, rhs_dilate, start, limit, slice_stride)
    if any(len(p) != len(dims) for p in parts):
        raise NoValue
    covered = []
    for i, (n, s, t, lo, hi, b, w, a, z, st) in enumerate(zip(dims, *parts)):
        if (s, t, lo, hi, b, a, z, st) == (1, 1, 0, 0, 1, 0, n, 1):
            continue
        first = a * t - lo                      # the window's first tap, in dilated positions
        if st < 1 or not a < z <= a + st or (w != 1 and s != 1) or first > 0 \
                or first + (s - 1) * w < (n - 1) * b:
            raise NoValue
        covered.append(i)
    if not covered:
        raise NoValue
    return tuple(covered)


# --- gather and scatter dimension numbers (host) --------------------------------------------

def _spread_py(values, positions, n):
    if (len(values) != len(positions) or len(set(positions)) != len(positions)
            or any(not 0 <= p < n for p in positions)):
        raise NoValue
    out = [0] * n
    for v, p in zip(values, positions):
        out[p] = v
    return tuple(out)


def _gather_dims_py(operand, indices, offset_dims, collapsed, index_vector_dim, slice_sizes,
                    operand_batching):
    """Output dims: offset_dims positions take the kept window sizes in order, the others
    the indices' dims without index_vector_dim (the verifier checks the rest)."""
    if len(slice_sizes) != len(operand) or not 0 <= index_vector_dim <= len(indices):
        raise NoValue
    dropped = set(collapsed) | set(operand_batching)
    window = [s for d, s in enumerate(slice_sizes) if d not in dropped]
    batch = [n for d, n in enumerate(indices) if d != index_vector_dim]
    rank = len(window) + len(batch)
    if len(offset_dims) != len(window) or sorted(set(offset_dims)) != list(offset_dims) \
            or any(not 0 <= d < rank for d in offset_dims):
        raise NoValue
    windows, batches = iter(window), iter(batch)
    return tuple(next(windows) if d in offset_dims else next(batches) for d in range(rank))


def _concat_dims_py(a, b, dimensions):
    if len(dimensions) != 1 or len(a) != len(b) or not 0 <= dimensions[0] < len(a):
        raise NoValue
    d = dimensions[0]
    if any(x != y for k, (x, y) in enumerate(zip(a, b)) if k != d):
        raise NoValue
    return tuple(x + y if k == d else x for k, (x, y) in enumerate(zip(a, b)))


def _reshaped_padding_py(pad_dims, padded, values, result_dims):
    """`values` moved to the result dims of a reshape that keeps the padded dims (where
    `padded` is not 0: one run of dims) verbatim, regrouping only the dims around them."""
    run = [d for d, p in enumerate(padded) if p != 0]
    if len(padded) != len(pad_dims) or len(values) != len(pad_dims) or not run \
            or run != list(range(run[0], run[-1] + 1)):
        raise NoValue
    block = list(pad_dims[run[0]:run[-1] + 1])
    before, after = math.prod(pad_dims[:run[0]]), math.prod(pad_dims[run[-1] + 1:])
    for j in range(len(result_dims) - len(block) + 1):
        if (list(result_dims[j:j + len(block)]) == block
                and math.prod(result_dims[:j]) == before
                and math.prod(result_dims[j + len(block):]) == after):
            return _spread_py(values[run[0]:run[-1] + 1], range(j, j + len(block)),
                              len(result_dims))
    raise NoValue


def _scatter_concat_dims_py(indices_rank, index_vector_dim, indices_batching, window_dims,
                            updates_rank):
    """(indices dim, updates dim) of the first scatter dim that is not a batching dim."""
    free = [d for d in range(indices_rank)
            if d != index_vector_dim and d not in indices_batching]
    scatter_dims = [d for d in range(updates_rank) if d not in window_dims]
    if not free:
        raise NoValue
    position = free[0] - (index_vector_dim < free[0])
    if position >= len(scatter_dims):
        raise NoValue
    return free[0], scatter_dims[position]


def _positions_py(p, q):
    return tuple(q.index(x) for x in p if x in q)


def _conv_py(function):
    """A function of conv_functions.py, with no value where its dim_labels are malformed or
    the operands do not swap."""
    @functools.wraps(function)
    def py(*args):
        try:
            return function(*args)
        except (AttributeError_, conv_functions.NotSwappable):
            raise NoValue from None
    return py


def _fill_py(n, v):
    if n < 0:
        raise NoValue
    return (v,) * n


def _put_py(p, idx, vals):
    if len(idx) != len(vals) or any(not 0 <= i < len(p) for i in idx):
        raise NoValue
    out = list(p)
    for i, v in zip(idx, vals):
        out[i] = v
    return tuple(out)


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
        return b.is_integral or _values_preserved("s8", dst)
    if b.kind == "pred" or a.kind == "complex" and b.kind != "complex":
        return False
    if b.kind == "complex":
        if a.kind == "complex":
            return (src, dst) == ("c64", "c128")
        return _values_preserved(src, COMPLEX_PART[dst])
    if a.is_integral:
        lo, hi = _int_range(a)
        if b.is_integral:
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
    info = int_info(d)
    return int(info.min), int(info.max)


@functools.lru_cache(maxsize=None)
def _exact_int_limit(dtype: str) -> int:
    """The largest L <= 2**mantissa_bits such that every integer n with |n| <= L is a value of
    this float type (-1 if not even 0 is); within it a value's canonical text is the decimal
    integer, so computed constants can be written as text."""
    npdt = DTYPES[dtype].numpy
    info = float_info(npdt)
    limit = min(1 << info.nmant, int(float(info.max)))
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
    facts = [atom("PreservesValues", egg_string(a), egg_string(b)) for a, b in _preserving_pairs()]
    return "\n".join([relation("PreservesValues", ["String", "String"]), *facts])


def _preserves_py(src, dst):
    return (src, dst) in _preserving_pairs()


def _int_limits() -> dict[str, tuple[int, int]]:
    """dtype -> (lo, hi): the integers a computed constant of that type may take."""
    out = {}
    for name in _array_dtypes():
        d = DTYPES[name]
        if d.kind == "pred":
            out[name] = (0, 1)
        elif d.is_integral and d.bits >= 8:
            lo, hi = _int_range(d)
            out[name] = (lo, min(hi, (1 << 63) - 1))     # egglog integers are i64
        elif d.kind == "float" and d.bits >= 8 and _exact_int_limit(name) >= 0:
            limit = _exact_int_limit(name)
            out[name] = (-limit, limit)
    return out


def _fits_facts(calls) -> str:
    rows = [set_value(atom("IntLimits", egg_string(d)), vec_of([str(lo), str(hi)]))
            for d, (lo, hi) in _int_limits().items()]
    return "\n".join([function("IntLimits", ["String"], "IVec"), *rows])


def _fits_egg(ctx, a):
    n, dtype = a
    limits = ctx.bind(atom("IntLimits", dtype))
    ctx.atom(atom("<=", atom("vec-get", limits, 0), n))
    ctx.atom(atom("<=", n, atom("vec-get", limits, 1)))


def _fits_py(n, dtype):
    lo_hi = _int_limits().get(dtype)
    return lo_hi is not None and lo_hi[0] <= n <= lo_hi[1]


def _mantissa_bits_py(dtype: str) -> int:
    if dtype not in DTYPES or DTYPES[dtype].kind != "float":
        raise NoValue
    return int(float_info(dtype).nmant)


def _exponent_bits_py(dtype: str) -> int:
    """The bits besides the sign and the mantissa, as reduce-precision counts them."""
    return DTYPES[dtype].bits - 1 - _mantissa_bits_py(dtype)


# --- values of constants -------------------------------------------------------------------

def _log2_py(text: str) -> int:
    """k where the splat's value is exactly 2^k (integers and floats alike)."""
    try:
        value = int(text) if text.lstrip("-").isdigit() else float(text)
    except ValueError:                  # complex "(a, b)", NaN payloads
        raise NoValue from None
    if not (0 < value < math.inf):
        raise NoValue
    mantissa, exponent = math.frexp(value)
    if mantissa != 0.5 or isinstance(value, int) and value & (value - 1):
        raise NoValue
    return exponent - 1


_POWERS_OF_TWO = [number_text(repr(2.0 ** k)) for k in range(-12, 16)]


def _draw_power_of_two(dtype: str, rng) -> str:
    choices = [t for t in _POWERS_OF_TWO if representable(t, dtype)]
    if not choices:
        raise NoValue
    return choices[rng.integers(len(choices))]


# --- the table -----------------------------------------------------------------------------

def _dtype_class(fn_name: str, relation: str) -> Fn:
    members = frozenset(DTYPE_CLASSES[relation])
    return Fn(fn_name, ("type",), "bool",
              egg=lambda ctx, a: ctx.atom(atom(relation, a[0].dtype)),
              py=lambda t: t.element_type in members,
              doc=f"the element type of x is one of {', '.join(sorted(members))}")


def _guard_name(relation: str) -> str:
    """IsIntOrPred -> is_int_or_pred."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", relation).lower()


_DTYPE_CLASS_ROWS = [_dtype_class(_guard_name(rel), rel) for rel in DTYPE_CLASSES]
# Functions of a term that read its element type only: the rule checker solves guards made
# of these before it draws instances (instance_plan.py).
ELEMENT_TYPE_FUNCTIONS = frozenset({"dtype", *(row.name for row in _DTYPE_CLASS_ROWS)})

_ROWS = [
    *_DTYPE_CLASS_ROWS,
    Fn("is_scalar", ("type",), "bool",
       egg=lambda ctx, a: ctx.atom(atom("=", 0, atom("vec-length", a[0].dims))),
       py=lambda t: t.rank == 0, doc="x has rank 0"),
    # A term of a tuple type has no dims: matching its type as an array's fails.
    Fn("is_array", ("type",), "bool",
       egg=lambda ctx, a: ctx.atom(atom(">=", atom("vec-length", a[0].dims), 0)),
       py=lambda t: not t.is_tuple, doc="x is an array, not a tuple"),
    # The rule checker instantiates a variable this guard names as a constant (instantiate.py),
    # so in Python the guard holds.
    Fn("is_constant", ("term",), "bool",
       egg=lambda ctx, a: ctx.atom(constant_atom(a[0], f"i_c{a[0]}")), py=lambda t: True,
       doc="x is a constant: a literal or a broadcast of one"),
    Fn("value", ("splat",), "int", egg=None, host=True, py=_int_of_text_py,
       doc="the element of a splat constant c where it is an integer (no value otherwise)"),
    Fn("log2", ("splat",), "int", egg=None, host=True, py=_log2_py, draw=_draw_power_of_two,
       doc="k where the constant c is a splat of 2^k (no value for other constants)"),
    Fn("is_identity", ("ints",), "bool",
       egg=lambda ctx, a: ctx.atom(atom("=", a[0], atom("vec-range", atom("vec-length", a[0])))),
       py=lambda p: tuple(p) == tuple(range(len(p))), doc="p is {0, 1, ..., n-1}"),
    Fn("is_sorted", ("ints",), "bool", egg=None, host=True,
       py=lambda p: all(a < b for a, b in zip(p, p[1:])), doc="p is strictly increasing"),
    Fn("compose", ("ints", "ints"), "ints", egg=None, host=True, py=_compose_py,
       doc="r[i] = p[q[i]] (transpose of a transpose)"),
    Fn("invert", ("ints",), "ints", egg=None, host=True, py=_invert_py,
       doc="the inverse permutation"),
    Fn("iota", ("int",), "ints", egg=lambda ctx, a: atom("vec-range", a[0]),
       py=lambda n: tuple(range(n)), doc="{0, 1, ..., n-1}"),
    Fn("size", ("ints",), "int", egg=lambda ctx, a: atom("vec-length", a[0]),
       py=lambda p: len(p), doc="the length of a list"),
    Fn("dims", ("type",), "ints", egg=lambda ctx, a: a[0].dims,
       py=lambda t: tuple(t.dims), doc="the dimensions of x"),
    Fn("rank", ("type",), "int", egg=lambda ctx, a: atom("vec-length", a[0].dims),
       py=lambda t: t.rank, doc="the rank of x"),
    Fn("dtype", ("type",), "dtype", egg=lambda ctx, a: a[0].dtype,
       py=lambda t: t.element_type, doc="the element type of x"),
    Fn("num_elements", ("type",), "int", egg=None, host=True,
       py=_num_elements_py, doc="the number of elements of x"),
    Fn("product", ("ints",), "int", egg=None, host=True,
       py=lambda p: _i64(math.prod(p)), doc="the product of a list's elements (1 for {})"),
    Fn("min_of", ("ints",), "int", egg=None, host=True, py=_min_of_py,
       doc="the smallest element of a non-empty list"),
    Fn("get", ("ints", "int"), "int", egg=lambda ctx, a: atom("vec-get", *a),
       py=_get_py, doc="element i of a list (counting from 0)"),
    Fn("set", ("ints", "int", "int"), "ints", egg=None, host=True, py=_set_py,
       doc="the list with element i replaced by v"),
    Fn("concat", ("ints", "ints"), "ints", egg=lambda ctx, a: atom("vec-append", *a),
       py=lambda p, q: tuple(p) + tuple(q), doc="the elements of p, then those of q"),
    Fn("complement", ("ints", "int"), "ints", egg=None, host=True, py=_complement_py,
       doc="{0, ..., n-1} without the elements of p (distinct, each in 0..n-1)"),
    Fn("sort", ("ints",), "ints", egg=None, host=True, py=_sort_py,
       doc="a list of distinct non-negative integers in increasing order"),
    Fn("reshape_source_dims", ("ints", "ints", "ints"), "ints", egg=None, host=True,
       py=_reshape_source_dims_py,
       doc="the dims of x (dims p) that dims r of its reshape to dims q are, where that "
           "reshape leaves each alone (no value if one is merged or split)"),
    Fn("window_dims", ("ints",) * 7, "ints", egg=None, host=True, py=_window_dims_py,
       doc="the result dims of a reduce-window of dims p with window size, stride, low, "
           "high, lhs_dilate, rhs_dilate"),
    Fn("window_covered_dims", ("ints",) * 10, "ints", egg=None, host=True,
       py=_window_covered_dims_py,
       doc="the dims of x (dims p) that a slice (start, limit, stride) of its reduce-window "
           "(size, stride, low, high, lhs_dilate, rhs_dilate) reduces whole, the others "
           "untouched"),
    Fn("plus", ("int", "int"), "int", egg=lambda ctx, a: atom("+", *a),
       py=lambda a, b: a + b, doc="a + b"),
    Fn("minus", ("int", "int"), "int", egg=lambda ctx, a: atom("-", *a),
       py=lambda a, b: a - b, doc="a - b"),
    Fn("times", ("int", "int"), "int", egg=lambda ctx, a: atom("*", *a),
       py=lambda a, b: a * b, doc="a * b"),
    Fn("plus_each", ("ints", "ints"), "ints", egg=None, host=True,
       py=_each(lambda a, b: a + b), doc="elementwise p + q"),
    Fn("times_each", ("ints", "ints"), "ints", egg=None, host=True,
       py=_each(lambda a, b: a * b), doc="elementwise p * q"),
    Fn("min_each", ("ints", "ints"), "ints", egg=None, host=True,
       py=_each(min), doc="elementwise min(p, q)"),
    Fn("minus_each", ("ints", "ints"), "ints", egg=None, host=True,
       py=_each(lambda a, b: a - b), doc="elementwise p - q"),
    Fn("exponent_bits", ("dtype",), "int", egg=None, host=True, py=_exponent_bits_py,
       doc="the exponent bits of a float type (reduce-precision's exponent_bits)"),
    Fn("mantissa_bits", ("dtype",), "int", egg=None, host=True, py=_mantissa_bits_py,
       doc="the explicit mantissa bits of a float type (reduce-precision's mantissa_bits)"),
    Fn("is_all", ("ints", "int"), "bool", egg=None, host=True,
       py=lambda p, v: all(x == v for x in p), doc="every element of p is v (true for {})"),
    Fn("is_widening", ("dtype", "dtype"), "bool",
       egg=lambda ctx, a: ctx.atom(atom("PreservesValues", *a)), py=_preserves_py,
       facts=_preserves_facts,
       doc="every value of element type a is a value of b (a -> b -> a is the identity)"),
    Fn("fits", ("int", "dtype"), "bool", egg=_fits_egg, py=_fits_py, facts=_fits_facts,
       doc="the integer n is exactly a value of the element type (floats: |n| <= 2^mantissa)"),
    Fn("starts", ("operands",), "ints", egg=lambda ctx, a: ctx.operand_values(a[0]),
       py=_starts_py, facts=lambda calls: operand_of_relation(),
       doc="the values of an operand list i... whose operands are all scalar integer "
           "constants (no value otherwise)"),
    Fn("pick", ("operands", "ints"), "operands", egg=lambda ctx, a: ctx.pick_operands(*a),
       py=_pick_py, doc="the operands of i... at the positions d, in order"),
    Fn("clamp_starts", ("ints", "ints", "ints"), "ints", egg=None, host=True,
       py=_clamp_starts_py, doc="each start moved into [0, dim - window], as XLA clamps the "
       "start indices of dynamic slices"),
    # Used by the compiler to derive the types of new terms and to guard their constants.
    Fn("slice_dims", ("ints", "ints", "ints"), "ints", egg=None, host=True, py=_slice_dims_py,
       doc="result dims of a slice", public=False),
    Fn("pad_dims", ("ints", "ints", "ints", "ints"), "ints", egg=None, host=True,
       py=_pad_dims_py, doc="result dims of a pad", public=False),
    Fn("real_type", ("dtype",), "dtype", egg=lambda ctx, a: atom("RealType", a[0]),
       py=_real_type_py, doc="c64 -> f32, c128 -> f64, others unchanged", public=False,
       facts=_real_type_facts),
    Fn("can_hold", ("str", "dtype"), "bool",
       egg=lambda ctx, a: ctx.atom(atom("CanHold", *a)),
       py=lambda text, dtype: representable(text, dtype),
       doc="the constant text is exactly a value of that element type", public=False,
       facts=_can_hold_facts),
    Fn("spread", ("ints", "ints", "int"), "ints", egg=None, host=True, py=_spread_py,
       doc="n zeros with values[k] at positions[k]: per-dim lists moved to other dims"),
    Fn("scatter_concat_dims", ("int", "int", "ints", "ints", "int"), "ints", egg=None,
       host=True, py=_scatter_concat_dims_py,
       doc="(indices dim, updates dim) along which two scatters' indices and updates join"),
    Fn("reshaped_padding", ("ints", "ints", "ints", "ints"), "ints", egg=None, host=True,
       py=_reshaped_padding_py,
       doc="a pad's per-dim list moved through a reshape that keeps its padded dims verbatim"),
    Fn("gather_dims", ("ints", "ints", "ints", "ints", "int", "ints", "ints"), "ints",
       egg=None, host=True, py=_gather_dims_py,
       doc="a gather's result dims; given per-dim lists in place of the slice sizes and the "
           "indices' dims, where their entries land in the result"),
    Fn("concat_dims", ("ints", "ints", "ints"), "ints", egg=None, host=True,
       py=_concat_dims_py, doc="result dims of a concatenate of two operands", public=False),
    Fn("moves_unit_dims_only", ("ints", "ints"), "bool", egg=None, host=True,
       py=_moves_unit_dims_only_py,
       doc="the permutation p of dims d keeps every dim larger than 1 in its order"),
    Fn("same_memory_order", ("type", "type"), "bool", egg=None, host=True,
       py=_same_memory_order_py,
       doc="x and y have the same dims and hold their elements in the same order in memory"),
    Fn("bitcast_permutation", ("type", "type"), "ints", egg=None, host=True,
       py=_bitcast_permutation_py,
       doc="p where x's bytes read as y are transpose(x, p) (no value where they are not)"),
    Fn("slice_span", ("ints", "ints"), "ints", egg=None, host=True, py=_slice_span_py,
       doc="(m - 1) * t + 1 for each dim: how far m elements at stride t reach (m >= 1)"),
    Fn("choose", ("ints", "ints", "ints"), "ints", egg=None, host=True, py=_choose_py,
       doc="p's elements at the indices in d, q's at the others (p, q of one length)"),
    Fn("union", ("ints", "ints"), "ints", egg=None, host=True,
       py=lambda p, q: tuple(sorted(set(p) | set(q))),
       doc="the distinct elements of p and q, increasing"),
    Fn("difference", ("ints", "ints"), "ints", egg=None, host=True,
       py=lambda p, q: tuple(v for v in p if v not in q), doc="p's elements not in q, in order"),
    Fn("padded_dims", ("ints", "ints", "ints"), "ints", egg=None, host=True,
       py=lambda *pads: tuple(i for i, ps in enumerate(zip(*pads)) if any(ps)),
       doc="the dims a pad with these low, high, interior changes (some entry non-zero)"),
    Fn("positions", ("ints", "ints"), "ints", egg=None, host=True, py=_positions_py,
       doc="for each element of p found in q, its index in q, the others skipped (where a "
           "broadcast's dims land once a reduce removes some; a dot's contracting dims of "
           "one operand matched to the other's)"),
    Fn("put", ("ints", "ints", "ints"), "ints", egg=None, host=True, py=_put_py,
       doc="p with element idx[j] replaced by vals[j]"),
    Fn("fill", ("int", "int"), "ints", egg=None, host=True, py=_fill_py,
       doc="a list of n copies of v"),
    Fn("swapped_labels", ("str",), "str", egg=None, host=True,
       py=_conv_py(conv_functions.swapped_labels),
       doc="a convolution's dim_labels with its operands swapped"),
    Fn("spatial_sizes", ("ints", "str"), "ints", egg=None, host=True,
       py=_conv_py(conv_functions.spatial_sizes),
       doc="the sizes of a convolution input's spatial dims (its dims d, dim_labels l), in "
           "window order"),
    Fn("swapped_padding", ("ints", "ints", "ints"), "ints", egg=None, host=True,
       py=_conv_py(conv_functions.swapped_padding),
       doc="p + x - k per dim: a window side's padding once the window spans sizes x "
           "instead of k (no value where one is negative)"),
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


def type_value(dtype: str, dims, extra: str = "") -> Shape:
    """The Python value of a "type" expression: built by the compiler (default layout), or
    a term's type read back from the e-graph (its layout is in `extra` where not default)."""
    if dtype not in DTYPES or any(d < 0 for d in dims):
        raise NoValue
    return shape_from_text(extra) if extra else array(dtype, tuple(dims))
