"""Explain: `optimize(..., explain=True)` and `hlo-opt --explain` say which rules matched and
where they are written, what each output kernel costs against the input kernels it now
computes, what became of each input instruction and which rule made each new one;
`hlo-equiv --explain` gives a chain of rules that by themselves prove the equality."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

import hlo_opt
from hlo_opt.egraph.pipeline import compiled_rules, prove_equivalent
from hlo_opt.egraph.proof_chain import proof_chain
from hlo_opt.targets import cost_model, kernel_view

HEAD = "HloModule m\nENTRY main {\n  x = f32[64,32] parameter(0)\n  y = f32[64,32] parameter(1)\n"
ONES = "  one = f32[] constant(1)\n  ones = f32[64,32] broadcast(one), dimensions={}\n"
ZEROS = "  z = f32[] constant(0)\n  zs = f32[64,32] broadcast(z), dimensions={}\n"


def explained(body: str, **options):
    module = hlo_opt.parse(HEAD + body + "\n}\n")
    return module, *hlo_opt.optimize(module, explain=True, **options)


def fate(explanation, name: str, computation: str = "main"):
    [f] = [f for f in explanation.fates if (f.computation, f.input) == (computation, name)]
    return f


def rule_line(use) -> str:
    with open(use.file, encoding="utf-8") as f:
        return f.readlines()[use.line - 1]


def test_a_multiply_by_one_is_rewritten_by_mul_one_whose_line_is_given():
    _, out, why = explained(ONES + "  m = f32[64,32] multiply(x, ones)\n"
                            "  ROOT r = f32[64,32] add(m, y)")
    f = fate(why, "m")
    assert (f.fate, f.output, f.output_opcode) == ("rewritten", "x", "parameter")
    assert "mul_one" in f.rules
    [use] = [u for u in why.rules if u.rule == "mul_one"]
    assert use.matches >= 1 and use.file.endswith("arithmetic.rules")
    assert rule_line(use).startswith("rule mul_one")
    assert fate(why, "ones").fate == "removed"
    assert "m (multiply): rewritten into x (parameter) by mul_one" in why.text()


def test_two_identical_adds_are_reported_as_merged():
    _, out, why = explained("  a = f32[64,32] add(x, y)\n  b = f32[64,32] add(x, y)\n"
                            "  ROOT r = f32[64,32] multiply(a, b)", fusion=False)
    assert (fate(why, "a").fate, fate(why, "b").fate) == ("kept", "merged")
    assert fate(why, "b").output == "a"
    assert [i.name for i in out.entry.instructions if i.opcode == "add"] == ["a"]


def test_a_fused_kernel_lists_its_input_instructions_and_their_costs():
    module, out, why = explained("  e = f32[64,32] exponential(x)\n"
                                 "  a = f32[64,32] add(e, y)\n"
                                 "  ROOT t = f32[64,32] tanh(a)")
    model = cost_model("cpu")
    [fusion] = [i for i in out.entry.instructions if i.opcode == "fusion"]
    [kernel] = [k for k in why.kernels if k.kernel == fusion.name]
    assert sorted(kernel.inputs) == ["a", "e", "t"]
    assert sorted(kernel.members) == ["a", "e", "t"]
    inputs = {i.name: i for i in module.entry.instructions}
    assert kernel.before_ns == pytest.approx(sum(model.kernel_cost(kernel_view(inputs[n]))
                                                 for n in kernel.inputs))
    assert kernel.after_ns == pytest.approx(model.kernel_cost(kernel_view(fusion)))
    assert kernel.after_ns < kernel.before_ns
    assert why.after_ns == pytest.approx(model.module_cost(out))
    assert why.before_ns == pytest.approx(model.module_cost(module))
    assert why.before_ns == pytest.approx(sum(k.before_ns for k in why.kernels)
                                          + sum(g.before_ns for g in why.gone_kernels))
    assert fate(why, "e").kernel == fusion.name


def test_a_new_instruction_names_the_rule_that_made_it():
    _, out, why = explained(ZEROS + "  ROOT n = f32[64,32] subtract(zs, x)", fusion=False)
    assert out.entry.root.opcode == "negate"
    [new] = [n for n in why.new if n.output == out.entry.root.name]
    assert new.opcode == "negate" and new.made_by == ["sub_from_zero"]
    assert new.replaces == ["n"]
    [use] = [u for u in why.rules if u.rule == "sub_from_zero"]
    assert rule_line(use).startswith("rule sub_from_zero")


def test_a_loop_body_is_explained_under_its_computation_name():
    module = hlo_opt.parse("""HloModule w
body {
  s = (s32[], f32[16]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  v = f32[16] get-tuple-element(s), index=1
  i1 = s32[] add(i, i)
  one = f32[] constant(1)
  ones = f32[16] broadcast(one), dimensions={}
  m = f32[16] multiply(v, ones)
  ROOT t = (s32[], f32[16]) tuple(i1, m)
}
cond {
  s = (s32[], f32[16]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(100)
  ROOT lt = pred[] compare(i, n), direction=LT
}
ENTRY main {
  x = f32[16] parameter(0)
  zero = s32[] constant(0)
  init = (s32[], f32[16]) tuple(zero, x)
  w = (s32[], f32[16]) while(init), condition=cond, body=body
  ROOT r = f32[16] get-tuple-element(w), index=1
}
""")
    _, why = hlo_opt.optimize(module, explain=True)
    f = fate(why, "m", "body")
    assert (f.fate, f.output, f.rules) == ("rewritten", "v", ["mul_one"])
    assert fate(why, "i", "body").fate == "kept"    # renamed (cond has an `i` too), not merged
    assert "body/m (multiply): rewritten into v" in why.text()


def test_a_folded_constant_is_attributed_to_folding():
    _, out, why = explained("  c2 = f32[] constant(2)\n  c3 = f32[] constant(3)\n"
                            "  c6 = f32[] multiply(c2, c3)\n"
                            "  b = f32[64,32] broadcast(c6), dimensions={}\n"
                            "  ROOT r = f32[64,32] add(x, b)", fusion=False)
    assert fate(why, "c6").fate == "rewritten" and fate(why, "c6").rules == ["constant folding"]


def test_explaining_changes_nothing_but_the_report():
    body = ONES + ZEROS + "  m = f32[64,32] multiply(x, ones)\n  n = f32[64,32] subtract(zs, y)\n" \
        "  ROOT r = f32[64,32] add(m, n)"
    module, out, why = explained(body)
    assert out.to_text() == hlo_opt.optimize(module).to_text()
    assert "Rewrote" in compiled_rules("default", "xla", explain=True).program()
    assert "Rewrote" not in compiled_rules("default", "xla").program()
    assert json.loads(json.dumps(why.as_json()))["rules"][0]["rule"] == why.rules[0].rule
    assert why.report.matches == hlo_opt.optimize(module, stats=True)[1].matches


def cli(tool: str, *args: str, cwd=None) -> subprocess.CompletedProcess:
    module = {"hlo-opt": "hlo_opt.tools.hlo_opt_cli", "hlo-equiv": "hlo_opt.tools.hlo_equiv"}
    return subprocess.run([sys.executable, "-m", module[tool], *args], capture_output=True,
                          text=True, timeout=600, cwd=cwd)


def write(tmp_path, name: str, body: str, head: str = HEAD) -> str:
    path = tmp_path / name
    path.write_text(head + body + "\n}\n")
    return str(path)


def test_bare_explain_reports_to_stderr_and_keeps_the_input(tmp_path):
    src = write(tmp_path, "in.hlo", ONES + "  ROOT m = f32[64,32] multiply(x, ones)")
    proc = cli("hlo-opt", "--explain", src)
    assert proc.returncode == 0, proc.stderr
    assert "ROOT" in proc.stdout and "mul_one" not in proc.stdout
    assert re.search(r"mul_one +\S*arithmetic\.rules:\d+", proc.stderr)


def test_explain_to_a_path_is_written_atomically_and_a_bad_path_is_one_line(tmp_path):
    src = write(tmp_path, "in.hlo", ONES + "  ROOT m = f32[64,32] multiply(x, ones)")
    out = tmp_path / "out"
    out.mkdir()
    (out / "why.txt").write_text("old")
    proc = cli("hlo-opt", src, f"--explain={out / 'why.txt'}", f"--explain={out / 'why.json'}")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert json.loads((out / "why.json").read_text())["fates"][0]["input"] == "one"
    proc = cli("hlo-opt", src, f"--explain={out / 'why.txt'}")
    assert (out / "why.txt").read_text().startswith("explain m ")
    assert sorted(os.listdir(out)) == ["why.json", "why.txt"]      # no temporary left
    proc = cli("hlo-opt", src, f"--explain={tmp_path / 'no' / 'such' / 'dir.txt'}")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "cannot write" in proc.stderr


def test_hlo_equiv_explains_with_a_chain_whose_rules_alone_prove_it(tmp_path):
    # d is dead: add_self_twice matches it, and the chain leaves it out
    a = write(tmp_path, "a.hlo", ONES + ZEROS + "  m = f32[64,32] multiply(x, ones)\n"
              "  d = f32[64,32] add(y, y)\n"
              "  n = f32[64,32] subtract(zs, y)\n  ROOT r = f32[64,32] add(m, n)")
    b = write(tmp_path, "b.hlo", "  ROOT r = f32[64,32] subtract(x, y)")
    proc = cli("hlo-equiv", a, b, "--explain")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("equivalent: proved")
    assert "1-minimal" in proc.stdout
    steps = re.findall(r"^  (\w+) \((\S+):(\d+)\), iteration (\d+):", proc.stdout, re.M)
    chain = [name for name, *_ in steps]
    assert set(chain) == {"mul_one", "sub_from_zero", "add_negate"}
    assert [int(it) for *_, it in steps] == sorted(int(it) for *_, it in steps)
    assert proc.stdout.rstrip().splitlines()[-2].strip() == "subtract(x, y)"  # last step: B
    compiled = compiled_rules("default", "xla")
    ma, mb = (hlo_opt.parse(open(p).read()) for p in (a, b))
    assert prove_equivalent(ma, mb, compiled.restricted(chain))[0]
    for dropped in chain:
        assert not prove_equivalent(ma, mb, compiled.restricted(
            [r for r in chain if r != dropped]))[0]
    for name, file, line in (s[:3] for s in steps):
        with open(file, encoding="utf-8") as f:      # relative to the working folder
            assert f.readlines()[int(line) - 1].startswith(f"rule {name}")


def test_a_chain_found_within_a_spent_budget_says_it_may_not_be_minimal():
    a = hlo_opt.parse(HEAD + ONES + "  m = f32[64,32] multiply(x, ones)\n"
                      "  d = f32[64,32] add(y, y)\n  ROOT r = f32[64,32] add(m, d)\n}\n")
    b = hlo_opt.parse(HEAD + "  d = f32[64,32] add(y, y)\n  ROOT r = f32[64,32] add(x, d)\n}\n")
    proved, report = prove_equivalent(a, b)
    fired = [name for name, n in report.matches.items() if n]
    assert proved and {"mul_one", "add_self_twice"} <= set(fired)
    chain = proof_chain(a, b, fired, max_trials=1)
    assert not chain.minimal and "NOT minimal" in chain.text()
    names = [s.rule for s in chain.steps]
    assert prove_equivalent(a, b, compiled_rules("default", "xla").restricted(names))[0]
    assert [s.rule for s in proof_chain(a, b, fired).steps] == ["mul_one"]


def test_programs_equal_up_to_common_subexpressions_need_no_rule(tmp_path):
    a = write(tmp_path, "a.hlo", "  a = f32[64,32] add(x, y)\n  b = f32[64,32] add(x, y)\n"
              "  ROOT r = f32[64,32] multiply(a, b)")
    b = write(tmp_path, "b.hlo", "  a = f32[64,32] add(x, y)\n  ROOT r = f32[64,32] multiply(a, a)")
    proc = cli("hlo-equiv", a, b, "--explain")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[1].startswith("no rule needed")
