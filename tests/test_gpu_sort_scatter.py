"""GPU sort, top-k, scatter and select-and-scatter kernels (`lowering/emit_gpu_sort.py`,
`emit_gpu_scatter.py`): the bitonic network sorts stably with padding by position (checked
in Python on the same stage schedule and pair arithmetic the kernel uses); each kernel's
PTX assembles for sm_90 with the structure claimed (barriers per stage, shared memory or the
scratch buffer, `atom.*` per combiner and type) and records its launch, scratch and initial
copies; comparators, update and select computations go through the CPU's code. The
atomic combination, and whole kernels with one or several threads per block (host threads of
the simulated GPU, tests/gpu_sim.py: barriers, shared memory, atomics under contention), are
compiled for the host CPU and run against the interpreter. No GPU runs here."""
from __future__ import annotations

import ctypes
import random
import re

import numpy as np
import pytest
from llvmlite import ir

import gpu_sim
import hlo_opt
from hlo_opt.errors import UnsupportedError
from hlo_opt.fusion.stage import fuse
from hlo_opt.lowering import elemental, emit_gather, emit_gpu, jit, ltypes, nvptx
from hlo_opt.lowering.emit_gpu_scatter import SCATTER_THREADS, combine
from hlo_opt.lowering.emit_loops import for_range
from hlo_opt.lowering.emit_reduce import Reducer
from hlo_opt.lowering.emit_gpu_sort import (SHARED_SORT_BYTES, ascending, padded_length,
                                            pair, stages, threads_for)
from lowering_helpers import assert_matches, edge_values
from test_gpu_ptx import assemble, needs_ptxas

# ------------------------------------------------------------ the network, in Python

def network_sort(keys: list, before) -> list:
    """The kernel's algorithm on a list: positions padded to a power of two, the stages of
    `stages`, pairs from `pair`, directions from `ascending`, and the kernel's order (ties
    by position, padding last by position)."""
    length = len(keys)
    padded = padded_length(length)

    def first(x, y):
        if x >= length or y >= length:
            return x < y
        return before(keys[x], keys[y]) or (not before(keys[y], keys[x]) and x < y)
    perm = list(range(padded))
    for s_k, s_j in stages(padded):
        touched = []
        for t in range(padded // 2):
            low = pair(t, s_j)
            high = low | (1 << s_j)
            touched += [low, high]
            x, y = perm[low], perm[high]
            swap = first(y, x) == ascending(low, s_k)       # as the kernel: one compare
            perm[low], perm[high] = (y, x) if swap else (x, y)
        assert sorted(touched) == list(range(padded))       # disjoint pairs cover the row
    return perm[:length]


@pytest.mark.parametrize("length", [1, 2, 3, 5, 8, 17, 40, 100, 257])
@pytest.mark.parametrize("order", ["ascending", "descending", "by magnitude"])
def test_bitonic_network_is_a_stable_sort_with_padding_last(length, order):
    """Any length (padded to a power of two), any strict weak order, duplicates keep their
    original order: the network's permutation is Python's stable sort's."""
    rng = random.Random(length)
    keys = [rng.randint(-5, 5) for _ in range(length)]
    before = {"ascending": lambda a, b: a < b, "descending": lambda a, b: a > b,
              "by magnitude": lambda a, b: abs(a) < abs(b)}[order]
    key = {"ascending": lambda k: keys[k], "descending": lambda k: -keys[k],
           "by magnitude": lambda k: abs(keys[k])}[order]
    assert network_sort(keys, before) == sorted(range(length), key=key)


def test_network_geometry():
    assert [padded_length(n) for n in (1, 2, 3, 40, 1024, 1025)] == [1, 2, 4, 64, 1024, 2048]
    assert stages(8) == [(1, 0), (2, 1), (2, 0), (3, 2), (3, 1), (3, 0)]
    assert [threads_for(p) for p in (1, 64, 128, 4096)] == [32, 32, 64, 256]


# --------------------------------------------------------------------------- kernels

def only_kernel(text: str, arch: str = "sm_90") -> emit_gpu.GpuKernel:
    [kernel] = [k for k in emit_gpu.emit_kernels(fuse(hlo_opt.parse(text), "gpu"), arch)
                if k.comp.root.opcode not in ("parameter", "iota")]
    return kernel


def ptx_of(kernel: emit_gpu.GpuKernel, tmp_path, arch: str = "sm_90") -> str:
    ptx = nvptx.ptx([kernel.ir], [kernel.name], arch)
    assemble(ptx, tmp_path, arch)
    return ptx


def compare(name: str, ty: str, direction: str, extra: str = "", operands: int = 1) -> str:
    params = "\n".join(f"  p{k} = {t}[] parameter({k})" for k, t in enumerate(
        [t for t in ([ty] + ["s32"] * (operands - 1)) for _ in (0, 1)]))
    return f"""{name} {{
{params}
  ROOT r = pred[] compare(p0, p1), direction={direction}{extra}
}}"""


def sort_module(shape: str, dim: int, cmp: str, ty: str = "f32", values: bool = False,
                stable: bool = False) -> str:
    operands = "x, v" if values else "x"
    out = f"({ty}{shape}, s32{shape})" if values else f"{ty}{shape}"
    value = f"\n  v = s32{shape} iota(), iota_dimension={dim}" if values else ""
    return f"""HloModule m
{cmp}
ENTRY e {{
  x = {ty}{shape} parameter(0){value}
  ROOT s = {out} sort({operands}), dimensions={{{dim}}}, is_stable={str(stable).lower()}, to_apply=c
}}
"""


SORTS = {
    "1-D ascending": (sort_module("[1000]", 0, compare("c", "f32", "LT")), 1000, 1),
    "2-D along dim 1": (sort_module("[12,40]", 1, compare("c", "f32", "LT")), 40, 12),
    "2-D along dim 0": (sort_module("[12,40]", 0, compare("c", "f32", "LT")), 12, 40),
    "3-D along the middle dim": (sort_module("[3,50,4]", 1, compare("c", "s32", "LT"), "s32"),
                                 50, 12),
    "key and value, descending": (sort_module("[6,33]", 1, compare("c", "f32", "GT",
                                                                   operands=2), values=True),
                                  33, 6),
    "total order, stable": (sort_module("[5,70]", 1, compare(
        "c", "f32", "LT", ", type=TOTALORDER"), stable=True), 70, 5),
    "bf16 keys": (sort_module("[4,9]", 1, compare("c", "bf16", "GT"), "bf16"), 9, 4),
}


@needs_ptxas
@pytest.mark.parametrize("what", list(SORTS))
def test_sort_is_a_block_per_row_bitonic_in_shared_memory(what, tmp_path):
    """One block per row (every index but the sort dimension), the row's padded
    permutation in shared memory, one barrier after the initial permutation, one per
    stage and one at the end of the row."""
    text, length, rows = SORTS[what]
    kernel = only_kernel(text)
    padded = padded_length(length)
    assert (kernel.threads, kernel.blocks, kernel.scratch_bytes) == \
        (threads_for(padded), rows, 0)
    ptx = ptx_of(kernel, tmp_path)
    assert ".shared " in ptx and ptx.count("bar.sync") == len(stages(padded)) + 2
    assert kernel.n_outputs == (2 if "value" in what else 1)


@needs_ptxas
def test_rows_too_long_for_shared_memory_sort_in_the_scratch_buffer(tmp_path):
    """Past SHARED_SORT_BYTES of positions, each row's permutation is in the zeroed scratch
    buffer (4 bytes per padded position per row), passed last; same barriers."""
    length = SHARED_SORT_BYTES // 4 + 1
    kernel = only_kernel(sort_module(f"[3,{length}]", 1, compare("c", "f32", "LT")))
    padded = padded_length(length)
    assert kernel.scratch_bytes == 3 * padded * 4 and kernel.blocks == 3
    ptx = ptx_of(kernel, tmp_path)
    assert ".shared " not in ptx and ptx.count("bar.sync") == len(stages(padded)) + 2
    params = re.search(r"\.entry \w+\((.*?)\)", ptx, re.S).group(1)
    assert params.count(".param") == kernel.n_outputs + kernel.n_inputs + 1


def test_rows_of_2_to_the_31_elements_are_a_one_line_error():
    """Positions are i32 in the permutation."""
    with pytest.raises(UnsupportedError, match=r"rows of 2147483648 elements: positions are "
                                               r"32-bit") as e:
        only_kernel(sort_module("[2147483648]", 0, compare("c", "f32", "LT")))
    assert "\n" not in str(e.value) and e.value.line > 0


def test_sort_comparator_is_applied_by_the_cpu_elemental_code(monkeypatch):
    """The comparator is the sort's computation applied through Elemental.apply (as on the
    CPU), twice per compare (cmp(a, b) and cmp(b, a) for the tie by position)."""
    applied = []
    real = elemental.Elemental.apply

    def recording(self, comp, args):
        applied.append(comp.name)
        return real(self, comp, args)
    monkeypatch.setattr(elemental.Elemental, "apply", recording)
    only_kernel(sort_module("[12,40]", 1, compare("c", "f32", "LT")))
    assert applied == ["c"] * (2 * len(stages(64)))


def test_a_sort_with_other_phases_in_its_kernel_is_a_one_line_error():
    """The frames emit kernels that store their op and nothing else (as the gpu fusion
    stage forms them); a computation that also reads the sorted values is refused."""
    text = f"""HloModule m
{compare("c", "f32", "LT")}
ENTRY e {{
  x = f32[8] parameter(0)
  s = f32[8] sort(x), dimensions={{0}}, to_apply=c
  ROOT y = f32[8] add(s, x)
}}
"""
    with pytest.raises(UnsupportedError, match="sort .* fused with other outputs") as e:
        emit_gpu.emit_gpu_kernel(hlo_opt.parse(text).entry, "k")
    sort_line = next(n for n, line in enumerate(text.splitlines(), 1) if " sort(" in line)
    assert e.value.line == sort_line and "\n" not in str(e.value)


TOPKS = {
    "topk op": ("""HloModule m
ENTRY e {
  x = f32[4,33] parameter(0)
  ROOT t = (f32[4,5], s32[4,5]) topk(x), k=5, largest=true
}
""", 33, 4),
    "TopK custom call": (f"""HloModule m
{compare("gt", "f32", "GT")}
ENTRY e {{
  x = f32[3,20] parameter(0)
  ROOT t = (f32[3,4], s32[3,4]) custom-call(x), custom_call_target="TopK", called_computations={{gt}}
}}
""", 20, 3),
}


@needs_ptxas
@pytest.mark.parametrize("what", list(TOPKS))
def test_top_k_sorts_each_row_and_stores_the_first_k_with_positions(what, tmp_path):
    text, length, rows = TOPKS[what]
    kernel = only_kernel(text)
    assert kernel.n_outputs == 2 and (kernel.threads, kernel.blocks) == \
        (threads_for(padded_length(length)), rows)
    ptx = ptx_of(kernel, tmp_path)
    assert ptx.count("bar.sync") == len(stages(padded_length(length))) + 2


# --------------------------------------------------------------------------- scatter

def update(name: str, ty: str, op: str) -> str:
    return f"""{name} {{
  a = {ty}[] parameter(0)
  b = {ty}[] parameter(1)
  ROOT r = {ty}[] {op}(a, b)
}}"""


def scatter_module(ty: str, op: str, indices: str = "s32[6,1]") -> str:
    return f"""HloModule m
{update("u", ty, op)}
ENTRY e {{
  x = {ty}[10,4] parameter(0)
  i = {indices} parameter(1)
  v = {ty}[6,4] parameter(2)
  ROOT s = {ty}[10,4] scatter(x, i, v), update_window_dims={{1}}, inserted_window_dims={{0}}, scatter_dims_to_operand_dims={{0}}, index_vector_dim=1, to_apply=u
}}
"""


GENERAL = """HloModule m
u {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  m = f32[] multiply(a, b)
  ROOT r = f32[] add(m, b)
}
ENTRY e {
  x = f32[10,4] parameter(0)
  i = s32[6,1] parameter(1)
  v = f32[6,4] parameter(2)
  ROOT s = f32[10,4] scatter(x, i, v), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=u
}
"""

# what -> (module, the atom instruction its combine is)
SCATTERS = {
    "f32 add": (scatter_module("f32", "add"), "atom.global.add.f32"),
    "s32 add": (scatter_module("s32", "add"), "atom.global.add.u32"),
    "u64 add": (scatter_module("u64", "add"), "atom.global.add.u64"),
    "f64 add": (scatter_module("f64", "add"), "atom.global.add.f64"),
    "s32 maximum": (scatter_module("s32", "maximum"), "atom.global.max.s32"),
    "u32 minimum": (scatter_module("u32", "minimum"), "atom.global.min.u32"),
    "s64 xor": (scatter_module("s64", "xor"), "atom.global.xor.b64"),
    "f32 multiply (CAS)": (scatter_module("f32", "multiply"), "cas.b32"),
    "f32 maximum (CAS: NaN propagates)": (scatter_module("f32", "maximum"), "cas.b32"),
    "general computation (CAS)": (GENERAL, "cas.b32"),
    "f16 add (CAS on the 32-bit word)": (scatter_module("f16", "add"), "cas.b32"),
    "bf16 add (CAS on the 32-bit word)": (scatter_module("bf16", "add"), "cas.b32"),
    "pred or (CAS on the 32-bit word)": (scatter_module("pred", "or"), "cas.b32"),
    "f64 multiply (CAS)": (scatter_module("f64", "multiply"), "cas.b64"),
    "c64 add (CAS on 64 bits)": (scatter_module("c64", "add"), "cas.b64"),
    "u8 indices": (scatter_module("f32", "add", "u8[6,1]"), "atom.global.add.f32"),
}


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("what", list(SCATTERS))
def test_scatter_is_a_thread_per_update_combined_atomically(what, arch, tmp_path):
    """The output starts as the operand by a host copy (initial_copies: output 0 <- input
    0), so the grid covers the 24 update elements freely; each combines by the one atom
    for the update op and type when PTX has it, else a compare-and-swap loop."""
    text, atom = SCATTERS[what]
    kernel = only_kernel(text, arch)
    assert kernel.initial_copies == ((0, 0),)
    assert (kernel.threads, kernel.blocks) == (SCATTER_THREADS, 1)
    ptx = ptx_of(kernel, tmp_path, arch)
    assert atom in ptx and "bar.sync" not in ptx
    assert ("atom.global.cas" in ptx or ".cas." in ptx) == atom.startswith("cas"), ptx


def test_scatter_targets_and_skipped_windows_are_the_cpu_code(monkeypatch):
    """Window starts (and the skip of a window leaving the operand: out-of-bounds indices)
    and targets come from emit_gather's functions, which the CPU scatter uses too."""
    calls = []
    for name in ("scatter_start", "scatter_position"):
        real = getattr(emit_gather, name)
        monkeypatch.setattr(f"hlo_opt.lowering.emit_gpu_scatter.{name}",
                            lambda *a, real=real, name=name: calls.append(name) or real(*a))
    only_kernel(scatter_module("f32", "add"))
    assert calls == ["scatter_start", "scatter_position"]


def test_scatter_grid_covers_many_updates():
    text = scatter_module("f32", "add").replace("s32[6,1]", "s32[3000,1]").replace(
        "f32[6,4]", "f32[3000,4]")
    kernel = only_kernel(text)
    assert (kernel.threads, kernel.blocks) == (SCATTER_THREADS, -(-12000 // SCATTER_THREADS))


@pytest.mark.parametrize("text, message", [
    (scatter_module("c128", "add"), r"c128 elements \(no atomic operation is wider"),
    ("""HloModule m
u {
  a = f32[] parameter(0)
  b = s32[] parameter(1)
  c = f32[] parameter(2)
  d = s32[] parameter(3)
  ROOT r = (f32[], s32[]) tuple(c, d)
}
ENTRY e {
  x = f32[10] parameter(0)
  y = s32[10] parameter(1)
  i = s32[3,1] parameter(2)
  v = f32[3] parameter(3)
  w = s32[3] parameter(4)
  ROOT s = (f32[10], s32[10]) scatter(x, y, i, v, w), update_window_dims={}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=u
}
""", "a variadic scatter"),
])
def test_scatters_without_an_atomic_form_are_one_line_errors(text, message):
    with pytest.raises(UnsupportedError, match=message) as e:
        only_kernel(text)
    assert "\n" not in str(e.value) and e.value.line > 0


# ---------------------------------------------------------------- select-and-scatter

MAX_POOL_GRADIENT = f"""HloModule m
{compare("ge", "f32", "GE")}
{update("add", "f32", "add")}
ENTRY e {{
  x = f32[2,8,8,3] parameter(0)
  s = f32[2,4,4,3] parameter(1)
  z = f32[] constant(0)
  ROOT r = f32[2,8,8,3] select-and-scatter(x, s, z), window={{size=1x2x2x1 stride=1x2x2x1}}, select=ge, scatter=add
}}
"""


@needs_ptxas
def test_select_and_scatter_is_a_gather_per_output_element(tmp_path, monkeypatch):
    """One thread per output element (any grid: no initial output, no barrier, no
    atomics), each examining the windows that cover it with the CPU's `selected` (the
    select computation through Elemental.apply)."""
    picked = []
    real = emit_gather.selected
    monkeypatch.setattr("hlo_opt.lowering.emit_gpu_scatter.selected",
                        lambda *a: picked.append(1) or real(*a))
    kernel = only_kernel(MAX_POOL_GRADIENT)
    assert picked == [1]
    n = 2 * 8 * 8 * 3
    assert (kernel.threads, kernel.blocks, kernel.initial_copies, kernel.scratch_bytes) == \
        (SCATTER_THREADS, -(-n // SCATTER_THREADS), (), 0)
    ptx = ptx_of(kernel, tmp_path)
    assert "bar.sync" not in ptx and "atom." not in ptx


@needs_ptxas
def test_cnn_training_max_pool_gradient_has_gpu_code(tmp_path):
    from conftest import corpus_files
    [path] = [p for p in corpus_files() if p.name == "cnn_train.hlo"]
    module = fuse(hlo_opt.parse(path.read_text()), "gpu")
    kernels = [emit_gpu.emit_gpu_kernel(comp, name) for name, comp in
               emit_gpu.module_kernels(module)
               if comp.root.opcode == "select-and-scatter"]
    assert kernels
    for kernel in kernels:
        ptx_of(kernel, tmp_path)


# ------------------------------------- the atomic combination, run on the host CPU

COMBINES = [("f16", "add"), ("bf16", "add"), ("bf16", "multiply"), ("pred", "or"),
            ("u8", "add"), ("s8", "maximum"), ("s16", "multiply"), ("f32", "multiply"),
            ("f32", "maximum"), ("f64", "minimum"), ("c64", "add"), ("c64", "multiply"),
            ("f32", "add"), ("s32", "add"), ("u64", "xor")]


@pytest.mark.parametrize("ty, op", COMBINES, ids=[f"{t} {o}" for t, o in COMBINES])
def test_atomic_combination_computes_the_update_computation(ty, op):
    """`combine` is target-independent LLVM IR (atomicrmw, or a cmpxchg loop on the word
    holding the element): compiled for the host, applying update k to element k of a
    buffer gives the interpreter's scatter result, and the bytes of the last word past the
    buffer (8- and 16-bit types share words) are left as they were. Single-threaded: what
    concurrent updates do on a GPU is not checked here."""
    n = 13
    text = scatter_module(ty, op).replace("[10,4]", f"[{n}]").replace(
        "[6,1]", f"[{n},1]").replace("[6,4]", f"[{n}]").replace(
        "update_window_dims={1}", "update_window_dims={}")
    module = hlo_opt.parse(text)
    rng = np.random.default_rng(3)
    x, v = (edge_values(ty, n, rng, small_ints=True) for _ in range(2))
    v = rng.permutation(v)
    indices = np.arange(n, dtype=np.int32).reshape(n, 1)
    want = hlo_opt.evaluate(module, [x, indices, v])[0]

    scatter = module.entry.root
    mod = jit.new_module("combine_each")
    fn = ir.Function(mod, ir.FunctionType(ltypes.VOID, [ltypes.PTR] * 2), "combine_each")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    gen = elemental.Elemental(b)
    dest, updates = (elemental.Source(p, scatter.shape) for p in fn.args)
    with for_range(b, 0, n) as k:
        combine(gen, Reducer(gen, scatter.attrs["to_apply"]), dest, k,
                ltypes.load(b, updates.ptr, updates.et, k))
    b.ret_void()
    run = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(
        jit.compile_ir(str(mod), ["combine_each"])["combine_each"])
    raw = np.full(-(-x.nbytes // 8) * 8 + 8, 0xA5, np.uint8)       # whole words, and more
    raw[:x.nbytes] = x.view(np.uint8)
    run(raw.ctypes.data, v.ctypes.data)
    got = raw[:x.nbytes].view(x.dtype)
    assert_matches(got, want, 0, f"{ty} {op}")
    assert (raw[x.nbytes:] == 0xA5).all()


# ------------------------------ whole kernels, threads of a block as host threads (gpu_sim)

# (threads per block, blocks: None = the recorded launch) of the host launches; 2 blocks
# make a block take several rows (sort) or updates (scatter)
HOST_LAUNCHES = [(1, None), (5, None), (5, 2), (None, None)]


def run_kernel_on_host(text: str, args: dict, threads: int,
                       blocks: int | None = None) -> tuple[list, list]:
    """(the kernel's outputs with `threads` threads per block and `blocks` blocks (default:
    the launch recorded), the interpreter's) for the module's one kernel; `args`: the
    entry parameters' values by name."""
    module = hlo_opt.parse(text)
    kernel = only_kernel(text)
    inputs = [np.ascontiguousarray(args[p.name.split(".", 1)[1]])
              for p in kernel.comp.parameters]
    root = kernel.comp.root
    leaves = root.shape.leaves() if root.shape.is_tuple else [root.shape]
    outputs = [np.zeros(s.dims, s.dtype.numpy) for s in leaves]
    gpu_sim.run_kernel(kernel, outputs, inputs, threads, blocks, concurrent=True)
    want = hlo_opt.evaluate(module, [args[p.name] for p in module.entry.parameters])
    return outputs, list(want)


def host_sort_module(shape: str, dim: int, cmp: str, types=("f32",), stable=True) -> str:
    names = [f"x{k}" for k in range(len(types))]
    params = "\n".join(f"  {n} = {t}{shape} parameter({k})"
                       for k, (n, t) in enumerate(zip(names, types)))
    out = f"({', '.join(t + shape for t in types)})" if len(types) > 1 else types[0] + shape
    return f"""HloModule m
{cmp}
ENTRY e {{
{params}
  ROOT s = {out} sort({", ".join(names)}), dimensions={{{dim}}}, is_stable={str(stable).lower()}, to_apply=c
}}
"""


def _keys(shape, ty: str, seed: int):
    """Values with many ties (rounded), in type `ty`."""
    rng = np.random.default_rng(seed)
    return np.round(rng.standard_normal(shape) * 3).astype(ltypes.elem(ty).dtype.numpy)


HOST_SORTS = {
    "ascending along dim 1": (host_sort_module("[5,37]", 1, compare("c", "f32", "LT")),
                              {"x0": _keys((5, 37), "f32", 0)}),
    "key and value along dim 0, descending, ties stable": (
        host_sort_module("[37,5]", 0, compare("c", "f32", "GT", operands=2), ("f32", "s32")),
        {"x0": _keys((37, 5), "f32", 1), "x1": np.arange(185, dtype=np.int32).reshape(37, 5)}),
    "total order with NaN, -0 and inf": (
        host_sort_module("[3,20]", 1, compare("c", "f32", "LT", ", type=TOTALORDER")),
        {"x0": np.array([[np.nan, -0.0, 0.0, np.inf, -np.inf, 1, -1, 2, np.nan, 0.0] * 2] * 3,
                        np.float32)}),
    "bf16 descending, middle dim of 3": (
        host_sort_module("[2,9,3]", 1, compare("c", "bf16", "GT"), ("bf16",)),
        {"x0": _keys((2, 9, 3), "bf16", 2)}),
    "a row longer than shared memory (scratch buffer)": (
        host_sort_module(f"[2,{SHARED_SORT_BYTES // 4 + 3}]", 1, compare("c", "s32", "LT"),
                         ("s32",)),
        {"x0": np.random.default_rng(4).integers(-50, 50, (2, SHARED_SORT_BYTES // 4 + 3),
                                                 dtype=np.int32)}),
    "s32 keys with c64 and f8e4m3fn values": (
        host_sort_module("[4,19]", 1, """c {
  p0 = s32[] parameter(0)
  p1 = s32[] parameter(1)
  p2 = c64[] parameter(2)
  p3 = c64[] parameter(3)
  p4 = f8e4m3fn[] parameter(4)
  p5 = f8e4m3fn[] parameter(5)
  ROOT r = pred[] compare(p0, p1), direction=LT
}""", ("s32", "c64", "f8e4m3fn")),
        {"x0": _keys((4, 19), "s32", 9), "x1": (_keys((4, 19), "f32", 10) + 1j * _keys(
            (4, 19), "f32", 11)).astype(np.complex64), "x2": _keys((4, 19), "f8e4m3fn", 12)}),
    "topk op, largest, with NaN and inf": ("""HloModule m
ENTRY e {
  x = f32[4,33] parameter(0)
  ROOT t = (f32[4,5], s32[4,5]) topk(x), k=5, largest=true
}
""", {"x": np.where(np.arange(132).reshape(4, 33) % 17 == 3, np.nan,
                    _keys((4, 33), "f32", 5)).astype(np.float32)}),
    "TopK custom call": (TOPKS["TopK custom call"][0], {"x": _keys((3, 20), "f32", 6)}),
}


@pytest.mark.parametrize("threads, blocks", HOST_LAUNCHES)
@pytest.mark.parametrize("what", list(HOST_SORTS))
def test_sort_kernels_run_on_the_host_give_the_interpreters_answer(what, threads, blocks):
    """The whole kernel IR (stages, pair arithmetic, ties by position, padding, the final
    gather, top-k's positions; scratch for long rows), run with one thread per block and
    every recorded block, equals the interpreter's (stable) sort bit for bit."""
    text, args = HOST_SORTS[what]
    got, want = run_kernel_on_host(text, args, threads, blocks)
    for g, w in zip(got, want):
        assert_matches(g, w, 0, what)


REPEATED = [[3], [3], [-1], [9], [10], [0]]
HOST_SCATTERS = {       # what -> (module, type, indices)
    "f32 add, repeated and out-of-bounds indices": (scatter_module("f32", "add"), "f32",
                                                    REPEATED),
    "s32 multiply (CAS)": (scatter_module("s32", "multiply"), "s32", REPEATED),
    "f16 add (CAS in the 32-bit word)": (scatter_module("f16", "add"), "f16", REPEATED),
    # a computation neither associative nor commutative: repeated indices would combine in
    # an unspecified order (as XLA allows), so they are distinct here
    "general computation": (GENERAL, "f32", [[3], [5], [-1], [9], [10], [0]]),
}


@pytest.mark.parametrize("threads, blocks", HOST_LAUNCHES)
@pytest.mark.parametrize("what", list(HOST_SCATTERS))
def test_scatter_kernels_run_on_the_host_give_the_interpreters_answer(what, threads, blocks):
    """Initial copy as the host does it, then the kernel: windows out of bounds (-1, 9 +
    a window of 1 fits, 10 does not) skipped, repeated indices combined (exactly: small
    integers)."""
    text, ty, indices = HOST_SCATTERS[what]
    rng = np.random.default_rng(7)
    x = np.round(rng.standard_normal((10, 4)) * 4).astype(ltypes.elem(ty).dtype.numpy)
    v = np.round(rng.standard_normal((6, 4)) * 4).astype(x.dtype)
    i = np.array(indices, np.int32)
    got, want = run_kernel_on_host(text, {"x": x, "i": i, "v": v}, threads, blocks)
    assert_matches(got[0], want[0], 0, what)


# type -> (update op, share of nonzero updates): sums stay exact in every order
CONTENDED = {"f16": ("add", 1.0), "bf16": ("add", 0.004), "u8": ("add", 1.0),
             "s16": ("add", 1.0), "s32": ("add", 1.0), "pred": ("or", 0.0002)}


@pytest.mark.parametrize("ty", list(CONTENDED))
def test_concurrent_updates_of_one_word_all_land(ty):
    """400000 updates into 2 x 4 elements by one block of 5 host threads at once (the
    kernel is correct for any grid): neighbours sharing a 32-bit word (8- and 16-bit
    types) and the same elements are updated concurrently, and every update is combined
    (a CAS retries on a changed word). Updates are +-1 (or rare), so the result is exact
    in any order."""
    op, share = CONTENDED[ty]
    n = 400000
    text = scatter_module(ty, op).replace("[10,4]", "[2,4]").replace(
        "s32[6,1]", f"s32[{n},1]").replace(f"{ty}[6,4]", f"{ty}[{n},4]")
    rng = np.random.default_rng(9)
    dtype = ltypes.elem(ty).dtype.numpy
    signs = rng.choice([-1, 1], (n, 4)) * (rng.random((n, 4)) < share)
    v = signs.astype(np.int64).astype(dtype) if ty != "pred" else signs != 0
    x = np.zeros((2, 4), dtype)
    i = rng.integers(0, 2, (n, 1)).astype(np.int32)
    got, want = run_kernel_on_host(text, {"x": x, "i": i, "v": v}, 5, blocks=1)
    assert_matches(got[0], want[0], 0, f"{ty} {op}")


def select_and_scatter_module(window: str, source: str, select: str = "GE",
                              ty: str = "f32") -> str:
    return f"""HloModule m
{compare("sel", ty, select)}
{update("add", ty, "add")}
ENTRY e {{
  x = {ty}[2,9,7,3] parameter(0)
  s = {ty}{source} parameter(1)
  z = {ty}[] constant(1)
  ROOT r = {ty}[2,9,7,3] select-and-scatter(x, s, z), window={{{window}}}, select=sel, scatter=add
}}
"""


HOST_POOLS = {          # what -> (window, source shape, type)
    "2x2 stride 2 (each position in one window)": ("size=1x2x2x1 stride=1x2x2x1",
                                                   "[2,4,3,3]", "f32"),
    "3x3 stride 2, padded (overlapping windows)": (
        "size=1x3x3x1 stride=1x2x2x1 pad=0_0x1_1x1_1x0_0", "[2,5,4,3]", "f32"),
    "3x2 stride 1, min select, low padding 2": (
        "size=1x3x2x1 stride=1x1x1x1 pad=0_0x2_0x0_1x0_0", "[2,9,7,3]", "f32"),
    "3x2 stride 2x1, negative low padding": (
        "size=1x3x2x1 stride=1x2x1x1 pad=0_0x-1_0x0_0x0_0", "[2,3,6,3]", "f32"),
    "bf16, 3x3 stride 1 (sums rounded after every addition)": (
        "size=1x3x3x1 stride=1x1x1x1 pad=0_0x1_1x1_1x0_0", "[2,9,7,3]", "bf16"),
}


@pytest.mark.parametrize("threads, blocks", HOST_LAUNCHES)
@pytest.mark.parametrize("what", list(HOST_POOLS))
def test_select_and_scatter_runs_on_the_host_as_the_interpreter(what, threads, blocks):
    """Every output element gathers, in source order, what the windows covering it
    selected for it (ties: the first element wins; padding never), from the init value;
    bit-exact, the CPU's order of additions."""
    window, source, ty = HOST_POOLS[what]
    text = select_and_scatter_module(window, source, "LE" if "min" in what else "GE", ty)
    dims = tuple(int(n) for n in source.strip("[]").split(","))
    rng = np.random.default_rng(8)
    dtype = ltypes.elem(ty).dtype.numpy
    x = np.round(rng.standard_normal((2, 9, 7, 3)) * 2).astype(dtype)     # with ties
    s = rng.standard_normal(dims).astype(dtype)
    got, want = run_kernel_on_host(text, {"x": x, "s": s}, threads, blocks)
    assert_matches(got[0], want[0], 0, what)
