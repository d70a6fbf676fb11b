"""Elementwise ops as LLVM IR on one element: one table row per opcode.

Each emitter takes the operands' compute values (ltypes.py) and returns the result's.
Semantics are XLA's (and the interpreter's): maximum/minimum propagate NaN and order -0 < +0
(llvm.maximum); integer x/0 = -1 and x%0 = x; float->int converts saturate and send NaN to 0
(llvm.fptosi.sat); shifts by >= the bit width give 0 or the sign fill; narrow floats compute
in f32 and are rounded back after every op; transcendental functions are mathlib.py's in f32
(and exp, log and log1p in f64) and libm's otherwise (libdevice's in GPU kernels).
"""
from __future__ import annotations

from typing import Callable

from llvmlite import ir

from ..dtypes import FLOATING, INTEGRAL
from . import mathlib, vecmath
from .convert import CONVERSIONS, convert_lowerable
from .intrinsics import call, libm, math_library
from .ltypes import F32, F64, I1, ElemType, component, elem, round_to, select, supported

Emitter = Callable[..., object]
REAL, INT, PRED, CPLX = FLOATING, INTEGRAL, frozenset({"pred"}), frozenset({"complex"})
NUM = REAL | INT


# ------------------------------------------------------------------------------- unary

def _abs(b, x, t, inst):
    if t.kind == "complex":
        re, im = _to64(b, x[0]), _to64(b, x[1])
        if component(t).compute == F64:
            return libm(b, "hypot", [re, im])
        # The squares of f32 parts are exact in f64 and neither overflow nor underflow there:
        # sqrt of their sum is hypot, vectorizable (except that an infinite part wins over NaN).
        h = call(b, "llvm.sqrt", [b.fadd(b.fmul(re, re), b.fmul(im, im))])
        re_inf, im_inf = (b.fcmp_ordered("==", call(b, "llvm.fabs", [v]), F64(float("inf")))
                          for v in (re, im))
        inf = b.or_(re_inf, im_inf)
        return b.fptrunc(b.select(inf, F64(float("inf")), h), F32)
    if t.is_float:
        return call(b, "llvm.fabs", [x])
    if t.signed:
        return call(b, "llvm.abs", [x, I1(0)])
    return x


def _negate(b, x, t, inst):
    if t.kind == "complex":
        return (b.fneg(x[0]), b.fneg(x[1]))
    return b.fneg(x) if t.is_float else b.neg(x)


def _sign(b, x, t, inst):
    if t.is_float:
        keep = b.or_(b.fcmp_unordered("uno", x, x), b.fcmp_ordered("==", x, x.type(0.0)))
        return b.select(keep, x, call(b, "llvm.copysign", [x.type(1.0), x]))
    if t.signed:
        return call(b, "llvm.smax", [call(b, "llvm.smin", [x, x.type(1)]), x.type(-1)])
    return b.zext(b.icmp_unsigned("!=", x, x.type(0)), x.type)


def _intrinsic(name):
    return lambda b, x, t, inst: call(b, name, [x])


def _transcendental(op: str, c_name: str | None):
    """f32 (and narrow floats, computed in f32) use mathlib.py, or an f32 library function
    (`_f32_call`); f64 mathlib.py's exp, log and log1p where the module has no math library
    of its own (GPU kernels link libdevice's); everything else calls libm in double (c_name
    None: logistic, which libm has not)."""
    fast = {str(F32): mathlib.F32_FUNCTIONS.get(op), str(F64): mathlib.F64_FUNCTIONS.get(op)}

    def emit(b, x, t, inst):
        inline = fast.get(str(x.type))
        if inline is not None and (x.type == F32 or math_library(b.module) is None):
            return inline(b, x)
        y = _f32_call(b, op, c_name, [x]) if x.type == F32 and c_name else None
        if y is not None:
            return y
        x64 = _to64(b, x)
        if c_name is None:
            y = b.fdiv(F64(1.0), b.fadd(F64(1.0), libm(b, "exp", [b.fneg(x64)])))
        else:
            y = libm(b, c_name, [x64])
        return _from64(b, y, t)
    return emit


def _rsqrt(b, x, t, inst):
    return b.fdiv(x.type(1.0), call(b, "llvm.sqrt", [x]))


def _is_finite(b, x, t, inst):
    return b.fcmp_ordered("!=", call(b, "llvm.fabs", [x]), x.type(float("inf")))


def _not(b, x, t, inst):
    return b.not_(x)


def _clz(b, x, t, inst):
    return call(b, "llvm.ctlz", [x, I1(0)])


def _real(b, x, t, inst):
    return x[0] if t.kind == "complex" else x


def _imag(b, x, t, inst):
    return x[1] if t.kind == "complex" else x.type(0.0)


def _identity(b, x, t, inst):
    return x


# ------------------------------------------------------------------------------ binary

def _arith(fop: str, iop: str, pop: str | None = None):
    def emit(b, x, y, t, inst):
        if t.kind == "complex":
            return (getattr(b, fop)(x[0], y[0]), getattr(b, fop)(x[1], y[1]))
        if t.is_float:
            return getattr(b, fop)(x, y)
        return getattr(b, pop if t.kind == "pred" and pop else iop)(x, y)
    return emit


def _multiply(b, x, y, t, inst):
    if t.kind == "complex":
        (p, q), (r, s) = x, y
        return (b.fsub(b.fmul(p, r), b.fmul(q, s)), b.fadd(b.fmul(p, s), b.fmul(q, r)))
    if t.is_float:
        return b.fmul(x, y)
    return b.and_(x, y) if t.kind == "pred" else b.mul(x, y)


def _int_guarded(b, x, y, t, signed_op, unsigned_op, by_zero, by_minus_one):
    """x op y with XLA's results for y == 0 and (signed) INT_MIN op -1; the divisor is made
    safe first, since LLVM's division by zero is undefined behaviour."""
    zero = b.icmp_unsigned("==", y, y.type(0))
    if not t.signed:
        q = unsigned_op(x, b.select(zero, y.type(1), y))
        return b.select(zero, by_zero(x), q)
    minus_one = b.icmp_signed("==", y, y.type(-1))
    q = signed_op(x, b.select(b.or_(zero, minus_one), y.type(1), y))
    return b.select(zero, by_zero(x), b.select(minus_one, by_minus_one(x), q))


def _divide(b, x, y, t, inst):
    if t.kind == "complex":
        return _complex_divide(b, x, y)
    if t.is_float:
        return b.fdiv(x, y)
    return _int_guarded(b, x, y, t, b.sdiv, b.udiv, lambda x: x.type(-1), b.neg)


def _remainder(b, x, y, t, inst):
    if t.is_float:
        return b.frem(x, y)
    return _int_guarded(b, x, y, t, b.srem, b.urem, lambda x: x, lambda x: x.type(0))


def _complex_divide(b, x, y):
    """Smith's algorithm, as numpy divides complex numbers."""
    (p, q), (r, s) = x, y
    big_r = b.fcmp_ordered(">=", call(b, "llvm.fabs", [r]), call(b, "llvm.fabs", [s]))
    ratio1, ratio2 = b.fdiv(s, r), b.fdiv(r, s)
    den1, den2 = b.fadd(r, b.fmul(s, ratio1)), b.fadd(b.fmul(r, ratio2), s)
    re1 = b.fdiv(b.fadd(p, b.fmul(q, ratio1)), den1)
    im1 = b.fdiv(b.fsub(q, b.fmul(p, ratio1)), den1)
    re2 = b.fdiv(b.fadd(b.fmul(p, ratio2), q), den2)
    im2 = b.fdiv(b.fsub(b.fmul(q, ratio2), p), den2)
    return (b.select(big_r, re1, re2), b.select(big_r, im1, im2))


def _extremum(float_name: str, signed_name: str, unsigned_name: str, pred_op: str):
    def emit(b, x, y, t, inst):
        if t.is_float:
            return call(b, float_name, [x, y])
        if t.kind == "pred":
            return getattr(b, pred_op)(x, y)
        return call(b, signed_name if t.signed else unsigned_name, [x, y])
    return emit


_maximum = _extremum("llvm.maximum", "llvm.smax", "llvm.umax", "or_")
_minimum = _extremum("llvm.minimum", "llvm.smin", "llvm.umin", "and_")


def _power(b, x, y, t, inst):
    if t.is_float:
        return _float_binary(b, "power", "pow", x, y, t)
    # XLA's integer power: square-and-multiply over the exponent's low 6 bits; an exponent
    # that is negative read as signed (also for unsigned types) gives 1 for base 1, base
    # for base -1 (all ones) and odd exponents, 1 for even ones, 0 otherwise.
    acc, base = x.type(1), x
    for bit in range(6):
        set_ = b.trunc(b.lshr(y, y.type(bit)), I1)
        acc = b.select(set_, b.mul(acc, base), acc)
        base = b.mul(base, base)
    one = x.type(1)
    odd = b.trunc(y, I1)
    is_minus_one = b.icmp_unsigned("==", x, x.type(-1))
    negative = b.select(b.icmp_unsigned("==", x, one), one,
                        b.select(is_minus_one, b.select(odd, x, one), x.type(0)))
    return b.select(b.icmp_signed("<", y, y.type(0)), negative, acc)


def _atan2(b, x, y, t, inst):
    return _float_binary(b, "atan2", "atan2", x, y, t)


def _float_binary(b, op: str, c_name: str, x, y, t):
    z = _f32_call(b, op, c_name, [x, y]) if x.type == F32 else None
    if z is not None:
        return z
    return _from64(b, libm(b, c_name, [_to64(b, x), _to64(b, y)]), t)


def _f32_call(b, op: str, c_name: str, args: list):
    """An f32 library function on f32 values, without a round trip through double: the
    module's own math library's (libdevice's `sinf`, ... in GPU kernels), else libmvec's
    (vecmath.py); None where neither has it."""
    own = math_library(b.module)
    if own is not None:
        return own(b, c_name, args)
    if op in vecmath.FUNCTIONS and vecmath.available():
        return vecmath.call(b, op, args)
    return None


def _complex(b, x, y, t, inst):
    return (x, y)


def _bitwise(op: str):
    return lambda b, x, y, t, inst: getattr(b, op)(x, y)


def _shift(kind: str):
    def emit(b, x, y, t, inst):
        width = x.type.width
        ok = b.icmp_unsigned("<", y, y.type(width))
        amount = b.select(ok, y, y.type(0))
        if kind == "left":
            return b.select(ok, b.shl(x, amount), x.type(0))
        if kind == "logical":
            return b.select(ok, b.lshr(x, amount), x.type(0))
        return b.ashr(x, b.select(ok, amount, y.type(width - 1)))
    return emit


# ---------------------------------------------------------------------------- compare

_FCMP = {"EQ": ("==", True), "NE": ("!=", False), "LT": ("<", True), "LE": ("<=", True),
         "GT": (">", True), "GE": (">=", True)}
_ICMP = {"EQ": "==", "NE": "!=", "LT": "<", "LE": "<=", "GT": ">", "GE": ">="}


def _total_order_key(b, x):
    """IEEE totalOrder as a signed integer: flip the magnitude bits of negative numbers."""
    it = ir.IntType(64 if x.type == F64 else 32)
    bits = b.bitcast(x, it)
    return b.select(b.icmp_signed("<", bits, it(0)), b.xor(bits, it((1 << (it.width - 1)) - 1)),
                    bits)


def _compare(b, x, y, t, inst):
    direction = inst.attrs["direction"]
    if t.kind == "complex":
        parts = [_compare_real(b, x[i], y[i], direction, False) for i in (0, 1)]
        return b.and_(*parts) if direction == "EQ" else b.or_(*parts)
    if t.is_float and inst.attrs.get("type") == "TOTALORDER":
        return b.icmp_signed(_ICMP[direction], _total_order_key(b, x), _total_order_key(b, y))
    if t.is_float:
        return _compare_real(b, x, y, direction, True)
    if t.signed:
        return b.icmp_signed(_ICMP[direction], x, y)
    return b.icmp_unsigned(_ICMP[direction], x, y)


def _compare_real(b, x, y, direction, _):
    op, ordered = _FCMP[direction]
    return (b.fcmp_ordered if ordered else b.fcmp_unordered)(op, x, y)


# ---------------------------------------------------------------------------- helpers

def _to64(b, x):
    return b.fpext(x, F64) if x.type == F32 else x


def _from64(b, x, t: ElemType):
    """A double result into the compute type of `t` (the caller rounds narrow types)."""
    target = component(t).compute
    return b.fptrunc(x, target) if target == F32 else x


# --------------------------------------------------------------------------- the table

# opcode: (emitter, operand kinds it accepts)
UNARY: dict[str, tuple[Emitter, frozenset]] = {
    "abs": (_abs, NUM | CPLX), "negate": (_negate, NUM | CPLX), "sign": (_sign, NUM),
    "floor": (_intrinsic("llvm.floor"), REAL), "ceil": (_intrinsic("llvm.ceil"), REAL),
    "round-nearest-afz": (_intrinsic("llvm.round"), REAL),
    "round-nearest-even": (_intrinsic("llvm.roundeven"), REAL),
    "sqrt": (_intrinsic("llvm.sqrt"), REAL), "rsqrt": (_rsqrt, REAL),
    "cbrt": (_transcendental("cbrt", "cbrt"), REAL),
    "exponential": (_transcendental("exponential", "exp"), REAL),
    "exponential-minus-one": (_transcendental("exponential-minus-one", "expm1"), REAL),
    "log": (_transcendental("log", "log"), REAL),
    "log-plus-one": (_transcendental("log-plus-one", "log1p"), REAL),
    "logistic": (_transcendental("logistic", None), REAL),
    "tanh": (_transcendental("tanh", "tanh"), REAL), "erf": (_transcendental("erf", "erf"), REAL),
    "sine": (_transcendental("sine", "sin"), REAL),
    "cosine": (_transcendental("cosine", "cos"), REAL),
    "tan": (_transcendental("tan", "tan"), REAL),
    "is-finite": (_is_finite, REAL), "not": (_not, INT | PRED),
    "popcnt": (_intrinsic("llvm.ctpop"), INT), "count-leading-zeros": (_clz, INT),
    "real": (_real, REAL | CPLX), "imag": (_imag, REAL | CPLX), "copy": (_identity, NUM | PRED | CPLX),
}
BINARY: dict[str, tuple[Emitter, frozenset]] = {
    "add": (_arith("fadd", "add", "or_"), NUM | PRED | CPLX),
    "subtract": (_arith("fsub", "sub"), NUM | CPLX),
    "multiply": (_multiply, NUM | PRED | CPLX), "divide": (_divide, NUM | CPLX),
    "remainder": (_remainder, NUM), "maximum": (_maximum, NUM | PRED),
    "minimum": (_minimum, NUM | PRED), "power": (_power, NUM), "atan2": (_atan2, REAL),
    "complex": (_complex, REAL), "and": (_bitwise("and_"), INT | PRED),
    "or": (_bitwise("or_"), INT | PRED), "xor": (_bitwise("xor"), INT | PRED),
    "shift-left": (_shift("left"), INT), "shift-right-logical": (_shift("logical"), INT),
    "shift-right-arithmetic": (_shift("arithmetic"), INT),
    "compare": (_compare, NUM | PRED | CPLX),
}


def is_elementwise_op(opcode: str) -> bool:
    return opcode in UNARY or opcode in BINARY or opcode in CONVERSIONS or opcode in (
        "select", "clamp")


def lowerable(inst) -> str | None:
    """Why this elementwise instruction cannot be lowered, or None if it can."""
    types = [o.shape.element_type for o in inst.operands] + [inst.shape.element_type]
    unsupported = [t for t in types if not supported(t)]
    if unsupported:
        return f"element type {unsupported[0]}"
    kind = elem(inst.operands[-1].shape.element_type).kind if inst.operands else None
    if inst.opcode in UNARY:
        return None if kind in UNARY[inst.opcode][1] else f"{inst.opcode} on {kind}"
    if inst.opcode in BINARY:
        return None if kind in BINARY[inst.opcode][1] else f"{inst.opcode} on {kind}"
    if inst.opcode in ("select", "clamp"):
        return None if inst.opcode == "select" or kind in NUM else f"clamp on {kind}"
    return convert_lowerable(inst)


def emit(b: ir.IRBuilder, inst, args: list, rounded: bool = True):
    """The value of elementwise `inst` given its operands' values. `rounded=False` keeps a
    narrow float result in f32 (reduction accumulators, which round once at the end)."""
    out = elem(inst.shape.element_type)
    op = inst.opcode
    if op in CONVERSIONS:
        return CONVERSIONS[op](b, args[0], elem(inst.operands[0].shape.element_type), out, inst)
    if op == "select":
        return select(b, *args)
    t = elem(inst.operands[-1].shape.element_type)
    if op == "clamp":
        lo, x, hi = args
        value = _minimum(b, hi, _maximum(b, lo, x, t, inst), t, inst)
    elif op in UNARY:
        value = UNARY[op][0](b, args[0], t, inst)
    else:
        value = BINARY[op][0](b, args[0], args[1], t, inst)
    if isinstance(value, tuple) or not rounded:
        return value
    return round_to(b, value, out)


