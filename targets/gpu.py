"""The GPU cost model: an NVIDIA H100 SXM.

Facts from NVIDIA's H100 datasheet: HBM3 at 3.35 TB/s, 67 TFLOP/s FP32 on CUDA cores,
~495 TFLOP/s TF32 on tensor cores (dense); kernel launch costs about a microsecond. With
arithmetic this cheap next to memory and launches, recomputing a producer in every consumer
is nearly free, and fusion pays almost whenever it removes a round trip to HBM.

One access pattern is modelled: a transpose that moves the minor dimension, fused into a
loop kernel, reads its input with a stride, so a warp's loads do not coalesce and each
touches its own 32-byte sector. XLA:GPU emits such transposes as separate shared-memory
tiled kernels for this reason; the model charges `UNCOALESCED_FACTOR` times the bytes.
"""
from __future__ import annotations

from ..ir import Instruction
from .roofline import Machine, RooflineModel

GPU = Machine(
    kernel_overhead_ns=1000.0,       # launch + tail of one kernel, ~1 µs
    bytes_per_ns=3350.0,             # HBM3, 3.35 TB/s
    vector_flops_per_ns=67000.0,     # FP32 CUDA cores, 67 TFLOP/s
    matrix_flops_per_ns=495000.0,    # TF32 tensor cores, dense
    view_ns=1.0,                     # not a time: keeps node_cost positive (fewer ops win)
    opaque_ns=300.0,                 # not measured: a short extra launch for control flow
    overlap=0.9,                     # not measured: warps in flight hide most of the shorter
)
UNCOALESCED_FACTOR = 8.0             # 32-byte sector per 4-byte element

# Architectures PTX is emitted for (lowering/nvptx.py): LLVM 22's NVPTX processors from
# Volta on; LLVM takes any other name with a warning and emits PTX no ptxas accepts.
DEFAULT_ARCH = "sm_90"
ARCHITECTURES = ("sm_70", "sm_72", "sm_75", "sm_80", "sm_86", "sm_87", "sm_88", "sm_89", "sm_90",
                 "sm_90a", "sm_100", "sm_100a", "sm_100f", "sm_101", "sm_101a", "sm_103",
                 "sm_103a", "sm_110", "sm_110a", "sm_120", "sm_120a", "sm_121", "sm_121a")


def arch_for(major: int, minor: int) -> str:
    """The newest portable architecture (no `a`/`f` suffix) in ARCHITECTURES that a device
    of compute capability major.minor runs: its own when listed (the CUDA driver compiles
    PTX for an older architecture to a newer device's code)."""
    fits = [a for a in ARCHITECTURES if a[3:].isdigit()
            and (int(a[3:]) // 10, int(a[3:]) % 10) <= (major, minor)]
    return max(fits, key=lambda a: int(a[3:])) if fits else DEFAULT_ARCH


class GpuCostModel(RooflineModel):
    name = "gpu"
    machine = GPU

    def fused_bytes(self, inst: Instruction) -> float:
        if inst.opcode == "transpose" and _moves_minor(inst):
            return (UNCOALESCED_FACTOR - 1) * self.shape_bytes(inst.shape)
        return 0.0


def _moves_minor(transpose) -> bool:
    perm = transpose.attrs.get("dimensions", ())
    return bool(perm) and perm[-1] != len(perm) - 1
