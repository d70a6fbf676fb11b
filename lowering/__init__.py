"""Lowering: kernels (fusions and standalone ops) -> LLVM IR -> native code for the host CPU,
and the runtime that calls them on numpy arrays.

    exe = compile(module_or_text)        # hlo_opt.compile(...) is the same
    outputs = exe(x, y)                  # numpy in, numpy out (tuple results flattened)
    text = emit_llvm(module)             # the kernels' and the driver's LLVM IR
    text = emit_asm(module)              # their assembly for the host CPU

Modules, one concept each: phases (what a kernel stores, what it computes inline; the
kernels themselves come from the fusion stage, hlo_opt.fusion), row_pass (a kernel's steps run
a block of rows at a time), elemental (per-element values,
index arithmetic), emit_elementwise / convert / mathlib / float8 (scalar ops and types,
ltypes), emit_loops (indices, loop nests), emit_reduce / emit_dot / emit_conv (with conv_geometry,
conv_pack, conv_lanes) / emit_gather /
emit_sort / emit_fft (ops with loop structures of their own), emit_kernel (one LLVM function
per kernel), program / buffers / driver (the host program, buffer assignment, its native
driver), jit / compile_worker (LLVM, the cache, parallel compilation), libcalls / objfile
(what compiled code may call: our soft-float helpers, the runtime's symbols, the check
before loading), runtime (Executable),
fallback (what the interpreter runs instead); emit_gpu / emit_gpu_reduce / emit_gpu_split /
emit_gpu_columns / emit_gpu_transpose / emit_gpu_sort / emit_gpu_scatter / emit_gpu_fft /
gpu_frame / gpu_combine / gpu_loops / nvptx (PTX for GPU kernels, sharing the elemental
generator and reducers), gpu_runtime / cuda_device (the same host program run on a GPU through the CUDA
driver). docs/lowering.md tells the whole story, docs/gpu.md the GPU's.
"""
from __future__ import annotations

# Emitters register themselves with elemental.py and emit_kernel.py on import.
from . import emit_conv, emit_dot, emit_fft, emit_gather, emit_reduce, emit_sort  # noqa: F401
from . import jit
from .. import verifier
from ..memory import allocating, check_fits_in_memory
from .fallback import FallbackWarning
from .runtime import Executable, compile_module

__all__ = ["compile", "emit_llvm", "emit_asm", "Executable", "FallbackWarning"]


def compile(module, target: str = "cpu", flush_denormals: bool = False,  # noqa: A001
            verify: bool = True) -> Executable:
    """Compile a Module (or HLO text) for the host CPU, or with target="gpu" for this
    machine's GPU (gpu_runtime.py; an UnsupportedError says why when there is none);
    returns a callable on numpy arrays. `flush_denormals` (cpu only) runs it in XLA:CPU's
    floating-point mode instead of IEEE's. The module
    is verified first (ill-typed code would crash natively) unless `verify` is False, for
    callers that already did; an array larger than this machine's memory is an HloError."""
    if isinstance(module, str):
        from .. import parse
        module = parse(module)
    if verify:
        verifier.verify(module)
    check_fits_in_memory(module)
    with allocating("allocating the module's buffers"):
        return compile_module(module, target, flush_denormals)


def _texts(module) -> list[tuple[str, str]]:
    exe = compile(module)
    return [(k.name, k.ir) for k in exe.kernels.values()] + [(exe.driver_name, exe.driver_ir)]


def emit_llvm(module, optimized: bool = True) -> str:
    """LLVM IR of every kernel of the module and of its driver (after -O3 unless
    `optimized` is False)."""
    parts = []
    for name, text in _texts(module):
        body = jit.optimized_ir(text) if optimized else text
        parts.append(f"; ---- {name}\n{body}")
    return "\n".join(parts)


def emit_asm(module) -> str:
    """Host assembly of every kernel of the module and of its driver."""
    return "\n".join(f"# ---- {name}\n{jit.assembly(text)}" for name, text in _texts(module))
