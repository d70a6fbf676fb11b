"""Every elementwise op on every element type it accepts, lowered to CPU code, against the
interpreter on edge values (NaN, ±inf, ±0, denormals, integer extremes).

Exact ops must agree bit for bit (-0 and +0 differ); transcendental functions within the
ulps mathlib.py documents. One module per element type holds every applicable op, so the
whole table compiles in a few seconds.
"""
from __future__ import annotations

import numpy as np
import pytest

from lowering_helpers import assert_matches, edge_values, run_both

N = 96
FLOATS = ["f32", "f64", "bf16", "f16"]
INTS = ["s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64"]

# op: ulps allowed for f32/f64 (narrow floats: 1 ulp of their own type for inexact ops).
# mathlib.py's functions as documented there; sin, cos, tan, cbrt, pow, atan2 in f32 come
# from glibc's libmvec (vecmath.py), within 4 ulp.
FLOAT_UNARY = {
    "abs": 0, "negate": 0, "sign": 0, "floor": 0, "ceil": 0, "round-nearest-afz": 0,
    "round-nearest-even": 0, "sqrt": 0, "rsqrt": 1, "cbrt": 4, "exponential": 2, "log": 1,
    "exponential-minus-one": 3, "log-plus-one": 3, "logistic": 3, "tanh": 2, "erf": 3,
    "sine": 4, "cosine": 4, "tan": 4, "is-finite": 0, "copy": 0,
}
FLOAT_BINARY = {"add": 0, "subtract": 0, "multiply": 0, "divide": 0, "remainder": 0,
                "maximum": 0, "minimum": 0, "power": 4, "atan2": 4}
INT_UNARY = ["abs", "negate", "sign", "not", "popcnt", "count-leading-zeros", "copy"]
INT_BINARY = ["add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum",
              "power", "and", "or", "xor", "shift-left", "shift-right-logical",
              "shift-right-arithmetic"]
DIRECTIONS = ["EQ", "NE", "LT", "LE", "GT", "GE"]
# f64 goes through libm, numpy has its own implementations: up to 2 ulp apart (cbrt).
F64_LIBM = {"exponential", "log", "exponential-minus-one", "log-plus-one", "tanh", "erf",
            "logistic", "cbrt", "sine", "cosine", "tan", "power", "atan2"}


def _module(t: str, unary: list[str], binary: list[str], compare_types=("",)) -> tuple[str, list]:
    lines = [f"x = {t}[{N}] parameter(0)", f"y = {t}[{N}] parameter(1)"]
    outs = []
    for op in unary:
        shape = f"pred[{N}]" if op == "is-finite" else f"{t}[{N}]"
        lines.append(f"u.{op} = {shape} {op}(x)")
        outs.append((f"u.{op}", shape, op))
    for op in binary:
        lines.append(f"b.{op} = {t}[{N}] {op}(x, y)")
        outs.append((f"b.{op}", f"{t}[{N}]", op))
    for ct in compare_types:
        for d in DIRECTIONS:
            name = f"c.{d}{ct}"
            extra = f", type={ct}" if ct else ""
            lines.append(f"{name} = pred[{N}] compare(x, y), direction={d}{extra}")
            outs.append((name, f"pred[{N}]", "compare"))
    lines.append(f"s = pred[{N}] compare(x, y), direction=LT")
    lines.append(f"sel = {t}[{N}] select(s, x, y)")
    outs.append(("sel", f"{t}[{N}]", "select"))
    if t not in ("pred",) and not t.startswith("c"):
        lines.append(f"cl = {t}[{N}] clamp(y, x, y)")
        outs.append(("cl", f"{t}[{N}]", "clamp"))
    root = ", ".join(n for n, _, _ in outs)
    shapes = ", ".join(s for _, s, _ in outs)
    lines.append(f"ROOT r = ({shapes}) tuple({root})")
    text = "HloModule ops\nENTRY e {\n  " + "\n  ".join(lines) + "\n}\n"
    return text, [op for _, _, op in outs]


def _inputs(t: str, seed: int = 0, small_ints: bool = False):
    rng = np.random.default_rng(seed)
    x = edge_values(t, N, rng, small_ints)
    y = rng.permutation(edge_values(t, N, rng, small_ints))
    return x, y


@pytest.mark.parametrize("t", FLOATS)
def test_float_ops(t):
    text, ops = _module(t, list(FLOAT_UNARY), list(FLOAT_BINARY), ("", "TOTALORDER"))
    x, y = _inputs(t)
    ours, want = run_both(text, [x, y])
    narrow = t in ("bf16", "f16")
    for op, g, w in zip(ops, ours, want):
        ulps = FLOAT_UNARY.get(op, FLOAT_BINARY.get(op, 0))
        if narrow and (ulps or op in ("sqrt", "cbrt", "sine", "cosine", "tan", "power", "atan2")):
            ulps = 1                          # f32 then rounded vs. f64 then rounded
        if t == "f64" and op in F64_LIBM:
            ulps = 2                          # libm in double vs numpy's own
        assert_matches(g, w, ulps, f"{t} {op}")


@pytest.mark.parametrize("t", INTS)
def test_integer_ops(t):
    unary = [op for op in INT_UNARY if t[0] == "s" or op not in ("abs", "sign")]  # XLA: signed only
    text, ops = _module(t, unary, INT_BINARY)
    for seed, small in ((0, False), (1, True)):      # small: shift amounts, powers in range
        x, y = _inputs(t, seed, small)
        ours, want = run_both(text, [x, y])
        for op, g, w in zip(ops, ours, want):
            assert_matches(g, w, 0, f"{t} {op} (small={small})")


def test_pred_ops():
    text, ops = _module("pred", ["not", "copy"], ["and", "or", "xor", "add", "multiply",
                                                   "maximum", "minimum"])
    x, y = _inputs("pred")
    ours, want = run_both(text, [x, y])
    for op, g, w in zip(ops, ours, want):
        assert_matches(g, w, 0, f"pred {op}")


@pytest.mark.parametrize("t", ["c64", "c128"])
def test_complex_ops(t):
    text, ops = _module(t, ["negate", "copy"], ["add", "subtract", "multiply", "divide"])
    text = text.replace("direction=LT", "direction=EQ")
    text = "\n".join(l for l in text.splitlines()
                     if not any(f"direction={d}" in l for d in ("LT", "LE", "GT", "GE"))
                     or l.startswith("  s ="))
    text = text.replace(", c.LT, c.LE, c.GT, c.GE", "")
    text = text.replace(", pred[96], pred[96], pred[96], pred[96], %s" % f"{t}[96]",
                        f", {t}[96]")
    x, y = _inputs(t)
    x, y = x[np.abs(x) < 1e10], y[np.abs(y) < 1e10]        # products must not overflow
    x, y = np.resize(x, N), np.resize(y, N)
    ours, want = run_both(text, [x, y])
    # Products cancel: allow a few ulps of the operands' magnitude, not of the result.
    scale = 8 * np.finfo(x.real.dtype).eps * np.abs(x).max() * np.abs(y).max()
    for op, g, w in zip([o for o in ops if o in ("negate", "copy", "add", "subtract",
                                                  "multiply", "divide", "compare", "select")],
                        ours, want):
        inexact = op in ("multiply", "divide")
        assert_matches(g, w, 4 if inexact else 0, f"{t} {op}", atol=scale if inexact else 0)


CONVERT_TYPES = ["pred", "s8", "s32", "s64", "u8", "u32", "u64", "bf16", "f16", "f32", "f64"]


@pytest.mark.parametrize("src", CONVERT_TYPES)
def test_convert_between_all_types(src):
    """Saturating float->int with NaN -> 0, int wrap-around, narrow rounding, pred != 0."""
    lines = [f"x = {src}[{N}] parameter(0)"]
    names = []
    for dst in CONVERT_TYPES:
        lines.append(f"c.{dst} = {dst}[{N}] convert(x)")
        names.append(f"c.{dst}")
    shapes = ", ".join(f"{d}[{N}]" for d in CONVERT_TYPES)
    lines.append(f"ROOT r = ({shapes}) tuple({', '.join(names)})")
    text = "HloModule cvt\nENTRY e {\n  " + "\n  ".join(lines) + "\n}\n"
    x, _ = _inputs(src)
    ours, want = run_both(text, [x])
    for dst, g, w in zip(CONVERT_TYPES, ours, want):
        assert_matches(g, w, 0, f"convert {src} -> {dst}")


@pytest.mark.parametrize("src,dst", [("f32", "s32"), ("s32", "f32"), ("u32", "f32"),
                                     ("f16", "s16"), ("bf16", "u16"), ("f64", "u64"),
                                     ("s64", "f64"), ("s8", "u8")])
def test_bitcast_convert_same_width(src, dst):
    text = f"HloModule b\nENTRY e {{\n  x = {src}[{N}] parameter(0)\n  ROOT y = {dst}[{N}] bitcast-convert(x)\n}}\n"
    x, _ = _inputs(src)
    x = x[~np.isnan(x)] if x.dtype.kind == "f" or src in ("bf16", "f16") else x
    x = np.resize(x, N)
    ours, want = run_both(text, [x])
    assert_matches(ours[0], want[0], 0, f"bitcast-convert {src} -> {dst}")


@pytest.mark.parametrize("t,e,m", [("f32", 8, 7), ("f32", 5, 10), ("f64", 8, 23), ("bf16", 5, 2),
                                   ("f16", 4, 3)])
def test_reduce_precision(t, e, m):
    text = (f"HloModule rp\nENTRY e {{\n  x = {t}[{N}] parameter(0)\n  ROOT y = {t}[{N}] "
            f"reduce-precision(x), exponent_bits={e}, mantissa_bits={m}\n}}\n")
    x, _ = _inputs(t)
    ours, want = run_both(text, [x])
    assert_matches(ours[0], want[0], 0, f"reduce-precision {t} e{e}m{m}")


def test_iota_of_every_type():
    types = ["s8", "s32", "u16", "s64", "bf16", "f16", "f32", "f64"]
    lines = [f"i.{t} = {t}[3,300] iota(), iota_dimension=1" for t in types]
    lines.append(f"ROOT r = ({', '.join(f'{t}[3,300]' for t in types)}) tuple("
                 f"{', '.join(f'i.{t}' for t in types)})")
    text = "HloModule io\nENTRY e {\n  " + "\n  ".join(lines) + "\n}\n"
    ours, want = run_both(text, [])
    for t, g, w in zip(types, ours, want):
        assert_matches(g, w, 0, f"iota {t}")


def test_constants_of_every_type_are_immediates():
    lines, names, shapes = [], [], []
    for t, v in [("f32", "-0"), ("f64", "1e-310"), ("bf16", "3.14159"), ("f16", "65504"),
                 ("s64", "-9223372036854775808"), ("u64", "18446744073709551615"),
                 ("pred", "true"), ("s8", "-128"), ("f32", "nan"), ("f32", "-inf")]:
        n = f"k{len(names)}"
        lines += [f"{n}.c = {t}[] constant({v})", f"{n} = {t}[4] broadcast({n}.c), dimensions={{}}"]
        names.append(n)
        shapes.append(f"{t}[4]")
    lines.append(f"ROOT r = ({', '.join(shapes)}) tuple({', '.join(names)})")
    text = "HloModule k\nENTRY e {\n  " + "\n  ".join(lines) + "\n}\n"
    ours, want = run_both(text, [])
    for n, g, w in zip(names, ours, want):
        assert_matches(g, w, 0, n)


F8 = ["f8e4m3fn", "f8e5m2", "f8e4m3", "f8e3m4", "f8e4m3fnuz", "f8e5m2fnuz", "f8e4m3b11fnuz"]


@pytest.mark.parametrize("t", F8)
def test_float8_rounding_overflow_and_arithmetic(t):
    """f32/f64 -> f8 rounds to nearest even; past the largest value gives inf or NaN as the
    format says; arithmetic computes in f32 and rounds once; byte-exact with ml_dtypes."""
    text = f"""HloModule f8
ENTRY e {{
  x = f32[{N}] parameter(0)
  w = f64[{N}] parameter(1)
  a = {t}[{N}] convert(x)
  b = {t}[{N}] convert(w)
  m = {t}[{N}] multiply(a, b)
  s = {t}[{N}] subtract(m, a)
  back = f32[{N}] convert(s)
  ROOT r = ({t}[{N}], {t}[{N}], {t}[{N}], f32[{N}]) tuple(a, b, s, back)
}}"""
    rng = np.random.default_rng(0)
    x = edge_values("f32", N, rng)
    x[24:] = (rng.standard_normal(N - 24) * 10.0 ** rng.integers(-5, 6, N - 24)).astype(np.float32)
    ours, want = run_both(text, [x, rng.permutation(x).astype(np.float64)])
    for name, g, w in zip(["a", "b", "s", "back"], ours, want):
        assert_matches(g, w, 0, f"{t} {name}")


def test_complex_parts_abs_and_map():
    mapped = ("poly { a = f32[] parameter(0)\n b = f32[] parameter(1)\n m = f32[] multiply(a, b)\n"
              " ROOT s = f32[] subtract(m, a) }")
    text = f"""HloModule cx
{mapped}
ENTRY e {{
  x = f32[{N}] parameter(0)
  y = f32[{N}] parameter(1)
  c = c64[{N}] complex(x, y)
  r = f32[{N}] real(c)
  i = f32[{N}] imag(c)
  a = f32[{N}] abs(c)
  d = c128[{N}] convert(c)
  re = f64[{N}] real(d)
  m = f32[{N}] map(x, y), dimensions={{0}}, to_apply=poly
  o = (f32[{N}], f32[{N}]) opt-barrier((f32[{N}], f32[{N}]) tuple(r, i))
  r2 = f32[{N}] get-tuple-element(o), index=0
  ROOT t = (c64[{N}], f32[{N}], f32[{N}], f32[{N}], f64[{N}], f32[{N}]) tuple(c, r2, i, a, re, m)
}}"""
    x, y = _inputs("f32")
    ours, want = run_both(text, [x, y])
    for name, g, w in zip(["complex", "real", "imag", "abs", "real c128", "map"], ours, want):
        assert_matches(g, w, 1 if name == "abs" else 0, name)
