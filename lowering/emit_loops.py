"""Indices and loop nests.

An `Index` names one element of an array of known dims, either by its coordinates or by its
row-major linear position, whichever was cheaper to get; the other is derived on demand.
Data-movement ops turn their output index into their operand's index (index arithmetic, not
copies), so a reshape passes the linear position through untouched and only ops that need
coordinates (broadcast, transpose, slice, ...) ever divide.

Index components are LLVM i64 values or plain Python ints; the helpers fold ints, so size-1
dimensions and constant offsets cost no instructions.
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Callable, Sequence

from llvmlite import ir

from .ltypes import I64

Int = int | ir.Value


def const(v: Int) -> ir.Value:
    return I64(v) if isinstance(v, int) else v


def add(b: ir.IRBuilder, x: Int, y: Int) -> Int:
    if isinstance(x, int) and isinstance(y, int):
        return x + y
    if isinstance(y, int) and y == 0:
        return x
    if isinstance(x, int) and x == 0:
        return y
    return b.add(const(x), const(y))


def sub(b: ir.IRBuilder, x: Int, y: Int) -> Int:
    if isinstance(x, int) and isinstance(y, int):
        return x - y
    if isinstance(y, int) and y == 0:
        return x
    return b.sub(const(x), const(y))


def mul(b: ir.IRBuilder, x: Int, y: Int) -> Int:
    if isinstance(x, int) and isinstance(y, int):
        return x * y
    if isinstance(y, int) and y == 1:
        return x
    if isinstance(x, int) and x == 1:
        return y
    if (isinstance(x, int) and x == 0) or (isinstance(y, int) and y == 0):
        return 0
    return b.mul(const(x), const(y))


def udiv(b: ir.IRBuilder, x: Int, y: int) -> Int:
    if isinstance(x, int):
        return x // y
    return x if y == 1 else b.udiv(x, I64(y))


def urem(b: ir.IRBuilder, x: Int, y: int) -> Int:
    if isinstance(x, int):
        return x % y
    return 0 if y == 1 else b.urem(x, I64(y))


def select(b: ir.IRBuilder, cond, x: Int, y: Int) -> Int:
    return b.select(cond, const(x), const(y))


def clamp(b: ir.IRBuilder, x: Int, lo: int, hi: int) -> Int:
    """min(max(x, lo), hi) for a signed i64 x."""
    if isinstance(x, int):
        return min(max(x, lo), hi)
    x = b.select(b.icmp_signed("<", x, I64(lo)), I64(lo), x)
    return b.select(b.icmp_signed(">", x, I64(hi)), I64(hi), x)


def placed(rank: int, *groups: tuple[Sequence[int], Sequence[Int]]) -> list[Int]:
    """An index of `rank` coordinates from values given per group of dimensions (reduced
    and kept dims of a reduce, window and scatter dims of an update...); others are 0."""
    coords: list[Int] = [0] * rank
    for dims, values in groups:
        for d, v in zip(dims, values):
            coords[d] = v
    return coords


def linearize(b: ir.IRBuilder, values: Sequence[Int], dims: Sequence[int]) -> Int:
    acc: Int = 0
    for v, n in zip(values, dims):
        acc = add(b, mul(b, acc, n), v)
    return acc


def delinearize(b: ir.IRBuilder, linear: Int, dims: Sequence[int]) -> list[Int]:
    """Coordinates of a linear position; the outermost non-unit dimension takes what is
    left without a remainder (the position is in range)."""
    first = next((d for d, n in enumerate(dims) if n != 1), len(dims))
    out: list[Int] = [0] * len(dims)
    for d in range(len(dims) - 1, first, -1):
        if dims[d] != 1:
            out[d] = urem(b, linear, dims[d])
            linear = udiv(b, linear, dims[d])
    if first < len(dims):
        out[first] = linear
    return out


def _value_key(v: Int):
    if isinstance(v, int):
        return v
    if isinstance(v, ir.Constant):
        return ("c", v.constant)
    return id(v)


class Index:
    """An element of an array with `dims`: coordinates, a linear position, or a recipe for
    either (a callable run at most once, at the builder's current position)."""
    __slots__ = ("dims", "_values", "_linear", "_make_values", "_make_linear")

    def __init__(self, dims: Sequence[int], values: Sequence[Int] | None = None,
                 linear: Int | None = None, make_values: Callable | None = None,
                 make_linear: Callable | None = None):
        self.dims = tuple(dims)
        self._values = list(values) if values is not None else None
        self._linear = linear
        self._make_values = make_values
        self._make_linear = make_linear

    def values(self, b: ir.IRBuilder) -> list[Int]:
        if self._values is None:
            if self._make_values is not None:
                self._values = list(self._make_values())
            else:
                self._values = delinearize(b, self.linear(b), self.dims)
        return self._values

    def linear(self, b: ir.IRBuilder) -> Int:
        if self._linear is None:
            if self._make_linear is not None:
                self._linear = self._make_linear()
            else:
                self._linear = linearize(b, self.values(b), self.dims)
        return self._linear

    def key(self) -> tuple:
        """Identity of the index for value caching: equal coordinates, or an equal linear
        position, or this very object. Ids are only meaningful while the objects live, so
        the cache keeps the index (and through it its values) alive."""
        if self._values is not None:
            return ("v",) + tuple(_value_key(v) for v in self._values)
        if self._linear is not None:
            return ("l", _value_key(self._linear))
        return ("o", id(self))

    @staticmethod
    def scalar() -> Index:
        return Index((), values=[], linear=0)


def reshape_index(b: ir.IRBuilder, out: Index, in_dims: Sequence[int]) -> Index:
    """The operand index of a row-major reshape: same linear position; coordinates mapped
    group by group (runs of dimensions whose sizes multiply to the same number), so
    dropping or adding size-1 dimensions costs nothing and only collapsing divides."""
    in_dims = tuple(in_dims)

    def values():
        outs = out.values(b)
        result: list[Int] = []
        for gin, gout in _groups(in_dims, out.dims):
            lin = linearize(b, [outs[j] for j in gout], [out.dims[j] for j in gout])
            result.extend(delinearize(b, lin, [in_dims[i] for i in gin]))
        return result
    return Index(in_dims, make_values=values, make_linear=lambda: out.linear(b))


def _groups(a: tuple[int, ...], c: tuple[int, ...]) -> list[tuple[list[int], list[int]]]:
    """Split two shapes of equal element count into aligned runs of dimensions whose sizes
    multiply to the same number, e.g. (8, 1, 16) and (8, 16): ([0], [0]), ([1, 2], [1])."""
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(a) or j < len(c):
        gi, gj, pa, pc = [], [], 1, 1
        if i < len(a):
            pa, i = a[i], i + 1
            gi.append(i - 1)
        if j < len(c):
            pc, j = c[j], j + 1
            gj.append(j - 1)
        while pa != pc:
            if pa < pc:
                pa, i = pa * a[i], i + 1
                gi.append(i - 1)
            else:
                pc, j = pc * c[j], j + 1
                gj.append(j - 1)
        groups.append((gi, gj))
    return groups


# ----------------------------------------------------------------------------- loops

def _scalar_loop(module: ir.Module) -> ir.values.MDValue:
    """Loop metadata `llvm.loop.vectorize.enable = false`. Outer loops get it: once LLVM has
    fully unrolled a short inner loop it would otherwise vectorize the outer loop across
    rows, which means gathers and scatters, and minutes of compile time on wide vectors."""
    option = module.add_metadata([ir.MetaDataString(module, "llvm.loop.vectorize.enable"),
                                  ir.IntType(1)(0)])
    node = ir.values.MDValue(module, [], name=str(len(module.metadata)))
    node.operands = (node, option)                  # a loop ID refers to itself
    return node


@contextmanager
def for_range(b: ir.IRBuilder, lo: Int, hi: Int, name: str = "i", vectorize: bool = True):
    """`for (i = lo; i < hi; ++i)` in rotated form (guard, then a do-while body), the shape
    LLVM's loop passes expect. Yields the induction variable; the builder ends positioned
    after the loop. Outer loops pass `vectorize=False` (see _scalar_loop)."""
    lo, hi = const(lo), const(hi)
    pre = b.block
    fn = pre.function
    body = fn.append_basic_block(f"{name}.body")
    done = fn.append_basic_block(f"{name}.done")
    b.cbranch(b.icmp_signed("<", lo, hi), body, done)
    b.position_at_end(body)
    iv = b.phi(I64, name=name)
    iv.add_incoming(lo, pre)
    yield iv
    nxt = b.add(iv, I64(1), name=f"{name}.next", flags=("nuw", "nsw"))
    iv.add_incoming(nxt, b.block)
    br = b.cbranch(b.icmp_signed("<", nxt, hi), body, done)
    if not vectorize:
        br.set_metadata("llvm.loop", _scalar_loop(b.module))
    b.position_at_end(done)


@contextmanager
def nest(b: ir.IRBuilder, dims: Sequence[int], name: str = "d"):
    """Nested loops over all of `dims` (outermost first); yields the coordinates."""
    with ranges(b, [(0, n) for n in dims], name) as values:
        yield values


@contextmanager
def ranges(b: ir.IRBuilder, bounds: Sequence[tuple[Int, Int]], name: str = "d"):
    """Nested loops over [lo, hi) per dimension (outermost first; bounds may be computed),
    only the innermost vectorized; yields the coordinates. A range of one known position
    is no loop."""
    values: list[Int] = []
    with _nest(b, list(bounds), values, name):
        yield values


def _one(lo: Int, hi: Int) -> bool:
    return isinstance(lo, int) and isinstance(hi, int) and hi - lo == 1


@contextmanager
def _nest(b, bounds, values, name):
    if not bounds:
        yield
        return
    lo, hi = bounds[0]
    if _one(lo, hi):
        values.append(lo)
        with _nest(b, bounds[1:], values, name):
            yield
        return
    innermost = all(_one(*r) for r in bounds[1:])
    with for_range(b, lo, hi, f"{name}{len(values)}", vectorize=innermost) as iv:
        values.append(iv)
        with _nest(b, bounds[1:], values, name):
            yield


def row_split(dims: Sequence[int]) -> tuple[int, int]:
    """(rows, row length): the outer, parallel extent and the contiguous inner extent of a
    row-major loop over `dims`."""
    if not dims:
        return 1, 1
    return math.prod(dims[:-1]), dims[-1]


def outer_positions(dims: Sequence[int]) -> tuple[int | None, int, int]:
    """(the outermost dimension of other than one position, or None; its size; elements
    per position along it): positions along it are contiguous runs of a row-major array,
    the parts that threads copying or updating it each own."""
    s = next((d for d, n in enumerate(dims) if n != 1), None)
    return (None, 1, 1) if s is None else (s, dims[s], math.prod(dims[s + 1:]))
