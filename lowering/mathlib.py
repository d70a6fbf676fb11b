"""Vectorizable f32 transcendental functions, emitted inline as straight-line LLVM IR.

LLVM's `llvm.exp.f32` and friends become scalar libm calls, which stop the loop vectorizer.
These are branch-free polynomial versions (selects, fma, bit tricks) that vectorize with the
loop around them. Largest errors in ulps of the f32 result against float64, over 1e6 samples
of many magnitudes plus the special values (tests/test_lowering_math.py asserts the bounds
in brackets):

    exp      1.2 [2]  Cephes expf polynomial; 2^n applied in two steps for denormal results
    log      0.8 [1]  Cephes logf; denormal inputs scaled by 2^23 first
    log1p    2.3 [3]  log(u) * x / (u - 1), u = 1 + x
    expm1    2.5 [3]  Kahan's (u - 1) * x / log(u) for |x| < 1, u - 1 beyond
    tanh     1.3 [2]  Cephes odd polynomial below 0.625, 1 - 2/(exp(2|x|) + 1) above
    logistic 2.7 [3]  1/(1+e) or e/(1+e) with e = exp(-|x|)
    erf      2.4 [3]  odd minimax polynomial (fitted here) below 1, 1 - erfc above
                      (Numerical Recipes' erfc, relative error < 1.2e-7)

XLA:CPU's own approximations are within 1-2.5 ulp (xla_oracle.py). f64 and the rarer
functions (sin, cos, tan, atan2, cbrt, pow) call libm in double, correctly rounded or within
1 ulp; bf16/f16/f8 compute in f32 and round once.
"""
from __future__ import annotations

from llvmlite import ir

from .intrinsics import call
from .ltypes import F32, I32

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
# erf(x)/x = P(x^2) on [0, 1]: relative error 1.2e-9 in float64 (fitted for this file).
ERF_POLY = [7.854086797124439e-05, -0.0008010260574020656, 0.005188335140013465,
            -0.026853815764082273, 0.11283585237855052, -0.3761262583195788,
            1.128379165727919]
# Numerical Recipes erfc: t*exp(-z*z + P(t)), t = 1/(1+z/2); fractional error < 1.2e-7.
ERFC_POLY = [0.17087277, -0.82215223, 1.48851587, -1.13520398, 0.27886807, -0.18628806,
             0.09678418, 0.37409196, 1.00002368, -1.26551223]


class _F:
    """Terse f32 arithmetic on one builder."""

    def __init__(self, b: ir.IRBuilder):
        self.b = b

    def c(self, v: float):
        return F32(v)

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
        """2**n for an i32 n in [-126, 127], as a float."""
        b = self.b
        return b.bitcast(b.shl(b.add(n, I32(127)), I32(23)), F32)


def exp(b: ir.IRBuilder, x):
    f = _F(b)
    xc = call(b, "llvm.minnum", [call(b, "llvm.maxnum", [x, f.c(-104.0)]), f.c(89.0)])
    n = call(b, "llvm.roundeven", [b.fmul(xc, f.c(LOG2E))])
    r = f.fma(n, f.c(-EXP_C1), xc)
    r = f.fma(n, f.c(-EXP_C2), r)
    z = b.fmul(r, r)
    p = f.fma(f.horner(r, EXP_POLY), z, b.fadd(r, f.c(1.0)))
    ni = b.fptosi(n, I32)
    half = b.ashr(ni, I32(1))
    y = b.fmul(b.fmul(p, f.pow2i(half)), f.pow2i(b.sub(ni, half)))
    return f.sel(f.isnan(x), x, y)


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


def expm1(b: ir.IRBuilder, x):
    """Kahan's (u-1)*x/log(u) where cancellation would hurt (|x| < 1), else plain u-1."""
    f = _F(b)
    u = exp(b, x)
    um1 = b.fsub(u, f.c(1.0))
    y = b.fdiv(b.fmul(um1, x), log(b, u))
    y = f.sel(f.eq(u, 1.0), x, y)
    return f.sel(f.lt(call(b, "llvm.fabs", [x]), 1.0), y, um1)


def tanh(b: ir.IRBuilder, x):
    f = _F(b)
    z = call(b, "llvm.fabs", [x])
    s = b.fmul(x, x)
    small = f.fma(b.fmul(f.horner(s, TANH_POLY), s), x, x)
    e = exp(b, b.fmul(call(b, "llvm.minnum", [z, f.c(10.0)]), f.c(2.0)))   # tanh(10) rounds to 1
    large = b.fsub(f.c(1.0), b.fdiv(f.c(2.0), b.fadd(e, f.c(1.0))))
    large = call(b, "llvm.copysign", [large, x])
    return f.sel(f.gt(z, 0.625), large, small)


def logistic(b: ir.IRBuilder, x):
    """1/(1+e) for x >= 0 and e/(1+e) below, with e = exp(-|x|): exp never overflows, so
    tiny results (denormals near x = -88) stay accurate."""
    f = _F(b)
    e = exp(b, b.fneg(call(b, "llvm.fabs", [x])))
    r = b.fdiv(f.c(1.0), b.fadd(f.c(1.0), e))
    return f.sel(b.fcmp_unordered("<", x, f.c(0.0)), b.fmul(e, r), r)


def erf(b: ir.IRBuilder, x):
    f = _F(b)
    z = call(b, "llvm.fabs", [x])
    inner = b.fmul(x, f.horner(b.fmul(x, x), ERF_POLY))
    zc = call(b, "llvm.minnum", [z, f.c(4.0)])
    t = b.fdiv(f.c(1.0), f.fma(zc, f.c(0.5), f.c(1.0)))
    erfc = b.fmul(t, exp(b, b.fsub(f.horner(t, ERFC_POLY), b.fmul(zc, zc))))
    outer = call(b, "llvm.copysign", [b.fsub(f.c(1.0), erfc), x])
    return f.sel(f.lt(z, 1.0), inner, f.sel(f.isnan(x), x, outer))


F32_FUNCTIONS = {"exponential": exp, "log": log, "log-plus-one": log1p,
                 "exponential-minus-one": expm1, "tanh": tanh, "logistic": logistic,
                 "erf": erf}
