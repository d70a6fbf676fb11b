"""IR <-> e-graph: encoding, rule compilation, saturation, extraction, decoding.

    module = hlo_opt.optimize(module, rules="default", fp_mode="xla", target="cpu")
"""
from __future__ import annotations

from .pipeline import optimize
from .run import RunReport

__all__ = ["optimize", "RunReport"]
