"""Scalar constants as e-graph text: one canonical spelling per value and element type.

A scalar constant is the term (Leaf "constant" 0 (As TEXT "") (T dtype (vec-of) "")) whose
TEXT is `canonical_scalar_text(value, dtype)`. Rules match constants by comparing this text
(`multiply(x, 1)` matches TEXT "1"), so the encoder, the decoder, the rule compiler and the
rule checker must all spell values through these functions:

    canonical_scalar_text(1.0, "f32") == "1"      canonical_scalar_text(-0.0, "f32") == "-0"
    canonical_scalar_text(True, "pred") == "1"    canonical_scalar_text(0.1, "f16") == "0.1"
    scalar_from_text("0.1", "f16")   -> the 0-d f16 array nearest to 0.1

Floats use the shortest decimal that reads back to the same bits *in their own type*, printed
like Python's repr without a trailing ".0"; NaNs keep their sign and payload as the printer
writes them (`nan`, `-nan`, `nan(0x1)`).
"""
from __future__ import annotations

import re

import numpy as np

from ..dtypes import DTYPES, float_info, int_info

_NAN = re.compile(r"(-?)nan(?:\(0x([0-9a-fA-F]+)\))?")
_INT = re.compile(r"[+-]?\d+")


def canonical_scalar_text(value, dtype: str) -> str:
    """The e-graph text of a scalar of element type `dtype` (a name such as "f32")."""
    dt = DTYPES[dtype]
    if dt.kind == "pred":
        return "1" if bool(np.asarray(value).item()) else "0"
    if dt.is_integral:
        return str(int(np.asarray(value).item()))
    if dt.kind == "float":
        return _float_text(np.asarray(value).astype(dt.numpy))
    if dt.kind == "complex":
        c = complex(np.asarray(value).astype(dt.numpy).item())
        part = np.float32 if dtype == "c64" else np.float64
        return f"({_float_text(np.asarray(c.real, part))}, {_float_text(np.asarray(c.imag, part))})"
    raise ValueError(f"{dtype} has no scalar constants")


def scalar_from_text(text: str, dtype: str) -> np.ndarray:
    """The 0-d array that `text` denotes in `dtype`; ValueError if it is no such value
    (a fraction for an integer type, an integer out of range, anything but 0/1 for pred)."""
    dt = DTYPES[dtype]
    if dt.kind == "pred":
        if text not in ("0", "1"):
            raise ValueError(f"{text!r} is not a pred value")
        return np.asarray(text == "1", dtype=np.bool_)
    if dt.is_integral:
        if not _INT.fullmatch(text):
            raise ValueError(f"{text!r} is not an integer")
        v = int(text)
        info = int_info(dt)
        if not info.min <= v <= info.max:
            raise ValueError(f"{text} is out of range for {dtype}")
        return np.asarray(v, dtype=dt.numpy)
    if dt.kind == "float":
        return _float_value(text, dt.numpy)
    if dt.kind == "complex":
        m = re.fullmatch(r"\((\S+), (\S+)\)", text)
        part = np.float32 if dtype == "c64" else np.float64
        if not m:
            raise ValueError(f"{text!r} is not a complex value")
        re_, im = (_float_value(g, np.dtype(part)) for g in m.groups())
        return np.asarray(complex(re_.item(), im.item()), dtype=dt.numpy)
    raise ValueError(f"{dtype} has no scalar constants")


def representable(text: str, dtype: str) -> bool:
    """True when `text` is the canonical text of some value of `dtype` (so a rule may write
    that constant into a term of this type)."""
    try:
        return canonical_scalar_text(scalar_from_text(text, dtype), dtype) == text
    except (ValueError, KeyError, OverflowError):
        return False


def number_text(text: str) -> str:
    """Canonical text of a number as written in a rule file: integers exactly (`-0` is the
    float negative zero), everything else as its float64 value ("1.0" -> "1", "1e3" -> "1000")."""
    body = text[1:] if text.startswith("+") else text
    if _INT.fullmatch(body) and not (body.startswith("-") and int(body) == 0):
        return str(int(body))
    return canonical_scalar_text(float(body), "f64")


def _float_value(text: str, npdt: np.dtype) -> np.ndarray:
    m = _NAN.fullmatch(text)
    if m:
        bits = npdt.itemsize * 8
        nan = np.asarray(np.nan, dtype=npdt)
        word = int(nan.view(f"u{npdt.itemsize}"))
        if m.group(2):
            mant = float_info(npdt).nmant
            word = (word >> mant << mant) | int(m.group(2), 16)
        if m.group(1):
            word |= 1 << (bits - 1)
        return np.asarray(word, dtype=f"u{npdt.itemsize}").view(npdt).reshape(())
    try:
        f = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None
    with np.errstate(over="ignore"):
        return np.asarray(f).astype(npdt)


def _float_text(x: np.ndarray) -> str:
    npdt = x.dtype
    f = float(x)
    if np.isnan(f):
        return _nan_text(x)
    if np.isinf(f) or f == 0:
        return _strip(repr(f))
    if npdt == np.float64:
        return _strip(repr(f))
    bits = x.tobytes()
    with np.errstate(over="ignore"):
        for digits in range(1, 18):
            short = float(f"{f:.{digits}g}")
            if np.asarray(short).astype(npdt).tobytes() == bits:
                return _strip(repr(short))
    return _strip(repr(f))


def _strip(text: str) -> str:
    return text[:-2] if text.endswith(".0") else text


def _nan_text(x: np.ndarray) -> str:
    size = x.dtype.itemsize
    word = int(x.reshape(1).view(f"u{size}")[0])
    sign = "-" if word >> (size * 8 - 1) else ""
    mant = float_info(x.dtype).nmant
    payload = word & ((1 << mant) - 1)
    default = int(np.asarray(np.nan, dtype=x.dtype).reshape(1).view(f"u{size}")[0]) & (
        (1 << mant) - 1)
    return f"{sign}nan" if payload == default else f"{sign}nan(0x{payload:x})"
