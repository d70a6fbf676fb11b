"""NVPTX code generation through llvmlite: the GPU's counterpart of jit.py.

llvmlite ships LLVM's `nvptx64-nvidia-cuda` target, so PTX is made without CUDA installed.
Math functions come from libdevice (`libdevice.10.bc`, the CUDA math library as LLVM
bitcode): a kernel that calls `__nv_*` functions has libdevice linked in, everything but the
kernels internalized (so the optimizer drops what is not called), then the -O3 pipeline of
the NVPTX target machine, which also resolves libdevice's `__nvvm_reflect` queries.
"""
from __future__ import annotations

import functools
import glob
import importlib.util
import os
import shutil

import llvmlite.binding as llvm
from llvmlite import ir

from ..errors import UnsupportedError
from ..targets import gpu
from . import jit

TRIPLE = "nvptx64-nvidia-cuda"
DEFAULT_ARCH = gpu.DEFAULT_ARCH
LIBDEVICE_PREFIX = "__nv_"


@functools.lru_cache(maxsize=None)
def target_machine(arch: str = DEFAULT_ARCH):
    """The NVPTX target machine for `arch` (sm_80, sm_90, ...; targets/gpu.ARCHITECTURES);
    another name is an UnsupportedError, not LLVM's warning and PTX for no GPU."""
    jit.target_machine()                       # LLVM initialized with its options
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    if arch not in gpu.ARCHITECTURES:
        raise UnsupportedError(f"unknown GPU architecture {arch!r} (one of "
                               f"{', '.join(gpu.ARCHITECTURES)})")
    return llvm.Target.from_triple(TRIPLE).create_target_machine(cpu=arch, opt=3)


def new_module(name: str, arch: str = DEFAULT_ARCH) -> ir.Module:
    """An empty llvmlite module for the NVPTX triple and data layout."""
    mod = ir.Module(name)
    mod.triple = TRIPLE
    mod.data_layout = str(target_machine(arch).target_data)
    return mod


@functools.lru_cache(maxsize=None)
def libdevice_path() -> str | None:
    """libdevice.10.bc: $CUDA_HOME's, the one of the CUDA installation whose ptxas is on
    PATH, any under /usr/local/cuda*, or a pip package's (hlo-opt[gpu]: nvidia-nvvm puts it
    under nvidia/cu13/, nvidia-cuda-nvcc-cu12 under nvidia/cuda_nvcc/); None if none."""
    roots = [os.environ.get("CUDA_HOME", "")]
    ptxas = shutil.which("ptxas")
    if ptxas:
        real = os.path.realpath(ptxas)
        roots += [os.path.dirname(os.path.dirname(real))]
    roots += sorted(glob.glob("/usr/local/cuda*"), reverse=True)
    roots += sorted((root for base in _pip_nvidia_dirs()
                     for root in glob.glob(os.path.join(base, "*"))), reverse=True)
    for root in roots:
        path = os.path.join(root, "nvvm", "libdevice", "libdevice.10.bc")
        if root and os.path.isfile(path):
            return path
    return None


def _pip_nvidia_dirs() -> list[str]:
    """The folders of the `nvidia` namespace package NVIDIA's CUDA wheels install into."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    return list(spec.submodule_search_locations or []) if spec else []


@functools.lru_cache(maxsize=1)
def _libdevice_bitcode() -> bytes:
    path = libdevice_path()
    if path is None:
        raise UnsupportedError("GPU math functions need libdevice.10.bc (CUDA's nvvm/libdevice; "
                               "set CUDA_HOME, or pip install 'hlo-opt[gpu]'), which was not found")
    with open(path, "rb") as f:
        return f.read()


def libdevice_call(b: ir.IRBuilder, name: str, args: list):
    """The math library of GPU kernels (intrinsics.set_math_library): C function `name`
    as libdevice's `__nv_name` on doubles, `__nv_namef` on floats; UnsupportedError when
    libdevice is absent."""
    _libdevice_bitcode()
    full = LIBDEVICE_PREFIX + name + ("f" if args[0].type == ir.FloatType() else "")
    try:
        fn = b.module.get_global(full)
    except KeyError:
        fn = ir.Function(b.module, ir.FunctionType(args[0].type, [a.type for a in args]), full)
    return b.call(fn, args)


def compile_module(texts: list[str], kernels: list[str], arch: str = DEFAULT_ARCH,
                   optimized: bool = True) -> llvm.ModuleRef:
    """Kernel modules linked into one (one PTX module holds every kernel of an HLO module),
    libdevice linked if they call into it, only `kernels` left visible, optimized for
    `arch`."""
    mod = jit.parse(f'target triple = "{TRIPLE}"\n'
                    f'target datalayout = "{target_machine(arch).target_data}"')
    for text in texts:
        mod.link_in(jit.parse(text))
    if any(f.is_declaration and f.name.startswith(LIBDEVICE_PREFIX) for f in mod.functions):
        lib = llvm.parse_bitcode(_libdevice_bitcode())
        lib.triple = TRIPLE
        lib.data_layout = str(target_machine(arch).target_data)
        mod.link_in(lib)
    for fn in mod.functions:
        if not fn.is_declaration and fn.name not in kernels:
            fn.linkage = "internal"
    if optimized:
        jit.optimize(mod, 3, target_machine(arch))
    return mod


def ptx(texts: list[str], kernels: list[str], arch: str = DEFAULT_ARCH) -> str:
    """PTX assembly of kernel modules, as one PTX module for `arch`."""
    return target_machine(arch).emit_assembly(compile_module(texts, kernels, arch))
