"""Ops XLA lowers to libraries or expands into simpler HLO before code generation: fft,
cholesky, triangular-solve and the batch-norm family. Computed in double precision through
numpy and rounded once into the result type."""
from __future__ import annotations

import numpy as np

from .numerics import cast_result, precise


def fft(inst, args, ev):
    x = precise(args[0])
    length = tuple(inst.attrs["fft_length"])
    axes = tuple(range(x.ndim - len(length), x.ndim))
    kind = inst.attrs["fft_type"]
    if kind == "FFT":
        out = np.fft.fftn(x, axes=axes)
    elif kind == "IFFT":
        out = np.fft.ifftn(x, axes=axes)
    elif kind == "RFFT":
        out = np.fft.rfftn(x, s=length, axes=axes)
    else:
        out = np.fft.irfftn(x, s=length, axes=axes)
    return cast_result(out, inst.shape.element_type)


def _triangle(a: np.ndarray, lower: bool) -> np.ndarray:
    return np.tril(a) if lower else np.triu(a)


def cholesky(inst, args, ev):
    """Reads only the requested triangle; a matrix that is not positive definite gives NaN."""
    a = precise(args[0])
    lower = inst.attrs.get("lower", False)
    t = _triangle(a, lower)
    diag = np.diagonal(t, axis1=-2, axis2=-1)
    sym = t + np.conj(np.swapaxes(t, -1, -2)) - np.eye(a.shape[-1]) * diag[..., None, :]
    out = np.full(a.shape, np.nan, a.dtype)
    for index in np.ndindex(*a.shape[:-2]):
        try:
            factor = np.linalg.cholesky(sym[index])
        except np.linalg.LinAlgError:
            continue
        out[index] = factor if lower else np.conj(factor.T)
    return cast_result(out, inst.shape.element_type)


def triangular_solve(inst, args, ev):
    """Solves op(a) x = b (left_side) or x op(a) = b, op per transpose_a."""
    a, b = precise(args[0]), precise(args[1])
    attrs = inst.attrs
    t = _triangle(a, attrs.get("lower", False))
    if attrs.get("unit_diagonal", False):
        n = a.shape[-1]
        t = t - t * np.eye(n) + np.eye(n)
    mode = attrs.get("transpose_a", "NO_TRANSPOSE")
    if mode in ("TRANSPOSE", "ADJOINT"):
        t = np.swapaxes(t, -1, -2)
        if mode == "ADJOINT":
            t = np.conj(t)
    if attrs.get("left_side", False):
        x = np.linalg.solve(t, b)
    else:                                  # x t = b  <=>  t^T x^T = b^T
        x = np.swapaxes(np.linalg.solve(np.swapaxes(t, -1, -2), np.swapaxes(b, -1, -2)), -1, -2)
    return cast_result(x, inst.shape.element_type)


def _feature_view(inst, x):
    """Reduction axes (all but feature_index) and a reshape putting features on that axis."""
    fi = inst.attrs["feature_index"]
    axes = tuple(d for d in range(x.ndim) if d != fi)
    shape = [1] * x.ndim
    shape[fi] = x.shape[fi]
    return axes, lambda v: v.reshape(shape)


def batch_norm_inference(inst, args, ev):
    x, scale, offset, mean, var = (precise(a) for a in args)
    _, f = _feature_view(inst, x)
    eps = inst.attrs["epsilon"]
    y = f(scale) * (x - f(mean)) / np.sqrt(f(var) + eps) + f(offset)
    return cast_result(y, inst.shape.element_type)


def batch_norm_training(inst, args, ev):
    """Normalizes with the batch's mean and biased variance; returns them too."""
    x, scale, offset = (precise(a) for a in args)
    axes, f = _feature_view(inst, x)
    mean = x.mean(axis=axes)
    var = ((x - f(mean)) ** 2).mean(axis=axes)
    y = f(scale) * (x - f(mean)) / np.sqrt(f(var) + inst.attrs["epsilon"]) + f(offset)
    t = inst.shape.elements[0].element_type
    return cast_result(y, t), cast_result(mean, t), cast_result(var, t)


def batch_norm_grad(inst, args, ev):
    """Gradients w.r.t. operand, scale and offset, per XLA's operation semantics."""
    x, scale, mean, var, dy = (precise(a) for a in args)
    axes, f = _feature_view(inst, x)
    rstd = 1 / np.sqrt(f(var) + inst.attrs["epsilon"])
    centered = x - f(mean)
    grad_offset = dy.sum(axis=axes)
    grad_scale = (dy * centered * rstd).sum(axis=axes)
    grad_x = f(scale) * rstd * (dy - f(dy.mean(axis=axes))
                                - centered * rstd ** 2 * f((dy * centered).mean(axis=axes)))
    t = inst.shape.elements[0].element_type
    return cast_result(grad_x, t), cast_result(grad_scale, t), cast_result(grad_offset, t)


IMPLS = {"fft": fft, "cholesky": cholesky, "triangular-solve": triangular_solve,
         "batch-norm-inference": batch_norm_inference,
         "batch-norm-training": batch_norm_training, "batch-norm-grad": batch_norm_grad}
