"""Whether compiled outputs equal the interpreter's: the tolerances the test suite and the
benchmark share.

Tolerances are relative to the largest magnitude of each output (sums and dots reassociate:
compiled reductions are vectorized, the interpreter's are pairwise): 1e-4 for f32/f64, 2e-2
for bf16/f16; integers and pred exactly; NaN where the interpreter has NaN.
"""
from __future__ import annotations

import numpy as np


def tolerance(dtype) -> float:
    return 2e-2 if dtype.itemsize == 2 and dtype.kind not in "iu" else 1e-4


def mismatch(got, want, rtol_scale: float = 1.0) -> str | None:
    """None when every output of `got` matches `want`, else what differs first
    (`out<k>: ...`)."""
    if len(got) != len(want):
        return f"{len(got)} outputs, expected {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(g), np.asarray(w)
        if g.dtype != w.dtype or g.shape != w.shape:
            return f"out{k}: {g.dtype}{list(g.shape)}, expected {w.dtype}{list(w.shape)}"
        if w.dtype.kind in "biu":
            if not np.array_equal(g, w):
                return f"out{k}: {(g != w).sum()} of {g.size} differ"
            continue
        kind = np.complex128 if w.dtype.kind == "c" else np.float64
        g64, w64 = g.astype(kind), w.astype(kind)
        if not np.array_equal(np.isnan(g64), np.isnan(w64)):
            return f"out{k}: NaN positions"
        finite = np.isfinite(w64)
        infinite = ~finite & ~np.isnan(w64)
        if not np.array_equal(g64[infinite], w64[infinite]):
            return f"out{k}: infinities"
        if finite.any():
            scale = np.abs(w64[finite]).max()
            err = np.abs(g64[finite] - w64[finite]).max()
            tol = tolerance(w.dtype) * rtol_scale * scale + 1e-30
            if not err <= tol:
                return f"out{k}: max error {err:.3g} > {tol:.3g} (scale {scale:.3g})"
    return None
