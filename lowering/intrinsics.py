"""Declaring and calling LLVM intrinsics and C library functions from a builder.

llvmlite's `declare_intrinsic` knows only a handful of intrinsics, so every declaration
here spells out its type: `call(b, "llvm.maximum", [x, y])` declares
`float @llvm.maximum.f32(float, float)` on first use and calls it.
"""
from __future__ import annotations

from llvmlite import ir


def _suffix(t: ir.Type) -> str:
    if isinstance(t, ir.VectorType):
        return f"v{t.count}{_suffix(t.element)}"
    if isinstance(t, ir.IntType):
        return f"i{t.width}"
    return {"half": "f16", "float": "f32", "double": "f64", "bfloat": "bf16"}[str(t)]


def declare(module: ir.Module, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
    try:
        return module.get_global(name)
    except KeyError:
        return ir.Function(module, ir.FunctionType(ret, args), name)


def call(b: ir.IRBuilder, name: str, args: list, ret: ir.Type | None = None,
         overloaded: bool = True):
    """Call intrinsic `name` overloaded on its first argument's type (`llvm.fabs` ->
    `llvm.fabs.f32`); `ret` defaults to that type. Non-overloaded names (C functions such as
    `erf`) pass `overloaded=False`."""
    t = args[0].type
    full = f"{name}.{_suffix(t)}" if overloaded else name
    fn = declare(b.module, full, ret or t, [a.type for a in args])
    return b.call(fn, args)


def libm(b: ir.IRBuilder, name: str, args: list):
    """A C math library function on doubles (`sin`, `erf`, ...): the process's libm, which
    the JIT resolves, or the module's own math library where one is set."""
    own = math_library(b.module)
    return own(b, name, args) if own else call(b, name, args, overloaded=False)


def set_math_library(module: ir.Module, library) -> None:
    """Have `libm` calls in `module` go through `library(b, name, args)`: code for a target
    that cannot call the host's libm (GPU kernels: libdevice). It is also asked for f32
    functions on f32 `args` (emit_elementwise), which the host takes from libmvec."""
    module.__dict__["_hlo_math_library"] = library


def math_library(module: ir.Module):
    """The module's own math library, or None for the host's libm."""
    return module.__dict__.get("_hlo_math_library")


# ------------------------------------------------------------------ floating-point mode

_FTZ_DAZ = 0x8040          # MXCSR flush-to-zero (bit 15) and denormals-are-zero (bit 6)


def _x86(b: ir.IRBuilder) -> bool:
    return (b.module.triple or "").startswith(("x86_64", "i686", "i386"))


def set_flush_denormals(b: ir.IRBuilder, on):
    """Set (on: i1 or bool) or clear flush-to-zero/denormals-are-zero for this thread's SSE
    arithmetic, as XLA:CPU runs; returns the previous mode for `restore_fp_mode` (None
    where the CPU has no such mode)."""
    if not _x86(b):
        return None
    i32 = ir.IntType(32)
    slot = b.alloca(i32)
    ptr_t = ir.PointerType()
    store_mode = declare(b.module, "llvm.x86.sse.stmxcsr", ir.VoidType(), [ptr_t])
    load_mode = declare(b.module, "llvm.x86.sse.ldmxcsr", ir.VoidType(), [ptr_t])
    b.call(store_mode, [slot])
    saved = b.load(slot, typ=i32)
    flag = on if isinstance(on, ir.Value) else ir.IntType(1)(int(bool(on)))
    mode = b.select(flag, b.or_(saved, i32(_FTZ_DAZ)), b.and_(saved, i32(~_FTZ_DAZ)))
    b.store(mode, slot)
    b.call(load_mode, [slot])
    return saved


def restore_fp_mode(b: ir.IRBuilder, saved) -> None:
    if saved is None:
        return
    slot = b.alloca(saved.type)
    b.store(saved, slot)
    b.call(declare(b.module, "llvm.x86.sse.ldmxcsr", ir.VoidType(), [ir.PointerType()]), [slot])
