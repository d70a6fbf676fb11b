"""IR <-> e-graph: encoding, rule compilation, saturation, extraction, decoding.

    module = hlo_opt.optimize(module, rules="default", fp_mode="xla", target="cpu")

runs pipeline.optimize. The package imports none of its modules itself: the fusion stage
(hlo_opt.fusion) uses the rule language's functions (rule_functions.py) without loading
the e-graph pipeline, which in turn runs that stage.
"""
