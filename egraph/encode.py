"""IR computations -> e-graph terms as rows of plain Python lists (ingest.py loads them).

A module's entry and its while/conditional computations go into one Encoding, each as a
Part. One row per term: opcode, operand rows, attribute id, type id, leaf key, and the
instruction it stands for (names and metadata come back from it when decoding). Before the
e-graph sees anything:

* `call` and `fusion` are inlined (XLA's optimized modules are full of fusions), and a
  get-tuple-element of a tuple built here takes the element directly, so a multi-output
  fusion leaves no tuple behind.
* Constants: a scalar is (Leaf "constant" 0 (As "<canonical text>" "") t); an array whose
  elements are all equal becomes a broadcast of such a scalar; any other array gets a literal
  key (equal arrays share one), kept in `literals`.
* Instructions that must never be merged or dropped (rng, I/O, collectives, side-effecting
  custom-calls) get a unique key (leaves) or a unique mark in `rest`, and are extra roots.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..ir import ELIDED, Computation, Instruction
from ..ops import OPS, never_merged
from ..shape import AnyShape, Shape
from .callees import Callees
from .constants import canonical_scalar_text
from .terms import RestTable, attr_text, schema_fields, type_extra, type_text

INLINED = {"call": "to_apply", "fusion": "calls"}

# Callers whose sub-computations are optimized too (same e-graph, interface unchanged).
OPTIMIZED_CALLERS = frozenset({"while", "conditional"})


def is_leaf(opcode: str) -> bool:
    """Leaf terms are the operand-less opcodes; other operand-less instructions (after-all(),
    tuple()) are OpV terms with an empty operand vector."""
    info = OPS.get(opcode)
    return info is not None and info.arity == 0


@dataclass
class Part:
    """One computation's share of an Encoding: its rows, root, parameter and kept rows, and
    the while/conditional computations it calls (optimized in the same e-graph)."""
    computation: Computation
    rows: range = range(0)
    root: int = -1
    parameters: list[int] = field(default_factory=list)
    keep_alive: list[int] = field(default_factory=list)
    calls: list[Computation] = field(default_factory=list)
    # each instruction of the computation: (it, the row of its value, the rows made for it
    # — a fusion's or call's body; explain.py prices input kernels with these)
    instructions: list[tuple[Instruction, int, range]] = field(default_factory=list)


class Encoding:
    """Computations as term rows of one e-graph, plus the side tables decoding needs.
    Parameters are leaves `(Leaf "parameter" number attr type)`, so two computations share
    terms where they compute the same function of the same parameters: every equality the
    rules prove holds whatever the parameters are bound to."""

    def __init__(self, callees: Callees):
        self.callees = callees
        self.opcode: list[str] = []
        self.operands: list[tuple[int, ...]] = []
        self.attr: list[int] = []
        self.type: list[int] = []
        self.key: list[int] = []
        self.origin: list[Instruction | None] = []
        self.type_ids: dict[AnyShape, int] = {}
        self.type_texts: list[str] = []
        self.extras: dict[str, Shape] = {}         # type `extra` text -> its Shape
        self.attr_ids: dict[tuple, int] = {}
        self.attr_texts: list[str] = []
        self.rests = RestTable()
        self.literals: list = [None]                # literal key -> array (0: scalars)
        self._literal_keys: dict[tuple, int] = {}
        self.parts: list[Part] = []
        self._part: Part | None = None             # the part being encoded
        self._unique = 0

    def __len__(self) -> int:
        return len(self.opcode)

    def element_types(self) -> set[str]:
        """The element types of the encoded terms (tuple types by their leaves)."""
        return {leaf.element_type for shape in self.type_ids
                for leaf in (shape.leaves() if shape.is_tuple else [shape])}

    def add(self, computation: Computation) -> Part:
        """Encode one more computation (calls and fusions inlined into it)."""
        part = self._part = Part(computation)
        start = len(self.opcode)
        part.root = self._inline(computation, None)
        part.rows = range(start, len(self.opcode))
        self.parts.append(part)
        return part

    # --- instructions ----------------------------------------------------------------------
    def _inline(self, comp: Computation, args: list[int] | None) -> int:
        """Rows for `comp`'s instructions; `args` are the rows its parameters stand for
        (None at the top: parameters are leaves). Returns the root's row."""
        row: dict[int, int] = {}
        for inst in comp.instructions:
            start = len(self.opcode)
            row[id(inst)] = self._instruction(inst, [row[id(o)] for o in inst.operands], args)
            if args is None:
                self._part.instructions.append((inst, row[id(inst)],
                                                range(start, len(self.opcode))))
        return row[id(comp.root)]

    def _instruction(self, inst: Instruction, operands: list[int], args) -> int:
        op = inst.opcode
        if op == "parameter":
            if args is not None:
                return args[inst.parameter_number]
            row = self._term(inst, (), key=inst.parameter_number)
            self._part.parameters.append(row)
            return row
        if op in INLINED and isinstance(inst.attrs.get(INLINED[op]), Computation):
            return self._inline(inst.attrs[INLINED[op]], operands)
        if op == "get-tuple-element" and self.opcode[operands[0]] == "tuple":
            return self.operands[operands[0]][inst.attrs["index"]]
        if op == "constant":
            return self._constant(inst)
        if never_merged(inst.opcode, inst.attrs):
            self._unique += 1
            row = self._term(inst, tuple(operands), key=-self._unique, unique=self._unique)
            self._part.keep_alive.append(row)
            return row
        return self._term(inst, tuple(operands))

    def _term(self, inst: Instruction, operands: tuple[int, ...], key: int = 0,
              value: str = "", unique: int | None = None) -> int:
        name_of = self._callee_of if inst.opcode in OPTIMIZED_CALLERS else self.callees.name_of
        values, rest = schema_fields(inst, name_of, value)
        rest_text = self.rests.add(rest, name_of, unique)
        return self._row(inst.opcode, operands, (inst.opcode, *values, rest_text), inst.shape,
                         key, inst)

    def _row(self, opcode: str, operands: tuple[int, ...], attr: tuple, shape: AnyShape,
             key: int, origin: Instruction | None) -> int:
        """`attr`: (opcode, schema field values..., rest), interned as an Attr text."""
        attr_id = self.attr_ids.get(attr)
        if attr_id is None:
            attr_id = self.attr_ids[attr] = len(self.attr_texts)
            self.attr_texts.append(attr_text(opcode, attr[1:-1], attr[-1]))
        self.opcode.append(opcode)
        self.operands.append(operands)
        self.attr.append(attr_id)
        self.type.append(self.type_id(shape))
        self.key.append(key)
        self.origin.append(origin)
        return len(self.opcode) - 1

    def _callee_of(self, comp: Computation) -> str:
        """The name of a while/conditional sub-computation, noted as one of this part's."""
        self._part.calls.append(comp)
        return self.callees.name_of(comp, optimized=True)

    def type_id(self, shape: AnyShape) -> int:
        type_id = self.type_ids.get(shape)
        if type_id is None:
            type_id = self.type_ids[shape] = len(self.type_texts)
            self.type_texts.append(type_text(shape))
            for leaf in shape.leaves() if shape.is_tuple else (shape,):
                if extra := type_extra(leaf):
                    self.extras[extra] = leaf
        return type_id

    # --- constants -------------------------------------------------------------------------
    def _constant(self, inst: Instruction) -> int:
        shape, literal = inst.shape, inst.literal
        if not shape.is_tuple and shape.dtype.is_array and literal is not ELIDED:
            if shape.rank == 0:
                text = canonical_scalar_text(literal, shape.element_type)
                return self._term(inst, (), value=text)
            splat = splat_value(literal)
            if splat is not None:
                scalar = self._scalar(canonical_scalar_text(splat, shape.element_type),
                                      shape.element_type)
                return self._row("broadcast", (scalar,), ("broadcast", (), ""), shape, 0, inst)
        return self._term(inst, (), key=self.literal_key(literal, shape))

    def _scalar(self, text: str, element_type: str) -> int:
        """A row for the scalar constant with canonical text `text`."""
        return self._row("constant", (), ("constant", text, ""), Shape(element_type, ()), 0,
                         None)

    def literal_key(self, literal, shape: AnyShape) -> int:
        """The key of an array literal; equal literals share a key (elided ones never do)."""
        content = None
        if literal is not ELIDED and not shape.is_tuple:
            content = (shape, literal.tobytes())
            key = self._literal_keys.get(content)
            if key is not None:
                return key
        key = len(self.literals)
        self.literals.append(literal)
        if content is not None:
            self._literal_keys[content] = key
        return key


def splat_value(literal) -> np.ndarray | None:
    """The 0-d array every element of an array literal equals bit for bit, or None
    (-0.0 and 0.0 differ, so do NaNs with different payloads; empty arrays are no splats)."""
    flat = np.ascontiguousarray(literal).reshape(-1)
    if flat.size == 0:
        return None
    raw = flat.view(np.uint8).reshape(flat.size, flat.dtype.itemsize)
    if not (raw == raw[0]).all():
        return None
    return flat[0].reshape(())
