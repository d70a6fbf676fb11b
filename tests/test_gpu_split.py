"""A kernel whose phases cannot share one GPU launch runs as several.

XLA's fused modules put a dot and the softmax of its result in one fusion; the GPU's dot
kernel applies elementwise epilogues only, so such a fusion is cut into launches: the
contraction alone, then the run of phases after it together (one row kernel for the
softmax), with the dot's result in memory between them. `--emit=ptx` prints them as
NAME_0, NAME_1, ... and the GPU host program launches them in order: checked on the
simulated GPU against the interpreter.
"""
from __future__ import annotations

import hlo_opt
from hlo_opt.lowering import emit_gpu
from hlo_opt.lowering.gpu_runtime import GpuExecutable

from gpu_sim import SimulatedDevice
from test_gpu_runtime import check_on_gpu, fresh_caches  # noqa: F401

LOGITS_SOFTMAX = """HloModule m
mx { a = f64[] parameter(0)
     b = f64[] parameter(1)
     ROOT c = f64[] maximum(a, b) }
ad { a = f64[] parameter(0)
     b = f64[] parameter(1)
     ROOT c = f64[] add(a, b) }
logits_softmax {
  x = f64[8,16] parameter(0)
  w = f64[16,40] parameter(1)
  d = f64[8,40] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ninf = f64[] constant(-inf)
  m = f64[8] reduce(d, ninf), dimensions={1}, to_apply=mx
  mb = f64[8,40] broadcast(m), dimensions={0}
  e = f64[8,40] subtract(d, mb)
  ex = f64[8,40] exponential(e)
  z = f64[] constant(0)
  s = f64[8] reduce(ex, z), dimensions={1}, to_apply=ad
  sb = f64[8,40] broadcast(s), dimensions={0}
  ROOT r = f64[8,40] divide(ex, sb)
}
ENTRY e {
  x = f64[8,16] parameter(0)
  w = f64[16,40] parameter(1)
  ROOT f = f64[8,40] fusion(x, w), kind=kOutput, calls=logits_softmax
}"""


def test_a_dot_read_by_a_reduce_is_cut_after_the_contraction():
    module = hlo_opt.parse(LOGITS_SOFTMAX)
    [(name, comp)] = emit_gpu.module_kernels(module)
    units = emit_gpu.launch_units(comp)
    assert [[p.root.opcode for p in unit] for unit in units][0] == ["dot"]
    assert len(units) == 2 and all(p.root.opcode != "dot" for p in units[1])
    kernels = emit_gpu.emit_kernels(module)
    assert [k.name for k in kernels] == [f"{name}_0", f"{name}_1"]
    assert "llvm.nvvm.barrier0" in kernels[0].ir                       # the tiled GEMM
    assert "llvm.nvvm.shfl.sync" in kernels[1].ir                      # a row reduction


def test_the_launches_on_the_simulated_gpu_match_the_interpreter():
    module = hlo_opt.parse(LOGITS_SOFTMAX)
    check_on_gpu(module, module, "dot + softmax", build=lambda m: GpuExecutable(
        m, SimulatedDevice()))
