"""reduce, reduce-window and select-and-scatter, with reducer computations.

Accumulation, when the reducer is a plain ufunc (add, max, ...): narrow floats (bf16, f16,
f8) accumulate in f32 and round once at the end; f32 and f64 accumulate in their own type,
with numpy's pairwise summation along one contiguous axis. XLA leaves the order of a
reduction open, and these are its most exact readings: XLA's CPU backend itself reassociates
a bf16 sum into short runs (a bf16 sum of 100000 ones gives bf16(100000), where a literal
left fold in bf16 stalls at 256), so it lands within rounding of the f32-accumulated value.
Generic reducers run in the element type, exactly as their computation says.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from ..attributes import Window
from .apply import apply, combine_at, reducer_ufuncs
from .numerics import widen


def reduce(inst, args, ev):
    n = len(args) // 2
    inputs, inits = args[:n], args[n:]
    dims = tuple(inst.attrs["dimensions"])
    kept = [d for d in range(inputs[0].ndim) if d not in dims]
    # Reduced dims last and merged: one contiguous axis of length K.
    out_shape = tuple(inputs[0].shape[d] for d in kept)
    k = math.prod(inputs[0].shape[d] for d in dims)
    xs = [np.transpose(x, kept + list(dims)).reshape(out_shape + (k,)) for x in inputs]
    comp = inst.attrs["to_apply"]
    ufuncs = reducer_ufuncs(ev, comp)
    if ufuncs is not None:
        results = [_ufunc_reduce(u, x, init) for u, x, init in zip(ufuncs, xs, inits)]
    else:
        results = _tree_reduce(ev, comp, xs, inits, out_shape)
    results = [np.asarray(r).astype(init.dtype, copy=False) for r, init in zip(results, inits)]
    return _as_declared(inst, results)


def _ufunc_reduce(ufunc, x, init):
    if x.shape[-1] == 0:
        return np.broadcast_to(init, x.shape[:-1]).astype(init.dtype)
    wide = widen(x)
    # The init value seeds the reduction (numpy's own seed, +0 for add, would turn an
    # all-(-0) sum into +0).
    return ufunc.reduce(wide, axis=-1, dtype=wide.dtype,
                        initial=widen(init).item()).astype(x.dtype)


def _tree_reduce(ev, comp, xs, inits, out_shape):
    """Pairwise combination (log K applications of the reducer), then the init value.
    XLA leaves the order of a reduction unspecified; pairs keep it fast and accurate."""
    while xs[0].shape[-1] > 1:
        k = xs[0].shape[-1]
        even = k - k % 2
        combined = apply(ev, comp, [x[..., 0:even:2] for x in xs] + [x[..., 1:even:2] for x in xs])
        xs = [np.concatenate([c, x[..., even:]], axis=-1) for c, x in zip(combined, xs)]
    if xs[0].shape[-1] == 0:
        return [np.broadcast_to(i, out_shape) for i in inits]
    return apply(ev, comp, [np.broadcast_to(i, out_shape) for i in inits]
                 + [x[..., 0] for x in xs])


def _window_positions(x_shape, window):
    """Yields (coords, valid, out_dims) per window offset in row-major order: for every output
    element, the input coordinates that offset reads, and whether they fall on real input
    (not padding or a base-dilation hole). coords broadcast to the output shape."""
    dims = list(zip(x_shape, window.size, window.stride, window.pad, window.lhs_dilate,
                    window.rhs_dilate))
    outs = []
    for n, size, stride, (lo, hi), base, dil in dims:
        padded = (0 if n == 0 else (n - 1) * base + 1) + lo + hi
        eff = (size - 1) * dil + 1
        outs.append(0 if padded < eff else (padded - eff) // stride + 1)
    rank = len(x_shape)
    for offset in itertools.product(*(range(s) for s in window.size)):
        coords, valid = [], np.ones(outs, bool)
        for d, ((n, _, stride, (lo, _), base, dil), k) in enumerate(zip(dims, offset)):
            # position in the dilated, padded input; the input index is (pos - lo) / base
            pos = np.arange(outs[d]) * stride + k * dil - lo
            ok = (pos >= 0) & (pos % base == 0) & (pos // base < n)
            shape = [1] * rank
            shape[d] = outs[d]
            coords.append(np.where(ok, pos // base, 0).reshape(shape))
            valid = valid & ok.reshape(shape)
        yield tuple(coords), valid, outs


def reduce_window(inst, args, ev):
    """Folds the window in row-major order; padding and dilation holes are skipped."""
    n = len(args) // 2
    inputs, inits = args[:n], args[n:]
    window = inst.attrs.get("window") or Window.default(inputs[0].ndim)
    comp = inst.attrs["to_apply"]
    ufuncs = reducer_ufuncs(ev, comp)
    accs = None
    for coords, valid, outs in _window_positions(inputs[0].shape, window):
        if accs is None:
            accs = [np.broadcast_to(widen(i) if ufuncs else i, outs) for i in inits]
        # an empty input is all padding: nothing to read (valid is false everywhere)
        xs = [x[coords] if x.size else np.zeros(outs, x.dtype) for x in inputs]
        if ufuncs is not None:
            new = [u(acc, widen(x)) for u, acc, x in zip(ufuncs, accs, xs)]
        else:
            new = apply(ev, comp, accs + xs)
        accs = [np.where(valid, b, acc) for b, acc in zip(new, accs)]
    results = [acc.astype(x.dtype) for acc, x in zip(accs, inputs)]
    return _as_declared(inst, results)


def _as_declared(inst, results: list[np.ndarray]):
    """A tuple when the instruction's shape is one: always for several results, and for
    one when the reducer returns a 1-tuple (XLA's reading of such a reducer)."""
    return tuple(results) if inst.shape.is_tuple else results[0]


def select_and_scatter(inst, args, ev):
    """Per window, the element `select` prefers (first wins unless select(current, next) is
    false); the source value is scattered onto it with `scatter`. Padding is never selected."""
    operand, source, init = args
    if operand.size == 0:               # no element to select: nothing is scattered
        return np.broadcast_to(init, operand.shape).copy()
    window = inst.attrs.get("window") or Window.default(operand.ndim)
    select = inst.attrs["select"]
    best = position = have = None
    flat_index = np.arange(operand.size).reshape(operand.shape)
    for coords, valid, outs in _window_positions(operand.shape, window):
        x, pos = operand[coords], flat_index[coords]
        if best is None:
            best, position, have = x, pos, valid
            continue
        keep = apply(ev, select, [best, x])[0]
        take = valid & (~have | ~keep)
        best, position = np.where(take, x, best), np.where(take, pos, position)
        have = have | valid
    out = np.broadcast_to(init, operand.shape).copy().reshape(-1)
    if best is not None:
        combine_at(ev, inst.attrs["scatter"], [out], position[have].reshape(-1),
                   [np.broadcast_to(source, have.shape)[have].reshape(-1)])
    return out.reshape(operand.shape)


IMPLS = {"reduce": reduce, "reduce-window": reduce_window,
         "select-and-scatter": select_and_scatter}
