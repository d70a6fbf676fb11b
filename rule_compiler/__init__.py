"""The rule compiler: `.rules` files -> checked declarations -> egglog rules.

    rule_file = rules.load_rule_set(["default"])
    compiled = rules.compile_rules(rule_file, fp_mode="xla")

Every declaration's guards go through one analysis (guard_analysis.py) into one IR
(guard_ir.py) with one Python meaning; rules are also compiled to egglog (rule_emit.py) in the
term encoding of hlo_opt.egraph.schema. The package imports none of its modules itself, so
the fusion stage can read guards without loading the e-graph.
"""
