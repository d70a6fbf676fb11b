"""One module's work in `hlo-opt batch`, the same in a process-pool worker and in a Ray task:
read, verify, optimize, write the output atomically, and say how it went as a plain dict
(the report's row). Bad input and unexpected exceptions become the row's one-line error;
nothing but the death of the process escapes."""
from __future__ import annotations

import glob
import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass
from importlib import metadata, resources

from ..errors import HloError
from .cli import about, load_module, write_atomically

# A row's status: the first two are success.
OK, SKIPPED, ERROR, TIMEOUT, CRASHED, INTERRUPTED = \
    "ok", "skipped", "error", "timeout", "crashed", "interrupted"


@dataclass(frozen=True)
class Options:
    """What decides an output's contents besides its input (all of it goes in the
    fingerprint that tells whether an earlier output is up to date)."""
    rules: tuple[str, ...] = ("default",)
    fp_mode: str = "xla"
    target: str = "cpu"
    fusion: bool = True
    time_limit: float = 60.0
    node_limit: int = 200_000


@dataclass(frozen=True)
class Job:
    name: str           # unique in the batch; the output is OUTDIR/<name>.hlo
    input: str
    output: str
    options: Options


def row(job: Job, status: str, error: str | None = None, **measures) -> dict:
    """A report row; measures: instructions_before/after, kernels, xla_kernels, seconds."""
    out = {"name": job.name, "input": job.input, "output": job.output, "status": status,
           "instructions_before": None, "instructions_after": None, "kernels": None,
           "xla_kernels": None, "seconds": None, "error": error}
    out.update(measures)
    return out


def run_job(job: Job) -> dict:
    """Optimize job.input into job.output; the report row."""
    from .. import optimize
    from ..egraph.pipeline import compiled_rules
    from ..kernels import kernel_report
    start = time.perf_counter()
    opts = job.options
    try:
        with about(job.input):
            # Kept per process: a worker's first module does not pay for it in its time.
            rules = compiled_rules(list(opts.rules), opts.fp_mode)
            start = time.perf_counter()
            module, _ = load_module(job.input)
            out = optimize(module, rules, opts.fp_mode, opts.target,
                           opts.time_limit, opts.node_limit, fusion=opts.fusion,
                           verify=False)
            text = out.to_text()
            measures = {"instructions_before": operation_count(module),
                        "instructions_after": operation_count(out),
                        "kernels": kernel_report(out).kernels,
                        "xla_kernels": xla_kernels(job.input)}
        write_atomically(job.output, text.encode("utf-8"))
    except HloError as e:
        return row(job, ERROR, str(e), seconds=time.perf_counter() - start)
    return row(job, OK, seconds=time.perf_counter() - start, **measures)


def xla_kernels(path: str) -> int | None:
    """Kernels of XLA's own optimized module beside a dump's input (XLA names it
    `<module>.cpu_after_optimizations.txt`, `gpu_...` or `after_optimizations.txt` by
    backend), counted as ours are; None where there is none or it does not parse (it is only
    a comparison: it never fails the row)."""
    from .. import parse
    from ..kernels import kernel_report
    from .batch_inputs import DUMP_SUFFIX
    if not path.endswith(DUMP_SUFFIX):
        return None
    stem = path[:-len(DUMP_SUFFIX)]
    for xla_path in [stem + ".after_optimizations.txt"] + \
            sorted(glob.glob(glob.escape(stem) + ".*_after_optimizations.txt")):
        try:
            with open(xla_path, encoding="utf-8") as f:
                return kernel_report(parse(f.read(), xla_path)).kernels
        except (OSError, UnicodeDecodeError, HloError):
            continue
    return None


def operation_count(module) -> int:
    """Instructions, a fusion counting as the operations inside it: the fusion instruction
    and its body's parameters are plumbing, so fusing alone changes nothing."""
    fused = {id(i.attrs["calls"]) for i in module.instructions() if i.opcode == "fusion"}
    return sum(1 for comp in module.computations for i in comp.instructions
               if i.opcode != "fusion" and not (i.opcode == "parameter" and id(comp) in fused))


def fingerprint(options: Options) -> str:
    """A digest of the options, the rule files' contents and hlo-opt's version: an output
    made under another fingerprint is out of date."""
    files = [(path, _digest(path)) for spec in options.rules for path in _rule_files(spec)]
    try:
        version = metadata.version("hlo-opt")
    except metadata.PackageNotFoundError:
        version = "unknown"
    text = json.dumps({"options": asdict(options), "rules": files, "hlo_opt": version},
                      sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _rule_files(spec: str) -> list[str]:
    from ..rule_compiler.rules import rule_files
    if spec == "none":
        return []
    root = str(resources.files("hlo_opt.rules").joinpath("default")) \
        if spec == "default" else spec
    return rule_files(root) if os.path.isdir(root) else [root]


def _digest(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError as e:
        raise HloError(f"--rules: cannot read: {e.strerror}", path) from None
