"""Element-type arithmetic shared by all op implementations: XLA's rules, not numpy's.

numpy differs from XLA in the corners this module pins down: float->int conversion saturates
and maps NaN to 0, narrow floats compute in f32 and round once, total-order comparison orders
-NaN < -inf < -0 < +0 < inf < NaN, integer division by zero yields -1 (or all ones).
"""
from __future__ import annotations

import numpy as np

from ..dtypes import DTYPES, DType, from_numpy, int_info
from ..errors import UnsupportedError


def np_dtype(element_type: str) -> np.dtype:
    return DTYPES[element_type].numpy


def is_float(dt: np.dtype) -> bool:
    """Real floating point, numpy's own or ml_dtypes' narrow ones."""
    return dt.kind == "f" or dt in _NARROW


# bf16, f16, f8, f4: types XLA's CPU backend computes in f32, rounding each result back.
_NARROW = {np.dtype(t.numpy) for t in DTYPES.values()
           if t.kind == "float" and t.numpy is not None and t.bits < 32}

# Types numpy cannot compute in directly, and the exact wider type used instead: narrow
# floats as f32 (XLA's CPU backend does the same), sub-byte ints as 8-bit ints (results wrap
# back on the cast to the result type).
_WIDER = {**{dt: np.dtype(np.float32) for dt in _NARROW},
          **{np.dtype(t.numpy): np.dtype(np.int8 if t.kind == "int" else np.uint8)
             for t in DTYPES.values() if t.is_integral and t.bits < 8}}


def widen(x: np.ndarray) -> np.ndarray:
    """Narrow floats as f32 and sub-byte ints as 8-bit ints (both exact)."""
    wider = _WIDER.get(x.dtype)
    return x if wider is None else x.astype(wider)


def precise(x: np.ndarray) -> np.ndarray:
    """Floats as f64 and complex as c128: transcendental functions are computed there and
    rounded once into the result type, so the reference is at least as exact as XLA."""
    x = widen(x)
    if x.dtype.kind == "c":
        return x.astype(np.complex128)
    if x.dtype.kind == "f":
        return x.astype(np.float64)
    return x


def kind_of(dt: np.dtype) -> str:
    """The HLO kind (pred, int, uint, float, complex) of a numpy dtype."""
    return from_numpy(dt).kind


def element_bits(dt: np.dtype) -> int:
    """Bits per element of the HLO type (4 for s4, though numpy stores it in a byte)."""
    return from_numpy(dt).bits


def unsigned_view(x: np.ndarray) -> np.ndarray:
    """The raw bits of each element as an unsigned integer array of the same width."""
    bits = x.dtype.itemsize * 8
    return x.view(np.dtype(f"u{bits // 8}"))


def signed_twin(dt: np.dtype) -> np.dtype:
    return np.dtype(f"i{dt.itemsize}")


def unsigned_twin(dt: np.dtype) -> np.dtype:
    return np.dtype(f"u{dt.itemsize}")


# ------------------------------------------------------------------ conversion

def convert(x: np.ndarray, to: DType) -> np.ndarray:
    """XLA's `convert`: float->int truncates toward zero, saturates and sends NaN to 0;
    int->int wraps; anything->pred is `!= 0`; real->complex has a zero imaginary part."""
    target = to.numpy
    src = x.dtype
    if src == target:
        return x.copy()
    if to.kind == "pred":
        return x != 0
    if src == np.bool_:
        return x.astype(np.uint8).astype(target)
    if to.is_integral and is_float(src):
        info = int_info(target)
        wide = x.astype(np.float64)
        wide = np.where(np.isnan(wide), 0.0, np.trunc(wide))
        # Clamp in float, then fix the ends exactly: 2**63-1 has no f64 representation.
        low, high = float(info.min), float(info.max)
        carrier = np.uint64 if target == np.uint64 else np.int64
        out = np.clip(wide, low, high).astype(carrier).astype(target)
        out = np.where(wide >= high, np.array(info.max, target), out)
        return np.where(wide <= low, np.array(info.min, target), out).astype(target)
    if to.kind == "float" and to.bits < 32 and src.kind in "iu":
        # Through f32, as XLA's CPU backend converts (so a value may round twice).
        return x.astype(np.float32).astype(target)
    if src.kind == "c" and to.kind != "complex":
        return np.real(x).astype(target)
    return widen(x).astype(target)


def cast_result(x, element_type: str) -> np.ndarray:
    """A computed value rounded (or wrapped) into the result type."""
    target = np_dtype(element_type)
    x = np.asarray(x)
    return x if x.dtype == target else x.astype(target)


# ----------------------------------------------------------------- comparison

def total_order_key(x: np.ndarray) -> np.ndarray:
    """A signed integer per float whose order is IEEE totalOrder (-NaN < ... < NaN).

    Narrow floats widen to f32 first, which keeps order and NaN signs."""
    x = widen(x)
    if x.dtype.kind == "c":
        raise UnsupportedError("totalOrder comparison of complex numbers is not supported")
    bits = x.view(signed_twin(x.dtype))
    mask = np.array(np.iinfo(bits.dtype).max, bits.dtype)
    return np.where(bits < 0, bits ^ mask, bits)


# ---------------------------------------------------------------- max and min

class Extremum:
    """maximum / minimum as XLA computes them: NaN wins, and for floats -0 < +0 (IEEE
    754-2019), which numpy's ufuncs leave to argument order. Offers the ufunc interface
    (call, reduce, at) the reduction fast paths use."""

    def __init__(self, ufunc: np.ufunc):
        self.ufunc = ufunc
        self.zero = 0.0 if ufunc is np.maximum else -0.0      # the zero that wins

    def _winning_zero(self, x):
        return (x == 0) & (np.signbit(x) == np.signbit(self.zero))

    def _fix(self, r, won):
        return np.where((r == 0) & won, self.zero, np.where(r == 0, -self.zero, r)).astype(
            r.dtype)

    def __call__(self, a, b):
        r = self.ufunc(a, b)
        if not is_float(r.dtype):
            return r
        return self._fix(r, self._winning_zero(a) | self._winning_zero(b))

    def reduce(self, x, axis=-1, dtype=None, initial=None):
        r = self.ufunc.reduce(x, axis=axis, dtype=dtype)
        if is_float(x.dtype):
            r = self._fix(r, self._winning_zero(x).any(axis=axis))
        if initial is not None:             # the seed takes part like any element
            r = self(r, np.asarray(initial, dtype=r.dtype))
        return r

    def at(self, out, index, values):
        if not is_float(out.dtype):
            return self.ufunc.at(out, index, values)
        won = self._winning_zero(out)
        np.logical_or.at(won, index, self._winning_zero(values))
        self.ufunc.at(out, index, values)
        out[...] = self._fix(out, won)


maximum, minimum = Extremum(np.maximum), Extremum(np.minimum)


# ------------------------------------------------------------ integer arithmetic


def int_divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C division (toward zero); x/0 = -1 (all ones), INT_MIN/-1 = INT_MIN, as XLA defines."""
    zero = b == 0
    if a.dtype.kind == "u":
        q = a // np.where(zero, 1, b).astype(a.dtype)
        return np.where(zero, np.array(-1).astype(a.dtype), q)
    overflow = b == -1                   # a / -1 is -a, wrapping at INT_MIN
    safe = np.where(zero | overflow, 1, b).astype(a.dtype)
    q = a // safe                        # floor; step toward zero where it rounded down
    q = q + (((a - q * safe) != 0) & ((a < 0) != (safe < 0))).astype(a.dtype)
    return np.where(zero, np.array(-1, a.dtype), np.where(overflow, np.negative(a), q))


def int_remainder(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C remainder (sign of the dividend); x % 0 = x and INT_MIN % -1 = 0, as XLA defines."""
    zero = b == 0
    if a.dtype.kind == "u":
        return np.where(zero, a, a % np.where(zero, 1, b).astype(a.dtype))
    safe = np.where(zero | (b == -1), 1, b).astype(a.dtype)
    r = np.fmod(a, safe)
    return np.where(zero, a, np.where(b == -1, np.array(0, a.dtype), r))


def int_power(base: np.ndarray, exponent: np.ndarray) -> np.ndarray:
    """XLA's integer power (its elemental emitter, probed against XLA's CPU backend):
    squaring over the exponent's low 6 bits only, wrapping; an exponent that is negative
    when read as signed gives 1 for base 1, ±1 for base -1 (all ones), 0 otherwise."""
    signed = exponent.astype(signed_twin(exponent.dtype))
    acc = np.ones_like(base)
    b = base.copy()
    for bit in range(6):
        acc = np.where(((signed >> bit) & 1) == 1, acc * b, acc)
        b = b * b
    minus_one = base == np.array(-1).astype(base.dtype)
    odd = (signed & 1) == 1
    negative = np.where(base == 1, np.ones_like(base),
                        np.where(minus_one, np.where(odd, base, np.ones_like(base)),
                                 np.zeros_like(base)))
    return np.where(signed < 0, negative, acc).astype(base.dtype)
