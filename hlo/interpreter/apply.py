"""Scalar computations (reducers, comparators, map and scatter functions) applied to arrays.

Three speeds, one meaning:
  * a reducer that is just `op(p_i, p_{N+i})` per output (add, max, and, ...) becomes numpy
    ufuncs, which callers use for whole-array reductions;
  * a computation built only from elementwise ops runs once, "batched": every scalar in it
    stands for an array of the same shape;
  * anything else (calls, loops inside a reducer) runs once per element.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..ir import Computation
from ..ops import TUPLE_OPS, is_elementwise
from .numerics import maximum, minimum, np_dtype

# XLA opcodes whose numpy ufunc has exactly XLA's semantics for every type it accepts
# (pred add = or, pred multiply = and, ints wrap, max/min propagate NaN).
UFUNCS = {"add": np.add, "multiply": np.multiply, "maximum": maximum,
          "minimum": minimum, "and": np.bitwise_and, "or": np.bitwise_or,
          "xor": np.bitwise_xor}

_BATCHABLE_OTHER = {"parameter", "constant"} | TUPLE_OPS

# Data movement on scalars moves nothing: in a batched run these ops keep each element where
# it is (bitcast between same-width scalars reinterprets each element's bits).
SCALAR_DATA_MOVEMENT = {
    "reshape": lambda inst, args, ev: args[0],
    "broadcast": lambda inst, args, ev: args[0],
    "copy": lambda inst, args, ev: args[0],
    "bitcast": lambda inst, args, ev: np.ascontiguousarray(args[0]).view(
        inst.shape.dtype.numpy),
}


def _all_scalar(comp: Computation) -> bool:
    return all(not p.shape.is_tuple and p.shape.rank == 0 for p in comp.parameters)


def reducer_ufuncs(ev, comp: Computation) -> list[np.ufunc] | None:
    """Per output i, the ufunc u with root_i = u(param_i, param_{N+i}); None if the reducer
    is anything else."""
    key = ("ufuncs", id(comp))
    if key not in ev.cache:
        ev.cache[key] = _reducer_ufuncs(comp)
    return ev.cache[key]


def _reducer_ufuncs(comp: Computation) -> list[np.ufunc] | None:
    params = comp.parameters
    if len(params) % 2 or not _all_scalar(comp):
        return None
    n = len(params) // 2
    roots = comp.root.operands if comp.root.opcode == "tuple" else [comp.root]
    if len(roots) != n or (n > 1 and comp.root.opcode != "tuple"):
        return None
    out = []
    for i, r in enumerate(roots):
        pair = {id(params[i]), id(params[n + i])}
        if (r.opcode not in UFUNCS or len(r.operands) != 2 or r.shape.is_tuple
                or {id(o) for o in r.operands} != pair or r.shape.rank != 0
                or r.shape.element_type != params[i].shape.element_type):
            return None
        out.append(UFUNCS[r.opcode])
    return out


def is_batchable(ev, comp: Computation) -> bool:
    """True if every instruction is elementwise on scalars, so arrays can stand in."""
    key = ("batchable", id(comp))
    if key not in ev.cache:
        ev.cache[key] = _all_scalar(comp) and all(
            (is_elementwise(i.opcode) or i.opcode in _BATCHABLE_OTHER
             or i.opcode in SCALAR_DATA_MOVEMENT)
            and all(s.rank == 0 for s in (i.shape.leaves() if i.shape.is_tuple else [i.shape]))
            for i in comp.post_order())
    return ev.cache[key]


def apply(ev, comp: Computation, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    """comp's outputs (a list, one per root tuple element) for arguments that broadcast
    together; element [i] of each output is comp applied to element [i] of the arguments."""
    shape = np.broadcast_shapes(*(a.shape for a in args))
    root = comp.root.shape
    leaves = root.leaves() if root.is_tuple else [root]
    if is_batchable(ev, comp):
        result = ev.call(comp, list(args), batched=True)
        result = list(result) if isinstance(result, tuple) else [result]
        return [np.broadcast_to(r, shape) for r in result]
    outs = [np.empty(shape, np_dtype(s.element_type)) for s in leaves]
    args = [np.broadcast_to(a, shape) for a in args]
    for index in np.ndindex(*shape):
        result = ev.call(comp, [np.asarray(a[index]) for a in args])
        for out, r in zip(outs, result if isinstance(result, tuple) else (result,)):
            out[index] = r
    return outs


def _overwrites(comp: Computation) -> bool:
    """True if comp returns its second half of parameters unchanged (x.at[i].set(y))."""
    n = len(comp.parameters) // 2
    roots = comp.root.operands if comp.root.opcode == "tuple" and n > 1 else [comp.root]
    return len(roots) == n and all(r.opcode == "parameter" and r.parameter_number == n + i
                                   for i, r in enumerate(roots))


def combine_at(ev, comp: Computation, outs: list[np.ndarray], index: np.ndarray,
               values: list[np.ndarray]) -> None:
    """In place, in order: outs[k][index[j]] = comp(outs..., values...)[k] for each j.

    Repeated indices combine sequentially, as XLA's scatter does; `outs` are flat arrays."""
    if index.size == 0:
        return
    ufuncs = reducer_ufuncs(ev, comp)
    if ufuncs is not None:
        for u, out, v in zip(ufuncs, outs, values):
            u.at(out, index, v)
        return
    if _overwrites(comp):                # the last write to each position wins
        last = len(index) - 1 - np.unique(index[::-1], return_index=True)[1]
        for out, v in zip(outs, values):
            out[index[last]] = v[last]
        return
    # Round r applies every position's r-th update; within a round positions are distinct.
    order = np.argsort(index, kind="stable")
    ranked = index[order]
    first = np.r_[True, ranked[1:] != ranked[:-1]]
    run_start = np.maximum.accumulate(np.where(first, np.arange(len(index)), 0))
    rank = np.empty(len(index), np.int64)
    rank[order] = np.arange(len(index)) - run_start
    for r in range(int(rank.max()) + 1):
        pick = rank == r
        where = index[pick]
        new = apply(ev, comp, [out[where] for out in outs] + [v[pick] for v in values])
        for out, n in zip(outs, new):
            out[where] = n
