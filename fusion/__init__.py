"""Fusion: which instructions of a module run together as one kernel, after extraction.

    policy = FusionPolicy(rule_file.fuses, rule_file.limits, target)   # what may fuse
    module = fuse_module(module, computations, policy, cost_model(target))

Modules: policy (the rule set's `fuse`/`limit` declarations as predicates), partition (the
greedy, cost-driven grouping of one computation into kernels), outline (kernels -> `fusion`
instructions). None of them uses the e-graph; the policy evaluates its guards with the rule
language's functions (rule_compiler/rule_functions.py).
"""
