"""Facts about the host CPU that code generation needs (not the cost model: that is
targets/cpu.py). Measured or probed once; every number says where it comes from."""
from __future__ import annotations

import ctypes.util
import functools
import os
from pathlib import Path

# Vector width the loop vectorizer should prefer. LLVM tunes Sapphire/Emerald Rapids for
# 256-bit vectors; 512 measured faster on our elementwise and reduction kernels there
# (tools/bench_cpu.py), and it is ignored on CPUs without AVX-512.
PREFERRED_VECTOR_BITS = 512

# Register-blocked GEMM micro-kernel (emit_dot.py): MR rows x NR_VECTORS vectors of C kept
# in registers, by the width of the target's vectors (vector_isa()). AVX-512: 12 x 2 = 24
# accumulators of its 32 registers (measured 5% faster than 6 x 2 on one Sapphire Rapids
# core: 183 vs 174 GFLOP/s on f32 1024x768x1024); 16 registers: 6 x 2 = 12.
GEMM_TILES = {512: (12, 2), 256: (6, 2), 128: (6, 2)}
GEMM_MC = 96             # rows of A packed at once (a multiple of GEMM_MR): MC x KC in L2
GEMM_NC = 512            # columns of B packed at once: KC x NC stays in L2
GEMM_MIN_SPLIT_COLS = 128   # narrowest column block made to give threads their own B
# The depth KC of a K block: its KC x GEMM_NC block of packed B fills GEMM_L2_SHARE of L2
# (cache_bytes(2)). Every K block reads and writes the task's whole C block again, so depth
# pays where C is large: f32 2048x768x3072 on one Sapphire Rapids core (48 KiB L1, 2 MiB
# L2) ran at 125 GFLOP/s with KC = 192 (the B micro-panel in half of L1), 149 with 384 and
# 165 with 768 (this rule); 512x768x768 148 / 158 / 158; only a whole K of 4096 lost.
GEMM_L2_SHARE = 0.75
# The micro-kernel sums at most this many products of K in one chain of FMAs before adding
# them to C (emit_dot.micro_kernel): rounding errors grow with a chain's length.
GEMM_CHAIN = 256
# The micro-kernel prefetches the packed B panel this many steps of K ahead. With AVX2's
# NR = 16 a K block of 768 makes the B micro-panel 48 KiB, all of L1, so the A panels
# streaming past evict it and steps wait on L2. f32 on one core (HLO_OPT_CPU=haswell,
# median of 11, peak 129 GFLOP/s): 2048x768x3072 94 -> 102 GFLOP/s, 512x1024x2048 93 -> 99,
# 1000^3 106 -> 110; the micro-kernel alone over 16 A panels (K 768) 76-90% -> 99% of peak;
# 8 to 16 steps alike. AVX-512 (12 x 32): -1% to +4%.
GEMM_PREFETCH_STEPS = 8

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


def gemm_tile(acc_bits: int) -> tuple[int, int, int]:
    """(MR, NR, lanes) of the GEMM micro-kernel for accumulators of `acc_bits`."""
    width = vector_isa()
    mr, vectors = GEMM_TILES[width]
    lanes = width // acc_bits
    return mr, vectors * lanes, lanes


CACHE_FALLBACK = {1: 32 * 1024, 2: 1024 * 1024}


@functools.lru_cache(maxsize=None)
def cache_bytes(level: int) -> int:
    """Size of one core's data cache of `level` (Linux sysfs; CACHE_FALLBACK where it
    cannot be read)."""
    root = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for index in sorted(os.listdir(root)):
            read = lambda name: Path(root, index, name).read_text().strip()  # noqa: E731
            if read("level") == str(level) and read("type") in ("Data", "Unified"):
                size = read("size")
                return int(size[:-1]) * 1024 if size.endswith("K") else int(size)
    except (OSError, ValueError):
        pass
    return CACHE_FALLBACK[level]


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
