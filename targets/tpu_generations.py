"""What the TPU model knows of each generation it prices: v4, v5e, v5p and v6e.

Sources (each figure below names the one it comes from):
  [v4]   cloud.google.com/tpu/docs/v4: 2 TensorCores per chip, 4 MXUs per TensorCore,
         275 TFLOP/s bf16 per chip, HBM2 1200 GB/s.
  [v5e]  cloud.google.com/tpu/docs/v5e: 1 TensorCore per chip, 4 MXUs per TensorCore,
         197 TFLOP/s bf16, HBM2 819 GB/s (a later revision of the page reads "800 GiBps",
         859 GB/s; the model keeps 819, also the figure of [jax] to 0.2%).
  [v5p]  cloud.google.com/tpu/docs/v5p: 2 TensorCores per chip, 4 MXUs per TensorCore,
         459 TFLOP/s bf16, HBM2e 2765 GB/s ([jax] lists 2.46e12 B/s).
  [v6e]  cloud.google.com/tpu/docs/v6e: 1 TensorCore per chip, 256x256 MXUs, 918 TFLOP/s
         bf16, HBM 1638 GB/s (other revisions: 1640 GB/s). Its revisions disagree on the MXU
         count: "4 matrix-multiply units" in the 2024 ones, "two 256x256" in the current one.
         The model takes 4: with 4 the peak implies a 1.75 GHz clock (v5p's), with 2 it
         would take 3.5 GHz.
  [jax]  jax-ml/jax, jax/_src/pallas/mosaic/tpu_info.py (the table behind the Pallas "TPU
         Hardware Reference" page): VMEM per TensorCore 16 MiB (v4), 128 MiB (v5e), 64 MiB
         (v5p), 128 MiB (v6e); MXU column size 128 before generation 6, 256 from it.
  [book] jax-ml.github.io/scaling-book/tpus: an MXU does bf16[8,128] @ bf16[128,128] every
         8 cycles; v5e runs at 1.5 GHz; VMEM 128 MiB on v5e.
  [hc20] Norrie et al., Hot Chips 2020 (TPUv2/v3): the vector unit is 128 lanes x 8
         sublanes with 2 ALUs each.
  [prec] JAX's matmul precision docs and jax-ml/jax#18934: on TPU an f32 dot runs as bf16
         passes, 1 at DEFAULT precision, 3 at HIGH (bf16_3x), 6 at HIGHEST (bf16_6x).

Corrections to issue 14's figures: v5p's VMEM is 64 MiB per TensorCore [jax], not 95 MiB
(95 GB is its HBM capacity); v5e's bandwidth is 819 GB/s, v4's 1200 GB/s; the rest agree.

Derived, not published: the clock, from the bf16 peak over the MXUs' multiply-adds per
cycle (2 flops x MXUs x size^2 x TensorCores): v4 1.05 GHz, v5e 1.50 GHz (as [book] says),
v5p 1.75 GHz, v6e 1.75 GHz. The model uses it only for the vector units' rate, which
assumes [hc20]'s 2 ALUs x 8 sublanes x 128 lanes per TensorCore per cycle.
"""
from __future__ import annotations

from dataclasses import dataclass

MiB = 1 << 20
LANES, SUBLANES, VPU_ALUS = 128, 8, 2       # [hc20]; lanes and sublanes also [jax]


@dataclass(frozen=True)
class TpuGeneration:
    """One chip generation. Rates are per chip: XLA runs a kernel on both TensorCores of a
    v4 or v5p chip (megacore), each on half the blocks; VMEM is per TensorCore, and bounds
    one block step of a kernel on either core."""
    name: str
    bf16_flops_per_ns: float     # MXU peak, per chip
    hbm_bytes_per_ns: float      # HBM bandwidth, per chip
    mxu_size: int                # systolic array side: MXU passes are size x size x size
    mxus_per_core: int
    cores_per_chip: int
    vmem_bytes: int              # per TensorCore

    @property
    def clock_ghz(self) -> float:
        """Derived (see the module docstring): peak over multiply-adds per cycle."""
        macs = self.mxus_per_core * self.mxu_size ** 2 * self.cores_per_chip
        return self.bf16_flops_per_ns / (2 * macs)

    @property
    def vector_flops_per_ns(self) -> float:
        """Elementwise operations per ns on the vector units of the whole chip."""
        return self.clock_ghz * VPU_ALUS * SUBLANES * LANES * self.cores_per_chip


GENERATIONS = {g.name: g for g in (
    TpuGeneration("v4", 275_000.0, 1200.0, 128, 4, 2, 16 * MiB),
    TpuGeneration("v5e", 197_000.0, 819.0, 128, 4, 1, 128 * MiB),
    TpuGeneration("v5p", 459_000.0, 2765.0, 128, 4, 2, 64 * MiB),
    TpuGeneration("v6e", 918_000.0, 1638.0, 256, 4, 1, 128 * MiB),
)}
DEFAULT_GENERATION = "v5e"

# bf16 passes of one f32 dot by its operand_precision [prec]: the MXU multiplies bf16 only.
F32_PASSES = {"default": 1, "high": 3, "highest": 6}


def generation(name: str) -> TpuGeneration:
    """The generation called `name`; KeyError names the known ones."""
    try:
        return GENERATIONS[name]
    except KeyError:
        raise KeyError(f"unknown TPU generation '{name}' (known: "
                       f"{', '.join(GENERATIONS)})") from None
