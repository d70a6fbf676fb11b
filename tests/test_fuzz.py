"""Fuzzing: corpus modules with small seeded edits (tools/fuzz_mutate.py) go through parse ->
optimize -> compile -> run and the interpreter (tools/fuzz_case.py), each in a worker
subprocess (tools/fuzz_pool.py), so that a case that crashes is a failure of this test, not
the end of the test run. Every case must end in success or an HloError.

The long run is the command-line tool: `python -m hlo_opt.tools.fuzz --cases 3000`.
"""
from __future__ import annotations

import os

import pytest

import hlo_opt
from conftest import CORPUS
from hlo_opt.tools.fuzz import load_sources
from hlo_opt.tools.fuzz_case import Outcome, run_case
from hlo_opt.tools.fuzz_minimize import minimize
from hlo_opt.tools.fuzz_mutate import EDITS, Mutator, parse_instruction
from hlo_opt.tools.fuzz_pool import Pool
from hlo_opt.verifier import verify

SEED = 0
CASES = 300             # 20 to 60 seconds on two cores
SHOWN = 3               # bad cases whose text a failure prints


@pytest.fixture(scope="module")
def mutator() -> Mutator:
    folders = [CORPUS, CORPUS.parent.parent / "examples"]
    return Mutator(load_sources([os.path.relpath(f) for f in folders], 400))


# --- the mutator ---------------------------------------------------------------------------

def test_a_case_is_the_same_for_the_same_seed_and_index(mutator):
    assert mutator.case(5, 11) == mutator.case(5, 11)
    assert len({mutator.case(5, i).text for i in range(20)}) == 20


def test_every_case_changes_its_source_and_says_how(mutator):
    for i in range(100):
        case = mutator.case(SEED, i)
        assert case.text != mutator.sources[case.source]
        assert 1 <= len(case.edits) <= 3


def test_every_kind_of_edit_is_made(mutator):
    made = " ".join(e for i in range(300) for e in mutator.case(SEED, i).edits)
    for words in ("deleted", "copied", "swapped", "number", "literal", "dtype", "shape",
                  "dimensions", "opcode", "operand", "dropped"):
        assert words in made, words
    assert len(EDITS) == 11


def test_instruction_lines_come_apart_and_back_together(mutator):
    for text in mutator.sources.values():
        for line in text.split("\n"):
            inst = parse_instruction(line)
            if inst:
                assert inst.text().strip() == line.strip()


# --- one case ------------------------------------------------------------------------------

def test_a_valid_module_runs_and_agrees_with_the_interpreter():
    text = """HloModule m
ENTRY e {
  x = f32[4] parameter(0)
  y = f32[4] exponential(x)
  ROOT z = f32[4] add(x, y)
}"""
    outcome = run_case(text)
    assert (outcome.kind, outcome.verified) == ("ok", True)


def test_the_verifiers_verdict_is_recorded_beside_the_outcome():
    text = """HloModule m
ENTRY e {
  x = f32[4] parameter(0)
  ROOT y = f32[5] negate(x)
}"""
    assert run_case(text).verified is False


def test_a_parse_error_ends_the_case_at_the_parser():
    outcome = run_case("HloModule m\nENTRY e {\n  ROOT x = f32[4] parameter(\n}")
    assert (outcome.kind, outcome.stage, outcome.verified) == ("hlo_error", "parse", None)


def test_only_a_module_may_run_forever_not_the_compiler():
    assert Outcome("timeout", "run").accepted
    assert not Outcome("timeout", "optimize").accepted
    assert not Outcome("crash", "run").accepted


# --- the worker pool -----------------------------------------------------------------------

def test_a_worker_that_dies_is_a_crash_and_is_replaced():
    valid = "HloModule m\nENTRY e {\n  ROOT x = f32[2] parameter(0)\n}"
    # 64 MiB of address space is too little for the worker to start: it dies at once.
    with Pool(jobs=1, timeout=60, memory_bytes=64 << 20) as pool:
        outcomes = dict(pool.run([(0, valid, 0), (1, valid, 0)]))
    assert {o.kind for o in outcomes.values()} == {"crash"}
    assert "exited with status" in outcomes[0].detail
    assert "MemoryError" in outcomes[0].trace


def test_a_case_past_the_time_limit_is_a_timeout():
    valid = "HloModule m\nENTRY e {\n  ROOT x = f32[2] parameter(0)\n}"
    with Pool(jobs=1, timeout=0.01) as pool:
        [(key, outcome)] = list(pool.run([("k", valid, 0)]))
    assert (key, outcome.kind) == ("k", "timeout")


# --- the fuzz run --------------------------------------------------------------------------

def test_mutated_modules_end_in_success_or_an_hlo_error(mutator):
    cases = {i: mutator.case(SEED, i) for i in range(CASES)}
    # Wrong results are suspects, not failures: either answer is right for a reducer an edit
    # made non-associative; the tool lists them for a look.
    with Pool(jobs=2, timeout=60) as pool:
        bad = [(cases[i], o) for i, o in pool.run((i, c.text, i) for i, c in cases.items())
               if not o.accepted and not o.suspect]
    summary = "\n".join(f"{case.label}\n  {o.kind} at {o.stage} (verified: {o.verified}): "
                        f"{o.cause}: {o.detail}" for case, o in bad)
    texts = "\n\n".join(case.text for case, _ in bad[:SHOWN])
    assert not bad, (f"{len(bad)} of {CASES} cases ended badly (python -m hlo_opt.tools.fuzz "
                     f"--seed {SEED} --case I runs case I alone):\n{summary}\n\n"
                     f"the first {min(SHOWN, len(bad))}:\n{texts}")


# --- shrinking -----------------------------------------------------------------------------

def test_a_bad_case_shrinks_to_the_instructions_its_failure_needs():
    text = """HloModule big, entry_computation_layout={(f32[4])->f32[4]}

unused {
  a = f32[] parameter(0)
  ROOT b = f32[] negate(a)
}

ENTRY e (x: f32[4]) -> f32[4] {
  x = f32[4] parameter(0)
  y = f32[4] exponential(x)
  z = f32[4] negate(y)
  ROOT w = f32[4] add(z, x)
}"""

    def fails(candidate: str) -> bool:      # the "bug": an exponential in a valid module
        try:
            verify(hlo_opt.parse(candidate))
        except hlo_opt.HloError:
            return False
        return "exponential" in candidate

    small = minimize(text, fails)
    assert small.split() == """HloModule m
ENTRY e {
  x = f32[4] parameter(0)
  ROOT y = f32[4] exponential(x)
}""".split()
