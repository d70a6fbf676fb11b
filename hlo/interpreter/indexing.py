"""gather and scatter: XLA's dimension-number index arithmetic, vectorized.

Both ops pair a "batch" of index vectors (the indices array minus index_vector_dim) with a
window of operand elements. Here every (batch position, window offset) pair becomes one
operand coordinate through numpy broadcasting, so neither op loops in Python per element.
"""
from __future__ import annotations

import numpy as np

from .apply import combine_at
from .numerics import widen


def _index_vectors(indices: np.ndarray, index_vector_dim: int) -> np.ndarray:
    """Indices as batch_shape + (K,): index_vector_dim moved last (or appended, size 1)."""
    if index_vector_dim == indices.ndim:
        indices = indices[..., None]
    return np.moveaxis(indices, index_vector_dim, -1)


def _as_int64(values: np.ndarray, high: int | None = None) -> np.ndarray:
    """Index values as int64, clamped to [0, high] when `high` is given; unsigned values
    beyond int64's range saturate instead of wrapping negative."""
    values = widen(values)
    if values.dtype.kind == "u":
        values = np.minimum(values, np.iinfo(np.int64).max if high is None else high)
    values = values.astype(np.int64)
    return values if high is None else np.clip(values, 0, high)


def _batch_position(indices_dim: int, index_vector_dim: int) -> int:
    """Where an indices dimension lands among the batch dims (index_vector_dim removed)."""
    return indices_dim - (indices_dim > index_vector_dim)


def _starts(vectors, operand_shape, start_index_map, operand_batching, indices_batching,
            index_vector_dim, clamp_to=None) -> np.ndarray:
    """Window start per operand dimension: batch_shape + (operand rank,), int64."""
    batch_shape = vectors.shape[:-1]
    starts = np.zeros(batch_shape + (len(operand_shape),), np.int64)
    for k, d in enumerate(start_index_map):
        starts[..., d] = _as_int64(vectors[..., k], None if clamp_to is None else clamp_to[d])
    for od, idd in zip(operand_batching, indices_batching):
        axis = _batch_position(idd, index_vector_dim)
        shape = [1] * len(batch_shape)
        shape[axis] = batch_shape[axis]
        starts[..., od] = np.arange(batch_shape[axis]).reshape(shape)
    return starts


def _coordinates(starts: np.ndarray, window: list[int]) -> list[np.ndarray]:
    """Per operand dim, start + offset broadcast to batch_shape + window."""
    nb, rank = starts.ndim - 1, len(window)
    coords = []
    for d in range(rank):
        offset = np.arange(window[d]).reshape([1] * nb + [window[d] if i == d else 1
                                                          for i in range(rank)])
        coords.append(starts[..., d].reshape(starts.shape[:-1] + (1,) * rank) + offset)
    return coords


def gather(inst, args, ev):
    operand, indices = args
    a = inst.attrs
    ivd = a["index_vector_dim"]
    sizes = list(a["slice_sizes"])
    collapsed = set(a.get("collapsed_slice_dims", ())) | set(a.get("operand_batching_dims", ()))
    vectors = _index_vectors(indices, ivd)
    starts = _starts(vectors, operand.shape, a["start_index_map"],
                     a.get("operand_batching_dims", ()), a.get("start_indices_batching_dims", ()),
                     ivd, clamp_to=[n - s for n, s in zip(operand.shape, sizes)])
    picked = operand[tuple(_coordinates(starts, sizes))]
    batch_shape = vectors.shape[:-1]
    kept = [s for d, s in enumerate(sizes) if d not in collapsed]
    picked = picked.reshape(batch_shape + tuple(kept))
    # Output dims listed in offset_dims take the window dims in order; the rest the batch.
    offset_dims = set(a.get("offset_dims", ()))
    nb, perm, bi, oi = len(batch_shape), [], 0, 0
    for i in range(nb + len(kept)):
        if i in offset_dims:
            perm.append(nb + oi)
            oi += 1
        else:
            perm.append(bi)
            bi += 1
    return np.transpose(picked, perm)


def scatter(inst, args, ev):
    """Updates whose window would leave the operand are skipped whole, as XLA's CPU backend
    does; repeated positions combine in update order."""
    n = len(args) // 2
    inputs, indices, updates = args[:n], args[n], args[n + 1:]
    if inputs[0].size == 0:                 # no position to update: every window is out
        return inputs[0].copy() if n == 1 else tuple(x.copy() for x in inputs)
    a = inst.attrs
    ivd = a["index_vector_dim"]
    window_dims = list(a.get("update_window_dims", ()))
    inserted = set(a.get("inserted_window_dims", ())) | set(a.get("input_batching_dims", ()))
    shape = inputs[0].shape
    vectors = _index_vectors(indices, ivd)
    starts = _starts(vectors, shape, a["scatter_dims_to_operand_dims"],
                     a.get("input_batching_dims", ()), a.get("scatter_indices_batching_dims", ()),
                     ivd)
    # The update window per operand dim: 1 for inserted/batching dims, else the next
    # update window dimension's size.
    upd = updates[0]
    window_sizes = iter(upd.shape[d] for d in window_dims)
    window = [1 if d in inserted else next(window_sizes) for d in range(len(shape))]
    in_bounds = np.all((starts >= 0) & (starts <= np.array(shape) - np.array(window)), axis=-1)
    coords = _coordinates(starts, window)
    flat = np.ravel_multi_index(tuple(np.clip(c, 0, max(s - 1, 0)) for c, s in
                                      zip(coords, shape)), shape) if shape else np.zeros(
        coords[0].shape if coords else starts.shape[:-1], np.int64)
    valid = np.broadcast_to(in_bounds.reshape(in_bounds.shape + (1,) * len(shape)), flat.shape)
    # Reorder updates to batch dims first, then window dims, matching `flat`.
    scatter_dims = [d for d in range(upd.ndim) if d not in window_dims]
    values = [np.transpose(u, scatter_dims + window_dims).reshape(flat.shape) for u in updates]
    outs = [x.copy().reshape(-1) for x in inputs]
    combine_at(ev, a["to_apply"], outs, flat[valid], [v[valid] for v in values])
    results = [o.reshape(shape) for o in outs]
    return results[0] if n == 1 else tuple(results)
IMPLS = {"gather": gather, "scatter": scatter}
