"""The CPU cost model: our own kernels on the host, as measured by tools/calibrate_cpu.py.

Its constants come from targets/calibration/cpu.json (machine, date and every measurement
are in the file; docs/cost_model.md describes them): one core's cache bandwidth, add
throughput, GEMM rate and per-kernel call overhead for kernels small enough to run on one
thread, the threaded rates for those the lowering splits across cores (from the sizes in
cpu_facts), per-op weights relative to an add, and how much of memory and arithmetic time
a kernel overlaps. Arithmetic is dear next to memory here (a transcendental costs ~100 adds),
so duplicating an expensive producer into several consumers costs real time, unlike on a GPU.
Another calibration file can be loaded with `load(path)`.
"""
from __future__ import annotations

import json
import pathlib

from . import cpu_facts
from .roofline import Machine, RooflineModel, Threads

CALIBRATION = pathlib.Path(__file__).resolve().parent / "calibration" / "cpu.json"


def load(path: pathlib.Path = CALIBRATION) -> Machine:
    """The machine a calibration file describes (its "model" section)."""
    c = json.loads(pathlib.Path(path).read_text())["model"]
    threads = Threads(
        # Loop kernels split from PARALLEL_MIN_WORK elements (emit_kernel.plan_loop): the
        # model sees bytes, so it counts 4-byte elements, the common f32.
        min_bytes=4.0 * cpu_facts.PARALLEL_MIN_WORK,
        min_matrix_flops=float(cpu_facts.PARALLEL_MIN_WORK * cpu_facts.GEMM_FLOPS_PER_WORK),
        bytes_per_ns=c["parallel_bytes_per_ns"],
        vector_flops_per_ns=c["parallel_vector_flops_per_ns"],
        matrix_flops_per_ns=c["parallel_matrix_flops_per_ns"])
    return Machine(
        kernel_overhead_ns=c["kernel_overhead_ns"], bytes_per_ns=c["bytes_per_ns"],
        vector_flops_per_ns=c["vector_flops_per_ns"],
        matrix_flops_per_ns=c["matrix_flops_per_ns"],
        # Not a time: keeps node_cost positive so that fewer instructions win at equal
        # traffic; far below any kernel's overhead, so it never outweighs real work.
        view_ns=1.0,
        opaque_ns=c["opaque_ns"], overlap=c["overlap"], op_weights=c["op_weights"],
        threads=threads, cache_bytes=c["cache_bytes"], far_bytes_per_ns=c["far_bytes_per_ns"])


CPU = load()


class CpuCostModel(RooflineModel):
    name = "cpu"
    machine = CPU
