"""Fused modules (what XLA and our optimizer's fusion print) compile and compute what the
interpreter computes: kLoop, kInput and kOutput fusions, multi-output fusions whose fused
computation's root is a tuple read through get-tuple-element, fusions inside loop bodies, and
what hlo_opt.optimize fuses. (XLA:CPU's own fusions, kLoop and kCustom, are the corpus's
*.xla_opt.hlo fixtures, run by test_lowering_corpus.py.)"""
from __future__ import annotations

import numpy as np
import pytest

import hlo_opt
from conftest import CORPUS
from hlo_opt.tools.hlo_run import random_inputs
from lowering_helpers import random_args, run_both
from test_fusion import TRANSPOSED_DOT
from test_lowering_corpus import assert_outputs_match

ADD = """add { a = f32[] parameter(0)
 b = f32[] parameter(1)
 ROOT r = f32[] add(a, b) }
max { a = f32[] parameter(0)
 b = f32[] parameter(1)
 ROOT r = f32[] maximum(a, b) }
"""

CASES = {
    # kInput: the reduction computes its elementwise producer while reading the input.
    "input": ("""fused { p0 = f32[48,100] parameter(0)
 e = f32[48,100] exponential(p0)
 z = f32[] constant(0)
 ROOT s = f32[48] reduce(e, z), dimensions={1}, to_apply=add }""", """
  x = f32[48,100] parameter(0)
  ROOT f = f32[48] fusion(x), kind=kInput, calls=fused"""),
    # kInput, multi-output: sibling reductions over one input (max and sum of a row), and
    # the elementwise value they reduce, each read by the entry through get-tuple-element.
    "input_multi": ("""fused { p0 = f32[32,64] parameter(0)
 t = f32[32,64] tanh(p0)
 lo = f32[] constant(-inf)
 z = f32[] constant(0)
 m = f32[32] reduce(t, lo), dimensions={1}, to_apply=max
 s = f32[32] reduce(t, z), dimensions={1}, to_apply=add
 ROOT r = (f32[32], f32[32], f32[32,64]) tuple(m, s, t) }""", """
  x = f32[32,64] parameter(0)
  f = (f32[32], f32[32], f32[32,64]) fusion(x), kind=kInput, calls=fused
  m = f32[32] get-tuple-element(f), index=0
  s = f32[32] get-tuple-element(f), index=1
  t = f32[32,64] get-tuple-element(f), index=2
  d = f32[32] subtract(s, m)
  ROOT o = (f32[32], f32[32,64]) tuple(d, t)"""),
    # kOutput: bias add and relu on the product of a dot.
    "output": ("""fused { p0 = f32[40,72] parameter(0)
 p1 = f32[72,56] parameter(1)
 p2 = f32[56] parameter(2)
 d = f32[40,56] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
 b = f32[40,56] broadcast(p2), dimensions={1}
 a = f32[40,56] add(d, b)
 z = f32[] constant(0)
 zb = f32[40,56] broadcast(z), dimensions={}
 ROOT r = f32[40,56] maximum(a, zb) }""", """
  x = f32[40,72] parameter(0)
  w = f32[72,56] parameter(1)
  c = f32[56] parameter(2)
  ROOT f = f32[40,56] fusion(x, w, c), kind=kOutput, calls=fused"""),
    # kOutput, multi-output: the product itself and the activation, transposed.
    "output_multi": ("""fused { p0 = f32[3,16,24] parameter(0)
 p1 = f32[3,24,20] parameter(1)
 d = f32[3,16,20] dot(p0, p1), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
 g = f32[3,16,20] logistic(d)
 t = f32[3,20,16] transpose(g), dimensions={0,2,1}
 ROOT r = (f32[3,16,20], f32[3,20,16]) tuple(d, t) }""", """
  x = f32[3,16,24] parameter(0)
  y = f32[3,24,20] parameter(1)
  f = (f32[3,16,20], f32[3,20,16]) fusion(x, y), kind=kOutput, calls=fused
  d = f32[3,16,20] get-tuple-element(f), index=0
  t = f32[3,20,16] get-tuple-element(f), index=1
  n = f32[3,16,20] negate(d)
  ROOT o = (f32[3,16,20], f32[3,20,16]) tuple(n, t)"""),
    # kLoop, multi-output: results of different shapes and types, a parameter passed
    # through, one value twice; the fusion's tuple is also the entry's result.
    "loop_multi": ("""fused { p0 = f32[8,12] parameter(0)
 p1 = f32[12] parameter(1)
 b = f32[8,12] broadcast(p1), dimensions={1}
 m = f32[8,12] multiply(p0, b)
 r = f32[12,8] transpose(m), dimensions={1,0}
 c = s32[8,12] convert(m)
 ROOT t = (f32[8,12], f32[12,8], s32[8,12], f32[12], f32[8,12]) tuple(m, r, c, p1, m) }""", """
  x = f32[8,12] parameter(0)
  y = f32[12] parameter(1)
  ROOT f = (f32[8,12], f32[12,8], s32[8,12], f32[12], f32[8,12]) fusion(x, y), kind=kLoop, calls=fused"""),
    # Fusions in a while body: a multi-output loop fusion updates the state.
    "in_loop": ("""fused { p0 = f32[16] parameter(0)
 p1 = f32[16] parameter(1)
 s = f32[16] add(p0, p1)
 h = f32[] constant(0.5)
 hb = f32[16] broadcast(h), dimensions={}
 m = f32[16] multiply(s, hb)
 ROOT t = (f32[16], f32[16]) tuple(m, s) }
cond { s = (s32[], f32[16], f32[16]) parameter(0)
 i = s32[] get-tuple-element(s), index=0
 n = s32[] constant(4)
 ROOT lt = pred[] compare(i, n), direction=LT }
body { s = (s32[], f32[16], f32[16]) parameter(0)
 i = s32[] get-tuple-element(s), index=0
 a = f32[16] get-tuple-element(s), index=1
 b = f32[16] get-tuple-element(s), index=2
 f = (f32[16], f32[16]) fusion(a, b), kind=kLoop, calls=fused
 m = f32[16] get-tuple-element(f), index=0
 u = f32[16] get-tuple-element(f), index=1
 one = s32[] constant(1)
 j = s32[] add(i, one)
 ROOT t = (s32[], f32[16], f32[16]) tuple(j, u, m) }""", """
  x = f32[16] parameter(0)
  y = f32[16] parameter(1)
  zero = s32[] constant(0)
  init = (s32[], f32[16], f32[16]) tuple(zero, x, y)
  w = (s32[], f32[16], f32[16]) while(init), condition=cond, body=body
  ROOT r = f32[16] get-tuple-element(w), index=2"""),
}


def fused_module(case: str) -> hlo_opt.Module:
    fused, entry = CASES[case]
    return hlo_opt.parse(f"HloModule {case}\n{ADD}{fused}\nENTRY e {{{entry}\n}}\n")


@pytest.mark.parametrize("case", sorted(CASES))
def test_fused_module_matches_interpreter(case):
    module = fused_module(case)
    exe = hlo_opt.compile(module)
    assert exe.stats["fallbacks"] == []
    args = random_args(module, np.random.default_rng(0))
    with np.errstate(all="ignore"):
        assert_outputs_match(exe.run(args), hlo_opt.evaluate(module, args), case)


def test_each_fusion_is_one_kernel_call():
    """The fusion is not split again: a multi-output fusion is one call writing every
    result, and the entry's own subtraction is a second one."""
    exe = hlo_opt.compile(fused_module("input_multi"))
    assert exe.stats["kernel_calls"] == 2
    ours, want = run_both(fused_module("input_multi"), [np.ones((32, 64), np.float32)])
    assert_outputs_match(ours, want, "input_multi, ones")


@pytest.mark.parametrize("name", ["mlp_train_adam", "scan_rnn_grad", "low_precision"])
def test_optimizer_fused_corpus_module_matches_interpreter(name):
    """What hlo_opt.optimize's fusion makes of training steps, a scan's gradient (fusions in
    loop bodies) and narrow floats: multi-output kLoop, kInput and kOutput fusions."""
    path = CORPUS / f"{name}.hlo"
    module = hlo_opt.parse(path.read_text(), str(path))
    fused = hlo_opt.optimize(module, time_limit=10)
    assert any(i.opcode == "fusion" for i in fused.instructions())
    exe = hlo_opt.compile(fused)
    assert exe.stats["fallbacks"] == []
    args = random_inputs(module, seed=0)
    with np.errstate(all="ignore"):
        assert_outputs_match(exe.run(args), hlo_opt.evaluate(module, args), name)


@pytest.mark.parametrize("name", ["softmax", "layernorm", "mlp_fwd", "attention_1h",
                                  "scan_rnn", "cond_switch", "gather_scatter"])
def test_compile_forms_the_kernels_optimize_forms(name):
    """compile of an unfused module runs the fusion stage optimize runs after extraction
    (the default declarations, the cpu cost model): on the same extracted program, the same
    kernels, called as often."""
    path = CORPUS / f"{name}.hlo"
    module = hlo_opt.parse(path.read_text(), str(path))
    extracted = hlo_opt.optimize(module, fusion=False, time_limit=30)
    assert not any(i.opcode == "fusion" for i in extracted.instructions())
    ours = hlo_opt.compile(extracted)
    theirs = hlo_opt.compile(hlo_opt.optimize(module, time_limit=30))
    assert sorted(ours.kernels) == sorted(theirs.kernels)
    assert ours.stats["kernel_calls"] == theirs.stats["kernel_calls"]


def test_a_gemm_reads_its_transposed_operand_while_packing():
    """The transpose joins the dot's kernel (`dot_operands`) and its phase: one kernel, one
    loop structure, no transposed copy in memory."""
    from hlo_opt.lowering.fallback import why_not
    from hlo_opt.lowering.phases import split
    exe = hlo_opt.compile(TRANSPOSED_DOT)
    assert exe.stats["kernel_calls"] == 1
    [kernel] = exe.kernels.values()
    assert kernel.temps == []
    assert [(p.root.opcode, [m.opcode for m in p.members]) for p in split(kernel.comp, why_not)] \
        == [("dot", ["dot", "transpose"])]
    module = hlo_opt.parse(TRANSPOSED_DOT)
    ours, want = run_both(module, random_inputs(module, seed=1))
    assert_outputs_match(ours, want, "transposed dot")


BIAS_RELU = """HloModule bias_relu
ENTRY e {{
  x = f32[{n},{n}] parameter(0)
  w = f32[{n},{n}] parameter(1)
  b = f32[{n}] parameter(2)
  d = f32[{n},{n}] dot(x, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  bb = f32[{n},{n}] broadcast(b), dimensions={{1}}
  a = f32[{n},{n}] add(d, bb)
  z = f32[] constant(0)
  zb = f32[{n},{n}] broadcast(z), dimensions={{}}
  ROOT r = f32[{n},{n}] maximum(a, zb)
}}
"""


@pytest.mark.parametrize("n, calls", [(32, 1), (384, 2)])
def test_a_gemm_worth_threading_runs_its_epilogue_as_a_step_of_its_own(n, calls, monkeypatch):
    """A dot with its bias and relu is one kernel of two steps (the product, stored, then
    the loop reading it). A kernel of several steps runs on one thread, so when the GEMM is
    worth threading each step runs as a call of its own, split across the threads."""
    from hlo_opt.lowering import jit
    from hlo_opt.targets import cpu_facts
    if not jit.has_openmp():
        pytest.skip("no OpenMP runtime: kernels run on the calling thread")
    monkeypatch.setattr(cpu_facts, "threads", lambda: 4)
    text = BIAS_RELU.format(n=n)
    exe = hlo_opt.compile(text)
    assert exe.stats["kernel_calls"] == calls
    assert any(k.comp.root.opcode == "dot" and k.parallel(4, cpu_facts.PARALLEL_MIN_WORK)
               for k in exe.kernels.values()) == (calls == 2)
    module = hlo_opt.parse(text)
    ours, want = run_both(module, random_inputs(module, seed=2))
    assert_outputs_match(ours, want, f"bias relu {n}")
