"""The rule checker: known-unsound rules are rejected with a counterexample, sound ones pass,
modes change the verdict where they should, instances are built to fit the guards, and rules
without enough instances are never passed."""
from __future__ import annotations

import pathlib

import numpy as np
import pytest

from hlo_opt.rule_checker.instance_plan import InstancePlan
from hlo_opt.rule_checker.instantiate import Instantiator, Reject
from hlo_opt.rule_compiler.rule_analysis import analyze_rule
from hlo_opt.rule_compiler.rules import load_rule_set
from hlo_opt.rule_checker.soundness import check_rule, check_rule_file, first_mismatch
from hlo_opt.grammar.rules_parser import rules_from_text
from hlo_opt.tools.hlo_rules import main

RULES = pathlib.Path(__file__).parent / "rules"
TRIALS = 40


def verdict(text: str, trials: int = TRIALS):
    (rule,) = rules_from_text(text, "t.rules").rules
    return check_rule(analyze_rule(rule), trials)


UNSOUND = load_rule_set([str(RULES / "unsound.rules")]).rules
SOUND = load_rule_set([str(RULES / "basic.rules"), str(RULES / "shapes.rules")]).rules


@pytest.mark.parametrize("rule", UNSOUND, ids=[r.name for r in UNSOUND])
def test_known_unsound_rules_are_rejected_with_a_counterexample(rule):
    v = check_rule(analyze_rule(rule), TRIALS)
    assert v.status == "unsound"
    assert "left side:" in v.detail and "right side:" in v.detail


@pytest.mark.parametrize("rule", SOUND, ids=[r.name for r in SOUND])
def test_sound_rules_pass(rule):
    v = check_rule(analyze_rule(rule), TRIALS)
    assert v.status == "sound", v.detail
    assert v.instances >= TRIALS // 2


def test_counterexample_shows_modules_inputs_and_outputs():
    v = verdict("rule add_zero [strict]: add(x, 0) => x")
    assert v.status == "unsound"
    assert "add(" in v.detail and "parameter 0 = " in v.detail
    assert "left gives" in v.detail and "right gives" in v.detail
    assert "first difference at index" in v.detail and "-0" in v.detail


@pytest.mark.parametrize("text,status", [
    ("rule r [strict]: add(x, 0) => x", "unsound"),            # -0 + 0 = +0
    ("rule r [xla]: add(x, 0) => x", "sound"),                 # the sign of zero may differ
    ("rule r [strict]: add(x, -0) => x", "sound"),
    ("rule r [xla]: multiply(x, 0) => zeros_like(x)", "unsound"),     # NaN, inf
    ("rule r [fast]: multiply(x, 0) => zeros_like(x)", "sound"),
    ("rule r [strict]: add(add(x, y), y) => add(x, multiply(y, 2))", "unsound"),
    ("rule r [fast]: add(add(x, y), y) => add(x, multiply(y, 2))", "sound"),
    ("rule r [fast]: divide(x, x) => ones_like(x) when is_float(x)", "sound"),
    ("rule r [fast]: divide(x, x) => ones_like(x)", "unsound"),      # integers: 0/0 = -1
    ("rule r [strict]: maximum(x, x) => x", "sound"),
    ("rule r [strict]: multiply(x, 1) => x", "sound"),
    ("rule r [strict]: negate(negate(x)) => x", "sound"),
    ("rule r [strict]: subtract(x, x) => zeros_like(x) when is_int(x)", "sound"),
    ("rule r [strict]: subtract(x, x) => zeros_like(x)", "unsound"),
    ("rule r [strict]: transpose(transpose(x, dimensions=p), dimensions=q)"
     " => transpose(x, dimensions=compose(p, q))", "sound"),
    ("rule r [strict]: transpose(transpose(x, dimensions=p), dimensions=q)"
     " => transpose(x, dimensions=compose(q, p))", "unsound"),
    ("rule r [strict]: reverse(x, dimensions=d) => x", "unsound"),
    ("rule r [strict]: reverse(x, dimensions=d) => x when size(d) == 0", "sound"),
    ("rule r [strict]: reshape(x) => x", "sound"),     # only where the types agree
])
def test_verdicts_depend_on_the_mode(text, status):
    v = verdict(text)
    assert v.status == status, v.detail


def test_rules_without_instances_are_not_checked():
    v = verdict("rule r: negate(x) => x when is_int(x) and is_float(x)")
    assert v.status == "unchecked" and "no element type satisfies the guards" in v.detail
    v = verdict("rule r: negate(x) => x when rank(x) == 2 and rank(x) == 3")
    assert v.status == "unchecked" and "guards" in v.detail
    v = verdict("rule r: get-tuple-element(x, index=0) => x")
    assert v.status == "unchecked"


def test_a_handful_of_instances_is_not_a_check():
    # dims == {3,1,4} is drawn about once in a hundred tries: the few instances that pass
    # do not make the rule "ok".
    v = verdict("rule r [strict]: negate(negate(x)) => x when dims(x) == {3, 1, 4}", trials=100)
    assert v.status == "unchecked", v.detail
    assert "passing instances (needs 33)" in v.detail


@pytest.mark.parametrize("text,status", [
    # one f32 -> s32 -> f32 chain in ~80 random draws before instances were built to fit
    ("rule r [fast]: convert(convert(x, as=m)) => x when dtype(x) == f32 and dtype(m) == s32",
     "unsound"),
    ("rule r [strict]: negate(x) => x when rank(x) == 9", "unsound"),
    ("rule r [strict]: convert(convert(x, as=m)) => x when dtype(x) == s8 and dtype(m) == s4",
     "unsound"),
    ("rule r [strict]: add(x, x) => multiply(x, 2) when dtype(x) == s4", "sound"),   # wraps alike
    # one shape only (f8e4m3fn[]): checked many times, never new, so a check
    ("rule r [strict]: add(x, x) => multiply(x, 2) when dtype(x) == f8e4m3fn and is_scalar(x)",
     "sound"),
])
def test_instances_are_built_to_satisfy_the_guards(text, status):
    v = verdict(text, trials=100)
    assert v.status == status, v.detail
    if status == "sound":
        assert v.instances == 100
    else:
        assert "parameter 0 = " in v.detail and "right gives" in v.detail


def test_element_type_choices_cover_what_the_guards_accept():
    v = verdict("rule r [strict]: add(x, 0) => x when is_int(x)", trials=60)
    assert v.status == "sound", v.detail
    assert "10 of 10 element-type choices" in v.detail     # s4, u4, s8, ... u64
    entries = _instances("rule r: add(x, y) => add(y, x) when is_int(x)", draws=200,
                         guided=True)
    types = {e.root.shape.element_type for e in entries}
    assert {"s4", "u4", "s8", "s32", "u64"} <= types and not types - {
        "s4", "u4", "s8", "u8", "s16", "u16", "s32", "u32", "s64", "u64"}


def _instances(text: str, draws: int = 300, guided: bool = False):
    """Left sides the checker draws for a rule (entry computations); `guided`: with the
    pins its guards ask for, as the checker draws them."""
    (rule,) = rules_from_text(text, "t.rules").rules
    ir, rng, out = analyze_rule(rule), np.random.default_rng(0), []
    plan = InstancePlan(ir)
    for k in range(draws):
        pins = plan.pins(plan.choices[k % len(plan.choices)], rng) if guided else None
        try:
            out.append(Instantiator(ir, rng, pins=pins).run().lhs.entry)
        except Reject:
            pass
    return out


def test_op_class_instances_use_members_that_accept_the_element_type():
    entries = _instances("rule r: binary(x, y) => binary(x, y)")
    assert len(entries) >= 250                  # no draws wasted on shift-left of floats
    assert len({e.root.opcode for e in entries}) >= 10


def test_concatenate_operands_are_drawn_to_fit():
    entries = _instances("rule r: concatenate(a, b) => a when dims(a) == dims(root)")
    assert len(entries) >= 20                   # b empty along the concatenated dim
    assert all(e.root.operands[1].shape.num_elements == 0 for e in entries)


def test_dots_get_batch_and_contracting_dims_of_equal_size():
    entries = _instances("rule r: dot(x, y) => dot(x, y)")
    attrs = [e.root.attrs for e in entries]
    assert any(a["lhs_batch_dims"] for a in attrs)
    assert sum(len(a["lhs_contracting_dims"]) == 1 for a in attrs) > len(attrs) // 5


def test_convolutions_get_labels_features_and_windows_that_fit():
    entries = _instances("rule r: convolution(x, y) => convolution(x, y)")
    assert len(entries) >= 20
    for e in entries:
        lhs, rhs = (o.shape for o in e.root.operands)
        labels, window = e.root.attrs["dim_labels"], e.root.attrs.get("window")
        assert lhs.dims[labels.lhs_feature] == rhs.dims[labels.rhs_input_feature]
        assert window is None or window.size == tuple(rhs.dims[d] for d in labels.rhs_spatial)
    assert any(e.root.attrs.get("window") is not None for e in entries)


def test_rules_with_aliases_shapes_and_computed_constants_are_checked():
    v = verdict("rule r [strict]: reduce(broadcast(x, dimensions=d, as=b), 0, dimensions=r,"
                ' to_apply="add") => multiply(x, product(compose(dims(b), r)))'
                " when is_int(x) and r == complement(d, rank(b)) and dims(x) == dims(root)")
    assert v.status == "sound", v.detail
    v = verdict("rule r [strict]: reduce(broadcast(x, dimensions=d, as=b), 0, dimensions=r,"
                ' to_apply="add") => multiply(x, plus(product(compose(dims(b), r)), 1))'
                " when is_int(x) and r == complement(d, rank(b)) and dims(x) == dims(root)")
    assert v.status == "unsound"                # one copy too many
    v = verdict("rule r [strict]: reverse(x, dimensions=d) => reshape(reshape(x, "
                "shape=iota(0))) when num_elements(x) == 1")
    assert v.status == "sound", v.detail


@pytest.mark.parametrize("text,status", [
    ("rule r [strict]: divide(x, c) => shift-right-logical(x, log2(c)) when is_unsigned(x)",
     "sound"),
    ("rule r [strict]: divide(x, c) => shift-right-arithmetic(x, log2(c)) when is_signed(x)",
     "unsound"),                                    # -7 / 2 = -3, -7 >> 1 = -4
    ("rule r [strict]: remainder(x, c) => and(x, c) when is_unsigned(x) and log2(c) >= 0",
     "unsound"),                                    # the mask is c - 1
])
def test_constants_a_function_reads_are_drawn_where_it_has_a_value(text, status):
    v = verdict(text, trials=60)
    assert v.status == status, v.detail
    if status == "sound":
        assert v.instances == 60


def test_fp_mode_skips_rules_it_would_not_run():
    rule_file = rules_from_text("rule a [fast]: multiply(x, 0) => zeros_like(x)\n"
                                "rule b [strict]: negate(negate(x)) => x", "t.rules")
    statuses = [v.status for v in check_rule_file(rule_file, "xla", trials=10)]
    assert statuses == ["skipped", "sound"]


def test_first_mismatch_per_mode():
    a = np.array([np.nan, -0.0, 1.0], np.float32)
    b = np.array([-np.nan, 0.0, 1.0], np.float32)
    assert first_mismatch(a, b, "strict") == (1,)
    assert first_mismatch(a, b, "xla") is None
    assert first_mismatch(np.array([1.0, np.inf]), np.array([1.0 + 1e-12, 0.0]), "fast") is None
    assert first_mismatch(np.array([1.0]), np.array([1.1]), "fast") == (0,)
    # a cancelling sum of large terms: errors count relative to the inputs' magnitude
    assert first_mismatch(np.array([0.05]), np.array([0.0]), "fast") == (0,)
    assert first_mismatch(np.array([0.05]), np.array([0.0]), "fast", magnitude=1e8) is None
    assert first_mismatch(np.array([3], np.int32), np.array([4], np.int32), "fast") == (0,)


def test_cli_exit_codes(tmp_path, capsys):
    assert main(["check", str(RULES / "basic.rules"), "--trials", "10"]) == 0
    assert "9 sound, 0 unsound" in capsys.readouterr().out
    assert main(["check", str(RULES / "unsound.rules"), "--trials", "10"]) == 1
    out = capsys.readouterr().out
    assert "UNSOUND     add_pos_zero [strict] at" in out and "right gives" in out
    unchecked = tmp_path / "u.rules"
    unchecked.write_text("rule r: negate(x) => x when is_int(x) and is_float(x)\n")
    assert main(["check", str(unchecked), "--trials", "5"]) == 1
    out = capsys.readouterr().out
    assert "NOT CHECKED r [xla] at" in out and "0 sound, 0 unsound, 1 not checked" in out
    assert main(["check", str(unchecked), "--trials", "5", "--allow-unchecked"]) == 0
    bad = tmp_path / "bad.rules"
    bad.write_text("rule r: negate(x) => y\n")
    assert main(["check", str(bad)]) == 2
    assert f"{bad}:1:22: rule r: unbound variable 'y'" in capsys.readouterr().err
    assert main(["list", "--rules", str(RULES / "basic.rules"), "--fp-mode", "strict"]) == 0
    listed = capsys.readouterr().out
    assert "mul_one [strict]" in listed and "mul_zero_int" not in listed


@pytest.mark.parametrize("text,status", [
    ("rule r [strict]: bitcast(bitcast(x)) => bitcast(x)", "sound"),
    ("rule r [strict]: bitcast(x) => reshape(x)", "unsound"),       # not row-major bytes
    ('rule r [strict]: custom-call(x, custom_call_target="LayoutConstraint") => copy(x)', "sound"),
    ('rule r [strict]: custom-call(x, custom_call_target="LayoutConstraint") => bitcast(x)',
     "unsound"),
    ('rule r [strict]: custom-call(x, custom_call_target="Sharding") => copy(x)', "sound"),
    ('rule r [strict]: custom-call(x, custom_call_target="Sharding") => bitcast(x)', "unsound"),
])
def test_bitcasts_and_layout_constraints_are_drawn_in_other_layouts(text, status):
    v = verdict(text, trials=100)
    assert v.status == status, v.detail


@pytest.mark.parametrize("text, status", [
    # XLA clamps a start so the window fits: a slice at the unclamped start is not it.
    ("rule r [strict]: dynamic-slice(x, i..., dynamic_slice_sizes=s) => slice(x, "
     "start=min_each(starts(i), minus_each(dims(x), s)), limit=plus_each(min_each(starts(i), "
     "minus_each(dims(x), s)), s), stride=fill(rank(x), 1))", "unsound"),
    ("rule r [strict]: dynamic-slice(x, i..., dynamic_slice_sizes=s) => slice(x, "
     "start=clamp_starts(starts(i), dims(x), s), limit=plus_each(clamp_starts(starts(i), "
     "dims(x), s), s), stride=fill(rank(x), 1))", "sound"),
    # Both windows clamp alike: the slice writes back what it read.
    ("rule r [strict]: dynamic-update-slice(x, dynamic-slice(x, i..., "
     "dynamic_slice_sizes=s), i...) => x", "sound"),
    ("rule r [strict]: dynamic-slice(transpose(x, dimensions=p), i..., dynamic_slice_sizes=s)"
     " => transpose(dynamic-slice(x, pick(i, p)..., dynamic_slice_sizes=compose(s, invert(p)))"
     ", dimensions=p)", "unsound"),
])
def test_start_indices_are_drawn_inside_and_outside_the_window_range(text, status):
    v = verdict(text, trials=100)
    assert v.status == status, v.detail


@pytest.mark.parametrize("text, status", [
    # The update is drawn after the operand, to fit it, whatever term it is.
    ("rule r [strict]: dynamic-update-slice(x, u, i...) => x", "unsound"),
    ("rule r [strict]: dynamic-update-slice(x, negate(negate(u)), i...)"
     " => dynamic-update-slice(x, u, i...)", "sound"),
])
def test_a_dynamic_update_slice_update_is_drawn_to_fit_its_operand(text, status):
    v = verdict(text, trials=100)
    assert v.status == status, v.detail
