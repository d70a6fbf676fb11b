"""The default rule set (rules/default/*.rules) as a whole: every rule passes the rule checker
in the mode it declares, known-unsound rules are still caught next to it, the rule set stays
small enough to load quickly, and the `redundancy` fixtures collapse."""
from __future__ import annotations

import collections
import os
import pathlib

import numpy as np
import pytest

import hlo_opt
from hlo_opt.rule_compiler.rule_analysis import analyze_rule
from hlo_opt.rule_compiler.rules import compile_rules, load_rule_set
from hlo_opt.rule_checker.soundness import check_rule
from hlo_opt.tools.hlo_equiv import first_difference, random_array

TESTS = pathlib.Path(__file__).parent
DEFAULT = load_rule_set(["default"]).rules
# Instances per rule: 30 check the whole set in ~15 s. Rare cases (an empty broadcast dim in
# a reduce) need hundreds: HLO_OPT_RULE_TRIALS=500 for a thorough run (a few minutes).
TRIALS = int(os.environ.get("HLO_OPT_RULE_TRIALS", "30"))


@pytest.mark.parametrize("rule", DEFAULT, ids=[r.name for r in DEFAULT])
def test_every_default_rule_is_sound_in_its_mode(rule):
    v = check_rule(analyze_rule(rule), TRIALS)
    assert v.status == "sound", f"{v.status}: {v.detail}"
    assert v.instances >= TRIALS // 3, "too few instances: the checker barely exercised it"


def test_known_unsound_rules_are_rejected_and_shipped_only_where_sound():
    # tests/rules/unsound.rules: rewrites that are wrong in the mode they claim. Where the
    # default set has a rule of the same name, it claims a weaker mode or adds a guard.
    unsound = load_rule_set([str(TESTS / "rules" / "unsound.rules")]).rules
    assert len(unsound) >= 8
    shipped = {r.name: r for r in DEFAULT}
    for rule in unsound:
        assert check_rule(analyze_rule(rule), TRIALS).status == "unsound", rule.name
        if rule.name in shipped:
            ours = shipped[rule.name]
            assert ours.mode != rule.mode or ours.guards, rule.name


def test_every_rule_declares_a_mode_and_files_open_with_a_heading():
    assert {r.mode for r in DEFAULT} == {"strict", "xla", "fast"}
    for path in (TESTS.parent / "rules" / "default").glob("*.rules"):
        assert path.read_text().startswith("# "), path.name


def test_the_compiled_set_stays_small_enough_to_load_quickly():
    # egglog loads ~1 ms of rule per 500 characters; rules over lists compile once per
    # combination of list lengths, so a careless rule can multiply this tenfold.
    compiled = compile_rules(load_rule_set(["default"]), "fast")
    per_rule = collections.Counter(r.name for r in compiled.rule_names.values())
    assert len(compiled.rule_names) < 1200
    assert max(per_rule.values()) <= 64, per_rule.most_common(3)
    assert len(compiled.program()) < 900_000


CORPUS = [p for p in sorted((TESTS / "corpus").rglob("*.hlo"))
          if not p.name.endswith(".xla_opt.hlo")]


@pytest.mark.parametrize("path", CORPUS, ids=[str(p.relative_to(TESTS / "corpus")) for p in CORPUS])
def test_the_most_permissive_mode_still_saturates_on_the_corpus(path):
    # --fp-mode=fast runs every rule; a rule that feeds on its own results (regrouping
    # constants once x*0 = 0 holds) shows up here as a run that stops at a limit.
    module = hlo_opt.parse(path.read_text(), str(path))
    _, report = hlo_opt.optimize(module, rules="default", fp_mode="fast", time_limit=20,
                                 stats=True)
    assert report.stop == "saturated", (report.stop, report.matches.most_common(3))


# --- the redundancy fixtures --------------------------------------------------------------

def _optimized(name: str, fp_mode: str) -> tuple[hlo_opt.Module, hlo_opt.Module]:
    path = TESTS / "corpus" / "shared" / name
    module = hlo_opt.parse(path.read_text(), str(path))
    out = hlo_opt.parse(hlo_opt.optimize(module, rules="default", fp_mode=fp_mode,
                                                 fusion=False).to_text())
    rng = np.random.default_rng(3)
    args = [random_array(p.shape, rng, edges=fp_mode != "fast") for p in module.entry.parameters]
    assert first_difference(hlo_opt.evaluate(module, args), hlo_opt.evaluate(out, args)) is None
    return module, out


def _ops(m: hlo_opt.Module) -> collections.Counter:
    return collections.Counter(i.opcode for i in m.entry.instructions)


def _splat(inst) -> float | None:
    if inst.opcode == "broadcast" and inst.operands[0].opcode == "constant":
        inst = inst.operands[0]
    return float(inst.literal) if inst.opcode == "constant" and inst.shape.rank == 0 else None


def _no_duplicates(m: hlo_opt.Module) -> None:
    seen = set()
    for i in m.entry.instructions:
        if i.opcode in ("parameter", "tuple"):
            continue
        key = (i.opcode, i.shape.to_text(False), tuple(o.name for o in i.operands),
               repr(sorted((k, repr(v)) for k, v in i.attrs.items())), repr(i.literal))
        assert key not in seen, f"duplicate {i.opcode} {i.name}"
        seen.add(key)


@pytest.mark.parametrize("name", ["redundancy_small.hlo", "redundancy_raw_small.hlo"])
def test_redundancy_fixtures_collapse(name):
    module, out = _optimized(name, "xla")
    before, after = _ops(module), _ops(out)
    assert after["transpose"] == 0 and after["reshape"] == 0 and after["copy"] == 0
    assert after["slice"] == 0 and after["concatenate"] == 0 and after["convert"] == 0
    assert after["negate"] == 0                                       # -(-y)
    assert after["reduce"] == 1         # of three: one of a broadcast, two copies of one
    assert all(i.operands[0].opcode != "broadcast" for i in out.entry.instructions
               if i.opcode == "reduce")
    _no_duplicates(out)                                               # x+y, exp(x), x*2 once
    for inst in out.entry.instructions:                               # no x*1, x+0
        if inst.opcode in ("multiply", "divide"):
            assert all(_splat(o) != 1 for o in inst.operands[1 if inst.opcode == "divide" else 0:])
        if inst.opcode in ("add", "subtract"):
            assert all(_splat(o) != 0 for o in inst.operands[1 if inst.opcode == "subtract" else 0:])
    assert sum(after.values()) < sum(before.values())


@pytest.mark.parametrize("name", ["redundancy_small.hlo", "redundancy_raw_small.hlo"])
def test_redundancy_fixtures_collapse_further_for_real_numbers(name):
    # x/x, log(exp(x)), x - x and (a + y) - y need --fp-mode=fast: NaN, inf and overflow.
    _, xla = _optimized(name, "xla")
    _, fast = _optimized(name, "fast")
    assert _ops(xla)["divide"] == 2 and _ops(xla)["log"] == 1
    assert _ops(fast)["divide"] == 0 and _ops(fast)["log"] == 0 and _ops(fast)["subtract"] == 0
    assert len(fast.entry.instructions) < len(xla.entry.instructions)


@pytest.mark.parametrize("target", ["Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape"])
def test_sharding_annotations_vanish_on_one_device(target):
    """JAX's sharding annotations (beside a typed PRNG key, for one) are the identity on
    one device: optimized away, the values unchanged."""
    text = f"""HloModule m
ENTRY e {{
  x = f32[4,3] parameter(0)
  s = f32[4,3] custom-call(x), custom_call_target="{target}", sharding={{replicated}}
  ROOT y = f32[4,3] multiply(s, s)
}}
"""
    optimized = hlo_opt.optimize(text)
    assert not any(i.opcode == "custom-call" for i in optimized.instructions())
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    for module in (text, optimized):
        np.testing.assert_array_equal(hlo_opt.evaluate(module, [x])[0], x * x)
