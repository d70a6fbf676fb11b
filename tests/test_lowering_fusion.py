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
from hlo_opt.lowering.emit_kernel import kernel_row_pass
from hlo_opt.targets import cpu_facts
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


# A dense layer: dot, bias through a broadcast, tanh-approximated gelu, and what the
# result is stored as (`{out}`: f32, or a bf16 convert) — the epilogue of its GEMM.
DENSE_GELU = """HloModule dense_gelu
ENTRY e {{
  x = f32[{m},{k}] parameter(0)
  w = f32[{k},{n}] parameter(1)
  b = f32[{n}] parameter(2)
  d = f32[{m},{n}] dot(x, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  bb = f32[{m},{n}] broadcast(b), dimensions={{1}}
  a = f32[{m},{n}] add(d, bb)
  a3 = f32[{m},{n}] multiply(a, a)
  c = f32[] constant(0.044715)
  cb = f32[{m},{n}] broadcast(c), dimensions={{}}
  t = f32[{m},{n}] multiply(a3, cb)
  one = f32[] constant(1)
  ob = f32[{m},{n}] broadcast(one), dimensions={{}}
  u = f32[{m},{n}] add(t, ob)
  v = f32[{m},{n}] multiply(a, u)
  s = f32[] constant(0.7978845608)
  sb = f32[{m},{n}] broadcast(s), dimensions={{}}
  vs = f32[{m},{n}] multiply(v, sb)
  th = f32[{m},{n}] tanh(vs)
  h = f32[{m},{n}] add(th, ob)
  half = f32[] constant(0.5)
  hb = f32[{m},{n}] broadcast(half), dimensions={{}}
  ah = f32[{m},{n}] multiply(a, hb)
  g = f32[{m},{n}] multiply(ah, h)
  ROOT r = {out}[{m},{n}] convert(g)
}}
"""


@pytest.mark.parametrize("m, k, n, out", [
    (40, 72, 56, "f32"),        # one K block, one tile column edge
    (37, 600, 61, "f32"),       # ragged M, N and K: partial sums kept over seven K blocks
    (37, 300, 61, "bf16"),      # rounded to bf16 once, in the epilogue
    (5, 3, 7, "f32"),           # too small to pack: the plain loop applies it per element
    (390, 270, 200, "f32"),     # worth threading
    (390, 270, 200, "bf16"),
])
def test_a_dense_layer_is_one_threaded_gemm_phase_applying_its_epilogue(m, k, n, out,
                                                                        monkeypatch):
    """dot + bias + gelu (+ convert) is one kernel of one phase: the GEMM computes the
    gelu per element as it writes its final tiles, so no temporary holds the product, and
    the phase is split across threads like any GEMM. Equal to the interpreter. (A 256 KiB
    L2 makes K blocks of 96.)"""
    from hlo_opt.lowering import jit
    from hlo_opt.lowering.fallback import why_not
    from hlo_opt.lowering.phases import split
    from hlo_opt.targets import cpu_facts
    monkeypatch.setattr(cpu_facts, "threads", lambda: 4)
    monkeypatch.setattr(cpu_facts, "cache_bytes", lambda level: 256 * 1024)
    text = DENSE_GELU.format(m=m, k=k, n=n, out=out)
    exe = hlo_opt.compile(text)
    assert exe.stats["kernel_calls"] == 1
    [kernel] = exe.kernels.values()
    assert kernel.temps == []
    [phase] = split(kernel.comp, why_not, epilogues=True)
    assert (phase.root.opcode, phase.hero.opcode) == ("convert", "dot")
    worth = 2.0 * m * n * k / cpu_facts.GEMM_FLOPS_PER_WORK >= cpu_facts.PARALLEL_MIN_WORK
    assert kernel.parallel(4, cpu_facts.PARALLEL_MIN_WORK) == worth
    if worth and jit.has_openmp():
        assert kernel.extent > 1
    module = hlo_opt.parse(text)
    ours, want = run_both(module, random_inputs(module, seed=2))
    assert_outputs_match(ours, want, f"dense gelu {m}x{k}x{n} {out}")


EPILOGUE_CASES = {
    # a residual added after the activation: another input read at [m, n]
    "residual": ("""
  r = f32[64,48] parameter(2)
  t = f32[64,48] tanh(d)
  ROOT o = f32[64,48] add(t, r)""", [("add", "dot")]),
    # the product read at two positions per element: not an epilogue, stored first
    "transposed": ("""
  t = f32[48,64] transpose(d), dimensions={1,0}
  tt = f32[64,48] reshape(t)
  ROOT o = f32[64,48] add(d, tt)""", [("dot", "dot"), ("add", "add")]),
    # the product is itself a result: stored, and the loop reads it
    "also_a_result": ("""
  t = f32[64,48] tanh(d)
  ROOT o = (f32[64,48], f32[64,48]) tuple(d, t)""", [("dot", "dot"), ("tanh", "tanh")]),
}


# Epilogues over other contractions (the whole module written out, dot named d).
EPILOGUE_MODULES = {
    # two products added: one is the epilogue's GEMM, the other stored and read
    "two_dots": ("""
  x = f32[64,40] parameter(0)
  w = f32[40,48] parameter(1)
  v = f32[40,48] parameter(2)
  d1 = f32[64,48] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  d = f32[64,48] dot(x, v), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT o = f32[64,48] add(d1, d)""", [("dot", "dot"), ("add", "dot")]),
    # batch and two free dims a side: the bias is read at the output's coordinates
    "batched": ("""
  x = f32[3,5,7,40] parameter(0)
  w = f32[3,40,6,9] parameter(1)
  b = f32[7,9] parameter(2)
  d = f32[3,5,7,6,9] dot(x, w), lhs_batch_dims={0}, lhs_contracting_dims={3}, rhs_batch_dims={0}, rhs_contracting_dims={1}
  bb = f32[3,5,7,6,9] broadcast(b), dimensions={2,4}
  ROOT o = f32[3,5,7,6,9] multiply(d, bb)""", [("multiply", "dot")]),
    "f64": ("""
  x = f64[70,300] parameter(0)
  w = f64[300,50] parameter(1)
  d = f64[70,50] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT o = f64[70,50] exponential(d)""", [("exponential", "dot")]),
    # a bf16 product: rounded once to bf16, then the epilogue's tanh on it
    "bf16_product": ("""
  x = bf16[100,300] parameter(0)
  w = bf16[300,70] parameter(1)
  d = bf16[100,70] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT o = bf16[100,70] tanh(d)""", [("tanh", "dot")]),
    # an SGD update of a weight from its gradient x^T dy, transposed: the GEMM computes
    # dy^T x, so it writes the update in order (the bias read before the transpose)
    "sgd_update_transposed": ("""
  x = f32[37,70] parameter(0)
  dy = f32[37,50] parameter(1)
  w = f32[50,70] parameter(2)
  b = f32[50] parameter(3)
  d = f32[70,50] dot(x, dy), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  bb = f32[70,50] broadcast(b), dimensions={1}
  s = f32[70,50] multiply(d, bb)
  t = f32[50,70] transpose(s), dimensions={1,0}
  ROOT o = f32[50,70] subtract(w, t)""", [("subtract", "dot")]),
    # too small to pack, transposed: the plain loop writes the transposed product
    "small_transposed": ("""
  x = f32[3,4] parameter(0)
  w = f32[5,4] parameter(1)
  d = f32[3,5] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={1}
  t = f32[5,3] transpose(d), dimensions={1,0}
  ROOT o = f32[5,3] negate(t)""", [("negate", "dot")]),
    # the product read both in order and transposed: stored, then read by a loop
    "read_both_ways": ("""
  x = f32[48,40] parameter(0)
  w = f32[40,48] parameter(1)
  d = f32[48,48] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  t = f32[48,48] transpose(d), dimensions={1,0}
  ROOT o = f32[48,48] add(d, t)""", [("dot", "dot"), ("add", "add")]),
    # integers: the plain loop per element applies it
    "s32": ("""
  x = s32[20,30] parameter(0)
  w = s32[30,10] parameter(1)
  d = s32[20,10] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT o = s32[20,10] negate(d)""", [("negate", "dot")]),
}


@pytest.mark.parametrize("case", sorted(EPILOGUE_MODULES))
def test_epilogues_of_batched_wide_and_narrow_contractions(case):
    """(root, hero) of each phase, and the interpreter's answer."""
    from hlo_opt.lowering.fallback import why_not
    from hlo_opt.lowering.phases import split
    body, want_phases = EPILOGUE_MODULES[case]
    module = hlo_opt.parse(f"HloModule {case}\nENTRY e {{{body}\n}}\n")
    assert [(p.root.opcode, p.hero.opcode)
            for p in split(module.entry, why_not, epilogues=True)] == want_phases
    ours, want = run_both(module, random_inputs(module, seed=5))
    assert_outputs_match(ours, want, case)


@pytest.mark.parametrize("case", sorted(EPILOGUE_CASES))
def test_a_gemm_takes_the_loop_reading_its_product_at_its_own_position(case):
    """Which (root, hero) phases a dot and its consumers form: a consumer chain reading the
    product elementwise at its own position is the GEMM's epilogue; a consumer reading it
    elsewhere, or the product being stored anyway, leaves the GEMM a phase of its own.
    Either way the kernel computes what the interpreter does."""
    from hlo_opt.lowering.fallback import why_not
    from hlo_opt.lowering.phases import split
    body, want_phases = EPILOGUE_CASES[case]
    text = f"""HloModule {case}
ENTRY e {{
  x = f32[64,40] parameter(0)
  w = f32[40,48] parameter(1)
  d = f32[64,48] dot(x, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}{body}
}}
"""
    module = hlo_opt.parse(text)
    assert [(p.root.opcode, p.hero.opcode)
            for p in split(module.entry, why_not, epilogues=True)] == want_phases
    ours, want = run_both(module, random_inputs(module, seed=3))
    assert_outputs_match(ours, want, case)


@pytest.mark.parametrize("x, w, labels, out, feature, stored", [
    ("[2,12,12,8]", "[3,3,8,24]", "b01f_01io->b01f", "[2,12,12,24]", 3, "f32"),
    # features not minor: C is written with a stride; K = 3*3*32 spans three K blocks
    ("[2,32,10,10]", "[24,32,3,3]", "bf01_oi01->bf01", "[2,24,10,10]", 1, "f32"),
    ("[2,32,10,10]", "[24,32,3,3]", "bf01_oi01->bf01", "[2,24,10,10]", 1, "bf16"),
])
def test_a_convolution_applies_its_bias_and_relu_as_it_writes_its_tiles(x, w, labels, out,
                                                                        feature, stored,
                                                                        monkeypatch):
    """Convolutions are GEMMs too: bias, relu and a convert join their one phase. (A 256
    KiB L2 makes K blocks of 96.)"""
    from hlo_opt.lowering.fallback import why_not
    from hlo_opt.lowering.phases import split
    from hlo_opt.targets import cpu_facts
    monkeypatch.setattr(cpu_facts, "cache_bytes", lambda level: 256 * 1024)
    text = f"""HloModule conv_bias_relu
ENTRY e {{
  x = f32{x} parameter(0)
  w = f32{w} parameter(1)
  b = f32[24] parameter(2)
  c = f32{out} convolution(x, w), window={{size=3x3 pad=1_1x1_1}}, dim_labels={labels}
  bb = f32{out} broadcast(b), dimensions={{{feature}}}
  a = f32{out} add(c, bb)
  z = f32[] constant(0)
  zb = f32{out} broadcast(z), dimensions={{}}
  r = f32{out} maximum(a, zb)
  ROOT o = {stored}{out} convert(r)
}}
"""
    module = hlo_opt.parse(text)
    assert [(p.root.opcode, p.hero.opcode) for p in split(module.entry, why_not,
                                                           epilogues=True)] == \
        [("convert", "convolution")]
    ours, want = run_both(module, random_inputs(module, seed=4))
    assert_outputs_match(ours, want, f"conv bias relu {labels} {stored}")


@pytest.mark.parametrize("x, w, window, groups, out", [
    # base dilated: one GEMM per output phase, each finishing its own outputs
    ("[2,6,6,8]", "[3,3,8,24]", "size=3x3 pad=1_2x1_2 lhs_dilate=2x2", 1, "[2,12,12,24]"),
    # depthwise: no GEMM, the groups in vector lanes
    ("[2,12,12,24]", "[3,3,1,24]", "size=3x3 pad=1_1x1_1", 24, "[2,12,12,24]"),
])
def test_convolutions_that_are_not_one_gemm_apply_their_epilogue_too(x, w, window, groups,
                                                                       out):
    from hlo_opt.lowering.emit_conv import one_gemm
    from hlo_opt.lowering.fallback import why_not
    from hlo_opt.lowering.phases import split
    text = f"""HloModule conv_epilogue
ENTRY e {{
  x = f32{x} parameter(0)
  w = f32{w} parameter(1)
  b = f32[24] parameter(2)
  c = f32{out} convolution(x, w), window={{{window}}}, dim_labels=b01f_01io->b01f, feature_group_count={groups}
  bb = f32{out} broadcast(b), dimensions={{3}}
  a = f32{out} add(c, bb)
  z = f32[] constant(0)
  zb = f32{out} broadcast(z), dimensions={{}}
  r = f32{out} maximum(a, zb)
  ROOT o = bf16{out} convert(r)
}}
"""
    module = hlo_opt.parse(text)
    [conv] = [i for i in module.entry.instructions if i.opcode == "convolution"]
    assert not one_gemm(conv)
    assert [(p.root.opcode, p.hero.opcode) for p in split(module.entry, why_not,
                                                           epilogues=True)] == \
        [("convert", "convolution")]
    ours, want = run_both(module, random_inputs(module, seed=4))
    assert_outputs_match(ours, want, f"conv epilogue {window} groups {groups}")


# --- phases inside a kernel: what it stores, what its loops compute inline ------------------

def phases_of(text: str):
    """(the one kernel's KernelCode, its phases, its steps) of a module of one fusion."""
    from hlo_opt.lowering.emit_kernel import plan_steps
    exe = hlo_opt.compile(text)
    assert exe.stats["kernel_calls"] == 1
    [kernel] = exe.kernels.values()
    groups, steps, _ = plan_steps(kernel.comp)
    return kernel, groups, steps


def check_against_interpreter(text: str, label: str) -> None:
    module = hlo_opt.parse(text)
    ours, want = run_both(module, random_inputs(module, seed=3))
    assert_outputs_match(ours, want, label)


# An exact GELU's shape: the exponential and the reciprocal are each read by several
# elementwise ops (one of them twice), all at the loop's own index.
SHARED_EXPENSIVE = """HloModule shared_expensive
fused { x = f32[64,256] parameter(0)
 a = f32[64,256] abs(x)
 sq = f32[64,256] multiply(a, a)
 n = f32[64,256] negate(sq)
 e = f32[64,256] exponential(n)
 one = f32[] constant(1)
 ob = f32[64,256] broadcast(one), dimensions={}
 r = f32[64,256] divide(ob, a)
 t = f32[64,256] multiply(e, r)
 u = f32[64,256] add(r, r)
 v = f32[64,256] multiply(t, e)
 w = f32[64,256] subtract(u, v)
 ROOT o = f32[64,256] multiply(w, r) }
ENTRY e { x = f32[64,256] parameter(0)
 ROOT f = f32[64,256] fusion(x), kind=kLoop, calls=fused }
"""


def test_an_expensive_value_read_at_its_own_index_is_computed_once_in_the_loop():
    """The elemental generator computes a value once per index however many ops read it
    there: the exponential and the divide stay in the one loop, nothing is stored but the
    result."""
    kernel, groups, steps = phases_of(SHARED_EXPENSIVE)
    assert len(groups) == 1 and len(steps) == 1 and kernel.temps == []
    assert {"exponential", "divide"} <= {m.opcode for m in groups[0].members}
    assert kernel.extent > 1
    check_against_interpreter(SHARED_EXPENSIVE, "shared expensive values")


def test_an_expensive_value_read_through_a_broadcast_is_stored_first():
    """A per-row exponential that the loop would evaluate once per column is computed by a
    loop of its own, into a temporary the main loop reads."""
    text = """HloModule row_exp
fused { x = f32[64,256] parameter(0)
 y = f32[64] parameter(1)
 e = f32[64] exponential(y)
 b = f32[64,256] broadcast(e), dimensions={0}
 ROOT o = f32[64,256] add(x, b) }
ENTRY e { x = f32[64,256] parameter(0)
 y = f32[64] parameter(1)
 ROOT f = f32[64,256] fusion(x, y), kind=kLoop, calls=fused }
"""
    kernel, groups, _ = phases_of(text)
    assert [g.root.opcode for g in groups] == ["exponential", "add"]
    assert len(kernel.temps) == 1
    check_against_interpreter(text, "row exponential")


# Two results of one index space sharing a chain of integer bit mixing (threefry's shape).
SHARED_CHAIN = """HloModule shared_chain
fused { a = u32[64,256] parameter(0)
 b = u32[64,256] parameter(1)
 s = u32[64,256] add(a, b)
 k = u32[] constant(13)
 kb = u32[64,256] broadcast(k), dimensions={}
 l = u32[64,256] shift-left(b, kb)
 c = u32[] constant(19)
 cb = u32[64,256] broadcast(c), dimensions={}
 r = u32[64,256] shift-right-logical(b, cb)
 o = u32[64,256] or(l, r)
 x = u32[64,256] xor(s, o)
 y = u32[64,256] add(s, x)
 z = u32[64,256] xor(x, y)
 w = u32[64,256] add(z, s)
 ROOT t = (u32[64,256], u32[64,256]) tuple(y, w) }
ENTRY e { a = u32[64,256] parameter(0)
 b = u32[64,256] parameter(1)
 ROOT f = (u32[64,256], u32[64,256]) fusion(a, b), kind=kLoop, calls=fused }
"""


def test_results_of_one_loop_share_their_producers_without_storing_them():
    """Both results are stored by one loop, which computes the chain they share once per
    index: two phases, one step, no temporary."""
    kernel, groups, steps = phases_of(SHARED_CHAIN)
    assert [g.root.name for g in groups] == ["y", "w"] and len(steps) == 1
    assert kernel.temps == []
    check_against_interpreter(SHARED_CHAIN, "shared chain")


def test_a_result_another_result_reads_is_computed_in_both_loops():
    """y is a result and an operand of w: the loop storing w computes it (and the
    exponential under it) inline, in the same loop as y's, rather than reading it back."""
    text = """HloModule result_read
fused { x = f32[64,256] parameter(0)
 e = f32[64,256] exponential(x)
 one = f32[] constant(1)
 ob = f32[64,256] broadcast(one), dimensions={}
 y = f32[64,256] add(e, ob)
 w = f32[64,256] multiply(y, e)
 ROOT t = (f32[64,256], f32[64,256]) tuple(y, w) }
ENTRY e { x = f32[64,256] parameter(0)
 ROOT f = (f32[64,256], f32[64,256]) fusion(x), kind=kLoop, calls=fused }
"""
    kernel, groups, steps = phases_of(text)
    assert [g.root.name for g in groups] == ["y", "w"] and len(steps) == 1
    assert all("e" in {m.name for m in g.members} for g in groups)
    assert kernel.temps == []
    check_against_interpreter(text, "a result read by another")


def test_scalar_results_of_a_multi_output_fusion_share_one_step():
    """threefry's key setup: two scalar results, one computed from the other, and a large
    one reading both through broadcasts. The scalar loop computes what it needs inline, so
    the scalars are one step, not one each; the large loop reads them from memory."""
    from hlo_opt.lowering.emit_kernel import plan_steps
    text = """HloModule key_setup
fused { k = u32[2] parameter(0)
 k0 = u32[1] slice(k), slice={[0:1]}
 s = u32[] reshape(k0)
 c = u32[] constant(466688986)
 x = u32[] xor(s, c)
 i = u32[64,256] iota(), iota_dimension=1
 sb = u32[64,256] broadcast(s), dimensions={}
 xb = u32[64,256] broadcast(x), dimensions={}
 a = u32[64,256] add(i, sb)
 big = u32[64,256] xor(a, xb)
 ROOT t = (u32[], u32[], u32[64,256]) tuple(s, x, big) }
ENTRY e { k = u32[2] parameter(0)
 ROOT f = (u32[], u32[], u32[64,256]) fusion(k), kind=kLoop, calls=fused }
"""
    [kernel] = hlo_opt.compile(text).kernels.values()
    _, steps, _ = plan_steps(kernel.comp)
    assert [[g.root.name for g in step] for step in steps] == [["s", "x"], ["big"]]
    check_against_interpreter(text, "key setup")


# A softmax's middle kernel (what the fusion stage forms): the exponential is a result and
# the input of the row sum, through a convert for bf16.
EXP_AND_SUM = """HloModule exp_and_sum
add {{ a = f32[] parameter(0)
 b = f32[] parameter(1)
 ROOT r = f32[] add(a, b) }}
fused {{ m = bf16[{rows}] parameter(0)
 x = bf16[{rows},{cols}] parameter(1)
 mb = bf16[{rows},{cols}] broadcast(m), dimensions={{0}}
 d = bf16[{rows},{cols}] subtract(x, mb)
 e = bf16[{rows},{cols}] exponential(d)
 c = f32[{rows},{cols}] convert(e)
 z = f32[] constant(0)
 s = f32[{out}] reduce(c, z), dimensions={{{dim}}}, to_apply=add
 ROOT t = (bf16[{rows},{cols}], f32[{out}]) tuple(e, s) }}
ENTRY e {{ m = bf16[{rows}] parameter(0)
 x = bf16[{rows},{cols}] parameter(1)
 ROOT f = (bf16[{rows},{cols}], f32[{out}]) fusion(m, x), kind=kInput, calls=fused }}
"""


@pytest.mark.parametrize("dim", [1, 0])
def test_a_reduce_stores_its_input_as_it_reads_it(dim):
    """The exponential is stored by the reduce's phase where the reduce reads it (rows, or
    column tiles): one pass over the input, no loop writing it first."""
    rows, cols = 48, 96
    text = EXP_AND_SUM.format(rows=rows, cols=cols, dim=dim, out=cols if dim == 0 else rows)
    kernel, groups, steps = phases_of(text)
    [phase] = groups
    assert phase.root.opcode == "reduce" and [t.name for t in phase.tees] == ["e"]
    assert len(steps) == 1 and kernel.temps == []
    check_against_interpreter(text, f"exp and sum over dimension {dim}")


MEAN_AND_VARIANCE = """HloModule mean_and_variance
add {{ a = f32[] parameter(0)
 b = f32[] parameter(1)
 ROOT r = f32[] add(a, b) }}
fused {{ x = f32[{rows},{cols}] parameter(0)
 mean = f32[{rows}] parameter(1)
 z = f32[] constant(0)
 s = f32[{rows}] reduce(x, z), dimensions={{1}}, to_apply=add
 n = f32[] constant({cols})
 nb = f32[{rows}] broadcast(n), dimensions={{}}
 m = f32[{rows}] divide(mean, nb)
 mb = f32[{rows},{cols}] broadcast(m), dimensions={{0}}
 d = f32[{rows},{cols}] subtract(x, mb)
 q = f32[{rows},{cols}] multiply(d, d)
 v = f32[{rows}] reduce(q, z), dimensions={{1}}, to_apply=add
 ROOT t = (f32[{rows}], f32[{rows}]) tuple(s, v) }}
ENTRY e {{ x = f32[{rows},{cols}] parameter(0)
 mean = f32[{rows}] parameter(1)
 ROOT f = (f32[{rows}], f32[{rows}]) fusion(x, mean), kind=kInput, calls=fused }}
"""


def test_sibling_reductions_run_in_one_loop_nest():
    """Two row sums of one input are one step (the per-row divide they do not share runs
    first), reading each row once."""
    from hlo_opt.lowering.emit_kernel import plan_steps
    text = MEAN_AND_VARIANCE.format(rows=40, cols=72)
    [kernel] = hlo_opt.compile(text).kernels.values()
    _, steps, _ = plan_steps(kernel.comp)
    assert [[g.root.name for g in step] for step in steps] == [["m"], ["s", "v"]]
    check_against_interpreter(text, "mean and variance")


def test_a_multi_output_reduction_kernel_is_threaded():
    """Sibling row sums (over the same dimensions, one of them of a fused square) are one
    loop over the rows, which the kernel splits across threads."""
    from hlo_opt.targets import cpu_facts
    text = """HloModule sums
add { a = f32[] parameter(0)
 b = f32[] parameter(1)
 ROOT r = f32[] add(a, b) }
fused { x = f32[512,1024] parameter(0)
 z = f32[] constant(0)
 s = f32[512] reduce(x, z), dimensions={1}, to_apply=add
 q = f32[512,1024] multiply(x, x)
 v = f32[512] reduce(q, z), dimensions={1}, to_apply=add
 ROOT t = (f32[512], f32[512]) tuple(s, v) }
ENTRY e { x = f32[512,1024] parameter(0)
 ROOT f = (f32[512], f32[512]) fusion(x), kind=kInput, calls=fused }
"""
    kernel, groups, steps = phases_of(text)
    assert len(groups) == 2 and len(steps) == 1
    assert kernel.extent == 512 and kernel.work >= cpu_facts.PARALLEL_MIN_WORK
    check_against_interpreter(text, "sibling sums")


def test_a_reduce_over_one_element_stores_its_tee():
    """The reduce's loop over a dimension of 1 has a constant index: the tee it stores
    (the negation, also a result) is written there."""
    text = """HloModule m
mx { a = f32[] parameter(0)
 b = f32[] parameter(1)
 ROOT r = f32[] maximum(a, b) }
ENTRY e { p0 = f32[1] parameter(0)
 init = f32[] constant(-inf)
 n = f32[1] negate(p0)
 total = f32[] reduce(n, init), dimensions={0}, to_apply=mx
 ROOT root = (f32[1], f32[]) tuple(n, total) }
"""
    check_against_interpreter(text, "tee of a one-element reduce")


# An optimizer's update of a weight from a gradient the backward dot produced transposed:
# the loop over the weight's rows reads the gradient down its columns. Sizes that are not
# multiples of a tile, two results (Adam's shape: new weight and new moment).
def transposed_update(rows: int, cols: int) -> str:
    return f"""HloModule transposed_update
fused {{ w = f32[{rows},{cols}] parameter(0)
 g = f32[{cols},{rows}] parameter(1)
 m = f32[{rows},{cols}] parameter(2)
 t = f32[{rows},{cols}] transpose(g), dimensions={{1,0}}
 c = f32[] constant(0.1)
 cb = f32[{rows},{cols}] broadcast(c), dimensions={{}}
 n = f32[{rows},{cols}] add(m, t)
 s = f32[{rows},{cols}] multiply(n, cb)
 u = f32[{rows},{cols}] subtract(w, s)
 ROOT r = (f32[{rows},{cols}], f32[{rows},{cols}]) tuple(u, n) }}
ENTRY e {{ w = f32[{rows},{cols}] parameter(0)
 g = f32[{cols},{rows}] parameter(1)
 m = f32[{rows},{cols}] parameter(2)
 ROOT f = (f32[{rows},{cols}], f32[{rows},{cols}]) fusion(w, g, m), kind=kLoop, calls=fused }}
"""


def _loop_names(text: str) -> str:
    from hlo_opt.lowering import emit_llvm
    return emit_llvm(hlo_opt.parse(text), optimized=False)


@pytest.mark.parametrize("rows,cols", [(100, 130), (37, 1000), (256, 200), (1, 300)])
def test_a_loop_reading_an_operand_transposed_walks_tiles(rows, cols):
    """Reading the gradient down its columns row after row would touch a new cache line per
    element; the loop goes tile by tile (rows blocks, column blocks) instead, still one
    threaded phase over rows and equal to the interpreter at ragged edges."""
    text = transposed_update(rows, cols)
    kernel, groups, steps = phases_of(text)
    assert len(steps) == 1 and kernel.temps == [] and kernel.extent == rows
    assert "cols.body" in _loop_names(text)
    check_against_interpreter(text, f"transposed update {rows}x{cols}")


def test_a_loop_reading_every_operand_along_its_rows_is_not_tiled():
    text = transposed_update(100, 130).replace("transpose(g), dimensions={1,0}",
                                               "transpose(g), dimensions={0,1}")
    text = text.replace("g = f32[130,100]", "g = f32[100,130]")
    assert "cols.body" not in _loop_names(text)
    check_against_interpreter(text, "untransposed update")


# --- row passes: one loop over blocks of rows runs every step -------------------------------

# Row-local chains as JAX writes them, unfused: each reads its rows three times (statistics,
# then the values that use them). {t} is the element type (the sums accumulate in f32, as
# JAX converts them), [{r},{c}] the rows and row length.
EXP_SUM = """
  lo = {t}[] constant(-inf)
  m = {t}[{r}] reduce(x, lo), dimensions={{1}}, to_apply=maximum_{t}
  mb = {t}[{r},{c}] broadcast(m), dimensions={{0}}
  d = {t}[{r},{c}] subtract(x, mb)
  e = {t}[{r},{c}] exponential(d)
  ea = f32[{r},{c}] convert(e)
  z = f32[] constant(0)
  s = f32[{r}] reduce(ea, z), dimensions={{1}}, to_apply=add_f32"""
ROW_CHAINS = {
    "softmax": EXP_SUM + """
  st = {t}[{r}] convert(s)
  sb = {t}[{r},{c}] broadcast(st), dimensions={{0}}
  ROOT y = {t}[{r},{c}] divide(e, sb)""",
    "log_softmax": EXP_SUM + """
  l = f32[{r}] log(s)
  lt = {t}[{r}] convert(l)
  lb = {t}[{r},{c}] broadcast(lt), dimensions={{0}}
  ROOT y = {t}[{r},{c}] subtract(d, lb)""",
    "layernorm": """
  g = {t}[{c}] parameter(1)
  xa = f32[{r},{c}] convert(x)
  z = f32[] constant(0)
  n = f32[{r}] broadcast(f32[] constant({c})), dimensions={{}}
  s = f32[{r}] reduce(xa, z), dimensions={{1}}, to_apply=add_f32
  mean = f32[{r}] divide(s, n)
  mb = f32[{r},{c}] broadcast(mean), dimensions={{0}}
  d = f32[{r},{c}] subtract(xa, mb)
  q = f32[{r},{c}] multiply(d, d)
  v = f32[{r}] reduce(q, z), dimensions={{1}}, to_apply=add_f32
  var = f32[{r}] divide(v, n)
  eps = f32[{r}] broadcast(f32[] constant(1e-05)), dimensions={{}}
  ri = f32[{r}] rsqrt(f32[{r}] add(var, eps))
  rb = f32[{r},{c}] broadcast(ri), dimensions={{0}}
  gb = f32[{r},{c}] broadcast(f32[{c}] convert(g)), dimensions={{1}}
  ROOT y = {t}[{r},{c}] convert(f32[{r},{c}] multiply(f32[{r},{c}] multiply(d, rb), gb))""",
    "rmsnorm": """
  g = {t}[{c}] parameter(1)
  xa = f32[{r},{c}] convert(x)
  q = f32[{r},{c}] multiply(xa, xa)
  z = f32[] constant(0)
  s = f32[{r}] reduce(q, z), dimensions={{1}}, to_apply=add_f32
  n = f32[{r}] broadcast(f32[] constant({c})), dimensions={{}}
  eps = f32[{r}] broadcast(f32[] constant(1e-06)), dimensions={{}}
  ri = f32[{r}] rsqrt(f32[{r}] add(f32[{r}] divide(s, n), eps))
  rb = f32[{r},{c}] broadcast(ri), dimensions={{0}}
  gb = f32[{r},{c}] broadcast(f32[{c}] convert(g)), dimensions={{1}}
  ROOT y = {t}[{r},{c}] convert(f32[{r},{c}] multiply(f32[{r},{c}] multiply(xa, rb), gb))""",
}


def row_chain(name: str, t: str, r: int, c: int) -> str:
    """ROW_CHAINS[name] as a module of element type t over [r, c]."""
    reducers = "".join(f"""{op}_{ty} {{ a = {ty}[] parameter(0)
 b = {ty}[] parameter(1)
 ROOT o = {ty}[] {op}(a, b) }}
""" for op, ty in sorted({("maximum", t), ("add", "f32")}))
    body = ROW_CHAINS[name].format(t=t, r=r, c=c)
    return f"HloModule {name}\n{reducers}ENTRY main {{\n  x = {t}[{r},{c}] parameter(0){body}\n}}\n"


def the_kernel(text: str):
    """The one kernel a module compiles to, and how it runs row by row (None if not)."""
    exe = hlo_opt.compile(text)
    assert exe.stats["kernel_calls"] == 1, exe.stats
    [kernel] = exe.kernels.values()
    return kernel, kernel_row_pass(kernel.comp)


@pytest.mark.parametrize("name", sorted(ROW_CHAINS))
@pytest.mark.parametrize("t, r, c, threaded", [
    ("f32", 67, 333, False),    # odd rows (the last block cut short), an odd row length
    ("bf16", 40, 1000, False),  # long rows, few to a block
    ("f32", 300, 1000, True),   # split across threads in chunks of rows cutting blocks
])
def test_a_row_local_chain_is_one_kernel_reading_each_row_once(name, t, r, c, threaded):
    """A softmax, log-softmax, layer norm or RMS norm is one kernel looping over blocks of
    rows: each step (the statistics, then the values using them) runs on the block while it
    is in the cache. Its temporaries (the per-row statistics, a value stored for several
    steps) hold one block's rows on the stack; no buffer of them goes through memory."""
    text = row_chain(name, t, r, c)
    kernel, rows = the_kernel(text)
    assert rows is not None and rows.rows == r and set(rows.per_row) <= {1, c}
    assert kernel.temps == [] and kernel.extent == r
    assert 1 <= rows.block < r
    assert kernel.parallel(2, cpu_facts.PARALLEL_MIN_WORK) == threaded
    for nbytes, per_row in rows.windows.values():
        assert per_row in (1, c) and nbytes <= rows.block * per_row * 4
    check_against_interpreter(text, f"{name} {t}[{r},{c}]")


def test_rows_too_long_for_the_cache_run_step_by_step():
    """Rows of 96 KiB (the input, the output and the stored exponentials: about 300 KiB a
    row) would fall out of the cache between steps: the kernel runs its steps one after
    the other instead, each over every row."""
    from hlo_opt.fusion.stage import fuse
    from hlo_opt.lowering import row_pass
    text = row_chain("softmax", "f32", 16, 24576)
    [fusion] = [i for i in fuse(hlo_opt.parse(text)).entry.instructions
                if i.opcode == "fusion"]
    assert 3 * 24576 * 4 > row_pass.MAX_ROW_BYTES
    assert kernel_row_pass(fusion.attrs["calls"]) is None
    assert hlo_opt.compile(text).stats["kernel_calls"] > 1     # each step threaded alone
    check_against_interpreter(text, "softmax of long rows")


def test_a_reduction_over_a_middle_dimension_runs_row_by_row():
    """x - mean over the middle dimension of [b, k, m]: a row is one b, its k x m elements;
    the reduce folds it in column tiles, the subtract reads its mean back from the window."""
    text = "HloModule centre\n" + ADD + """
ENTRY main { x = f32[24,33,40] parameter(0)
 z = f32[] constant(0)
 s = f32[24,40] reduce(x, z), dimensions={1}, to_apply=add
 n = f32[24,40] broadcast(f32[] constant(33)), dimensions={}
 m = f32[24,40] divide(s, n)
 mb = f32[24,33,40] broadcast(m), dimensions={0,2}
 ROOT y = f32[24,33,40] subtract(x, mb) }
"""
    kernel, rows = the_kernel(text)
    assert rows is not None and rows.rows == 24 and kernel.temps == []
    check_against_interpreter(text, "centred over the middle dimension")


def test_a_step_reading_another_row_of_a_result_runs_whole():
    """A loop that reads the row sums reversed needs every row's sum first: the kernel runs
    its steps one after the other over all rows, storing the sums."""
    text = "HloModule reversed\n" + ADD + """
fused { x = f32[64,96] parameter(0)
 z = f32[] constant(0)
 s = f32[64] reduce(x, z), dimensions={1}, to_apply=add
 v = f32[64] reverse(s), dimensions={0}
 vb = f32[64,96] broadcast(v), dimensions={0}
 ROOT y = f32[64,96] subtract(x, vb) }
ENTRY main { x = f32[64,96] parameter(0)
 ROOT f = f32[64,96] fusion(x), kind=kInput, calls=fused }
"""
    kernel, rows = the_kernel(text)
    assert rows is None and len(kernel.temps) == 1
    check_against_interpreter(text, "row sums read reversed")
