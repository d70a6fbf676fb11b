"""Where an element of an array lands in views of it (slices, reshapes, transposes,
row-major bitcasts): the inverse of the elemental generator's index maps for those ops, so
a GPU thread holding the element at position p can store what a view's output reads at p.
Written on emit_loops' Int helpers, so the same code runs on Python ints (tests)."""
from __future__ import annotations

from ..shape import default_layout
from .emit_loops import Index, reshape_index, sub, udiv, urem
from .ltypes import I64


def plain_view(x) -> bool:
    """A bitcast is a view of this kind only as a row-major reshape of the same type."""
    if x.opcode != "bitcast":
        return True
    op = x.operands[0]
    return op.shape.element_type == x.shape.element_type and all(
        s.layout is None or s.layout.minor_to_major == default_layout(s.rank).minor_to_major
        for s in (x.shape, op.shape))


def _reshaped(b, x, valid, index: Index):
    return valid, reshape_index(b, index, x.shape.dims)


def _transposed(b, x, valid, index: Index):
    vals = index.values(b)
    return valid, Index(x.shape.dims, values=[vals[d] for d in x.attrs["dimensions"]])


def _sliced(b, x, valid, index: Index):
    """Inside the slice where the position is on its grid: (position - start) / stride."""
    out = []
    for v, n, (start, limit, stride) in zip(index.values(b), index.dims, x.attrs["slice"]):
        rel = sub(b, v, start)
        if (start, limit) != (0, n):
            valid = _all(b, valid, _below(b, rel, limit - start))
        if stride > 1:
            valid = _all(b, valid, _is_zero(b, urem(b, rel, stride)))
        out.append(udiv(b, rel, stride))
    return valid, Index(x.shape.dims, values=out)


def _below(b, x, n: int):
    """x < n for an x that may be negative (so compared unsigned)."""
    return 0 <= x < n if isinstance(x, int) else b.icmp_unsigned("<", x, I64(n))


def _is_zero(b, x):
    return x == 0 if isinstance(x, int) else b.icmp_unsigned("==", x, I64(0))


def _all(b, x, y):
    if x is None or isinstance(x, bool) or isinstance(y, bool):
        return y if x is None or x is True else x if y is True else False
    return b.and_(x, y)


# view opcode -> (builder, view, valid, index in its operand) -> (valid, index in the view)
LANDING = {"reshape": _reshaped, "bitcast": _reshaped, "transpose": _transposed,
           "slice": _sliced}


def landing(b, path: tuple, index: Index):
    """Where the result's element at `index` lands after the views `path`: (None if it
    always lands, else whether it does (i1, or a bool on Python ints), its index there).
    `b` may be None when the index holds Python ints (what the tests run)."""
    valid = None
    for x in path:
        valid, index = LANDING[x.opcode](b, x, valid, index)
    return (None if valid is True else valid), index
