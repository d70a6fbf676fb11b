"""The JAX front door: a JAX function as HLO, and a `jax.jit` that runs it with our compiler.

    from hlo_opt import jax as hj
    lowered = hj.lower(f, params, x)        # what jax.jit would hand XLA, parsed
    print(hlo_opt.optimize(lowered.module).to_text())

    @hj.jit                                 # or @hj.jit(target="gpu", output="numpy")
    def f(params, x): ...
    y = f(params, x)                        # traced once per signature, then native code

`lower` goes through `jax.jit(fn).lower(...)` and its HLO text (the module XLA would
optimize), so anything JAX traces comes in: `jax.grad`, `jax.vmap`, `jax.value_and_grad` of
a function are just functions. A Module knows nothing of pytrees, so `Lowered` keeps them
beside it: the input and output tree definitions and flattened avals, and which input
leaves the module takes as parameters (jax drops unused ones unless `keep_unused`).

`jit` traces per input signature, keyed as jax keys its own cache (tree structure, shapes,
dtypes, weak types, static arguments' values, the x64 flag), then optimizes
(`hlo_opt.optimize`) and compiles (`hlo_opt.compile`) for `target`. What our compiler cannot
run natively is never hidden: by default it is an UnsupportedError naming the ops;
`fallback="interpreter"` runs them in the reference interpreter (a FallbackWarning names
them) and `fallback="jax"` runs the whole function with `jax.jit` (a JaxFallbackWarning says
why). jax is the optional extra `jax`; it is imported with this module.
"""
from __future__ import annotations

import functools
import inspect
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import jax
import numpy as np

from . import compile as compile_module, optimize as optimize_module, parse
from .errors import HloError, UnsupportedError
from .ir import Module
from .lowering import FallbackWarning

__all__ = ["lower", "jit", "Lowered", "Compiled", "Jitted", "CacheInfo", "JaxFallbackWarning"]

FALLBACKS = ("error", "interpreter", "jax")
OUTPUTS = ("jax", "numpy")


class JaxFallbackWarning(FallbackWarning):
    """A function `jit(..., fallback="jax")` could not compile runs in jax.jit instead."""


@dataclass(frozen=True)
class Lowered:
    """A JAX function lowered at one signature: the HLO Module and the pytrees around it.

    `in_tree` is the tree of `(args, kwargs)` without static arguments, as jax's own
    `Lowered.in_tree`; `in_avals` its leaves (ShapeDtypeStructs, weak types kept), one per
    leaf whether or not the module uses it; `kept[i]` is the leaf index of the module's
    parameter i. `out_tree`/`out_avals` describe the results, the module's outputs in order.
    """
    module: Module
    in_tree: Any
    in_avals: tuple
    out_tree: Any
    out_avals: tuple
    kept: tuple[int, ...]

    def parameters(self, leaves) -> list[np.ndarray]:
        """The module's arguments from the input leaves (arrays, jax arrays, scalars): the
        kept ones, as numpy arrays of the traced dtypes (so, as jax does, float64 data
        becomes float32 when x64 is off)."""
        if len(leaves) != len(self.in_avals):
            raise ValueError(f"{self.module.name} takes {len(self.in_avals)} input leaves, "
                             f"got {len(leaves)}")
        return [_array(leaves[i], self.in_avals[i].dtype) for i in self.kept]

    def results(self, outputs):
        """The module's flat outputs in the function's output pytree."""
        return jax.tree.unflatten(self.out_tree, outputs)


def lower(fn: Callable, *args, **kwargs) -> Lowered:
    """`fn` as the HLO jax.jit would hand XLA for these example arguments (arrays, scalars or
    jax.ShapeDtypeStructs, in any pytree). `fn` may be a `jax.jit(f, static_argnums=...,
    keep_unused=...)` function, whose options then apply (keeping them out of this
    function's keyword arguments, which are the example's)."""
    wrapped = fn if isinstance(fn, jax.stages.Wrapped) else jax.jit(fn)
    traced = wrapped.lower(*args, **kwargs)
    module = parse(traced.as_text(dialect="hlo"), filename=_source(fn))
    in_avals = tuple(_struct(a) for a in jax.tree.leaves(traced.in_avals))
    out_avals = tuple(jax.tree.leaves(traced.out_info))
    return Lowered(module, traced.in_tree, in_avals, traced.out_tree, out_avals,
                   _kept_leaves(traced, module, in_avals))


def _name(fn) -> str:
    return getattr(fn, "__name__", type(fn).__name__)


def _source(fn) -> str:
    """Where errors say they are: line:column refer to the text jax.jit(fn).lower(...)
    .as_text(dialect="hlo") prints."""
    return f"<jax.jit({_name(fn)})>"


def _array(leaf, dtype) -> np.ndarray:
    """A leaf as the module's parameter takes it: a typed PRNG key array (jax.random.key) is
    its key data."""
    if isinstance(dtype, np.dtype):
        return np.asarray(leaf, dtype)
    return np.asarray(jax.random.key_data(leaf))


def _physical(aval) -> jax.ShapeDtypeStruct:
    """The array an aval is in HLO (a PRNG key's is its key data)."""
    if isinstance(aval.dtype, np.dtype):
        return aval
    return jax.eval_shape(jax.random.key_data, aval)


def _struct(aval) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(aval.shape, aval.dtype, weak_type=aval.weak_type)


def _kept_leaves(traced, module: Module, in_avals: tuple) -> tuple[int, ...]:
    """Which input leaves are the module's parameters: all of them, or (jax pruned unused
    ones) those jax's lowering records as kept, checked against the parameters' shapes."""
    params = module.entry.parameters
    if len(params) == len(in_avals):
        kept = tuple(range(len(in_avals)))
    else:
        record = getattr(getattr(traced, "_lowering", None), "compile_args", {})
        kept = tuple(sorted(record.get("kept_var_idx", ())))
        if len(kept) != len(params):
            raise HloError(f"{module.name}: jax kept {len(params)} of {len(in_avals)} inputs "
                           "and this jax does not say which; lower jax.jit(fn, "
                           "keep_unused=True) instead")
    for param, leaf in zip(params, kept):
        aval = _physical(in_avals[leaf])
        if param.shape.is_tuple or param.shape.dims != tuple(aval.shape) or \
                param.shape.dtype.numpy != np.dtype(aval.dtype):
            raise HloError(f"{module.name}: parameter {param.name} is {param.shape}, input "
                           f"leaf {leaf} is {aval.dtype}{list(aval.shape)}")
    return kept


@dataclass
class Compiled:
    """One cache entry of a `jit` function: its Lowered, the optimized Module and our
    executable, or, when it fell back to jax (`fallback="jax"`), `jax_reason` and no
    executable. `stats`: optimize_seconds, compile_seconds, kernels, fallbacks."""
    lowered: Lowered | None
    optimized: Module | None
    executable: Any
    stats: dict = field(default_factory=dict)
    jax_reason: str | None = None


@dataclass(frozen=True)
class CacheInfo:
    hits: int
    misses: int
    size: int


class Jitted:
    """What `jit` returns: call it like the function. `lower(*args)` and `compile(*args)`
    show what it runs at a signature, `cache_info()` how often it traced."""

    def __init__(self, fn: Callable, target: str, rules, fp_mode: str, static_argnums,
                 static_argnames, fallback: str, output: str, optimize_options: dict):
        if fallback not in FALLBACKS:
            raise ValueError(f"fallback must be one of {FALLBACKS}, got {fallback!r}")
        if output not in OUTPUTS:
            raise ValueError(f"output must be one of {OUTPUTS}, got {output!r}")
        self.fn, self.target, self.rules, self.fp_mode = fn, target, rules, fp_mode
        self.fallback, self.output, self.optimize_options = fallback, output, optimize_options
        self._jax = jax.jit(fn, static_argnums=static_argnums, static_argnames=static_argnames,
                            keep_unused=True)
        self._static = _static_positions(fn, static_argnums, static_argnames)
        self._cache: dict = {}
        self._hits = self._misses = 0
        functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        leaves, entry = self._entry(args, kwargs)
        if entry.executable is None:
            return self._jax(*args, **kwargs)
        outputs = entry.executable.run(entry.lowered.parameters(leaves))
        if self.output == "jax":
            outputs = jax.device_put(outputs)          # one batched transfer
        return entry.lowered.results(outputs)

    def lower(self, *args, **kwargs) -> Lowered:
        """The function as HLO at this signature (not optimized)."""
        return lower(self._jax, *args, **kwargs)

    def compile(self, *args, **kwargs) -> Compiled:
        """The cache entry for this signature, traced and compiled if it is new."""
        return self._entry(args, kwargs)[1]

    def cache_info(self) -> CacheInfo:
        return CacheInfo(self._hits, self._misses, len(self._cache))

    def clear_cache(self) -> None:
        self._cache.clear()
        self._hits = self._misses = 0

    def _entry(self, args, kwargs) -> tuple[list, Compiled]:
        """The dynamic input leaves of a call and its cache entry, built if new."""
        leaves, key = self._signature(args, kwargs)
        entry = self._cache.get(key)
        if entry is None:
            self._misses += 1
            entry = self._cache[key] = self._build(args, kwargs)
        else:
            self._hits += 1
        return leaves, entry

    def _signature(self, args, kwargs):
        """The dynamic input leaves and the cache key of a call."""
        static_nums, static_names = self._static
        positions = {i % len(args) for i in static_nums if -len(args) <= i < len(args)}
        dynamic = (tuple(a for i, a in enumerate(args) if i not in positions),
                   {k: v for k, v in kwargs.items() if k not in static_names})
        static = tuple((i, args[i]) for i in sorted(positions)) + \
            tuple(sorted((k, v) for k, v in kwargs.items() if k in static_names))
        leaves, tree = jax.tree.flatten(dynamic)
        if any(isinstance(x, jax.core.Tracer) for x in leaves):
            raise TypeError(f"{_name(self.fn)} runs native code, which jax transformations "
                            "cannot trace: transform the function first, e.g. "
                            "hlo_opt.jax.jit(jax.grad(f)) rather than jax.grad(jit(f))")
        key = (tree, tuple(jax.typeof(x) for x in leaves), static,
               jax.config.read("jax_enable_x64"))
        try:
            hash(key)
        except TypeError as e:
            raise TypeError(f"static arguments of {_name(self.fn)} must be hashable: {e}") from None
        return leaves, key

    def _build(self, args, kwargs) -> Compiled:
        try:
            lowered = self.lower(*args, **kwargs)
            return self._compile(lowered)
        except HloError as e:
            e.filename = e.filename or _source(self.fn)
            if self.fallback != "jax":
                raise
            warnings.warn(f"{_name(self.fn)} runs in jax.jit: {e}", JaxFallbackWarning,
                          stacklevel=4)
            return Compiled(None, None, None, jax_reason=str(e))

    def _compile(self, lowered: Lowered) -> Compiled:
        keys = [a for a in lowered.out_avals if not isinstance(a.dtype, np.dtype)]
        if keys:
            raise UnsupportedError(f"results of type {keys[0].dtype} come back as plain "
                                   "arrays only: return jax.random.key_data(key) instead")
        start = time.perf_counter()
        optimized = optimize_module(lowered.module, rules=self.rules, fp_mode=self.fp_mode,
                                    target=self.target, **self.optimize_options)
        optimized_at = time.perf_counter()
        with warnings.catch_warnings():          # said below, for cached executables too
            warnings.simplefilter("ignore", FallbackWarning)
            executable = compile_module(optimized, target=self.target, verify=False)
        fallbacks = executable.stats.get("fallbacks", [])
        if fallbacks:
            what = f"the {self.target} compiler cannot run {', '.join(fallbacks)} natively"
            if self.fallback != "interpreter":
                raise UnsupportedError(f"{what} (fallback='interpreter' runs them in the "
                                       "interpreter, fallback='jax' the function in jax.jit)")
            warnings.warn(f"{_source(self.fn)}: {what}; they run in the interpreter",
                          FallbackWarning, stacklevel=5)
        stats = {"optimize_seconds": optimized_at - start,
                 "compile_seconds": time.perf_counter() - optimized_at,
                 "kernels": executable.stats["kernels"], "fallbacks": fallbacks}
        return Compiled(lowered, optimized, executable, stats)


def _static_positions(fn, argnums, argnames) -> tuple[tuple[int, ...], frozenset[str]]:
    """Static arguments by position and by name, each inferred from the other through the
    signature as jax.jit does when only one is given."""
    nums = _tuple(argnums)
    names = _tuple(argnames)
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return nums, frozenset(names)
    positional = [n for n, p in params.items()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if argnames is None:
        names = tuple(positional[i] for i in nums if -len(positional) <= i < len(positional)
                      and params[positional[i]].kind != inspect.Parameter.POSITIONAL_ONLY)
    if argnums is None:
        nums = tuple(positional.index(n) for n in names if n in positional)
    return nums, frozenset(names)


def _tuple(value) -> tuple:
    if value is None:
        return ()
    return (value,) if isinstance(value, (int, str)) else tuple(value)


def jit(fn: Callable | None = None, *, target: str = "cpu", rules="default",
        fp_mode: str = "xla", static_argnums=None, static_argnames=None,
        fallback: str = "error", output: str = "jax", **optimize_options):
    """Like `jax.jit`, compiled by hlo-opt: `@jit` or `@jit(target=..., ...)`.

    target: "cpu" or "gpu" (compile refuses clearly where there is none); rules, fp_mode
    and `optimize_options` (time_limit, node_limit, fusion, ...) go to hlo_opt.optimize.
    fallback: "error" (an UnsupportedError naming what our compiler cannot run natively),
    "interpreter" or "jax" (see the module's docstring). output: "jax" arrays or "numpy".
    """
    if fn is None:
        return functools.partial(jit, target=target, rules=rules, fp_mode=fp_mode,
                                 static_argnums=static_argnums, static_argnames=static_argnames,
                                 fallback=fallback, output=output, **optimize_options)
    return Jitted(fn, target, rules, fp_mode, static_argnums, static_argnames, fallback,
                  output, optimize_options)
