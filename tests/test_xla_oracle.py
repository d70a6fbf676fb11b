"""The XLA oracle: XLA parses, compiles and runs HLO text on the CPU, and we know its habits.

Also checks the corpus in tests/corpus: every fixture parses in XLA, every module runs on
random inputs with the result shapes its signature promises, and the generated set matches
the generator's list of workloads.
"""
from __future__ import annotations

import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from hlo_opt import xla_oracle

CORPUS = Path(__file__).parent / "corpus"
FIXTURES = sorted(CORPUS.rglob("*.hlo"))
MODULES = [p for p in FIXTURES if not p.name.endswith(".xla_opt.hlo")]

requires_xla = pytest.mark.skipif(not xla_oracle.available(), reason=xla_oracle.reason or "jax")


def _id(path: Path) -> str:
    return str(path.relative_to(CORPUS))


def _module(body: str, computations: str = "") -> str:
    return f"HloModule m\n{computations}\nENTRY e {{\n{body}\n}}\n"


def _random_args(specs, seed=0):
    rng = np.random.default_rng(seed)
    args = []
    for dims, dt in specs:
        if dt == np.bool_:
            a = rng.random(dims) < 0.5
        elif dt.kind in "iu":
            a = rng.integers(0, 10, dims)         # small non-negative ints: valid indices, labels
        elif dt.kind == "c":
            a = rng.standard_normal(dims) + 1j * rng.standard_normal(dims)
        else:
            a = rng.standard_normal(dims)
        args.append(np.asarray(a).astype(dt))
    return args


def _result_shapes(text: str) -> list[tuple[str, tuple[int, ...]]]:
    """Leaf array shapes of the entry result, from `entry_computation_layout={(...)->...}`."""
    header = text.split("\n", 1)[0]
    result = re.search(r"entry_computation_layout=\{\(.*\)->(.*)\}", header).group(1)
    return [(t, tuple(int(d) for d in dims.split(",") if d))
            for t, dims in re.findall(r"(\w+)\[([\d,]*)\]", result)]


# --- simple modules against numpy -------------------------------------------------------------

@requires_xla
def test_add():
    x, y = np.arange(6, dtype=np.float32).reshape(2, 3), np.full((2, 3), 0.5, np.float32)
    text = _module("  x = f32[2,3] parameter(0)\n  y = f32[2,3] parameter(1)\n"
                   "  ROOT r = f32[2,3] add(x, y)")
    [r] = xla_oracle.run(text, [x, y])
    assert r.dtype == np.float32 and r.shape == (2, 3)
    np.testing.assert_array_equal(r, x + y)


@requires_xla
def test_dot():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((8, 16)).astype(np.float32), rng.standard_normal((16, 4)).astype(np.float32)
    text = _module("  a = f32[8,16] parameter(0)\n  b = f32[16,4] parameter(1)\n"
                   "  ROOT d = f32[8,4] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}")
    [d] = xla_oracle.run(text, [a, b])
    np.testing.assert_allclose(d, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-5)


@requires_xla
def test_nested_tuple_result_is_flattened_in_order():
    text = _module("  a = f32[2] parameter(0)\n  n = f32[2] negate(a)\n  t = (f32[2], f32[2]) tuple(a, n)\n"
                   "  ROOT r = ((f32[2], f32[2]), s32[]) tuple(t, s32[] constant(7))")
    a = np.array([1, -2], np.float32)
    out = xla_oracle.run(text, [a])
    assert [o.tolist() for o in out] == [[1, -2], [-1, 2], 7]
    assert out[2].dtype == np.int32 and out[2].shape == ()


@requires_xla
@pytest.mark.parametrize("hlo_type, dtype, op, expect", [
    ("bf16", ml_dtypes.bfloat16, "add", lambda a, b: a + b),
    ("f8e4m3fn", ml_dtypes.float8_e4m3fn, "multiply", lambda a, b: a * b),
    ("f16", np.float16, "subtract", lambda a, b: a - b),
    ("f64", np.float64, "divide", lambda a, b: a / b),
    ("s64", np.int64, "multiply", lambda a, b: a * b),
    ("u8", np.uint8, "add", lambda a, b: a + b),           # wraps around
    ("pred", np.bool_, "xor", lambda a, b: a ^ b),
    ("c64", np.complex64, "multiply", lambda a, b: a * b),
])
def test_dtypes_round_trip(hlo_type, dtype, op, expect):
    a = np.array([1, 2, 3, 250, 0], np.float64)
    b = np.array([3, 1, 0.5, 9, 1], np.float64)
    if dtype == np.bool_:
        a, b = a > 1, b > 1
    elif dtype == np.complex64:
        a, b = a + 1j, b - 2j
    a, b = a.astype(dtype), b.astype(dtype)
    text = _module(f"  a = {hlo_type}[5] parameter(0)\n  b = {hlo_type}[5] parameter(1)\n"
                   f"  ROOT r = {hlo_type}[5] {op}(a, b)")
    [r] = xla_oracle.run(text, [a, b])
    assert r.dtype == dtype
    wide = np.float64 if np.dtype(dtype).kind == "V" else dtype    # ml_dtypes: compare NaN as NaN
    np.testing.assert_array_equal(r.astype(wide), expect(a, b).astype(dtype).astype(wide))


@requires_xla
def test_scalar_arguments_may_be_python_numbers():
    text = _module("  p = s32[] parameter(0)\n  ROOT r = s32[] multiply(p, p)")
    assert xla_oracle.run(text, [7])[0] == 49


@requires_xla
def test_integer_division_by_zero_follows_xla():
    text = _module("  a = s32[3] parameter(0)\n  b = s32[3] parameter(1)\n"
                   "  ROOT r = (s32[3], s32[3]) tuple(divide(a, b), remainder(a, b))")
    q, r = xla_oracle.run(text, [np.array([7, -7, 5], np.int32), np.array([2, 2, 0], np.int32)])
    assert q.tolist() == [3, -3, -1] and r.tolist() == [1, -1, 5]


@requires_xla
def test_reduce_with_called_computation():
    add = "add {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  ROOT s = f32[] add(x, y)\n}"
    text = _module("  p = f32[4,5] parameter(0)\n  z = f32[] constant(0)\n"
                   "  ROOT r = f32[4] reduce(p, z), dimensions={1}, to_apply=add", add)
    p = np.arange(20, dtype=np.float32).reshape(4, 5)
    np.testing.assert_array_equal(xla_oracle.run(text, [p])[0], p.sum(1))


# --- the caveats the module docstring documents, pinned so a new jaxlib shows up --------------

@requires_xla
def test_denormals_are_flushed_to_zero():
    text = _module("  a = f32[3] parameter(0)\n  b = f32[3] parameter(1)\n  ROOT r = f32[3] multiply(a, b)")
    [r] = xla_oracle.run(text, [np.array([1e-40, 1e-39, 1.0], np.float32), np.ones(3, np.float32)])
    assert r.tolist() == [0.0, 0.0, 1.0]


@requires_xla
def test_nan_propagates_through_max_and_min():
    text = _module("  a = f32[2] parameter(0)\n  b = f32[2] parameter(1)\n"
                   "  ROOT r = (f32[2], f32[2]) tuple(maximum(a, b), minimum(a, b))")
    mx, mn = xla_oracle.run(text, [np.array([np.nan, 1], np.float32), np.array([1, np.nan], np.float32)])
    assert np.isnan(mx).all() and np.isnan(mn).all()


@requires_xla
def test_bf16_reduce_rounds_every_add_in_a_tree_of_32_wide_windows():
    add = "add {\n  x = bf16[] parameter(0)\n  y = bf16[] parameter(1)\n  ROOT s = bf16[] add(x, y)\n}"
    text = _module("  p = bf16[4096] parameter(0)\n  z = bf16[] constant(0)\n"
                   "  ROOT r = bf16[] reduce(p, z), dimensions={0}, to_apply=add", add)
    bf16 = ml_dtypes.bfloat16

    def in_order(values):
        total = bf16(0)
        for v in values:
            total = bf16(np.float32(total) + np.float32(v))
        return total

    x = np.random.default_rng(0).standard_normal(4096).astype(bf16)
    partial = x
    while partial.size > 32:                   # XLA:CPU's tree-reduction rewrite
        partial = np.array([in_order(w) for w in partial.reshape(-1, 32)], bf16)
    [r] = xla_oracle.run(text, [x])
    assert r == in_order(partial) != in_order(x)


@requires_xla
def test_transcendentals_close_to_float64():
    x = np.linspace(-8, 8, 4001, dtype=np.float32)
    text = _module("  x = f32[4001] parameter(0)\n"
                   "  ROOT r = (f32[4001], f32[4001]) tuple(exponential(x), tanh(x))")
    e, t = xla_oracle.run(text, [x])
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(e, np.exp(x64), rtol=2e-7)
    np.testing.assert_allclose(t, np.tanh(x64), rtol=4e-7, atol=1e-30)


# --- errors, compile, optimized text, timing --------------------------------------------------

@requires_xla
def test_parse_error_carries_xlas_message():
    with pytest.raises(xla_oracle.XlaError, match=r"\d+:\d+: error.*frobnicate"):
        xla_oracle.parse(_module("  p = f32[4] parameter(0)\n  ROOT r = f32[4] frobnicate(p)"))


@requires_xla
def test_wrong_shapes_parse_but_do_not_compile():
    text = _module("  p = f32[4] parameter(0)\n  ROOT r = f32[5] abs(p)")
    xla_oracle.parse(text)                                     # XLA's parser does not verify
    with pytest.raises(xla_oracle.XlaError):
        xla_oracle.compile(text)


@requires_xla
def test_arguments_are_checked():
    text = _module("  p = f32[2] parameter(0)\n  ROOT r = f32[2] negate(p)")
    with pytest.raises(xla_oracle.XlaError, match="expected 1 arguments"):
        xla_oracle.run(text, [])
    with pytest.raises(xla_oracle.XlaError, match="argument 0"):
        xla_oracle.run(text, [np.zeros(2, np.float64)])


@requires_xla
def test_compile_gives_optimized_text_and_time():
    text = (CORPUS / "elementwise_chain.hlo").read_text()
    compiled = xla_oracle.compile(text)
    assert compiled.seconds > 0
    optimized = compiled.optimized_text
    assert "is_scheduled=true" in optimized and " fusion(" in optimized
    xla_oracle.parse(optimized)                                # complete enough to read back
    assert xla_oracle.parse_seconds(text, repeat=2) > 0


@requires_xla
def test_fusions_and_transposing_bitcasts_run():
    # What XLA prints after its passes: a fused computation and a bitcast that transposes.
    fused = ("fused {\n  p0 = f32[2,3]{1,0} parameter(0)\n  ROOT e = f32[2,3]{1,0} exponential(p0)\n}")
    text = _module("  x = f32[2,3]{1,0} parameter(0)\n"
                   "  f = f32[2,3]{1,0} fusion(x), kind=kLoop, calls=fused\n"
                   "  ROOT b = f32[3,2]{0,1} bitcast(f)", fused)
    x = np.arange(6, dtype=np.float32).reshape(2, 3) / 4
    [r] = xla_oracle.run(text, [x])
    np.testing.assert_allclose(r, np.exp(x).T, rtol=1e-6)


@requires_xla
@pytest.mark.parametrize("name", ["cnn_train", "sort_topk", "one_hot_xent", "shared/gpt2_block_small"])
def test_optimized_fixture_computes_the_same(name):
    text = (CORPUS / f"{name}.hlo").read_text()
    args = _random_args(xla_oracle.parameter_specs(text))
    expected = xla_oracle.run(text, args)
    got = xla_oracle.run((CORPUS / f"{name}.xla_opt.hlo").read_text(), args)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        np.testing.assert_array_equal(g, e)


# --- the corpus -------------------------------------------------------------------------------

@requires_xla
@pytest.mark.parametrize("path", FIXTURES, ids=_id)
def test_fixture_parses_in_xla(path):
    xla_oracle.parse(path.read_text())


@requires_xla
@pytest.mark.parametrize("path", MODULES, ids=_id)
def test_fixture_runs_on_random_inputs(path):
    text = path.read_text()
    outputs = xla_oracle.run(text, _random_args(xla_oracle.parameter_specs(text)))
    assert [o.shape for o in outputs] == [dims for _, dims in _result_shapes(text)]


def _gen_corpus():
    pytest.importorskip("jax")
    from hlo_opt.tools import gen_corpus
    return gen_corpus


def test_corpus_has_every_workload():
    gen_corpus = _gen_corpus()
    generated = {p.name[:-len(".hlo")] for p in MODULES if p.parent == CORPUS}
    assert generated == set(gen_corpus.WORKLOADS)
    assert len(list((CORPUS / "shared").glob("*.hlo"))) >= 30
    assert all((CORPUS / f"{name}.xla_opt.hlo").exists() for name in generated)


def test_corpus_has_a_module_of_2000_instructions():
    gen_corpus = _gen_corpus()
    counts = {p.name: gen_corpus.instruction_count(p.read_text()) for p in MODULES}
    assert max(counts.values()) >= 2000
