"""Elementwise ops: one table row per opcode, one generic driver per arity.

Every implementation here ignores the instruction's dims, so the same code evaluates scalar
computations "batched" over whole arrays (see apply.py). Arithmetic follows XLA's CPU backend:
narrow floats compute in f32 and round once; transcendental functions compute in f64 (c128)
and round once; integers wrap.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ..dtypes import float_info
from ..errors import UnsupportedError
from . import numerics as nx
from .numerics import cast_result, precise, widen

_erf = np.frompyfunc(math.erf, 1, 1)


def _raw(x):
    """No widening: bit-level ops read the pattern at the type's own width."""
    return x


def _sign(x):
    if x.dtype.kind == "c":
        mag = np.abs(x)
        return np.where(mag == 0, 0, x / np.where(mag == 0, 1, mag))
    if x.dtype.kind == "f":      # keeps -0.0 and NaN, like copysign(x != 0, x)
        return np.where(np.isnan(x) | (x == 0), x, np.copysign(1, x))
    return np.sign(x)


def _round_half_away(x):
    t = np.trunc(x)
    return np.where(np.abs(x - t) >= 0.5, t + np.copysign(1, x), t)


def _logistic(x):
    return 1 / (1 + np.exp(-x))


def _bit_pattern(x, bits: int):
    """Element bits as uint64, `bits` wide (sub-byte ints live in whole bytes)."""
    signed = nx.kind_of(x.dtype) == "int"
    return (x.astype(np.int64) if signed else x.astype(np.uint64)).astype(
        np.uint64) & np.uint64((1 << bits) - 1)


def _type_bits(x) -> int:
    return nx.element_bits(x.dtype)


def _popcnt(x):
    return np.bitwise_count(_bit_pattern(x, _type_bits(x)))


def _clz(x):
    bits = _type_bits(x)
    u = _bit_pattern(x, bits)
    length = np.zeros(u.shape, np.int64)
    for i in range(bits):
        length = np.where((u >> np.uint64(i)) != 0, i + 1, length)
    return bits - length


def _not(x):
    return np.logical_not(x) if x.dtype == np.bool_ else np.invert(x)


def _imag(x):
    return np.imag(x) if x.dtype.kind == "c" else np.zeros_like(x)


# opcode: (function, how operands widen first). widen: narrow floats as f32 (exact ops:
# one rounding into the result type gives the correctly rounded result); precise: floats as
# f64 and complex as c128 (transcendentals, so only the final rounding is inexact); _raw:
# bit-level ops on the type itself.
UNARY: dict[str, tuple[Callable, Callable]] = {
    "abs": (np.abs, precise), "negate": (np.negative, widen), "sign": (_sign, widen),
    "floor": (np.floor, widen), "ceil": (np.ceil, widen),
    "round-nearest-afz": (_round_half_away, widen), "round-nearest-even": (np.rint, widen),
    "exponential": (np.exp, precise), "exponential-minus-one": (np.expm1, precise),
    "log": (np.log, precise), "log-plus-one": (np.log1p, precise),
    "logistic": (_logistic, precise), "sqrt": (np.sqrt, precise),
    "rsqrt": (lambda x: 1 / np.sqrt(x), precise), "cbrt": (np.cbrt, precise),
    "sine": (np.sin, precise), "cosine": (np.cos, precise), "tan": (np.tan, precise),
    "tanh": (np.tanh, precise),
    "erf": (lambda x: np.asarray(_erf(x)).astype(x.dtype), precise),     # 0-d: a Python float
    "is-finite": (np.isfinite, widen), "not": (_not, widen),
    "popcnt": (_popcnt, _raw), "count-leading-zeros": (_clz, _raw),
    "real": (np.real, widen), "imag": (_imag, widen),
}


def _as_value(pattern, dtype: np.dtype, bits: int):
    """Inverse of _bit_pattern: a `bits`-wide pattern as an element of `dtype`."""
    v = pattern.astype(np.int64)
    if nx.kind_of(dtype) == "int" and bits < 64:
        v = np.where(v >= 1 << (bits - 1), v - (1 << bits), v)
    return (v if nx.kind_of(dtype) == "int" else pattern).astype(dtype)


def _shift(x, y, direction: str):
    """Shifts on the bit pattern; amounts are unsigned (a negative amount is huge) and an
    amount >= the bit width gives 0, or the sign fill for an arithmetic right shift."""
    bits = _type_bits(x)
    p = _bit_pattern(x, bits)
    amount = _bit_pattern(y, _type_bits(y))
    ok = amount < bits
    a = np.where(ok, amount, 0).astype(np.uint64)
    if direction == "left":
        r = np.where(ok, p << a, 0)
    elif direction == "logical":
        r = np.where(ok, p >> a, 0)
    else:
        signed = _as_value(p, np.dtype(np.int64), bits)
        r = np.where(ok, signed >> a.astype(np.int64), np.where(signed < 0, -1, 0))
        r = r.astype(np.int64).astype(np.uint64)
    mask = np.uint64((1 << bits) - 1)
    return _as_value(np.asarray(r).astype(np.uint64) & mask, x.dtype, bits)


def _divide(a, b):
    return nx.int_divide(a, b) if a.dtype.kind in "iu" else np.divide(a, b)


def _remainder(a, b):
    return nx.int_remainder(a, b) if a.dtype.kind in "iu" else np.fmod(a, b)


def _power(a, b):
    if a.dtype.kind in "iu":
        return nx.int_power(a, b)
    # On 0-d operands numpy takes a sqrt shortcut for the exponent 0.5 (power(-inf, 0.5) is
    # NaN, power(-0, 0.5) is -0); on arrays, as in XLA, they are inf and +0.
    shape = np.broadcast_shapes(a.shape, b.shape)
    return np.power(np.atleast_1d(a), np.atleast_1d(b)).reshape(shape)


def _complex(re, im):
    out = np.empty(np.broadcast_shapes(re.shape, im.shape),
                   np.complex128 if re.dtype == np.float64 else np.complex64)
    out.real, out.imag = re, im
    return out


def _atan2(a, b):
    if a.dtype.kind == "c":
        raise UnsupportedError("atan2 of complex numbers is not supported")
    return np.arctan2(a, b)


BINARY: dict[str, tuple[Callable, Callable]] = {
    "add": (np.add, widen), "subtract": (np.subtract, widen),
    "multiply": (np.multiply, widen), "divide": (_divide, widen),
    "remainder": (_remainder, widen), "maximum": (nx.maximum, widen),
    "minimum": (nx.minimum, widen), "power": (_power, precise),
    "atan2": (_atan2, precise), "complex": (_complex, _raw),
    "and": (np.bitwise_and, widen), "or": (np.bitwise_or, widen),
    "xor": (np.bitwise_xor, widen), "shift-left": (lambda x, y: _shift(x, y, "left"), _raw),
    "shift-right-logical": (lambda x, y: _shift(x, y, "logical"), _raw),
    "shift-right-arithmetic": (lambda x, y: _shift(x, y, "arithmetic"), _raw),
}

_DIRECTIONS = {"EQ": np.equal, "NE": np.not_equal, "LT": np.less, "LE": np.less_equal,
               "GT": np.greater, "GE": np.greater_equal}


def unary(inst, args, ev):
    fn, how = UNARY[inst.opcode]
    return cast_result(fn(how(args[0])), inst.shape.element_type)


def binary(inst, args, ev):
    fn, how = BINARY[inst.opcode]
    return cast_result(fn(how(args[0]), how(args[1])), inst.shape.element_type)


def compare(inst, args, ev):
    a, b = args
    if inst.attrs.get("type") == "TOTALORDER":
        a, b = nx.total_order_key(a), nx.total_order_key(b)
    else:
        a, b = widen(a), widen(b)
    return np.asarray(_DIRECTIONS[inst.attrs["direction"]](a, b))


def select(inst, args, ev):
    return np.asarray(np.where(*args))


def clamp(inst, args, ev):
    """min(hi, max(lo, x)) with NaN-propagating max/min, XLA's operand order."""
    lo, x, hi = (widen(a) for a in args)
    return cast_result(nx.minimum(hi, nx.maximum(lo, x)), inst.shape.element_type)


def convert(inst, args, ev):
    return nx.convert(args[0], inst.shape.dtype)


def bitcast_convert(inst, args, ev):
    """Reinterpret bytes (little-endian, as XLA's CPU backend); a width change adds or
    removes the minor-most dimension."""
    x = np.ascontiguousarray(args[0])
    target = inst.shape.dtype.numpy
    a, b = x.dtype.itemsize, target.itemsize
    if inst.shape.dtype.bits < 8 or _type_bits(x) < 8:
        raise UnsupportedError("bitcast-convert of sub-byte types is not supported")
    if a == b:
        return x.view(target)
    if a > b:
        return x.view(target).reshape(x.shape + (a // b,))
    return x.view(target).reshape(x.shape[:-1])


def reduce_precision(inst, args, ev):
    return reduce_precision_bits(args[0], inst.attrs["exponent_bits"],
                                 inst.attrs["mantissa_bits"])


def reduce_precision_bits(x: np.ndarray, exponent_bits: int, mantissa_bits: int) -> np.ndarray:
    """Round to `mantissa_bits` (nearest even) and flush values outside `exponent_bits`'s
    range to ±0 / ±inf, on the bit pattern, as XLA's EmitReducePrecisionIR does."""
    nbits = x.dtype.itemsize * 8
    if nbits != _type_bits(x):
        raise UnsupportedError(f"reduce-precision of {x.dtype} (sub-byte) is not supported")
    src_m = float_info(x.dtype).nmant
    src_e = nbits - 1 - src_m
    u = nx.unsigned_view(np.ascontiguousarray(x)).astype(np.uint64)
    full = np.uint64((1 << nbits) - 1)
    sign = np.uint64(1 << (nbits - 1))
    exp_mask = np.uint64(((1 << src_e) - 1) << src_m)
    is_nan = (u & ~sign & full) > exp_mask
    if mantissa_bits < src_m:
        drop = src_m - mantissa_bits
        last = np.uint64(1 << drop)
        bias = ((u & last) >> np.uint64(drop)) + np.uint64((1 << (drop - 1)) - 1)
        u = (u + bias) & ~(last - np.uint64(1)) & full
    if exponent_bits < src_e:
        bias = (1 << (src_e - 1)) - 1
        reduced = (1 << (exponent_bits - 1)) - 1
        exponent = u & exp_mask
        signed_zero = u & sign
        u = np.where(exponent > np.uint64((bias + reduced) << src_m), signed_zero | exp_mask, u)
        u = np.where(exponent <= np.uint64((bias - reduced) << src_m), signed_zero, u)
    result = u.astype(nx.unsigned_twin(x.dtype)).view(x.dtype)
    return np.asarray(np.where(is_nan, x, result))      # NaN stays NaN (probed on XLA)


IMPLS = {
    **dict.fromkeys(UNARY, unary), **dict.fromkeys(BINARY, binary),
    "compare": compare, "select": select, "clamp": clamp, "convert": convert,
    "bitcast-convert": bitcast_convert, "reduce-precision": reduce_precision,
}
