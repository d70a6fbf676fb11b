"""Write an XLA dump folder of real JAX programs, for `hlo-opt batch` to read as it is.

    python -m hlo_opt.tools.jax_dump OUTDIR [--model NAME]... [--steps N]

`lm_train` (the default) trains the GPT-2 language model of tools/jax_models.py for a few
SGD steps on random tokens, as a script would: parameters initialised with jax.random, the
train step under jax.jit, so the folder holds every module XLA compiled on the way (the
random initialisers, eager slicing and scaling, the train step). Any other NAME is a
corpus workload (tools/gen_corpus.py), compiled once from its shapes.

XLA reads XLA_FLAGS when jax first initialises its backend, so the programs run in a
child Python with `--xla_dump_to=OUTDIR` added to XLA_FLAGS; the dump is XLA's own: per
module `module_NNNN.<name>.before_optimizations.txt`, its optimized module, buffer
assignment, LLVM IR and object files.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys

DEFAULT_MODEL = "lm_train"


def train_lm(steps: int) -> float:
    """A 2-block GPT-2 LM (vocabulary 128, width 64, 2 x 32 tokens) trained `steps` SGD
    steps; its last loss."""
    import jax

    from . import jax_models as nn
    shapes = nn.lm_shapes(layers=2, vocab=128, d=64, t=32)
    leaves, tree = jax.tree.flatten(shapes, is_leaf=lambda s: isinstance(s, tuple))
    key, data_key = jax.random.split(jax.random.key(0))
    keys = jax.random.split(key, len(leaves))
    params = tree.unflatten([0.02 * jax.random.normal(k, s) for k, s in zip(keys, leaves)])
    tokens = jax.random.randint(data_key, (2, 33), 0, 128)

    @jax.jit
    def step(p, inputs, targets):
        loss, grads = jax.value_and_grad(nn.lm_loss)(p, inputs, targets)
        return loss, nn.sgd(p, grads, 0.01)
    loss = None
    for _ in range(steps):
        loss, params = step(params, tokens[:, :-1], tokens[:, 1:])
    return float(loss)


def compile_workload(name: str) -> None:
    import jax

    from .gen_corpus import WORKLOADS
    fn, specs = WORKLOADS[name](False)
    jax.jit(fn).lower(*specs).compile()


def run_models(models: list[str], steps: int) -> None:
    """In the child: run each model (XLA dumps what it compiles)."""
    for name in models:
        if name == DEFAULT_MODEL:
            print(f"{name}: loss {train_lm(steps):.4f} after {steps} steps")
        else:
            compile_workload(name)
            print(f"{name}: compiled")


def main(argv=None) -> int:
    from .gen_corpus import WORKLOADS
    p = argparse.ArgumentParser(prog="python -m hlo_opt.tools.jax_dump",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("outdir")
    p.add_argument("--model", action="append", choices=[DEFAULT_MODEL, *WORKLOADS],
                   help=f"what to run (repeatable; default: {DEFAULT_MODEL})")
    p.add_argument("--steps", type=int, default=2, help="lm_train's SGD steps (default: 2)")
    args = p.parse_args(argv)
    flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_dump_to={os.path.abspath(args.outdir)}"
    code = ("import sys; from hlo_opt.tools.jax_dump import run_models; "
            "run_models(sys.argv[2:], int(sys.argv[1]))")
    return subprocess.run([sys.executable, "-c", code, str(args.steps),
                           *(args.model or [DEFAULT_MODEL])],
                          env=dict(os.environ, XLA_FLAGS=flags.strip())).returncode


if __name__ == "__main__":
    sys.exit(main())
