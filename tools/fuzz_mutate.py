"""Seeded mutations of HLO text, for fuzzing: each case is one source module with one to three
small edits of the kinds that break a module in ways a parser, verifier, optimizer or code
generator must notice (or survive).

    mutator = Mutator({"cnn.hlo": text, ...})
    case = mutator.case(seed=1, index=17)      # the same (seed, index) gives the same case
    case.text, case.source, case.edits         # e.g. ["line 12: dtype f32 -> s4"]

Edits work on the text, not the IR, so they can make anything the parser may meet: lines
deleted, duplicated or swapped (a use before its definition, a name twice); numbers changed
(dims, parameter numbers, indices, window sizes) to neighbours, zero, negatives and huge
values; literal values (NaN, infinities, values out of the type's range); element types;
opcodes (to one of the same class or any); ranks; dimension lists (`dimensions={...}`,
contracting dims, gather dims); operands (another value, an unknown name, one more or one
fewer); attributes (dropped, or given a value another instruction has for the same key).
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

from ..attributes import split_top_level
from ..dtypes import DTYPES
from ..errors import HloError
from ..ops import OPS

# Element types an edit picks from: the common ones more often.
EDIT_DTYPES = ("f32", "f32", "s32", "pred", "bf16", "f16", "f64", "s8", "s64", "u8", "u32",
               "u64", "s4", "u4", "s2", "f8e4m3fn", "f8e5m2", "f4e2m1fn", "c64", "c128",
               "token")
# Numbers an edited number may become (besides its neighbours and its double).
EDGE_NUMBERS = (0, 1, 2, 3, -1, 2**31 - 1, 2**31, 2**32, 2**63, 10**9)
EDGE_LITERALS = ("0", "-0", "1", "-1", "nan", "-nan", "inf", "-inf", "1e38", "3.5e38",
                 "1e-45", "65504", "65536", "127", "128", "-129", "255", "256", "2147483647",
                 "2147483648", "-2147483649", "4294967296", "9223372036854775807",
                 "18446744073709551616", "true", "false", "0.5", "1e309", "-7")
REINFER_SHARE = 0.5        # of the cases, whose result shapes are then inferred again
CALLEE_KEYS = ("to_apply", "calls", "body", "condition", "branch_computations")

_INSTRUCTION = re.compile(r"^(\s*(?:ROOT\s+)?)(%?[\w.\-]+)\s*=\s*(.*)$")
_OPCODE = re.compile(r"(?<![\w\-])([a-z][a-z0-9\-]*)\(")
_SHAPE = re.compile(r"(?<![\w\-])([a-z][a-z0-9]*)\[([^\]]*)\](\{[^}]*\})?")
_NAME = re.compile(r"%?[A-Za-z_][\w.\-]*")
_INT_LIST = re.compile(r"\{\s*-?\d+(?:\s*,\s*-?\d+)*\s*\}|\{\s*\}")
_LITERAL_ATOM = re.compile(r"-?(?:\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|inf|nan)|true|false")


@dataclass
class Case:
    seed: int
    index: int
    source: str
    edits: list[str]
    text: str
    reinferred: bool = False     # result shapes inferred again after the edits

    @property
    def label(self) -> str:
        then = ", then result shapes re-inferred" if self.reinferred else ""
        edits = "; ".join(self.edits)
        return f"seed {self.seed} case {self.index} ({self.source}: {edits}{then})"


@dataclass
class Instruction:
    """One instruction line taken apart; `text()` puts it back together."""
    prefix: str                 # indentation and "ROOT "
    name: str
    shape: str
    opcode: str
    operands: list[str]
    attrs: list[list[str]] = field(default_factory=list)     # [key, value] pairs

    def text(self) -> str:
        operands = ", ".join(self.operands)
        attrs = "".join(f", {k}={v}" for k, v in self.attrs)
        return f"{self.prefix}{self.name} = {self.shape} {self.opcode}({operands}){attrs}"


def parse_instruction(line: str) -> Instruction | None:
    """The parts of an instruction line, or None for anything else (headers, braces)."""
    m = _INSTRUCTION.match(line)
    if not m:
        return None
    rest = m.group(3)
    op = _OPCODE.search(rest)
    if not op:
        return None
    depth, close = 0, None
    for i in range(op.end() - 1, len(rest)):
        depth += {"(": 1, ")": -1}.get(rest[i], 0)
        if depth == 0:
            close = i
            break
    if close is None:
        return None
    tail = rest[close + 1:].strip()
    if tail and not tail.startswith(","):
        return None
    attrs = [part.split("=", 1) for part in split_top_level(tail[1:])] if tail else []
    if any(len(a) != 2 for a in attrs):
        return None
    return Instruction(m.group(1), m.group(2), rest[:op.start()].strip(), op.group(1),
                       split_top_level(rest[op.end():close]), [[k.strip(), v] for k, v in attrs])


class Document:
    """A module's lines, with where its computations and instructions are."""

    def __init__(self, text: str):
        self.lines = text.split("\n")

    def text(self) -> str:
        return "\n".join(self.lines)

    def instructions(self) -> list[int]:
        return [i for i, line in enumerate(self.lines) if parse_instruction(line)]

    def computation(self, at: int) -> range:
        """The line numbers of the instructions of the computation holding line `at`."""
        start = at
        while start > 0 and not is_header(self.lines[start - 1]):
            start -= 1
        end = at
        while end + 1 < len(self.lines) and self.lines[end + 1].strip() != "}":
            end += 1
        return range(start, end + 1)

    def names(self, lines) -> list[str]:
        return [p.name for p in map(parse_instruction, (self.lines[i] for i in lines)) if p]

    def computation_names(self) -> list[str]:
        out = []
        for line in self.lines:
            if is_header(line) and not line.startswith("HloModule"):
                words = line.replace("ENTRY", "").split()
                if words:
                    out.append(words[0].split("(")[0].strip())
        return out


def is_header(line: str) -> bool:
    return line.rstrip().endswith("{") and not line[:1].isspace()


# --- the edits: each takes the document and a random generator, changes the document and
# --- says what it did, or returns None where it does not apply -----------------------------

def _pick_instruction(doc: Document, rng: random.Random, want=lambda inst: True):
    candidates = [(i, inst) for i in doc.instructions()
                  if want(inst := parse_instruction(doc.lines[i]))]
    return rng.choice(candidates) if candidates else (None, None)


def delete_line(doc, rng, pool):
    i, _ = _pick_instruction(doc, rng)
    if i is None:
        return None
    del doc.lines[i]
    return f"line {i + 1}: deleted"


def _pick_pair(doc: Document, rng: random.Random):
    """An instruction line, and a line of the same computation."""
    i, inst = _pick_instruction(doc, rng)
    return (None, None, None) if i is None else (i, inst, rng.choice(list(doc.computation(i))))


def duplicate_line(doc, rng, pool):
    i, inst, where = _pick_pair(doc, rng)
    if i is None:
        return None
    copy = doc.lines[i].replace("ROOT ", "")
    renamed = rng.random() < 0.5                    # a dead copy, or a name used twice
    if renamed:
        copy = copy.replace(f"{inst.name} =", f"{inst.name}.copy =", 1)
    doc.lines.insert(where, copy)
    return f"line {i + 1}: copied{' and renamed' if renamed else ''} before line {where + 1}"


def swap_lines(doc, rng, pool):
    i, _, j = _pick_pair(doc, rng)
    if i is None:
        return None
    doc.lines[i], doc.lines[j] = doc.lines[j], doc.lines[i]
    return f"lines {i + 1} and {j + 1}: swapped"


def _integer_spans(text: str) -> list[re.Match]:
    """Integers that stand alone (dims, indices, numbers in attributes), not digits inside
    names (add.3, f32, Arg_0) or floats; `x` and `_` between digits separate numbers
    (size=3x3, pad=1_1)."""
    def at(k: int) -> str:
        return text[k] if 0 <= k < len(text) else " "
    spans = []
    for m in re.finditer(r"\d+", text):
        before, after = at(m.start() - 1), at(m.end())
        free_before = (before in "x_" and at(m.start() - 2).isdigit()) or not (
            before.isalnum() or before in "_.%")
        free_after = (after in "x_" and at(m.end() + 1).isdigit()) or not (
            after.isalnum() or after in "_.")
        if free_before and free_after:
            spans.append(m)
    return spans


def _other_number(n: int, rng: random.Random) -> int:
    return rng.choice((n - 1, n + 1, 2 * n, *EDGE_NUMBERS, rng.randint(0, 8)))


def change_number(doc, rng, pool):
    i, inst = _pick_instruction(doc, rng, lambda p: p and _integer_spans(p.text()))
    if i is None:
        return None
    text = inst.text()
    m = rng.choice(_integer_spans(text))
    new = _other_number(int(m.group()), rng)
    doc.lines[i] = text[:m.start()] + str(new) + text[m.end():]
    return f"line {i + 1}: number {m.group()} -> {new}"


def change_literal(doc, rng, pool):
    i, inst = _pick_instruction(doc, rng, lambda p: p and p.opcode == "constant")
    if i is None:
        return None
    literal = ", ".join(inst.operands)
    atoms = list(_LITERAL_ATOM.finditer(literal))
    if not atoms:
        return None
    m = rng.choice(atoms)
    if rng.random() < 0.2:                          # one element fewer or more
        new = "" if rng.random() < 0.5 else f"{m.group()}, {m.group()}"
    else:
        new = rng.choice(EDGE_LITERALS)
    inst.operands = [literal[:m.start()] + new + literal[m.end():]]
    doc.lines[i] = inst.text()
    return f"line {i + 1}: literal {m.group()} -> {new or '(removed)'}"


def _pick_shape(doc, rng):
    i, inst = _pick_instruction(doc, rng, lambda p: p and _SHAPE.search(p.text()))
    if i is None:
        return None, None, None
    text = inst.text()
    shapes = [m for m in _SHAPE.finditer(text) if m.group(1) in DTYPES]
    return (i, text, rng.choice(shapes)) if shapes else (None, None, None)


def change_dtype(doc, rng, pool):
    i, text, m = _pick_shape(doc, rng)
    if i is None:
        return None
    new = rng.choice([d for d in EDIT_DTYPES if d != m.group(1)])
    doc.lines[i] = text[:m.start(1)] + new + text[m.end(1):]
    return f"line {i + 1}: dtype {m.group(1)} -> {new}"


def change_rank(doc, rng, pool):
    i, text, m = _pick_shape(doc, rng)
    if i is None:
        return None
    dims = [d for d in m.group(2).split(",") if d.strip()]
    if dims and rng.random() < 0.5:
        del dims[rng.randrange(len(dims))]
    else:
        dims.insert(rng.randint(0, len(dims)), str(rng.choice((1, 2, 3, 4, 0))))
    layout = m.group(3) or ""
    if layout and rng.random() < 0.8:               # keep the layout consistent, or not
        layout = "{" + ",".join(str(k) for k in reversed(range(len(dims)))) + "}"
    new = f"{m.group(1)}[{','.join(dims)}]{layout}"
    doc.lines[i] = text[:m.start()] + new + text[m.end():]
    return f"line {i + 1}: shape {m.group()} -> {new}"


def change_dim_list(doc, rng, pool):
    i, inst = _pick_instruction(doc, rng, lambda p: p and any(
        _INT_LIST.fullmatch(v.strip()) for _, v in p.attrs))
    if i is None:
        return None
    attr = rng.choice([a for a in inst.attrs if _INT_LIST.fullmatch(a[1].strip())])
    dims = [int(d) for d in attr[1].strip("{} ").split(",") if d.strip()]
    how = rng.choice(("drop", "repeat", "add", "swap", "replace", "empty"))
    if how == "drop" and dims:
        del dims[rng.randrange(len(dims))]
    elif how == "repeat" and dims:
        dims.insert(rng.randrange(len(dims)), rng.choice(dims))
    elif how == "swap" and len(dims) > 1:
        a, b = rng.sample(range(len(dims)), 2)
        dims[a], dims[b] = dims[b], dims[a]
    elif how == "replace" and dims:
        dims[rng.randrange(len(dims))] = rng.randint(-1, 5)
    elif how == "empty":
        dims = []
    else:
        dims.insert(rng.randint(0, len(dims)), rng.randint(-1, 5))
    old, attr[1] = attr[1], "{" + ",".join(map(str, dims)) + "}"
    doc.lines[i] = inst.text()
    return f"line {i + 1}: {attr[0]} {old} -> {attr[1]}"


def change_opcode(doc, rng, pool):
    i, inst = _pick_instruction(doc, rng, lambda p: p and p.opcode in OPS)
    if i is None:
        return None
    category = OPS[inst.opcode].category
    same = [name for name, info in OPS.items() if info.category == category]
    new = rng.choice(same if rng.random() < 0.6 else sorted(OPS))
    old, inst.opcode = inst.opcode, new
    doc.lines[i] = inst.text()
    return f"line {i + 1}: opcode {old} -> {new}"


def change_operand(doc, rng, pool):
    i, inst = _pick_instruction(doc, rng, lambda p: p and p.opcode not in (
        "constant", "parameter", "iota") and p.operands)
    if i is None:
        return None
    k = rng.randrange(len(inst.operands))
    roll = rng.random()
    if roll < 0.15:
        old = inst.operands.pop(k)
        what = f"operand {old} dropped"
    elif roll < 0.3:
        inst.operands.append(inst.operands[k])
        what = f"operand {inst.operands[k]} repeated"
    else:
        here = doc.computation(i)
        before = doc.names(range(here.start, i)) or ["%undefined.1"]
        new = rng.choice(before if roll < 0.8 else doc.names(here) if roll < 0.85
                         else doc.names(range(len(doc.lines))) if roll < 0.9
                         else ["%undefined.1"])
        old, inst.operands[k] = inst.operands[k], new
        what = f"operand {old} -> {new}"
    doc.lines[i] = inst.text()
    return f"line {i + 1}: {what}"


def change_attribute(doc, rng, pool):
    i, inst = _pick_instruction(doc, rng, lambda p: p and p.attrs)
    if i is None:
        return None
    k = rng.randrange(len(inst.attrs))
    key, old = inst.attrs[k]
    if key in CALLEE_KEYS:
        choices = doc.computation_names()
    else:
        choices = pool.get(key, [])
    if rng.random() < 0.3 or not choices:
        del inst.attrs[k]
        what = f"attribute {key} dropped"
    else:
        new = rng.choice(choices)
        inst.attrs[k][1] = new
        what = f"{key}={_short(old)} -> {_short(new)}"
    doc.lines[i] = inst.text()
    return f"line {i + 1}: {what}"


def _short(value: str) -> str:
    return value if len(value) <= 40 else value[:37] + "..."


# The edits and how often each is picked: the ones that most often end at the parser
# (a use before its definition) less often than those that reach later stages.
EDITS = {
    delete_line: 2, duplicate_line: 2, swap_lines: 1, change_number: 4, change_literal: 2,
    change_dtype: 4, change_rank: 3, change_dim_list: 3, change_opcode: 3,
    change_operand: 3, change_attribute: 3,
}


def attribute_pool(texts) -> dict[str, list[str]]:
    """For each attribute key, the distinct values the texts give it (sorted)."""
    values: dict[str, set[str]] = {}
    for text in texts:
        for line in text.split("\n"):
            inst = parse_instruction(line)
            for key, value in inst.attrs if inst else ():
                values.setdefault(key, set()).add(value)
    return {k: sorted(v) for k, v in values.items()}


class Mutator:
    """Cases for (seed, index): a source chosen by the index's own generator, edited one to
    three times."""

    def __init__(self, sources: dict[str, str]):
        if not sources:
            raise ValueError("no source modules to mutate")
        self.sources = dict(sorted(sources.items()))
        self.pool = attribute_pool(self.sources.values())
        self._reinferred: dict[str, str | None] = {}

    def case(self, seed: int, index: int) -> Case:
        rng = random.Random(f"{seed}:{index}")
        source = rng.choice(list(self.sources))
        doc = Document(self.sources[source])
        edits = []
        for _ in range(rng.choices((1, 2, 3), (6, 3, 1))[0]):
            for _attempt in range(10):
                before = list(doc.lines)
                edit = rng.choices(list(EDITS), list(EDITS.values()))[0]
                what = edit(doc, rng, self.pool)
                if what and doc.lines != before:
                    edits.append(what)
                    break
                doc.lines = before                  # no change (x -> x): another edit
        text = doc.text()
        reinferred = reinfer_shapes(text) if rng.random() < REINFER_SHARE else None
        if reinferred and reinferred != self._reinferred_source(source):   # edits kept
            return Case(seed, index, source, edits, reinferred, reinferred=True)
        return Case(seed, index, source, edits, text)

    def _reinferred_source(self, source: str) -> str | None:
        if source not in self._reinferred:
            self._reinferred[source] = reinfer_shapes(self.sources[source])
        return self._reinferred[source]


def reinfer_shapes(text: str) -> str | None:
    """The module printed again with every result shape that shape inference gives set to
    it, in definition order: an edit's effect carried on to its users, so that more edited
    modules stay well typed and reach the stages past the verifier. None where the module
    does not parse (or inference fails: that shows when the case runs)."""
    from .. import parse
    from ..shape_inference import INFERABLE, infer_shape
    try:
        module = parse(text)
        for comp in module.computations:          # callees are defined before callers
            for inst in comp.instructions:
                if inst.opcode in INFERABLE and inst.opcode != "broadcast":   # its dims are its own
                    try:
                        shape = infer_shape(inst.opcode, [o.shape for o in inst.operands],
                                            inst.attrs)
                    except HloError:
                        continue
                    if not shape.compatible(inst.shape):
                        inst.shape = shape
        module.attrs.pop("entry_computation_layout", None)
        return module.to_text()
    except Exception:                             # noqa: BLE001 - the case itself will show it
        return None
