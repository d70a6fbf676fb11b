"""8-bit floats (f8e4m3fn, f8e5m2, ...): stored as one byte, computed in f32.

Decoding is a 256-entry table made from ml_dtypes (the interpreter's own conversion), so it
is exact by construction. Encoding rounds to nearest even with integer arithmetic on the
f32 bit pattern (normal range) or a scaled roundeven (subnormal range), then applies the
format's rules, which match ml_dtypes: values past the largest finite one become inf where
the format has one, else NaN; NaN becomes the format's quiet NaN; "fnuz" formats have no
negative zero and a single NaN (0x80).
"""
from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np
from llvmlite import ir

from .intrinsics import call

I8, I32 = ir.IntType(8), ir.IntType(32)
F32 = ir.FloatType()


@dataclass(frozen=True)
class Format:
    exponent_bits: int
    mantissa_bits: int
    bias: int
    style: str            # ieee (inf, NaN), fn (no inf; NaN all ones), fnuz (NaN 0x80, no -0)
    numpy: type

    @property
    def max_encoding(self) -> int:
        e, m = self.exponent_bits, self.mantissa_bits
        if self.style == "ieee":
            return ((2 ** e - 2) << m) | (2 ** m - 1)
        if self.style == "fn":
            return ((2 ** e - 1) << m) | (2 ** m - 2)
        return 0x7F

    @property
    def overflow(self) -> int:
        """Encoding (without sign) of values past the largest finite one."""
        return {"ieee": (2 ** self.exponent_bits - 1) << self.mantissa_bits,
                "fn": 0x7F, "fnuz": 0x80}[self.style]

    @property
    def nan(self) -> int:
        if self.style == "ieee":
            return ((2 ** self.exponent_bits - 1) << self.mantissa_bits) | \
                (1 << (self.mantissa_bits - 1))
        return self.overflow


FORMATS = {
    "f8e4m3fn": Format(4, 3, 7, "fn", ml_dtypes.float8_e4m3fn),
    "f8e5m2": Format(5, 2, 15, "ieee", ml_dtypes.float8_e5m2),
    "f8e4m3": Format(4, 3, 7, "ieee", ml_dtypes.float8_e4m3),
    "f8e3m4": Format(3, 4, 3, "ieee", ml_dtypes.float8_e3m4),
    "f8e4m3fnuz": Format(4, 3, 8, "fnuz", ml_dtypes.float8_e4m3fnuz),
    "f8e5m2fnuz": Format(5, 2, 16, "fnuz", ml_dtypes.float8_e5m2fnuz),
    "f8e4m3b11fnuz": Format(4, 3, 11, "fnuz", ml_dtypes.float8_e4m3b11fnuz),
}


def _table(b: ir.IRBuilder, name: str) -> ir.GlobalVariable:
    module = b.module
    symbol = f"hlo_decode_{name}"
    try:
        return module.get_global(symbol)
    except KeyError:
        pass
    values = np.arange(256, dtype=np.uint8).view(FORMATS[name].numpy).astype(np.float32)
    table = ir.GlobalVariable(module, ir.ArrayType(F32, 256), symbol)
    table.initializer = ir.Constant(ir.ArrayType(F32, 256), [float(v) for v in values])
    table.global_constant = True
    table.linkage = "internal"
    return table


def decode(b: ir.IRBuilder, raw, name: str):
    """One stored byte -> its value as f32."""
    table = _table(b, name)
    return b.load(b.gep(table, [ir.IntType(64)(0), b.zext(raw, ir.IntType(64))], inbounds=True),
                  typ=F32)


def encode(b: ir.IRBuilder, x, name: str):
    """f32 -> the nearest byte of format `name` (ties to even), with the format's rules."""
    fmt = FORMATS[name]
    m = fmt.mantissa_bits
    bits = b.bitcast(x, I32)
    sign = b.trunc(b.lshr(bits, I32(31)), I8)
    a = call(b, "llvm.fabs", [x])
    magnitude = b.bitcast(a, I32)
    shift = 23 - m
    half = (1 << (shift - 1)) - 1
    rounded = b.add(magnitude, b.add(I32(half), b.and_(b.lshr(magnitude, I32(shift)), I32(1))))
    normal = b.sub(b.lshr(rounded, I32(shift)), I32((127 - fmt.bias) << m))
    smallest_normal = 2.0 ** (1 - fmt.bias)
    scaled = b.fmul(a, F32(2.0 ** (fmt.bias - 1 + m)))
    subnormal = b.fptosi(call(b, "llvm.roundeven", [scaled]), I32)
    tiny = b.fcmp_ordered("<", a, F32(smallest_normal))
    candidate = b.select(tiny, subnormal, normal)
    over = b.icmp_signed(">", candidate, I32(fmt.max_encoding))
    code = b.trunc(b.select(over, I32(fmt.overflow), candidate), I8)
    code = b.select(b.fcmp_unordered("uno", x, x), I8(fmt.nan), code)
    if fmt.style == "fnuz":                       # one NaN, no negative zero
        signed = b.and_(b.icmp_unsigned("!=", code, I8(0)), b.icmp_unsigned("!=", code, I8(0x80)))
        return b.or_(code, b.select(signed, b.shl(sign, I8(7)), I8(0)))
    return b.or_(code, b.shl(sign, I8(7)))
