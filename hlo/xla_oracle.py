"""XLA itself as an oracle: parse, compile and run HLO text with jaxlib on the host CPU.

    from hlo_opt import xla_oracle
    if not xla_oracle.available():
        pytest.skip(xla_oracle.reason)
    [y] = xla_oracle.run(text, [np.ones((2, 3), np.float32)])

jax is an optional extra, so it is imported on first use: importing this module never fails.

How text reaches the CPU: XLA's HLO parser -> HloModuleProto -> StableHLO (jaxlib 0.10 has no
entry point that compiles an HLO proto directly; `jax.jit` takes the same StableHLO -> HLO
road) -> the PjRt CPU client, which runs XLA:CPU's HLO passes and codegen. On the way:

* What XLA prints after its own passes is rewritten into plain HLO of the same meaning, so an
  optimized module (ours or XLA's) runs too: `fusion` becomes `call` (XLA:CPU rejects fused
  input, "Fusion must have backend config", or aborts on a CHECK), and `bitcast`, whose
  meaning lives in layouts that StableHLO drops, becomes transpose/reshape/bitcast-convert.
  The rewrite works on hlo_opt's IR of XLA's canonical print (hlo/layout_free.py holds the
  bitcast rewrite the TPU layout pass uses too).
* Compile options pin the floating-point mode: fast-math off (also XLA:CPU's default) and no
  excess precision (XLA:CPU already keeps every convert it is given).
* `parse` is XLA's parser alone, without the HLO verifier: wrong shapes are caught by
  `compile`, in StableHLO's words. A module XLA accepts but mis-handles can still end the
  process on a CHECK failure (seen only with the pre-fused input the rewrite above avoids).
* Entry parameters must be arrays (no tuple parameters); results come back flattened.

Semantics of XLA:CPU, measured with jaxlib 0.10.2 on x86-64 (tests/test_xla_oracle.py pins
the first four):

* Denormals are flushed to zero (FTZ and DAZ), in f32 and f64: 1e-40 * 1 = 0, and
  exp(-100) = 0 in f32. numpy keeps denormals, so compare with an absolute tolerance.
* NaN propagates through maximum/minimum; maximum(-0, +0) = +0, minimum(-0, +0) = -0.
  Integer division by zero gives -1 and remainder by zero the dividend (XLA's rules).
* A bf16 reduce rounds to bf16 after every add, as written, but XLA reassociates it: its tree
  rewrite sums windows of 32 in order, then windows of 32 of those partial sums, and so on.
  f32 reduces are vectorized in codegen (order unspecified; a 1e5-element sum equalled
  numpy's pairwise sum and differed from the sequential one). bf16 dots convert to f32, dot,
  and round once.
* Transcendentals are XLA's own polynomial approximations, not libm. Largest errors over 2e5
  random inputs, relative to float64 numpy: f32 exp 8e-8 (1 ulp), log 1.0e-7, tanh 2.8e-7
  (2 ulp), logistic 1.5e-7, erf 3.0e-7 (2.5 ulp), expm1 3.3e-7, log1p 2.0e-7, sin/cos 6e-8,
  tan 7e-8, rsqrt 7e-8, cbrt 9e-8, sqrt exact; f64 within 3 ulp except log1p (2.6e-14 near
  -0.9). bf16 and f16 ops are computed in f32 and rounded once: bit-equal to the correctly
  rounded float64 result in every sample.
* f32 dot 128x512x96: up to 5.7e-5 absolute from numpy's f32 matmul (4.4e-5 from float64).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

reason = ""             # why available() is False; "" while it is True or not yet asked
_xla = None             # the lazily imported jaxlib pieces, see _jax()

# Pinned compile options (XLA debug-option name, value).
_OPTIONS = [
    ("xla_cpu_enable_fast_math", False),
    ("xla_allow_excess_precision", False),
]


class XlaError(Exception):
    """XLA rejected the text, the compile or the arguments; `message` is XLA's own words."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def available() -> bool:
    """True when jax/jaxlib import and have a CPU device; otherwise sets `reason`."""
    global reason
    try:
        _jax()
    except Exception as e:          # ImportError, or a jaxlib that cannot start its CPU client
        reason = f"XLA oracle unavailable (install the 'jax' extra): {type(e).__name__}: {e}"
        return False
    reason = ""
    return True


def parse(text: str):
    """XLA's parser (no verifier: shapes are checked at compile). Returns jaxlib's HloModule."""
    hlo = _jax().hlo
    try:
        return hlo.hlo_module_from_text(text)
    except Exception as e:
        raise XlaError(str(e)) from None


def parse_seconds(text: str, repeat: int = 5) -> float:
    """Best wall time of `repeat` parses by XLA's C++ parser."""
    parse(text)
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        _xla.hlo.hlo_module_from_text(text)
        best = min(best, time.perf_counter() - start)
    return best


def parameter_specs(text: str) -> list[tuple[tuple[int, ...], np.dtype]]:
    """The entry computation's parameters as (dims, numpy dtype), in order."""
    return _specs(parse(text))


def _specs(module) -> list[tuple[tuple[int, ...], np.dtype]]:
    program = _xla.hlo.XlaComputation(module.as_serialized_hlo_module_proto()).program_shape()
    specs = []
    for i, shape in enumerate(program.parameter_shapes()):
        if shape.is_tuple():
            raise XlaError(f"parameter {i} is a tuple; the oracle takes array parameters only")
        specs.append((tuple(shape.dimensions()), np.dtype(shape.numpy_dtype())))
    return specs


@dataclass
class Compiled:
    """One compiled module: the loaded executable, what XLA made of it, and the compile time."""
    executable: object
    specs: list[tuple[tuple[int, ...], np.dtype]]
    seconds: float                   # parse + StableHLO conversion + XLA:CPU compile
    _text: str | None = field(default=None, repr=False)

    @property
    def optimized_text(self) -> str:
        """XLA:CPU's module after its HLO passes, as `jax.jit(f).lower(...).compile().as_text()`
        prints it but with large constants in full (so it parses back)."""
        if self._text is None:
            self._text = self.executable.hlo_modules()[0].to_string(_print_options())
        return self._text

    def run(self, args) -> list[np.ndarray]:
        """Execute on numpy arrays; a tuple result comes back flattened, in order."""
        jax = _xla.jax
        args = _check_args(self.specs, args)
        device = self.executable.local_devices()[0]
        with jax.enable_x64(True):   # keep f64/s64/u64 arguments as they are
            buffers = [jax.device_put(a, device) for a in args]
        try:
            outputs = self.executable.execute(buffers)
        except Exception as e:
            raise XlaError(str(e)) from None
        return [np.array(o) for o in outputs]


def compile(text: str, platform: str = "cpu") -> Compiled:    # noqa: A001 - the oracle's verb
    """Parse, convert and compile for the CPU (or another platform jax has a device of:
    "gpu" is XLA:GPU, what tools/bench_gpu.py compares with); XlaError on any rejection."""
    x = _jax()
    start = time.perf_counter()
    module = parse(text)
    specs = _specs(module)
    if "fusion(" in text or "bitcast(" in text:
        module = parse(_for_cpu(module.to_string(_print_options())))
    options = x.jaxlib.CompileOptions()
    options.env_option_overrides = list(_OPTIONS)
    try:
        stablehlo = x.jaxlib.mlir.hlo_to_stablehlo(module.as_serialized_hlo_module_proto())
        device = x.device if platform == "cpu" else x.jax.devices(platform)[0]
        executable = device.client.compile_and_load(stablehlo, [device], options)
    except Exception as e:
        raise XlaError(str(e)) from None
    return Compiled(executable, specs, time.perf_counter() - start)


def run(text: str, args) -> list[np.ndarray]:
    """Compile and run once; tuple results flattened, like `hlo_opt.evaluate`."""
    return compile(text).run(args)


def optimized_text(text: str) -> str:
    """The module XLA:CPU actually compiles, after its HLO passes (fusion, layout, ...)."""
    return compile(text).optimized_text


def _for_cpu(canonical: str) -> str:
    """Rewrite what XLA:CPU cannot take back as input into plain HLO of the same meaning.

    `canonical` is XLA's own print of the module, read with hlo_opt's parser (which takes
    what XLA's does; XlaError if it does not). `fusion(...), kind=k…, calls=c` becomes
    `call(...), to_apply=c`; a `bitcast` becomes the layout-free ops it stands for
    (hlo/layout_free.py), except one between element widths, which has none and is left to
    XLA as it is.
    """
    from . import HloError, parse
    from .layout_free import has_layout_free_form, rewrite_bitcast
    try:
        module = parse(canonical)
    except HloError as e:
        raise XlaError(f"hlo_opt cannot read XLA's print of the module back: {e}") from None
    for comp in module.computations:
        for inst in list(comp.instructions):
            if inst.opcode == "fusion":
                inst.opcode = "call"
                inst.attrs = {("to_apply" if k == "calls" else k): v
                              for k, v in inst.attrs.items() if k not in _FUSION_ONLY_ATTRS}
            elif inst.opcode == "bitcast" and has_layout_free_form(inst):
                rewrite_bitcast(comp, inst)
    return module.to_text(metadata=False)


# Attributes a fusion has and a call does not.
_FUSION_ONLY_ATTRS = frozenset({"kind", "output_to_operand_aliasing"})


def _print_options():
    """XLA's default print, complete enough to parse back (large constants in full), without
    metadata (the StableHLO road turns every instruction name into an op_name)."""
    options = _xla.hlo.HloPrintOptions()
    options.print_large_constants = True
    options.print_metadata = False
    return options


def _check_args(specs, args) -> list[np.ndarray]:
    if len(args) != len(specs):
        raise XlaError(f"expected {len(specs)} arguments, got {len(args)}")
    out = []
    for i, ((dims, dt), a) in enumerate(zip(specs, args)):
        a = np.asarray(a) if isinstance(a, (np.ndarray, np.generic)) else np.asarray(a, dt)
        if a.shape != dims or a.dtype != dt:
            raise XlaError(f"argument {i}: expected {dt}{list(dims)}, got {a.dtype}{list(a.shape)}")
        out.append(np.ascontiguousarray(a))
    return out


@dataclass
class _Xla:
    jax: object
    jaxlib: object          # jaxlib._jax: CompileOptions, mlir
    hlo: object             # jaxlib's HLO bindings: parser, HloModule, XlaComputation
    client: object
    device: object


def _jax() -> _Xla:
    global _xla
    if _xla is None:
        import jax
        from jax._src.lib import _jax as jaxlib
        from jax._src.lib import hlo
        device = jax.devices("cpu")[0]
        _xla = _Xla(jax, jaxlib, hlo, device.client, device)
    return _xla
