"""Loading an Encoding into egglog in bulk: TSV facts read by egglog's `input` command, then
build rules that union each row's placeholder `(Nd row)` with its term.

One command per instruction would cost ~0.4 ms each; facts cost ~6 µs a row (20k rows in
~0.12 s, see /work/notes/egglog_api.md §2). Operands are placeholders, so one build
iteration suffices whatever the depth. After the build, `(Nd row)` is the e-class of the
row's term, also after rewriting: that is how the decoder finds its instructions again.
"""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile

from .bindings import egg
from .encode import Encoding, is_leaf

SPAN = egg.RustSpan("", 0, 0)

DECLARATIONS = """
(function Ty (i64) Type :no-merge)
(function At (i64) Attr :no-merge)
(relation N0 (i64 String i64 i64 i64))
(relation N1 (i64 String i64 i64 i64))
(relation N2 (i64 String i64 i64 i64 i64))
(relation N3 (i64 String i64 i64 i64 i64 i64))
(relation NV (i64 String i64 i64 i64))
(relation Arg (i64 i64 i64))
(constructor Nd (i64) Term :unextractable)
(ruleset build)
(rule ((N0 n op k a ty) (= t (Ty ty)) (= at (At a)))
      ((union (Nd n) (Leaf op k at t))) :ruleset build)
(rule ((N1 n op x a ty) (= t (Ty ty)) (= at (At a)))
      ((union (Nd n) (Op1 op (Nd x) at t))) :ruleset build)
(rule ((N2 n op x y a ty) (= t (Ty ty)) (= at (At a)))
      ((union (Nd n) (Op2 op (Nd x) (Nd y) at t))) :ruleset build)
(rule ((N3 n op x y z a ty) (= t (Ty ty)) (= at (At a)))
      ((union (Nd n) (Op3 op (Nd x) (Nd y) (Nd z) at t))) :ruleset build)
"""

_FACT_TABLES = ("N0", "N1", "N2", "N3", "NV", "Arg")


def load(egraph: egg.EGraph, encoding: Encoding) -> None:
    """Insert every row of `encoding` (inside the caller's push/pop)."""
    folder = scratch_folder()
    arities = _write_facts(encoding, folder)
    side = os.path.join(folder, "side.egg")
    with open(side, "w") as f:
        for k, text in enumerate(encoding.type_texts):
            f.write(f"(set (Ty {k}) {text})\n")
        for k, text in enumerate(encoding.attr_texts):
            f.write(f"(set (At {k}) {text})\n")
        for arity in sorted(arities):
            f.write(_variadic_build_rule(arity))
    egraph.run_program(egg.Include(SPAN, side))
    egraph.run_program(*(egg.Input(SPAN, t, os.path.join(folder, f"{t}.tsv"))
                         for t in _FACT_TABLES))
    egraph.run_program(*egraph.parse_program("(run build 2)"))     # one round unions all


def _write_facts(e: Encoding, folder: str) -> set[int]:
    """The TSV files; returns the operand counts of OpV rows (one build rule each)."""
    lines: dict[str, list[str]] = {t: [] for t in _FACT_TABLES}
    arities: set[int] = set()
    for row, (op, xs, a, ty, key) in enumerate(zip(e.opcode, e.operands, e.attr, e.type, e.key)):
        n = len(xs)
        if n == 1:
            lines["N1"].append(f"{row}\t{op}\t{xs[0]}\t{a}\t{ty}\n")
        elif n == 2:
            lines["N2"].append(f"{row}\t{op}\t{xs[0]}\t{xs[1]}\t{a}\t{ty}\n")
        elif n == 3:
            lines["N3"].append(f"{row}\t{op}\t{xs[0]}\t{xs[1]}\t{xs[2]}\t{a}\t{ty}\n")
        elif n == 0 and is_leaf(op):
            lines["N0"].append(f"{row}\t{op}\t{key}\t{a}\t{ty}\n")
        else:
            arities.add(n)
            lines["NV"].append(f"{row}\t{op}\t{n}\t{a}\t{ty}\n")
            lines["Arg"].extend(f"{row}\t{p}\t{x}\n" for p, x in enumerate(xs))
    for table, rows in lines.items():
        with open(os.path.join(folder, f"{table}.tsv"), "w") as f:
            f.write("".join(rows))
    return arities


def _variadic_build_rule(arity: int) -> str:
    args = " ".join(f"(Arg n {p} x{p})" for p in range(arity))
    vec = f"(vec-of {' '.join(f'(Nd x{p})' for p in range(arity))})" if arity else "(vec-empty)"
    return (f"(rule ((NV n op {arity} a ty) (= t (Ty ty)) (= at (At a)) {args}) "
            f"((union (Nd n) (OpV op {vec} at t))) :ruleset build)\n")


_FOLDER: str | None = None


def scratch_folder() -> str:
    """This process's folder for the files egglog reads (removed at exit): in memory where
    the system has a writable /dev/shm (files rewritten on every call cost ~1 ms each on a
    disk file system, ~10 µs there), else in the temporary folder."""
    global _FOLDER
    if _FOLDER is None:
        memory = "/dev/shm" if os.access("/dev/shm", os.W_OK | os.X_OK) else None
        _FOLDER = tempfile.mkdtemp(prefix="hlo-opt-facts-", dir=memory)
        atexit.register(shutil.rmtree, _FOLDER, True)
    return _FOLDER


def run_commands(egraph: egg.EGraph, commands: list[str], name: str) -> None:
    """Run many small commands through a file and egglog's `include`: parsing one long
    program text in Python is quadratic in its length."""
    path = os.path.join(scratch_folder(), f"{name}.egg")
    with open(path, "w") as f:
        f.write("\n".join(commands))
    egraph.run_program(egg.Include(SPAN, path))
