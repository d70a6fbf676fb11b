"""`hlo-run`: run an HLO module on the CPU or the GPU (our code), the interpreter, or XLA.

    hlo-run model.hlo                          # random inputs, our CPU code, prints a summary
    hlo-run model.hlo --inputs in.npz --out out.npz --target=xla
    hlo-run model.hlo --time 100               # median per-call time over 100 calls
    hlo-run model.hlo --profile 50             # time per kernel (cycle counters), costliest first
    hlo-run model.hlo --target=gpu --time 100  # our GPU code (needs a GPU and hlo-opt[gpu])

Inputs come from an .npz (arrays named arg0, arg1, ... or in file order), otherwise random:
normal floats, small integers, random booleans, seeded by --seed. Outputs are saved as
out0, out1, ... (tuple results flattened). Fallbacks to the interpreter are listed on stderr.
"""
from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
import warnings

import numpy as np

from .. import evaluate
from ..errors import HloError
from ..memory import check_fits_in_memory
from .cli import about, input_name, load_module, main_guard, write_atomically

TARGETS = ("cpu", "gpu", "interp", "xla")


def build_arg_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hlo-run", description="Run an HLO module on numpy inputs.")
    p.add_argument("input", help="HLO text file, or - for stdin")
    p.add_argument("--target", choices=TARGETS, default="cpu",
                   help="cpu: our LLVM code (default); gpu: our PTX code through the CUDA "
                        "driver; interp: the reference interpreter; xla: XLA:CPU through jaxlib")
    p.add_argument("--inputs", metavar="IN.npz", help="arguments (default: random)")
    p.add_argument("--out", metavar="OUT.npz", help="save the outputs here")
    p.add_argument("--time", type=int, default=0, metavar="N",
                   help="time N calls and print the median per-call time")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    p.add_argument("--ftz", action="store_true",
                   help="cpu only: flush denormals to zero, as XLA:CPU does")
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="cpu, gpu: time each kernel over N calls and list the costliest "
                        "(gpu: CUDA events around each launch)")
    return p


def random_inputs(module, seed: int = 0) -> list[np.ndarray]:
    """Arguments for every entry parameter (tuple parameters as tuples)."""
    rng = np.random.default_rng(seed)
    return [_random(p.shape, rng) for p in module.entry.parameters]


def _random(shape, rng):
    if shape.is_tuple:
        return tuple(_random(s, rng) for s in shape.elements)
    dt = shape.dtype
    if dt.numpy is None:
        return None
    if dt.kind == "pred":
        return rng.random(shape.dims) < 0.5
    if dt.kind in ("int", "uint"):
        return rng.integers(0, 16, shape.dims).astype(dt.numpy)
    if dt.kind == "complex":
        return (rng.standard_normal(shape.dims) + 1j * rng.standard_normal(shape.dims)).astype(dt.numpy)
    return rng.standard_normal(shape.dims).astype(np.float32).astype(dt.numpy)


def load_inputs(path: str, module) -> list:
    try:
        data = np.load(path)
    except (OSError, ValueError) as e:
        raise HloError(f"cannot read inputs: {e}", path) from None
    names = [f"arg{i}" for i in range(len(module.entry.parameters))]
    if all(n in data for n in names):
        return [data[n] for n in names]
    return [data[n] for n in data.files]


def runner(module, text: str, target: str, ftz: bool = False):
    """A function args -> list of outputs for the target (the module is verified)."""
    if target == "cpu":
        from ..lowering import compile as compile_cpu
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            exe = compile_cpu(module, flush_denormals=ftz, verify=False)
        for w in caught:
            print(f"hlo-run: {w.message}", file=sys.stderr)
        return exe.run
    if target == "gpu":
        if ftz:
            raise HloError("--ftz needs --target=cpu")
        from ..lowering import compile as compile_any
        return compile_any(module, "gpu", verify=False).run
    if target == "interp":
        return lambda args: evaluate(module, args, verify=False)
    from .. import xla_oracle
    if not xla_oracle.available():
        raise HloError(xla_oracle.reason)
    try:
        compiled = xla_oracle.compile(text)
    except xla_oracle.XlaError as e:
        raise HloError(f"XLA rejected the module: {e.message}") from None
    return compiled.run


def save_outputs(path: str, outputs) -> None:
    """np.savez to a temporary file in the target folder, renamed over the target."""
    buf = io.BytesIO()
    np.savez(buf, **{f"out{i}": o for i, o in enumerate(outputs)})
    write_atomically(path, buf.getvalue())


@main_guard("hlo-run")
def main(argv=None) -> int:
    args = build_arg_parser().parse_args(argv)
    module, text = load_module(args.input)
    with about(input_name(args.input)):
        check_fits_in_memory(module)            # before random inputs are drawn
        inputs = load_inputs(args.inputs, module) if args.inputs else \
            random_inputs(module, args.seed)
        run = runner(module, text, args.target, args.ftz)
        outputs = run(inputs)
    if args.out:
        save_outputs(args.out, outputs)
    for i, o in enumerate(outputs):
        o = np.asarray(o)
        summary = ""
        if o.size and o.dtype.kind in "fiub":
            with np.errstate(all="ignore"):
                f = o.astype(np.float64)
                summary = f" min {np.nanmin(f):.6g} max {np.nanmax(f):.6g} mean {np.nanmean(f):.6g}"
        print(f"out{i}: {o.dtype}{list(o.shape)}{summary}")
    if args.profile:
        if args.target not in ("cpu", "gpu"):
            raise HloError("--profile needs --target=cpu or --target=gpu")
        from ..lowering import compile as compile_any
        exe = compile_any(module, args.target, verify=False,
                          **({"flush_denormals": args.ftz} if args.target == "cpu" else {}))
        rows = exe.profile(inputs, args.profile)
        total = sum(r[1] for r in rows) or 1.0
        for label, t, calls, *moved in rows[:20]:
            rate = f" {moved[0] * calls / t / 1e9:8.1f} GB/s" if moved and t > 0 else ""
            print(f"{t * 1e6:10.1f} us {t / total * 100:5.1f}%  x{calls:<4d}{rate} {label}")
    if args.time:
        times = []
        for _ in range(args.time):
            start = time.perf_counter()
            run(inputs)
            times.append(time.perf_counter() - start)
        print(f"median {statistics.median(times) * 1e6:.1f} us per call over {args.time} calls "
              f"({args.target})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
