"""Vectorized libm: glibc's libmvec for the f32 functions mathlib.py does not implement.

sin, cos, tan, atan2, pow and cbrt in f32 call a scalar wrapper `hlo_vm_<f>` (compiled once
per process, forwarding to libm's `<f>f`) marked with the vector-function ABI attribute that
names libmvec's variant (e.g. `_ZGVeN16v_sinf`, 16 lanes of AVX-512). The loop vectorizer
then calls the vector variant for full vectors and the wrapper for the remainder. The wrapper
exists because LLVM knows `sinf` itself and would turn it into an intrinsic it cannot
vectorize. libmvec's f32 functions are within 4 ulp (glibc's bound; sin measured at 1.8),
handle special values and huge arguments like libm, and cost ~1 ns per element instead of
~15 for a libm call. Without libmvec (or on CPUs without the vector ISA) these functions fall
back to libm in double (emit_elementwise.py).
"""
from __future__ import annotations

import ctypes.util
import functools

import llvmlite.binding as llvm
from llvmlite import ir

from ..targets import cpu_facts
from . import jit
from .intrinsics import declare

F32 = ir.FloatType()
# HLO opcode -> (libm name, arity)
FUNCTIONS = {"sine": ("sin", 1), "cosine": ("cos", 1), "tan": ("tan", 1), "atan2": ("atan2", 2),
             "power": ("pow", 2), "cbrt": ("cbrt", 1)}
# ISA letter and lanes of libmvec's variants, by the vector width we compile for
_ISAS = {512: ("e", 16), 256: ("d", 8), 128: ("b", 4)}


@functools.lru_cache(maxsize=None)
def available() -> bool:
    """libmvec is loadable and has the variant for the target CPU's vector width."""
    path = ctypes.util.find_library("mvec")
    if path is None or cpu_facts.vector_isa() not in _ISAS:
        return False
    jit.target_machine()
    try:
        llvm.load_library_permanently(path)
    except RuntimeError:
        return False
    if llvm.address_of_symbol(_variant("sin", 1, cpu_facts.vector_isa())) is None:
        return False
    _compile_wrappers()
    return True


def _compile_wrappers() -> None:
    mod = jit.new_module("hlo_vm")
    for name, arity in FUNCTIONS.values():
        scalar = declare(mod, f"{name}f", F32, [F32] * arity)
        fn = ir.Function(mod, ir.FunctionType(F32, [F32] * arity), f"hlo_vm_{name}f")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        b.ret(b.call(scalar, list(fn.args)))
    jit.library(str(mod), [f"hlo_vm_{name}f" for name, _ in FUNCTIONS.values()])


def _variant(name: str, arity: int, width: int) -> str:
    """libmvec's name of the vector variant for `width`-bit vectors (vector ABI mangling)."""
    isa, lanes = _ISAS[width]
    return f"_ZGV{isa}N{lanes}{'v' * arity}_{name}f"


def variant_names() -> frozenset[str]:
    """Every vector variant compiled code may call, for any vector width."""
    return frozenset(_variant(name, arity, width) for name, arity in FUNCTIONS.values()
                     for width in _ISAS)


def call(b: ir.IRBuilder, opcode: str, args: list):
    """The f32 function of `opcode` on scalar f32 `args`, vectorizable through libmvec."""
    name, arity = FUNCTIONS[opcode]
    lanes = _ISAS[cpu_facts.vector_isa()][1]
    vector_name = _variant(name, arity, cpu_facts.vector_isa())
    module = b.module
    vt = ir.VectorType(F32, lanes)
    declare(module, vector_name, vt, [vt] * arity)
    used = module.__dict__.setdefault("_hlo_vector_variants", [])
    if vector_name not in used:
        used.append(vector_name)
    wrapper = declare(module, f"hlo_vm_{name}f", F32, [F32] * arity)
    for attrs in (wrapper.attributes,):
        attrs.add("nounwind")
        attrs.add("readnone")
    inst = b.call(wrapper, args)
    set.add(inst.attributes, "nounwind")
    set.add(inst.attributes, "readnone")
    set.add(inst.attributes, f'"vector-function-abi-variant"='
                             f'"_ZGV_LLVM_N{lanes}{"v" * arity}_hlo_vm_{name}f({vector_name})"')
    return inst


def finish(module: ir.Module) -> None:
    """Keep the vector variants a module's calls name alive until the vectorizer has seen
    them (unused declarations are dropped early otherwise): llvm.compiler.used."""
    used = module.__dict__.get("_hlo_vector_variants")
    if not used:
        return
    ptr = ir.PointerType()
    array = ir.ArrayType(ptr, len(used))
    g = ir.GlobalVariable(module, array, "llvm.compiler.used")
    g.linkage = "appending"
    g.section = "llvm.metadata"
    g.initializer = ir.Constant(array, [module.get_global(n) for n in used])
