"""The TPU cost model: a TPU v5e core, with its tiled memory layout.

Facts from Google Cloud's TPU v5e documentation: 819 GB/s HBM, 197 TFLOP/s bf16 on the
128x128 MXUs; vector units do elementwise work at a fraction of that. Arrays live in HBM in
tiles of (8, 128) 32-bit elements over the two minor dimensions ((16, 128) for 16-bit types,
(32, 128) for 8-bit), so a dimension that is not a multiple of the tile still moves whole
tiles; dots run in 128x128 MXU passes, so padding waste slows them too.
"""
from __future__ import annotations

import math

from ..shape import AnyShape
from .roofline import Machine, RooflineModel

TPU = Machine(
    kernel_overhead_ns=500.0,        # per-kernel (fusion) step overhead
    bytes_per_ns=819.0,              # HBM, 819 GB/s
    vector_flops_per_ns=12000.0,     # VPU elementwise, ~12 TFLOP/s
    matrix_flops_per_ns=197000.0,    # MXU bf16, 197 TFLOP/s
    view_ns=1.0,                     # not a time: keeps node_cost positive (fewer ops win)
    opaque_ns=300.0,                 # not measured: a short extra step for control flow
    overlap=0.9,                     # not measured: DMA and compute pipeline on the TPU
)
LANES = 128
MXU = 128


def tile_rows(bits: int) -> int:
    """Sublanes of one tile: 8 for 32-bit types, 16 for 16-bit, 32 for 8-bit."""
    return 8 * max(1, 32 // max(bits, 1))


def padded_dims(dims: tuple[int, ...], bits: int) -> tuple[int, ...]:
    """Dims rounded up to whole tiles over the two minor dimensions."""
    if not dims:
        return (1,)
    *major, minor = dims
    minor = math.ceil(max(minor, 0) / LANES) * LANES
    if major:
        rows = tile_rows(bits)
        major[-1] = math.ceil(max(major[-1], 0) / rows) * rows
    return (*major, minor)


class TpuCostModel(RooflineModel):
    name = "tpu"
    machine = TPU

    def shape_bytes(self, shape: AnyShape) -> float:
        if shape.is_tuple:
            return sum(self.shape_bytes(s) for s in shape.elements)
        bits = shape.dtype.bits
        return math.prod(padded_dims(shape.dims, bits)) * bits / 8

    def matrix_seconds(self, matrix_flops: float) -> float:
        # MXU passes are 128x128: small contractions waste the rest of the pass; the
        # roofline cannot see shapes here, so a flat efficiency stands for typical padding.
        return matrix_flops / (self.machine.matrix_flops_per_ns * 0.8)
