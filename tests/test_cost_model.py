"""The CPU cost model against the machine: its constants come from a calibration file
(tools/calibrate_cpu.py), and it orders kernels of clearly different costs as their measured
times do. A rank check, not a timing one: the kernels' costs differ by 2x and more, so the
order survives a loaded machine."""
import json
import statistics
import time

import numpy as np
import pytest

from hlo_opt import compile as compile_cpu
from hlo_opt import parse
from hlo_opt.targets import KernelView, cost_model
from hlo_opt.targets import cpu as cpu_target
from hlo_opt.tools.calibrate_cpu import conv_module, dot_module, reduce_module
from hlo_opt.tools.hlo_run import random_inputs


def _elementwise(n: int, body: str) -> str:
    return f"HloModule ew\nENTRY e {{\n  x = f32[{n}] parameter(0)\n{body}\n}}\n"


def _transpose(rows: int, cols: int) -> str:
    return (f"HloModule transpose\nENTRY e {{\n  x = f32[{rows},{cols}] parameter(0)\n"
            f"  ROOT t = f32[{cols},{rows}] transpose(x), dimensions={{1,0}}\n}}\n")


# Each compiles to one kernel; their estimated times lie 2x and more apart, over five orders
# of magnitude (the model misses most on the transpose: strided access is not in it).
KERNELS = {
    "add 1K": _elementwise(1024, "  ROOT r = f32[1024] add(x, x)"),
    "transpose 128x128": _transpose(128, 128),
    "exp + tanh 4K": _elementwise(
        4096, "  e = f32[4096] exponential(x)\n  ROOT t = f32[4096] tanh(e)"),
    "reduce 256x1K": reduce_module(256, 1024),
    "dot 128": dot_module(128),
    "conv 3x3 32->32 on 32x32": conv_module(32, 32),
    "erf 1M (threaded)": _elementwise(1 << 20, f"  ROOT r = f32[{1 << 20}] erf(x)"),
    "add 16M (threaded)": _elementwise(1 << 24, f"  ROOT r = f32[{1 << 24}] add(x, x)"),
    "dot 1536 (threaded)": dot_module(1536),
}


def spearman(a, b) -> float:
    """Rank correlation (no ties in measured or estimated times of these kernels)."""
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def _estimate(model, module) -> float:
    """The model's time for the module's entry computed as one kernel (as the lowering
    compiles each of these)."""
    comp = module.entry
    members = [i for i in comp.instructions if i.opcode != "parameter"]
    return model.kernel_cost(KernelView(members, list(comp.parameters), [comp.root]))


def _measure(module) -> float:
    exe = compile_cpu(module)
    assert exe.stats["kernel_calls"] == 1
    args = random_inputs(module, seed=0)
    out = exe.run(args)
    times = []
    for _ in range(7):
        start = time.perf_counter()
        exe.run(args, out)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def test_model_ranks_kernels_as_measured():
    model = cost_model("cpu")
    modules = [parse(text, name) for name, text in KERNELS.items()]
    estimated = [_estimate(model, m) for m in modules]
    measured = [_measure(m) for m in modules]
    rho = spearman(estimated, measured)
    table = "\n".join(f"{name:26s} model {e / 1e3:9.1f} us  measured {t * 1e6:9.1f} us"
                      for name, e, t in zip(KERNELS, estimated, measured))
    assert rho >= 0.9, f"Spearman {rho:.3f}\n{table}"


def test_spearman_of_orders():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [40, 30, 20, 10]) == pytest.approx(-1.0)
    assert spearman([1, 2, 3, 4, 5], [1, 2, 3, 5, 4]) == pytest.approx(0.9)


def test_constants_come_from_the_calibration_file(tmp_path):
    shipped = json.loads(cpu_target.CALIBRATION.read_text())
    assert {"cpu", "cores", "llvm_cpu"} <= set(shipped["machine"]) and shipped["date"]
    machine = cpu_target.CPU
    model = shipped["model"]
    assert machine.bytes_per_ns == model["bytes_per_ns"]
    assert machine.vector_flops_per_ns == model["vector_flops_per_ns"]
    assert machine.op_weights["exponential"] == model["op_weights"]["exponential"]
    # Another file gives another machine: twice the bandwidth halves a streaming kernel's
    # memory time.
    faster = dict(shipped, model=dict(model, bytes_per_ns=2 * model["bytes_per_ns"]))
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps(faster))
    assert cpu_target.load(path).bytes_per_ns == 2 * machine.bytes_per_ns


def test_measured_weights_order_ops_at_equal_traffic():
    """An exp is dearer than a divide, a divide than a multiply: same shapes, same bytes."""
    model = cost_model("cpu")

    def cost(op):
        root = parse(_elementwise(1 << 16, f"  ROOT r = f32[65536] {op}(x, x)")).entry.root
        return model.node_cost(op, root.shape, root.attrs, [o.shape for o in root.operands])
    assert cost("atan2") > cost("divide") > cost("multiply")


def test_calibration_derives_model_constants_from_measurements():
    """Rates become per-ns constants, op times weights relative to an add; threaded rates
    measured below one core's (other processes held the cores) fall back to one core's."""
    from hlo_opt.tools.calibrate_cpu import ELEMENTWISE, model_constants
    measured = {f"elementwise {op}": {"value": 0.01, "relative_to_add": 1.0}
                for op in ELEMENTWISE}
    measured["elementwise exponential"] = {"value": 0.3, "relative_to_add": 30.0}
    rates = {"kernel overhead": 5.0, "while overhead": 20.0, "overlap": 0.5,
             "bandwidth L2": 100.0, "bandwidth 64MiB 1 thread": 16.0,
             "bandwidth 64MiB threaded": 12.0, "reduce": 25.0,
             "elementwise exponential 1 thread": 4.0, "elementwise exponential threaded": 7.0,
             "gemm 512 1 thread": 180.0, "gemm 1024 threaded": 150.0,
             "convolution 1 thread": 90.0}
    measured.update({name: {"value": v} for name, v in rates.items()})
    c = model_constants(measured)
    assert c["vector_flops_per_ns"] == pytest.approx(100.0)
    assert c["parallel_vector_flops_per_ns"] == pytest.approx(175.0)
    assert c["parallel_bytes_per_ns"] == 16.0 and c["parallel_matrix_flops_per_ns"] == 180.0
    assert c["op_weights"]["exponential"] == 30.0 and c["op_weights"]["convolution"] == 2.0
    assert c["op_weights"]["reduce"] == 1.0          # 25 elements/ns is L2 traffic alone
    assert "s32 divide" not in c["op_weights"]


@pytest.mark.parametrize("target", ["cpu", "gpu", "tpu"])
def test_a_splat_costs_what_a_view_does_and_a_broadcast_of_an_array_more(target):
    """Every target computes a broadcast scalar inside the kernels that read it, so
    extraction does not charge a splat a kernel (multiply by a splat beats a convert of a
    pred, as XLA's MultiplyOfConvertedPred expects); a broadcast of an array moves data."""
    model = cost_model(target)
    m = parse("""HloModule m
ENTRY e {
  s = f32[] parameter(0)
  v = f32[64] parameter(1)
  splat = f32[64,64] broadcast(s), dimensions={}
  ROOT rows = f32[64,64] broadcast(v), dimensions={1}
}""")

    def cost(name):
        inst = next(i for i in m.entry.instructions if i.name == name)
        return model.node_cost(inst.opcode, inst.shape, inst.attrs,
                               [o.shape for o in inst.operands])
    assert cost("splat") == model.machine.view_ns
    assert cost("rows") > 10 * cost("splat")
