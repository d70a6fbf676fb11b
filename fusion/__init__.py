"""Fusion: which instructions of a module run together as one kernel, after extraction
(optimize) or before lowering a module that has no fusions (compile: stage.fuse).

    policy = FusionPolicy(rule_file.fuses, rule_file.limits, target)   # what may fuse
    module = fuse_module(module, computations, policy, cost_model(target))
    module = stage.fuse(module, target)          # the default declarations

Modules: policy (the rule set's `fuse`/`limit` declarations as predicates), partition (the
greedy, cost-driven grouping of one computation into kernels), outline (kernels -> `fusion`
instructions), stage (the stage as compile runs it: calls inlined, the default declarations).
None of them uses the e-graph; the policy's guards are analyzed and evaluated as every rule
file's guards are (rule_compiler/guard_analysis.py).
"""
