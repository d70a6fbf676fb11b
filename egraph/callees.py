"""Module-wide registries of one optimization: called computations and names.

Inside terms a called computation is a string: the op name for a reducer that is one binary
op of its two parameters ("add": equal reducers then CSE), that op in parentheses for one that
returns that op's result as a 1-tuple ("(add)", the reducer of a variadic reduce of one
operand), otherwise "@c<N>" naming the
computation object. Decoding resolves names back, to the optimized version of a while body
or conditional branch where there is one, and builds a reducer for "add" at the element
type the caller needs.
"""
from __future__ import annotations

from ..ir import Computation, Instruction, Module
from ..ops import COMMUTATIVE, OPS
from ..shape import Shape, TupleShape


class Names:
    """Unique names across a module (XLA wants instruction names unique module-wide).

    An original name may be reused once, by what its instruction became; fresh names avoid
    every original name, so reusing never collides with them."""

    def __init__(self, originals=()):
        self._reserved: set[str] = set(originals)
        self._used: set[str] = set()
        self._next: dict[str, int] = {}

    def reuse(self, name: str) -> bool:
        """Take an original name; False if it is already taken in the output."""
        if name in self._used:
            return False
        self._used.add(name)
        return True

    def fresh(self, base: str) -> str:
        n = self._next.get(base, 1)
        while f"{base}.{n}" in self._reserved or f"{base}.{n}" in self._used:
            n += 1
        self._next[base] = n + 1
        name = f"{base}.{n}"
        self._used.add(name)
        return name


class Callees:
    def __init__(self, module: Module):
        self.names = Names(inst.name for inst in module.instructions())
        self.computation_names = Names(c.name for c in module.computations)
        self._name_of: dict[int, str] = {}
        self._by_name: dict[str, Computation] = {}
        self._reducers: dict[tuple[str, str], Computation] = {}
        self._outputs: dict[int, Computation] = {}

    def name_of(self, comp: Computation, optimized: bool = False) -> str:
        """The name of `comp` inside terms. `optimized`: the caller (while, conditional) has
        it optimized too, otherwise it is printed as it is."""
        name = self._name_of.get(id(comp))
        if name is None:
            op = None if optimized else binary_reducer_op(comp)
            if op is not None:
                name = op
                element_type = comp.parameters[0].shape.element_type
                self._reducers.setdefault((op, element_type), comp)
            else:
                name = f"@c{len(self._by_name)}"
                self._by_name[name] = comp
            self._name_of[id(comp)] = name
            if not optimized:
                self._keep_names(comp)
        return name

    def _keep_names(self, comp: Computation) -> None:
        """A callee may be printed as it is: its names stay its own."""
        for inst in comp.instructions:
            self.names.reuse(inst.name)

    def computation(self, name: str) -> Computation | None:
        """The original computation behind an "@c<N>" name."""
        return self._by_name.get(name)

    def set_output(self, original: Computation, optimized: Computation) -> None:
        self._outputs[id(original)] = optimized

    def output(self, comp: Computation) -> Computation:
        """What a reference to `comp` becomes in the output module."""
        return self._outputs.get(id(comp), comp)

    def resolve(self, name: str, element_type: str | None) -> Computation:
        if name.startswith("@"):
            return self.output(self._by_name[name])
        key = (name, element_type)
        comp = self._reducers.get(key)
        if comp is None:
            comp = self._reducers[key] = self._make_reducer(name, element_type)
        return comp

    def _make_reducer(self, name: str, element_type: str) -> Computation:
        op = name.strip("()")
        scalar = Shape(element_type, ())
        lhs = Instruction(self.names.fresh("lhs"), "parameter", scalar, parameter_number=0)
        rhs = Instruction(self.names.fresh("rhs"), "parameter", scalar, parameter_number=1)
        root = Instruction(self.names.fresh(op), op, scalar, (lhs, rhs))
        instructions = [lhs, rhs, root]
        if name != op:
            root = Instruction(self.names.fresh("tuple"), "tuple", TupleShape((scalar,)), (root,))
            instructions.append(root)
        name = self.computation_names.fresh(f"{op}_{element_type}")
        return Computation(name, instructions, root)


def binary_reducer_op(comp: Computation) -> str | None:
    """"add" for a computation `(p0, p1) -> add(p0, p1)` on scalars of one type, "(add)" for
    `(p0, p1) -> (add(p0, p1))`, else None."""
    root = comp.root
    if root.opcode == "tuple" and len(root.operands) == 1 and len(comp.instructions) == 4:
        op = _binary_op_of_parameters(root.operands[0], comp.parameters)
        return None if op is None else f"({op})"
    if len(comp.instructions) != 3:
        return None
    return _binary_op_of_parameters(root, comp.parameters)


def _binary_op_of_parameters(root: Instruction, params) -> str | None:
    info = OPS.get(root.opcode)
    if info is None or info.category != "binary" or len(params) != 2:
        return None
    p0, p1 = params
    if any(k != "metadata" for k in root.attrs) or root.shape.is_tuple or root.shape.rank:
        return None
    if not (p0.shape.compatible(root.shape) and p1.shape.compatible(root.shape)):
        return None
    operands = [id(o) for o in root.operands]
    swapped = root.opcode in COMMUTATIVE and operands == [id(p1), id(p0)]
    if operands == [id(p0), id(p1)] or swapped:
        return root.opcode
    return None
