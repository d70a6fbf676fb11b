"""The host emulation of GPU kernels (gpu_emulation.py) on the kernels it can run besides
dots: loop kernels and row reductions (warp shuffles, shared memory, barriers), against the
interpreter. What the emulation cannot run is a clear error, not a crash."""
from __future__ import annotations

import numpy as np
import pytest

import hlo_opt
from gpu_emulation import host_ir, run
from hlo_opt.lowering import emit_gpu
from test_gpu_dot import _arguments
from test_gpu_ptx import ELEMENTWISE, NORMALIZED, RMS, ROW_REDUCES
from test_fusion import SOFTMAX

KERNELS = {**ROW_REDUCES, "rms epilogue": RMS, "normalized rows": NORMALIZED,
           "softmax": SOFTMAX, "loop": ELEMENTWISE.replace("exponential", "negate")}


@pytest.mark.parametrize("what", list(KERNELS))
def test_kernel_run_on_the_host_matches_the_interpreter(what):
    """The entry computation as one kernel, run with its recorded launch."""
    module = hlo_opt.parse(KERNELS[what])
    kernel = emit_gpu.emit_gpu_kernel(module.entry, "k")
    args = _arguments(module.entry, np.random.default_rng(2))
    want = hlo_opt.evaluate(module, args)
    want = want if isinstance(want, list) else [want]
    got = [np.full(w.shape, 7, w.dtype) for w in want]
    run(kernel, got + args)
    for g, w in zip(got, want):
        if w.dtype.kind in "fcV":                   # floats, complex, bf16 (ml_dtypes: V)
            np.testing.assert_allclose(g.astype(np.complex128), w.astype(np.complex128),
                                       rtol=1e-4, atol=1e-4)
        else:
            np.testing.assert_array_equal(g, w)


def test_math_from_libdevice_is_refused_by_the_emulation():
    kernel = emit_gpu.emit_gpu_kernel(hlo_opt.parse(ELEMENTWISE.replace(
        "exponential", "sine")).entry, "k")
    with pytest.raises(ValueError, match="libdevice"):
        host_ir(kernel.ir, [])
