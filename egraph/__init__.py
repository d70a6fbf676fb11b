"""The saturation runtime, IR <-> e-graph: schema, encoding, saturation with the compiled
rules (hlo_opt.rule_compiler) and constant folding, extraction, decoding.

    module = hlo_opt.optimize(module, rules="default", fp_mode="xla", target="cpu")

runs pipeline.optimize. The package imports none of its modules itself.
"""
