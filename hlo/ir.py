"""The IR: Module -> Computation -> Instruction, as XLA structures HLO.

Plain mutable objects with slots: the parser builds them in one pass, the optimizer's decoder
builds new ones, the interpreter and the lowering read them. Nothing here knows about text,
e-graphs or targets; printing lives in printer.py.
"""
from __future__ import annotations

from typing import Any, Iterable, Iterator

import numpy as np

from .shape import AnyShape


def post_order(roots: Iterable, successors, key=lambda x: x) -> list:
    """Every node reachable from `roots`, each after all its successors, otherwise in the
    roots' order. Iterative (deep graphs must not hit Python's recursion limit); a cycle is
    a bug in whoever built the graph and raises ValueError."""
    done: set = set()
    open_: set = set()
    order: list = []
    for root in roots:
        stack = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            k = key(node)
            if expanded:
                open_.discard(k)
                done.add(k)
                order.append(node)
                continue
            if k in done:
                continue
            if k in open_:
                raise ValueError(f"the graph has a cycle through {node!r}")
            open_.add(k)
            stack.append((node, True))
            stack.extend((n, False) for n in reversed(successors(node)) if key(n) not in done)
    return order


class _Elided:
    """The value of a `constant({...})` whose elements were left out of the text."""
    __slots__ = ()

    def __repr__(self) -> str:
        return "ELIDED"


ELIDED = _Elided()

# A constant's value: an array, ELIDED, or a tuple of literals for tuple-shaped constants.
Literal = np.ndarray | _Elided | tuple


class Instruction:
    """One HLO instruction.

    `attrs` maps attribute names to typed values (see attributes.py); computation-valued
    attributes (to_apply, calls, body, ...) hold Computation objects or tuples of them.
    `parameter_number` is set for parameters, `literal` for constants. `line`/`column` point
    at the instruction in its source text (0 for instructions built by the optimizer).
    """
    __slots__ = ("name", "opcode", "shape", "operands", "attrs", "literal",
                 "parameter_number", "line", "column")

    def __init__(self, name: str, opcode: str, shape: AnyShape,
                 operands: Iterable[Instruction] = (), attrs: dict[str, Any] | None = None,
                 *, literal: Literal | None = None, parameter_number: int | None = None,
                 line: int = 0, column: int = 0):
        self.name = name
        self.opcode = opcode
        self.shape = shape
        self.operands = list(operands)
        self.attrs = attrs if attrs is not None else {}
        self.literal = literal
        self.parameter_number = parameter_number
        self.line = line
        self.column = column

    def called_computations(self) -> list[Computation]:
        """Computations this instruction calls, in attribute order."""
        out: list[Computation] = []
        for value in self.attrs.values():
            if isinstance(value, Computation):
                out.append(value)
            elif isinstance(value, tuple) and value and isinstance(value[0], Computation):
                out.extend(value)
        return out

    def __repr__(self) -> str:
        return f"<{self.name} = {self.shape} {self.opcode}>"


class Computation:
    """An ordered list of instructions with one root; parameters are listed by number."""
    __slots__ = ("name", "instructions", "root", "execution_thread", "line", "column")

    def __init__(self, name: str, instructions: list[Instruction], root: Instruction,
                 execution_thread: str | None = None, line: int = 0, column: int = 0):
        self.name = name
        self.instructions = instructions
        self.root = root
        self.execution_thread = execution_thread
        self.line = line
        self.column = column

    @property
    def parameters(self) -> list[Instruction]:
        params = [i for i in self.instructions if i.opcode == "parameter"]
        return sorted(params, key=lambda i: i.parameter_number)

    def post_order(self) -> list[Instruction]:
        """Instructions reachable from the root, operands before users."""
        return post_order([self.root], lambda inst: inst.operands, id)

    def unique_name(self, base: str, taken: set[str] | None = None) -> str:
        """`base`, or `base.N` with the smallest N not used in this computation."""
        taken = taken if taken is not None else {i.name for i in self.instructions}
        if base not in taken:
            return base
        n = 1
        while f"{base}.{n}" in taken:
            n += 1
        return f"{base}.{n}"

    def __repr__(self) -> str:
        return f"<computation {self.name}: {len(self.instructions)} instructions>"


class Module:
    """A module: computations in definition order (callees before callers) and its entry.

    `attrs` holds the header attributes (`is_scheduled`, `entry_computation_layout`, ...) as
    raw text; `extra_sections` the stack-frame tables newer XLA prints, kept verbatim.
    """
    __slots__ = ("name", "computations", "entry", "attrs", "extra_sections")

    def __init__(self, name: str, computations: list[Computation], entry: Computation,
                 attrs: dict[str, Any] | None = None, extra_sections: str = ""):
        self.name = name
        self.computations = computations
        self.entry = entry
        self.attrs = attrs if attrs is not None else {}
        self.extra_sections = extra_sections

    def computation(self, name: str) -> Computation:
        for comp in self.computations:
            if comp.name == name:
                return comp
        raise KeyError(name)

    def instructions(self) -> Iterator[Instruction]:
        for comp in self.computations:
            yield from comp.instructions

    def to_text(self, metadata: bool = True) -> str:
        """HLO text that XLA's parser and ours accept (see printer.py)."""
        from .printer import print_module
        return print_module(self, metadata=metadata)

    def __repr__(self) -> str:
        return f"<module {self.name}: {len(self.computations)} computations>"
