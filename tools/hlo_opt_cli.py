"""`hlo-opt`: read an HLO module, optimize it, print it (stdout or -o, written atomically):
as HLO text, or with --emit=llvm|asm|ptx as the LLVM IR or assembly of its kernels: host code
for the CPU, NVPTX IR and PTX for --target=gpu. With --target=tpu the text carries XLA's TPU
tiled layouts (targets/tpu_layout.py), --stats adds the TPU model's per-kernel table and
--report=PATH writes it as JSON (targets/tpu_report.py). --explain[=PATH] reports why the
output looks as it does (egraph/explain.py). --emit=dot|svg|png draws the kernels,
--emit=egraph-dot the saturated e-graph (tools/pictures.py)."""
from __future__ import annotations

import argparse
import json
import sys
import warnings

from ..egraph.pipeline import optimize
from ..errors import HloError
from ..targets import TARGETS, cost_model
from ..targets.tpu import TpuCostModel
from ..targets.tpu_generations import GENERATIONS
from ..targets.tpu_report import tpu_report
from .cli import about, input_name, load_module, main_guard, write_atomically, write_text
from .egraph_dot import EgraphPicture
from .pictures import PICTURES, check_destination, kernel_picture, write_bytes


def build_arg_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="hlo-opt",
        description="Optimize an XLA HLO module with declarative rewrite rules. "
                    "`hlo-opt batch DIR|FILE|GLOB... --out OUTDIR` optimizes many at once "
                    "(an XLA dump folder, say) on a process pool or on Ray: see "
                    "`hlo-opt batch --help`.")
    p.add_argument("input", help="HLO text file, or - for stdin")
    p.add_argument("--rules", action="append", metavar="default|none|PATH",
                   help="rule set (repeatable): the shipped rules, none (only common "
                        "subexpressions and dead code go), or a .rules file or folder")
    p.add_argument("--fp-mode", default="xla", choices=("strict", "xla", "fast"),
                   help="floating-point semantics the rules may assume (default: xla)")
    p.add_argument("--target", default="cpu", choices=TARGETS,
                   help="cost model for extraction and fusion decisions (default: cpu)")
    p.add_argument("--no-fusion", action="store_true",
                   help="simplify only: ignore the rules' fuse declarations")
    p.add_argument("--time-limit", type=float, default=60.0, metavar="S",
                   help="wall-clock seconds for saturation, whole module (default: 60)")
    p.add_argument("--node-limit", type=int, default=200_000, metavar="N",
                   help="e-nodes per e-graph before saturation stops (default: 200000)")
    p.add_argument("-o", "--output", metavar="OUT", help="output file (default: stdout)")
    p.add_argument("--stats", action="store_true",
                   help="print what saturation and extraction did to stderr")
    p.add_argument("--no-metadata", action="store_true",
                   help="drop metadata={...} attributes from the output")
    p.add_argument("--no-verify", action="store_true",
                   help="skip checking every input instruction's shape against shape "
                        "inference (done by default: the rules trust the declared types; "
                        "an ill-typed input may then fail with an internal error)")
    p.add_argument("--emit", default="hlo", choices=EMIT,
                   help="what to print: the optimized HLO text (default), or the LLVM IR "
                        "(after -O3) or assembly of its kernels (and driver), compiled for "
                        "this machine's CPU, or with --target=gpu the NVPTX IR or PTX "
                        "(asm and ptx are the same there) of its GPU kernels; dot: the "
                        "kernels as a Graphviz picture (svg, png: rendered by Graphviz's dot "
                        "program or pygraphviz; png needs -o or a redirect), egraph-dot: the "
                        "saturated e-graph of a small module (docs/pictures.md)")
    p.add_argument("--gpu-arch", default=None, metavar="sm_XX",
                   help="GPU architecture of --emit for --target=gpu (default: sm_90)")
    p.add_argument("--tpu-gen", default=None, metavar="|".join(GENERATIONS),
                   help="TPU generation --target=tpu models (default: v5e); with --stats "
                        "the per-kernel table of the TPU model follows the summary")
    p.add_argument("--report", metavar="PATH",
                   help="with --target=tpu: write the TPU model's per-kernel report as JSON")
    p.add_argument("--explain", nargs="?", const="-", metavar="=PATH",
                   help="report why the output looks as it does (docs/explain.md): the rules "
                        "that matched with their file:line, per kernel the target model's "
                        "cost before -> after, what became of each input instruction and "
                        "which rule made each new one; to stderr, or with --explain=PATH "
                        "written to PATH (as JSON when PATH ends in .json)")
    return p


EMIT = ("hlo", "llvm", "asm", "ptx") + PICTURES


def emit_code(module, emit: str, target: str = "cpu", gpu_arch: str | None = None) -> str:
    """The lowering's listing of `module` (--emit=llvm|asm|ptx) for `target`: the CPU's
    kernels and driver, or the GPU's kernels. CPU interpreter fallbacks are not in the
    listing, so each is announced on stderr as one line, not a Python warning."""
    from .. import lowering
    if target == "gpu":
        from ..lowering import emit_gpu
        arch = gpu_arch or emit_gpu.nvptx.DEFAULT_ARCH
        return emit_gpu.emit_llvm(module, arch) if emit == "llvm" else \
            emit_gpu.emit_ptx(module, arch)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", lowering.FallbackWarning)
        text = lowering.emit_llvm(module) if emit == "llvm" else lowering.emit_asm(module)
    for w in caught:
        print(f"hlo-opt: {w.message}", file=sys.stderr)
    return text


@main_guard("hlo-opt")
def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["batch"]:
        from .batch import main as batch_main
        return batch_main(argv[1:])
    # a bare --explain must not take the input file as its PATH: only --explain=PATH names one
    argv = ["--explain=-" if a == "--explain" else a for a in argv]
    args = build_arg_parser().parse_args(argv)
    if args.time_limit <= 0 or args.node_limit <= 0:
        raise HloError("--time-limit and --node-limit must be positive")
    if args.target != "gpu" and (args.emit == "ptx" or args.gpu_arch):
        raise HloError("--emit=ptx and --gpu-arch need --target=gpu")
    if args.target != "tpu" and (args.tpu_gen or args.report):
        raise HloError("--tpu-gen and --report need --target=tpu")
    if args.tpu_gen is not None and args.tpu_gen not in GENERATIONS:
        raise HloError(f"--tpu-gen: unknown TPU generation '{args.tpu_gen}' "
                       f"(known: {', '.join(GENERATIONS)})")
    check_destination(args.emit, args.output)
    module, _ = load_module(args.input, verify=not args.no_verify)
    egraph = EgraphPicture(module.name) if args.emit == "egraph-dot" else None
    with about(input_name(args.input), verified=not args.no_verify):
        out, report = optimize(module, args.rules or ["default"], args.fp_mode, args.target,
                               args.time_limit, args.node_limit, stats=True,
                               fusion=not args.no_fusion, verify=False, tpu_gen=args.tpu_gen,
                               explain=args.explain is not None, observe=egraph)
        why, report = (report, report.report) if args.explain is not None else (None, report)
        tpu_model = TpuCostModel(args.tpu_gen) if args.target == "tpu" else None
        if tpu_model is not None and args.emit == "hlo":
            from ..targets.tpu_layout import assign_layouts
            out = assign_layouts(out, tpu_model)
        if args.emit in PICTURES:
            picture = egraph.dot.encode() if egraph is not None else \
                kernel_picture(out, args.emit, cost_model(args.target, args.tpu_gen))
        else:
            text = out.to_text(metadata=not args.no_metadata) if args.emit == "hlo" else \
                emit_code(out, args.emit, args.target, args.gpu_arch)
        tpu = tpu_report(out, tpu_model) \
            if tpu_model is not None and (args.stats or args.report) else None
    if args.stats:
        print(report.summary(), file=sys.stderr)
        if tpu is not None:
            print(tpu.table(), file=sys.stderr)
    if args.report:
        write_atomically(args.report, (json.dumps(tpu.as_json(), indent=1) + "\n").encode())
    if args.explain == "-":
        print(why.text(), file=sys.stderr, end="")
    elif args.explain is not None:
        write_atomically(args.explain, (json.dumps(why.as_json(), indent=1) + "\n").encode()
                         if args.explain.endswith(".json") else why.text().encode())
    if args.emit in PICTURES:
        write_bytes(args.output, picture)
    else:
        write_text(args.output, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
