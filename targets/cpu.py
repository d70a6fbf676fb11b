"""The CPU cost model: one x86 core streaming through memory.

Round figures for a current server core (order of magnitude matters, not the last digit:
models compare programs). Vector arithmetic is slow next to memory here, so duplicating an
expensive producer into several consumers costs real time, unlike on a GPU.
"""
from __future__ import annotations

from .roofline import Machine, RooflineModel

CPU = Machine(
    kernel_overhead_ns=30.0,         # loop setup and dispatch of one kernel in a native driver
    bytes_per_ns=10.0,               # ~10 GB/s sustained single-core bandwidth
    vector_flops_per_ns=8.0,         # AVX2/AVX-512 elementwise throughput incl. loads, ~8 GFLOP/s
    matrix_flops_per_ns=50.0,        # register-blocked FMA GEMM, ~50 GFLOP/s per core
)


class CpuCostModel(RooflineModel):
    name = "cpu"
    machine = CPU
