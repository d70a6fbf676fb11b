"""GPU kernels and the GPU host program executed without a GPU (tests/gpu_sim.py).

The simulator itself: shuffles follow PTX's lane arithmetic in every mode, f2tf32.rna
rounds as PTX defines, a barrier some threads never reach is an error (not a hang), an NVVM
intrinsic it does not know is refused, its device has CudaDevice's methods (its wmma:
test_gpu_dot.py). Then every corpus module whose kernels all have GPU code (dots and
convolutions on tensor cores included) runs through gpu_runtime's host program on the
simulated device and equals the interpreter (random inputs and inputs with NaN, inf and -0;
test_gpu_runtime.check_on_gpu: tf32-rounded operands where f32 contractions run as tf32),
the others are refused; and focused kernels: row reductions (sum, bf16 max,
argmax, softmax, epilogue and row outputs), loop kernels with outputs of different sizes,
a host-driven while loop, a conditional.
"""
from __future__ import annotations

import inspect

import numpy as np
import pytest
from llvmlite import ir

import gpu_sim
import hlo_opt
from conftest import corpus_files, corpus_ids
from gpu_sim import SimulatedDevice, SimulationError
from hlo_opt.lowering import cuda_device, emit_gpu
from hlo_opt.lowering.gpu_runtime import GpuExecutable
from hlo_opt.lowering.intrinsics import declare
from hlo_opt.lowering.ltypes import I32, I64, PTR, VOID
from test_gpu_ptx import ARGMAX, ELEMENTWISE, NORMALIZED, RMS, reduce_module
from test_gpu_runtime import BRANCHES, LOOP, check_on_gpu, fresh_caches, tf32_rna  # noqa: F401
from test_lowering_corpus import assert_outputs_match


def simulated(module) -> GpuExecutable:
    return GpuExecutable(module, SimulatedDevice())


# ---------------------------------------------------------------- the simulator itself

def lane_kernel(body, threads: int, name: str = "lanes") -> emit_gpu.GpuKernel:
    """A hand-written kernel: out[tid] = body(builder, tid as i32) for one block."""
    mod = emit_gpu.nvptx.new_module(name)
    fn = ir.Function(mod, ir.FunctionType(VOID, [PTR]), name)
    fn.calling_convention = "ptx_kernel"
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    tid = b.call(declare(mod, "llvm.nvvm.read.ptx.sreg.tid.x", I32, []), [])
    value = body(b, tid)
    b.store(value, b.gep(fn.args[0], [b.zext(tid, I64)], source_etype=I32))
    b.ret_void()
    return emit_gpu.GpuKernel(name, str(mod), 1, 0, threads, None, threads=threads, blocks=1)


def ptx_shuffle(mode: str, lane: int, b: int, c: int) -> int:
    """The source lane PTX's shfl.sync defines for `lane` (ISA: maxLane/minLane from the
    clamp and segment mask in c; an out-of-range source reads the lane itself)."""
    bval, cval, seg = b & 31, c & 31, (c >> 8) & 31
    max_lane = (lane & seg) | (cval & ~seg & 31)
    min_lane = lane & seg
    j, ok = {"up": (lane - bval, lane - bval >= max_lane),
             "down": (lane + bval, lane + bval <= max_lane),
             "bfly": (lane ^ bval, (lane ^ bval) <= max_lane),
             "idx": (min_lane | (bval & ~seg & 31), (min_lane | (bval & ~seg & 31)) <= max_lane),
             }[mode]
    return j if ok else lane


SHUFFLES = [("bfly", 16, 31), ("bfly", 1, 31), ("down", 3, 31), ("up", 5, 0),
            ("idx", 7, 31), ("idx", 2, 0x1C1F), ("down", 2, 0x181F), ("bfly", 4, 3)]


@pytest.mark.parametrize("mode, b, c", SHUFFLES,
                         ids=[f"{m} b={b} c={c:#x}" for m, b, c in SHUFFLES])
def test_shuffles_read_the_lane_ptx_defines(mode, b, c):
    """Two warps, each lane shuffling 1000 * warp + lane: every lane gets its source lane's
    value within its own warp (lane, clamp and segment arithmetic as PTX's), in every mode."""
    def body(bld, tid):
        shfl = declare(bld.module, f"llvm.nvvm.shfl.sync.{mode}.i32", I32, [I32] * 4)
        value = bld.add(bld.mul(bld.udiv(tid, I32(32)), I32(1000)), bld.urem(tid, I32(32)))
        return bld.call(shfl, [I32(-1), value, I32(b), I32(c)])
    out = np.zeros(64, np.int32)
    gpu_sim.run_kernel(lane_kernel(body, 64, f"shfl_{mode}_{b}_{c}"), [out], [])
    want = [1000 * (t // 32) + ptx_shuffle(mode, t % 32, b, c) for t in range(64)]
    assert out.tolist() == want


def test_a_barrier_not_every_thread_reaches_is_an_error(monkeypatch):
    """Threads 0..31 meet at a barrier the others skip: on a GPU a hang (or undefined);
    here the waiting threads give up after the limit and the launch raises."""
    monkeypatch.setattr(gpu_sim, "_TRIES", 5)
    def body(bld, tid):
        with bld.if_then(bld.icmp_unsigned("<", tid, I32(32))):
            bld.call(declare(bld.module, "llvm.nvvm.barrier0", VOID, []), [])
        return tid
    with pytest.raises(SimulationError, match="barrier"):
        gpu_sim.run_kernel(lane_kernel(body, 64, "divergent_barrier"), [np.zeros(64, np.int32)], [])


def test_an_intrinsic_the_simulator_does_not_know_is_refused():
    def body(bld, tid):
        vote = declare(bld.module, "llvm.nvvm.vote.ballot.sync", I32, [I32, ir.IntType(1)])
        return bld.call(vote, [I32(-1), bld.icmp_unsigned("<", tid, I32(3))])
    with pytest.raises(SimulationError, match="llvm.nvvm.vote.ballot.sync is not simulated"):
        gpu_sim.run_kernel(lane_kernel(body, 32, "vote"), [np.zeros(32, np.int32)], [])


def test_libdevice_functions_are_the_host_c_librarys_or_refused():
    """__nv_sin is the C library's sin; a libdevice function the runtime's C library does
    not have (__nv_brev) is refused by name."""
    def body(bld, tid, name):
        d = ir.DoubleType()
        fn = declare(bld.module, name, d, [d])
        return bld.fptosi(bld.fmul(bld.call(fn, [bld.uitofp(tid, d)]), d(1000.0)), I32)
    out = np.zeros(32, np.int32)
    gpu_sim.run_kernel(lane_kernel(lambda b, t: body(b, t, "__nv_sin"), 32, "nv_sin"), [out], [])
    assert out.tolist() == [int(np.sin(t) * 1000) for t in range(32)]
    with pytest.raises(SimulationError, match="__nv_brev has no host counterpart"):
        gpu_sim.run_kernel(lane_kernel(lambda b, t: body(b, t, "__nv_brev"), 32, "nv_brev"),
                           [out], [])


def test_f2tf32_rounds_to_nearest_with_ties_away_from_zero():
    """f2tf32.rna on ties (1 + 2^-11 up, its negation down), just below and above them, the
    largest f32 (to infinity), subnormals, zeros, infinities, NaN and random values."""
    values = np.array([1.0, 1 + 2**-11, 1 + 3 * 2**-11, 1 + 2**-11 - 2**-23,
                       -(1 + 2**-11), 2**-12 + 2**-23, 3.4028235e38, -3.4028235e38, 1e-40,
                       -2**-149, 2**-137, 3 * 2**-137, 0.0, -0.0, np.inf, -np.inf, np.nan, 0.1,
                       65504.0, -7.3], np.float32)
    values = np.concatenate([values, np.random.default_rng(0).standard_normal(44)
                             .astype(np.float32) * 1e3])
    def body(bld, tid):
        table = ir.GlobalVariable(bld.module, ir.ArrayType(ir.FloatType(), 64), "values")
        table.initializer = ir.Constant(ir.ArrayType(ir.FloatType(), 64),
                                        [float(v) for v in values])
        x = bld.load(bld.gep(table, [I32(0), tid], inbounds=True), typ=ir.FloatType())
        return bld.call(declare(bld.module, "llvm.nvvm.f2tf32.rna", I32, [ir.FloatType()]), [x])
    out = np.zeros(64, np.int32)
    gpu_sim.run_kernel(lane_kernel(body, 64, "f2tf32"), [out], [])
    got, want = out.view(np.float32), tf32_rna(values)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.array_equal(got[~np.isnan(want)].view(np.int32), want[~np.isnan(want)].view(np.int32))


def test_simulated_device_has_every_method_of_the_real_one():
    real = {n for n, _ in inspect.getmembers(cuda_device.CudaDevice, inspect.isfunction)
            if not n.startswith("_")}
    assert real <= {n for n in dir(SimulatedDevice)}


def test_launch_arguments_must_be_device_memory():
    device = SimulatedDevice()
    kernel = lane_kernel(lambda bld, tid: tid, 32, "ids")
    host = np.zeros(32, np.int32)
    with pytest.raises(SimulationError, match="not simulated device memory"):
        device.launch(kernel, 1, 32, 0, [host.ctypes.data])
    ptr = device.alloc(host.nbytes)
    device.launch(kernel, 1, 32, 0, [ptr])
    device.copy_d2h(host, ptr)
    assert host.tolist() == list(range(32))


# ---------------------------------------------------------------- whole modules

FILES = corpus_files()
# modules whose simulated run takes over 3 s on 2 cores: the JIT compiling their kernels
# for the host, row kernels of many rows (256 fibers meeting at about 20 barriers per row),
# sorts, and dot/convolution kernels of many tiles (256 fibers meeting at 2 block barriers
# per K step and 2 warp barriers per mma: gpt2_block_small's run alone is ~35 s);
# the default run leaves them out (pyproject's addopts); `pytest -m slow` runs them
SLOW = {"softmax", "reductions", "layernorm", "rmsnorm", "random_sampling", "sort_topk",
        "redundancy_small", "redundancy_raw_small", "gpt2_block", "gpt2_block_small",
        "gpt2_block_train", "transformer_lm", "transformer_lm_train", "cnn_train",
        "mlp_train_adam", "mlp_train_small"}


def _module_marks(path):
    name = path.name.split(".")[0]
    return pytest.param(path, marks=[pytest.mark.slow] if name in SLOW else [])


@pytest.mark.parametrize("path", [_module_marks(p) for p in FILES], ids=corpus_ids(FILES))
def test_corpus_module_on_the_simulated_gpu_matches_the_interpreter(path):
    module = hlo_opt.parse(path.read_text(), str(path))
    check_on_gpu(module, module, path.name, build=simulated)


FOCUSED = {
    "row sum f32": reduce_module("f32", "add", "0", shape="[6,1000]"),
    "row max bf16": reduce_module("bf16", "maximum", "-inf", shape="[5,300]"),
    "row sum f64 (two 32-bit shuffles)": reduce_module("f64", "add", "0", shape="[3,100]"),
    "row product u64": reduce_module("u64", "multiply", "1", shape="[3,40]"),
    "row sum c64": reduce_module("c64", "add", "(0, 0)", shape="[3,70]"),
    "to a scalar": reduce_module("f32", "add", "0", dims="{0,1}", shape="[7,90]"),
    "rows of one element (s32 max)": reduce_module("s32", "maximum", "-2147483648",
                                                   shape="[5,1]"),
    "rows of 33: a partial warp (f16 sum)": reduce_module("f16", "add", "0", shape="[4,33]"),
    "rows of 257: one more than the block (pred or)": reduce_module("pred", "or", "false",
                                                                    shape="[3,257]"),
    "s8 min of two minor dims": reduce_module("s8", "minimum", "127", dims="{1,2}",
                                              shape="[3,5,60]"),
    "argmax (variadic)": ARGMAX,
    "epilogue (rsqrt of the mean)": RMS,
    "row outputs (x / mean)": NORMALIZED,
    "softmax row kernel": """HloModule m
mx { a = f32[] parameter(0)
     b = f32[] parameter(1)
     ROOT c = f32[] maximum(a, b) }
ad { a = f32[] parameter(0)
     b = f32[] parameter(1)
     ROOT c = f32[] add(a, b) }
ENTRY e {
  x = f32[9,300] parameter(0)
  ninf = f32[] constant(-inf)
  m = f32[9] reduce(x, ninf), dimensions={1}, to_apply=mx
  mb = f32[9,300] broadcast(m), dimensions={0}
  d = f32[9,300] subtract(x, mb)
  ex = f32[9,300] exponential(d)
  z = f32[] constant(0)
  s = f32[9] reduce(ex, z), dimensions={1}, to_apply=ad
  sb = f32[9,300] broadcast(s), dimensions={0}
  ROOT r = f32[9,300] divide(ex, sb)
}""",
    "loop outputs of different sizes": """HloModule m
ENTRY e {
  x = f32[40,30] parameter(0)
  y = f32[30] parameter(1)
  a = f32[40,30] exponential(x)
  s = f32[30] sine(y)
  ROOT t = (f32[40,30], f32[30]) tuple(a, s)
}""",
    "loop reading a transposed operand": ELEMENTWISE,
    "while loop (host-driven)": LOOP,
    "conditional": BRANCHES,
}


@pytest.mark.parametrize("what", list(FOCUSED))
def test_focused_module_on_the_simulated_gpu_matches_the_interpreter(what):
    module = hlo_opt.parse(FOCUSED[what])
    check_on_gpu(module, module, what, build=simulated)


def test_row_kernels_run_their_recorded_launch():
    """Row kernels need exactly their threads per block: the simulated device launches what
    each kernel recorded (the max and the sum kernels: a block of 256 threads per row;
    the division: a thread per element)."""
    device = SimulatedDevice()
    module = hlo_opt.parse(FOCUSED["softmax row kernel"])
    exe = GpuExecutable(module, device)
    x = np.random.default_rng(0).standard_normal((9, 300)).astype(np.float32)
    assert_outputs_match(exe(x), hlo_opt.evaluate(module, [x]), "softmax")
    assert [launch[1:] for launch in device.launches] == [(9, 256), (9, 256), (11, 256)]


@pytest.mark.parametrize("blocks, concurrent", [(None, None), (2, None), (None, True)],
                         ids=["recorded launch", "2 blocks", "pthreads"])
def test_softmax_as_one_row_kernel_matches_the_interpreter(blocks, concurrent):
    """The whole softmax as one kernel (two reduces, the second reading the first along the
    row, and the normalized row): with its recorded launch (a block per row), with 2
    blocks for 9 rows, where each block takes rows ctaid, ctaid + nctaid, ... and rewrites
    one row's shared slots for the next without a barrier at the row's end (as
    emit_gpu_reduce claims it may), and with the block's threads as concurrent pthreads
    rather than fibers."""
    module = hlo_opt.parse(FOCUSED["softmax row kernel"])
    kernel = emit_gpu.emit_gpu_kernel(module.entry, "softmax")
    assert (kernel.threads, kernel.blocks) == (256, 9)
    x = np.random.default_rng(1).standard_normal((9, 300)).astype(np.float32)
    x[3, 5] = np.inf
    out = np.zeros((9, 300), np.float32)
    gpu_sim.run_kernel(kernel, [out], [x], blocks=blocks, concurrent=concurrent)
    with np.errstate(all="ignore"):
        want = hlo_opt.evaluate(module, [x])
    assert_outputs_match([out], want, f"softmax in {blocks or 9} blocks")


def test_arguments_and_outputs_on_the_simulated_gpu_and_a_profile():
    """An argument placed on the device beforehand is read in place, outputs can stay on
    the device (DeviceArray.get reads them back), and profile() times each kernel."""
    module = hlo_opt.parse(FOCUSED["softmax row kernel"])
    exe = simulated(module)
    x = np.random.default_rng(2).standard_normal((9, 300)).astype(np.float32)
    [y] = exe.run([exe.put(x)], device=True)
    assert_outputs_match([y.get()], hlo_opt.evaluate(module, [x]), "softmax on device")
    rows = exe.profile([x], calls=2)
    assert len(rows) == exe.stats["kernels"] and all(seconds > 0 for _, seconds, _, _ in rows)
