"""A partition into kernels -> IR with `fusion` instructions, as XLA prints fused modules.

Each kernel of two or more instructions becomes a fused computation (its inputs as
parameters, its members cloned inside, its outputs as the root, a tuple when there are
several) called by one `fusion` instruction with `kind=kLoop|kInput|kOutput`; readers of a
multi-output kernel take `get-tuple-element`s. The outer computation is re-ordered
topologically, kernels in the order of their members.
"""
from __future__ import annotations

from ..ir import Computation, Instruction, Module, post_order
from ..ops import CONTRACTION_HEROES, REDUCTION_HEROES, SIBLING_HEROES
from ..shape import TupleShape
from .kernel_graph import is_free
from .partition import Partition


def kernel_kind(members: list[Instruction]) -> str:
    ops = {m.opcode for m in members}
    if ops & REDUCTION_HEROES:
        return "kInput"
    if ops & CONTRACTION_HEROES:
        return "kOutput"
    return "kLoop"


class Outliner:
    """Builds fused computations with module-unique names."""

    def __init__(self, module_names: set[str]):
        self.taken = set(module_names)
        self.computations: list[Computation] = []

    def outline(self, comp: Computation, part: Partition,
                kernels: list[list[Instruction]]) -> Computation:
        """The computation with each multi-member kernel replaced by a fusion."""
        local = {i.name for i in comp.instructions}
        producer: dict[int, tuple[str, int]] = {}     # value id -> the unit computing it
        units: list[tuple[str, int]] = []
        views = part.views()
        for k, members in enumerate(kernels):    # a value comes from a kernel writing it,
            units.append(("kernel", k))          # not from one holding a private copy
            for m in views[k].outputs:
                producer.setdefault(id(m), ("kernel", k))
        for k, members in enumerate(kernels):
            for m in members:
                producer.setdefault(id(m), ("kernel", k))
        for i, inst in enumerate(comp.instructions):
            if id(inst) not in producer and not is_free(inst):
                producer[id(inst)] = ("inst", i)
                units.append(("inst", i))
        first = {u: min(part.graph.pos[id(m)] for m in self._members(u, comp, kernels))
                 for u in units}
        units.sort(key=first.__getitem__)

        def operands_of(u):
            members = self._members(u, comp, kernels)
            inside = {id(m) for m in members}
            return [o for m in members for o in m.operands if id(o) not in inside]

        value: dict[int, Instruction] = {}        # original value id -> outer instruction
        result: list[Instruction] = []

        def outer(op: Instruction) -> Instruction:
            if id(op) not in value:               # a free scalar constant, emitted on demand
                value[id(op)] = clone(op, [])
                result.append(value[id(op)])
            return value[id(op)]

        for u in post_order(units, lambda u: [producer[id(o)] for o in operands_of(u)
                                               if id(o) in producer]):
            members = self._members(u, comp, kernels)
            if len(members) == 1:
                inst = members[0]
                value[id(inst)] = clone(inst, [outer(o) for o in inst.operands])
                result.append(value[id(inst)])
                continue
            view = views[u[1]]
            if not view.outputs:                  # dead code: pure ops no result reads
                continue
            fusion = self._fuse(members, view, local, outer)
            result.append(fusion)
            if len(view.outputs) == 1:
                value[id(view.outputs[0])] = fusion
                continue
            for idx, out in enumerate(view.outputs):
                gte = Instruction(unique_local(local, out.name), "get-tuple-element",
                                  out.shape, [fusion], {"index": idx})
                value[id(out)] = gte
                result.append(gte)
        return Computation(comp.name, result, outer(comp.root), comp.execution_thread)

    @staticmethod
    def _members(unit, comp, kernels) -> list[Instruction]:
        kind, i = unit
        return kernels[i] if kind == "kernel" else [comp.instructions[i]]

    def _fuse(self, members, view, local: set[str], outer) -> Instruction:
        inner: dict[int, Instruction] = {}
        body: list[Instruction] = []
        for n, inp in enumerate(view.inputs):
            inner[id(inp)] = Instruction(f"param_{n}", "parameter", inp.shape,
                                         parameter_number=n)
            body.append(inner[id(inp)])
        for m in members:
            for o in m.operands:
                if id(o) not in inner:            # a free scalar constant, copied in
                    inner[id(o)] = clone(o, [])
                    body.append(inner[id(o)])
            inner[id(m)] = clone(m, [inner[id(o)] for o in m.operands])
            body.append(inner[id(m)])
        outs = [inner[id(o)] for o in view.outputs]
        if len(outs) == 1:
            root = outs[0]
        else:
            root = Instruction("tuple", "tuple", TupleShape(tuple(o.shape for o in outs)), outs)
            body.append(root)
        _rename_unique(body)
        hero = next((m for m in reversed(members) if m.opcode in SIBLING_HEROES),
                    view.outputs[0])
        name = self._unique(f"fused_{hero.opcode.replace('-', '_')}")
        fused = Computation(name, body, root)
        self.computations.append(fused)
        return Instruction(unique_local(local, f"{hero.opcode}_fusion"), "fusion", root.shape,
                           [outer(i) for i in view.inputs],
                           {"kind": kernel_kind(members), "calls": fused})

    def _unique(self, base: str) -> str:
        return unique_local(self.taken, base)


def clone(inst: Instruction, operands: list[Instruction], name: str | None = None,
          attrs: dict | None = None) -> Instruction:
    """A copy of `inst` reading `operands` (under another name, attributes when given)."""
    return Instruction(name or inst.name, inst.opcode, inst.shape, operands,
                       dict(inst.attrs) if attrs is None else attrs,
                       literal=inst.literal, parameter_number=inst.parameter_number,
                       line=inst.line, column=inst.column)


def _rename_unique(body: list[Instruction]) -> None:
    seen: set[str] = set()
    for inst in body:
        inst.name = unique_local(seen, inst.name)


def unique_local(taken: set[str], base: str) -> str:
    name, n = base, 0
    while name in taken:
        n += 1
        name = f"{base}.{n}"
    taken.add(name)
    return name


def fuse_module(module: Module, computations: list[Computation], policy, model) -> Module:
    """`module` with each computation in `computations` (entry, loop bodies) fused."""
    names = {c.name for c in module.computations}
    outliner = Outliner(names)
    swapped: dict[int, Computation] = {}
    for comp in computations:
        part = Partition(comp, policy, model)
        kernels = part.run()
        swapped[id(comp)] = outliner.outline(comp, part, kernels)
    for comp in swapped.values():
        for inst in comp.instructions:
            for key, value in inst.attrs.items():
                if isinstance(value, Computation) and id(value) in swapped:
                    inst.attrs[key] = swapped[id(value)]
                elif isinstance(value, tuple) and value and isinstance(value[0], Computation):
                    inst.attrs[key] = tuple(swapped.get(id(c), c) for c in value)
    comps = [swapped.get(id(c), c) for c in module.computations] + outliner.computations
    entry = swapped.get(id(module.entry), module.entry)
    return Module(module.name, comps, entry, dict(module.attrs), module.extra_sections)
