"""The TPU cost model (targets/tpu.py, tpu_kernels.py, tpu_generations.py): MXU passes and
their utilization, padding, VMEM refusal, the decisions it changes, and `hlo-opt
--target=tpu --stats/--report/--tpu-gen`. Every expected number is derived in a comment
from the generation's figures: v5e 197 TFLOP/s bf16 (197000 flops/ns), 819 GB/s, 128x128
MXUs, 128 MiB VMEM; v6e 256x256 MXUs; v4 16 MiB VMEM; 500 ns per kernel.
"""
from __future__ import annotations

import json

import pytest

import hlo_opt
from hlo_opt.kernels import kernel_report
from hlo_opt.targets import cost_model
from hlo_opt.targets.tpu import TpuCostModel
from hlo_opt.targets.tpu_generations import generation
from hlo_opt.targets.tpu_kernels import mxu_use
from hlo_opt.targets.tpu_report import tpu_report
from hlo_opt.tools.hlo_opt_cli import main

MiB = 1 << 20


def dot_module(m: int, k: int, n: int, dtype: str = "bf16", precision: str = "") -> str:
    attr = f", operand_precision={{{precision},{precision}}}" if precision else ""
    return f"""HloModule dot
ENTRY main {{
  a = {dtype}[{m},{k}] parameter(0)
  b = {dtype}[{k},{n}] parameter(1)
  ROOT d = {dtype}[{m},{n}] dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}{attr}
}}
"""


def root(text: str):
    return hlo_opt.parse(text).entry.root


def mxu(gen: str, m: int, k: int, n: int):
    d = root(dot_module(m, k, n))
    return mxu_use(generation(gen), d.opcode, d.shape, d.attrs, [o.shape for o in d.operands])


# passes = ceil(M/s) * ceil(K/s) * ceil(N/s); utilization = M*K*N / (passes * s^3)
@pytest.mark.parametrize("gen, mkn, passes, utilization", [
    ("v5e", (128, 128, 128), 1, 1.0),                           # one full 128^3 pass
    ("v5e", (100, 100, 100), 1, 100 ** 3 / 128 ** 3),           # 0.4768: 28/128 idle per dim
    ("v5e", (8, 4096, 8), 32, 8 * 4096 * 8 / (32 * 128 ** 3)),  # K in 32 passes: 1/256
    ("v5e", (1024, 1024, 1024), 512, 1.0),                      # 8 * 8 * 8 full passes
    ("v6e", (128, 128, 128), 1, 128 ** 3 / 256 ** 3),           # 1/8 of a 256^3 pass
    ("v6e", (100, 100, 100), 1, 100 ** 3 / 256 ** 3),           # 0.0596
    ("v6e", (8, 4096, 8), 16, 8 * 4096 * 8 / (16 * 256 ** 3)),  # K in 16 passes: 1/1024
    ("v6e", (1024, 1024, 1024), 64, 1.0),                       # 4 * 4 * 4 full passes
])
def test_mxu_passes_and_utilization(gen, mkn, passes, utilization):
    use = mxu(gen, *mkn)
    assert use.passes == passes
    assert use.utilization(generation(gen).mxu_size) == pytest.approx(utilization)


def test_a_large_bf16_dot_is_compute_bound_at_whole_passes():
    # 512 passes * 2 * 128^3 flops = 2,147,483,648 flops / 197000 per ns = 10900.9 ns;
    # HBM: 3 arrays * 1024 * 1024 * 2 bytes = 6,291,456 / 819 per ns = 7681.8 ns.
    model = TpuCostModel("v5e")
    d = root(dot_module(1024, 1024, 1024))
    work = model.member_work(d)
    split = model.time_split(work, 2 * 2 * MiB, 2 * MiB)
    assert split.compute == pytest.approx(2 ** 31 / 197000)
    assert split.memory == pytest.approx(6 * MiB / 819)
    assert split.bound == "compute"
    assert split.total == pytest.approx(500 + 2 ** 31 / 197000)


def test_an_f32_dot_runs_its_precisions_number_of_bf16_passes():
    # One 128^3 pass: 4,194,304 flops at DEFAULT; HIGH 3 passes; HIGHEST 6 (bf16_6x).
    model = TpuCostModel("v5e")
    flops = {p: model.member_work(root(dot_module(128, 128, 128, "f32", p))).matrix_flops
             for p in ("", "high", "highest")}
    assert flops == {"": 2 * 128 ** 3, "high": 3 * 2 * 128 ** 3, "highest": 6 * 2 * 128 ** 3}


def elementwise(dims: str) -> str:
    return f"""HloModule e
ENTRY main {{
  a = f32[{dims}] parameter(0)
  b = f32[{dims}] parameter(1)
  ROOT s = f32[{dims}] add(a, b)
}}
"""


def node_cost(model, text: str) -> float:
    r = root(text)
    return model.node_cost(r.opcode, r.shape, r.attrs, [o.shape for o in r.operands])


def test_padding_makes_f32_8x129_cost_like_8x256():
    # f32[8,129] is stored in (8,128) tiles: 8 x 256 elements, 8192 bytes per array; the add
    # moves 3 * 8192 bytes and adds 2048 lanes, as f32[8,256] does. On the CPU it is cheaper.
    tpu, cpu = cost_model("tpu"), cost_model("cpu")
    assert tpu.value_bytes(root(elementwise("8,129"))) == 8 * 256 * 4
    assert node_cost(tpu, elementwise("8,129")) == node_cost(tpu, elementwise("8,256"))
    assert node_cost(cpu, elementwise("8,129")) < node_cost(cpu, elementwise("8,256"))


# (a + b) * c over f32[8,N]: each member holds three blocks of 8 rows x N lanes (its two
# operands and its result), 32*N bytes each; the kernel holds them twice (double-buffered).
CHAIN = """HloModule chain
ENTRY main {{
  a = f32[8,{n}] parameter(0)
  b = f32[8,{n}] parameter(1)
  c = f32[8,{n}] parameter(2)
  ab = f32[8,{n}] add(a, b)
  ROOT m = f32[8,{n}] multiply(ab, c)
}}
"""


def test_vmem_footprint_and_fit():
    # N = 65536: a block is 8 * 65536 * 4 = 2 MiB; one op 2 * 3 * 2 = 12 MiB, both 24 MiB.
    # v4 holds 16 MiB per TensorCore: one op fits, the two fused do not; v5e (128 MiB) both.
    module = hlo_opt.parse(CHAIN.format(n=65536))
    add, mul = module.entry.instructions[-2:]
    for gen, fits_fused in (("v4", False), ("v5e", True)):
        model = TpuCostModel(gen)
        one, both = model.member_work(add), model.member_work(add) + model.member_work(mul)
        assert model.vmem_footprint(one) == 12 * MiB and model.vmem_footprint(both) == 24 * MiB
        assert model.fits(one) and model.fits(both) == fits_fused


def test_fusion_past_vmem_is_refused_on_v4_and_made_on_v5e():
    text = CHAIN.format(n=65536)
    v4 = hlo_opt.optimize(hlo_opt.parse(text), target="tpu", tpu_gen="v4")
    v5e = hlo_opt.optimize(hlo_opt.parse(text), target="tpu", tpu_gen="v5e")
    assert kernel_report(v4).kernels == 2 and kernel_report(v4).fusions == 0
    assert kernel_report(v5e).kernels == 1 and kernel_report(v5e).fusions == 1


# Two independent parts. Part 1, a transpose of the minor dimension feeding an add over
# f32[1024,1024]: the GPU model charges the fused transpose's strided reads 8x (uncoalesced,
# 7 * 4 MiB extra = 29,360,128 bytes at 3350 B/ns = 8.8 us, more than fusing saves: the
# 8 MiB round trip of the transpose's result, 2.5 us, and one 1 us launch), so it stays a
# kernel of its own; the CPU and the TPU fuse it (no such charge; fusing saves writing and
# re-reading 4 MiB).
# Part 2, (a + b) * c over f32[8,524288]: a block is 8 * 524288 * 4 = 16 MiB; each op alone
# holds 2 * 3 * 16 = 96 MiB <= 128 MiB of v5e's VMEM, the two fused 192 MiB > 128 MiB, so the
# TPU keeps two kernels; the CPU and the GPU (no VMEM) fuse them.
DISAGREE = """HloModule disagree
ENTRY main {
  x = f32[1024,1024] parameter(0)
  y = f32[1024,1024] parameter(1)
  t = f32[1024,1024] transpose(x), dimensions={1,0}
  s = f32[1024,1024] add(t, y)
  a = f32[8,524288] parameter(2)
  b = f32[8,524288] parameter(3)
  c = f32[8,524288] parameter(4)
  ab = f32[8,524288] add(a, b)
  m = f32[8,524288] multiply(ab, c)
  ROOT r = (f32[1024,1024], f32[8,524288]) tuple(s, m)
}
"""


def kernels(module) -> list[list[str]]:
    """The opcodes each kernel of the entry computes, in order."""
    out = []
    for i in module.entry.instructions:
        if i.opcode == "fusion":
            out.append([j.opcode for j in i.attrs["calls"].instructions
                        if j.opcode not in ("parameter", "tuple")])
        elif i.opcode not in ("parameter", "tuple"):
            out.append([i.opcode])
    return out


def test_the_targets_disagree():
    picked = {t: kernels(hlo_opt.optimize(hlo_opt.parse(DISAGREE), target=t))
              for t in ("cpu", "gpu", "tpu")}
    assert picked["cpu"] == [["transpose", "add"], ["add", "multiply"]]
    assert picked["gpu"] == [["transpose"], ["add"], ["add", "multiply"]]
    assert picked["tpu"] == [["transpose", "add"], ["add"], ["multiply"]]


def test_the_v5e_clock_derived_from_its_peak_is_the_published_one():
    # 197e12 / (2 flops * 4 MXUs * 128^2) = 1.503 GHz; the scaling book gives 1.5 GHz.
    assert generation("v5e").clock_ghz == pytest.approx(1.5, rel=0.01)


def test_unknown_generations_are_named():
    with pytest.raises(KeyError, match="unknown TPU generation 'v7'.*v4, v5e, v5p, v6e"):
        cost_model("tpu", "v7")


ATTENTION = """HloModule attn
ENTRY main {
  q = bf16[256,100] parameter(0)
  k = bf16[100,256] parameter(1)
  s = bf16[256,256] dot(q, k), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT e = bf16[256,256] exponential(s)
}
"""


def test_stats_prints_the_per_kernel_table_and_report_writes_it_as_json(tmp_path, capsys):
    src, report = tmp_path / "in.hlo", tmp_path / "r.json"
    src.write_text(ATTENTION)
    assert main([str(src), "--target=tpu", "--tpu-gen=v6e", "--stats", "-o",
                 str(tmp_path / "out.hlo"), f"--report={report}"]) == 0
    err = capsys.readouterr().err
    header = next(line for line in err.splitlines() if line.startswith("kernel "))
    assert header.split() == ["kernel", "layouts", "pad%", "MXU%", "VMEM", "bound", "est", "us"]
    assert "total (v6e): 1 kernels" in err
    data = json.loads(report.read_text())
    assert data["generation"] == "v6e" and data["vmem_capacity_bytes"] == 128 * MiB
    [k] = data["kernels"]
    # One 256^3 pass on v6e: K = 100 of 256 rows used, M and N full: 100/256 = 39.1%.
    assert k["mxu_passes"] == 1 and k["mxu_utilization"] == pytest.approx(100 / 256)
    assert k["layouts"] == "bf16[256,256]{1,0:T(8,128)(2,1)}"
    assert data["totals"]["time_us"] == pytest.approx(k["time_us"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.hlo", "out.hlo", "r.json"]


@pytest.mark.parametrize("args, message", [
    (["--target=tpu", "--tpu-gen=v7"],
     "hlo-opt: --tpu-gen: unknown TPU generation 'v7' (known: v4, v5e, v5p, v6e)"),
    (["--tpu-gen=v6e"], "hlo-opt: --tpu-gen and --report need --target=tpu"),
    (["--target=gpu", "--report=r.json"], "hlo-opt: --tpu-gen and --report need --target=tpu"),
])
def test_bad_tpu_options_are_one_line_errors(tmp_path, capsys, args, message):
    src = tmp_path / "in.hlo"
    src.write_text(ATTENTION)
    assert main([str(src), *args]) == 2
    assert capsys.readouterr().err == message + "\n"


def test_member_work_counts_padding_in_vector_work():
    # f32[8,129] add: 8 * 256 = 2048 lanes computed, not 8 * 129 = 1032.
    model = TpuCostModel()
    assert model.member_work(root(elementwise("8,129"))).vector_flops == 2048


def test_the_report_shows_padded_dims_and_padding_share():
    # One add over f32[8,129]: 3 arrays of 8 x 256 stored elements for 8 x 129 used, so
    # 1 - 129/256 = 49.6% of the bytes moved are padding; 24,576 bytes at 819 B/ns = 30 ns,
    # 2048 adds at 3078 per ns = 0.67 ns: the 500 ns overhead bounds it.
    [k] = tpu_report(hlo_opt.parse(elementwise("8,129")), TpuCostModel("v5e")).kernels
    assert k.layouts == "f32[8,129]{1,0:T(8,128)}->[8,256]"
    assert k.hbm_bytes == 3 * 8 * 256 * 4 and k.padding == pytest.approx(1 - 129 / 256)
    assert k.bound == "overhead" and k.mxu_utilization is None


def test_report_alone_writes_json_and_prints_no_table(tmp_path, capsys):
    src, report = tmp_path / "in.hlo", tmp_path / "r.json"
    src.write_text(elementwise("8,129"))
    assert main([str(src), "--target=tpu", f"--report={report}", "-o", "-"]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and "HloModule" in captured.out
    assert json.loads(report.read_text())["generation"] == "v5e"


CONV = """HloModule conv
ENTRY main {
  x = bf16[1,8,8,64] parameter(0)
  w = bf16[3,3,64,128] parameter(1)
  ROOT c = bf16[1,8,8,128] convolution(x, w), window={size=3x3 pad=1_1x1_1},
      dim_labels=b01f_01io->b01f
}
"""


def test_a_convolution_is_priced_as_its_gemm():
    # M = 1*8*8 output pixels, K = 64 features * 9 taps = 576, N = 128 output features:
    # 1 * ceil(576/128) * 1 = 5 passes on v5e, using 64*576*128 / (5 * 128^3) = 45%.
    c = root(CONV)
    use = mxu_use(generation("v5e"), c.opcode, c.shape, c.attrs, [o.shape for o in c.operands])
    assert use.passes == 5
    assert use.utilization(128) == pytest.approx(64 * 576 * 128 / (5 * 128 ** 3))


def test_a_reshape_splitting_the_minor_dim_is_free_on_cpu_and_a_copy_on_tpu():
    # f32[8,256] -> f32[8,2,128] relabels a row-major buffer on the CPU and GPU (a view,
    # 1 ns of bookkeeping), but the TPU tiles the two differently (tpu_tiles.memory_image):
    # a copy kernel, 500 ns + (8*256*4 read + 2*128*8*4 written = 16384 B) / 819 B/ns.
    split = root("""HloModule m
ENTRY e {
  p = f32[8,256] parameter(0)
  ROOT r = f32[8,2,128] reshape(p)
}
""")
    operands = [o.shape for o in split.operands]
    cpu, gpu, tpu = (cost_model(t).node_cost("reshape", split.shape, {}, operands)
                     for t in ("cpu", "gpu", "tpu"))
    assert cpu == gpu == 1.0
    assert tpu == pytest.approx(500 + 16384 / 819)
    assert TpuCostModel().runs_as_kernel(split)
    # Merging major dims of whole tiles (f32[2,8,256] -> [16,256]) is free on TPU too.
    merge = root("""HloModule m
ENTRY e {
  p = f32[2,8,256] parameter(0)
  ROOT r = f32[16,256] reshape(p)
}
""")
    assert cost_model("tpu").node_cost("reshape", merge.shape, {},
                                       [merge.operands[0].shape]) == 1.0
    assert not TpuCostModel().runs_as_kernel(merge)


def conv(lhs: str, rhs: str, out: str, attrs: str):
    return root(f"""HloModule conv
ENTRY main {{
  x = {lhs} parameter(0)
  w = {rhs} parameter(1)
  ROOT c = {out} convolution(x, w), {attrs}
}}
""")


def conv_flops(c, gen: str = "v5e"):
    return TpuCostModel(gen).op_flops(c.opcode, c.shape, c.attrs, [o.shape for o in c.operands])


def test_a_depthwise_convolution_runs_on_the_vector_units():
    # 128 groups of one input feature: each output element is 9 taps of multiply-adds,
    # no MXU. Output f32[1,8,8,128] pads to nothing (8 rows, 128 lanes): 8192 elements,
    # 2 * 9 * 8192 = 147456 vector flops; at v5e's 128 lanes x 8 sublanes x 2 ALUs x
    # 1.503 GHz (197 TFLOP/s / (2 x 4 MXUs x 128^2)) = 3078 flops/ns that is 47.9 ns. As
    # 128 one-feature GEMMs it was 128 MXU passes at 64*9*1 / 128^3 = 0.03% each.
    c = conv("f32[1,8,8,128]", "f32[3,3,1,128]", "f32[1,8,8,128]",
             "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, "
             "feature_group_count=128")
    assert mxu_use(generation("v5e"), c.opcode, c.shape, c.attrs,
                   [o.shape for o in c.operands]) is None
    assert conv_flops(c) == (2 * 9 * 8192, 0.0)
    assert 2 * 9 * 8192 / generation("v5e").vector_flops_per_ns == pytest.approx(47.9, abs=0.05)


def test_a_depthwise_weight_gradient_runs_on_the_vector_units():
    # batch_group_count = 128 = output features: group g contracts the 2 images x 8x8
    # window positions of channel g into the 3x3 taps of output feature g, N = 1 each.
    # K = 2 * 64 = 128 multiply-adds per output element; output f32[3,3,1,128]{3,2,1,0}
    # tiles (1,128) (second-minor 1): 3*3*1*128 = 1152 elements, 2 * 128 * 1152 flops.
    c = conv("f32[2,8,8,128]", "f32[2,8,8,128]", "f32[3,3,1,128]",
             "window={size=8x8 pad=1_1x1_1}, dim_labels=f01b_i01o->01bf, "
             "batch_group_count=128")
    assert conv_flops(c) == (2 * 128 * 1152, 0.0)


def test_grouped_convolutions_are_one_gemm_per_group():
    # feature_group_count = 2 over 256 features: 2 GEMMs of M = 64 pixels, K = 128 * 9,
    # N = 64: 2 * 1 * 9 * 1 = 18 passes on v5e.
    c = conv("bf16[1,8,8,256]", "bf16[3,3,128,128]", "bf16[1,8,8,128]",
             "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, "
             "feature_group_count=2")
    use = mxu_use(generation("v5e"), c.opcode, c.shape, c.attrs, [o.shape for o in c.operands])
    assert use.passes == 18 and use.macs == 2 * 64 * 128 * 9 * 64
    # batch_group_count = 2 splits the batch: 2 GEMMs of M = 1 * 8*8 (the output's batch),
    # K = 64 * 9, N = 128 / 2 = 64: 2 * 1 * 5 * 1 = 10 passes.
    b = conv("bf16[2,8,8,64]", "bf16[3,3,64,128]", "bf16[1,8,8,128]",
             "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, "
             "batch_group_count=2")
    use = mxu_use(generation("v5e"), b.opcode, b.shape, b.attrs, [o.shape for o in b.operands])
    assert use.passes == 10 and use.macs == 2 * 64 * 576 * 64
