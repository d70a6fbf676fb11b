"""The GPU host program (`lowering/gpu_runtime.py`, `cuda_device.py`).

Without a GPU: `compile(target="gpu")` and `hlo-run --target=gpu` fail with one line saying
why; the host program's work, recorded by a fake device (tests/gpu_fake.py), is the
program's: launches in program order on the assigned buffers, temporaries with disjoint
live ranges sharing memory, loops and branches decided by values read back, scratch zeroed
and initial copies made before a launch. With a GPU (skipped otherwise, with the reason):
every corpus module runs and equals the interpreter, or is refused because one of its
kernels has no GPU code yet.
"""
from __future__ import annotations

import dataclasses
import types

import numpy as np
import pytest

import hlo_opt
from conftest import corpus_files, corpus_ids
from gpu_fake import FakeDevice, FakeDriver
from hlo_opt.errors import HloError, UnsupportedError
from hlo_opt.fusion.stage import fuse, has_fusions
from hlo_opt.interpreter import DISPATCH
from hlo_opt.interpreter.evaluator import evaluate_module
from hlo_opt.lowering import cuda_device, emit_gpu, emit_gpu_dot, gpu_runtime
from hlo_opt.lowering.gpu_runtime import GpuExecutable
from hlo_opt.lowering.program import KernelStep, While
from hlo_opt.tools import hlo_run
from hlo_opt.tools.hlo_run import random_inputs
from test_lowering_corpus import _assert_nan_safe, _sprinkle, assert_outputs_match

CHAIN = """HloModule chain
exp { p = f32[64] parameter(0)
      ROOT r = f32[64] exponential(p) }
neg { p = f32[64] parameter(0)
      ROOT r = f32[64] negate(p) }
abs { p = f32[64] parameter(0)
      ROOT r = f32[64] abs(p) }
sqrt { p = f32[64] parameter(0)
       ROOT r = f32[64] sqrt(p) }
ENTRY e {
  x = f32[64] parameter(0)
  a = f32[64] fusion(x), kind=kLoop, calls=exp
  b = f32[64] fusion(a), kind=kLoop, calls=neg
  c = f32[64] fusion(b), kind=kLoop, calls=abs
  ROOT d = f32[64] fusion(c), kind=kLoop, calls=sqrt
}"""

LOOP = """HloModule loop
cond { s = (s32[], f32[16]) parameter(0)
       i = s32[] get-tuple-element(s), index=0
       n = s32[] constant(1000)
       ROOT lt = pred[] compare(i, n), direction=LT }
body { s = (s32[], f32[16]) parameter(0)
       i = s32[] get-tuple-element(s), index=0
       one = s32[] constant(1)
       j = s32[] add(i, one)
       v = f32[16] get-tuple-element(s), index=1
       w = f32[16] exponential(v)
       ROOT t = (s32[], f32[16]) tuple(j, w) }
ENTRY e {
  x = f32[16] parameter(0)
  zero = s32[] constant(0)
  init = (s32[], f32[16]) tuple(zero, x)
  ROOT r = (s32[], f32[16]) while(init), condition=cond, body=body
}"""

BRANCHES = """HloModule branches
b0 { p = f32[8] parameter(0)
     ROOT r = f32[8] exponential(p) }
b1 { p = f32[8] parameter(0)
     ROOT r = f32[8] negate(p) }
b2 { p = f32[8] parameter(0)
     ROOT r = f32[8] sqrt(p) }
ENTRY e {
  k = s32[] parameter(0)
  x = f32[8] parameter(1)
  ROOT c = f32[8] conditional(k, x, x, x), branch_computations={b0, b1, b2}
}"""


@pytest.fixture(autouse=True)
def fresh_caches():
    """No device or kernel remembered between tests (each may fake another)."""
    cuda_device.open_device.cache_clear()
    gpu_runtime._kernels.clear()
    gpu_runtime._executables.clear()
    yield
    cuda_device.open_device.cache_clear()
    gpu_runtime._kernels.clear()
    gpu_runtime._executables.clear()


def _fake_bindings(monkeypatch, **calls):
    """cuda.bindings.driver replaced by a namespace of the given calls (CUresult ints)."""
    names = {100: b"CUDA_ERROR_NO_DEVICE", 999: b"CUDA_ERROR_UNKNOWN"}
    driver = types.SimpleNamespace(cuGetErrorName=lambda s: (0, names[int(s)]), **calls)
    monkeypatch.setattr(cuda_device, "_bindings", lambda: driver)


def _no_module():
    raise ModuleNotFoundError("No module named 'cuda'")


# ------------------------------------------------------------------ without a GPU

@pytest.mark.parametrize("setup, expected", [
    (lambda mp: mp.setattr(cuda_device, "_bindings", _no_module),
     "cuda-bindings package, which is not installed (No module named 'cuda'): "
     "pip install 'hlo-opt[gpu]'"),
    (lambda mp: _fake_bindings(mp, cuInit=lambda f: (100,)),
     "no GPU to run on: cuInit failed with CUDA_ERROR_NO_DEVICE"),
    (lambda mp: _fake_bindings(mp, cuInit=lambda f: (_ for _ in ()).throw(
        RuntimeError("libcuda.so.1: cannot open shared object file"))),
     "the CUDA driver library could not be loaded (RuntimeError: libcuda.so.1: cannot open"),
    (lambda mp: _fake_bindings(mp, cuInit=lambda f: (0,), cuDeviceGetCount=lambda: (0, 0)),
     "no GPU to run on: cuDeviceGetCount found no CUDA device"),
], ids=["no-package", "no-device", "no-driver-library", "zero-devices"])
def test_compile_for_gpu_without_one_says_why_in_one_line(monkeypatch, setup, expected):
    setup(monkeypatch)
    with pytest.raises(UnsupportedError) as e:
        hlo_opt.compile(CHAIN, target="gpu")
    assert expected in str(e.value) and "\n" not in str(e.value)


def test_hlo_run_gpu_without_one_is_one_line(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(cuda_device, "_bindings", _no_module)
    src = tmp_path / "chain.hlo"
    src.write_text(CHAIN)
    assert hlo_run.main([str(src), "--target=gpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pip install 'hlo-opt[gpu]'" in err[0], err


def test_fake_device_has_every_method_of_the_real_one():
    """The fake stands in for CudaDevice: what the runtime may call on one exists on both."""
    real = {n for n, v in vars(cuda_device.CudaDevice).items()
            if callable(v) and not n.startswith("_")}
    assert real <= set(dir(FakeDevice)), real - set(dir(FakeDevice))


def test_a_chain_launches_in_program_order_on_its_assigned_buffers():
    x = np.linspace(-1, 1, 64, dtype=np.float32)
    device = FakeDevice()
    exe = GpuExecutable(hlo_opt.parse(CHAIN), device)
    steps = exe.program.steps
    assert [type(s) for s in steps] == [KernelStep] * 4
    device.on_launch = lambda name, ptrs: device.write(ptrs[0], np.full(64, 7, np.float32))
    device.log.clear()
    [y] = exe(x)
    launches = device.launches()
    assert [l[1] for l in launches] == [s.kernel.name for s in steps]
    for launch, step in zip(launches, steps):
        k = step.kernel.kernel
        assert launch[2:5] == (k.blocks, k.threads, 0) and k.threads * k.blocks >= 64
        assert len(launch[5]) == k.n_outputs + k.n_inputs == 2
    ptr = [l[5] for l in launches]                  # (out, in) of each launch
    h2d = [e for e in device.log if e[0] == "h2d"]
    d2h = [e for e in device.log if e[0] == "d2h"]
    assert h2d == [("h2d", ptr[0][1], 256)] and d2h == [("d2h", ptr[3][0], 256)]
    assert [p[1] for p in ptr[1:]] == [p[0] for p in ptr[:3]]      # each reads the last
    assert ptr[0][0] == ptr[2][0] != ptr[1][0]      # a and c never live at once: one buffer
    assert device.log.index(d2h[0]) < device.log.index(("sync",))
    np.testing.assert_array_equal(y, np.full(64, 7, np.float32))


def test_a_while_loop_runs_its_body_as_long_as_the_condition_read_back_says():
    device = FakeDevice()
    exe = GpuExecutable(hlo_opt.parse(LOOP), device)
    [loop] = [s for s in exe.program.steps if isinstance(s, While)]
    cond_steps = [s.kernel.name for s in loop.cond.steps if isinstance(s, KernelStep)]
    body_steps = [s.kernel.name for s in loop.body.steps if isinstance(s, KernelStep)]
    cond, body = set(cond_steps), set(body_steps)
    assert cond and body and not cond & body
    decisions = iter([1, 1, 1, 0])                  # the condition holds 3 times
    device.on_launch = lambda name, ptrs: name in cond and device.write(
        ptrs[0], np.array([next(decisions)], np.uint8))
    device.log.clear()
    exe(np.ones(16, np.float32))
    names = [l[1] for l in device.launches()]
    assert sum(n in cond for n in names) == 4 * len(cond_steps)
    assert sum(n in body for n in names) == 3 * len(body_steps)
    assert names[-1] in cond                        # the last decision ended the loop
    reads = [e for e in device.log if e[0] == "d2h" and e[2] == 1]
    assert len(reads) == 4                          # one flag read back per decision
    cond_out = [l[5][0] for l in device.launches() if l[1] in cond]
    assert {r[1] for r in reads} == set(cond_out)


@pytest.mark.parametrize("index, branch", [(0, 0), (1, 1), (2, 2), (7, 2), (-1, 2)])
def test_a_conditional_runs_the_branch_its_index_read_back_selects(index, branch):
    device = FakeDevice()
    exe = GpuExecutable(hlo_opt.parse(BRANCHES), device)
    [step] = exe.program.steps[:1]
    names = [{s.kernel.name for s in p.steps if isinstance(s, KernelStep)}
             for p, _ in step.branches]
    device.log.clear()
    exe(np.int32(index), np.ones(8, np.float32))
    assert [l[1] for l in device.launches()] == list(names[branch])


def test_scratch_is_zeroed_and_initial_copies_made_before_each_launch(monkeypatch):
    """Fields a kernel may set: one more pointer after the inputs to a zeroed scratch
    buffer, output k starting as a copy of input j, dynamic shared memory."""
    plain = gpu_runtime.emit_gpu_kernel
    monkeypatch.setattr(gpu_runtime, "emit_gpu_kernel", lambda *a: dataclasses.replace(
        plain(*a), scratch_bytes=96, initial_copies=((0, 0),), shared_bytes=128))
    device = FakeDevice()
    exe = GpuExecutable(hlo_opt.parse(CHAIN), device)
    device.log.clear()
    exe(np.ones(64, np.float32))
    launches = device.launches()
    assert len(launches) == 4
    for launch in launches:
        out, inp, scratch = launch[5]
        at = device.log.index(launch)
        assert launch[4] == 128
        assert ("zero", scratch, 96) in device.log[at - 2:at]
        assert ("d2d", out, inp, 256) in device.log[at - 2:at]
        assert scratch not in (out, inp)


def test_gpu_arrays_are_read_in_place_and_outputs_can_stay_on_the_gpu():
    device = FakeDevice()
    exe = GpuExecutable(hlo_opt.parse(CHAIN), device)
    x = exe.put(np.arange(64, dtype=np.float32))
    device.log.clear()
    [y] = exe.run([x], device=True)
    launches = device.launches()
    assert launches[0][5][1] == x.ptr and launches[-1][5][0] == y.ptr
    assert not [e for e in device.log if e[0] in ("h2d", "d2h")]
    face = y.__cuda_array_interface__
    assert face["shape"] == (64,) and face["typestr"] == "<f4" and face["data"][0] == y.ptr
    device.write(y.ptr, np.full(64, 3, np.float32))
    np.testing.assert_array_equal(y.get(), np.full(64, 3, np.float32))
    with pytest.raises(HloError, match=r"argument 0: GPU array of float32\[32\] given"):
        exe.run([exe.put(np.zeros(32, np.float32))])


def test_an_op_without_gpu_code_is_refused_at_its_line():
    text = """HloModule m
ENTRY e {
  x = f32[4] parameter(0)
  ROOT c = f32[4] custom-call(x), custom_call_target="no_such_target"
}"""
    with pytest.raises(UnsupportedError) as e:
        GpuExecutable(hlo_opt.parse(text), FakeDevice())
    assert e.value.line == 4 and "custom-call (c)" in str(e.value)


def test_identical_kernels_are_one_function_of_one_ptx_module():
    text = CHAIN.replace("calls=abs", "calls=exp").replace("calls=sqrt", "calls=neg")
    device = FakeDevice()
    exe = GpuExecutable(hlo_opt.parse(text), device)
    assert exe.stats["kernels"] == 2 and exe.stats["kernel_calls"] == 4
    assert device.ptx.count(".entry") == 2


FILES = corpus_files()


def refusal(module) -> str | None:
    """Why some kernel of the module (fused for gpu unless it has fusions) has no GPU code
    yet, or None."""
    try:
        emit_gpu.emit_kernels(module if has_fusions(module) else fuse(module, "gpu"))
    except UnsupportedError as e:
        return str(e)
    return None


@pytest.mark.parametrize("path", FILES, ids=corpus_ids(FILES))
def test_corpus_module_has_a_gpu_program_exactly_when_every_kernel_has_gpu_code(path):
    """On the fake device: the host program of each module whose kernels all have PTX is
    built, loaded and run, each launch passing one device buffer per output leaf and input
    (and scratch); the others are refused when compiled."""
    module = hlo_opt.parse(path.read_text(), str(path))
    if refusal(module) is not None:
        with pytest.raises(UnsupportedError):
            GpuExecutable(module, FakeDevice())
        return
    device = FakeDevice()
    exe = GpuExecutable(module, device)
    exe.run(random_inputs(module, seed=0))
    arity = {c.name: c.kernel.n_outputs + c.kernel.n_inputs + len(c.temps)
             for c in exe.kernels.values()}
    launches = device.launches()
    assert launches and device.ptx.count(".entry") == len(exe.kernels)
    assert all(len(l[5]) == arity[l[1]] for l in launches)


# --------------------------------------------------------------------- on a GPU

GPU = cuda_device.unavailable_reason()


def tf32_rna(x: np.ndarray) -> np.ndarray:
    """PTX's cvt.rna.tf32.f32 on float32 values, as float64 arithmetic: each magnitude
    rounded to tf32's ulp (10 stored mantissa bits; 2^-136 among subnormals), ties away
    from zero; past the largest tf32 value, infinity; NaN and infinities kept."""
    x = np.asarray(x).astype(np.float64)
    _, exponent = np.frexp(np.where(np.isfinite(x), x, 1.0))
    ulp = np.maximum(np.ldexp(1.0, exponent - 11), 2.0 ** -136)
    with np.errstate(invalid="ignore", over="ignore"):
        magnitude = np.floor(np.abs(x) / ulp + 0.5) * ulp
    magnitude = np.where(magnitude >= 2.0 ** 128, np.inf, magnitude)
    return np.where(np.isfinite(x), np.copysign(magnitude, x), x).astype(np.float32)


def on_tf32(op, arch: str) -> bool:
    """Whether dot or convolution `op` runs on `arch`'s tensor cores as tf32
    (emit_gpu_dot.tensor_core: f32 operands at default precision)."""
    gemm = emit_gpu_dot.TO_GEMM[op.opcode](op)
    core = emit_gpu_dot.tensor_core(op, gemm, arch)
    return core is not None and core.operand == "tf32"


TF32_UNIT = 2.0 ** -11          # tf32's unit roundoff: 10 stored mantissa bits
F32_RTOL = 1e-4                 # assert_outputs_match's for f32


def gpu_reference(module, args, arch: str) -> tuple[list[np.ndarray], float]:
    """What the GPU computes for `module`, and the factor by which f32 tolerances widen:
    the interpreter's result, except that the operands of f32 dots and convolutions that
    run as tf32 are rounded to tf32 first, as the kernels round them on their way into
    the tiles. A tolerance alone cannot stand in for the rounding: a tf32 product's error
    of ~1e-3 grows through a recurrence or a softmax of large logits (scan_rnn,
    gpt2_block_small: a few percent). What is left is operands that the kernel and the
    interpreter compute a few f32 ulps apart (a fused exp, a sum) and that round to
    neighbouring tf32 values: each moves a product by up to 2 TF32_UNIT, K of them by
    about sqrt(K) times that, K the longest tf32 contraction; that is the tolerance."""
    longest = [0]

    def rounded(impl):
        def run(inst, operands, ev):
            if all(x.dtype == np.float32 for x in operands) and on_tf32(inst, arch):
                longest[0] = max(longest[0], emit_gpu_dot.TO_GEMM[inst.opcode](inst).k)
                operands = [tf32_rna(x) for x in operands]
            return impl(inst, operands, ev)
        return run
    dispatch = {**DISPATCH, **{op: rounded(DISPATCH[op]) for op in emit_gpu_dot.TO_GEMM}}
    want = evaluate_module(module, args, dispatch)
    return want, max(1.0, 2 * TF32_UNIT * longest[0] ** 0.5 / F32_RTOL)


def check_on_gpu(compiled, module, what: str, build=None) -> None:
    """`compiled` (the module or what optimize made of it) runs on the GPU (`build` makes
    its executable: hlo_opt.compile's by default) as the interpreter runs `module`, on
    random inputs and on inputs with edge values (gpu_reference: f32 contractions on
    tensor cores take tf32 operands); or it is refused because a kernel has no
    GPU code yet."""
    build = build or (lambda m: hlo_opt.compile(m, target="gpu"))
    if refusal(compiled) is not None:
        with pytest.raises(UnsupportedError):
            build(compiled)
        return
    exe = build(compiled)
    args = random_inputs(module, seed=0)
    with np.errstate(all="ignore"):
        want, widen = gpu_reference(module, args, exe.arch)
        assert_outputs_match(exe.run(args), want, what, widen)
        edgy = _sprinkle(args, np.random.default_rng(1))
        got, (want, widen) = exe.run(edgy), gpu_reference(module, edgy, exe.arch)
    exact_nan = not any(i.opcode == "fft" for i in module.instructions())
    _assert_nan_safe(got, want, what, exact_nan, widen)


@pytest.mark.skipif(GPU is not None, reason=f"no GPU: {GPU}")
@pytest.mark.parametrize("path", FILES, ids=corpus_ids(FILES))
def test_corpus_module_on_the_gpu_matches_the_interpreter(path):
    module = hlo_opt.parse(path.read_text(), str(path))
    check_on_gpu(module, module, path.name)


SHARED = [f for f in FILES if f.parent.name == "shared" and not f.name.endswith(".xla_opt.hlo")]


@pytest.mark.skipif(GPU is not None, reason=f"no GPU: {GPU}")
@pytest.mark.parametrize("path", SHARED, ids=corpus_ids(SHARED))
def test_optimized_module_on_the_gpu_matches_the_interpreter(path):
    """What hlo_opt.optimize makes for the gpu target (rewrites, gpu fusion) runs right."""
    pytest.importorskip("egglog", reason="optimize needs egglog (not carried to the GPU "
                                         "machine by default: docs/gpu.md)")
    module = hlo_opt.parse(path.read_text(), str(path))
    check_on_gpu(hlo_opt.optimize(module, target="gpu", time_limit=20), module, path.name)


@pytest.mark.parametrize("package", ["cu13", "cuda_nvcc"])
def test_libdevice_of_nvidias_pip_packages_is_found(monkeypatch, tmp_path, package):
    """hlo-opt[gpu] installs libdevice with nvidia-nvvm (CUDA 13: nvidia/cu13/) or
    nvidia-cuda-nvcc-cu12 (nvidia/cuda_nvcc/): found with no CUDA installation."""
    from hlo_opt.lowering import nvptx
    bitcode = tmp_path / "nvidia" / package / "nvvm" / "libdevice" / "libdevice.10.bc"
    bitcode.parent.mkdir(parents=True)
    bitcode.write_bytes(b"BC")
    real_glob = nvptx.glob.glob
    monkeypatch.setenv("CUDA_HOME", "")
    monkeypatch.setattr(nvptx.shutil, "which", lambda name: None)
    monkeypatch.setattr(nvptx.glob, "glob", lambda p: [] if p.startswith("/usr/local/cuda")
                        else real_glob(p))
    monkeypatch.setattr(nvptx, "_pip_nvidia_dirs", lambda: [str(tmp_path / "nvidia")])
    nvptx.libdevice_path.cache_clear()
    try:
        assert nvptx.libdevice_path() == str(bitcode)
    finally:
        nvptx.libdevice_path.cache_clear()


def test_bench_gpu_without_a_gpu_says_why_in_one_line(monkeypatch, capsys):
    from hlo_opt.tools import bench_gpu
    monkeypatch.setattr(cuda_device, "_bindings", _no_module)
    assert bench_gpu.main(["--no-large"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("bench_gpu: ") and "hlo-opt[gpu]" in err[0]


def test_bench_gpu_counts_dot_flops_and_sums_ratios_over_long_modules():
    from hlo_opt.tools import bench_gpu
    module = hlo_opt.parse("""HloModule d
ENTRY e {
  a = f32[3,8,16] parameter(0)
  b = f32[3,16,4] parameter(1)
  ROOT d = f32[3,8,4] dot(a, b), lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={1}
}""")
    assert bench_gpu.dot_flops(module.entry) == 2 * 3 * 8 * 4 * 16
    rows = [{"name": "fast", "ours": 2e-3, "xla": 1e-3, "top_kernels": [
                {"kernel": "k", "seconds": 1e-3, "launches": 1, "bytes": 32 << 20,
                 "gbps": 33.5, "of_copy": 0.8, "tflops": None}]},
            {"name": "slow", "ours": 4e-3, "xla": 2e-3},
            {"name": "tiny", "ours": 1e-5, "xla": 2e-5},
            {"name": "dot", "refused": "GPU code for dot (d) is not emitted yet", "xla": 1e-3}]
    text = bench_gpu.report(rows, "fake GPU", 3e12)
    assert "geomean ours/xla: 2.00 over 2 modules of >= 1 ms" in text
    assert "1 refused" in text and "refused: GPU code for dot" in text
    assert "1 of 1 reach 70%" in text


def test_cuda_device_calls_the_driver_as_cuda_bindings_documents(monkeypatch):
    """Context, stream and architecture at open; a launch passes an array of pointers to
    the argument values (what cuLaunchKernel's kernelParams is) on the device's stream;
    copies, memsets and reads go on that stream too."""
    driver = FakeDriver()
    monkeypatch.setattr(cuda_device, "_bindings", lambda: driver)
    device = cuda_device.open_device()
    assert [c[0] for c in driver.calls[:6]] == [
        "cuInit", "cuDeviceGetCount", "cuDeviceGet", "cuDevicePrimaryCtxRetain",
        "cuCtxSetCurrent", "cuStreamCreate"]
    assert device.arch == "sm_90" and device.name == "Fake H100"
    fn = device.function(device.load(".version 8.0"), "k")
    assert driver.calls[-2] == ("cuModuleLoadData", b".version 8.0\0")
    driver.arity[fn] = 3
    device.launch(fn, 5, 256, 48, [0x1000, 0x2000, 0x3000])
    assert driver.calls[-1] == ("cuLaunchKernel", fn, 5, 1, 1, 256, 1, 1, 48, "stream",
                                [0x1000, 0x2000, 0x3000], 0)
    for pointers in ([0x4000, 0x2000, 0x3000], [0x1000, 0x2000, 0x3000]):    # reused arrays
        device.launch(fn, 5, 256, 48, pointers)
        assert driver.calls[-1][10] == pointers
    host = np.zeros(4, np.float32)
    device.copy_d2h(host, 0x1000)
    device.zero(0x2000, 64)
    assert driver.calls[-2:] == [("cuMemcpyDtoHAsync", host.ctypes.data, 0x1000, 16, "stream"),
                                 ("cuMemsetD8Async", 0x2000, 0, 64, "stream")]


def test_a_failing_driver_call_is_one_line_naming_it(monkeypatch):
    driver = FakeDriver(fail={"cuMemAlloc": 2})
    monkeypatch.setattr(cuda_device, "_bindings", lambda: driver)
    with pytest.raises(cuda_device.CudaError, match="CUDA cuMemAlloc failed: "
                                                    "CUDA_ERROR_OUT_OF_MEMORY"):
        cuda_device.open_device().alloc(1 << 40)


def test_fake_driver_signatures_are_cuda_bindings_own():
    """Where cuda-bindings is installed, every call the fake stands in for has the same
    parameters in the real package (read from the first line of its docstring)."""
    import inspect
    import re
    real = pytest.importorskip("cuda.bindings.driver", reason="cuda-bindings not installed")
    for name, fn in vars(FakeDriver).items():
        if name.startswith("cu") and callable(fn):
            head = getattr(real, name).__doc__.split("\n")[0]
            params = [re.split(r"[\s*]+", p.split(":")[0].strip())[-1]
                      for p in head[head.index("(") + 1:head.rindex(")")].split(",") if p.strip()]
            assert list(inspect.signature(fn).parameters)[1:] == params, (name, head)


@pytest.mark.parametrize("capability, arch", [((9, 0), "sm_90"), ((8, 6), "sm_86"),
                                              ((8, 9), "sm_89"), ((10, 3), "sm_103"),
                                              ((12, 1), "sm_121"), ((9, 9), "sm_90")])
def test_a_device_gets_the_newest_architecture_it_runs(capability, arch):
    from hlo_opt.targets.gpu import arch_for
    assert arch_for(*capability) == arch


def test_hlo_run_gpu_runs_the_module_and_profiles_its_kernels(monkeypatch, tmp_path, capsys):
    device = FakeDevice(on_launch=lambda name, ptrs: None)
    monkeypatch.setattr(gpu_runtime, "open_device", lambda: device)
    src = tmp_path / "chain.hlo"
    src.write_text(CHAIN)
    assert hlo_run.main([str(src), "--target=gpu", "--profile", "2",
                         "--out", str(tmp_path / "o.npz")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("out0: float32[64]") and len(out) == 5
    assert all("GB/s" in line and "x1" in line for line in out[1:])
    assert np.load(tmp_path / "o.npz")["out0"].shape == (64,)
    assert len(device.launches()) == 4 * (1 + 1 + 2)   # the run, profile's warm-up, 2 calls


def test_compile_for_gpu_runs_through_the_driver_from_any_thread(monkeypatch):
    """hlo_opt.compile(target="gpu") end to end over the driver fake: the module's PTX
    loaded once, a call from another thread makes the context current first, copies the
    argument in, launches the four kernels on the stream, copies the output out, waits."""
    import collections
    import threading
    driver = FakeDriver()
    driver.arity = collections.defaultdict(lambda: 2)
    monkeypatch.setattr(cuda_device, "_bindings", lambda: driver)
    exe = hlo_opt.compile(CHAIN, target="gpu")
    assert hlo_opt.compile(CHAIN, target="gpu") is exe       # cached by fingerprint
    assert [c[0] for c in driver.calls].count("cuModuleLoadData") == 1
    driver.calls.clear()
    done = []
    thread = threading.Thread(target=lambda: done.append(exe(np.ones(64, np.float32))))
    thread.start()
    thread.join()
    names = [c[0] for c in driver.calls]
    assert done and names == ["cuCtxSetCurrent", "cuMemcpyHtoDAsync"] + ["cuLaunchKernel"] * 4 \
        + ["cuMemcpyDtoHAsync", "cuStreamSynchronize"]
