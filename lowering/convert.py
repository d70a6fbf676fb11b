"""Element type changes: convert, bitcast-convert, reduce-precision.

convert follows the interpreter's (and XLA:CPU's) rules: float->int truncates, saturates and
maps NaN to 0 (llvm.fpto[su]i.sat); int->narrow float goes through f64 and f32 as XLA rounds;
f64->bf16 rounds through f32 (as ml_dtypes does) but f64->f16 rounds once, in integer
arithmetic (libcalls.narrow_bits: only AVX512-FP16 has an instruction for it, and this
vectorizes); anything->pred is `!= 0`; complex->real keeps the real part.
"""
from __future__ import annotations

from llvmlite import ir

from . import libcalls
from .intrinsics import call
from .ltypes import F16, F32, F64, I8, I64, ElemType, component, elem, from_storage, \
    round_to, supported, to_storage


def convert(b: ir.IRBuilder, x, src: ElemType, dst: ElemType, inst=None):
    if src.name == dst.name:
        return x
    if dst.kind == "pred":
        if src.kind == "complex":
            return b.or_(_nonzero(b, x[0], component(src)), _nonzero(b, x[1], component(src)))
        return _nonzero(b, x, src)
    if src.kind == "pred":
        x, src = b.zext(x, I8), elem("u8")
    if src.kind == "complex":
        if dst.kind == "complex":
            return tuple(convert(b, v, component(src), component(dst)) for v in x)
        x, src = x[0], component(src)
    if dst.kind == "complex":
        part = component(dst)
        return (convert(b, x, src, part), part.compute(0.0))
    if dst.is_int:
        if src.is_float:
            name = "llvm.fptosi.sat" if dst.signed else "llvm.fptoui.sat"
            return call(b, f"{name}.{_int_name(dst)}", [x], ret=dst.compute, overloaded=True)
        return _resize_int(b, x, src, dst)
    if src.is_int:                                   # int -> float
        to_float = b.sitofp if src.signed else b.uitofp
        if dst.narrow:
            return round_to(b, b.fptrunc(to_float(x, F64), F32), dst)
        return to_float(x, dst.compute)
    return _float_to_float(b, x, dst)


def _nonzero(b, x, t: ElemType):
    if t.is_float:
        return b.fcmp_unordered("!=", x, x.type(0.0))
    return b.icmp_unsigned("!=", x, x.type(0))


def _int_name(t: ElemType) -> str:
    """fptosi.sat is overloaded on the result, then the operand: `.i32.f32`. The operand
    suffix is appended by `call`."""
    return f"i{t.compute.width}"


def _resize_int(b, x, src: ElemType, dst: ElemType):
    sw, dw = x.type.width, dst.compute.width
    if sw == dw:
        return x
    if sw > dw:
        return b.trunc(x, dst.compute)
    return (b.sext if src.signed else b.zext)(x, dst.compute)


def _float_to_float(b, x, dst: ElemType):
    if dst.name == "f64":
        return b.fpext(x, F64) if x.type == F32 else x
    if dst.name == "f16" and x.type == F64:           # one rounding, as numpy does
        bits = libcalls.narrow_bits(b, b.bitcast(x, I64), libcalls.F64, libcalls.F16)
        return b.fpext(b.bitcast(bits, F16), F32)
    if x.type == F64:
        x = b.fptrunc(x, F32)
    return round_to(b, x, dst)


def bitcast_convert(b: ir.IRBuilder, x, src: ElemType, dst: ElemType, inst=None):
    """Reinterpret the bits of one element as another type of the same width."""
    raw = to_storage(b, x, src)
    width = src.bits
    bits = raw if isinstance(raw.type, ir.IntType) else b.bitcast(raw, ir.IntType(width))
    target = dst.storage
    value = bits if isinstance(target, ir.IntType) else b.bitcast(bits, target)
    return from_storage(b, value, dst)


_MANTISSA = {"f16": 10, "bf16": 7, "f32": 23, "f64": 52}   # reduce-precision operands


def reduce_precision(b: ir.IRBuilder, x, src: ElemType, dst: ElemType, inst):
    """Round to `mantissa_bits` (nearest even) and flush what `exponent_bits` cannot hold to
    ±0 / ±inf, on the bit pattern of the operand's own type (XLA's EmitReducePrecisionIR)."""
    exponent_bits, mantissa_bits = inst.attrs["exponent_bits"], inst.attrs["mantissa_bits"]
    nbits, src_m = src.bits, _MANTISSA[src.name]
    src_e = nbits - 1 - src_m
    it = ir.IntType(nbits)
    raw = to_storage(b, x, src)
    u = raw if isinstance(raw.type, ir.IntType) else b.bitcast(raw, it)
    sign = it(1 << (nbits - 1))
    exp_mask_value = ((1 << src_e) - 1) << src_m
    is_nan = b.icmp_unsigned(">", b.and_(u, it(~(1 << (nbits - 1)) & ((1 << nbits) - 1))),
                             it(exp_mask_value))
    if mantissa_bits < src_m:
        drop = src_m - mantissa_bits
        last = 1 << drop
        bias = b.add(b.lshr(b.and_(u, it(last)), it(drop)), it((1 << (drop - 1)) - 1))
        u = b.and_(b.add(u, bias), it(~(last - 1) & ((1 << nbits) - 1)))
    if exponent_bits < src_e:
        bias = (1 << (src_e - 1)) - 1
        reduced = (1 << (exponent_bits - 1)) - 1
        exponent = b.and_(u, it(exp_mask_value))
        signed_zero = b.and_(u, sign)
        overflow = b.icmp_unsigned(">", exponent, it((bias + reduced) << src_m))
        u = b.select(overflow, b.or_(signed_zero, it(exp_mask_value)), u)
        underflow = b.icmp_unsigned("<=", exponent, it((bias - reduced) << src_m))
        u = b.select(underflow, signed_zero, u)
    value = u if isinstance(src.storage, ir.IntType) else b.bitcast(u, src.storage)
    return b.select(is_nan, x, from_storage(b, value, src))


CONVERSIONS = {"convert": convert, "bitcast-convert": bitcast_convert,
               "reduce-precision": reduce_precision}


def convert_lowerable(inst) -> str | None:
    op = inst.opcode
    if op not in CONVERSIONS:
        return f"no elementwise emitter for {op}"
    src, dst = inst.operands[0].shape.element_type, inst.shape.element_type
    for t in (src, dst):
        if not supported(t):
            return f"element type {t}"
    if op == "bitcast-convert":
        a, c = elem(src), elem(dst)
        if a.bits != c.bits or "complex" in (a.kind, c.kind):
            return "bitcast-convert between element types of different widths"
    if op == "reduce-precision" and src not in _MANTISSA:
        return f"reduce-precision of {src}"
    return None


