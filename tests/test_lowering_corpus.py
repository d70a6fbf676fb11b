"""Every corpus fixture compiled for the CPU computes what the interpreter computes, on
random inputs and on inputs sprinkled with edge values (NaN, ±inf, ±0, extremes); the small
shared fixtures also match XLA:CPU where the oracle is installed.

Tolerances (hlo_opt.tools.output_check, which the benchmark shares) are relative to the
largest magnitude of each output: 1e-4 for f32/f64, 2e-2 for bf16/f16; integers and pred
exactly; NaN where the interpreter has NaN.
"""
from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

import hlo_opt
from conftest import corpus_files, corpus_ids
from lowering_helpers import edge_values
from hlo_opt.tools.hlo_run import random_inputs
from hlo_opt.tools.output_check import mismatch

FILES = corpus_files()
SHARED = [f for f in FILES if f.parent.name == "shared" and not f.name.endswith(".xla_opt.hlo")]
# Ops the CPU backend does not lower yet: fixtures that run them in the interpreter.
EXPECTED_FALLBACKS: dict[str, set[str]] = {}


def assert_outputs_match(got, want, what: str, rtol_scale: float = 1.0):
    problem = mismatch(got, want, rtol_scale)
    assert problem is None, f"{what} {problem}"


def _sprinkle(args, rng):
    """Copies of `args` with a few elements set to edge values of their type."""
    out = []
    for a in args:
        a = np.array(a, copy=True)
        if a.size and a.dtype.kind in "fc" or a.dtype.name == "bfloat16":
            flat = a.reshape(-1)
            specials = edge_values(_hlo_type(a.dtype), 24, rng)[:18]
            idx = rng.choice(flat.size, min(flat.size // 8 + 1, len(specials)), replace=False)
            flat[idx] = specials[:len(idx)]
        out.append(a)
    return out


def _hlo_type(dt) -> str:
    from hlo_opt.dtypes import from_numpy
    return from_numpy(dt).name


def _compile(module):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exe = hlo_opt.compile(module)
    return exe, caught


@pytest.mark.parametrize("path", FILES, ids=corpus_ids(FILES))
def test_corpus_fixture_matches_interpreter(path):
    module = hlo_opt.parse(path.read_text(), str(path))
    exe, _ = _compile(module)
    stem = path.name.split(".")[0]
    fallback_ops = {re.search(r"\((.*?)\):", f).group(1) for f in exe.stats["fallbacks"]}
    assert fallback_ops <= EXPECTED_FALLBACKS.get(stem, set()), exe.stats["fallbacks"]
    args = random_inputs(module, seed=0)
    with np.errstate(all="ignore"):
        assert_outputs_match(exe.run(args), hlo_opt.evaluate(module, args), path.name)
        edgy = _sprinkle(args, np.random.default_rng(1))
        got, want = exe.run(edgy), hlo_opt.evaluate(module, edgy)
    # A Fourier transform of inf gives inf or NaN depending on the algorithm's order of
    # operations (numpy's FFT and ours differ): only finiteness compared. Ours computes c64
    # in f32, as XLA:CPU does, so sums of values near the f32 maximum overflow where the
    # interpreter's (complex128, rounded once) stay finite: ours may be non-finite there.
    fft = any(i.opcode == "fft" for i in module.instructions())
    _assert_nan_safe(got, want, path.name, exact_nan=not fft, overflow=fft)


def _assert_nan_safe(got, want, what, exact_nan: bool = True, rtol_scale: float = 1.0,
                     overflow: bool = False):
    """With edge values in the inputs, NaN and infinities spread; outputs must agree on
    where the non-finite values are (which of them are NaN too, unless `exact_nan` is off;
    with `overflow`, ours may be non-finite also where the interpreter's are finite), and
    agree within a looser tolerance elsewhere (times `rtol_scale`)."""
    for k, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(g), np.asarray(w)
        if w.dtype.kind in "biu":
            continue                  # integer results from NaN inputs (convert) may differ
        kind = np.complex128 if w.dtype.kind == "c" else np.float64
        g64, w64 = g.astype(kind), w.astype(kind)
        finite = np.isfinite(g64) <= np.isfinite(w64) if overflow else \
            np.isfinite(g64) == np.isfinite(w64)
        assert finite.all(), f"{what} out{k} (edge inputs): non-finite positions"
        if exact_nan:
            assert np.array_equal(np.isnan(g64), np.isnan(w64)), \
                f"{what} out{k} (edge inputs): NaN positions"
        both = np.isfinite(g64) & np.isfinite(w64)
        if both.any():
            scale = np.abs(w64[both]).max()
            err = np.abs(g64[both] - w64[both]).max()
            assert err <= 1e-3 * rtol_scale * scale + 1e-30 or w.dtype.itemsize == 2, \
                f"{what} out{k} (edge inputs): max error {err:.3g} (scale {scale:.3g})"


@pytest.mark.parametrize("path", SHARED, ids=corpus_ids(SHARED))
def test_shared_fixture_matches_xla(path, xla):
    """XLA:CPU flushes denormals and has its own transcendental approximations: compared
    with a looser tolerance than the interpreter."""
    text = path.read_text()
    module = hlo_opt.parse(text, str(path))
    exe, _ = _compile(module)
    args = random_inputs(module, seed=2)
    assert_outputs_match(exe.run(args), xla.run(text, args), path.name, rtol_scale=10)


def test_compiled_modules_report_their_buffers():
    path = next(f for f in FILES if f.name == "mlp_train_sgd.hlo")
    exe, _ = _compile(hlo_opt.parse(path.read_text()))
    assert exe.stats["kernels"] >= 2 and exe.stats["fallbacks"] == []
    assert exe.stats["peak_bytes"] > 0
