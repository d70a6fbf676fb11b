"""Accuracy of the vectorizable f32 transcendental functions (lowering/mathlib.py), in ulps
of the f32 result, against float64 numpy over 200k samples spread over many magnitudes,
with the special values (±0, ±inf, NaN, denormals, the overflow and underflow edges and the
ends of each function's pieces); bf16 and f16 (computed in f32) on every value of the type;
f64 exp, log and log1p against long double."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import hlo_opt
from lowering_helpers import ulp_distance

# function: (max ulps documented in mathlib.py, float64 reference, sample domain)
FUNCTIONS = {
    "exponential": (2, np.exp, "any"), "log": (1, np.log, "positive"),
    "log-plus-one": (3, np.log1p, "above -1"), "exponential-minus-one": (3, np.expm1, "any"),
    "tanh": (1.5, np.tanh, "any"), "logistic": (3, lambda x: 1 / (1 + np.exp(-x)), "any"),
    "erf": (1.5, np.vectorize(math.erf), "any"),
}
SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40, 88.7, 89.0, -87.3, -103.9,
           -104.0, -110.0, 1e-30, 1.0, -1.0, 0.625, -0.625, 9.0, 10.0, 3.9, 4.0, 0.99999994, -0.99999994,
           3.919206, 3.9192057, -3.919206, 2.5088544, 1.4e-45, -1.4e-45, 1.1754942e-38]


def _samples(domain: str, n: int, rng) -> np.ndarray:
    scales = 10.0 ** rng.integers(-6, 3, n)
    x = (rng.standard_normal(n) * scales).astype(np.float32)
    if domain == "positive":
        x = np.abs(x) * np.float32(10.0) ** rng.integers(-30, 30, n).astype(np.float32)
    elif domain == "above -1":
        x = x[x > -1]
    return np.concatenate([x, np.array(SPECIAL, np.float32)])


def unary(op: str, dtype: str, n: int) -> str:
    """A module applying one elementwise op to a vector of n elements."""
    return (f"HloModule m\nENTRY e {{\n  x = {dtype}[{n}] parameter(0)\n"
            f"  ROOT y = {dtype}[{n}] {op}(x)\n}}\n")


@pytest.mark.parametrize("op", list(FUNCTIONS))
def test_transcendental_accuracy(op):
    ulps, reference, domain = FUNCTIONS[op]
    x = _samples(domain, 200_000, np.random.default_rng(0))
    n = x.size
    got = hlo_opt.compile(unary(op, "f32", n))(x)[0]
    with np.errstate(all="ignore"):
        want = reference(x.astype(np.float64))
        error = ulp_distance(got, want.astype(np.float32))
        # Where rounding the reference to f32 moved it, measure against the exact value.
        exact = np.abs(got.astype(np.float64) - want) / np.abs(
            np.spacing(want.astype(np.float32)).astype(np.float64))
    error = np.where(np.isfinite(exact), np.minimum(error, exact), error)
    worst = int(np.argmax(error))
    assert error[worst] <= ulps, (f"{op}({x[worst]!r}) = {got[worst]!r}, reference "
                                  f"{want[worst]!r}: {error[worst]:.2f} ulp")


def _f32_bit_patterns(stride: int) -> np.ndarray:
    """Every `stride`-th f32 bit pattern from +0 to +inf, and their negatives: every binade,
    denormals included, about evenly within each."""
    x = np.arange(0, 0x7F800001, stride, dtype=np.uint32).view(np.float32)
    return np.concatenate([x, -x])


def test_tanh_over_every_binade_and_the_ends_of_its_pieces():
    """Every 997th f32 bit pattern of both signs, and the neighbours of where tanh changes
    method (0.625), clamps its argument (10) and rounds to 1 (9.01): within its 1.5 ulp;
    ±0 keep their sign, ±inf give ±1, NaN stays NaN."""
    ends = np.array([0.625, 10.0, 9.010913], np.float32)
    near = np.concatenate([ends, np.nextafter(ends, np.float32(0)),
                           np.nextafter(ends, np.float32(np.inf))])
    x = np.concatenate([_f32_bit_patterns(997), near, -near])
    got = hlo_opt.compile(unary("tanh", "f32", x.size))(x)[0]
    want = np.tanh(x.astype(np.float64))
    with np.errstate(all="ignore"):
        error = np.minimum(ulp_distance(got, want.astype(np.float32)), np.abs(
            got - want) / np.spacing(np.abs(want).astype(np.float32)).astype(np.float64))
    worst = int(np.argmax(error))
    assert error[worst] <= 1.5, f"tanh({x[worst]!r}) = {got[worst]!r}, reference {want[worst]!r}"
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan], np.float32)
    got = hlo_opt.compile(unary("tanh", "f32", special.size))(special)[0]
    assert np.array_equal(got[:4], [0.0, -0.0, 1.0, -1.0])
    assert np.array_equal(np.signbit(got[:4]), [False, True, False, True])
    assert np.isnan(got[4])


@pytest.mark.parametrize("flush", [False, True])
def test_exp_denormal_results_are_built_without_underflow(flush):
    """exp over the whole range where its result is denormal or the least normals (x in
    [-104, -85]): within its 2 ulp, the same denormals in flush-to-zero mode (they are
    built as integers, mathlib._times_pow2), 0 below."""
    x = np.concatenate([np.linspace(-104.0, -85.0, 100_000), [-104.5, -120.0, -np.inf]])
    x = x.astype(np.float32)
    got = hlo_opt.compile(unary("exponential", "f32", x.size), flush_denormals=flush)(x)[0]
    want = np.exp(x.astype(np.float64)).astype(np.float32)
    assert np.count_nonzero((want > 0) & (want < np.float32(2.0 ** -126))) > 50_000
    error = ulp_distance(got, want)
    assert error.max() <= 2, f"exp({x[np.argmax(error)]!r}): {error.max():.2f} ulp"
    assert not got[-3:].any()


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("op", ["erf", "tanh"])
def test_narrow_float_every_value(op, dtype):
    """Computed in f32 and rounded once: within one ulp of the correctly rounded result."""
    dt = {"bf16": ml_dtypes.bfloat16, "f16": np.float16}[dtype]
    x = np.arange(1 << 16, dtype=np.uint16).view(dt)
    n = x.size
    got = hlo_opt.compile(unary(op, dtype, n))(x)[0]
    with np.errstate(all="ignore"):
        want = FUNCTIONS[op][1](x.astype(np.float64)).astype(dt)
    error = ulp_distance(got, want)
    worst = int(np.argmax(error))
    assert error[worst] <= 1, f"{op}({x[worst]!r}) = {got[worst]!r}, reference {want[worst]!r}"


F64_FUNCTIONS = {"exponential": (2, np.exp), "log": (1, np.log), "log-plus-one": (2, np.log1p)}
F64_SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324, 2.2250738585072014e-308,
               2.225073858507201e-308, 709.782712893384, 709.7827128933841, 710.0, -708.39,
               -745.1332191019411, -745.1332191019412, -746.0, -1e4, 1.0, -1.0,
               -0.9999999999999999, 0.7071067811865476, 1.4142135623730951, 0.41421356237309503,
               1.7976931348623157e308, 1e-17, -1e-17, 0.5, -0.5]


@pytest.mark.skipif(np.finfo(np.longdouble).nmant <= 52, reason="needs an extended long double")
@pytest.mark.parametrize("op", list(F64_FUNCTIONS))
def test_f64_transcendental_accuracy(op):
    """Random bit patterns of both signs (every exponent, denormals included), every
    decade, the range exp overflows and underflows in, the interval log1p cancels in."""
    ulps, reference = F64_FUNCTIONS[op]
    rng = np.random.default_rng(0)
    patterns = rng.integers(0, 0x7FF0000000000000, 200_000, dtype=np.int64).view(np.float64)
    x = np.concatenate([patterns, -patterns, rng.standard_normal(200_000) * 10.0 ** rng.integers(
        -9, 4, 200_000), rng.uniform(-750, 712, 100_000), rng.uniform(-1, 1, 100_000),
        np.array(F64_SPECIAL)])
    n = x.size
    got = hlo_opt.compile(unary(op, "f64", n))(x)[0]
    with np.errstate(all="ignore"):
        want = reference(x.astype(np.longdouble))
        rounded = want.astype(np.float64)
        error = np.abs(got.astype(np.longdouble) - want) / np.spacing(np.abs(rounded))
    same = (got == rounded) | (np.isnan(got) & np.isnan(rounded))
    error = np.where(same, 0.0, np.nan_to_num(error.astype(np.float64), nan=np.inf))
    worst = int(np.argmax(error))
    assert error[worst] <= ulps, (f"{op}({x[worst]!r}) = {got[worst]!r}, reference "
                                  f"{rounded[worst]!r}: {error[worst]:.2f} ulp")
