"""`hlo-opt --emit=llvm|asm`: the optimized module's CPU kernels as LLVM IR or assembly,
to stdout or atomically to -o; bad input stays one line with exit code 2."""
from __future__ import annotations

import os
import re

import pytest

from hlo_opt.tools.hlo_opt_cli import main

EXP = """HloModule m
ENTRY e {
  x = f32[1024] parameter(0)
  n = f32[1024] negate(x)
  ROOT r = f32[1024] exponential(n)
}
"""


def test_emit_llvm_prints_the_kernels_and_driver(tmp_path, capsys):
    src = tmp_path / "in.hlo"
    src.write_text(EXP)
    assert main([str(src), "--rules=none", "--emit=llvm"]) == 0
    out = capsys.readouterr().out
    assert out.count("define ") >= 2 and "driver_" in out
    assert "HloModule" not in out


def test_emit_asm_writes_the_output_file_atomically(tmp_path, capsys):
    src = tmp_path / "in.hlo"
    src.write_text(EXP)
    target = tmp_path / "out.s"
    assert main([str(src), "--rules=none", "--emit=asm", "-o", str(target)]) == 0
    assert capsys.readouterr().out == ""
    asm = target.read_text()
    assert "driver_" in asm and re.search(r"^\s+retq?$", asm, re.M)
    assert re.search(r"^\s+v?(fmadd|mulps|movups)", asm, re.M)   # SSE or AVX vectors
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.hlo", "out.s"]
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask     # as open() would make it


@pytest.mark.parametrize("emit", ["llvm", "asm"])
def test_emit_errors_are_one_line_with_exit_code_2(tmp_path, capsys, emit):
    src = tmp_path / "in.hlo"
    src.write_text("HloModule m\nENTRY e {\n  x = f32[4] parameter(0)\n"
                   "  ROOT r = f32[4] frob(x)\n}\n")
    target = tmp_path / "out.txt"
    assert main([str(src), "--rules=none", f"--emit={emit}", "-o", str(target)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{src}:4:") and len(err.strip().splitlines()) == 1
    assert not target.exists()


def test_emit_announces_interpreter_fallbacks_in_one_line(tmp_path, capsys):
    src = tmp_path / "in.hlo"
    src.write_text("HloModule m\nENTRY e {\n  x = f32[4,4] parameter(0)\n"
                   "  ROOT c = f32[4,4] cholesky(x), lower=true\n}\n")
    assert main([str(src), "--rules=none", "--emit=llvm"]) == 0
    captured = capsys.readouterr()
    assert "define " in captured.out
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hlo-opt: ") and "cholesky" in lines[0]


def test_ill_typed_input_is_an_error_naming_the_file_and_position(tmp_path, capsys):
    src = tmp_path / "bad.hlo"
    src.write_text("HloModule m\n\nENTRY e {\n  p = f32[4] parameter(0)\n"
                   "  ROOT t = (f32[4], f32[5]) tuple(p, p)\n}\n")
    assert main([str(src), "--rules=none"]) == 2
    err = capsys.readouterr().err.strip()
    assert re.fullmatch(rf"{re.escape(str(src))}:5:\d+: t: result shape .*", err), err
    assert main([str(src), "--rules=none", "--no-verify"]) == 0
