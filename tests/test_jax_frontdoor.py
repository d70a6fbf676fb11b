"""The JAX front door (hlo_opt.jax): `lower` gives the HLO jax.jit hands XLA with the pytrees
around it; `jit` runs a JAX function through our optimizer and compiler and must give what
jax.jit gives, tracing once per signature and refusing loudly what it cannot run natively."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

import hlo_opt  # noqa: E402
from hlo_opt import jax as hj  # noqa: E402
from hlo_opt.lowering import FallbackWarning, cuda_device  # noqa: E402
from hlo_opt.tools import jax_models  # noqa: E402

RNG = np.random.default_rng(0)


def normal(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def assert_like_jax(fn, *args, rtol=1e-5, atol=1e-5, **options):
    """hj.jit(fn) and jax.jit(fn) give the same pytree of the same values."""
    got, want = hj.jit(fn, **options)(*args), jax.jit(fn)(*args)
    assert jax.tree.structure(got) == jax.tree.structure(want)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64),
                                   rtol=rtol, atol=atol)
    return got


# --- lower ------------------------------------------------------------------------------------

def dense(params, x):
    h = jnp.tanh(x @ params["w"] + params["b"])
    return {"h": h, "stats": (h.sum(), h.max())}


def test_lower_keeps_parameter_and_result_pytrees():
    params = {"w": normal(4, 3), "b": normal(3)}
    x = normal(2, 4)
    lowered = hj.lower(dense, params, x)
    assert lowered.in_tree == jax.tree.structure(((params, x), {}))
    assert lowered.out_tree == jax.tree.structure({"h": 0, "stats": (0, 0)})
    # flattened avals in tree order: params' keys sorted (b, w), then x
    assert [a.shape for a in lowered.in_avals] == [(3,), (4, 3), (2, 4)]
    assert [a.shape for a in lowered.out_avals] == [(2, 3), (), ()]
    assert [p.shape.dims for p in lowered.module.entry.parameters] == [(3,), (4, 3), (2, 4)]
    leaves = jax.tree.leaves(((params, x), {}))
    outputs = hlo_opt.evaluate(lowered.module, lowered.parameters(leaves))
    result = lowered.results(outputs)
    np.testing.assert_allclose(result["h"], dense(params, x)["h"], rtol=1e-6)
    np.testing.assert_allclose(result["stats"][1], dense(params, x)["stats"][1], rtol=1e-6)


def scale_first(x, unused, y):
    return x * 2 + y


def test_lower_maps_parameters_past_inputs_jax_drops():
    x, unused, y = normal(3), normal(5), normal(3)
    pruned = hj.lower(scale_first, x, unused, y)
    assert pruned.kept == (0, 2) and len(pruned.module.entry.parameters) == 2
    kept = hj.lower(jax.jit(scale_first, keep_unused=True), x, unused, y)
    assert kept.kept == (0, 1, 2)
    for lowered in (pruned, kept):
        [out] = hlo_opt.evaluate(lowered.module, lowered.parameters([x, unused, y]))
        np.testing.assert_allclose(out, x * 2 + y, rtol=1e-6)


def test_lower_takes_shape_dtype_structs_and_bf16():
    spec = jax.ShapeDtypeStruct((2, 8), jnp.bfloat16)
    lowered = hj.lower(lambda a, b: a @ b.T, spec, spec)
    assert [str(p.shape) for p in lowered.module.entry.parameters] == ["bf16[2,8]{1,0}"] * 2
    assert lowered.out_avals[0].dtype == jnp.bfloat16


def test_lower_of_a_jitted_function_uses_its_static_arguments():
    def power(x, n):
        return x ** n
    lowered = hj.lower(jax.jit(power, static_argnums=1), normal(3), 3)
    assert lowered.in_tree == jax.tree.structure(((0,), {}))    # n is not an input
    assert len(lowered.module.entry.parameters) == 1


def test_lower_reports_a_scalar_and_weak_type():
    lowered = hj.lower(lambda x, s: x * s, normal(3), 2.0)
    assert lowered.in_avals[1].shape == () and lowered.in_avals[1].weak_type


# --- jit against jax.jit ----------------------------------------------------------------------

def small_params(shapes):
    return jax.tree.map(lambda s: normal(*s) * 0.3, shapes,
                        is_leaf=lambda s: isinstance(s, tuple))


def test_jit_mlp_matches_jax():
    params = small_params(jax_models.mlp_shapes([16, 32, 8]))
    assert_like_jax(jax_models.mlp, params, normal(4, 16))


def test_jit_attention_block_matches_jax():
    params = small_params(jax_models.gpt2_block_shapes(16))
    assert_like_jax(lambda p, x: jax_models.gpt2_block(p, x, heads=2), params, normal(2, 8, 16),
                    rtol=1e-4, atol=1e-4)


def test_jit_convolution_and_pooling_match_jax():
    def conv_net(w, x):
        h = jax.nn.relu(lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                                 dimension_numbers=("NHWC", "HWIO", "NHWC")))
        return lax.reduce_window(h, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    assert_like_jax(conv_net, normal(3, 3, 4, 4), normal(2, 8, 8, 4), rtol=1e-4, atol=1e-4)


def test_jit_runs_grad_and_vmap_of_a_function():
    def loss(w, x):
        return jnp.mean(jnp.tanh(x @ w) ** 2)
    w, x = normal(4, 3), normal(5, 4)
    assert_like_jax(jax.grad(loss), w, x)
    assert_like_jax(jax.value_and_grad(loss), w, x)
    assert_like_jax(jax.vmap(lambda a: a @ a.T), normal(6, 3, 2))
    with pytest.raises(TypeError, match=r"jit\(jax.grad\(f\)\)"):
        jax.grad(hj.jit(loss))(w, x)                  # native code cannot be traced


def test_jit_bf16_and_python_scalars():
    x = jnp.asarray(normal(4, 8), jnp.bfloat16)
    assert_like_jax(lambda a, s: jnp.sum(a * s, axis=1), x, 1.5, rtol=2e-2, atol=2e-2)


def test_prng_keys_are_passed_as_their_key_data():
    def noisy(key, x):
        return x + jax.random.normal(key, x.shape)
    assert_like_jax(noisy, jax.random.PRNGKey(3), normal(5))          # a raw u32[2] key
    key = jax.random.key(3)                                            # a typed key array
    assert_like_jax(noisy, key, normal(5))            # its "Sharding" annotation is no bar
    lowered = hj.lower(noisy, key, normal(5))
    assert str(lowered.module.entry.parameters[0].shape) == "u32[2]{0}"
    np.testing.assert_array_equal(lowered.parameters([key, normal(5)])[0],
                                  jax.random.key_data(key))
    with pytest.raises(hlo_opt.UnsupportedError, match="key_data"):
        hj.jit(jax.random.split)(key)                                  # keys as results


def test_jit_returns_jax_arrays_or_numpy_in_the_output_pytree():
    params = {"w": normal(4, 3), "b": normal(3)}
    got = hj.jit(dense)(params, normal(2, 4))
    assert isinstance(got["h"], jax.Array) and isinstance(got["stats"], tuple)
    as_numpy = hj.jit(dense, output="numpy")(params, normal(2, 4))
    assert all(type(leaf) is np.ndarray for leaf in jax.tree.leaves(as_numpy))
    assert hj.jit(lambda x: None)(normal(2)) is None


def test_jit_decorator_forms_and_bad_options():
    @hj.jit
    def plain(x):
        return x + 1

    @hj.jit(output="numpy")
    def configured(x):
        return x + 1
    assert plain.__name__ == "plain"
    np.testing.assert_array_equal(configured(np.zeros(2, np.float32)), [1, 1])
    with pytest.raises(ValueError, match="fallback"):
        hj.jit(plain, fallback="silently")


def test_jit_on_the_gpu_target_runs_there_or_says_why_not():
    jitted = hj.jit(lambda x: jnp.tanh(x) * 2, target="gpu")
    x = normal(64)
    if cuda_device.unavailable_reason():
        with pytest.raises(hlo_opt.UnsupportedError, match="GPU"):
            jitted(x)
    else:
        np.testing.assert_allclose(jitted(x), np.tanh(x) * 2, rtol=1e-6)


# --- the cache ---------------------------------------------------------------------------------

def test_jit_traces_once_per_signature():
    traces = []

    def f(x, y):
        traces.append(x.shape)
        return x * y
    jitted = hj.jit(f)
    jitted(normal(3), normal(3))
    jitted(normal(3), normal(3))                       # same signature: cached
    assert jitted.cache_info() == hj.CacheInfo(hits=1, misses=1, size=1)
    jitted(normal(4), normal(4))                       # new shape: traced again
    jitted(normal(3), 2.0)                             # a weak-typed scalar: a new signature
    assert len(traces) == 3 and jitted.cache_info().size == 3


def test_jit_static_arguments_key_the_cache_by_value():
    jitted = hj.jit(lambda x, n, *, offset: x ** n + offset, static_argnums=1,
                    static_argnames="offset")
    x = normal(3)
    np.testing.assert_allclose(jitted(x, 2, offset=1.0), x ** 2 + 1, rtol=1e-6)
    np.testing.assert_allclose(jitted(x, 3, offset=1.0), x ** 3 + 1, rtol=1e-5)
    jitted(x, 3, offset=1.0)
    assert jitted.cache_info() == hj.CacheInfo(hits=1, misses=2, size=2)
    with pytest.raises(TypeError, match="hashable"):
        jitted(x, [2], offset=1.0)


def test_jit_follows_the_x64_flag():
    jitted = hj.jit(lambda x: x * 2)
    x = np.arange(3, dtype=np.float64)
    assert jitted(x).dtype == jnp.float32                 # as jax: f64 data traced as f32
    with jax.enable_x64(True):
        doubled = jitted(x)
        assert doubled.dtype == jnp.float64
        assert str(jitted.lower(x).module.entry.parameters[0].shape) == "f64[3]{0}"
    np.testing.assert_array_equal(doubled, x * 2)
    assert jitted.cache_info().size == 2


def test_jit_shows_its_lowered_and_optimized_modules():
    jitted = hj.jit(lambda x: jnp.exp(x) * 2 + 1)
    x = normal(8)
    assert "exponential" in jitted.lower(x).module.to_text()
    compiled = jitted.compile(x)
    assert compiled.stats["kernels"] == 1                 # one fused loop
    assert any(i.opcode == "fusion" for i in compiled.optimized.entry.instructions)
    assert jitted.cache_info().misses == 1
    jitted(x)
    assert jitted.cache_info().hits == 1


# --- what our compiler cannot run ---------------------------------------------------------------

def host_callback(x):
    return jax.pure_callback(lambda a: np.asarray(a) * 2, jax.ShapeDtypeStruct(x.shape, x.dtype), x)


def int4_product(x):
    small = x.astype(jnp.int4)
    return (small * small).astype(jnp.float32)


def test_an_op_without_code_is_an_error_naming_it():
    with pytest.raises(hlo_opt.UnsupportedError,
                       match=r"<jax.jit\(host_callback\)>:\d+:\d+: custom-call .*"
                             r"'xla_ffi_python_cpu_callback'"):
        hj.jit(host_callback)(normal(3))
    with pytest.raises(hlo_opt.UnsupportedError, match="lapack_spotrf"):
        hj.jit(jnp.linalg.cholesky)(np.eye(3, dtype=np.float32))


def test_a_side_effect_no_result_needs_is_refused_not_dropped():
    def printing(x):
        jax.debug.print("sum {}", x.sum())
        return x * 2
    with pytest.raises(hlo_opt.UnsupportedError,
                       match=r"<jax.jit\(printing\)>:\d+:\d+: custom-call .*side effects"):
        hj.jit(printing)(normal(3))


def test_ops_the_interpreter_would_run_are_an_error_unless_asked_for():
    x = np.array([1, -2, 3], np.float32)
    with pytest.raises(hlo_opt.UnsupportedError, match=r"\(multiply\): element type s4"):
        hj.jit(int4_product)(x)
    with pytest.warns(FallbackWarning, match="element type s4"):
        got = hj.jit(int4_product, fallback="interpreter")(x)
    np.testing.assert_array_equal(got, jax.jit(int4_product)(x))       # 3 * 3 wraps to -7


def test_fallback_to_jax_warns_naming_the_op_and_runs_jax():
    jitted = hj.jit(host_callback, fallback="jax")
    x = normal(3)
    with pytest.warns(hj.JaxFallbackWarning, match="xla_ffi_python_cpu_callback"):
        got = jitted(x)
    np.testing.assert_allclose(got, x * 2)
    assert jitted.compile(x).jax_reason is not None
    with warnings.catch_warnings():
        warnings.simplefilter("error")                # warned once, at tracing
        jitted(x)


# --- the benchmark (tools/bench_jax.py): a row carries what the table prints; no timing asserted

def test_bench_row_checks_results_and_counts_kernels_of_both():
    from hlo_opt.tools import bench_jax
    params = small_params(jax_models.mlp_shapes([8, 16, 4]))
    row = bench_jax.bench("mlp", jax_models.mlp, (params, normal(2, 8)), rounds=1, calls=1,
                          target="cpu")
    assert row["check"] is None and row["kernels"] >= 1 and row["xla_kernels"] >= 1
    assert row["ours_ms"] > 0 and row["jax_ms"] > 0 and row["ours_compile"] > 0
    assert bench_jax.table([row]).splitlines()[2].startswith("| mlp |")
    assert set(bench_jax.models(np.random.default_rng(0))) >= {"mlp", "attention", "cnn"}
