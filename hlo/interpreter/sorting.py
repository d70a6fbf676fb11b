"""sort (any number of operands, any comparator) and topk.

A comparator that is one `compare LT|GT` of a parameter pair sorts with numpy's stable
argsort on a key. Any other comparator runs through a bitonic sorting network whose steps
evaluate the comparator on all pairs at once; ties are broken by original position, which
makes the result the stable sort (a valid answer whether or not is_stable is set).
"""
from __future__ import annotations

import numpy as np

from ..errors import HloError
from .apply import apply
from .numerics import total_order_key, widen


def _simple_key(comp, xs):
    """A sort key if the comparator is one LT/GT compare of a parameter pair (p_2k, p_2k+1)
    or (p_2k+1, p_2k); None otherwise."""
    root = comp.root
    if root.opcode != "compare" or root.attrs.get("direction") not in ("LT", "GT"):
        return None
    a, b = root.operands
    if a.opcode != "parameter" or b.opcode != "parameter" or a.parameter_number // 2 != (
            b.parameter_number // 2) or a.parameter_number == b.parameter_number:
        return None
    key = _ordered(widen(xs[a.parameter_number // 2]), root.attrs.get("type") == "TOTALORDER")
    if key is None:
        return None
    descending = (root.attrs["direction"] == "GT") == (a.parameter_number % 2 == 0)
    if descending:      # ~k reverses integer order without overflow; -k is exact for floats
        key = -key if key.dtype.kind == "f" else ~key
    return key


def _ordered(x, total_order: bool):
    """x as an array numpy orders as the comparison would, or None (complex, or NaNs under
    a partial order, where LT is no strict weak order)."""
    if x.dtype.kind == "f":
        if total_order:
            return total_order_key(x)
        return None if np.isnan(x).any() else x
    if x.dtype.kind in "iub":
        return x.astype(np.uint64 if x.dtype == np.uint64 else np.int64)
    return None


def _bitonic_permutation(ev, comp, xs):
    """Sorted order along the last axis of `xs` through a bitonic network."""
    n = xs[0].shape[-1]
    size = 1 << max(n - 1, 0).bit_length()
    pad = [(0, 0)] * (xs[0].ndim - 1) + [(0, size - n)]
    padded = [np.pad(x, pad, mode="edge") if n else x for x in xs]
    perm = np.broadcast_to(np.arange(size), xs[0].shape[:-1] + (size,)).copy()
    positions = np.arange(size)

    def before(i, j):
        """Whether original element i must precede element j (a strict total order)."""
        vi = [np.take_along_axis(p, i, -1) for p in padded]
        vj = [np.take_along_axis(p, j, -1) for p in padded]
        args = [v for pair in zip(vi, vj) for v in pair]
        swapped = [v for pair in zip(vj, vi) for v in pair]
        lt, gt = apply(ev, comp, args)[0], apply(ev, comp, swapped)[0]
        real_i, real_j = i < n, j < n
        tie = ~lt & ~gt
        return np.where(real_i & real_j, lt | (tie & (i < j)), real_i | (~real_j & (i < j)))

    k = 2
    while k <= size:
        j = k // 2
        while j >= 1:
            low = positions[(positions & j) == 0]
            high = low | j
            ascending = (low & k) == 0
            a, b = perm[..., low], perm[..., high]
            swap = np.where(ascending, before(b, a), before(a, b))
            perm[..., low], perm[..., high] = np.where(swap, b, a), np.where(swap, a, b)
            j //= 2
        k *= 2
    return perm[..., :n]


def sort_permutation(ev, comp, xs) -> np.ndarray:
    """The stable order of `xs` (operands sorted along their last axis) under `comp`."""
    key = _simple_key(comp, xs)
    if key is not None:
        return np.argsort(key, axis=-1, kind="stable")
    return _bitonic_permutation(ev, comp, xs)


def sort(inst, args, ev):
    dim = inst.attrs["dimensions"][0]
    xs = [np.moveaxis(x, dim, -1) for x in args]
    perm = sort_permutation(ev, inst.attrs["to_apply"], xs)
    outs = [np.moveaxis(np.take_along_axis(x, perm, -1), -1, dim) for x in xs]
    return outs[0] if len(outs) == 1 else tuple(outs)


def topk_custom_call(inst, args, ev):
    """XLA:CPU's `TopK` custom call: the first k of a stable sort of the last dimension
    under the called comparator, with their indices. The comparator is the one of the sort
    the call replaced: of the values alone (2 parameters), or of values and their indices
    (4 parameters, as jax emits it)."""
    (x,) = args
    k = inst.shape.elements[0].dims[-1]
    comp = inst.attrs["called_computations"][0]
    operands = len(comp.parameters) // 2
    if len(comp.parameters) not in (2, 4):
        raise HloError(f"the TopK comparator {comp.name} takes {len(comp.parameters)} "
                       "parameters, not 2 (values) or 4 (values and indices)")
    indices = np.broadcast_to(np.arange(x.shape[-1], dtype=np.int32), x.shape)
    perm = sort_permutation(ev, comp, [x, indices][:operands])[..., :k]
    return np.take_along_axis(x, perm, -1), perm.astype(np.int32)


def topk(inst, args, ev):
    """The k largest (or smallest) along the last dimension, in order; ties keep the lower
    index first; floats order by totalOrder (NaN above +inf)."""
    x = args[0]
    k = inst.attrs["k"]
    largest = inst.attrs.get("largest", True)
    key = _ordered(widen(x), total_order=True)
    order = np.argsort(~key if largest else key, axis=-1, kind="stable")[..., :k]
    return np.take_along_axis(x, order, -1), order.astype(np.int32)


IMPLS = {"sort": sort, "topk": topk}
