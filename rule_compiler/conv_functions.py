"""The Python meaning of the rule functions over a convolution's dim_labels (their HLO text)
and window: what swapping a convolution's operands does to them.

A convolution whose window is reversed on every spatial dim sums x[s + m - lo] k[K-1-m]: a
true convolution, which commutes. With k as the input and x as the kernel, the output's
batch and feature dims trade places, the window spans x's spatial dims (X) and each side's
padding becomes X - K + (its old padding); strides and dilations must be 1.
"""
from __future__ import annotations

from .. import attributes


class NotSwappable(Exception):
    """The convolution's operands do not swap (the rule function has no value)."""


_LABEL_SWAPS = (str.maketrans("oi", "bf"), str.maketrans("bf", "oi"), str.maketrans("bf", "fb"))


def swapped_labels(text: str) -> str:
    labels = attributes.decode("dim_labels", text)
    lhs, rhs, out = (part.translate(table) for part, table in
                     zip((labels.rhs, labels.lhs, labels.out), _LABEL_SWAPS))
    return f"{lhs}_{rhs}->{out}"


def spatial_sizes(lhs_dims, labels_text: str) -> tuple[int, ...]:
    """The sizes of the input's spatial dims, in window order."""
    labels = attributes.decode("dim_labels", labels_text)
    if len(labels.lhs) != len(lhs_dims):
        raise NotSwappable
    return tuple(lhs_dims[d] for d in labels.lhs_spatial)


def swapped_padding(pad, kernel_sizes, input_sizes) -> tuple[int, ...]:
    """One side's padding X - K + pad once the window spans the input's spatial sizes X
    instead of the kernel's K (not negative)."""
    if not len(pad) == len(kernel_sizes) == len(input_sizes):
        raise NotSwappable
    out = tuple(x - k + p for p, k, x in zip(pad, kernel_sizes, input_sizes))
    if any(p < 0 for p in out):
        raise NotSwappable
    return out
