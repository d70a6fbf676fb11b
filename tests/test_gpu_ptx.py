"""GPU code (`lowering/emit_gpu.py`, `emit_gpu_reduce.py`, `nvptx.py`): PTX for the loop
and reduce kernels the gpu fusion stage forms (sort and scatter kernels: their own file,
test_gpu_sort_scatter.py), assembled by `ptxas --gpu-name sm_90` (CI has
ptxas but no GPU); kernels of other kinds are one-line UnsupportedErrors naming the op; the
GPU and CPU paths share the kernel formation, the per-element code and the reducers."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

import hlo_opt
from conftest import corpus_files, corpus_ids
from hlo_opt.errors import UnsupportedError
from hlo_opt.fusion.stage import fuse
from hlo_opt.lowering import (elemental, emit_elementwise, emit_gpu, emit_gpu_reduce,
                              emit_kernel, emit_reduce, nvptx)
from hlo_opt.lowering.ltypes import ELEM_TYPES
from lowering_helpers import ARGMAX_REDUCER, converts_module, elementwise_module
from test_fusion import SOFTMAX
from hlo_opt.tools.hlo_opt_cli import main

PTXAS = shutil.which("ptxas")
needs_ptxas = pytest.mark.skipif(PTXAS is None, reason="ptxas (CUDA) is not on PATH")
needs_libdevice = pytest.mark.skipif(nvptx.libdevice_path() is None,
                                     reason="libdevice.10.bc (CUDA nvvm) not found")

FILES = corpus_files()
# The corpus modules with a kernel whose phases cannot share one launch (a dot or
# convolution whose result a reduce or reduce-window reads in the same fusion: XLA's fused
# softmax logits, an average pool after a convolution): it runs as several launches.
# the scans' step kernel: its dot and the dynamic-update-slice stacking the step's result
# into the loop state run over different index spaces; transformer_lm_train: its SGD updates
# p - lr * dot (dots computed transposed, fusion/transposed_dots.py) are sibling GEMMs of one
# kernel, one launch each
SPLIT = {"shared/cnn_small.xla_opt", "transformer_lm.xla_opt", "transformer_lm_train.xla_opt",
         "scan_rnn", "scan_rnn_grad", "transformer_lm_train"}


def assemble(ptx: str, tmp_path, arch: str = "sm_90") -> None:
    src = tmp_path / "k.ptx"
    src.write_text(ptx)
    r = subprocess.run([PTXAS, "--gpu-name", arch, str(src), "-o", str(tmp_path / "k.cubin")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[:2000]


def _module_id(path) -> str:
    return corpus_ids([path])[0].removesuffix(".hlo")


@needs_ptxas
@pytest.mark.parametrize("path", FILES, ids=corpus_ids(FILES))
def test_every_kernel_of_the_corpus_assembles(path, tmp_path):
    """Every kernel of the module fused for gpu has GPU code: the module's PTX (what
    --emit=ptx prints, one PTX module) assembles for sm_90; a kernel whose phases cannot
    share a launch is several (SPLIT). Its index arithmetic divides in 32 bits (LLVM
    narrows the divisions of positions it knows are below the loops' bounds, all < 2^32
    here): no 64-bit div/rem, which the GPU emulates in dozens of instructions."""
    module = fuse(hlo_opt.parse(path.read_text()), "gpu")
    kernels = emit_gpu.emit_kernels(module)
    ptx = nvptx.ptx([k.ir for k in kernels], [k.name for k in kernels])
    assert not re.search(r"\b(div|rem)\.[us]64\b", ptx)                  # 32-bit index math
    assemble(ptx, tmp_path)
    split = {k.name for k in kernels} - {name for name, _ in emit_gpu.module_kernels(module)}
    assert bool(split) == (_module_id(path) in SPLIT), split


TYPED = {"converts": converts_module(), **{t: elementwise_module(t) for t in ELEM_TYPES}}


@needs_ptxas
@needs_libdevice
@pytest.mark.parametrize("arch", ["sm_75", "sm_90"])
@pytest.mark.parametrize("what", list(TYPED))
def test_every_elementwise_op_and_convert_on_every_type_assembles(what, arch, tmp_path):
    """The CPU lowering's whole elementwise table (and every convert) on each type it
    lowers, as one kernel with an output per op, for the oldest architecture CUDA 13 takes
    (Turing: no NaN-propagating min/max instruction) and the default."""
    entry = hlo_opt.parse(TYPED[what]).entry
    kernel = emit_gpu.emit_gpu_kernel(entry, "k", arch)
    assert kernel.n_outputs == len(entry.root.operands) > 0
    assemble(nvptx.ptx([kernel.ir], [kernel.name], arch), tmp_path, arch)


# (a transpose too narrow for shared-memory tiles: emit_gpu_transpose.MIN_SIDE)
ELEMENTWISE = """HloModule m
ENTRY e {
  x = f32[64,8] parameter(0)
  y = f32[8,64] parameter(1)
  t = f32[64,8] transpose(y), dimensions={1,0}
  a = f32[64,8] add(x, t)
  ROOT r = f32[64,8] exponential(a)
}
"""


def test_gpu_kernels_are_the_gpu_fusion_stage_kernels():
    """One kernel per fusion the fusion stage forms for gpu: the same fused computations."""
    module = fuse(hlo_opt.parse(ELEMENTWISE), "gpu")
    fusions = [i.attrs["calls"] for i in module.entry.instructions if i.opcode == "fusion"]
    assert [comp for _, comp in emit_gpu.module_kernels(module)] == fusions and fusions


def test_gpu_and_cpu_kernels_use_the_same_per_element_code(monkeypatch):
    """The elemental generator's table (data movement) and the elementwise table are what
    both emitters consult: replacing an entry changes what each of them calls."""
    calls: list[str] = []
    _record(monkeypatch, elemental.GENERATORS, "transpose", calls)
    _record(monkeypatch, emit_elementwise.UNARY, "exponential", calls)
    comp = fuse(hlo_opt.parse(ELEMENTWISE), "gpu").entry.root.attrs["calls"]
    emit_gpu.emit_gpu_kernel(comp, "k")
    gpu_calls, calls[:] = list(calls), []
    emit_kernel.emit_kernel(comp, "k")
    assert sorted(set(gpu_calls)) == sorted(set(calls)) == ["exponential", "transpose"]


def _record(monkeypatch, table, key, calls) -> None:
    """Replace table[key] (an emitter, or a tuple starting with one) by one that records
    its calls."""
    entry = table[key]
    emit = entry[0] if isinstance(entry, tuple) else entry

    def wrapper(*args):
        calls.append(key)
        return emit(*args)
    monkeypatch.setitem(table, key, (wrapper, *entry[1:]) if isinstance(entry, tuple) else wrapper)


def test_kernel_reads_its_thread_position_and_strides_over_the_grid():
    ir = emit_gpu.emit_kernels(fuse(hlo_opt.parse(ELEMENTWISE), "gpu"))[0].ir
    assert 'define ptx_kernel void' in ir and 'target triple = "nvptx64-nvidia-cuda"' in ir
    for register in ("tid.x", "ctaid.x", "ntid.x", "nctaid.x"):
        assert re.search(rf'call i32 @"?llvm\.nvvm\.read\.ptx\.sreg\.{register}"?\(\)', ir)


MATH = """HloModule m
ENTRY e {
  x = f32[256] parameter(0)
  s = f32[256] sine(x)
  d = f64[256] convert(s)
  l = f64[256] log(d)
  ROOT r = (f32[256], f64[256]) tuple(s, l)
}
"""


@needs_libdevice
@needs_ptxas
def test_math_functions_come_from_libdevice(tmp_path):
    """What the CPU takes from libm (f64 log) or libmvec (f32 sine) is libdevice's on the
    GPU, in the same precision, linked in: the PTX calls no external function."""
    kernel = emit_gpu.emit_kernels(fuse(hlo_opt.parse(MATH), "gpu"))[0]
    assert re.search(r'call double @"?__nv_log"?\(double', kernel.ir)
    assert re.search(r'call float @"?__nv_sinf"?\(float', kernel.ir)
    assert "hlo_vm_" not in kernel.ir
    ptx = nvptx.ptx([kernel.ir], [kernel.name])
    assert ".extern" not in ptx
    assemble(ptx, tmp_path)


def test_without_libdevice_math_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(nvptx, "libdevice_path", lambda: None)
    nvptx._libdevice_bitcode.cache_clear()
    try:
        with pytest.raises(UnsupportedError, match="libdevice"):
            emit_gpu.emit_kernels(fuse(hlo_opt.parse(MATH), "gpu"))
    finally:
        nvptx._libdevice_bitcode.cache_clear()


# ---------------------------------------------------------------------------- reductions

def reduce_module(ty: str, op: str, init: str, dims: str = "{1}",
                  shape: str = "[6,1000]") -> str:
    """x reduced over `dims` by the single-op reducer `op` from `init`, after an
    elementwise producer (fused into the reduce)."""
    sizes = shape.strip("[]").split(",")
    kept = ",".join(n for d, n in enumerate(sizes) if str(d) not in dims.strip("{}").split(","))
    return f"""HloModule m
r {{
  a = {ty}[] parameter(0)
  b = {ty}[] parameter(1)
  ROOT c = {ty}[] {op}(a, b)
}}
ENTRY e {{
  x = {ty}{shape} parameter(0)
  y = {ty}{shape} {op}(x, x)
  z = {ty}[] constant({init})
  ROOT s = {ty}[{kept}] reduce(y, z), dimensions={dims}, to_apply=r
}}
"""


ARGMAX = f"""HloModule m
{ARGMAX_REDUCER}
ENTRY e {{
  x = f32[6,1000] parameter(0)
  io = s32[6,1000] iota(), iota_dimension=1
  m = f32[] constant(-inf)
  z = s32[] constant(0)
  ROOT r = (f32[6], s32[6]) reduce(x, io, m, z), dimensions={{1}}, to_apply=argmax
}}
"""

ROW_REDUCES = {
    "f32 add": reduce_module("f32", "add", "0"),
    "bf16 maximum (f32 accumulator)": reduce_module("bf16", "maximum", "-inf"),
    "f64 add (two 32-bit shuffles)": reduce_module("f64", "add", "0"),
    "c64 add (two parts)": reduce_module("c64", "add", "(0, 0)"),
    "s8 minimum": reduce_module("s8", "minimum", "127"),
    "pred or": reduce_module("pred", "or", "false"),
    "u64 multiply": reduce_module("u64", "multiply", "1"),
    "to a scalar": reduce_module("f32", "add", "0", dims="{0,1}"),
    "two minor dims": reduce_module("f32", "maximum", "-inf", dims="{1,2}",
                                    shape="[4,10,100]"),
    "variadic argmax (inlined reducer)": ARGMAX,
}


def _only_kernel(text: str) -> emit_gpu.GpuKernel:
    [kernel] = emit_gpu.emit_kernels(fuse(hlo_opt.parse(text), "gpu"))
    return kernel


@needs_ptxas
@pytest.mark.parametrize("what", list(ROW_REDUCES))
def test_row_reduction_is_a_block_per_row_combined_by_warp_shuffles(what, tmp_path):
    """A reduce over the minor-most dimensions: one block of ROW_THREADS threads per output
    row (the launch recorded with the kernel), warps combined by butterfly shuffles, warp
    values through shared memory between two barriers; every output of a variadic reduce
    stored by the one kernel."""
    kernel = _only_kernel(ROW_REDUCES[what])
    out = kernel.comp.root
    rows = (out.shape.leaves()[0] if out.shape.is_tuple else out.shape).num_elements
    assert (kernel.threads, kernel.blocks) == (emit_gpu_reduce.ROW_THREADS, rows)
    assert kernel.n_outputs == (2 if out.shape.is_tuple else 1)
    ptx = nvptx.ptx([kernel.ir], [kernel.name])
    assert "shfl.sync.bfly.b32" in ptx and ".shared " in ptx and ptx.count("bar.sync") == 2
    assemble(ptx, tmp_path)


def _row_module(tail: str) -> str:
    """A row sum of squares of x: f32[6,1000] into s: f32[6], followed by `tail`."""
    return f"""HloModule m
add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}}
ENTRY e {{
  x = f32[6,1000] parameter(0)
  sq = f32[6,1000] multiply(x, x)
  z = f32[] constant(0)
  s = f32[6] reduce(sq, z), dimensions={{1}}, to_apply=add
  n = f32[] constant(1000)
  nb = f32[6] broadcast(n), dimensions={{}}
  m = f32[6] divide(s, nb)
{tail}
}}
"""


RMS = _row_module("""  q = f32[6] rsqrt(m)
  ROOT r = (f32[6], f32[6]) tuple(s, q)""")
NORMALIZED = _row_module("""  mb = f32[6,1000] broadcast(m), dimensions={0}
  ROOT r = f32[6,1000] divide(x, mb)""")
TRANSPOSED = _row_module("""  mb = f32[1000,6] broadcast(m), dimensions={1}
  xt = f32[1000,6] transpose(x), dimensions={1,0}
  ROOT r = f32[1000,6] divide(xt, mb)""")


@needs_ptxas
def test_row_reduction_epilogue_is_computed_by_the_thread_storing_the_row(tmp_path):
    """Outputs that are elementwise functions of the row's result (the rsqrt of the mean
    beside the sum) are computed from the combined value, in the row kernel (the entry
    computation taken as one kernel)."""
    kernel = emit_gpu.emit_gpu_kernel(hlo_opt.parse(RMS).entry, "k")
    assert (kernel.threads, kernel.blocks, kernel.n_outputs) == (256, 6, 2)
    ptx = nvptx.ptx([kernel.ir], [kernel.name])
    assert "shfl.sync.bfly.b32" in ptx and "sqrt.rn.f32" in ptx and ptx.count("st.global") == 2
    assemble(ptx, tmp_path)


@needs_ptxas
def test_row_outputs_reading_the_result_along_the_row_are_computed_by_its_block(tmp_path):
    """A loop over the reduce's input shape that reads the row's result broadcast along
    the row (normalizing by the mean) is computed by the row's block, every thread reading
    the row's result from shared memory."""
    kernel = emit_gpu.emit_gpu_kernel(hlo_opt.parse(NORMALIZED).entry, "k")
    assert (kernel.threads, kernel.blocks, kernel.elements) == (256, 6, 6000)
    ptx = nvptx.ptx([kernel.ir], [kernel.name])
    assert "shfl.sync.bfly.b32" in ptx and ptx.count("bar.sync") == 2
    assemble(ptx, tmp_path)


@needs_ptxas
def test_softmax_is_one_block_per_row_reducing_twice(tmp_path):
    """A second row reduce reading the first's result along the row (the sum of
    exp(x - max)), then the normalized row: one block per row, each reduce's result shared
    with the block before the next step (two barriers per reduce)."""
    kernel = emit_gpu.emit_gpu_kernel(hlo_opt.parse(SOFTMAX).entry, "k")     # f32[64,256]
    assert (kernel.threads, kernel.blocks, kernel.elements) == (256, 64, 64 * 256)
    ptx = nvptx.ptx([kernel.ir], [kernel.name])
    assert ptx.count("shfl.sync.bfly.b32") >= 2 * (5 + 3) and ptx.count("bar.sync") == 4
    assemble(ptx, tmp_path)


@needs_ptxas
def test_reduce_read_transposed_is_computed_per_element(tmp_path):
    """A loop that reads the row's result other than along the row (here transposed) is
    one thread per element, each folding the row it reads itself."""
    kernel = emit_gpu.emit_gpu_kernel(hlo_opt.parse(TRANSPOSED).entry, "k")
    assert (kernel.threads, kernel.blocks, kernel.elements) == (256, 24, 6000)
    ptx = nvptx.ptx([kernel.ir], [kernel.name])
    assert "shfl" not in ptx
    assemble(ptx, tmp_path)


CHEAP = """HloModule m
ENTRY e {
  x = f32[1024,768] parameter(0)
  y = f32[1024,768] parameter(1)
  z = bf16[1024,768] parameter(2)
  c = f32[1024,768] convert(z)
  a = f32[1024,768] add(x, y)
  m = f32[1024,768] maximum(a, c)
  ROOT r = f32[1024,768] multiply(m, m)
}
"""


@needs_ptxas
def test_cheap_loop_kernels_take_four_consecutive_elements_with_vector_accesses(tmp_path):
    """Without expensive ops, a thread computes 4 consecutive elements per step (a quarter
    of the blocks), and with 16-byte aligned buffers LLVM merges each input's and the
    output's accesses into one vector access; an exponential keeps one element a step."""
    kernel = emit_gpu.emit_gpu_kernel(hlo_opt.parse(CHEAP).entry, "k")
    assert (kernel.threads, kernel.blocks) == (256, 1024 * 768 // 4 // 256)
    ptx = nvptx.ptx([kernel.ir], [kernel.name])
    assert ptx.count(".ptr .align 16") == 4
    assert re.findall(r"(?:ld|st)\.global\S*", ptx) == [
        "ld.global.nc.v4.b32", "ld.global.nc.v4.b32", "ld.global.nc.v4.b16", "st.global.v4.b32"]
    assemble(ptx, tmp_path)
    expensive = CHEAP.replace("multiply(m, m)", "exponential(m)")
    kernel = emit_gpu.emit_gpu_kernel(hlo_opt.parse(expensive).entry, "k")
    assert kernel.blocks == 1024 * 768 // 256 and ".v4" not in nvptx.ptx([kernel.ir], ["k"])


def test_loop_kernel_launch_covers_its_elements_with_one_thread_each():
    kernel = emit_gpu.emit_kernels(fuse(hlo_opt.parse(ELEMENTWISE), "gpu"))[0]
    assert (kernel.threads, kernel.blocks, kernel.elements) == (256, 2, 64 * 8)


def test_gpu_and_cpu_reductions_apply_the_same_reducer_code(monkeypatch):
    """Row reduce kernels combine values through emit_reduce.Reducer, as the CPU does."""
    calls: list[str] = []
    apply = emit_reduce.Reducer.__call__

    def recording(self, accs, xs):
        calls.append(self.comp.name)
        return apply(self, accs, xs)
    monkeypatch.setattr(emit_reduce.Reducer, "__call__", recording)
    comp = fuse(hlo_opt.parse(ARGMAX), "gpu").entry.root.attrs["calls"]
    emit_gpu.emit_gpu_kernel(comp, "k")
    gpu_calls, calls[:] = list(calls), []
    emit_kernel.emit_kernel(comp, "k")
    assert set(gpu_calls) == set(calls) == {"argmax"}
    assert len(gpu_calls) == 4 + 5 + 3     # the fold of 4 adjacent elements, log2(32), log2(8)


# ------------------------------------------------------------------------------- hlo-opt

@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_cli_emits_ptx_for_the_chosen_architecture(arch, tmp_path, capsys):
    src = tmp_path / "in.hlo"
    src.write_text(ELEMENTWISE)
    assert main([str(src), "--target=gpu", "--emit=ptx", f"--gpu-arch={arch}"]) == 0
    ptx = capsys.readouterr().out
    assert f".target {arch}" in ptx and ".entry " in ptx
    assemble(ptx, tmp_path, arch)


def test_cli_emits_nvptx_llvm_ir(tmp_path, capsys):
    src = tmp_path / "in.hlo"
    src.write_text(ELEMENTWISE)
    assert main([str(src), "--target=gpu", "--emit=llvm"]) == 0
    out = capsys.readouterr().out
    assert 'target triple = "nvptx64-nvidia-cuda"' in out and "ptx_kernel" in out


COMPLEX_DOT = """HloModule m
ENTRY e {
  x = c64[8,16] parameter(0)
  y = c64[16,4] parameter(1)
  ROOT d = c64[8,4] dot(x, y), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""


SUB_BYTE = """HloModule m
ENTRY e {
  x = s4[16] parameter(0)
  y = s4[16] add(x, x)
  ROOT z = s4[16] multiply(y, x)
}
"""


@pytest.mark.parametrize("text, args, message", [
    (COMPLEX_DOT, ["--target=gpu", "--emit=ptx"],
     r"^.*in\.hlo:5:8: GPU code for dot \(d\) is not emitted yet: complex contractions "
     r"have no GPU code yet$"),
    (SUB_BYTE, ["--target=gpu", "--emit=ptx"],
     r"^.*in\.hlo:4:3: GPU code for add \(y\) is not emitted yet: element type s4$"),
    (ELEMENTWISE, ["--target=gpu", "--emit=ptx", "--gpu-arch=volta"],
     r"unknown GPU architecture 'volta'"),
    (ELEMENTWISE, ["--target=gpu", "--emit=ptx", "--gpu-arch=sm_12"],
     r"unknown GPU architecture 'sm_12' \(one of sm_70, "),
    (ELEMENTWISE, ["--emit=ptx"], r"--emit=ptx and --gpu-arch need --target=gpu"),
])
def test_cli_refusals_are_one_line(text, args, message, tmp_path, capsys):
    src = tmp_path / "in.hlo"
    src.write_text(text)
    assert main([str(src), *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.search(message, err), err
