"""Extracted e-nodes -> an IR computation.

Instructions come out in the input's order where they come from it (new ones just before
their first user), parameters leading by number. An e-class that holds an original
instruction's term gives the new instruction that instruction's name (each name once; fresh
`opcode.N` names otherwise), and its metadata and source position when the chosen node has
the same opcode (so later stages' errors point at the input's line).
Types become Shapes with their layouts, attributes typed IR values, callee names the output
module's computations.
"""
from __future__ import annotations

import heapq
import math

from ..ir import Computation, Instruction
from .callees import Callees
from .constants import scalar_from_text
from .encode import Encoding, Part
from .extract import Extraction
from .frozen import FrozenTerms
from .terms import ir_attrs


def decode(terms: FrozenTerms, extraction: Extraction, encoding: Encoding, part: Part,
           callees: Callees, made: dict | None = None) -> Computation:
    """The computation `part` encoded, as `extraction` chose it. `made`, when given, receives
    each extracted e-class's instruction (explain.py reads it)."""
    origins = _origins(terms, encoding, part)
    names = callees.names
    made = {} if made is None else made
    typed: dict[tuple[int, int, int], tuple] = {}      # (op, attr, type) -> decoded parts
    op, attr, type_, key = (a.tolist() for a in (terms.op, terms.attr, terms.type, terms.key))
    ptr, child = terms.child_ptr.tolist(), terms.child.tolist()
    choice = extraction.choice.tolist()
    for c in _program_order(extraction.order, choice, ptr, child, origins):
        node = choice[c]
        parts = typed.get((op[node], attr[node], type_[node]))
        if parts is None:
            opcode = terms.opnames[op[node]]
            shape = terms.shape(type_[node])
            _, fields = terms.attr_value(attr[node])
            attrs = ir_attrs(opcode, fields[:-1], fields[-1], encoding.rests, callees, shape)
            parts = typed[op[node], attr[node], type_[node]] = (opcode, shape, attrs, fields)
        opcode, shape, attrs, fields = parts
        attrs = dict(attrs)
        origin = origins.get(c, (0, None))[1]
        same_op = origin is not None and origin.opcode == opcode
        if same_op and "metadata" in origin.attrs:
            attrs["metadata"] = origin.attrs["metadata"]
        where = {"line": origin.line, "column": origin.column} if same_op else {}
        name = origin.name if origin is not None and names.reuse(origin.name) \
            else names.fresh(opcode)
        if opcode == "parameter":
            inst = Instruction(name, opcode, shape, (), attrs, parameter_number=key[node],
                               **where)
        elif opcode == "constant":
            literal = scalar_from_text(fields[0], shape.element_type) if key[node] == 0 \
                else encoding.literals[key[node]]
            inst = Instruction(name, opcode, shape, (), attrs, literal=literal, **where)
        else:
            operands = [made[k] for k in child[ptr[node]:ptr[node + 1]]]
            inst = Instruction(name, opcode, shape, operands, attrs, **where)
        made[c] = inst
    instructions = list(made.values())
    parameters = sorted((i for i in instructions if i.opcode == "parameter"),
                        key=lambda i: i.parameter_number)
    body = [i for i in instructions if i.opcode != "parameter"]
    original = part.computation
    root = made[int(terms.row_class[part.root])]
    return Computation(original.name, parameters + body, root, original.execution_thread)


def _origins(terms: FrozenTerms, encoding: Encoding, part: Part
             ) -> dict[int, tuple[int, Instruction]]:
    """e-class -> (row, instruction) of the part's first instruction whose term is in it."""
    out: dict[int, tuple[int, Instruction]] = {}
    row_class = terms.row_class[part.rows.start:part.rows.stop].tolist()
    origin = encoding.origin
    for i, c in enumerate(row_class):
        inst = origin[part.rows.start + i]
        if inst is not None:
            out.setdefault(c, (part.rows.start + i, inst))
    return out


def _program_order(order: list[int], choice: list[int], ptr: list[int], child: list[int],
                   origins: dict) -> list[int]:
    """The classes of `order` (operands first) rearranged to follow the input program where
    they come from it: a topological sort that always emits, among the classes whose operands
    are out, the one that came first in the input; new terms wait until a user needs them."""
    position = {c: i for i, c in enumerate(order)}
    pending = {}
    users: dict[int, list[int]] = {}
    ready = []
    for c in order:
        operands = child[ptr[choice[c]]:ptr[choice[c] + 1]]
        pending[c] = len(operands)
        for k in operands:
            users.setdefault(k, []).append(c)
        if not operands:
            ready.append(_order_key(c, origins, position))
    heapq.heapify(ready)
    out = []
    while ready:
        *_, c = heapq.heappop(ready)
        out.append(c)
        for u in users.get(c, ()):
            pending[u] -= 1
            if pending[u] == 0:
                heapq.heappush(ready, _order_key(u, origins, position))
    return out


def _order_key(c: int, origins: dict, position: dict) -> tuple:
    origin = origins.get(c)
    return (origin[0] if origin is not None else math.inf, position[c], c)
