"""One fuzz case, start to end: parse -> optimize -> compile -> run on random inputs, and the
result compared with the interpreter's on the unoptimized module.

    outcome = run_case(text)     # Outcome(kind="hlo_error", stage="parse", ...)

Every case must end in an accepted outcome: it ran and agreed (`ok`), ran where the
interpreter cannot follow (`ok-unchecked`), compiled but its inputs are too big to make
(`ok-not-run`), or was refused with an HloError (`hlo_error`, `unsupported`). Anything
else is a bug: `exception` (another exception type, with where it was raised) and, seen only
from outside the process (fuzz_pool.py), `crash` and `timeout` - except a timeout while the
module runs, which may be its own doing (a loop whose trip count is an input) - and `wrong`:
the optimized text does not parse again, or the compiled code and the interpreter disagree.
The latter is a suspect to look at: edits make reducers that are not associative and
comparators that are not orders, for which either answer is right.

Whether the verifier accepts the parsed module is recorded on the side (`verified`): an
ill-typed module that gets through today is a finding for the verifier, while a failure on a
verified module is a bug past it.
"""
from __future__ import annotations

import time
import traceback
import warnings
from dataclasses import asdict, dataclass

import numpy as np

from .. import HloError, UnsupportedError
from ..dtypes import float_info

ACCEPTED = ("ok", "ok-unchecked", "ok-not-run", "hlo_error", "unsupported")
RUNNING = ("inputs", "run", "evaluate", "compare")      # stages that run the module
# Small saturation limits: a case should take a second, not a minute.
OPTIMIZE = dict(fp_mode="strict", time_limit=2.0, node_limit=20_000, iteration_limit=8,
                fusion=True)
MAX_INPUT_BYTES = 64 << 20


@dataclass
class Outcome:
    kind: str                   # see the module docstring
    stage: str = ""             # parse, verify, optimize, reparse, compile, inputs, run, ...
    verified: bool | None = None  # None: did not parse
    detail: str = ""            # the error's one line, or how outputs differ
    where: str = ""             # exception: innermost hlo_opt frame, module:line (function)
    trace: str = ""             # exception: the traceback's tail
    seconds: float = 0.0
    xla: str = ""               # for bad cases on verified modules: what XLA says of them

    @property
    def accepted(self) -> bool:
        return self.kind in ACCEPTED or self.kind == "timeout" and self.stage in RUNNING

    @property
    def suspect(self) -> bool:
        """Outputs that differ: a bug, or an edit that left the result unspecified."""
        return self.kind == "wrong" and self.stage == "compare"

    @property
    def cause(self) -> str:
        """What groups outcomes with one root cause: the kind with the exception type and
        the place it was raised, or the signal."""
        if self.kind == "exception":
            return f"{self.detail.split(':')[0]} at {self.where}"
        if self.kind in ("crash", "timeout", "wrong"):
            return " ".join(filter(None, (self.kind, "at", self.stage, self.where)))
        return self.kind

    def to_dict(self) -> dict:
        return asdict(self)


class _Refused(Exception):
    """Ends a case early with an outcome."""

    def __init__(self, outcome: Outcome):
        self.outcome = outcome


def run_case(text: str, seed: int = 0, progress=None) -> Outcome:
    """Run one module through every stage; never raises (except KeyboardInterrupt).
    `progress(stage, verified)` is called as each stage begins (a worker logs it, so that a
    crash can be placed)."""
    start = time.perf_counter()
    state = {"verified": None, "progress": progress}
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            outcome = _pipeline(text, seed, state)
    except _Refused as stop:
        outcome = stop.outcome
    outcome.verified = state["verified"]
    outcome.seconds = round(time.perf_counter() - start, 3)
    return outcome


def _stage(state: dict, name: str, fn, *args):
    """fn(*args), its failures turned into outcomes of stage `name`."""
    if state["progress"]:
        state["progress"](name, state["verified"])
    try:
        return fn(*args)
    except UnsupportedError as e:
        raise _Refused(Outcome("unsupported", name, detail=str(e))) from None
    except HloError as e:
        raise _Refused(Outcome("hlo_error", name, detail=str(e))) from None
    except Exception as e:                              # noqa: BLE001 - the bug we look for
        raise _Refused(_exception(name, e)) from None


def _exception(stage: str, e: Exception) -> Outcome:
    frames = [(f.f_globals.get("__name__", ""), line, f.f_code.co_name)
              for f, line in traceback.walk_tb(e.__traceback__)]
    ours = [f for f in frames if f[0].startswith("hlo_opt.") and
            not f[0].startswith("hlo_opt.tools.fuzz")]
    module, line, function = (ours or frames)[-1]
    tail = "".join(traceback.format_exception(e)[-12:])
    message = str(e).split("\n")[0][:200]
    return Outcome("exception", stage, detail=f"{type(e).__name__}: {message}",
                   where=f"{module}:{line} ({function})", trace=tail)


def _pipeline(text: str, seed: int, state: dict) -> Outcome:
    import hlo_opt
    from ..verifier import verify
    module = _stage(state, "parse", hlo_opt.parse, text, "fuzz")
    state["verified"] = _stage(state, "verify", _verifies, verify, module)
    optimized = _stage(state, "optimize", lambda: hlo_opt.optimize(module, **OPTIMIZE))
    printed = _stage(state, "print", optimized.to_text)
    try:
        hlo_opt.parse(printed, "optimized")
    except HloError as e:
        return Outcome("wrong", "reparse", detail=f"the optimized module does not parse "
                       f"again: {e}")
    executable = _stage(state, "compile", hlo_opt.compile, optimized)
    rng = np.random.default_rng(seed)
    input_sets = _stage(state, "inputs", _input_sets, module, rng)
    if input_sets is None:
        return Outcome("ok-not-run", "inputs", detail="inputs too big to make")
    for edges, args in input_sets:
        got = _stage(state, "run", executable, *args)
        if state["progress"]:
            state["progress"]("evaluate", state["verified"])
        try:
            expected = hlo_opt.evaluate(module, args)
        except UnsupportedError as e:
            return Outcome("ok-unchecked", "evaluate", detail=str(e))
        except HloError as e:
            return Outcome("hlo_error", "evaluate", detail=str(e))
        except Exception as e:                          # noqa: BLE001
            return _exception("evaluate", e)
        difference = _stage(state, "compare", _first_difference, expected, got)
        if difference:
            return Outcome("wrong", "compare", detail=f"{difference} (inputs "
                           f"{'with edge values' if edges else 'plain'}; "
                           f"{_blame(module, optimized, args, got)})")
    return Outcome("ok", "compare")


def _verifies(verify, module) -> bool:
    try:
        verify(module)
    except HloError:
        return False
    return True


def _input_sets(module, rng) -> list | None:
    """Plain random arguments, then arguments sprinkled with edge values; None when they
    would not fit in MAX_INPUT_BYTES."""
    shapes = [p.shape for p in module.entry.parameters]
    if sum(_nbytes(s) for s in shapes) > MAX_INPUT_BYTES:
        return None
    return [(edges, [_argument(s, rng, edges) for s in shapes]) for edges in (False, True)]


def _nbytes(shape) -> float:
    if shape.is_tuple:
        return sum(_nbytes(s) for s in shape.elements)
    return shape.dtype.bytes * float(np.prod(shape.dims, dtype=np.float64))


def _argument(shape, rng, edges: bool):
    from .hlo_equiv import random_array
    if shape.is_tuple:
        return tuple(_argument(s, rng, edges) for s in shape.elements)
    if not shape.dtype.is_array:
        return None
    return random_array(shape, rng, edges)


def _first_difference(expected, got) -> str | None:
    """None when the outputs agree, else where they differ first. Integers and pred agree
    exactly. Floats agree within a coarse tolerance: the larger of 1% and two ulps of 1
    of their type, relative to the larger of the two values plus the output's largest
    finite value (edited modules are often ill-conditioned: sums that cancel, long chains;
    the check is for wrong values, not for rounding). A NaN agrees with an infinity (where
    infinities meet, FFT butterflies and complex products make either)."""
    if len(expected) != len(got):
        return f"{len(expected)} outputs vs {len(got)}"
    for i, (x, y) in enumerate(zip(expected, got)):
        x, y = np.asarray(x), np.asarray(y)
        if x.shape != y.shape or x.dtype != y.dtype:
            return f"output {i} is {y.dtype}{list(y.shape)}, not {x.dtype}{list(x.shape)}"
        if _is_float(x.dtype):
            real = float_info(x.real.dtype)
            rtol = max(1e-2, 2 * float(real.eps))
            wide = np.complex128 if x.dtype.kind == "c" else np.float64
            xw, yw = x.astype(wide), y.astype(wide)
            finite = np.abs(xw[np.isfinite(xw)])
            scale = float(finite.max()) if finite.size else 0.0
            nan = np.isnan(xw) | np.isnan(yw)
            near = np.abs(xw - yw) <= rtol * (np.maximum(np.abs(xw), np.abs(yw)) + scale)
            agree = (xw == yw) | (nan & ~(np.isfinite(xw) | np.isfinite(yw))) | (
                np.isfinite(xw) & np.isfinite(yw) & near)
        else:
            agree = x == y
        if not np.all(agree):
            at = tuple(int(k) for k in np.argwhere(~agree)[0])
            return f"output {i} differs at {list(at)}: expected {x[at]}, got {y[at]}"
    return None


def _is_float(dtype: np.dtype) -> bool:
    from ..dtypes import from_numpy
    return from_numpy(dtype).kind in ("float", "complex")


def _blame(module, optimized, args, got) -> str:
    """Which stage a difference comes from: the optimizer (the interpreter disagrees with
    itself on the optimized module) or the compiled code."""
    import hlo_opt
    try:
        again = hlo_opt.evaluate(optimized, args)
    except Exception as e:                              # noqa: BLE001 - a diagnosis only
        return f"the interpreter fails on the optimized module: {type(e).__name__}"
    if _first_difference(hlo_opt.evaluate(module, args), again):
        return "the optimizer changed the result"
    return "the compiled code differs from the interpreter"
