"""Guards of every declaration (rule, fold, fuse, limit): one analysis with a scope per kind of
declaration, one evaluator (rule_compiler/guard_analysis.py, rule_compiler/guard_ir.py).

Each error case is rule-file text in, one positioned error line out; each evaluation case is a
declaration and the values its scope binds in, the guard's truth out.
"""
from __future__ import annotations

import pytest

from hlo_opt import HloError, parse
from hlo_opt.rule_compiler.guard_analysis import (analyze_guards, fold_scope, kernel_scope,
                                           producer_scope, sibling_scope)
from hlo_opt.rule_compiler.guard_ir import guards_hold
from hlo_opt.rule_compiler.rules import compile_rules
from hlo_opt.fusion.policy import FusionPolicy, KernelSize
from hlo_opt.grammar.rules_parser import rules_from_text
from hlo_opt.shape import array

ERRORS = [
    ("fold f: add when num_elements(x) <= 4", 1, 31,
     "fold f: unbound variable 'x' (a fold guard names root)"),
    ("fold f: add when is_constant(root)", 1, 18,
     "fold f: 'is_constant' reads the e-graph: only rules can use it"),
    ("fold f: add when value(root) == 0", 1, 18,
     "fold f: 'value' reads the e-graph: only rules can use it"),
    ("fold f: add when log2(root) >= 0", 1, 18,
     "fold f: 'log2' reads the e-graph: only rules can use it"),
    ("fold f: add when num_elemnts(root) <= 4", 1, 18,
     "unknown function 'num_elemnts' (did you mean 'num_elements'?)"),
    ("fold f: add when rank(root)", 1, 18, "'rank' is an integer, not a guard"),
    ("fuse f: add <- multiply when heroes(producer) <= 1", 1, 30,
     "fuse f: 'heroes' applies to the kernel, in a limit"),
    ("fuse f: add ~ multiply when users(producer) == 1", 1, 29,
     "'users' applies to the producer, in a producer-consumer fuse"),
    ("fuse f: add <- multiply when target == cpu", 1, 40,
     'unbound variable \'cpu\' (a fuse guard names consumer, producer, target); a name of a '
     'target is quoted, e.g. target == "cpu"'),
    ("fuse f: add <- multiply when dims(producer) == dims(a)", 1, 53,
     "unbound variable 'a' (a fuse guard names consumer, producer, target)"),
    ("fuse f: add <- multiply when dims(producer) < dims(consumer)", 1, 45,
     "'<' compares integers, not a list of integers"),
    ("fuse f: add <- multiply when producer == consumer", 1, 39,
     "terms are compared through their types"),
    ("limit l: fan_in(consumer) <= 4", 1, 10,
     "'fan_in' applies to the kernel: write fan_in(kernel)"),
    ("limit l: kernel == kernel", 1, 17, "a kernel is compared through its counts"),
    ("limit l: rank(kernel) == 1", 1, 15, "expected a term, got kernel (a kernel)"),
    ("rule r: negate(x) => x when is_int(target)", 1, 36,
     "unbound variable 'target' (variables are bound on the left side)"),
]


@pytest.mark.parametrize("text,line,column,message", ERRORS, ids=[e[0] for e in ERRORS])
def test_guard_errors_are_positioned_lines(text, line, column, message):
    with pytest.raises(HloError) as info:
        compile_rules(rules_from_text(text, "t.rules"))
    err = info.value
    assert message in err.message and "\n" not in str(err)
    assert (err.filename, err.line, err.column) == ("t.rules", line, column), str(err)


def guards(text: str, scope):
    rule_file = rules_from_text(text, "t.rules")
    [decl] = rule_file.folds + rule_file.fuses + rule_file.limits
    return analyze_guards(decl.guards, scope)


F32_8 = array("f32", (8,))


@pytest.mark.parametrize("text,scope,env,holds", [
    ("fold f: add when num_elements(root) <= 8", fold_scope(), {"root": F32_8}, True),
    ("fold f: add when num_elements(root) <= 7", fold_scope(), {"root": F32_8}, False),
    ("fold f: add when dtype(root) == f32 and rank(root) == 1", fold_scope(),
     {"root": F32_8}, True),
    ("fuse f: add <- add when users(producer) == 1 and target == \"gpu\"", producer_scope(),
     {"producer": F32_8, "consumer": F32_8, "users(producer)": 1, "target": "gpu"}, True),
    ("fuse f: add <- add when target == \"gpu\"", producer_scope(),
     {"producer": F32_8, "consumer": F32_8, "users(producer)": 1, "target": "cpu"}, False),
    ("fuse f: add ~ add when dims(a) == dims(b)", sibling_scope(),
     {"a": F32_8, "b": array("f32", (2, 4)), "target": "cpu"}, False),
    ("limit l: heroes(kernel) <= 1 and fan_in(kernel) < 3", kernel_scope(),
     {"heroes(kernel)": 1, "fan_in(kernel)": 2, "target": "cpu"}, True),
    # A tuple has no type for the rule language's functions: a guard reading one is false.
    ("fold f: add when rank(root) == 0", fold_scope(), {"root": parse(
        "HloModule m\nENTRY e {\n  ROOT t = (f32[], f32[]) parameter(0)\n}\n").entry.root.shape},
     False),
])
def test_guards_evaluate_on_what_their_scope_binds(text, scope, env, holds):
    assert guards_hold(guards(text, scope), env) is holds


def test_fusion_guards_see_the_target():
    text = ("fuse gpu_only: add <- multiply when target == \"gpu\"\n"
            "limit small: members(kernel) <= 2\n")
    rule_file = rules_from_text(text, "t.rules")
    module = parse("HloModule m\nENTRY e {\n  p = f32[4] parameter(0)\n"
                   "  m = f32[4] multiply(p, p)\n  ROOT a = f32[4] add(m, p)\n}\n")
    add = module.entry.root
    mul = add.operands[0]
    for target, fuses in (("gpu", True), ("cpu", False)):
        policy = FusionPolicy(rule_file.fuses, rule_file.limits, target)
        assert policy.may_fuse(add, mul, users=1) is fuses
        assert policy.within_limits(KernelSize(heroes=0, fan_in=1, members=2, outputs=1))
        assert not policy.within_limits(KernelSize(heroes=0, fan_in=1, members=3, outputs=1))
