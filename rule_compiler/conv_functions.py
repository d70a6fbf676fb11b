"""The Python meaning of the rule functions over a convolution's attributes (their HLO text):
what swapping a convolution's operands does to its dim_labels and window.

A convolution whose window is reversed on every spatial dim sums x[s + m - lo] k[K-1-m]: a
true convolution, which commutes. With k as the input and x as the kernel, the output's
batch and feature dims trade places, the window spans x's spatial dims (X) and each side's
padding becomes X - K + (its old padding); strides and dilations must be 1.
"""
from __future__ import annotations

from .. import attributes
from ..attributes import Window


class NotSwappable(Exception):
    """The convolution's operands do not swap (the rule function has no value)."""


_LABEL_SWAPS = (str.maketrans("oi", "bf"), str.maketrans("bf", "oi"), str.maketrans("bf", "fb"))


def swapped_labels(text: str) -> str:
    labels = attributes.decode("dim_labels", text)
    lhs, rhs, out = (part.translate(table) for part, table in
                     zip((labels.rhs, labels.lhs, labels.out), _LABEL_SWAPS))
    return f"{lhs}_{rhs}->{out}"


def swapped_window(window_text: str, labels_text: str, lhs_dims) -> str:
    labels = attributes.decode("dim_labels", labels_text)
    spatial = [lhs_dims[d] for d in labels.lhs_spatial]
    n = len(spatial)
    w = attributes.decode("window", window_text) if window_text else Window.default(n)
    if w.rank != n or any(v != 1 for v in (*w.stride, *w.lhs_dilate, *w.rhs_dilate)) \
            or not all(w.rhs_reversal):
        raise NotSwappable
    pad = tuple((x - k + lo, x - k + hi) for x, k, (lo, hi) in zip(spatial, w.size, w.pad))
    if any(p < 0 for pair in pad for p in pair):
        raise NotSwappable
    return attributes.encode("window", Window(tuple(spatial), w.stride, pad, w.lhs_dilate,
                                              w.rhs_dilate, w.rhs_reversal)) if n else ""
