"""XLA primitive (element) types and their numpy counterparts.

One table drives everything that needs to know about an element type: the parser checks
names against it, the interpreter picks numpy dtypes from it, cost models read `bits`, the
lowering pairs each row with its LLVM types; `accumulation_type` is the one rule both the
interpreter and the lowering sum dots and convolutions by.
Narrow floats and sub-byte integers come from ml_dtypes, which XLA itself uses; their ranges
and float formats are read through `int_info` / `float_info` here, because numpy's own
iinfo/finfo reject them (s4 is a numpy dtype of kind "V").
"""
from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np


@dataclass(frozen=True)
class DType:
    name: str            # HLO spelling, e.g. "bf16"
    kind: str            # pred | int | uint | float | complex | token | opaque
    bits: int            # storage width of one element (0 for token/opaque)
    numpy: np.dtype | None

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_integral(self) -> bool:
        return self.kind in ("int", "uint")

    @property
    def is_signed(self) -> bool:
        """A signed integer (floats carry their sign bit apart and are not "signed" here)."""
        return self.kind == "int"

    @property
    def is_array(self) -> bool:
        """True for types that hold values (everything but token and opaque)."""
        return self.numpy is not None

    @property
    def bytes(self) -> float:
        return self.bits / 8


def _table() -> dict[str, DType]:
    md = ml_dtypes
    rows = [
        ("pred", "pred", 8, np.bool_),
        ("s1", "int", 1, md.int1), ("s2", "int", 2, md.int2), ("s4", "int", 4, md.int4),
        ("s8", "int", 8, np.int8), ("s16", "int", 16, np.int16),
        ("s32", "int", 32, np.int32), ("s64", "int", 64, np.int64),
        ("u1", "uint", 1, md.uint1), ("u2", "uint", 2, md.uint2), ("u4", "uint", 4, md.uint4),
        ("u8", "uint", 8, np.uint8), ("u16", "uint", 16, np.uint16),
        ("u32", "uint", 32, np.uint32), ("u64", "uint", 64, np.uint64),
        ("f16", "float", 16, np.float16), ("bf16", "float", 16, md.bfloat16),
        ("f32", "float", 32, np.float32), ("f64", "float", 64, np.float64),
        ("f8e5m2", "float", 8, md.float8_e5m2), ("f8e4m3", "float", 8, md.float8_e4m3),
        ("f8e4m3fn", "float", 8, md.float8_e4m3fn),
        ("f8e4m3b11fnuz", "float", 8, md.float8_e4m3b11fnuz),
        ("f8e3m4", "float", 8, md.float8_e3m4), ("f8e5m2fnuz", "float", 8, md.float8_e5m2fnuz),
        ("f8e4m3fnuz", "float", 8, md.float8_e4m3fnuz),
        ("f4e2m1fn", "float", 4, md.float4_e2m1fn), ("f8e8m0fnu", "float", 8, md.float8_e8m0fnu),
        ("c64", "complex", 64, np.complex64), ("c128", "complex", 128, np.complex128),
        ("token", "token", 0, None), ("opaque", "opaque", 0, None),
    ]
    table = {name: DType(name, kind, bits, None if t is None else np.dtype(t))
             for name, kind, bits, t in rows}
    table["opaque_type"] = table["opaque"]      # accepted spelling, printed as "opaque"
    return table


DTYPES: dict[str, DType] = _table()

_BY_NUMPY: dict[np.dtype, DType] = {}
for _d in DTYPES.values():
    if _d.numpy is not None:
        _BY_NUMPY.setdefault(_d.numpy, _d)


COMPLEX_PART = {"c64": "f32", "c128": "f64"}        # complex type -> its component type
COMPLEX_OF = {"f32": "c64", "f64": "c128"}

# Classes of element kinds (DType.kind), as ops and guards name them.
KINDS = frozenset({"pred", "int", "uint", "float", "complex", "token", "opaque"})
INTEGRAL = frozenset({"int", "uint"})
FLOATING = frozenset({"float"})
FLOAT_OR_COMPLEX = frozenset({"float", "complex"})
NUMERIC = INTEGRAL | FLOAT_OR_COMPLEX
BITWISE = INTEGRAL | {"pred"}                    # and, or, xor, not
SIGNED = frozenset({"int", "float", "complex"})   # kinds with negative values (negate, abs)

# Element kinds by the values they can hold: where kinds mix, arithmetic happens in the
# later one (XLA's "higher precision type").
KIND_RANK = {"pred": 0, "uint": 1, "int": 2, "float": 3, "complex": 4}


def accumulation_type(*types: DType) -> DType:
    """The type a dot or convolution of these operand and result types sums in, before one
    conversion to the result type: floats in f32 (as XLA's CPU backend does) unless one type
    is f64 or c128, complex likewise in c64/c128, integers in the widest integer type (at
    least a byte; signed if any is), pred as or-of-ands in pred."""
    top = max((t.kind for t in types), key=KIND_RANK.__getitem__)
    wide = any(t.name in ("f64", "c128") for t in types)
    if top == "complex":
        return DTYPES["c128" if wide else "c64"]
    if top == "float":
        return DTYPES["f64" if wide else "f32"]
    if top == "pred":
        return DTYPES["pred"]
    bits = max(8, *(t.bits for t in types))
    return DTYPES[f"{'s' if any(t.is_signed for t in types) else 'u'}{bits}"]


def dtype(name: str) -> DType:
    """Look up an HLO element type by name; KeyError if unknown."""
    return DTYPES[name]


def from_numpy(dt: np.dtype) -> DType:
    """The HLO element type of a numpy dtype (e.g. float32 -> f32)."""
    return _BY_NUMPY[np.dtype(dt)]


def _as_numpy(dt) -> np.dtype:
    if isinstance(dt, DType):
        if dt.numpy is None:
            raise ValueError(f"{dt.name} has no values")
        return dt.numpy
    if isinstance(dt, str) and dt in DTYPES:
        return _as_numpy(DTYPES[dt])
    return np.dtype(dt)


def int_info(dt) -> ml_dtypes.iinfo:
    """min, max and bits of an integer type (a DType, an HLO name or a numpy dtype),
    sub-byte ones included: int_info("s4").min == -8."""
    return ml_dtypes.iinfo(_as_numpy(dt))


def float_info(dt) -> ml_dtypes.finfo:
    """max, tiny, eps, nmant, ... of a float type (a DType, an HLO name or a numpy dtype),
    narrow ones included: float_info("f8e4m3fn").max == 448."""
    return ml_dtypes.finfo(_as_numpy(dt))
