"""Facts about the host CPU that code generation needs (not the cost model: that is
targets/cpu.py). Measured or probed once; every number says where it comes from."""
from __future__ import annotations

import ctypes.util
import functools
import os

# Vector width the loop vectorizer should prefer. LLVM tunes Sapphire/Emerald Rapids for
# 256-bit vectors; 512 measured faster on our elementwise and reduction kernels there
# (tools/bench_cpu.py), and it is ignored on CPUs without AVX-512.
PREFERRED_VECTOR_BITS = 512

# Register-blocked GEMM micro-kernel (emit_dot.py): MR rows x NR columns of C kept in
# registers. 6 x 2 vectors = 12 accumulators of the 32 vector registers AVX-512 has.
GEMM_MR = 6
GEMM_NR_VECTORS = 2
GEMM_KC = 256            # depth of one packed panel: MR*KC and KC*NR floats stay in L1/L2
GEMM_MC = 96             # rows of A packed at once (a multiple of GEMM_MR)
GEMM_NC = 512            # columns of B packed at once: KC*NC floats (512 KiB) fit in L2

# A kernel whose estimated work is below this runs on one thread. Work is counted in
# element-operations of a vectorized loop (~1 ns each here); a GEMM's flops count
# 1/GEMM_FLOPS_PER_WORK each, and each element it packs one (emit_dot.Gemm.work). Waking the OpenMP team costs 5-20 us on an idle machine and
# much more when other processes hold the cores, so only kernels of ~250 us and more split.
PARALLEL_MIN_WORK = 1 << 18
GEMM_FLOPS_PER_WORK = 32


@functools.lru_cache(maxsize=None)
def target_cpu() -> tuple[str, str]:
    """(LLVM CPU name, feature string) that code is generated for: the host's, unless
    HLO_OPT_CPU names another model (`x86-64` for the baseline every x86-64 CPU runs,
    `x86-64-v2`, `haswell`, `znver4`, ...), with HLO_OPT_CPU_FEATURES (`+avx2,-avx512f`)
    adjusting it. Read once per process; compile workers inherit it through the
    environment. Code for a CPU the host does not match may crash when run."""
    import llvmlite.binding as llvm
    llvm.initialize_native_target()
    name = os.environ.get("HLO_OPT_CPU", "").strip()
    features = os.environ.get("HLO_OPT_CPU_FEATURES", "").strip()
    if not name:
        name = llvm.get_host_cpu_name()
        features = ",".join(f for f in (llvm.get_host_cpu_features().flatten(), features) if f)
    return name, features


@functools.lru_cache(maxsize=None)
def vector_isa() -> int:
    """Widest vectors the target CPU runs (bits), capped at PREFERRED_VECTOR_BITS. Probed:
    the register class LLVM picks for a 512-bit vector add on that CPU."""
    import llvmlite.binding as llvm
    from llvmlite import ir
    llvm.initialize_native_asmprinter()
    name, features = target_cpu()
    module = ir.Module("probe")
    module.triple = llvm.get_process_triple()
    vt = ir.VectorType(ir.FloatType(), 16)
    fn = ir.Function(module, ir.FunctionType(vt, [vt, vt]), "probe")
    b = ir.IRBuilder(fn.append_basic_block())
    b.ret(b.fadd(*fn.args))
    tm = llvm.Target.from_triple(module.triple).create_target_machine(cpu=name, features=features)
    asm = tm.emit_assembly(llvm.parse_assembly(str(module)))
    width = 512 if "%zmm" in asm else 256 if "%ymm" in asm else 128
    return min(width, PREFERRED_VECTOR_BITS)


@functools.lru_cache(maxsize=None)
def threads() -> int:
    """Cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


@functools.lru_cache(maxsize=None)
def openmp_library() -> str | None:
    """libgomp, whose GOMP_parallel runs a kernel's chunks on a persistent thread team.
    None disables threading (kernels then run on the calling thread)."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")   # idle workers sleep, not spin
    return ctypes.util.find_library("gomp")


def emits(inst) -> bool:
    """Whether the CPU code generator has an emitter for `inst` (its element types and
    called computations included); the lowering's fallback module decides."""
    from ..lowering.fallback import missing_emitter
    return missing_emitter(inst) is None
