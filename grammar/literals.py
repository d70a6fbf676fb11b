"""Constant literals: the text inside `constant(...)` -> numpy values, checked as XLA does.

Arrays are converted in bulk (one regex split, one numpy conversion), so a constant with a
million elements costs milliseconds, not a token per element in the grammar. Structure is
still checked exactly: the brace skeleton must match the shape and every innermost group
must hold the minor dimension's count.
"""
from __future__ import annotations

import re

import ml_dtypes
import numpy as np

from ..attributes import split_top_level
from ..dtypes import int_info
from ..ir import ELIDED, Literal
from ..shape import AnyShape, Shape

_NAN_PAYLOAD = re.compile(r"(-?)nan\(0x([0-9a-fA-F]+)\)")
_INNER_GROUP = re.compile(r"\{([^{}]*)\}")
_SPLIT = re.compile(r"[\s,{}]+")
# Numbers as XLA's lexer reads them: no `+`, no `_`, no leading `.` unless after `-`.
_INT = r"-?[0-9]+"
_FLOAT = (r"(?:-?[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?|-\.[0-9]+(?:[eE][+-]?[0-9]+)?"
          r"|-?inf|-?nan)")
_INTS = re.compile(f"(?:{_INT}(?: {_INT})*)?")       # matched against " ".join(tokens)
_FLOATS = re.compile(f"(?:{_FLOAT}(?: {_FLOAT})*)?")
_COMPLEX = re.compile(r"\(\s*([^,()\s]+)\s*,\s*([^,()\s]+)\s*\)")


class LiteralError(ValueError):
    """Malformed literal; the parser attaches the position."""


def parse_literal(text: str, shape: AnyShape) -> Literal:
    text = text.strip()
    if shape.is_tuple:
        items = split_top_level(_strip_parens(text))
        if len(items) != len(shape.elements):
            raise LiteralError(f"tuple literal has {len(items)} elements, shape has "
                               f"{len(shape.elements)}")
        return tuple(parse_literal(t, s) for t, s in zip(items, shape.elements))
    if not shape.dtype.is_array:
        raise LiteralError(f"{shape.element_type} has no literal values")
    if shape.rank == 0:
        if text.startswith("{"):
            raise LiteralError("a scalar literal is written without braces")
        return _convert(_scalar_tokens(text, shape), shape).reshape(())
    if not text.startswith("{"):
        return _first_element_only(text, shape)
    if text == "{...}":
        return ELIDED
    _check_structure(text, shape)
    if shape.dtype.kind == "complex":
        tokens = [f"{re_}|{im}" for re_, im in _COMPLEX.findall(text)]
    else:
        tokens = [t for t in _SPLIT.split(text) if t]
    if len(tokens) != shape.num_elements:
        raise LiteralError(f"literal has {len(tokens)} elements, shape {shape} needs "
                           f"{shape.num_elements}")
    return _convert(tokens, shape).reshape(shape.dims)


def _first_element_only(text: str, shape: Shape) -> np.ndarray:
    """An array written as one bare value: XLA's parser stores it as the first element and
    leaves every other element zero (`f32[2] constant(7)` is {7, 0})."""
    if shape.num_elements == 0:
        raise LiteralError(f"a value was given for {shape.to_text(False)}, which has no elements")
    out = np.zeros(shape.num_elements, dtype=shape.dtype.numpy)
    out[0] = _convert(_scalar_tokens(text, shape), shape)[0]
    return out.reshape(shape.dims)


def _scalar_tokens(text: str, shape: Shape) -> list[str]:
    if shape.dtype.kind == "complex":
        m = _COMPLEX.fullmatch(text)
        if not m:
            raise LiteralError(f"expected a complex value (re, im), got {text!r}")
        return [f"{m.group(1)}|{m.group(2)}"]
    if not text or _SPLIT.search(text):
        raise LiteralError(f"expected one value for a scalar, got {text!r}")
    return [text]


def _check_structure(text: str, shape: Shape) -> None:
    skeleton = re.sub(r"[^{}]", "", text)
    expected = ""
    for d in reversed(shape.dims):
        expected = "{" + expected * d + "}"
    if skeleton != expected:
        raise LiteralError(f"literal's nesting does not match shape {shape.to_text(False)}")
    minor = shape.dims[-1] if 0 not in shape.dims else 0   # no elements: every group is {}
    for group in _INNER_GROUP.findall(text):
        n = len(group.replace(",", " ").split()) if shape.dtype.kind != "complex" \
            else len(_COMPLEX.findall(group))
        if n != minor:
            raise LiteralError(f"literal row has {n} elements, expected {minor}")


def _convert(tokens: list[str], shape: Shape) -> np.ndarray:
    dt = shape.dtype
    kind = dt.kind
    try:
        if kind == "pred":
            return _to_pred(tokens)
        if kind in ("int", "uint"):
            return _to_int(tokens, shape)
        if kind == "complex":
            return _to_complex(tokens, shape)
        return _to_float(tokens, shape)
    except ValueError as e:
        if isinstance(e, LiteralError):
            raise
        raise LiteralError(f"bad {shape.element_type} literal value: {e}") from None


def _to_pred(tokens: list[str]) -> np.ndarray:
    table = {"true": True, "false": False, "1": True, "0": False}
    try:
        return np.array([table[t] for t in tokens], dtype=np.bool_)
    except KeyError as e:
        raise LiteralError(f"expected true or false, got {e.args[0]!r}") from None


def _to_int(tokens: list[str], shape: Shape) -> np.ndarray:
    """Integers must fit int64, or uint64 when not negative (XLA's lexer); a negative value
    wraps around in u64 only, as XLA's range check converts it to uint64 first."""
    if not _INTS.fullmatch(" ".join(tokens)):
        bad = next(t for t in tokens if not re.fullmatch(_INT, t))
        raise LiteralError(f"expects integer for {shape.element_type}, got {bad!r}")
    values = [int(t) for t in tokens]
    info = int_info(shape.dtype)
    lo, hi = info.min, info.max
    wraps = hi == 2**64 - 1
    for i, v in enumerate(values):
        if v < -2**63 or v > 2**64 - 1:
            raise LiteralError(f"value {v} does not fit in 64 bits")
        if wraps and v < 0:
            values[i] = v = v + 2**64
        if v < lo or v > hi:
            raise LiteralError(f"value {v} is out of range for {shape.element_type}")
    return np.array(values, dtype=np.int64 if shape.dtype.kind == "int" or hi < 2**63
                    else np.uint64).astype(shape.dtype.numpy)


def _to_complex(tokens: list[str], shape: Shape) -> np.ndarray:
    """Each part must be finite in the part's type as written (XLA does not round first)."""
    texts = [p for t in tokens for p in t.split("|")]
    _check_floats(texts)
    parts = np.array(texts, dtype=np.float64).reshape(-1, 2)
    _check_finite_doubles(parts.ravel(), texts)
    limit = float(ml_dtypes.finfo(shape.dtype.numpy).max)
    bad = np.isfinite(parts) & (np.abs(parts) > limit)
    if bad.any():
        v = float(parts.ravel()[np.argmax(bad.ravel())])
        raise LiteralError(f"value {v!r} is out of range for {shape.element_type}")
    out = np.empty(len(parts), dtype=shape.dtype.numpy)
    out.real, out.imag = parts[:, 0], parts[:, 1]      # (1, inf) stays (1, inf): no 1j * inf
    return out


def _check_floats(tokens: list[str]) -> None:
    """Float syntax; a value written as an integer is lexed as one, so it must fit in 64 bits
    (XLA refuses `f32[] constant(18446744073709551616)`)."""
    if not _FLOATS.fullmatch(" ".join(tokens)):
        bad = next(t for t in tokens if not re.fullmatch(_FLOAT, t))
        raise LiteralError(f"bad float value {bad!r}")
    for t in tokens:
        if re.fullmatch(_INT, t) and not -2**63 <= int(t) <= 2**64 - 1:
            raise LiteralError(f"value {t} does not fit in 64 bits")


def _check_finite_doubles(values: np.ndarray, tokens: list[str]) -> None:
    """A number too large for a double (1e309) is an error, not infinity."""
    for i in np.flatnonzero(np.isinf(values)).tolist():
        if tokens[i].lstrip("-") != "inf":
            raise LiteralError(f"value {tokens[i]} is out of range for a double")


def _to_float(tokens: list[str], shape: Shape) -> np.ndarray:
    target = shape.dtype.numpy
    payloads = [(i, m) for i, t in enumerate(tokens) if "(" in t
                for m in [_NAN_PAYLOAD.fullmatch(t)]]
    for i, m in payloads:
        if m is None:
            raise LiteralError(f"bad float value {tokens[i]!r}")
        tokens[i] = "nan"
    _check_floats(tokens)
    values = np.array(tokens, dtype=np.float64)
    _check_finite_doubles(values, tokens)
    with np.errstate(over="ignore", invalid="ignore"):
        out = values.astype(target)
    overflow = np.isinf(out.astype(np.float64)) & np.isfinite(values)
    if overflow.any():
        v = values[np.argmax(overflow)]
        raise LiteralError(f"value {v!r} is out of range for {shape.element_type}")
    for i, m in payloads:
        out[i] = _nan_with_payload(target, m.group(1) == "-", int(m.group(2), 16))
    return out


def _nan_with_payload(target: np.dtype, negative: bool, payload: int):
    """A NaN whose mantissa bits are `payload` (IEEE-style formats only: f16, bf16, f32,
    f64, f8e5m2, f8e4m3, f8e3m4)."""
    bits = target.itemsize * 8
    info = ml_dtypes.finfo(target)
    mant = info.nmant
    if payload == 0 or payload >= (1 << mant) or info.bits != bits:
        raise LiteralError(f"NaN payload 0x{payload:x} is invalid for this type")
    exp_mask = ((1 << (bits - 1 - mant)) - 1) << mant
    word = (int(negative) << (bits - 1)) | exp_mask | payload
    uint = np.dtype(f"u{target.itemsize}")
    value = np.array([word], dtype=uint).view(target)[0]
    if not np.isnan(np.float64(value)):
        raise LiteralError("this type has no NaN with a payload")
    return value


def _strip_parens(text: str) -> str:
    if not (text.startswith("(") and text.endswith(")")):
        raise LiteralError(f"expected a tuple literal (...), got {text!r}")
    return text[1:-1]
