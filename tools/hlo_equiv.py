"""`hlo-equiv A.hlo B.hlo`: are two modules' entry computations the same function?

First it tries to *prove* it: both entries are encoded into one e-graph (their parameters are
then the same leaves), saturated with the rules, and equal when the roots share an e-class.
Otherwise it *tests* it: random inputs, a share of them sprinkled with edge values (±0, ±inf,
NaN, denormals, integer extremes), run through the interpreter and, where jax is installed,
through XLA; the outputs must agree (NaN matches NaN; floats within a per-type tolerance).

Exit 0: equivalent (the first line says proved or tested); 1: not equivalent (a counterexample
input and the differing output are printed); 2: error (unreadable or ill-typed input,
different parameter shapes, nothing can run the modules); 3: internal error.
"""
from __future__ import annotations

import argparse
import functools
import sys

import numpy as np

from .. import UnsupportedError, evaluate, xla_oracle
from ..egraph.pipeline import prove_equivalent
from ..egraph.proof_chain import proof_chain
from ..dtypes import from_numpy, int_info
from ..errors import HloError
from ..ir import Module
from ..shape import Shape
from ..memory import check_fits_in_memory
from .cli import about, load_module, main_guard

# Relative tolerance per element type for a "tested" equality (ulp-level differences from
# reassociation and XLA's own math routines are not counterexamples).
TOLERANCE = {"f64": 1e-9, "f32": 1e-4, "f16": 1e-2, "bf16": 2e-2, "c64": 1e-4, "c128": 1e-9}
DEFAULT_TOLERANCE = 1e-1            # 8-bit and 4-bit floats


def build_arg_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hlo-equiv", description=__doc__.splitlines()[0])
    p.add_argument("a", help="first HLO module")
    p.add_argument("b", help="second HLO module")
    p.add_argument("--rules", action="append", metavar="default|none|PATH",
                   help="rules for the proof (default: the shipped rules)")
    p.add_argument("--fp-mode", default="xla", choices=("strict", "xla", "fast"))
    p.add_argument("--trials", type=int, default=8, help="random inputs to test (default 8)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--time-limit", type=float, default=10.0, metavar="S",
                   help="seconds of saturation for the proof (default 10)")
    p.add_argument("--explain", action="store_true",
                   help="after a proof, the chain of rules linking the two roots, in order, "
                        "each with its file:line and A's root after it (docs/explain.md)")
    return p


@main_guard("hlo-equiv")
def main(argv=None) -> int:
    args = build_arg_parser().parse_args(argv)
    a, _ = load_module(args.a)
    b, _ = load_module(args.b)
    _check_signatures(a, b, args.b)
    proved, report = prove_equivalent(a, b, args.rules or ["default"], args.fp_mode,
                                      args.time_limit)
    if proved:
        print(f"equivalent: proved (roots in one e-class after {report.iterations} "
              f"iterations, {report.enodes} e-nodes)")
        if args.explain:
            fired = [name for name, n in report.matches.items() if n]
            print(proof_chain(a, b, fired, args.rules or ["default"], args.fp_mode,
                              args.time_limit).text(), end="")
        return 0
    for path, module in ((args.a, a), (args.b, b)):
        with about(path):
            check_fits_in_memory(module)        # before test inputs are drawn
    runners = _runners(a, b)
    rng = np.random.default_rng(args.seed)
    shapes = [p.shape for p in a.entry.parameters]
    for trial in range(args.trials):
        inputs = [random_array(s, rng, edges=trial % 2 == 1) for s in shapes]
        for name, run in runners:
            out_a, out_b = run(a, inputs), run(b, inputs)
            difference = first_difference(out_a, out_b)
            if difference is not None:
                print(f"NOT equivalent ({name}, trial {trial}): {difference}")
                for i, x in enumerate(inputs):
                    print(f"input {i} ({shapes[i]}):\n{_show(x)}")
                return 1
    names = " and ".join(name for name, _ in runners)
    print(f"equivalent: tested on {args.trials} random inputs with the {names} "
          f"(not proved: {report.stop} after {report.iterations} iterations)")
    return 0


def _check_signatures(a: Module, b: Module, where: str) -> None:
    pa, pb = a.entry.parameters, b.entry.parameters
    if len(pa) != len(pb) or any(not x.shape.compatible(y.shape) for x, y in zip(pa, pb)):
        raise HloError("the entry computations take different parameters: "
                       f"({', '.join(str(p.shape) for p in pa)}) vs "
                       f"({', '.join(str(p.shape) for p in pb)})", where)
    if not a.entry.root.shape.compatible(b.entry.root.shape):
        raise HloError(f"the results differ in shape: {a.entry.root.shape} vs "
                       f"{b.entry.root.shape}", where)
    if any(p.shape.is_tuple or not p.shape.dtype.is_array for p in pa):
        raise HloError("only array parameters can be tested", where)


def _runners(a: Module, b: Module) -> list:
    """(name, run) for every executor that takes both modules."""
    out = []
    probe = [np.zeros(p.shape.dims, p.shape.dtype.numpy) for p in a.entry.parameters]
    try:
        evaluate(a, probe, verify=False)
        evaluate(b, probe, verify=False)
        out.append(("interpreter", functools.partial(evaluate, verify=False)))
    except UnsupportedError:
        pass
    if xla_oracle.available():
        compiled = {}

        def run_xla(module: Module, inputs):
            try:
                if id(module) not in compiled:
                    compiled[id(module)] = xla_oracle.compile(module.to_text())
                return compiled[id(module)].run(inputs)
            except xla_oracle.XlaError as e:
                raise HloError(f"XLA rejected the module: {e.message}") from None
        out.append(("XLA", run_xla))
    if not out:
        raise HloError("neither the interpreter nor XLA can run these modules")
    return out


def random_array(shape: Shape, rng: np.random.Generator, edges: bool) -> np.ndarray:
    """Random values of `shape`. With `edges`, every edge value of the type appears at least
    once where there is room, and about a quarter of the rest are edge values too."""
    dtype, dims = shape.dtype, shape.dims
    if dtype.kind == "pred":
        return rng.integers(0, 2, dims).astype(np.bool_)
    if dtype.kind == "complex":
        parts = rng.standard_normal((2, *dims))
        return np.asarray(parts[0] + 1j * parts[1]).astype(dtype.numpy)
    if dtype.is_integral:
        info = int_info(dtype)
        x = rng.integers(max(info.min, -8), min(info.max, 15) + 1, dims)
        special = [info.min, info.max, 0, 1, -1 if dtype.is_signed else 2]
    else:
        x = rng.standard_normal(dims) * 2
        tiny = float(np.finfo(np.float32).tiny) / 4 if dtype.bits >= 32 else 0.0
        special = [0.0, -0.0, np.inf, -np.inf, np.nan, tiny, 1e30, -1.0]
    if edges and x.size:
        flat = x.reshape(-1).astype(np.float64 if dtype.kind == "float" else object)
        sprinkle = rng.random(flat.size) < 0.25
        flat[sprinkle] = rng.choice(np.array(special, dtype=flat.dtype), int(sprinkle.sum()))
        room = min(len(special), flat.size)
        flat[rng.choice(flat.size, room, replace=False)] = \
            np.array(special, dtype=flat.dtype)[rng.permutation(len(special))[:room]]
        x = flat.reshape(dims)
    with np.errstate(over="ignore"):
        return np.asarray(x).astype(dtype.numpy)


def first_difference(outs_a, outs_b) -> str | None:
    """None when the outputs agree, else where and how they differ."""
    if len(outs_a) != len(outs_b):
        return f"{len(outs_a)} outputs vs {len(outs_b)}"
    for i, (x, y) in enumerate(zip(outs_a, outs_b)):
        x, y = np.asarray(x), np.asarray(y)
        if x.shape != y.shape:
            return f"output {i} has shape {x.shape} vs {y.shape}"
        bad = ~_close(x, y)
        if bad.any():
            at = tuple(int(k) for k in np.argwhere(bad)[0])
            return f"output {i} differs at {list(at)}: {x[at]} vs {y[at]}"
    return None


def _close(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Elementwise agreement: exact for integers and pred, NaN = NaN and a relative
    tolerance for floats."""
    dtype = from_numpy(x.dtype)
    if dtype.kind not in ("float", "complex"):
        return x == y
    wide = np.complex128 if dtype.kind == "complex" else np.float64
    xw, yw = x.astype(wide), y.astype(wide)
    rtol = TOLERANCE.get(dtype.name, DEFAULT_TOLERANCE)
    with np.errstate(invalid="ignore"):
        near = np.abs(xw - yw) <= rtol * np.maximum(np.abs(xw), np.abs(yw))
    return (np.isnan(xw) & np.isnan(yw)) | (xw == yw) | near


def _show(x: np.ndarray) -> str:
    return np.array2string(x, threshold=64, edgeitems=3, max_line_width=100)


if __name__ == "__main__":
    sys.exit(main())
