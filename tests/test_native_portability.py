"""Native code runs on every x86-64 CPU: whatever CPU model the code is generated for, every
symbol the object code needs is one the runtime provides (lowering/libcalls.py), and code
for the x86-64 baseline (no AVX, no F16C: every f16 conversion is a call to our soft-float
helpers) computes what the interpreter does.

Code for another CPU model is generated in a subprocess with HLO_OPT_CPU set (the model is
fixed per process), so an abort there fails one test instead of killing pytest.
"""
from __future__ import annotations

import ctypes
import os
import platform
import subprocess
import sys
from pathlib import Path

import llvmlite.binding as llvm
import numpy as np
import pytest

import hlo_opt
from hlo_opt import UnsupportedError
from hlo_opt.lowering import jit, objfile
from hlo_opt.lowering.ltypes import ELEM_TYPES
from hlo_opt.targets import cpu_facts
from lowering_helpers import assert_matches, converts_module, elementwise_module, tuple_module

TESTS = Path(__file__).parent
CPU_MODELS = ["x86-64", "x86-64-v2", "haswell", "skylake-avx512", "znver4", "sapphirerapids"]
on_x86_64 = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"),
                               reason="x86-64 CPU models")
# Tests that start a subprocess for a chosen CPU model run from the default process only.
parent_only = pytest.mark.skipif(bool(os.environ.get("HLO_OPT_CPU")),
                                 reason="already running for a chosen CPU model")


# ---------------------------------------------------------- representative kernels

_SCALARS = "\n".join(f"{op}_{t} {{ a = {t}[] parameter(0)\n b = {t}[] parameter(1)\n "
                     f"ROOT r = {rt}[] {op}(a, b){extra} }}"
                     for op, t, rt, extra in [("add", "f32", "f32", ""), ("add", "s64", "s64", ""),
                                              ("add", "c64", "c64", ""), ("maximum", "f16", "f16", ""),
                                              ("compare", "f32", "pred", ", direction=LT"),
                                              ("compare", "s64", "pred", ", direction=GT")])
_DOT = "lhs_contracting_dims={1}, rhs_contracting_dims={0}"
_CONV = "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f"
STRUCTURED = tuple_module([
    "a = f32[64,48] parameter(0)", "b = f32[48,80] parameter(1)", "h = f16[20,30] parameter(2)",
    "g = f16[30,10] parameter(3)", "z = c64[9,30] parameter(4)", "w = c64[30,10] parameter(5)",
    "n = s64[9,30] parameter(6)", "m = s64[30,10] parameter(7)", "i = s32[5] parameter(8)",
    "x = f32[2,9,9,3] parameter(9)", "k = f32[3,3,3,8] parameter(10)",
    "cx = c128[1,5,5,2] parameter(11)", "ck = c128[3,3,2,3] parameter(12)",
    "zero = f32[] constant(0)", "izero = s64[] constant(0)", "czero = c64[] constant((0, 0))",
    "hmin = f16[] constant(-inf)", "d = f64[40,30] parameter(13)", "e = f64[30,50] parameter(14)",
    "big = f32[512,1024] parameter(15)",
    f"dot.f32 = f32[64,80] dot(a, b), {_DOT}", f"dot.f16 = f32[20,10] dot(h, g), {_DOT}",
    f"dot.f64 = f64[40,50] dot(d, e), {_DOT}", f"dot.c64 = c64[9,10] dot(z, w), {_DOT}", f"dot.s64 = s64[9,10] dot(n, m), {_DOT}",
    f"conv.f32 = f32[2,9,9,8] convolution(x, k), {_CONV}",
    f"conv.c128 = c128[1,5,5,3] convolution(cx, ck), {_CONV}",
    "sum.f32 = f32[64] reduce(a, zero), dimensions={1}, to_apply=add_f32",
    "exp.threads = f32[512,1024] exponential(big)",
    "sum.s64 = s64[30] reduce(n, izero), dimensions={0}, to_apply=add_s64",
    "sum.c64 = c64[] reduce(z, czero), dimensions={0,1}, to_apply=add_c64",
    "max.f16 = f16[20] reduce(h, hmin), dimensions={1}, to_apply=maximum_f16",
    "window.f32 = f32[2,9,9,3] reduce-window(x, zero), window={size=1x3x3x1 pad=0_0x1_1x1_1x0_0}, "
    "to_apply=add_f32",
    "sort.f32 = f32[64,48] sort(a), dimensions={1}, to_apply=compare_f32",
    "sort.s64 = s64[9,30] sort(n), dimensions={0}, to_apply=compare_s64",
    "gather.f32 = f32[5,80] gather(b, i), offset_dims={1}, collapsed_slice_dims={0}, "
    "start_index_map={0}, index_vector_dim=1, slice_sizes={1,80}",
    "fft.c64 = c64[9,30] fft(z), fft_type=FFT, fft_length={30}",
    "rfft.f32 = c64[64,25] fft(a), fft_type=RFFT, fft_length={48}",
    "irfft.c64 = f32[9,58] fft(z), fft_type=IRFFT, fft_length={58}",
], _SCALARS)
REPRESENTATIVE = {"structured": STRUCTURED, "converts": converts_module(),
                  **{f"elementwise.{t}": elementwise_module(t) for t in ELEM_TYPES}}


@pytest.mark.parametrize("name", REPRESENTATIVE)
def test_representative_kernels_link(name):
    """Compiles to kernels (no op falls back) for the target CPU: the JIT checked every
    symbol each object file needs against what the runtime provides before loading it."""
    exe = hlo_opt.compile(REPRESENTATIVE[name])
    assert exe.stats["kernels"] and not exe.stats["fallbacks"], exe.stats["fallbacks"]


# The 8-bit float formats differ only in constants (float8.FORMATS): the CPU-model runs
# compile one of each style, which keeps them within CI's time.
_ONE_PER_STYLE = {"f8e5m2", "f8e4m3fn", "f8e4m3fnuz"}
CPU_MODEL_KERNELS = [n for n in REPRESENTATIVE
                     if not n.startswith("elementwise.f8") or n.split(".")[1] in _ONE_PER_STYLE]


@pytest.fixture(scope="module")
def cpu_model_runs():
    """One subprocess per CPU model compiling CPU_MODEL_KERNELS, all started at once."""
    tests = [f"tests/test_native_portability.py::test_representative_kernels_link[{n}]"
             for n in CPU_MODEL_KERNELS]
    runs = {cpu: _pytest_for(cpu, tests) for cpu in CPU_MODELS}
    yield runs
    for run in runs.values():
        run.kill()


@on_x86_64
@parent_only
@pytest.mark.parametrize("cpu", CPU_MODELS)
def test_every_cpu_model_links_against_the_runtime(cpu, cpu_model_runs):
    """Code generated for each CPU model (not run: the host may lack its instructions)
    needs only symbols the runtime provides."""
    _passes(cpu, cpu_model_runs[cpu])


# ------------------------------------------------------------- conversions to f16

def _f16_neighbourhood(dtype) -> np.ndarray:
    """Values of `dtype` where rounding to f16 is hard: every f16 value, every midpoint
    between neighbours (ties, including the one to inf at 65520), the `dtype` values just
    above and below each midpoint (where rounding through f32 first goes wrong), halves
    of the smallest subnormal, values below f16's range, ±0, ±inf, NaNs; both signs."""
    finite = np.arange(0x7C00, dtype=np.uint16).view(np.float16).astype(dtype)
    mids = (finite[:-1] + finite[1:]) / 2
    mids = np.concatenate([mids, [dtype(65520.0)]])
    near = [np.nextafter(mids, dtype(np.inf)), np.nextafter(mids, dtype(0))]
    tiny = np.array([2.0 ** -25, 2.0 ** -26, 3 * 2.0 ** -26, 1e-30, 1e30],
                    dtype=np.float64).astype(dtype)
    special = np.array([np.finfo(dtype).tiny, np.finfo(dtype).smallest_subnormal,
                        np.finfo(dtype).max, np.inf, 0.0], dtype)
    positive = np.concatenate([finite, mids, *near, tiny, np.nextafter(tiny, dtype(1)),
                               np.nextafter(tiny, dtype(0)), special])
    values = np.concatenate([positive, -positive])
    info, uint = np.finfo(dtype), np.dtype(f"u{np.dtype(dtype).itemsize}")
    inf = int(np.array(np.inf, dtype).view(uint))
    nans = [inf | 1 << (info.nmant - 1), inf | 1, inf | 0b101 << (info.nmant - 3)]  # quiet,
    nans += [n | 1 << (8 * uint.itemsize - 1) for n in nans]                       # signaling
    return np.concatenate([values, np.array(nans, uint).view(dtype)])


def _assert_converted(got: np.ndarray, source: np.ndarray) -> None:
    """Bit-exact with numpy's own (correctly rounded) conversion; NaNs stay NaN with their
    sign and come out quiet, as the x86 instructions make them (numpy keeps a signaling
    NaN's payload as it is)."""
    with np.errstate(over="ignore"):
        want = source.astype(got.dtype)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(np.signbit(got[nan]), np.signbit(want[nan]))
    quiet = 1 << (np.finfo(got.dtype).nmant - 1)
    assert np.all(got[nan].view(f"u{got.dtype.itemsize}") & quiet)
    assert_matches(got[~nan], want[~nan], 0, f"{source.dtype} -> {got.dtype}")


def test_convert_f64_to_f16_rounds_once():
    x = _f16_neighbourhood(np.float64)
    text = (f"HloModule c\nENTRY e {{\n  x = f64[{x.size}] parameter(0)\n"
            f"  ROOT y = f16[{x.size}] convert(x)\n}}\n")
    _assert_converted(hlo_opt.compile(text)(x)[0], x)


_LOOP = """define void @{name}(ptr %src, ptr %dst, i64 %n) {{
entry:
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%next, %loop]
  %p = getelementptr {src}, ptr %src, i64 %i
  %x = load {src}, ptr %p
  %y = {cast} {src} %x to {dst}
  %q = getelementptr {dst}, ptr %dst, i64 %i
  store {dst} %y, ptr %q
  %next = add i64 %i, 1
  %done = icmp eq i64 %next, %n
  br i1 %done, label %exit, label %loop
exit:
  ret void
}}
"""
_IR_TYPES = {np.float16: "half", np.float32: "float", np.float64: "double"}


@pytest.mark.parametrize("src,dst,helper", [(np.float16, np.float32, "__extendhfsf2"),
                                            (np.float32, np.float16, "__truncsfhf2"),
                                            (np.float64, np.float16, "__truncdfhf2")])
def test_llvm_half_conversions_match_numpy(src, dst, helper):
    """LLVM's own fpext/fptrunc, whatever they become on the target CPU: an instruction,
    or (on the baseline, which has neither F16C nor AVX512-FP16) a call to our helper."""
    name = f"cvt_{helper}"
    cast = "fpext" if np.dtype(dst).itemsize > np.dtype(src).itemsize else "fptrunc"
    text = _ir(_LOOP.format(name=name, src=_IR_TYPES[src], dst=_IR_TYPES[dst], cast=cast))
    if cpu_facts.target_cpu()[0] == "x86-64":
        assert helper in objfile.symbols(jit._object_code([text], 3)).undefined
    address = jit.compile_ir(text, [name])[name]
    x = np.arange(1 << 16, dtype=np.uint16).view(np.float16) if src is np.float16 \
        else _f16_neighbourhood(src)
    out = np.empty(x.size, dst)
    ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(address)(
        x.ctypes.data, out.ctypes.data, x.size)
    _assert_converted(out, x)


@on_x86_64
@parent_only
def test_baseline_x86_64_code_computes_what_the_interpreter_does():
    """Every elementwise op and convert on every type, and the f16 conversions above, in
    code for the x86-64 baseline, run on this machine."""
    _passes("x86-64", _pytest_for("x86-64", ["tests/test_lowering_ops.py",
                                             "tests/test_native_portability.py",
                                             "-k", "not representative"]))


def _host_has(*features: str) -> bool:
    host = llvm.get_host_cpu_features()
    return all(host.get(f, False) for f in features)


@on_x86_64
@parent_only
@pytest.mark.skipif(platform.machine() in ("x86_64", "AMD64") and not _host_has("avx2", "fma"),
                    reason="runs AVX2 code")
def test_avx2_code_computes_gemms_and_tanh_as_the_interpreter_does():
    """Code for haswell (AVX2, 16 vector registers: its own micro-tile and math code paths)
    run on this machine: GEMMs at every ragged edge of the micro-tile and the dot tests, and
    tanh within its documented ulps."""
    _passes("haswell", _pytest_for("haswell", [
        "tests/test_lowering_structured.py", "tests/test_lowering_math.py",
        "-k", "test_dot or off_the_micro_tile or tanh"]))


def _pytest_for(cpu: str, tests: list[str]) -> subprocess.Popen:
    """pytest on `tests` in a process generating code for `cpu` (compiling in that
    process: the runs go in parallel)."""
    env = dict(os.environ, HLO_OPT_CPU=cpu, HLO_OPT_COMPILE_WORKERS="0")
    env.pop("HLO_OPT_CPU_FEATURES", None)
    return subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                             *tests], cwd=TESTS.parent, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _passes(cpu: str, run: subprocess.Popen) -> None:
    output, _ = run.communicate(timeout=600)
    assert run.returncode == 0, f"{cpu} (exit {run.returncode}):\n{output[-4000:]}"


# ------------------------------------------------------------------------ the check

def _ir(body: str) -> str:
    """An LLVM module for this process's target triple."""
    return f'target triple = "{llvm.get_process_triple()}"\n{body}'


def test_object_file_symbols_are_read():
    text = _ir("declare double @sin(double)\ndefine double @f(double %x) {\n"
               "  %y = call double @sin(double %x)\n  ret double %y\n}\n")
    table = objfile.symbols(jit._object_code([text], 0))
    assert table.defined == {"f"} and table.undefined == {"sin"}


def test_code_needing_an_unknown_symbol_is_refused_not_aborted():
    """MCJIT would abort the process on the unresolved symbol; the JIT refuses to load it."""
    text = _ir("declare void @hlo_no_such_function()\ndefine void @calls_nothing_known() {\n"
               "  call void @hlo_no_such_function()\n  ret void\n}\n")
    with pytest.raises(UnsupportedError, match="hlo_no_such_function"):
        jit.compile_ir(text, ["calls_nothing_known"])
    assert hlo_opt.compile(REPRESENTATIVE["elementwise.f16"]).stats["kernels"]   # still usable



_AVX512_ONLY = """declare <16 x float> @llvm.x86.avx512.rsqrt14.ps.512(<16 x float>, <16 x float>, i16)
define <16 x float> @avx512_only(<16 x float> %x) {
  %y = call <16 x float> @llvm.x86.avx512.rsqrt14.ps.512(<16 x float> %x, <16 x float> %x, i16 -1)
  ret <16 x float> %y
}"""


def compile_batch_with_an_avx512_module():
    """(Run by the test below, in a process for the baseline CPU.) Compiles a module LLVM
    cannot lower for that CPU (it aborts on it) alone, then in a batch of several chunks,
    then alone again: more aborts than the test's two workers."""
    fine = [(_ir(f"define i32 @g{k}(i32 %x) {{\n  ret i32 %x\n}}"), [f"g{k}"])
            for k in range(jit._LINK)]
    for batch in ([], fine, []):
        try:
            jit.compile_batch(batch + [(_ir(_AVX512_ONLY), ["avx512_only"])])
        except UnsupportedError as e:
            print("refused:", e)
    print("workers left:", sum(p.poll() is None for p in jit._workers.procs))


@on_x86_64
@parent_only
def test_llvm_aborting_in_a_compile_worker_is_an_error_not_an_abort():
    """Kernels compiled in worker processes: a worker LLVM kills is an UnsupportedError
    here (compiling the same code in this process would abort it)."""
    env = dict(os.environ, HLO_OPT_CPU="x86-64", HLO_OPT_COMPILE_WORKERS="2")
    run = subprocess.run([sys.executable, "-W", "always::ResourceWarning", "-c",
                          "import test_native_portability as t; "
                          "t.compile_batch_with_an_avx512_module()"],
                         cwd=TESTS, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.count("refused: ") == 3 and \
        "compile worker exited" in run.stdout and "workers left: 2" in run.stdout, \
        run.stdout + run.stderr[-2000:]
    assert "ResourceWarning" not in run.stderr, run.stderr[-2000:]


@parent_only
def test_compile_workers_leave_no_pipe_open_at_exit():
    """A process that compiled through the workers closes their pipes when it ends."""
    env = dict(os.environ, HLO_OPT_COMPILE_WORKERS="2")
    run = subprocess.run([sys.executable, "-W", "always::ResourceWarning", "-c",
                          "import hlo_opt, test_native_portability as t; "
                          "hlo_opt.compile(t.REPRESENTATIVE['elementwise.f32'])"],
                         cwd=TESTS, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "ResourceWarning" not in run.stderr, run.stderr[-2000:]
