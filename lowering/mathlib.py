"""Vectorizable transcendental functions, emitted inline as straight-line LLVM IR.

LLVM's `llvm.exp.f32` and friends become scalar libm calls, which stop the loop vectorizer.
These are branch-free polynomial versions (selects, fma, bit tricks) that vectorize with the
loop around them. Largest errors in ulps of the f32 result against float64, over 1e6 samples
of many magnitudes plus the special values (tests/test_lowering_math.py asserts the bounds
in brackets; tanh and erf measured on every 7th f32 bit pattern of both signs, denormals,
±0, ±inf and NaN included):

    exp      1.2 [2]  Cephes expf polynomial; denormal results built as integers
    log      0.8 [1]  Cephes logf; denormal inputs scaled by 2^23 first
    log1p    2.3 [3]  log(u) * x / (u - 1), u = 1 + x
    expm1    2.5 [3]  Kahan's (u - 1) * x / log(u) for |x| < 1, u - 1 beyond
    tanh     1.0 [1.5] Cephes odd polynomial below 0.625, 1 - 2/(exp(2|x|) + 1) above
    logistic 2.7 [3]  1/(1+e) or e/(1+e) with e = exp(-|x|)
    erf      1.0 [1.5] x + x * P(x^2) below 1, a degree 14 polynomial in |x| - 2.51 up to
                      3.92 (both fitted here), 1 above: 21 fma, no exp, no divide

f64 exp, log and log1p are inline too (Taylor coefficients, not fitted: see below); errors
in ulps of the f64 result against long double over ~1.2e6 samples (random bit patterns of
both signs, denormals included, every decade, the overflow and underflow edges, ±0, ±inf,
NaN; tests/test_lowering_math.py):

    exp      1.2 [2]  same scheme as f32, degree 13
    log      0.8 [1]  2 atanh(f / (2 + f)) around the exact f; denormals scaled by 2^54
    log1p    1.5 [2]  log(u) + (x - (u - 1)) / u, u = 1 + x

XLA:CPU's own approximations are within 1-2.5 ulp (xla_oracle.py). The other f64 functions
and the rarer f32 ones (sin, cos, tan, atan2, cbrt, pow) call libm in double, correctly
rounded or within 1 ulp; bf16/f16/f8 compute in f32 and round once.
"""
from __future__ import annotations

from typing import NamedTuple

from llvmlite import ir

from ..targets import cpu_facts
from .intrinsics import call
from .ltypes import F32, F64, I32, I64

LOG2E = 1.44269504088896341
# Cephes expf: ln 2 split so that n * C1 is exact.
EXP_C1, EXP_C2 = 0.693359375, -2.12194440e-4
EXP_POLY = [1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
            1.6666665459e-1, 5.0000001201e-1]
LOG_POLY = [7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1,
            1.4249322787e-1, -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1,
            3.3333331174e-1]
TANH_POLY = [-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1,
             -3.33332819422e-1]
# erf: discrete minimax fits (weighted by the f32 ulp of the result, coefficients rounded to
# f32 one at a time from the lowest degree, the others refitted), made for this file.
# erf(x) = x + x * ERF_SMALL(x^2) for |x| < 1 (adding x last keeps the rounding at ~0.5 ulp).
ERF_SMALL = [7.8939884e-05, -0.0008023964, 0.0051901257, -0.026854912, 0.11283616, -0.3761263,
             0.12837917]
# erf(z) = ERF_LARGE(z - ERF_CENTER) for 1 <= z < ERF_ONE; erf(ERF_CENTER) is an f32 number
# (to 1e-6 ulp), so the constant term carries no rounding error.
ERF_CENTER = 2.5088544
ERF_LARGE = [1.0918366e-06, 8.7395233e-07, -1.6990447e-05, 1.43989e-05, 8.617866e-05,
             -0.00025920587, 0.00023316008, 0.000573042, -0.0027595935, 0.005964214,
             -0.008356164, 0.008050438, -0.0052277907, 0.002083739, 0.9996119]
ERF_ONE = 3.919206              # the least f32 whose erf rounds to 1


# f64: ln 2 with the low 32 bits of its double cleared (n * LN2_HI is exact for every n
# that occurs) and the rest; exp's Taylor coefficients 1/k! for k = 13 .. 2 (the first
# omitted term, r^14/14!, is 0.03 ulp at |r| = ln 2 / 2); log's 2/(2k+1) for k = 10 .. 1
# of 2 atanh(s) = 2s + s R(s^2) (first omitted term 0.005 ulp at s^2 = 0.0295).
LN2_HI, LN2_LO = 0.6931467056274414, 4.7493250390316726e-07
EXP_POLY_F64 = [1.6059043836821613e-10, 2.08767569878681e-09, 2.505210838544172e-08,
                2.755731922398589e-07, 2.7557319223985893e-06, 2.48015873015873e-05,
                0.0001984126984126984, 0.001388888888888889, 0.008333333333333333,
                0.041666666666666664, 0.16666666666666666, 0.5]
LOG_ATANH_F64 = [0.09523809523809523, 0.10526315789473684, 0.11764705882352941,
                 0.13333333333333333, 0.15384615384615385, 0.18181818181818182,
                 0.2222222222222222, 0.2857142857142857, 0.4, 0.6666666666666666]


class _Float(NamedTuple):
    """A float type's bit layout and exp's constants for it."""
    bits: ir.IntType
    mantissa: int
    bias: int
    ln2: tuple[float, float]      # ln 2 in two parts, the first exact times any n used
    exp_poly: list[float]
    exp_range: tuple[float, float]  # exp's argument clamped here: 0 below, inf above


FLOATS = {str(F32): _Float(I32, 23, 127, (EXP_C1, EXP_C2), EXP_POLY, (-104.0, 89.0)),
          str(F64): _Float(I64, 52, 1023, (LN2_HI, LN2_LO), EXP_POLY_F64, (-746.0, 710.0))}


class _F:
    """Terse arithmetic in one float type (that of `like`, f32 by default) on one builder."""

    def __init__(self, b: ir.IRBuilder, like=None):
        self.b = b
        self.t = like.type if like is not None else F32
        self.facts = FLOATS[str(self.t)]

    def c(self, v: float):
        return self.t(v)

    def fma(self, x, y, z):
        return call(self.b, "llvm.fma", [x, y, z])

    def horner(self, x, coeffs):
        acc = self.c(coeffs[0])
        for k in coeffs[1:]:
            acc = self.fma(acc, x, self.c(k))
        return acc

    def lt(self, x, v):
        return self.b.fcmp_ordered("<", x, self.c(v) if isinstance(v, float) else v)

    def gt(self, x, v):
        return self.b.fcmp_ordered(">", x, self.c(v) if isinstance(v, float) else v)

    def eq(self, x, v):
        return self.b.fcmp_ordered("==", x, self.c(v) if isinstance(v, float) else v)

    def isnan(self, x):
        return self.b.fcmp_unordered("uno", x, x)

    def sel(self, cond, x, y):
        return self.b.select(cond, x, y)

    def pow2i(self, n):
        """2**n for an integer n of the type's width within its normal exponents."""
        b, t = self.b, self.facts
        return b.bitcast(b.shl(b.add(n, t.bits(t.bias)), t.bits(t.mantissa)), self.t)


def _exp_parts(b: ir.IRBuilder, x):
    """(p, n) with exp(x) = p * 2**n, p in [0.7, 1.42] and n an integer of x's width, for
    finite x within the type's exp_range: reduction by n ln 2 in two steps, then p = 1 + r +
    r^2 P(r) (f32: Cephes expf's degree 7; f64: Taylor to degree 13). n = x log2(e) rounded
    by adding 1.5 * 2^mantissa in one FMA (`_round_shift`): no round or convert instruction
    (5-7% of exp's and logistic's time)."""
    f = _F(b, x)
    shift = f.c(_round_shift(f))
    shifted = f.fma(x, f.c(LOG2E), shift)
    n = b.fsub(shifted, shift)
    r = f.fma(n, f.c(-f.facts.ln2[0]), x)
    r = f.fma(n, f.c(-f.facts.ln2[1]), r)
    z = b.fmul(r, r)
    return f.fma(f.horner(r, f.facts.exp_poly), z, b.fadd(r, f.c(1.0))), \
        b.sub(b.bitcast(shifted, f.facts.bits), b.bitcast(shift, f.facts.bits))


def _round_shift(f: _F) -> float:
    """1.5 * 2^mantissa: adding it to a float below 2^(mantissa - 1) in magnitude rounds that
    to an integer (to nearest even), which the sum's low mantissa bits then hold (as an
    offset from the shift's own bits)."""
    return 1.5 * 2.0 ** f.facts.mantissa


def exp(b: ir.IRBuilder, x):
    """f32 or f64: p * 2^n rounded once, results near overflow and denormal ones included
    (f32 without an underflowing operation: _times_pow2)."""
    f = _F(b, x)
    lo, hi = f.facts.exp_range
    xc = call(b, "llvm.minnum", [call(b, "llvm.maxnum", [x, f.c(lo)]), f.c(hi)])
    p, ni = _exp_parts(b, xc)
    y = _times_pow2(b, p, ni) if f.t == F32 else _exact_pow2(b, p, ni)
    return f.sel(f.isnan(x), x, y)


def _times_pow2(b: ir.IRBuilder, p, n):
    """f32 p * 2**n (p in [0.7, 1.42], n in [-150, 128]) rounded once, with no floating-point
    operation whose result is denormal or underflows: Intel cores take a microcode assist
    for each such result unless flush-to-zero is on (exp of a softmax's -100: 30x slower).
    A result below 2^-126 is built as an integer: p * 2**(n + 149), below 2^24, rounded to
    an integer is the bit pattern of p * 2**n rounded to a multiple of 2^-149, the
    denormal (or least normal) IEEE gives. One scaling serves both (vectors compute both
    sides of a select)."""
    low = b.icmp_signed("<=", n, I32(-126))
    y = _exact_pow2(b, p, b.select(low, b.add(n, I32(149)), n))
    tiny = b.bitcast(b.fptosi(call(b, "llvm.roundeven", [y]), I32), F32)
    return b.select(low, tiny, y)


def _exact_pow2(b: ir.IRBuilder, p, n):
    """p * 2**n for a normal result (f32: n in [-1, 128]): for f32 one `vscalefps` where the
    target has AVX-512 (llvm.ldexp; elsewhere LLVM calls libm per element), else two
    multiplications, by 2**(n/2) and by the rest (2**128 is no f32, 2**1024 no f64), so that
    results near overflow are one rounding of p * 2**n."""
    f = _F(b, p)
    if f.t == F32 and (b.module.triple or "").startswith("x86_64") and \
            cpu_facts.vector_isa() == 512:
        return call(b, "llvm.ldexp", [p, n])
    half = b.ashr(n, n.type(1))
    return b.fmul(b.fmul(p, f.pow2i(half)), f.pow2i(b.sub(n, half)))


def log(b: ir.IRBuilder, x):
    f = _F(b)
    tiny = f.lt(x, 1.1754943508222875e-38)
    xs = f.sel(tiny, b.fmul(x, f.c(8388608.0)), x)          # denormals: scale by 2^23
    bits = b.bitcast(xs, I32)
    e = b.sub(b.and_(b.lshr(bits, I32(23)), I32(0xFF)), I32(126))
    e = b.sub(e, b.select(tiny, I32(23), I32(0)))
    m = b.bitcast(b.or_(b.and_(bits, I32(0x807FFFFF)), I32(0x3F000000)), F32)   # [0.5, 1)
    small = f.lt(m, 0.707106781186547524)
    e = b.sub(e, b.zext(small, I32))
    m = b.fsub(f.sel(small, b.fadd(m, m), m), f.c(1.0))
    ef = b.sitofp(e, F32)
    z = b.fmul(m, m)
    y = b.fmul(b.fmul(f.horner(m, LOG_POLY), m), z)
    y = f.fma(ef, f.c(EXP_C2), y)
    y = f.fma(z, f.c(-0.5), y)
    y = f.fma(ef, f.c(EXP_C1), b.fadd(m, y))
    inf = f.c(float("inf"))
    y = f.sel(f.eq(x, inf), inf, y)
    y = f.sel(f.eq(x, 0.0), f.c(float("-inf")), y)
    return f.sel(b.fcmp_unordered("<", x, f.c(0.0)), f.c(float("nan")), y)


def log1p(b: ir.IRBuilder, x):
    f = _F(b)
    u = b.fadd(x, f.c(1.0))
    d = b.fsub(u, f.c(1.0))
    y = b.fmul(log(b, u), b.fdiv(x, d))
    y = f.sel(f.eq(u, float("inf")), u, y)
    return f.sel(f.eq(d, 0.0), x, y)


def log_f64(b: ir.IRBuilder, x):
    """x = 2^e (1 + f) with 1 + f in [sqrt(1/2), sqrt(2)); log(1 + f) = 2 atanh(s), s =
    f / (2 + f), taken as f - (f^2/2 - s (f^2/2 + R(s^2))) so that the exact f carries the
    result and the rounded terms only its small correction; e ln 2 added in two parts."""
    f = _F(b, x)
    tiny = f.lt(x, 2.2250738585072014e-308)
    xs = f.sel(tiny, b.fmul(x, f.c(18014398509481984.0)), x)    # denormals: times 2^54
    bits = b.bitcast(xs, I64)
    # Adding 1.0's bits less sqrt(1/2)'s carries into the exponent field exactly when the
    # mantissa is at least sqrt(2)'s; adding sqrt(1/2)'s back to the mantissa field then
    # gives 1 + f in [sqrt(1/2), sqrt(2)), e the matching exponent
    shifted = b.add(bits, I64(0x3FF0000000000000 - 0x3FE6A09E667F3BCD))
    e = b.sub(b.ashr(shifted, I64(52)), I64(0x3FF))
    e = b.sub(e, b.select(tiny, I64(54), I64(0)))
    m = b.add(b.and_(shifted, I64(0x000FFFFFFFFFFFFF)), I64(0x3FE6A09E667F3BCD))
    fr = b.fsub(b.bitcast(m, F64), f.c(1.0))
    s = b.fdiv(fr, b.fadd(fr, f.c(2.0)))
    z = b.fmul(s, s)
    hfsq = b.fmul(b.fmul(fr, fr), f.c(0.5))
    r = b.fmul(f.horner(z, LOG_ATANH_F64), z)
    ef = b.sitofp(e, F64)
    y = f.fma(s, b.fadd(hfsq, r), b.fmul(ef, f.c(LN2_LO)))
    y = f.fma(ef, f.c(LN2_HI), b.fsub(fr, b.fsub(hfsq, y)))
    inf = f.c(float("inf"))
    y = f.sel(f.eq(x, inf), inf, y)
    y = f.sel(f.eq(x, 0.0), f.c(float("-inf")), y)
    return f.sel(b.fcmp_unordered("<", x, f.c(0.0)), f.c(float("nan")), y)


def log1p_f64(b: ir.IRBuilder, x):
    """log(u) for u = 1 + x rounded, plus the first-order effect of that rounding,
    (x - (u - 1)) / u: within the log's own error wherever u is not exactly 1 + x."""
    f = _F(b, x)
    u = b.fadd(x, f.c(1.0))
    y = b.fadd(log_f64(b, u), b.fdiv(b.fsub(x, b.fsub(u, f.c(1.0))), u))
    y = f.sel(f.eq(u, float("inf")), u, y)
    y = f.sel(f.eq(u, 0.0), f.c(float("-inf")), y)
    return f.sel(f.eq(x, 0.0), x, y)


def expm1(b: ir.IRBuilder, x):
    """Kahan's (u-1)*x/log(u) where cancellation would hurt (|x| < 1), else plain u-1."""
    f = _F(b)
    u = exp(b, x)
    um1 = b.fsub(u, f.c(1.0))
    y = b.fdiv(b.fmul(um1, x), log(b, u))
    y = f.sel(f.eq(u, 1.0), x, y)
    return f.sel(f.lt(call(b, "llvm.fabs", [x]), 1.0), y, um1)


def tanh(b: ir.IRBuilder, x):
    """An odd polynomial below 0.625; 1 - 2/(exp(2|x|) + 1) above, where |x| is clamped at 10
    (tanh(10) rounds to 1). Both sides are computed (vectors run both) in few operations:
    exp(2z) = p * 2^n with n rounded as _exp_parts does (the sum's low bits, shifted into an
    exponent field, are 2^n), the reduction done on z itself, r/2 = z - n ln2/2, with
    Cephes' coefficients scaled by powers of two for it, e + 1 as one FMA, and x's sign bit
    OR-ed into the result (the large side is positive; the polynomial's x + x^3 P(x^2)
    makes -0 +0). NaN passes through the clamp and the polynomial; ±inf gives ±1.
    Not a rational x P(x^2) / Q(x^2) clamped at 9.2: fitted to 0.4 ulp with 5 + 5
    coefficients (0.01 with 6 + 6), its f32 evaluation still errs by 5-6 ulp near 1, where
    the roundings of both polynomials and the divide add up. Nor (e^2z - 1)/(e^2z + 1) on
    both sides with expm1 from the same reduction: 18% fewer operations, but 2 ulp below
    0.5 (three roundings of the same sign)."""
    f = _F(b)
    z = call(b, "llvm.fabs", [x])
    zc = f.sel(f.gt(z, 10.0), f.c(10.0), z)           # NaN stays NaN
    shift = f.c(_round_shift(f))
    shifted = f.fma(zc, f.c(2 * LOG2E), shift)
    n = b.fsub(shifted, shift)
    h = f.fma(n, f.c(-EXP_C1 / 2), zc)
    h = f.fma(n, f.c(-EXP_C2 / 2), h)                  # r / 2, r = 2z - n ln 2
    # p = 1 + r + r^2 P(r) with r = 2h: P's coefficient of r^k times 2^(k + 2)
    scaled = [c * 2.0 ** (len(EXP_POLY) + 1 - i) for i, c in enumerate(EXP_POLY)]
    p = f.fma(f.horner(h, scaled), b.fmul(h, h), f.fma(h, f.c(2.0), f.c(1.0)))
    two_n = b.bitcast(b.add(b.shl(b.bitcast(shifted, I32), I32(23)), I32(127 << 23)), F32)
    large = b.fsub(f.c(1.0), b.fdiv(f.c(2.0), f.fma(p, two_n, f.c(1.0))))
    s = b.fmul(x, x)
    small = f.fma(f.horner(s, TANH_POLY), b.fmul(s, x), x)    # -0 would come out +0
    y = b.bitcast(f.sel(f.gt(z, 0.625), large, small), I32)
    return b.bitcast(b.or_(y, b.and_(b.bitcast(x, I32), I32(-(1 << 31)))), F32)


def logistic(b: ir.IRBuilder, x):
    """1/(1+e) for x >= 0 and e/(1+e) below, with e = exp(-|x|): exp never overflows, so
    tiny results (denormals near x = -88) stay accurate."""
    f = _F(b)
    e = exp(b, b.fneg(call(b, "llvm.fabs", [x])))
    r = b.fdiv(f.c(1.0), b.fadd(f.c(1.0), e))
    return f.sel(b.fcmp_unordered("<", x, f.c(0.0)), b.fmul(e, r), r)


def erf(b: ir.IRBuilder, x):
    """Two polynomials and selects, no exp and no divide. NaN passes through the large-|x|
    polynomial; ±inf and |x| >= ERF_ONE give ±1; -0 and denormals keep their sign."""
    f = _F(b)
    z = call(b, "llvm.fabs", [x])
    small = f.fma(x, f.horner(b.fmul(x, x), ERF_SMALL), x)
    large = f.horner(b.fsub(z, f.c(ERF_CENTER)), ERF_LARGE)
    large = f.sel(b.fcmp_ordered(">=", z, f.c(ERF_ONE)), f.c(1.0), large)
    return f.sel(f.lt(z, 1.0), small, call(b, "llvm.copysign", [large, x]))


F64_FUNCTIONS = {"exponential": exp, "log": log_f64, "log-plus-one": log1p_f64}
F32_FUNCTIONS = {"exponential": exp, "log": log, "log-plus-one": log1p,
                 "exponential-minus-one": expm1, "tanh": tanh, "logistic": logistic,
                 "erf": erf}
