"""The rule checker: is each rule sound in the floating-point mode it declares?

For every rule it draws instances (instantiate.py), fills the parameters with edge values
(NaN, ±inf, −0.0, denormals, integer min/max, 0, ±1) mixed with random ones, evaluates both
sides with the reference interpreter and compares them as the mode says:

    strict  bit for bit, any NaN equal to any NaN
    xla     the same, except that -0 equals +0
    fast    finite moderate inputs; where the left side is finite, equal up to a relative
            tolerance (where it is not, the rule may assume anything)

Integers and pred compare exactly in every mode. Instances are built to satisfy the rule's
element-type and rank guards (instance_plan.py). A rule is "ok" only after enough passing
instances (Coverage.shortfall: a third of the trials, several distinct); with fewer it is
"NOT CHECKED", never passed.
"""
from __future__ import annotations

import zlib
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from .. import evaluate
from ..dtypes import float_info, from_numpy, int_info
from ..errors import HloError, UnsupportedError
from ..grammar.rules_parser import Rule, RuleFile, to_text
from ..ir import Computation
from ..printer import format_literal
from ..shape import Shape, array
from .instance_plan import InstancePlan
from .instantiate import IllTyped, Instance, Instantiator, Reject, indent
from ..rule_compiler.rule_analysis import analyze_rule
from ..rule_compiler.rule_ir import RuleIR
from ..rule_compiler.rules import mode_allows

INPUT_SETS = 8          # input fillings per instance
ATTEMPTS_PER_TRIAL = 20
MIN_DISTINCT = 8        # distinct passing instances a check needs (see Coverage.shortfall)
# Relative tolerance of fast mode; other float types (f8, ...): FAST_EPSILONS of their own
# epsilon, a few roundings of a reassociated sum.
FAST_RTOL = {"f16": 1e-2, "bf16": 4e-2, "f32": 1e-4, "f64": 1e-9}
FAST_EPSILONS = 4


@dataclass
class Verdict:
    rule: Rule
    status: str         # "sound", "unsound", "unchecked" or "skipped"
    instances: int
    detail: str = ""


def check_rule_file(rule_file: RuleFile, fp_mode: str = "fast", trials: int = 100,
                    seed: int = 0) -> list[Verdict]:
    """Every rule of the file: checked in its own mode, or skipped when fp_mode excludes it."""
    out = []
    for rule in rule_file.rules:
        ir = analyze_rule(rule)
        if not mode_allows(rule.mode, fp_mode):
            out.append(Verdict(rule, "skipped", 0, f"needs --fp-mode={rule.mode}"))
        else:
            out.append(check_rule(ir, trials, seed))
    return out


def check_rule(ir: RuleIR, trials: int = 100, seed: int = 0) -> Verdict:
    """Unsound at the first counterexample; sound when up to `trials` passing instances
    cover enough (Coverage.shortfall); otherwise not checked."""
    rule = ir.rule
    rng = np.random.default_rng([seed, zlib.crc32(rule.name.encode())])
    plan = InstancePlan(ir)
    if plan.unsatisfiable:
        return Verdict(rule, "unchecked", 0, plan.unsatisfiable)
    choices = [plan.choices[i] for i in rng.permutation(len(plan.choices))]
    values = lambda shape, r: fill(shape, rule.mode, r)     # noqa: E731
    reasons: Counter = Counter()
    cover = Coverage()
    attempts = 0
    while cover.checked < trials and attempts < trials * ATTEMPTS_PER_TRIAL:
        k = attempts % len(choices)         # every accepted combination in turn
        attempts += 1
        try:
            inst = Instantiator(ir, rng, values, plan.pins(choices[k], rng)).run()
        except Reject as r:
            reasons[str(r)] += 1
            continue
        except IllTyped as e:
            return Verdict(rule, "unsound", cover.checked, str(e))
        outcome, detail = compare_sides(inst, rule.mode, rng)
        if outcome == "differ":
            return Verdict(rule, "unsound", cover.checked, detail)
        if outcome == "no verdict":
            reasons[detail] += 1
        else:
            cover.add(inst, k)
    summary = cover.summary(len(choices))
    why = cover.shortfall(trials)
    if why:
        top = ", ".join(f"{reason} ×{n}" for reason, n in reasons.most_common(3))
        return Verdict(rule, "unchecked", cover.checked,
                       f"{why} in {attempts} draws ({summary}){'; ' + top if top else ''}")
    return Verdict(rule, "sound", cover.checked, summary)


def compare_sides(inst: Instance, mode: str, rng) -> tuple[str, str]:
    """("same", ""), ("differ", counterexample) or ("no verdict", why) over INPUT_SETS
    fillings of the parameters."""
    for _ in range(INPUT_SETS):
        args = [fill(shape, mode, rng) for shape in inst.params]
        try:
            lefts = evaluate(inst.lhs, args)
        except HloError as e:
            return "no verdict", f"left side does not evaluate ({e.message.split(':')[0]})"
        except Exception as e:          # an interpreter bug: no verdict from this draw
            return "no verdict", f"interpreter error on the left side ({type(e).__name__}: {e})"
        try:
            rights = evaluate(inst.rhs, args)
        except UnsupportedError as e:
            return "no verdict", f"right side does not evaluate ({e.message})"
        except HloError as e:
            return "differ", counterexample(inst, args, lefts[0], None,
                                            f"the right side fails: {e.message}")
        except Exception as e:
            return "no verdict", f"interpreter error on the right side ({type(e).__name__}: {e})"
        for left, right in zip(lefts, rights):
            where = first_mismatch(left, right, mode, _magnitude(args))
            if where is not None:
                return "differ", counterexample(inst, args, left, right, where)
    return "same", ""


def _magnitude(args) -> float:
    """The largest finite float or complex input (what fast mode's errors are relative to)."""
    floats = [np.abs(a.astype(np.complex128)) for a in args
              if from_numpy(a.dtype).kind in ("float", "complex")]
    return max((float(np.max(f[np.isfinite(f)], initial=0.0)) for f in floats), default=0.0)


@dataclass
class Coverage:
    """What the passing instances covered: how many, how many distinct (shapes, element
    types and attributes; constants' values aside), which element-type choices."""
    checked: int = 0
    distinct: set = field(default_factory=set)
    last_new: int = 0           # `checked` when the latest new distinct instance came
    choices: set = field(default_factory=set)

    def add(self, inst: Instance, choice: int) -> None:
        self.checked += 1
        key = _signature(inst.lhs)
        if key not in self.distinct:
            self.distinct.add(key)
            self.last_new = self.checked
        self.choices.add(choice)

    def shortfall(self, trials: int) -> str:
        """Why these instances do not make a check ("" when they do): a third of the trials
        passed, and MIN_DISTINCT of them distinct, unless the second half brought no new one
        (the guards allow only a few)."""
        need = max(1, trials // 3)
        if self.checked < need:
            return f"only {self.checked} passing instances (needs {need})"
        exhausted = self.checked - self.last_new >= self.checked // 2
        if len(self.distinct) < min(MIN_DISTINCT, need) and not exhausted:
            return f"only {len(self.distinct)} distinct instances"
        return ""

    def summary(self, n_choices: int) -> str:
        text = f"{len(self.distinct)} distinct"
        if n_choices > 1:
            text += f", {len(self.choices)} of {n_choices} element-type choices"
        return text


def _signature(module) -> tuple:
    return tuple((i.opcode, i.shape.to_text(False), tuple(sorted(
        (k, v.name if isinstance(v, Computation) else repr(v)) for k, v in i.attrs.items())))
        for c in module.computations for i in c.instructions)


# --- inputs --------------------------------------------------------------------------------

def edge_values(shape: Shape, mode: str) -> np.ndarray:
    dt = shape.dtype
    if dt.kind == "pred":
        return np.array([False, True])
    if dt.is_integral:
        info = int_info(dt)
        lo, hi = int(info.min), int(info.max)
        values = {lo, hi, 0, 1, 2, -1, -2, lo + 1, hi - 1}
        return np.array(sorted(v for v in values if lo <= v <= hi), dtype=dt.numpy)
    base = [0.0, 1.0, -1.0, 0.5, 2.0, -3.0]
    if mode != "fast":
        fi = float_info(dt)
        base += [np.nan, np.inf, -np.inf, -0.0, float(fi.max), -float(fi.max), float(fi.tiny),
                 float(fi.smallest_subnormal), -float(fi.smallest_subnormal)]
    return np.array(base).astype(dt.numpy)


def random_values(shape: Shape, mode: str, rng, n: int) -> np.ndarray:
    dt = shape.dtype
    if dt.kind == "pred":
        return rng.random(n) < 0.5
    if dt.is_integral:
        info = int_info(dt)
        carrier = np.uint64 if dt.kind == "uint" else np.int64
        wide = rng.integers(info.min, info.max, size=n, dtype=carrier, endpoint=True)
        small = rng.integers(max(info.min, -8), min(info.max, 8), size=n,
                             endpoint=True).astype(carrier)
        return np.where(rng.random(n) < 0.5, small, wide).astype(dt.numpy)
    if mode == "fast":
        values = rng.uniform(-4, 4, size=n)
    else:
        values = rng.standard_normal(n) * rng.choice([1.0, 1e-3, 1e3], size=n)
    return values.astype(dt.numpy)


def fill(shape: Shape, mode: str, rng) -> np.ndarray:
    """An argument: each element an edge value or a random one, with even odds."""
    n = shape.num_elements
    pool = edge_values(shape, mode)
    out = random_values(shape, mode, rng, n)
    pick = rng.random(n) < 0.5
    out[pick] = pool[rng.integers(len(pool), size=n)][pick]
    return out.reshape(shape.dims)


# --- comparison ----------------------------------------------------------------------------

def first_mismatch(a: np.ndarray, b: np.ndarray, mode: str, magnitude: float = 1.0):
    """Index of the first element where `b` is not an acceptable stand-in for `a`, or None.
    In fast mode errors are relative to the largest of |a| and `magnitude` (the inputs'
    largest: a reassociated sum that cancels loses precision relative to its terms)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return "shape"
    dtype = from_numpy(a.dtype)
    if dtype.kind == "complex":
        for part in (np.real, np.imag):
            where = first_mismatch(part(a), part(b), mode, magnitude)
            if where is not None:
                return where
        return None
    if dtype.kind != "float":                           # pred, ints of any width
        bad = a != b
    else:
        with np.errstate(invalid="ignore"):             # narrow-float NaNs widen quietly
            x, y = a.astype(np.float64), b.astype(np.float64)
        both_nan = np.isnan(x) & np.isnan(y)
        if mode == "strict":
            bits = f"u{a.dtype.itemsize}"
            bad = (a.view(bits) != b.view(bits)) & ~both_nan
        elif mode == "xla":
            bad = (x != y) & ~both_nan
        else:
            finite = np.isfinite(x)
            rtol = FAST_RTOL.get(dtype.name) or FAST_EPSILONS * float(float_info(dtype).eps)
            scale = max(1.0, magnitude, float(np.max(np.abs(x[finite]), initial=0.0)))
            with np.errstate(invalid="ignore", over="ignore"):     # inf - inf where not finite
                bad = finite & ~(np.abs(x - y) <= rtol * np.abs(x) + rtol * scale)
    hits = np.argwhere(bad)
    return None if len(hits) == 0 else tuple(int(i) for i in hits[0])


# --- reports -------------------------------------------------------------------------------

def counterexample(inst: Instance, args, left, right, where) -> str:
    with np.errstate(all="ignore"):         # the printer casts to f32 to find NaNs
        return _counterexample(inst, args, left, right, where)


def _counterexample(inst: Instance, args, left, right, where) -> str:
    lines = ["left side:", indent(inst.lhs.to_text()), "right side:", indent(inst.rhs.to_text())]
    for i, (arg, shape) in enumerate(zip(args, inst.params)):
        lines.append(f"  parameter {i} = {_literal(arg, shape)}")
    lines.append(f"  left gives  {_literal(left, None)}")
    if right is None:
        lines.append(f"  {where}")
    else:
        lines.append(f"  right gives {_literal(right, None)}")
        if isinstance(where, tuple):
            lines.append(f"  first difference at index {list(where)}: "
                         f"{_element(left, where)} vs {_element(right, where)}")
    return "\n".join(lines)


def _literal(value: np.ndarray, shape: Shape | None) -> str:
    shape = shape or array(from_numpy(value.dtype).name, value.shape)
    return f"{shape.to_text(False)} {format_literal(value, shape)}"


def _element(value: np.ndarray, index) -> str:
    return _literal(np.asarray(value[index]), None).split(" ", 1)[1]


def describe(v: Verdict) -> str:
    """One verdict as the checker prints it."""
    rule = v.rule
    head = f"{rule.name} [{rule.mode}]"
    where = f"{rule.pos.file}:{rule.pos.line}:{rule.pos.column}"
    if v.status == "sound":
        return f"ok          {head} ({v.instances} instances, {v.detail})"
    if v.status == "skipped":
        return f"skipped     {head} ({v.detail})"
    if v.status == "unchecked":
        return f"NOT CHECKED {head} at {where}: {v.detail}\n    {to_text(rule)}"
    return (f"UNSOUND     {head} at {where}\n    {to_text(rule)}\n"
            f"  counterexample after {v.instances} passing instances:\n{v.detail}")
