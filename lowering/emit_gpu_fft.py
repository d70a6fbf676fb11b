"""fft for the GPU: a direct discrete Fourier transform per output element.

The GPU computes each output element in a thread of its own (emit_gpu's loops), so fft is
there the sum over the transformed dimensions of input x twiddle, with the twiddles
exp(-+2 pi i j / L) read from tables of the exact double values and the sum kept in f64,
then rounded once, as the interpreter computes it (in complex128). RFFT reads a real input;
IRFFT rebuilds the Hermitian part it is not given (X[-k] = conj(X[k]) over every transformed
dimension) and keeps the real part, which is numpy's rule for the imaginary parts of X[0]
and X[L/2]. O(L^2) per transformed line: correct, not fast. The CPU runs emit_fft's FFT.
"""
from __future__ import annotations

import math

import numpy as np
from llvmlite import ir

from .elemental import Elemental, register
from .emit_loops import Index, nest
from .ltypes import F64, I64, component, elem

MATRIX_POINTS = 64      # transforms this short get an n x n twiddle table (n^2 doubles)


def _twiddles(b: ir.IRBuilder, n: int, sign: int):
    """Global tables cos/sin(sign * 2 pi m / n) in double: for m = k * j mod n, row k
    of an n x n matrix, when n <= MATRIX_POINTS (the sum over j then reads them
    contiguously and vectorizes without gathers), else for m < n (read at k * j mod n)."""
    full = n <= MATRIX_POINTS
    name = f"hlo_twiddle_{n}_{'p' if sign > 0 else 'm'}"
    module = b.module
    try:
        return module.get_global(name + ".re"), module.get_global(name + ".im")
    except KeyError:
        pass
    m = np.arange(n)
    angles = sign * 2 * np.pi * ((np.outer(m, m) % n).ravel() if full else m) / n
    tables = []
    for part, values in (("re", np.cos(angles)), ("im", np.sin(angles))):
        t = ir.ArrayType(F64, values.size)
        g = ir.GlobalVariable(module, t, f"{name}.{part}")
        g.initializer = ir.Constant(t, [float(v) for v in values])
        g.global_constant = True
        g.linkage = "internal"
        tables.append(g)
    return tuple(tables)


def _twiddle_index(b, k, j, n: int):
    """Where twiddle (k, j) of an n-point transform is in its tables (see _twiddles)."""
    if n <= MATRIX_POINTS:
        return b.add(b.mul(_v(k), I64(n)), _v(j))
    return b.urem(b.mul(_v(k), _v(j)), I64(n))


def _load(b, table, i):
    return b.load(b.gep(table, [I64(0), i], inbounds=True), typ=F64)


def fft_value(gen: Elemental, inst, index: Index):
    b = gen.b
    x = inst.operands[0]
    kind = inst.attrs.get("fft_type", "FFT")
    lengths = list(inst.attrs["fft_length"])
    r = len(lengths)
    sign = 1 if kind in ("IFFT", "IRFFT") else -1
    outs = index.values(b)
    batch, ks = outs[:len(outs) - r], outs[len(outs) - r:]
    in_et = elem(x.shape.element_type)
    acc_re, acc_im = gen.alloca(F64), gen.alloca(F64)
    b.store(F64(0.0), acc_re)
    b.store(F64(0.0), acc_im)
    tables = [_twiddles(b, n, sign) for n in lengths]
    with nest(b, lengths, "f") as ns:
        gen.push_scope()
        coords = list(ns)
        conj = None
        if kind == "IRFFT":                  # X[k] for k_last > L/2 is conj(X[-k mod L])
            upper = b.icmp_signed(">=", _v(coords[-1]), I64(x.shape.dims[-1]))
            coords = [b.select(upper, _mirror(b, c, n), _v(c)) for c, n in zip(coords, lengths)]
            conj = upper
        v = gen.value(x, Index(x.shape.dims, values=list(batch) + coords))
        re, im = (v if in_et.kind == "complex" else (v, v.type(0.0)))
        re, im = _to64(b, re), _to64(b, im)
        if conj is not None:
            im = b.select(conj, b.fneg(im), im)
        w_re, w_im = F64(1.0), F64(0.0)
        for k, n, length, (t_re, t_im) in zip(ks, ns, lengths, tables):
            j = _twiddle_index(b, k, n, length)
            c, s = _load(b, t_re, j), _load(b, t_im, j)
            w_re, w_im = (b.fsub(b.fmul(w_re, c), b.fmul(w_im, s)),
                          b.fadd(b.fmul(w_re, s), b.fmul(w_im, c)))
        term_re = b.fsub(b.fmul(re, w_re), b.fmul(im, w_im))
        term_im = b.fadd(b.fmul(re, w_im), b.fmul(im, w_re))
        for slot, term in ((acc_re, term_re), (acc_im, term_im)):
            total = b.fadd(b.load(slot, typ=F64), term, flags=("reassoc",))   # vectorizable
            b.store(total, slot)
        gen.pop_scope()
    re, im = b.load(acc_re, typ=F64), b.load(acc_im, typ=F64)
    if sign > 0:
        scale = F64(1.0 / math.prod(lengths))
        re, im = b.fmul(re, scale), b.fmul(im, scale)
    out = component(elem(inst.shape.element_type))
    if out.compute != F64:
        re, im = b.fptrunc(re, out.compute), b.fptrunc(im, out.compute)
    return re if kind == "IRFFT" else (re, im)


def _mirror(b, c, n: int):
    """(n - c) mod n for 0 <= c < n."""
    flipped = b.sub(I64(n), _v(c))
    return b.select(b.icmp_signed("==", flipped, I64(n)), I64(0), flipped)


def _v(x):
    return I64(x) if isinstance(x, int) else x


def _to64(b, x):
    return b.fpext(x, F64) if x.type != F64 else x


register({"fft": fft_value})
