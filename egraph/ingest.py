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

from . import schema
from .bindings import egg
from .encode import Encoding, is_leaf

SPAN = egg.RustSpan("", 0, 0)

# Fact tables: row, opcode, then per table the key (N0), the operand rows (N1..N3) or the
# operand count (NV), then the Attr and Type ids; Arg: row, operand position, operand row.
_COLUMNS = {"N0": ("key",), "N1": ("x0",), "N2": ("x0", "x1"), "N3": ("x0", "x1", "x2"),
            "NV": ("count",)}
_FACT_TABLES = (*_COLUMNS, "Arg")


def _declarations() -> str:
    out = [schema.function("Ty", ["i64"], "Type"), schema.function("At", ["i64"], "Attr")]
    out += [schema.relation(table, ["i64", "String", *["i64"] * len(cols), "i64", "i64"])
            for table, cols in _COLUMNS.items()]
    out += [schema.relation("Arg", ["i64"] * 3), schema.constructor("Nd", ["i64"], "Term"),
            schema.ruleset("build")]
    for table in ("N0", "N1", "N2", "N3"):          # NV: one rule per operand count
        cols = _COLUMNS[table]
        operands = [schema.atom("Nd", x) for x in cols if x != "key"]
        term = schema.node("op", operands, "at", "t") if operands else \
            schema.leaf("op", "key", "at", "t")
        out.append(_build_rule(table, cols, [], term))
    return "\n".join(out)


def _build_rule(table: str, columns, more: list[str], term: str) -> str:
    """Union row n's placeholder with its term, its Type and Attr looked up by id."""
    query = [schema.atom(table, "n", "op", *columns, "a", "ty"),
             schema.eq("t", schema.atom("Ty", "ty")), schema.eq("at", schema.atom("At", "a")),
             *more]
    return schema.rule(query, [schema.union(schema.atom("Nd", "n"), term)], "build")


DECLARATIONS = _declarations()


def load(egraph: egg.EGraph, encoding: Encoding) -> None:
    """Insert every row of `encoding` (inside the caller's push/pop)."""
    folder = scratch_folder()
    arities = _write_facts(encoding, folder)
    side = os.path.join(folder, "side.egg")
    with open(side, "w") as f:
        for k, text in enumerate(encoding.type_texts):
            f.write(schema.set_value(schema.atom("Ty", k), text) + "\n")
        for k, text in enumerate(encoding.attr_texts):
            f.write(schema.set_value(schema.atom("At", k), text) + "\n")
        for arity in sorted(arities):
            f.write(_variadic_build_rule(arity))
    egraph.run_program(egg.Include(SPAN, side))
    egraph.run_program(*(egg.Input(SPAN, t, os.path.join(folder, f"{t}.tsv"))
                         for t in _FACT_TABLES))
    egraph.run_program(*egraph.parse_program(schema.run("build", 2)))   # one round unions all


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
    args = [schema.atom("Arg", "n", p, f"x{p}") for p in range(arity)]
    term = schema.node("op", [schema.atom("Nd", f"x{p}") for p in range(arity)], "at", "t")
    return _build_rule("NV", (str(arity),), args, term) + "\n"


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
