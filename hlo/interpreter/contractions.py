"""dot and convolution as batched matrix products (BLAS through np.matmul).

Both compute in one "accumulation type" and convert once into the result type as XLA's
`convert` does: narrow floats accumulate in f32 (as XLA's CPU backend does), f32 in f32, f64
in f64, integers in the wider of operand and result type (so s8 x s8 -> s32 wraps at 32
bits), pred as or-of-ands. A float sum into an integer result saturates and sends NaN to 0
(XLA:CPU: 128 ones dotted in f32 into s8 give 127); an integer sum into a narrower integer
wraps (s32 -> s8: 128 gives -128). operand_precision and algorithm attributes are accepted
and do not change the arithmetic.
"""
from __future__ import annotations

import math

import numpy as np

from ..attributes import Window
from ..dot_dims import dot_dims
from ..dtypes import accumulation_type, from_numpy
from ..errors import UnsupportedError
from .data_movement import pad_array
from .numerics import convert


def _accumulation_type(inst, lhs: np.ndarray, rhs: np.ndarray) -> np.dtype:
    return accumulation_type(from_numpy(lhs.dtype), from_numpy(rhs.dtype),
                             inst.shape.dtype).numpy


def dot(inst, args, ev):
    if len(args) != 2:
        raise UnsupportedError("dot with sparsity metadata operands is not supported")
    lhs, rhs = args
    (lb, lc, lf), (rb, rc, rf) = dot_dims(inst.attrs, lhs.ndim, rhs.ndim)
    acc = _accumulation_type(inst, lhs, rhs)
    batch = [lhs.shape[d] for d in lb]
    m, k = math.prod(lhs.shape[d] for d in lf), math.prod(lhs.shape[d] for d in lc)
    n = math.prod(rhs.shape[d] for d in rf)
    left = np.transpose(lhs, lb + lf + lc).astype(acc).reshape(math.prod(batch), m, k)
    right = np.transpose(rhs, rb + rc + rf).astype(acc).reshape(math.prod(batch), k, n)
    out = np.matmul(left, right)
    dims = batch + [lhs.shape[d] for d in lf] + [rhs.shape[d] for d in rf]
    return convert(out.reshape(dims), inst.shape.dtype)


def _patches(x: np.ndarray, window: Window) -> np.ndarray:
    """(N, C, S...) -> (N, C, O..., K...): the input under each kernel tap per output
    position, after lhs dilation, padding, stride and rhs dilation."""
    rank = window.rank
    config = [(0, 0, 0), (0, 0, 0)] + [(lo, hi, d - 1) for (lo, hi), d in
                                       zip(window.pad, window.lhs_dilate)]
    x = pad_array(x, np.zeros((), x.dtype), config)
    eff = [(k - 1) * d + 1 for k, d in zip(window.size, window.rhs_dilate)]
    spatial = tuple(range(2, 2 + rank))
    view = np.lib.stride_tricks.sliding_window_view(x, eff, axis=spatial)
    return view[(slice(None), slice(None))
                + tuple(slice(None, None, s) for s in window.stride)
                + tuple(slice(None, None, d) for d in window.rhs_dilate)]


def convolution(inst, args, ev):
    """Grouped im2col: feature groups split the input features, batch groups split the
    input batch; group g pairs with the g-th block of kernel output features."""
    lhs, rhs = args
    a = inst.attrs
    labels = a["dim_labels"]
    window = a.get("window") or Window.default(len(labels.lhs_spatial))
    if window.rank != len(labels.lhs_spatial):
        window = Window.default(len(labels.lhs_spatial))
    fgc, bgc = a.get("feature_group_count", 1), a.get("batch_group_count", 1)
    acc = _accumulation_type(inst, lhs, rhs)
    x = np.transpose(lhs, [labels.lhs_batch, labels.lhs_feature, *labels.lhs_spatial]).astype(acc)
    w = np.transpose(rhs, [labels.rhs_output_feature, labels.rhs_input_feature,
                           *labels.rhs_spatial]).astype(acc)
    reversed_axes = tuple(2 + i for i, r in enumerate(window.rhs_reversal) if r)
    if reversed_axes:
        w = np.flip(w, reversed_axes)
    out_dims = inst.shape.dims
    spatial_out = [out_dims[d] for d in labels.out_spatial]
    batch, features = x.shape[0], w.shape[0]
    if 0 in spatial_out or batch == 0 or features == 0:
        return np.zeros(out_dims, inst.shape.dtype.numpy)
    p = _patches(x, window)                          # (N, C, O..., K...)
    groups = fgc * bgc
    ntaps = math.prod(window.size)
    nout = math.prod(spatial_out)
    cin = w.shape[1]
    if bgc > 1:                                      # (G, N/G, C, ...)
        p = p.reshape((groups, batch // groups) + p.shape[1:])
    else:                                            # (G, N, C/G, ...)
        p = p.reshape((batch, groups, cin) + p.shape[2:]).swapaxes(0, 1)
    nb = p.shape[1]
    # (G, nb, cin, O..., K...) -> (G, nb * O, cin * K)
    rank = window.rank
    p = np.moveaxis(p, 2, 2 + rank).reshape(groups, nb * nout, cin * ntaps)
    k = w.reshape(groups, features // groups, cin * ntaps).transpose(0, 2, 1)
    out = np.matmul(p, k)                            # (G, nb * O, F/G)
    out = out.reshape((groups, nb, *spatial_out, features // groups))
    out = np.moveaxis(out, -1, 1)                    # (G, F/G, nb, O...)
    out = np.moveaxis(out, 2, 0).reshape((nb, features, *spatial_out))
    perm = [0] * len(out_dims)
    perm[labels.out_batch], perm[labels.out_feature] = 0, 1
    for i, d in enumerate(labels.out_spatial):
        perm[d] = 2 + i
    return convert(np.transpose(out, perm), inst.shape.dtype)


IMPLS = {"dot": dot, "convolution": convolution}
