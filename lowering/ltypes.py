"""HLO element types as LLVM types: how an element sits in memory and what it is computed in.

Kernels load every element into its *compute* type and store it back in its *storage* type:
pred is i8 in memory and i1 in registers; bf16, f16 and the 8-bit floats (float8.py)
compute in f32 (as XLA's CPU backend does) and are rounded back to their own precision after
every operation; complex numbers are pairs (re, im) of their component type. One table row
per supported element type; anything else (sub-byte types, f8e8m0fnu) is not lowered and
falls back to the interpreter.
"""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from ..dtypes import COMPLEX_PART, DTYPES, DType
from . import float8

I1, I8, I16, I32, I64 = (ir.IntType(n) for n in (1, 8, 16, 32, 64))
F16, F32, F64 = ir.HalfType(), ir.FloatType(), ir.DoubleType()
PTR = ir.PointerType()
VOID = ir.VoidType()


@dataclass(frozen=True)
class ElemType:
    """An element type's LLVM types; what it is (kind, width) comes from its DType."""
    dtype: DType
    storage: ir.Type   # one element (one component for complex) in memory
    compute: ir.Type   # one element (one component) in registers

    # What the element is, read from its DType.
    name = property(lambda self: self.dtype.name)
    kind = property(lambda self: self.dtype.kind)        # pred | int | uint | float | complex
    bits = property(lambda self: self.dtype.bits)        # storage bits of one element
    is_float = property(lambda self: self.dtype.is_float)
    is_int = property(lambda self: self.dtype.is_integral)
    signed = property(lambda self: self.dtype.is_signed)

    @property
    def narrow(self) -> bool:
        """Stored narrower than it is computed (bf16, f16)."""
        return self.kind == "float" and self.bits < 32

    @property
    def nbytes(self) -> int:
        return self.bits // 8


# name: (storage, compute)
_LLVM_TYPES = {
    "pred": (I8, I1),
    "s8": (I8, I8), "s16": (I16, I16), "s32": (I32, I32), "s64": (I64, I64),
    "u8": (I8, I8), "u16": (I16, I16), "u32": (I32, I32), "u64": (I64, I64),
    "f16": (F16, F32), "bf16": (I16, F32), "f32": (F32, F32), "f64": (F64, F64),
    "c64": (F32, F32), "c128": (F64, F64),
    **dict.fromkeys(("f8e4m3fn", "f8e5m2", "f8e4m3", "f8e3m4", "f8e4m3fnuz", "f8e5m2fnuz",
                     "f8e4m3b11fnuz"), (I8, F32)),
}
ELEM_TYPES: dict[str, ElemType] = {name: ElemType(DTYPES[name], *types)
                                   for name, types in _LLVM_TYPES.items()}


def elem(name: str) -> ElemType:
    """The row for an HLO element type; KeyError for types that are not lowered."""
    return ELEM_TYPES[name]


def supported(name: str) -> bool:
    return name in ELEM_TYPES


def array_bytes(shape) -> int:
    """Bytes an array takes in the runtime's buffers: numpy's layout, which kernels, the
    interpreter fallback and callers' arrays share. Sub-byte types (s4, u2, ...) take one
    byte per element there, where `Shape.byte_size` counts them packed as XLA does."""
    return shape.num_elements * shape.dtype.numpy.itemsize


def component(et: ElemType) -> ElemType:
    """The real type of a complex type's parts (c64 -> f32); other types map to themselves."""
    part = COMPLEX_PART.get(et.name)
    return et if part is None else ELEM_TYPES[part]


# ------------------------------------------------------------------ memory <-> registers

def opaque(b: ir.IRBuilder, ptr):
    """A typed pointer (what llvmlite's alloca returns) as a plain `ptr`, so any type may be
    loaded or stored through it. llvmlite's bitcast helper drops pointer-to-pointer casts
    as no-ops, so the (equally no-op) cast instruction is made directly."""
    if getattr(ptr.type, "is_opaque", True):
        return ptr
    cast = ir.instructions.CastInstr(b.block, "bitcast", ptr, PTR)
    b._insert(cast)
    return cast


def gep(b: ir.IRBuilder, ptr, et: ElemType, index):
    """Address of element `index` (component 0 for complex)."""
    if et.kind == "complex":
        index = b.shl(index, index.type(1))
    return b.gep(ptr, [index], inbounds=True, source_etype=et.storage)


def load(b: ir.IRBuilder, ptr, et: ElemType, index):
    """Element `index` of the buffer at `ptr`, in the compute type."""
    addr = gep(b, ptr, et, index)
    if et.kind == "complex":
        im = b.gep(addr, [I64(1)], inbounds=True, source_etype=et.storage)
        return (b.load(addr, typ=et.storage), b.load(im, typ=et.storage))
    raw = b.load(addr, typ=et.storage)
    return from_storage(b, raw, et)


def store(b: ir.IRBuilder, value, ptr, et: ElemType, index) -> None:
    addr = gep(b, ptr, et, index)
    if et.kind == "complex":
        b.store(value[0], addr)
        b.store(value[1], b.gep(addr, [I64(1)], inbounds=True, source_etype=et.storage))
        return
    b.store(to_storage(b, value, et), addr)


def from_storage(b: ir.IRBuilder, raw, et: ElemType):
    if et.name == "pred":
        return b.icmp_unsigned("!=", raw, raw.type(0))
    if et.bits == 8 and et.is_float:
        return float8.decode(b, raw, et.name)
    if et.name == "f16":
        return b.fpext(raw, F32)
    if et.name == "bf16":
        return b.bitcast(b.shl(b.zext(raw, I32), I32(16)), F32)
    return raw


def to_storage(b: ir.IRBuilder, value, et: ElemType):
    if et.name == "pred":
        return b.zext(value, I8)
    if et.bits == 8 and et.is_float:
        return float8.encode(b, value, et.name)
    if et.name == "f16":
        return b.fptrunc(value, F16)
    if et.name == "bf16":
        return bf16_bits(b, value)
    return value


def bf16_bits(b: ir.IRBuilder, x):
    """f32 -> bf16 bits, round to nearest even; NaN becomes the quiet NaN of its sign, as
    ml_dtypes does. Integer arithmetic, so denormals are kept and loops vectorize (the
    AVX-512 BF16 instruction would flush denormals). A value widened from bf16 bits
    (`from_storage`: a rounded result, a loaded element) gives back those bits: rounding it
    again would change nothing, but LLVM cannot see that through the NaN select (4 of a
    bf16 exp's 38 vector instructions); a NaN loaded and stored so keeps its payload, as a
    copy in the interpreter does."""
    held = _widened_bf16(x)
    if held is not None:
        return held
    bits = b.bitcast(x, I32)
    lsb = b.and_(b.lshr(bits, I32(16)), I32(1))
    rounded = b.lshr(b.add(bits, b.add(lsb, I32(0x7FFF))), I32(16))
    quiet = b.or_(b.and_(b.lshr(bits, I32(16)), I32(0x8000)), I32(0x7FC0))
    is_nan = b.fcmp_unordered("uno", x, x)
    return b.trunc(b.select(is_nan, quiet, rounded), I16)


def _widened_bf16(x):
    """The i16 `t` if x is bitcast(shl(zext(t), 16)) to f32, else None."""
    if not (isinstance(x, ir.CastInstr) and x.opname == "bitcast"):
        return None
    shifted = x.operands[0]
    if not (isinstance(shifted, ir.Instruction) and shifted.opname == "shl"
            and isinstance(shifted.operands[1], ir.Constant)
            and shifted.operands[1].constant == 16):
        return None
    wide = shifted.operands[0]
    if isinstance(wide, ir.CastInstr) and wide.opname == "zext" and wide.operands[0].type == I16:
        return wide.operands[0]
    return None


def round_to(b: ir.IRBuilder, value, et: ElemType):
    """A computed value rounded to `et`'s own precision, still in the compute type."""
    if not et.narrow:
        return value
    return from_storage(b, to_storage(b, value, et), et)


def select(b: ir.IRBuilder, cond, x, y):
    """`cond ? x : y` on element values (complex ones part by part)."""
    if isinstance(x, tuple):
        return tuple(b.select(cond, xi, yi) for xi, yi in zip(x, y))
    return b.select(cond, x, y)


def zero(et: ElemType):
    if et.kind == "complex":
        return (et.compute(0.0), et.compute(0.0))
    if et.kind == "float":
        return et.compute(0.0)
    return et.compute(0)
