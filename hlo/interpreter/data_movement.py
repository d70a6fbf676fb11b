"""Ops that move elements without arithmetic: numpy views and copies.

Results may be read-only views (broadcast_to, transpose); values are never mutated, so that
is safe and keeps big broadcasts cheap.
"""
from __future__ import annotations

import numpy as np

from ..errors import HloError
from ..ir import ELIDED
from ..shape import Shape, default_layout
from .evaluator import TOKEN
from .numerics import cast_result, np_dtype


def constant(inst, args, ev):
    key = ("constant", id(inst))
    value = ev.cache.get(key)
    if value is None:
        value = ev.cache[key] = _literal(inst.literal, inst.shape)
    return value


def _literal(literal, shape):
    if shape.is_tuple:
        if not isinstance(literal, tuple) or len(literal) != len(shape.elements):
            raise HloError(f"constant does not match tuple shape {shape.to_text(False)}")
        return tuple(_literal(v, s) for v, s in zip(literal, shape.elements))
    if shape.dtype.numpy is None:
        return TOKEN
    if literal is ELIDED or literal is None:
        return np.zeros(shape.dims, np_dtype(shape.element_type))
    value = np.asarray(literal)
    if value.shape != shape.dims:
        raise HloError(f"constant has {list(value.shape)} elements per dimension, shape is "
                       f"{shape.to_text(False)}")
    return cast_result(value, shape.element_type)


def broadcast(inst, args, ev):
    x = args[0]
    dims = tuple(inst.attrs.get("dimensions", ()))
    out = inst.shape.dims
    order = sorted(range(len(dims)), key=lambda i: dims[i])
    x = np.transpose(x, order) if order != list(range(len(dims))) else x
    expanded = [1] * len(out)
    for i in order:
        expanded[dims[i]] = out[dims[i]]
    return np.broadcast_to(x.reshape(expanded), out)


def reshape(inst, args, ev):
    return args[0].reshape(inst.shape.dims)


def transpose(inst, args, ev):
    return np.transpose(args[0], inst.attrs["dimensions"])


def slice_(inst, args, ev):
    return args[0][tuple(slice(a, b, s) for a, b, s in inst.attrs["slice"])]


def _starts(indices, operand_dims, sizes) -> list[int]:
    """Start indices clamped so the window fits, as XLA does for dynamic (update) slices."""
    if len(indices) == 1 and indices[0].ndim == 1:          # legacy single-vector form
        indices = list(indices[0])
    return [int(min(max(int(i), 0), n - s)) for i, n, s in zip(indices, operand_dims, sizes)]


def dynamic_slice(inst, args, ev):
    x = args[0]
    sizes = inst.attrs["dynamic_slice_sizes"]
    starts = _starts(args[1:], x.shape, sizes)
    return x[tuple(slice(a, a + s) for a, s in zip(starts, sizes))]


def dynamic_update_slice(inst, args, ev):
    x, update = args[0], args[1]
    starts = _starts(args[2:], x.shape, update.shape)
    out = x.copy()
    out[tuple(slice(a, a + s) for a, s in zip(starts, update.shape))] = update
    return out


def concatenate(inst, args, ev):
    return np.concatenate(args, axis=inst.attrs["dimensions"][0])


def pad(inst, args, ev):
    return np.asarray(pad_array(args[0], args[1], inst.attrs["padding"]))


def pad_array(x: np.ndarray, value: np.ndarray, config) -> np.ndarray:
    """Interior padding first, then edges; a negative edge crops what interior padding made."""
    grown = [max(lo, 0) + max(hi, 0) + n + max(n - 1, 0) * interior
             for n, (lo, hi, interior) in zip(x.shape, config)]
    out = np.full(grown, value, x.dtype)
    out[tuple(slice(max(lo, 0), max(lo, 0) + (n - 1) * (interior + 1) + 1 if n else 0,
                    interior + 1)
              for n, (lo, hi, interior) in zip(x.shape, config))] = x
    return out[tuple(slice(-min(lo, 0), g + min(hi, 0))
                     for g, (lo, hi, _) in zip(grown, config))]


def reverse(inst, args, ev):
    return np.flip(args[0], axis=tuple(inst.attrs["dimensions"]))


def iota(inst, args, ev):
    shape = inst.shape
    d = inst.attrs["iota_dimension"]
    line = np.arange(shape.dims[d], dtype=np.int64)
    expanded = [1] * shape.rank
    expanded[d] = shape.dims[d]
    dtype = shape.dtype
    if dtype.kind == "float" and dtype.bits < 32:
        line = line.astype(np.float32)     # round once, from the exact f32 value
    return np.broadcast_to(cast_result(line.reshape(expanded), shape.element_type), shape.dims)


def copy(inst, args, ev):
    return args[0]


def bitcast(inst, args, ev):
    """Reinterpret the operand's physical (layout-ordered) elements with the result's
    layout; with default layouts this is a row-major reshape."""
    x = args[0]
    target = inst.shape
    physical = np.transpose(x, _major_to_minor(inst.operands[0].shape)).reshape(-1)
    if physical.dtype != target.dtype.numpy:
        physical = physical.view(target.dtype.numpy)
    m2m = _major_to_minor(target)
    laid_out = physical.reshape([target.dims[d] for d in m2m])
    return np.transpose(laid_out, np.argsort(m2m))


def _major_to_minor(shape: Shape) -> list[int]:
    layout = shape.layout or default_layout(shape.rank)
    return list(reversed(layout.minor_to_major))


def tuple_(inst, args, ev):
    return tuple(args)


def get_tuple_element(inst, args, ev):
    return args[0][inst.attrs["index"]]


def first_operand(inst, args, ev):
    """opt-barrier, add-dependency, domain: the value passes through unchanged."""
    return args[0]


def after_all(inst, args, ev):
    return TOKEN


def zero_id(inst, args, ev):
    """replica-id and partition-id on the single device the interpreter models."""
    return np.zeros((), np.uint32)


def get_dimension_size(inst, args, ev):
    return np.array(args[0].shape[inst.attrs["dimensions"][0]], np.int32)


IMPLS = {
    "constant": constant, "broadcast": broadcast, "reshape": reshape,
    "transpose": transpose, "slice": slice_, "dynamic-slice": dynamic_slice,
    "dynamic-update-slice": dynamic_update_slice, "concatenate": concatenate, "pad": pad,
    "reverse": reverse, "iota": iota, "copy": copy, "bitcast": bitcast, "tuple": tuple_,
    "get-tuple-element": get_tuple_element, "opt-barrier": first_operand,
    "add-dependency": first_operand, "domain": first_operand, "after-all": after_all,
    "replica-id": zero_id, "partition-id": zero_id, "get-dimension-size": get_dimension_size,
}
