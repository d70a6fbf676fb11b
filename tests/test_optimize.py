"""hlo_opt.optimize and the hlo-opt command: rules rewrite, constants fold, limits stop runs
with a valid program, and the command line reports bad input in one line."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import hlo_opt
from conftest import corpus_files, corpus_ids, counted_loop
from hlo_opt import UnsupportedError, xla_oracle
from hlo_opt.tools.hlo_equiv import first_difference, random_array

RULES = """
ruleset simplify
rule mul_one: multiply(x, 1) => x
rule neg_neg: negate(negate(x)) => x
rule transpose_transpose:
    transpose(transpose(x, dimensions=p), dimensions=q) => transpose(x, dimensions=compose(p, q))
rule transpose_identity: transpose(x, dimensions=p) => x  when is_identity(p)
fold fold_elementwise: elementwise when num_elements(root) <= 1024
fold fold_shape: reshape, transpose, broadcast, concatenate when num_elements(root) <= 1024
"""

# Commutativity and associativity of add: the e-graph of a long sum grows without end.
GROWING = """
egglog {
(rewrite (Op2 "add" x y a t) (Op2 "add" y x a t) :ruleset simplify)
(rewrite (Op2 "add" (Op2 "add" x y a t) z a t) (Op2 "add" x (Op2 "add" y z a t) a t)
         :ruleset simplify)
}
"""


@pytest.fixture
def rules(tmp_path):
    path = tmp_path / "test.rules"
    path.write_text(RULES)
    return str(path)


@pytest.fixture
def growing(tmp_path):
    path = tmp_path / "growing.rules"
    path.write_text(GROWING)
    return str(path)


def entry(body: str, computations: str = "") -> hlo_opt.Module:
    return hlo_opt.parse(f"HloModule m\n{computations}\nENTRY main {{\n{body}\n}}\n")


def opcodes(comp) -> list[str]:
    return [i.opcode for i in comp.instructions]


def assert_equivalent(a: hlo_opt.Module, b: hlo_opt.Module, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    args = [random_array(p.shape, rng, edges=False) for p in a.entry.parameters]
    assert first_difference(hlo_opt.evaluate(a, args), hlo_opt.evaluate(b, args)) is None


def long_sum(n: int) -> hlo_opt.Module:
    lines = [f"  p{i} = f32[4] parameter({i})" for i in range(n)]
    lines.append("  s1 = f32[4] add(p0, p1)")
    lines += [f"  s{i} = f32[4] add(s{i - 1}, p{i})" for i in range(2, n - 1)]
    lines.append(f"  ROOT s{n - 1} = f32[4] add(s{n - 2}, p{n - 1})")
    return entry("\n".join(lines))


def test_rules_rewrite_and_the_result_is_the_same_function(rules):
    module = entry("""
  x = f32[4,8] parameter(0)
  one = f32[] constant(1)
  ones = f32[4,8] broadcast(one), dimensions={}
  m = f32[4,8] multiply(x, ones)
  n = f32[4,8] negate(m)
  nn = f32[4,8] negate(n)
  t = f32[8,4] transpose(nn), dimensions={1,0}
  ROOT tt = f32[4,8] transpose(t), dimensions={1,0}""")
    out, report = hlo_opt.optimize(module, rules=rules, stats=True)
    assert opcodes(out.entry) == ["parameter"]
    assert report.stop == "saturated"
    assert report.matches["mul_one"] >= 1
    assert "mul_one" in report.summary()
    assert_equivalent(module, out)


def test_a_rule_whose_opcodes_only_rewriting_creates_still_fires(tmp_path):
    # Rules run only once the opcodes their patterns name occur (rule_compiler/gates.py):
    # `back` names add and negate, which the input lacks and `forward` creates.
    path = tmp_path / "gated.rules"
    path.write_text("rule forward: subtract(x, y) => add(x, negate(y))\n"
                    "rule back: add(x, negate(y)) => multiply(x, y)\n"
                    "rule never: dot(x, y) => x\n")
    module = entry("""
  p = f32[4] parameter(0)
  q = f32[4] parameter(1)
  ROOT s = f32[4] subtract(p, q)""")
    _, report = hlo_opt.optimize(module, rules=[str(path)], stats=True, fusion=False)
    assert report.matches["forward"] == 1 and report.matches["back"] == 1
    assert report.matches["never"] == 0


def test_constants_fold(rules):
    out = hlo_opt.optimize(entry("""
  two = f32[] constant(2)
  three = f32[] constant(3)
  s = f32[] add(two, three)
  c = s32[3] constant({1, 2, 3})
  sq = s32[3] multiply(c, c)
  n = s32[3] negate(sq)
  ROOT t = (f32[], s32[3]) tuple(s, n)"""), rules=rules)
    s, n = out.entry.root.operands
    assert s.opcode == "constant" and s.literal == 5
    assert n.opcode == "constant" and n.literal.tolist() == [-1, -4, -9]


def test_splats_fold_to_splats_whatever_their_size(rules):
    out = hlo_opt.optimize(entry("""
  two = f32[] constant(2)
  three = f32[] constant(3)
  b2 = f32[512,512] broadcast(two), dimensions={}
  b3 = f32[512,512] broadcast(three), dimensions={}
  ROOT s = f32[512,512] multiply(b2, b3)"""), rules=rules)
    assert opcodes(out.entry) == ["constant", "broadcast"]
    assert out.entry.root.operands[0].literal == 6


def test_a_broadcast_of_a_broadcast_of_a_constant_is_a_constant_to_fold(tmp_path):
    # Folds alone (no rewrite merges the broadcasts): the constant analysis sees through both.
    path = tmp_path / "folds.rules"
    path.write_text("fold fold_elementwise: elementwise\n")
    out = hlo_opt.optimize(entry("""
  two = f32[] constant(2)
  row = f32[4] broadcast(two), dimensions={}
  b = f32[300,4] broadcast(row), dimensions={1}
  ROOT s = f32[300,4] multiply(b, b)"""), rules=[str(path)])
    assert "multiply" not in opcodes(out.entry)
    assert [i.literal for i in out.entry.instructions if i.opcode == "constant"] == [4]


def test_array_folds_stop_at_the_guard(rules):
    module = entry("""
  i = s32[2048] iota(), iota_dimension=0
  c = s32[2048] constant({...})
  ROOT s = s32[2048] add(c, c)""")
    out = hlo_opt.optimize(module, rules=rules)
    assert "add" in opcodes(out.entry)
    small = entry("""
  c = s32[4] constant({1, 2, 3, 4})
  ROOT s = s32[4] add(c, c)""")
    assert opcodes(hlo_opt.optimize(small, rules=rules).entry) == ["constant"]


def test_while_bodies_are_rewritten_too(rules):
    module = hlo_opt.parse(counted_loop("""
  e = f32[4] exponential(v)
  f = f32[] constant(1)
  fs = f32[4] broadcast(f), dimensions={}
  new = f32[4] multiply(e, fs)"""))
    out = hlo_opt.optimize(module, rules=rules)
    assert "multiply" not in opcodes(out.computation("body"))
    assert [c.name for c in out.computations] == ["cond", "body", "main"]
    assert_equivalent(module, out)


@pytest.mark.parametrize("enabled", [True, False])
def test_optimize_leaves_the_garbage_collector_as_it_found_it(rules, enabled):
    """Optimizing pauses Python's cyclic collector; it is back as it was afterwards, after
    a failure too."""
    import gc
    module = entry("  x = f32[4] parameter(0)\n  ROOT n = f32[4] negate(x)")
    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        hlo_opt.optimize(module, rules=rules)
        assert gc.isenabled() == enabled
        with pytest.raises(hlo_opt.HloError):
            hlo_opt.optimize(module, rules=rules + ".missing")
        assert gc.isenabled() == enabled
    finally:
        gc.enable() if was else gc.disable()


def test_iteration_limit_stops_with_a_valid_program(growing):
    module = long_sum(10)
    out, report = hlo_opt.optimize(module, rules=growing, iteration_limit=2, stats=True)
    assert report.stop == "iteration limit"
    assert report.iterations == 2
    assert_equivalent(module, out)


def test_node_limit_stops_before_the_egraph_explodes(growing):
    module = long_sum(16)
    out, report = hlo_opt.optimize(module, rules=growing, node_limit=500, stats=True)
    assert report.stop == "node limit"
    assert report.enodes < 20 * 500          # stopped by prediction, not long after
    assert_equivalent(module, out)


def test_time_limit_keeps_the_input_program(growing):
    module = long_sum(16)
    out, report = hlo_opt.optimize(module, rules=growing, time_limit=0.0, stats=True)
    assert report.stop == "time limit"
    assert report.iterations == 0
    assert opcodes(out.entry).count("add") == 15


NON_XLA = corpus_files(include_xla_opt=False)


@pytest.mark.parametrize("path", NON_XLA, ids=corpus_ids(NON_XLA))
def test_default_rules_keep_every_corpus_module_equivalent(path):
    """Random inputs, and inputs sprinkled with edge values (NaN, ±inf, ±0, integer
    extremes): the default rules (--fp-mode=xla) may only change the sign of a zero, which
    the comparison ignores. XLA, where installed, parses the optimized text."""
    module = hlo_opt.parse(path.read_text(), str(path))
    out = hlo_opt.optimize(module, rules="default", time_limit=10)
    text = out.to_text()
    again = hlo_opt.parse(text, "optimized")
    if xla_oracle.available():
        xla_oracle.parse(text)
    rng = np.random.default_rng(1)
    for edges in (False, True):
        args = [random_array(p.shape, rng, edges=edges) for p in module.entry.parameters]
        try:
            expected = hlo_opt.evaluate(module, args)
        except UnsupportedError:
            pytest.skip("the interpreter cannot run this module")
        assert first_difference(expected, hlo_opt.evaluate(again, args)) is None, edges


# --- the command line ----------------------------------------------------------------------

def cli(*args, stdin: str | None = None):
    return subprocess.run([sys.executable, "-m", "hlo_opt.tools.hlo_opt_cli", *args],
                          capture_output=True, text=True, input=stdin)


GOOD = """HloModule m
ENTRY main {
  x = f32[4] parameter(0)
  a = f32[4] negate(x)
  b = f32[4] negate(a)
  ROOT r = f32[4] add(b, b)
}
"""


def test_cli_writes_the_optimized_module_and_stats(tmp_path, rules):
    src = tmp_path / "in.hlo"
    src.write_text(GOOD)
    out = tmp_path / "out.hlo"
    proc = cli(str(src), f"--rules={rules}", "-o", str(out), "--stats")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    assert "neg_neg" in proc.stderr and "saturated" in proc.stderr
    optimized = hlo_opt.parse(out.read_text())
    assert opcodes(optimized.entry) == ["parameter", "add"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.hlo", "out.hlo", "test.rules"]


def test_cli_reads_stdin_and_writes_stdout():
    proc = cli("-", "--rules=none", stdin=GOOD)
    assert proc.returncode == 0, proc.stderr
    assert opcodes(hlo_opt.parse(proc.stdout).entry) == ["parameter", "negate", "negate", "add"]


@pytest.mark.parametrize("text, rules_text, expected", [
    ("HloModule m\nENTRY e {\n  p = f32[4] parameter(0)\n  ROOT x = f32[4] frob(p)\n}\n", None,
     ("in.hlo:4:", "frob")),
    (GOOD, "rule r: frob(x) => x\n", ("bad.rules:1:9:", "frob")),
    (GOOD, "rule r: negate(x) =>\n", ("bad.rules:1:", "end of rule file")),
])
def test_cli_errors_are_one_line_with_exit_code_2(tmp_path, text, rules_text, expected):
    src = tmp_path / "in.hlo"
    src.write_text(text)
    args = [str(src), "-o", str(tmp_path / "out.hlo")]
    if rules_text is not None:
        (tmp_path / "bad.rules").write_text(rules_text)
        args.append(f"--rules={tmp_path / 'bad.rules'}")
    proc = cli(*args)
    assert proc.returncode == 2
    position, message = expected
    assert position in proc.stderr and message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert not (tmp_path / "out.hlo").exists()


def test_cli_rejects_a_missing_input_and_bad_limits(tmp_path):
    proc = cli(str(tmp_path / "missing.hlo"))
    assert proc.returncode == 2 and "missing.hlo: cannot read" in proc.stderr
    src = tmp_path / "in.hlo"
    src.write_text(GOOD)
    proc = cli(str(src), "--node-limit", "0")
    assert proc.returncode == 2 and "must be positive" in proc.stderr
