"""Shared by the lowering tests: inputs with edge values, comparing our CPU code with the
interpreter (bit-exact, or within a number of ulps of the result type), and modules that
hold every elementwise op and convert the lowering has, per type."""
from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np

import hlo_opt
from hlo_opt.dtypes import DTYPES
from hlo_opt.lowering import FallbackWarning
from hlo_opt.lowering.emit_elementwise import BINARY, UNARY
from hlo_opt.lowering.ltypes import ELEM_TYPES

BF16 = ml_dtypes.bfloat16


def np_type(name: str) -> np.dtype:
    return DTYPES[name].numpy


def edge_values(name: str, n: int, rng: np.random.Generator, small_ints: bool = False):
    """`n` values of HLO type `name`: the type's corner cases first, then random ones."""
    dt = np_type(name)
    kind = DTYPES[name].kind
    if kind == "pred":
        return rng.random(n) < 0.5
    if kind in ("int", "uint"):
        info = np.iinfo(dt)
        corners = [0, 1, 2, 3, 7, info.max, info.max - 1, info.min, info.min + 1]
        if kind == "int":
            corners += [-1, -2, -3, -7]
        lo, hi = (-20, 20) if small_ints else (int(info.min), int(info.max))
        rest = rng.integers(max(lo, int(info.min)), min(hi, int(info.max)), n, dtype=dt,
                            endpoint=True)
        return np.concatenate([np.array(corners, dtype=dt), rest])[:n].astype(dt)
    if kind == "complex":
        re = edge_values("f32" if name == "c64" else "f64", n, rng)
        out = np.empty(n, dt)
        out.real, out.imag = re, rng.permutation(re)
        return out
    finfo = ml_dtypes.finfo(dt)
    corners = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, 3.0, float(finfo.max),
               -float(finfo.max), float(finfo.tiny), float(finfo.smallest_subnormal),
               -float(finfo.smallest_subnormal), np.inf, -np.inf, np.nan, 100.0, -100.0,
               1e-3, 0.1]
    scale = rng.choice([1e-3, 1.0, 10.0, 1e3], n)
    rest = rng.standard_normal(n) * scale
    values = np.concatenate([np.array(corners, np.float64), rest])[:n]
    with np.errstate(over="ignore"):
        return values.astype(dt)


def run_both(module, args):
    """(ours, interpreter's) outputs of `module` (text or Module) on `args`."""
    if isinstance(module, str):
        module = hlo_opt.parse(module)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        ours = hlo_opt.compile(module)(*args)
    with np.errstate(all="ignore"):
        want = hlo_opt.evaluate(module, args)
    return ours, want


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|a - b| in units of the last place of b's type, as float64; 0 where both are NaN or
    equal (same sign of zero), inf where exactly one is NaN or infinite or zeros differ."""
    dt = b.dtype
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(all="ignore"):
        spacing = np.abs(np.spacing(np.abs(b).astype(dt)).astype(np.float64))
    spacing = np.where(spacing > 0, spacing, float(ml_dtypes.finfo(dt).smallest_subnormal))
    with np.errstate(invalid="ignore", over="ignore"):
        d = np.abs(a64 - b64) / spacing
    same = (a64 == b64) & (np.signbit(a64) == np.signbit(b64))
    both_nan = np.isnan(a64) & np.isnan(b64)
    d = np.where(same | both_nan, 0.0, d)
    special = ~np.isfinite(a64) | ~np.isfinite(b64)
    return np.where(special & ~(same | both_nan), np.inf, d)


def assert_matches(got, want, ulps: float = 0.0, what: str = "", atol: float = 0.0):
    """Same dtype and shape; integers and pred equal; floats within `ulps` (0: bit-exact,
    -0 != +0) or `atol`; complex parts separately."""
    assert got.dtype == want.dtype and got.shape == want.shape, \
        f"{what}: {got.dtype}{got.shape} vs {want.dtype}{want.shape}"
    if want.dtype.kind == "c":
        assert_matches(got.real.copy(), want.real.copy(), ulps, what + ".real", atol)
        assert_matches(got.imag.copy(), want.imag.copy(), ulps, what + ".imag", atol)
        return
    if want.dtype.kind in "biu":
        bad = np.flatnonzero(got.reshape(-1) != want.reshape(-1))
        assert not bad.size, f"{what}: {bad.size} differ, e.g. at {bad[0]}: " \
                             f"{got.reshape(-1)[bad[0]]} vs {want.reshape(-1)[bad[0]]}"
        return
    with np.errstate(all="ignore"):
        d = ulp_distance(got.reshape(-1), want.reshape(-1))
    if atol:
        with np.errstate(all="ignore"):
            close = np.abs(got.astype(np.float64) - want.astype(np.float64)).reshape(-1) <= atol
        d = np.where(close, 0.0, d)
    bad = np.flatnonzero(d > ulps)
    assert not bad.size, (f"{what}: {bad.size} of {d.size} off by more than {ulps} ulp, e.g. "
                          f"at {bad[0]}: {got.reshape(-1)[bad[0]]!r} vs "
                          f"{want.reshape(-1)[bad[0]]!r} ({d[bad[0]]:.3g} ulp)")


def random_args(module, rng, small_ints: bool = True) -> list:
    """Inputs for every entry parameter, edge values included."""
    args = []
    for p in module.entry.parameters:
        s = p.shape
        vals = edge_values(s.element_type, max(s.num_elements, 1), rng, small_ints)
        args.append(rng.permutation(vals)[:s.num_elements].reshape(s.dims))
    return args


# ------------------------------------------------- every op of the lowering's tables

def _result_type(op: str, t: str) -> str | None:
    """The result type of elementwise `op` on operands of type `t` (None: not an HLO op
    on that type)."""
    if op in ("is-finite", "compare"):
        return "pred"
    if op in ("abs", "sign") and ELEM_TYPES[t].kind == "uint":
        return None                       # XLA defines them on signed and float types only
    if op in ("real", "imag", "abs"):
        return {"c64": "f32", "c128": "f64"}.get(t, t)
    if op == "complex":
        return {"f32": "c64", "f64": "c128"}.get(t)
    return t


def elementwise_module(t: str) -> str:
    """Every unary and binary op the lowering has for type `t` (its own tables), in one
    module."""
    kind = ELEM_TYPES[t].kind
    lines = [f"x = {t}[16] parameter(0)", f"y = {t}[16] parameter(1)"]
    for table, arity in ((UNARY, 1), (BINARY, 2)):
        for op, (_, kinds) in table.items():
            out = _result_type(op, t)
            if kind not in kinds or out is None:
                continue
            direction = ", direction=EQ" if op == "compare" else ""
            lines.append(f"{op}.{arity} = {out}[16] {op}({'x, y' if arity == 2 else 'x'}){direction}")
    return tuple_module(lines)


def converts_module() -> str:
    """convert between every pair of lowered types (complex only to complex)."""
    types = list(ELEM_TYPES)
    lines = [f"x.{s} = {s}[16] parameter({k})" for k, s in enumerate(types)]
    lines += [f"c.{s}.{d} = {d}[16] convert(x.{s})" for s in types for d in types
              if s != d and (ELEM_TYPES[s].kind != "complex" or ELEM_TYPES[d].kind == "complex")]
    return tuple_module(lines)


def tuple_module(lines: list[str], computations: str = "") -> str:
    """A module whose result is the tuple of every instruction but the parameters."""
    names = [l.split(" = ")[0] for l in lines if " parameter(" not in l]
    shapes = [l.split(" = ")[1].split(" ")[0] for l in lines if " parameter(" not in l]
    root = f"ROOT r = ({', '.join(shapes)}) tuple({', '.join(names)})"
    return f"HloModule m\n{computations}\nENTRY e {{\n  " + "\n  ".join(lines + [root]) + "\n}\n"


# The first maximum and its index (ties to the smaller index): a variadic reducer of
# several ops, which the lowering inlines as written.
ARGMAX_REDUCER = """argmax {
  a = f32[] parameter(0)
  i = s32[] parameter(1)
  b = f32[] parameter(2)
  j = s32[] parameter(3)
  gt = pred[] compare(a, b), direction=GT
  eq = pred[] compare(a, b), direction=EQ
  lt = pred[] compare(i, j), direction=LT
  tie = pred[] and(eq, lt)
  pick = pred[] or(gt, tie)
  v = f32[] select(pick, a, b)
  k = s32[] select(pick, i, j)
  ROOT t = (f32[], s32[]) tuple(v, k)
}"""
