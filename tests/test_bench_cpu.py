"""The CPU benchmark (tools/bench_cpu.py) and its large modules (benchmarks/large/, written by
gen_corpus --large): every corpus workload has a large variant that parses and is much
larger than its fixture; a benchmark row carries what both tables print; outputs are
checked against the interpreter with the test suite's tolerances. No timing is asserted."""
from __future__ import annotations

import json
import pathlib

import ml_dtypes
import numpy as np
import pytest

import hlo_opt
from conftest import CORPUS
from hlo_opt.tools import bench_cpu
from hlo_opt.tools.output_check import mismatch

LARGE = pathlib.Path(__file__).parent.parent / "benchmarks" / "large"
WORKLOADS = sorted(p.name for p in CORPUS.glob("*.hlo") if not p.name.endswith(".xla_opt.hlo"))


def _largest_array(module) -> int:
    return max(i.shape.num_elements for i in module.instructions() if not i.shape.is_tuple)


def test_every_workload_has_a_large_variant():
    assert sorted(p.name for p in LARGE.glob("*.hlo")) == WORKLOADS
    # what the benchmark reads, installed or from the checkout, is what the repository ships
    assert sorted(p.name for p in bench_cpu.LARGE.glob("*.hlo")) == WORKLOADS


@pytest.mark.parametrize("name", WORKLOADS)
def test_large_variant_parses_and_is_larger(name):
    large = hlo_opt.parse((LARGE / name).read_text(), name)
    small = hlo_opt.parse((CORPUS / name).read_text(), name)
    assert large.name == small.name
    assert _largest_array(large) >= 100 * _largest_array(small)


def test_shipped_texts_are_what_the_generator_writes():
    pytest.importorskip("jax")
    from hlo_opt.tools import gen_corpus
    assert gen_corpus.lower("softmax", large=True) == (LARGE / "softmax.hlo").read_text()
    assert gen_corpus.lower("softmax") == (CORPUS / "softmax.hlo").read_text()


DOT = """HloModule jit_tiny_dot
ENTRY main {
  x = f32[16,32] parameter(0)
  w = f32[32,8] parameter(1)
  d = f32[16,8] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT t = f32[16,8] tanh(d)
}
"""


@pytest.fixture(scope="module")
def machine():
    return {"bandwidth": 20e9, "peak1": 100e9}      # the tables only divide by these


def test_one_module_in_both_tables(tmp_path, machine):
    path = tmp_path / "tiny_dot.hlo"
    path.write_text(DOT)
    small = bench_cpu.bench_module(path, rounds=1, calls=2, numpy_calls=1)
    large = bench_cpu.bench_module(path, rounds=1, calls=2, numpy_calls=1, large=True)
    for row in (small, large):
        assert row["name"] == "tiny_dot" and row["class"] == "dot/conv"
        assert row["check"] == "ok"
        assert row["ours"] > 0 and row["ours_ftz"] > 0 and row["numpy"] > 0
    assert "top_kernels" not in small
    [kernel] = large["top_kernels"]                 # one fused kernel: the dot and its tanh
    assert kernel["flops"] == 2 * 16 * 32 * 8 and kernel["bytes"] == 4 * (16 * 32 + 32 * 8 + 16 * 8)
    assert kernel["share"] == pytest.approx(1.0)
    small_text = bench_cpu.report([small])
    large_text = bench_cpu.report_large([large], machine)
    assert "tiny_dot" in small_text and "numpy/ours" in small_text
    assert "GFLOP/s" in large_text and "% of memcpy" in large_text
    assert "interpreter check: 1 of 1 ok" in large_text
    from hlo_opt.targets.cpu_facts import target_cpu
    assert bench_cpu.header(machine).startswith(f"code generated for {target_cpu()[0]} (")


def test_an_interpreter_that_takes_too_long_is_reported(tmp_path, monkeypatch):
    path = tmp_path / "tiny_dot.hlo"
    path.write_text(DOT)
    monkeypatch.setattr(bench_cpu, "INTERPRETER_SECONDS", 1e-6)
    row = bench_cpu.bench_module(path, rounds=1, calls=1, numpy_calls=1, large=True)
    assert row["check"].endswith("not checked") and "numpy" not in row
    assert "not ok: tiny_dot" in bench_cpu.report_large([row], {"bandwidth": 1e9, "peak1": 1e9})


def test_outputs_match_within_the_suites_tolerances():
    x = np.linspace(-1, 1, 64, dtype=np.float32)
    assert mismatch([x], [x.copy()]) is None
    assert mismatch([x + 1e-6], [x]) is None                       # 1e-4 of the largest
    assert "max error" in mismatch([x + 1e-3], [x])
    bf = x.astype(ml_dtypes.bfloat16)
    assert mismatch([(x + 1e-2).astype(ml_dtypes.bfloat16)], [bf]) is None
    n = np.arange(10, dtype=np.int32)
    assert mismatch([n + (n == 3)], [n]) == "out0: 1 of 10 differ"
    assert mismatch([np.where(n == 2, np.nan, x[:10])], [x[:10]]) == "out0: NaN positions"
    assert "outputs" in mismatch([x, x], [x])


def test_main_writes_both_tables_as_json(tmp_path, monkeypatch, capsys):
    small, large = tmp_path / "small", tmp_path / "large"
    for folder in (small, large):
        folder.mkdir()
        (folder / "tiny_dot.hlo").write_text(DOT)
    monkeypatch.setattr(bench_cpu, "CORPUS", small)
    monkeypatch.setattr(bench_cpu, "LARGE", large)
    monkeypatch.setattr(bench_cpu, "measure_machine", lambda: {"bandwidth": 1e10, "peak1": 1e11})
    out = tmp_path / "rows.json"
    assert bench_cpu.main(["--rounds", "1", "--calls", "1", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "small modules" in printed and "large modules" in printed
    saved = json.loads(out.read_text())
    assert [r["name"] for r in saved["small"]] == [r["name"] for r in saved["large"]] == ["tiny_dot"]
    assert saved["large"][0]["top_kernels"] and saved["machine"]["peak1"] == 1e11
