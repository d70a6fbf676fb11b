"""Fusion: rules/default/fusion.rules says what may fuse, the target's cost model what does.

Each test optimizes HLO text with the default rules for a target, checks the fused module
computes what the original does (interpreter; XLA parses it, and runs it where noted), and
checks the kernels formed.
"""
from __future__ import annotations

import random

import numpy as np
import pytest

import hlo_opt
from hlo_opt import xla_oracle
from hlo_opt.fusion.partition import Partition
from hlo_opt.fusion.policy import FusionPolicy
from hlo_opt.fusion.stage import default_policy, fuse
from hlo_opt.errors import UnsupportedError
from hlo_opt.kernels import kernel_report
from hlo_opt.rule_compiler.guard_analysis import analyze_guards, kernel_scope
from hlo_opt.targets import cost_model, emits
from hlo_opt.tools.hlo_equiv import first_difference, random_array

from conftest import CORPUS, corpus_files, corpus_ids
from lowering_helpers import run_both


def fused(text: str, target: str = "cpu", check_xla_run: bool = False) -> hlo_opt.Module:
    """The optimized and fused module, after checking it against the original."""
    module = hlo_opt.parse(text, "test.hlo")
    out = hlo_opt.optimize(module, rules="default", target=target)
    printed = out.to_text()
    again = hlo_opt.parse(printed, "fused.hlo")
    rng = np.random.default_rng(0)
    args = [random_array(p.shape, rng, edges=False) for p in module.entry.parameters]
    expected = hlo_opt.evaluate(module, args)
    assert first_difference(expected, hlo_opt.evaluate(again, args)) is None
    if xla_oracle.available():
        xla_oracle.parse(printed)
        if check_xla_run:       # XLA on both sides: its tanh/exp differ from numpy's a little
            assert first_difference(xla_oracle.run(text, args),
                                    xla_oracle.run(printed, args)) is None
    return again


def fusions(module: hlo_opt.Module) -> list[tuple[str, list[str]]]:
    """(kind, opcodes computed inside) of each fusion of the entry, in order."""
    return [(i.attrs["kind"], [j.opcode for j in i.attrs["calls"].instructions
                               if j.opcode not in ("parameter", "tuple")])
            for i in module.entry.instructions if i.opcode == "fusion"]


def unfused(module: hlo_opt.Module) -> list[str]:
    return [i.opcode for i in module.entry.instructions
            if i.opcode not in ("parameter", "constant", "fusion", "tuple",
                                "get-tuple-element", "reshape", "bitcast")]


SOFTMAX = """HloModule softmax
max_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}
add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[64,256] parameter(0)
  ninf = f32[] constant(-inf)
  mx = f32[64] reduce(x, ninf), dimensions={1}, to_apply=max_f32
  mxb = f32[64,256] broadcast(mx), dimensions={0}
  d = f32[64,256] subtract(x, mxb)
  e = f32[64,256] exponential(d)
  zero = f32[] constant(0)
  s = f32[64] reduce(e, zero), dimensions={1}, to_apply=add_f32
  sb = f32[64,256] broadcast(s), dimensions={0}
  ROOT y = f32[64,256] divide(e, sb)
}
"""


@pytest.mark.parametrize("target", ["cpu", "gpu", "tpu"])
def test_softmax_becomes_a_few_reduction_kernels(target):
    out = fused(SOFTMAX, target, check_xla_run=target == "cpu")
    kinds = [kind for kind, _ in fusions(out)]
    assert set(unfused(out)) <= {"reduce"}          # a max over x needs no fusion
    assert kernel_report(out).kernels <= 3          # XLA:CPU makes 4 of this
    assert kinds.count("kInput") >= 1               # the reductions read fused producers
    body = [op for _, ops in fusions(out) for op in ops] + unfused(out)
    assert body.count("reduce") == 2 and "exponential" in body


LAYERNORM = """HloModule layernorm
add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[32,512] parameter(0)
  gamma = f32[512] parameter(1)
  zero = f32[] constant(0)
  n = f32[] constant(0.001953125)
  nb = f32[32] broadcast(n), dimensions={}
  s = f32[32] reduce(x, zero), dimensions={1}, to_apply=add_f32
  mean = f32[32] multiply(s, nb)
  mb = f32[32,512] broadcast(mean), dimensions={0}
  c = f32[32,512] subtract(x, mb)
  sq = f32[32,512] multiply(c, c)
  v = f32[32] reduce(sq, zero), dimensions={1}, to_apply=add_f32
  var = f32[32] multiply(v, nb)
  eps = f32[32] broadcast(f32[] constant(1e-05)), dimensions={}
  ve = f32[32] add(var, eps)
  r = f32[32] rsqrt(ve)
  rb = f32[32,512] broadcast(r), dimensions={0}
  g = f32[32,512] broadcast(gamma), dimensions={1}
  nrm = f32[32,512] multiply(c, rb)
  ROOT y = f32[32,512] multiply(nrm, g)
}
"""


def test_layernorm_fuses_its_statistics_into_the_reductions():
    out = fused(LAYERNORM, check_xla_run=True)
    assert set(unfused(out)) <= {"reduce"}
    assert kernel_report(out).kernels <= 3
    reductions = [ops for kind, ops in fusions(out) if "reduce" in ops]
    assert any("multiply" in ops and "subtract" in ops for ops in reductions)  # c*c, in-kernel


@pytest.mark.parametrize("text", [SOFTMAX, LAYERNORM], ids=["softmax", "layernorm"])
def test_a_reduce_and_the_loops_reading_its_rows_are_one_kernel_on_cpu(text):
    """`reduce_result`: the CPU runs such a kernel a block of rows at a time, so the
    statistics and the values using them read the input from memory once. Other targets
    keep the reduction's result in a kernel of its own."""
    assert kernel_report(fused(text, "cpu")).kernels == 1
    assert kernel_report(fused(text, "gpu")).kernels >= 2


@pytest.mark.parametrize("reduce, broadcast", [
    ("f32[] reduce(x, z), dimensions={0,1}", "dimensions={}"),          # to a scalar
    ("f32[256] reduce(x, z), dimensions={0}", "dimensions={1}"),        # down the columns
], ids=["scalar", "columns"])
def test_a_reduction_without_rows_is_not_fused_into_its_readers(reduce, broadcast):
    """A reduce to a scalar, or over the leading dimension, has no rows to go through one
    at a time (`rows(producer)` is 1): every reader needs all of it, so the loop reading it
    is a kernel of its own."""
    shape = reduce.split(" ")[0]
    text = f"""HloModule centre
add_f32 {{ a = f32[] parameter(0)
 b = f32[] parameter(1)
 ROOT s = f32[] add(a, b) }}
ENTRY main {{ x = f32[128,256] parameter(0)
 z = f32[] constant(0)
 s = {reduce}, to_apply=add_f32
 sb = f32[128,256] broadcast({shape} s), {broadcast}
 ROOT y = f32[128,256] subtract(x, sb) }}
"""
    out = fused(text, "cpu")
    assert kernel_report(out).kernels == 2
    assert not any("reduce" in ops and "subtract" in ops for _, ops in fusions(out))


def test_the_rows_a_producer_goes_through():
    """The `rows(producer)` fact: a reduce's kept elements ahead of its first reduced
    dimension, any other instruction's elements."""
    from hlo_opt.fusion.policy import rows
    module = hlo_opt.parse("""HloModule m
add_f32 { a = f32[] parameter(0)
 b = f32[] parameter(1)
 ROOT s = f32[] add(a, b) }
ENTRY main { x = f32[6,5,4] parameter(0)
 z = f32[] constant(0)
 minor = f32[6,5] reduce(x, z), dimensions={2}, to_apply=add_f32
 middle = f32[6,4] reduce(x, z), dimensions={1}, to_apply=add_f32
 leading = f32[5,4] reduce(x, z), dimensions={0}, to_apply=add_f32
 e = f32[6,5,4] exponential(x)
 ROOT t = (f32[6,5], f32[6,4], f32[5,4], f32[6,5,4]) tuple(minor, middle, leading, e) }
""")
    got = {i.name: rows(i) for i in module.entry.instructions if i.name != "t"}
    assert {k: got[k] for k in ("minor", "middle", "leading", "e")} == \
        {"minor": 30, "middle": 6, "leading": 1, "e": 120}


BIAS_GELU = """HloModule mlp
ENTRY main {
  x = f32[128,256] parameter(0)
  w = f32[256,512] parameter(1)
  b = f32[512] parameter(2)
  h = f32[128,512] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  bb = f32[128,512] broadcast(b), dimensions={1}
  z = f32[128,512] add(h, bb)
  half = f32[128,512] broadcast(f32[] constant(0.5)), dimensions={}
  one = f32[128,512] broadcast(f32[] constant(1)), dimensions={}
  k = f32[128,512] broadcast(f32[] constant(0.7978846)), dimensions={}
  z3 = f32[128,512] multiply(z, z)
  z3b = f32[128,512] multiply(z3, z)
  c = f32[128,512] broadcast(f32[] constant(0.044715)), dimensions={}
  t0 = f32[128,512] multiply(c, z3b)
  t1 = f32[128,512] add(z, t0)
  t2 = f32[128,512] multiply(k, t1)
  t = f32[128,512] tanh(t2)
  u = f32[128,512] add(one, t)
  hz = f32[128,512] multiply(half, z)
  ROOT y = f32[128,512] multiply(hz, u)
}
"""


def test_bias_and_gelu_run_in_the_dot_kernel():
    out = fused(BIAS_GELU, check_xla_run=True)
    [(kind, ops)] = fusions(out)
    assert kind == "kOutput" and ops.count("dot") == 1
    assert {"add", "tanh", "multiply", "broadcast"} <= set(ops)
    assert unfused(out) == []


SIBLINGS = """HloModule stats
add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[256,1024] parameter(0)
  zero = f32[] constant(0)
  s = f32[256] reduce(x, zero), dimensions={1}, to_apply=add_f32
  sq = f32[256,1024] multiply(x, x)
  ssq = f32[256] reduce(sq, zero), dimensions={1}, to_apply=add_f32
  ROOT t = (f32[256], f32[256]) tuple(s, ssq)
}
"""


def test_sibling_reductions_share_one_multi_output_kernel():
    out = fused(SIBLINGS, check_xla_run=True)
    [fusion] = [i for i in out.entry.instructions if i.opcode == "fusion"]
    assert fusion.attrs["kind"] == "kInput" and fusion.shape.is_tuple
    assert [op for op in fusions(out)[0][1]].count("reduce") == 2
    assert len(fusion.operands) == 1                  # x is read once
    assert sum(1 for i in out.entry.instructions if i.opcode == "get-tuple-element") == 2


# An expensive producer (erf, ~30 vector instructions an element) read by two reductions
# with different loop nests (a row sum and a column sum), which cannot share a kernel.
# Recomputing it in both is nearly free on a GPU, where arithmetic is cheap next to launches
# and HBM traffic; on a CPU core it is the dearest thing in the program, so it is computed
# once and written for the second reader.
SHARED_PRODUCER = """HloModule shared
add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[1024,1024] parameter(0)
  p = f32[1024,1024] erf(x)
  zero = f32[] constant(0)
  rows = f32[1024] reduce(p, zero), dimensions={1}, to_apply=add_f32
  cols = f32[1024] reduce(p, zero), dimensions={0}, to_apply=add_f32
  ROOT r = (f32[1024], f32[1024]) tuple(rows, cols)
}
"""


def test_a_shared_producer_is_duplicated_on_gpu_and_computed_once_on_cpu():
    gpu = fused(SHARED_PRODUCER, "gpu")
    cpu = fused(SHARED_PRODUCER, "cpu")
    gpu_erfs = sum(ops.count("erf") for _, ops in fusions(gpu))
    cpu_erfs = sum(ops.count("erf") for _, ops in fusions(cpu)) + unfused(cpu).count("erf")
    assert gpu_erfs == 2 and unfused(gpu) == [] and kernel_report(gpu).kernels == 2
    assert cpu_erfs == 1 and kernel_report(cpu).bytes_written > 4 * 1024 * 1024


# A gather picks rows of a slice of a table another gather reads too: the slice is read
# through where the gather picks (XLA fuses it so), not written out whole for a few rows.
GATHER_THROUGH_SLICE = """HloModule gather_slice
ENTRY main {
  table = f32[8192,256] parameter(0)
  rows = s32[1024,1] parameter(1)
  few = s32[64,1] parameter(2)
  head = f32[1024,256] slice(table), slice={[0:1024], [0:256]}
  a = f32[1024,256] gather(table, rows), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,256}
  b = f32[64,256] gather(head, few), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,256}
  ROOT r = (f32[1024,256], f32[64,256]) tuple(a, b)
}
"""


@pytest.mark.parametrize("target", ["cpu", "gpu"])
def test_a_gather_reads_through_the_slice_it_picks_from(target):
    module = fused(GATHER_THROUGH_SLICE, target)
    assert kernel_report(module).bytes_written == (1024 + 64) * 256 * 4     # the outputs only
    assert any({"slice", "gather"} <= set(ops) for _, ops in fusions(module))


# A transpose of the minor dimension feeding an add: on a CPU one loop reading x with a
# stride costs less than writing and re-reading the transpose; on a GPU the strided loads
# would not coalesce, so the transpose stays a kernel of its own (as XLA:GPU emits it).
MINOR_TRANSPOSE = """HloModule transpose
ENTRY main {
  x = f32[1024,1024] parameter(0)
  y = f32[1024,1024] parameter(1)
  t = f32[1024,1024] transpose(x), dimensions={1,0}
  ROOT s = f32[1024,1024] add(t, y)
}
"""


def test_a_minor_dim_transpose_fuses_on_cpu_but_not_on_gpu():
    cpu = fused(MINOR_TRANSPOSE, "cpu")
    gpu = fused(MINOR_TRANSPOSE, "gpu")
    assert kernel_report(cpu).kernels == 1 and fusions(cpu)[0][1] == ["transpose", "add"]
    assert kernel_report(gpu).kernels == 2 and "transpose" in unfused(gpu)


TRANSPOSED_DOT = """HloModule tdot
ENTRY main {
  x = f32[96,64] parameter(0)
  w = f32[96,80] parameter(1)
  xt = f32[64,96] transpose(x), dimensions={1,0}
  ROOT d = f32[64,80] dot(xt, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""


def test_a_dot_takes_its_transposed_operand_on_cpu_only():
    """`dot_operands`: the CPU's GEMM reads an operand's transpose while packing it. (The
    fusion stage alone: the default rules would fold this transpose into the dot.)"""
    cpu = fuse(hlo_opt.parse(TRANSPOSED_DOT), "cpu")
    gpu = fuse(hlo_opt.parse(TRANSPOSED_DOT), "gpu")
    assert fusions(cpu) == [("kOutput", ["transpose", "dot"])] and unfused(cpu) == []
    assert fusions(gpu) == [] and unfused(gpu) == ["transpose", "dot"]


# s4 arithmetic has no CPU emitter (the interpreter runs it); the negate of its widened
# result has one.
SUB_BYTE = """HloModule sub_byte
ENTRY main {
  x = s4[64] parameter(0)
  y = s4[64] parameter(1)
  a = s4[64] add(x, y)
  c = s32[64] convert(a)
  m = s32[64] multiply(c, c)
  ROOT r = s32[64] add(m, c)
}
"""


def test_an_op_the_cpu_cannot_emit_is_never_fused_for_the_cpu():
    """What the CPU's code generator cannot emit runs on its own (through the
    interpreter), so fusion for the cpu keeps it out of every kernel; for the gpu (no
    such fact) the whole chain is one kernel."""
    cpu = fused(SUB_BYTE, "cpu")
    emitted = emits("cpu")
    assert all(emitted(i) for f in cpu.entry.instructions if f.opcode == "fusion"
               for i in f.attrs["calls"].instructions)
    assert unfused(cpu) == ["add", "convert"]
    assert fusions(cpu) == [("kLoop", ["multiply", "add"])]
    assert [ops for _, ops in fusions(fused(SUB_BYTE, "gpu"))] == [
        ["add", "convert", "multiply", "add"]]


def counted_loop(n: str, direction: str = "LT", start: int = 0, step: int = 1,
                 dims: str = "512,1024") -> str:
    """A loop mixing bits like threefry's rounds: state (counter, key array), counting from
    `start` by `step` while `counter DIRECTION n`, then a select reading the bits."""
    return f"""HloModule rounds
cond {{
  s = (s32[], u32[{dims}]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] {n}
  ROOT c = pred[] compare(i, n), direction={direction}
}}
body {{
  s = (s32[], u32[{dims}]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  x = u32[{dims}] get-tuple-element(s), index=1
  k = u32[] constant(13)
  ks = u32[{dims}] broadcast(k), dimensions={{}}
  l = u32[{dims}] shift-left(x, ks)
  m = u32[{dims}] xor(x, l)
  a = u32[{dims}] add(m, x)
  step = s32[] constant({step})
  j = s32[] add(i, step)
  ROOT r = (s32[], u32[{dims}]) tuple(j, a)
}}
ENTRY e {{
  key = u32[{dims}] parameter(0)
  f = f32[{dims}] parameter(1)
  start = s32[] constant({start})
  init = (s32[], u32[{dims}]) tuple(start, key)
  w = (s32[], u32[{dims}]) while(init), condition=cond, body=body
  bits = u32[{dims}] get-tuple-element(w), index=1
  half = u32[] constant(2147483648)
  halves = u32[{dims}] broadcast(half), dimensions={{}}
  keep = pred[{dims}] compare(bits, halves), direction=LT
  zero = f32[] constant(0)
  zeros = f32[{dims}] broadcast(zero), dimensions={{}}
  ROOT y = f32[{dims}] select(keep, f, zeros)
}}
"""


@pytest.mark.parametrize("text,trips", [
    (counted_loop("constant(5)"), 5),
    (counted_loop("constant(0)", "GT", start=6, step=-2), 3),
    (counted_loop("constant(5)", "LE", start=5), 1),
])
def test_a_loop_of_a_few_counted_iterations_over_large_arrays_runs_as_one_kernel(text, trips):
    """Unrolled, every iteration's elementwise work joins the kernel reading the result:
    one pass over memory instead of one per iteration; optimize unrolls it too."""
    from hlo_opt.fusion import unroll
    module = hlo_opt.parse(text)
    [loop] = [i for i in module.entry.instructions if i.opcode == "while"]
    assert unroll.trips(loop, loop.operands[0]) == trips
    for fused_module in (fuse(module), fused(text)):
        assert not any(i.opcode == "while" for i in fused_module.instructions())
        assert kernel_report(fused_module).kernels == 1
    rng = np.random.default_rng(0)
    args = [rng.integers(0, 2 ** 32, (512, 1024), dtype=np.uint32),
            rng.standard_normal((512, 1024)).astype(np.float32)]
    [got] = hlo_opt.compile(text).run(args)
    assert np.array_equal(got, hlo_opt.evaluate(module, args)[0])


@pytest.mark.parametrize("text", [
    counted_loop("constant(9)"),                    # more iterations than MAX_TRIPS
    counted_loop("constant(5)", dims="16,16"),      # small arrays: cheap passes
    counted_loop("constant(5)", step=0),            # never ends
    counted_loop("constant(5)", "NE"),              # not a bound it can run the counter to
])
def test_other_loops_stay_loops(text):
    module = fuse(hlo_opt.parse(text))
    assert sum(i.opcode == "while" for i in module.instructions()) == 1


def test_compile_fuses_with_the_default_rule_sets_declarations():
    """The declarations compile reads (rules/default/fusion.rules) are every `fuse` and
    `limit` of the default rule set, which optimize fuses with."""
    from hlo_opt.egraph.pipeline import compiled_rules
    rules = compiled_rules("default", "xla")
    policy = default_policy("cpu")
    assert [d.name for d in policy.producer_rules + policy.sibling_rules] == \
        [f.name for f in rules.fuses if f.relation == "<-"] + \
        [f.name for f in rules.fuses if f.relation == "~"]
    assert policy.limits == [analyze_guards(lim.guards, kernel_scope()) for lim in rules.limits]


def test_fusion_can_be_turned_off_and_the_rules_decide_what_may_fuse(tmp_path):
    module = hlo_opt.parse(BIAS_GELU)
    plain = hlo_opt.optimize(module, rules="default", fusion=False)
    assert not any(i.opcode == "fusion" for i in plain.entry.instructions)
    # A rule set whose only declaration fuses elementwise ops into each other: the dot
    # stays a kernel of its own, whatever the cost model would prefer.
    rules = tmp_path / "loops.rules"
    rules.write_text("fuse loops: elementwise <- elementwise, broadcast\n")
    out = hlo_opt.optimize(module, rules=[str(rules)])
    assert "dot" in unfused(out) and fusions(out) and \
        all("dot" not in ops for _, ops in fusions(out))


def test_kernel_limits_are_obeyed(tmp_path):
    rules = tmp_path / "small.rules"
    rules.write_text("fuse loops: elementwise <- elementwise, broadcast\n"
                     "limit tiny: members(kernel) <= 3\n")
    out = hlo_opt.optimize(hlo_opt.parse(BIAS_GELU), rules=[str(rules)])
    sizes = [sum(op != "constant" for op in ops) for _, ops in fusions(out)]
    assert sizes and max(sizes) <= 3


def test_a_chain_of_single_reader_ops_is_one_kernel_priced_about_once_per_op():
    """Every value of this chain has one reader (a polynomial evaluated step by step, as in
    erf): it folds into one kernel, pricing about one merge per instruction where the
    best-first search would price about ten."""
    from hlo_opt.egraph.pipeline import compiled_rules
    lines = ["x = f32[1024] parameter(0)"]
    prev = "x"
    for i in range(40):
        lines += [f"c{i} = f32[] constant({i + 1}.5)",
                  f"b{i} = f32[1024] broadcast(c{i}), dimensions={{}}",
                  f"m{i} = f32[1024] multiply({prev}, b{i})",
                  f"t{i} = f32[1024] {'tanh' if i % 2 else 'exponential'}(m{i})"]
        prev = f"t{i}"
    lines[-1] = "ROOT " + lines[-1]
    module = hlo_opt.parse("HloModule chain\nENTRY main {\n  " + "\n  ".join(lines) + "\n}\n")
    rules = compiled_rules("default", "xla")
    part = Partition(module.entry, FusionPolicy(rules.fuses, rules.limits, "cpu"),
                     cost_model("cpu"))
    priced = 0
    gain = part.pricing.gain

    def counted(kind, kernels):
        nonlocal priced
        priced += 1
        return gain(kind, kernels)
    part.pricing.gain = counted
    kernels = part.run()
    assert [len(k) for k in kernels] == [120]       # all but the parameter and the constants
    assert priced <= 2 * len(module.entry.instructions)


@pytest.mark.parametrize("text, message", [
    ("fuse f: elementwise <- frobnicate\n", "x.rules:1:1: 'frobnicate' is neither an opcode"),
    ("fuse f: add <- multiply when heroes(producer) <= 1\n", "x.rules:1:"),
    ("limit l: fan_in(consumer) <= 4\n", "x.rules:1:"),
    ("limit l: rows(kernel) <= 4\n", "x.rules:1:"),
])
def test_broken_fusion_declarations_are_positioned_errors(tmp_path, text, message):
    path = tmp_path / "x.rules"
    path.write_text(text)
    with pytest.raises(hlo_opt.HloError) as err:
        hlo_opt.optimize(hlo_opt.parse(SOFTMAX), rules=[str(path)])
    assert str(err.value).endswith(str(err.value).split("\n")[0])
    assert message.split(":")[1] in str(err.value).replace(str(tmp_path) + "/", "")


def test_training_step_has_far_fewer_kernels_than_ops():
    path = corpus_files(include_xla_opt=False)[0].parent / "mlp_train_sgd.hlo"
    module = hlo_opt.parse(path.read_text(), str(path))
    before = kernel_report(hlo_opt.optimize(module, rules="default", fusion=False))
    text = hlo_opt.optimize(module, rules="default").to_text()
    after = kernel_report(hlo_opt.parse(text))
    assert after.kernels * 2 <= before.kernels
    assert after.bytes_written < before.bytes_written
    rng = np.random.default_rng(2)
    args = [random_array(p.shape, rng, edges=False) for p in module.entry.parameters]
    assert first_difference(hlo_opt.evaluate(module, args),
                            hlo_opt.evaluate(hlo_opt.parse(text), args)) is None
    if xla_oracle.available():
        assert first_difference(hlo_opt.evaluate(module, args),
                                xla_oracle.run(text, args)) is None


def partition(text: str) -> Partition:
    """One kernel per instruction of the entry; merges are applied by hand."""
    module = hlo_opt.parse(text, "test.hlo")
    return Partition(module.entry, FusionPolicy((), (), "cpu"), cost_model("cpu"))


def kernel_of(part: Partition, name: str):
    [kernel] = [k for k in part.graph.kernels
                if any(part.graph.insts[m].name == name for m in k.inside)]
    return kernel


def depends_on_itself(part: Partition, groups: list[set[int]]) -> bool:
    """Brute force, over instruction positions: is there a cycle among these groups, where
    a group follows another when it computes a user of a value the other computes (and it
    does not compute itself), directly or through instructions no group holds?"""
    holders: dict[int, list[int]] = {}
    for g, members in enumerate(groups):
        for m in members:
            holders.setdefault(m, []).append(g)
    users: dict[int, list[int]] = {}
    for i, inst in enumerate(part.graph.insts):
        for o in {part.graph.pos[id(o)] for o in inst.operands}:
            users.setdefault(o, []).append(i)
    follows: list[set[int]] = [set() for _ in groups]
    for g, members in enumerate(groups):
        stack = [(m, u) for m in members for u in users.get(m, ())]
        while stack:
            m, u = stack.pop()
            if u in holders:
                follows[g].update(h for h in holders[u] if m not in groups[h])
            else:
                stack.extend((u, w) for w in users.get(u, ()))
    waiting = [0] * len(groups)                    # Kahn: a cycle leaves groups waiting
    for g in range(len(groups)):
        for h in follows[g]:
            waiting[h] += 1
    ready = [g for g in range(len(groups)) if not waiting[g]]
    done = 0
    while ready:
        done += 1
        for h in follows[ready.pop()]:
            waiting[h] -= 1
            if not waiting[h]:
                ready.append(h)
    return done < len(groups)


# w and v become one kernel first (they share x). Then a kernel {a, b} would read w from
# {w, v}, which needs r1, which reads a: a cycle through a kernel that starts after {a, b}
# ends, which a search pruned by instruction position misses.
CYCLE_THROUGH_A_LATER_KERNEL = """HloModule cycle
ENTRY main {
  x = f32[64] parameter(0)
  w = f32[64] exponential(x)
  a = f32[64] negate(x)
  b = f32[64] add(a, w)
  r1 = f32[64] sine(a)
  v = f32[64] multiply(r1, x)
  ROOT t = (f32[64], f32[64]) tuple(b, v)
}
"""


def test_a_merge_that_closes_a_cycle_through_other_kernels_is_refused():
    part = partition(CYCLE_THROUGH_A_LATER_KERNEL)
    assert part.merge("siblings", [kernel_of(part, "w"), kernel_of(part, "v")])
    assert not part.merge("multi", [kernel_of(part, "a"), kernel_of(part, "b")])
    assert kernel_of(part, "a") is not kernel_of(part, "b")
    assert part.merge("multi", [kernel_of(part, "a"), kernel_of(part, "r1")])


def test_the_cycle_check_is_exact():
    """Random merges of any two kernels of a training step (tuples and calls between
    kernels): each is refused exactly when the kernels would depend on themselves. A
    producer duplicated into all its readers never makes a cycle."""
    part = partition((CORPUS / "mlp_train_sgd.hlo").read_text())
    rng = random.Random(0)
    refused = duplicated = 0
    for _ in range(300):
        a, b = rng.sample(list(part.graph.kernels), 2)
        readers, only_kernels = part.graph.readers_of(a)
        if readers and only_kernels and rng.random() < 0.3:
            assert part.merge("dup", [a, *readers])
            duplicated += 1
        else:
            groups = [k.inside for k in part.graph.kernels if k is not a and k is not b]
            cyclic = depends_on_itself(part, groups + [a.inside | b.inside])
            assert bool(part.merge(rng.choice(["multi", "siblings"]), [a, b])) != cyclic
            refused += cyclic
        assert not depends_on_itself(part, [k.inside for k in part.graph.kernels])
    assert refused > 20 and duplicated > 5 and len(part.graph.kernels) < 30


NON_XLA = corpus_files(include_xla_opt=False)


@pytest.mark.parametrize("path", NON_XLA, ids=corpus_ids(NON_XLA))
def test_every_fixture_fused_for_gpu_computes_the_same(path):
    """(The cpu target is covered by test_optimize's corpus test, which fuses too.)"""
    module = hlo_opt.parse(path.read_text(), str(path))
    out = hlo_opt.optimize(module, rules="default", target="gpu", time_limit=10)
    text = out.to_text()
    if xla_oracle.available():
        xla_oracle.parse(text)
    rng = np.random.default_rng(4)
    args = [random_array(p.shape, rng, edges=False) for p in module.entry.parameters]
    try:
        expected = hlo_opt.evaluate(module, args)
    except UnsupportedError:
        pytest.skip("the interpreter cannot run this module")
    assert first_difference(expected, hlo_opt.evaluate(hlo_opt.parse(text), args)) is None


@pytest.mark.parametrize("target", ["cpu", "gpu"])
@pytest.mark.parametrize("name", ["softmax", "layernorm", "gpt2_block", "mlp_train_sgd"])
def test_every_edge_inside_a_kernel_is_declared_fusible(name, target):
    """Whatever merge made a kernel (a consumer, a copied producer, siblings), each
    producer-consumer pair inside it is one the fusion rules allow."""
    from hlo_opt.egraph.pipeline import compiled_rules
    rules = compiled_rules("default", "xla")
    policy = FusionPolicy(rules.fuses, rules.limits, target)
    module = hlo_opt.optimize(hlo_opt.parse((CORPUS / f"{name}.hlo").read_text()),
                              fusion=False)
    users: dict[int, int] = {}
    for inst in module.entry.instructions:
        for o in {id(o) for o in inst.operands}:
            users[o] = users.get(o, 0) + 1
    kernels = Partition(module.entry, policy, cost_model(target)).run()
    assert any(len(k) > 1 for k in kernels)
    for members in kernels:
        inside = {id(m) for m in members}
        for m in members:
            for o in m.operands:
                if id(o) in inside:
                    assert policy.may_fuse(m, o, users[id(o)]), (m.name, o.name)


def test_instructions_no_result_reads_are_dropped_not_fused():
    """The fusion stage called on a computation that still has dead code (extraction and
    compile's flattening remove it first) outlines what the results need and drops the rest."""
    from hlo_opt.fusion.outline import fuse_module
    from hlo_opt.kernels import executed_computations
    module = hlo_opt.parse("""HloModule dead
ENTRY e {
  p0 = f32[2] parameter(0)
  a = f32[2] reshape(p0)
  b = f32[2] abs(a)
  c = f32[2] negate(b)
  ROOT d = f32[2] exponential(p0)
}""")
    out = fuse_module(module, executed_computations(module), default_policy("cpu"),
                      cost_model("cpu"))
    assert [i.opcode for i in out.entry.instructions] == ["parameter", "exponential"]
    x = np.array([0.5, -1.0], np.float32)
    np.testing.assert_array_equal(hlo_opt.evaluate(out, [x])[0], hlo_opt.evaluate(module, [x])[0])


def merged(text: str) -> tuple[hlo_opt.Module, list[int]]:
    """The flattened module with equal instructions merged, and how many each executed
    computation lost."""
    from hlo_opt.fusion.merge_equal import merge_equal
    from hlo_opt.fusion.stage import flattened
    from hlo_opt.kernels import executed_computations
    module = flattened(hlo_opt.parse(text))
    return module, [merge_equal(c) for c in executed_computations(module)]


SOFTMAX_TRACED_TWICE = SOFTMAX.replace("  ROOT y = f32[64,256] divide(e, sb)", """\
  ninf2 = f32[] constant(-inf), metadata={op_name="again"}
  mx2 = f32[64] reduce(x, ninf2), dimensions={1}, to_apply=max_f32
  mxb2 = f32[64,256] broadcast(mx2), dimensions={0}
  d2 = f32[64,256] subtract(x, mxb2)
  e2 = f32[64,256] exponential(d2)
  ROOT y = f32[64,256] divide(e2, sb)""")


def test_a_value_computed_twice_is_computed_once_before_kernels_form():
    """JAX traces the softmax's maximum and exponentials twice; compile computes them once
    (metadata aside, equal opcode, shape, attributes and operands are one value)."""
    module, counts = merged(SOFTMAX_TRACED_TWICE)
    assert counts == [5]            # the constant, reduce, broadcast, subtract, exponential
    assert sorted(i.opcode for i in module.entry.instructions).count("exponential") == 1
    x = np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32)
    expected = hlo_opt.evaluate(hlo_opt.parse(SOFTMAX_TRACED_TWICE), [x])[0]
    np.testing.assert_allclose(hlo_opt.compile(SOFTMAX_TRACED_TWICE)(x)[0], expected,
                               rtol=1e-6)
    kernels = fuse(hlo_opt.parse(SOFTMAX_TRACED_TWICE))
    assert [i.opcode for c in kernels.computations for i in c.instructions].count("reduce") == 2


def test_random_draws_and_side_effects_are_never_merged():
    module, counts = merged("""HloModule draws
ENTRY e {
  lo = f32[] constant(0)
  hi = f32[] constant(1)
  r1 = f32[16] rng(lo, hi), distribution=rng_uniform
  r2 = f32[16] rng(lo, hi), distribution=rng_uniform
  c1 = f32[16] custom-call(r1), custom_call_target="log", custom_call_has_side_effect=true
  c2 = f32[16] custom-call(r1), custom_call_target="log", custom_call_has_side_effect=true
  n1 = f32[16] negate(r1)
  n2 = f32[16] negate(r1)
  ROOT t = (f32[16], f32[16], f32[16], f32[16], f32[16], f32[16]) tuple(r1, r2, c1, c2, n1, n2)
}""")
    assert counts == [1]            # only the negates
    opcodes = [i.opcode for i in module.entry.instructions]
    assert opcodes.count("rng") == 2 and opcodes.count("custom-call") == 2
    assert module.entry.root.operands[4] is module.entry.root.operands[5]


def test_equal_instructions_merge_inside_loop_bodies_and_constants_by_value():
    text = """HloModule loop
cond {
  s = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  s = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  v = f32[8] get-tuple-element(s), index=1
  one = s32[] constant(1)
  next = s32[] add(i, one)
  v2 = f32[8] get-tuple-element(s), index=1
  a = f32[8] sine(v)
  b = f32[8] sine(v2)
  half = f32[8] constant({0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5})
  other = f32[8] constant({0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.25})
  same = f32[8] constant({0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5})
  ab = f32[8] add(a, b)
  h = f32[8] multiply(ab, half)
  o = f32[8] multiply(h, other)
  w = f32[8] multiply(o, same)
  ROOT t = (s32[], f32[8]) tuple(next, w)
}
ENTRY e {
  x = f32[8] parameter(0)
  zero = s32[] constant(0)
  t = (s32[], f32[8]) tuple(zero, x)
  l = (s32[], f32[8]) while(t), condition=cond, body=body
  ROOT r = f32[8] get-tuple-element(l), index=1
}"""
    module, counts = merged(text)
    body = next(i for i in module.entry.instructions if i.opcode == "while").attrs["body"]
    assert sorted(counts) == [0, 0, 3]      # the body's v2, b and same
    assert [i.opcode for i in body.instructions].count("sine") == 1
    assert [i.opcode for i in body.instructions].count("constant") == 3
    x = np.linspace(-1, 1, 8, dtype=np.float32)
    np.testing.assert_allclose(hlo_opt.compile(text)(x)[0],
                               hlo_opt.evaluate(hlo_opt.parse(text), [x])[0], rtol=1e-5)


WEIGHT_GRADIENT = """HloModule grad
ENTRY e {
  acc = f32[40,24] parameter(0)
  x = f32[16,24] parameter(1)
  dy = f32[16,40] parameter(2)
  d = f32[24,40] dot(x, dy), lhs_contracting_dims={0}, rhs_contracting_dims={0}, operand_precision={highest,default}
  t = f32[40,24]{0,1} transpose(d), dimensions={1,0}
  ROOT g = f32[40,24] add(acc, t)
}
"""

BATCHED_TRANSPOSED = """HloModule batched
ENTRY e {
  a = f32[2,3,5,4] parameter(0)
  b = f32[2,4,6] parameter(1)
  d = f32[2,3,5,6] dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={3}, rhs_batch_dims={0}, rhs_contracting_dims={1}
  t = f32[SHAPE] transpose(d), dimensions={PERMUTATION}
  ROOT n = f32[SHAPE] negate(t)
}
"""


def batched_transposed(permutation: str, shape: str) -> str:
    return BATCHED_TRANSPOSED.replace("PERMUTATION", permutation).replace("SHAPE", shape)


def folded(text: str) -> tuple[hlo_opt.Module, list[int]]:
    """The flattened module with transposed dots folded, and how many in each executed
    computation."""
    from hlo_opt.fusion.stage import flattened
    from hlo_opt.fusion.transposed_dots import fold_transposed_dots
    from hlo_opt.kernels import executed_computations
    module = flattened(hlo_opt.parse(text))
    return module, [fold_transposed_dots(c) for c in executed_computations(module)]


def same_as_interpreter(text: str) -> None:
    """Compiled (every kernel native: no fallback), `text` computes what it means."""
    module = hlo_opt.parse(text)
    rng = np.random.default_rng(0)
    ours, want = run_both(module, [random_array(p.shape, rng, edges=False)
                                   for p in module.entry.parameters])
    np.testing.assert_allclose(ours[0], want[0], rtol=1e-5, atol=1e-5)


def test_a_dot_read_transposed_is_computed_transposed_with_the_add_as_its_epilogue():
    """`acc + transpose(dot(x, dy))` (a weight gradient) is dot(dy, x): one GEMM kernel
    whose epilogue is the add, no transpose left."""
    module, counts = folded(WEIGHT_GRADIENT)
    assert counts == [1]
    [dot] = [i for i in module.entry.instructions if i.opcode == "dot"]
    assert dot.shape.dims == (40, 24) and [o.name for o in dot.operands] == ["dy", "x"]
    assert dot.attrs["operand_precision"] == ("default", "highest")
    assert "transpose" not in [i.opcode for i in module.entry.instructions]
    kernels = fuse(hlo_opt.parse(WEIGHT_GRADIENT))
    assert fusions(kernels) == [("kOutput", ["dot", "add"])]
    same_as_interpreter(WEIGHT_GRADIENT)


def test_batched_dots_swap_their_free_blocks_keeping_the_batch_first():
    text = batched_transposed("0,3,1,2", "2,6,3,5")
    assert folded(text)[1] == [1]
    same_as_interpreter(text)


def test_a_transposed_dot_reading_another_folds_with_it():
    text = """HloModule chained
ENTRY e {
  a = f32[8,6] parameter(0)
  b = f32[8,5] parameter(1)
  c = f32[6,7] parameter(2)
  d1 = f32[6,5] dot(a, b), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  t1 = f32[5,6] transpose(d1), dimensions={1,0}
  d2 = f32[5,7] dot(t1, c), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  t2 = f32[7,5] transpose(d2), dimensions={1,0}
  ROOT n = f32[7,5] negate(t2)
}
"""
    module, counts = folded(text)
    assert counts == [2]
    d1, d2 = [i for i in module.entry.instructions if i.opcode == "dot"]
    assert d2.operands == [module.entry.parameters[2], d1]
    same_as_interpreter(text)


@pytest.mark.parametrize("text", [
    batched_transposed("0,3,2,1", "2,6,5,3"),                      # the lhs block reversed
    WEIGHT_GRADIENT.replace("ROOT g = f32[40,24] add(acc, t)", """\
  g = f32[40,24] add(acc, t)
  ROOT r = (f32[40,24], f32[24,40]) tuple(g, d)"""),              # read untransposed too
])
def test_other_transposes_of_dots_stay_transposes(text):
    module, counts = folded(text)
    assert counts == [0]
    assert "transpose" in [i.opcode for i in module.entry.instructions]
    same_as_interpreter(text)
