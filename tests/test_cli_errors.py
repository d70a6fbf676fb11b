"""Every command-line failure is one line on stderr and a non-zero exit code, never a Python
traceback: ill-typed input (`file:line:col: message`, exit 2) under every hlo-opt --emit
mode, hlo-run's targets and hlo-equiv; arrays too big for memory; and, with --no-verify, the
internal error an unverified input provokes (exit 3, one line suggesting verification;
HLO_OPT_TRACEBACK=1 shows the traceback instead)."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from conftest import CORPUS
from test_api_verify import BIG_ALL_GATHER, REPRODUCERS

MODULES = {"hlo-opt": "hlo_opt.tools.hlo_opt_cli", "hlo-run": "hlo_opt.tools.hlo_run",
           "hlo-equiv": "hlo_opt.tools.hlo_equiv", "hlo-rules": "hlo_opt.tools.hlo_rules"}


def _run(tool: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", MODULES[tool], *args], capture_output=True,
                          text=True, timeout=600, env={**os.environ, **(env or {})})


def _one_line_error(result: subprocess.CompletedProcess, exit_code: int = 2) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == exit_code, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.fixture
def reproducer(tmp_path, request):
    body, message = REPRODUCERS[request.param]
    path = tmp_path / f"{request.param}.hlo"
    path.write_text(f"HloModule r\n{body}\n")
    return str(path), message


CHECKED = ["r01_dot_batch_and_contracting_counts", "r08_dot_dimension_out_of_range",
           "r16_dynamic_slice_sizes"]


@pytest.mark.parametrize("reproducer", CHECKED, indirect=True)
@pytest.mark.parametrize("tool, args", [
    ("hlo-opt", ["--rules=none"]), ("hlo-opt", ["--emit=llvm"]), ("hlo-opt", ["--emit=asm"]),
    ("hlo-run", []), ("hlo-run", ["--target=interp"]),
])
def test_ill_typed_input_is_one_located_line(reproducer, tool, args):
    path, message = reproducer
    line = _one_line_error(_run(tool, path, *args))
    assert line.startswith(f"{path}:2:") and re.search(message, line), line


@pytest.mark.parametrize("reproducer", CHECKED[:1], indirect=True)
def test_hlo_equiv_verifies_both_inputs(reproducer, tmp_path):
    path, message = reproducer
    good = tmp_path / "good.hlo"
    good.write_text("HloModule g\nENTRY e { a = f32[128,128] parameter(0)  "
                    "b = f32[128,128] parameter(1)  ROOT n = f32[128,128] add(a, b) }\n")
    line = _one_line_error(_run("hlo-equiv", str(good), path))
    assert line.startswith(f"{path}:2:") and re.search(message, line), line


@pytest.mark.parametrize("reproducer", CHECKED, indirect=True)
@pytest.mark.parametrize("emit", ["hlo", "llvm"])
def test_no_verify_never_prints_a_traceback(reproducer, emit):
    path, _ = reproducer
    result = _run("hlo-opt", path, "--no-verify", f"--emit={emit}")
    assert "Traceback" not in result.stderr, result.stderr
    if result.returncode:
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.mark.parametrize("reproducer", ["r08_dot_dimension_out_of_range"], indirect=True)
def test_internal_error_of_unverified_input_suggests_verifying(reproducer):
    path, _ = reproducer
    line = _one_line_error(_run("hlo-opt", path, "--no-verify"), exit_code=3)
    assert line.startswith(f"{path}: internal error (") and \
        "the input was not verified: run without --no-verify" in line and \
        "HLO_OPT_TRACEBACK=1" in line, line
    debug = _run("hlo-opt", path, "--no-verify", env={"HLO_OPT_TRACEBACK": "1"})
    assert debug.returncode != 0 and "Traceback" in debug.stderr


@pytest.mark.parametrize("tool, args", [("hlo-opt", ["--rules=none", "--emit=llvm"]),
                                        ("hlo-run", []), ("hlo-run", ["--target=interp"])])
def test_arrays_too_big_for_memory_are_one_line(tmp_path, tool, args):
    path = tmp_path / "big.hlo"
    path.write_text(BIG_ALL_GATHER)
    line = _one_line_error(_run(tool, str(path), *args))
    assert re.fullmatch(rf"{re.escape(str(path))}(:4:8)?: g: f32\[99999999999,4\] needs "
                        r"1\.5 TiB, more than this machine's memory \(.*\)", line), line


def test_hlo_rules_errors_are_one_line(tmp_path):
    path = tmp_path / "bad.rules"
    path.write_text("rule r: (add ?x\n")
    line = _one_line_error(_run("hlo-rules", "check", str(path)))
    assert line.startswith(str(path)), line
    missing = _one_line_error(_run("hlo-rules", "check", str(tmp_path / "missing.rules")))
    assert "missing.rules" in missing


SCALAR_PAD = """HloModule m
ENTRY e {
  p0 = f32[] parameter(0)
  c = f32[] constant(0)
  ROOT r = f32[] pad(p0, c), padding={}
}
"""


def test_a_scalar_pad_left_in_place_is_one_line_not_text_xla_rejects(tmp_path):
    # XLA's parser has no spelling for a rank-0 padding config, so a pad of a scalar that
    # survives (no rules ran) cannot be printed; the default rules remove it (pad_noop).
    path = tmp_path / "scalar_pad.hlo"
    path.write_text(SCALAR_PAD)
    line = _one_line_error(_run("hlo-opt", str(path), "--rules=none"))
    assert line.startswith(f"{path}:5:8: r: a pad of a scalar has no HLO text") and \
        "pad_noop" in line, line
    optimized = _run("hlo-opt", str(path))
    assert optimized.returncode == 0 and "pad(" not in optimized.stdout, optimized.stderr


def test_output_to_a_fifo_is_written_into_it_not_replaced(tmp_path):
    """-o names a FIFO (or /dev/null, a terminal): the atomic rename would put a regular
    file in its place, so such a target is written as it is."""
    import stat
    import threading
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text()))
    reader.start()
    result = _run("hlo-opt", str(CORPUS / "softmax.hlo"), "-o", str(fifo))
    reader.join(60)
    assert result.returncode == 0, result.stderr
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert received and received[0].startswith("HloModule")
    assert os.listdir(tmp_path) == ["out.fifo"]          # no temporary file left
