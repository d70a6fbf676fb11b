"""hlo-equiv: proves equivalence in the e-graph where it can, tests it on random inputs
otherwise, and prints a counterexample for modules that differ."""
from __future__ import annotations

import subprocess
import sys

import pytest

HEAD = "HloModule m\nENTRY main {\n  x = f32[4,3] parameter(0)\n  y = f32[4,3] parameter(1)\n"


def module(tmp_path, name: str, body: str) -> str:
    path = tmp_path / f"{name}.hlo"
    path.write_text(HEAD + body + "\n}\n")
    return str(path)


def equiv(*args):
    return subprocess.run([sys.executable, "-m", "hlo_opt.tools.hlo_equiv", *args],
                          capture_output=True, text=True)


def test_the_same_program_under_other_names_is_proved(tmp_path):
    a = module(tmp_path, "a", "  s = f32[4,3] add(x, y)\n  ROOT r = f32[4,3] multiply(s, s)")
    b = module(tmp_path, "b", "  t = f32[4,3] add(x, y)\n  u = f32[4,3] add(x, y)\n"
                              "  ROOT v = f32[4,3] multiply(t, u)")
    proc = equiv(a, b, "--rules=none")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("equivalent: proved")


def test_rules_make_proofs(tmp_path):
    rules = tmp_path / "r.rules"
    rules.write_text("rule mul_one: multiply(x, 1) => x\n")
    a = module(tmp_path, "a", "  one = f32[] constant(1)\n  b1 = f32[4,3] broadcast(one), "
                              "dimensions={}\n  ROOT r = f32[4,3] multiply(x, b1)")
    b = module(tmp_path, "b", "  ROOT r = f32[4,3] copy(x)")
    c = tmp_path / "c.hlo"
    c.write_text("HloModule c\nENTRY main {\n  y = f32[4,3] parameter(1)\n"
                 "  ROOT x = f32[4,3] parameter(0)\n}\n")
    assert equiv(a, c, f"--rules={rules}").stdout.startswith("equivalent: proved")
    assert equiv(a, b, f"--rules={rules}").stdout.startswith("equivalent: tested")


def test_what_cannot_be_proved_is_tested(tmp_path):
    a = module(tmp_path, "a", "  ROOT r = f32[4,3] add(x, x)")
    b = module(tmp_path, "b", "  two = f32[] constant(2)\n  b2 = f32[4,3] broadcast(two), "
                              "dimensions={}\n  ROOT r = f32[4,3] multiply(x, b2)")
    proc = equiv(a, b, "--rules=none")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("equivalent: tested on 8 random inputs with the interpreter")


def test_different_programs_get_a_counterexample(tmp_path):
    a = module(tmp_path, "a", "  ROOT r = f32[4,3] add(x, y)")
    b = module(tmp_path, "b", "  ROOT r = f32[4,3] subtract(x, y)")
    proc = equiv(a, b, "--rules=none")
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("NOT equivalent (interpreter, trial 0): output 0 differs at [")
    assert "input 0 (f32[4,3]" in proc.stdout and "input 1 (f32[4,3]" in proc.stdout


def test_edge_values_find_differences_random_normals_miss(tmp_path):
    # max(x, 0) and the select form differ only for NaN inputs
    a = module(tmp_path, "a", "  z = f32[] constant(0)\n  zs = f32[4,3] broadcast(z), "
                              "dimensions={}\n  ROOT r = f32[4,3] maximum(x, zs)")
    b = module(tmp_path, "b", "  z = f32[] constant(0)\n  zs = f32[4,3] broadcast(z), "
                              "dimensions={}\n  gt = pred[4,3] compare(x, zs), direction=GT\n"
                              "  ROOT r = f32[4,3] select(gt, x, zs)")
    proc = equiv(a, b, "--rules=none")
    assert proc.returncode == 1
    assert "trial 1" in proc.stdout and "nan" in proc.stdout.lower()


@pytest.mark.parametrize("body_b, message", [
    ("  ROOT r = f32[4,3] add(x, x)\n  z = f32[2] parameter(2)", "different parameters"),
    ("  ROOT r = f32[3,4] transpose(x), dimensions={1,0}", "results differ in shape"),
])
def test_incomparable_modules_are_errors(tmp_path, body_b, message):
    a = module(tmp_path, "a", "  ROOT r = f32[4,3] add(x, y)")
    b = module(tmp_path, "b", body_b)
    proc = equiv(a, b)
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_unreadable_input_is_an_error(tmp_path):
    a = module(tmp_path, "a", "  ROOT r = f32[4,3] add(x, y)")
    proc = equiv(a, str(tmp_path / "missing.hlo"))
    assert proc.returncode == 2 and "missing.hlo: cannot read" in proc.stderr
