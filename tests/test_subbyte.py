"""Sub-byte integers (s4, u4, s2, u2, u1) and narrow floats (f8, f4) through the whole
pipeline: their constants parse, fold, optimize, evaluate and compile, and integer arithmetic
wraps at the type's own width (s4: 7 + 1 = -8)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import hlo_opt
from hlo_opt.dtypes import DTYPES, int_info
from hlo_opt.egraph.constants import canonical_scalar_text, representable, scalar_from_text

INTS = ["s4", "u4", "s2", "u2", "u1"]
FLOATS = ["f8e4m3fn", "f8e5m2", "f8e4m3", "f4e2m1fn", "bf16"]


def arithmetic(t: str, c: int) -> str:
    return f"""HloModule m
ENTRY e {{
  p = {t}[4] parameter(0)
  c = {t}[] constant({c})
  b = {t}[4] broadcast(c), dimensions={{}}
  a = {t}[4] add(p, b)
  m = {t}[4] multiply(a, b)
  ROOT r = {t}[4] subtract(m, p)
}}"""


def wrap(values, t: str) -> list[int]:
    """Python integers reduced modulo 2**bits into the type's range."""
    info, bits = int_info(t), DTYPES[t].bits
    return [(v - int(info.min)) % (1 << bits) + int(info.min) for v in values]


def run_everywhere(module: hlo_opt.Module, x: np.ndarray) -> list[np.ndarray]:
    """The interpreter on the module, the interpreter and compiled code on its optimized
    form (narrow types the lowering cannot emit run in the interpreter, with a warning)."""
    optimized = hlo_opt.optimize(module)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = hlo_opt.compile(optimized)(x)
    return [hlo_opt.evaluate(module, [x])[0], hlo_opt.evaluate(optimized, [x])[0],
            np.asarray(compiled[0] if isinstance(compiled, (list, tuple)) else compiled)]


def edge_inputs(t: str) -> tuple[int, np.ndarray, list[int]]:
    """(constant, input, expected result of `arithmetic`) at the ends of the type's range."""
    info = int_info(t)
    lo, hi = int(info.min), int(info.max)
    c = 1 if hi >= 1 else -1
    p = [hi, lo, c, 0]
    expected = wrap([wrap([v + c], t)[0] * c - v for v in p], t)
    return c, np.array(p).astype(DTYPES[t].numpy), expected


@pytest.mark.parametrize("t", INTS)
def test_integer_arithmetic_wraps_at_the_type_width_in_every_stage(t):
    c, x, expected = edge_inputs(t)
    for got in run_everywhere(hlo_opt.parse(arithmetic(t, c)), x):
        assert got.dtype == DTYPES[t].numpy
        assert got.astype(np.int64).tolist() == expected


@pytest.mark.parametrize("t", ["s4", "u4", "s2", "u2"])
def test_integer_arithmetic_matches_xla(xla, t):
    c, x, expected = edge_inputs(t)
    (got,) = xla.run(arithmetic(t, c), [x])
    assert got.astype(np.int64).tolist() == expected


@pytest.mark.parametrize("t", FLOATS)
def test_narrow_float_arithmetic_agrees_between_stages(t):
    x = np.array([1.5, -2.0, 0.5, 3.0]).astype(DTYPES[t].numpy)
    reference, *others = run_everywhere(hlo_opt.parse(arithmetic(t, 2)), x)
    for got in others:
        assert got.dtype == reference.dtype
        assert got.tobytes() == reference.tobytes()


@pytest.mark.parametrize("t,value", [("s4", -8), ("s4", 7), ("u4", 15), ("s2", -2), ("u2", 3),
                                     ("u1", 1), ("s1", -1), ("f8e4m3fn", 448), ("f4e2m1fn", 6)])
def test_a_constant_root_optimizes_to_itself(t, value):
    module = hlo_opt.parse(f"HloModule m\nENTRY e {{\n  ROOT c = {t}[] constant({value})\n}}")
    out = hlo_opt.optimize(module)
    assert out.entry.root.opcode == "constant"
    assert hlo_opt.evaluate(out, [])[0].astype(np.float64) == value


@pytest.mark.parametrize("t,a,b,total", [("s4", 7, 7, -2), ("u4", 9, 9, 2), ("s2", 1, 1, -2),
                                         ("u2", 3, 2, 1)])
def test_constant_arithmetic_folds_with_wrapping(t, a, b, total):
    module = hlo_opt.parse(f"""HloModule m
ENTRY e {{
  a = {t}[] constant({a})
  b = {t}[] constant({b})
  ROOT s = {t}[] add(a, b)
}}""")
    out = hlo_opt.optimize(module)
    assert out.entry.root.opcode == "constant"
    assert int(out.entry.root.literal.astype(np.int64)) == total


@pytest.mark.parametrize("t", INTS + ["s1"])
def test_constant_texts_cover_exactly_the_type_range(t):
    info = int_info(t)
    for v in (int(info.min), int(info.max)):
        assert representable(str(v), t)
        assert canonical_scalar_text(scalar_from_text(str(v), t), t) == str(v)
    assert not representable(str(int(info.max) + 1), t)
    assert not representable(str(int(info.min) - 1), t)


def test_nan_payloads_of_ml_dtypes_floats_have_texts():
    nan = scalar_from_text("nan(0x3)", "bf16")
    assert np.isnan(nan.astype(np.float32))
    assert canonical_scalar_text(nan, "bf16") == "nan(0x3)"


# A u4 value handed from one kernel to the next (the interpreter runs the sub-byte kernels).
# Its buffer once had its packed size (half a byte per element) while every writer stores
# numpy's one byte per element: the heap was corrupted, found by glibc's checks at exit.
SUBBYTE_BETWEEN_KERNELS = """HloModule m
to_u4 {
  p = f32[8,128] parameter(0)
  ROOT c = u4[8,128] convert(p)
}
from_u4 {
  p = u4[8,128] parameter(0)
  q = f32[8] parameter(1)
  d = f32[8,128] convert(p)
  b = f32[8,128] broadcast(q), dimensions={0}
  ROOT m = f32[8,128] multiply(d, b)
}
ENTRY e {
  x = f32[8,128] parameter(0)
  y = f32[8] parameter(1)
  u = u4[8,128] fusion(x), kind=kLoop, calls=to_u4
  ROOT r = f32[8,128] fusion(u, y), kind=kLoop, calls=from_u4
}
"""

_RUN_MANY_TIMES = f"""
import warnings, numpy as np, hlo_opt
warnings.simplefilter("ignore")
m = hlo_opt.parse({SUBBYTE_BETWEEN_KERNELS!r})
x = np.random.default_rng(0).uniform(-20, 20, (8, 128)).astype(np.float32)
y = np.arange(8, dtype=np.float32)
run = hlo_opt.compile(m)
for _ in range(50):
    out = run(x, y)
assert np.array_equal(out[0], hlo_opt.evaluate(m, [x, y])[0])
"""


def test_sub_byte_values_between_kernels_fit_their_buffers():
    import os
    import subprocess
    import sys
    env = dict(os.environ, MALLOC_CHECK_="3", MALLOC_PERTURB_="165")
    run = subprocess.run([sys.executable, "-c", _RUN_MANY_TIMES], env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
