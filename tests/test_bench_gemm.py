"""The one-core GEMM benchmark (tools/bench_gemm.py): it runs the micro-kernel alone and
whole GEMMs for the target's micro-tile and prints their rates against the peak. No timing
is asserted."""
from __future__ import annotations

import math

from hlo_opt.tools import bench_gemm


def test_micro_kernel_alone_and_a_gemm_are_measured():
    for rate in (bench_gemm.micro_rate(64, ldc=40, reps=1),
                 bench_gemm.gemm_rate(40, 50, 60, reps=1)):
        assert math.isfinite(rate) and rate > 0


def test_report_names_the_micro_tile_each_depth_and_size(capsys):
    bench_gemm.main(["40x50x60", "33x17x65", "--kc", "64", "128", "--reps", "1"])
    out = capsys.readouterr().out.splitlines()
    assert "micro-tile" in out[0] and "peak" in out[0]
    assert [line.split()[1] for line in out[1:3]] == ["K=64", "K=128"]
    assert [line.split()[1] for line in out[3:]] == ["40x50x60", "33x17x65"]
