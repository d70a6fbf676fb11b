"""Random well-typed programs, optimized with the default rules, compute what they computed.

Programs come from random_programs.programs(). Each is optimized for cpu or gpu, with
fusion, in fp mode strict and xla; the optimized text must parse again (and in XLA, where jax
is installed), and run in the interpreter on random inputs and on inputs half made of edge
values (NaN, ±inf, ±0, denormals, integer extremes). The outputs compare as the rule checker
compares the two sides of a rule (rule_checker/soundness.py): strict bit for bit with any NaN equal
to any NaN, xla the same except that -0 equals +0. A program whose ops make a zero's sign
matter beyond a zero result (1 / -0 = -inf) is checked in strict mode only.

And the programs must be worth optimizing: most are rewritten, by many different rules.
"""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import hlo_opt
from hlo_opt import xla_oracle
from hlo_opt.rule_checker.soundness import fill, first_mismatch
from hlo_opt.tools.hlo_equiv import random_array
from random_programs import Program, programs

EXAMPLES = 300


# --- the property --------------------------------------------------------------------------

def inputs(module: hlo_opt.Module, rng) -> list[list[np.ndarray]]:
    """One random set of arguments, then two half made of edge values."""
    shapes = [p.shape for p in module.entry.parameters]
    return [[random_array(s, rng, edges=False) for s in shapes]] + \
        [[fill(s, "strict", rng) for s in shapes] for _ in range(2)]


def check_equivalent(original, optimized, mode: str, rng) -> None:
    for args in inputs(original, rng):
        expected, got = hlo_opt.evaluate(original, args), hlo_opt.evaluate(optimized, args)
        assert len(expected) == len(got)
        for i, (a, b) in enumerate(zip(expected, got)):
            where = first_mismatch(np.asarray(a), np.asarray(b), mode)
            assert where is None, (f"output {i} differs at {where} in fp mode {mode}\n"
                                   f"arguments: {args}\nexpected: {a}\ngot: {b}\n"
                                   f"optimized:\n{optimized.to_text()}")


def optimized_programs_agree(program: Program, target: str) -> set[str]:
    """Optimize in each fp mode the program allows and compare; the rules that fired."""
    module = hlo_opt.parse(program.text, "random")
    rng = np.random.default_rng(0)
    fired = set()
    for mode in ("strict",) if program.zero_sign_sensitive else ("strict", "xla"):
        out, report = hlo_opt.optimize(module, fp_mode=mode, target=target, stats=True)
        fired |= {rule for rule, n in report.matches.items() if n}
        text = out.to_text()
        again = hlo_opt.parse(text, "optimized")
        if mode == "strict" and xla_oracle.available():
            xla_oracle.parse(text)
        check_equivalent(module, again, mode, rng)
    return fired


def test_random_programs_keep_their_meaning_when_optimized():
    rewritten = []                      # per program, the rules that fired
    rules_seen: Counter = Counter()

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(programs(), st.sampled_from(["cpu", "cpu", "gpu"]))
    def check(program: Program, target: str):
        fired = optimized_programs_agree(program, target)
        rewritten.append(bool(fired))
        rules_seen.update(fired)

    check()
    # A generator the rules never match tests nothing: most programs must be rewritten,
    # by many different rules.
    assert sum(rewritten) >= 0.8 * len(rewritten), f"{sum(rewritten)} of {len(rewritten)}"
    assert len(rules_seen) >= 80, sorted(rules_seen)


# --- what the random programs found, kept as fixed examples ----------------------------------

def entry(body: str) -> hlo_opt.Module:
    return hlo_opt.parse(f"HloModule m\nENTRY main {{\n{body}\n}}\n")


def test_an_empty_folded_constant_prints_as_text_that_parses():
    out = hlo_opt.optimize(entry("""
  p0 = pred[1,0,2] parameter(0)
  v = pred[1,0,2] compare(p0, p0), direction=EQ
  ROOT c = pred[2,0,2] concatenate(v, v), dimensions={0}"""), fp_mode="strict")
    assert hlo_opt.parse(out.to_text()).entry.root.shape.dims == (2, 0, 2)


def test_a_root_that_folds_to_a_scalar_constant_survives_fusion():
    out = hlo_opt.optimize(entry("""
  p0 = pred[] parameter(0)
  t = pred[] constant(true)
  ROOT r = pred[] or(p0, t)"""), target="cpu")
    assert out.entry.root.opcode == "constant"


def test_power_of_a_scalar_is_the_power_of_a_broadcast():
    splat = entry("""
  p0 = f32[] parameter(0)
  h = f32[] constant(0.5)
  b = f32[2] broadcast(p0), dimensions={}
  hb = f32[2] broadcast(h), dimensions={}
  ROOT r = f32[2] power(b, hb)""")
    scalar = entry("""
  p0 = f32[] parameter(0)
  h = f32[] constant(0.5)
  r = f32[] power(p0, h)
  ROOT b = f32[2] broadcast(r), dimensions={}""")
    for x in (-np.inf, -0.0):
        args = [np.array(x, np.float32)]
        [a], [b] = hlo_opt.evaluate(splat, args), hlo_opt.evaluate(scalar, args)
        assert first_mismatch(a, b, "strict") is None, (x, a, b)


@pytest.mark.parametrize("op", ["slice(p0), slice={}", "reverse(p0), dimensions={}",
                                "convert(p0)"])
def test_rank_0_data_movement_runs_in_the_interpreter(op):
    result = "pred[]" if op.startswith("convert") else "f32[]"
    module = entry(f"  p0 = f32[] parameter(0)\n  ROOT r = {result} {op}")
    assert hlo_opt.evaluate(module, [np.array(1.5, np.float32)])[0].shape == ()
