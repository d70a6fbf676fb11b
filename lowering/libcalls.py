"""What compiled code may call outside itself: the soft-float helpers we define, and the one
list of symbols the runtime provides.

LLVM turns an operation the target CPU has no instruction for into a call: without F16C
every f16 load and store calls `__extendhfsf2` / `__truncsfhf2`, and without AVX512-FP16
`fptrunc double -> half` calls `__truncdfhf2`. Those helpers live in compiler-rt or libgcc,
which the JIT does not load, so we define them here as integer arithmetic on bit patterns
(module `hlo_softfloat`, compiled into the JIT once per process before any kernel). NaNs
come out quiet with their sign and leading payload bits, as the x86 instructions do, so
code for every CPU gives the same bits.

`PROVIDED` is the contract between code generation and the JIT: jit.py refuses (with an
UnsupportedError) an object file that needs any symbol not defined by code already in the
JIT or listed here and found in the process, because MCJIT aborts the whole process on a
symbol it cannot resolve; tests/test_native_portability.py compiles kernels for several
CPU models to check that the list is complete.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import llvmlite.binding as llvm
from llvmlite import ir


@dataclass(frozen=True)
class BinaryFormat:
    """An IEEE-754 binary interchange format."""
    exponent_bits: int
    mantissa_bits: int

    @property
    def width(self) -> int:
        return 1 + self.exponent_bits + self.mantissa_bits

    @property
    def bias(self) -> int:
        return (1 << (self.exponent_bits - 1)) - 1

    @property
    def inf(self) -> int:
        """Bits of +inf (also the largest magnitude that is not a NaN)."""
        return ((1 << self.exponent_bits) - 1) << self.mantissa_bits

    @property
    def mantissa_mask(self) -> int:
        return (1 << self.mantissa_bits) - 1

    @property
    def int_type(self) -> ir.IntType:
        return ir.IntType(self.width)

    @property
    def float_type(self) -> ir.Type:
        return {16: ir.HalfType(), 32: ir.FloatType(), 64: ir.DoubleType()}[self.width]


F16, F32, F64 = BinaryFormat(5, 10), BinaryFormat(8, 23), BinaryFormat(11, 52)


def narrow_bits(b: ir.IRBuilder, u, src: BinaryFormat, dst: BinaryFormat):
    """Bits of `src` (an integer value) rounded once, to nearest even, to `dst`'s bits:
    overflow gives ±inf, results below dst's normal range are dst subnormals or ±0.
    Straight-line integer code (selects, no branches), so loops of it vectorize."""
    it = src.int_type
    shift = src.mantissa_bits - dst.mantissa_bits
    a = b.and_(u, it(src.inf | src.mantissa_mask))                        # |u|
    sign = b.shl(b.trunc(b.lshr(u, it(src.width - 1)), dst.int_type), dst.int_type(dst.width - 1))

    def round_shift(x, by):
        """x >> by, rounded to nearest even (0 < by < width - 1)."""
        odd = b.and_(b.lshr(x, by), it(1))
        return b.lshr(b.add(x, b.add(b.sub(b.shl(it(1), b.sub(by, it(1))), it(1)), odd)), by)

    # dst normal range: rebias the exponent field; a carry out of the mantissa moves the
    # exponent up (and past the largest finite value gives exactly inf, clamped below).
    rebias = (src.bias - dst.bias) << src.mantissa_bits
    normal = round_shift(b.sub(a, it(rebias)), it(shift))
    normal = b.select(b.icmp_unsigned(">", normal, it(dst.inf)), it(dst.inf), normal)
    # dst subnormal range: the significand (with its implicit bit) shifted further right
    # by how far the exponent is below dst's smallest normal one; far below rounds to 0.
    exponent = b.lshr(a, it(src.mantissa_bits))
    is_normal_src = b.icmp_unsigned("!=", exponent, it(0))
    significand = b.or_(b.and_(a, it(src.mantissa_mask)),
                        b.shl(b.zext(is_normal_src, it), it(src.mantissa_bits)))
    exponent = b.select(is_normal_src, exponent, it(1))
    by = b.sub(it(shift + 1 + src.bias - dst.bias), exponent)
    by = b.select(b.icmp_unsigned(">", by, it(src.mantissa_bits + 2)), it(src.mantissa_bits + 2), by)
    subnormal = round_shift(significand, by)
    in_normal_range = b.icmp_unsigned(">=", a, it((src.bias - dst.bias + 1) << src.mantissa_bits))
    finite = b.select(in_normal_range, normal, subnormal)
    quiet_nan = b.or_(b.lshr(b.and_(a, it(src.mantissa_mask)), it(shift)),
                      it(dst.inf | (1 << (dst.mantissa_bits - 1))))
    magnitude = b.select(b.icmp_unsigned(">", a, it(src.inf)), quiet_nan, finite)
    return b.or_(b.trunc(magnitude, dst.int_type), sign)


def widen_bits(b: ir.IRBuilder, u, src: BinaryFormat, dst: BinaryFormat):
    """Bits of `src` (an integer value) as `dst`'s bits, exactly. Subnormals become normal
    numbers: their significand converted and scaled by a power of two in dst's type."""
    it = dst.int_type
    shift = dst.mantissa_bits - src.mantissa_bits
    a = b.zext(b.and_(u, src.int_type(src.inf | src.mantissa_mask)), it)
    sign = b.shl(b.zext(b.lshr(u, src.int_type(src.width - 1)), it), it(dst.width - 1))
    normal = b.add(b.shl(a, it(shift)), it((dst.bias - src.bias) << dst.mantissa_bits))
    mantissa = b.and_(a, it(src.mantissa_mask))
    scaled = b.fmul(b.uitofp(mantissa, dst.float_type),
                    dst.float_type(2.0 ** (1 - src.bias - src.mantissa_bits)))
    subnormal = b.bitcast(scaled, it)
    quiet = b.select(b.icmp_unsigned("!=", mantissa, it(0)), it(1 << (dst.mantissa_bits - 1)), it(0))
    special = b.or_(b.or_(b.shl(mantissa, it(shift)), it(dst.inf)), quiet)
    exponent = b.lshr(a, it(src.mantissa_bits))
    magnitude = b.select(b.icmp_unsigned("==", exponent, it(0)), subnormal,
                         b.select(b.icmp_unsigned("==", exponent, it(src.inf >> src.mantissa_bits)),
                                  special, normal))
    return b.or_(magnitude, sign)


def convert_bits(b: ir.IRBuilder, u, src: BinaryFormat, dst: BinaryFormat):
    return (narrow_bits if dst.width < src.width else widen_bits)(b, u, src, dst)


# The helpers LLVM calls for conversions the CPU cannot do: name -> (source, result).
SOFT_FLOAT = {"__extendhfsf2": (F16, F32), "__truncsfhf2": (F32, F16), "__truncdfhf2": (F64, F16)}


def soft_float_module(triple: str, data_layout: str) -> str:
    """LLVM IR defining every SOFT_FLOAT helper (with the C ABI LLVM's calls expect)."""
    mod = ir.Module("hlo_softfloat")
    mod.triple, mod.data_layout = triple, data_layout
    for name, (src, dst) in SOFT_FLOAT.items():
        fn = ir.Function(mod, ir.FunctionType(dst.float_type, [src.float_type]), name)
        fn.attributes.add("nounwind")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        bits = convert_bits(b, b.bitcast(fn.args[0], src.int_type), src, dst)
        b.ret(b.bitcast(bits, dst.float_type))
    return str(mod)


# What kernels and drivers call in the C runtime, by library (beyond SOFT_FLOAT and what
# the JIT itself compiled): libm functions the emitters call, and those LLVM calls for
# intrinsics the target CPU has no instruction for (fma without FMA3, rounding without
# SSE4.1), memcpy/memset for copies and fills, the OpenMP entry points of the driver and of
# threaded kernels.
LIBRARIES = {
    "libm": """exp expm1 log log1p tanh erf sin cos tan cbrt pow atan2 hypot fmod
               sinf cosf tanf cbrtf powf atan2f fmodf fma fmaf
               floor floorf ceil ceilf round roundf roundeven roundevenf""".split(),
    "libc": "memcpy memset".split(),
    "libgomp": "GOMP_parallel omp_get_thread_num omp_get_num_threads".split(),
}


@functools.lru_cache(maxsize=None)
def provided() -> frozenset[str]:
    """Every symbol outside the JIT that compiled code may use: the libraries' functions
    and libmvec's vector variants (vecmath.py) for every vector width."""
    from . import vecmath
    return frozenset(SOFT_FLOAT) | frozenset(n for names in LIBRARIES.values() for n in names) \
        | vecmath.variant_names()


def resolvable(name: str) -> bool:
    """A symbol the runtime provides and this process has (its library is loaded)."""
    return name in provided() and llvm.address_of_symbol(name) is not None
