"""Layout assignment for --target=tpu: a minor-to-major order and XLA's tiles for every array
of an optimized module, with a layout-changing `copy` only where a producer and a consumer
disagree.

What the TPU wants (the model's rules):
* a dot reads both operands with a contracting dimension minor: the 128 lanes of a tile carry
  K into the MXU, so a K-major operand would be relaid out on the way;
* an elementwise op (also inside a fusion) reads operands of its own shape in its own layout;
* a transpose or copy whose result layout is its operand's, permuted, moves no data (it is a
  bitcast); otherwise it is a relayout of its own;
* a reduce prefers a reduced dimension minor (a lane reduction), when that costs nothing else.
Padding differs between layouts (f32[3,129]{1,0} stores 4x256 elements, {0,1} 136x128), so
each value's candidate layouts are priced by the bytes their tiles move, read and written once
per use, plus the copies they would need, all priced by the TPU cost model (`fused_cost`).
The choice is iterated conditional modes: every value, and every chain of values that
elementwise ops tie, takes in turn the candidate of least total cost given its neighbours'
current layouts, until nothing changes.

Why a pass over the extracted module rather than e-graph terms: layouts belong to the
scheduled, fused module (fusion decides which values exist in memory at all); tying them into
the e-graph would multiply every e-class by its layouts before fusion has chosen the values
that need one. Values tied by control flow (a while's operand, body parameter and root, its
result; call and conditional parameters; tuple elements) share one layout, and a fusion's
internals follow its operands and result.

A `bitcast` in the input means its operand's bytes seen under both layouts; before layouts
change it is rewritten to the layout-free ops it stands for (hlo/layout_free.py).
"""
from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass

from . import Work, cost_model
from ..attributes import Raw
from ..dot_dims import dot_dims
from ..ir import Computation, Instruction, Module
from ..layout_free import rewrite_bitcasts
from ..ops import is_elementwise
from ..shape import Layout, Shape, TupleShape, default_layout
from .tpu_kernels import array_dims
from .tpu_tiles import memory_image, storage_bytes, tile_text, tiling

REDUCE_PREFERENCE_NS = 1e-3     # a tie-breaker, not a price: lane reductions when free
MAX_SEARCHED_RANK = 4           # bitcast_order tries every order up to this rank (24)


def assign_layouts(module: Module, model=None, large_tiles: bool = False) -> Module:
    """Give every array in `module` (changed in place, and returned) a TPU tiled layout,
    priced by `model` (default: the TPU cost model of cost_model("tpu")); `large_tiles`
    models XLA's large-second-minor tiles (targets/tpu_tiles.py)."""
    for comp in module.computations:
        rewrite_bitcasts(comp)
    fused = {id(i.attrs["calls"]) for i in module.instructions() if i.opcode == "fusion"}
    outer = [c for c in module.computations if id(c) not in fused]
    graph = _Graph(outer, model or cost_model("tpu"), large_tiles)
    graph.choose()
    graph.insert_copies()
    graph.apply()
    for comp in outer:
        for inst in comp.instructions:
            if inst.opcode == "fusion":
                _lay_out_fused(inst, large_tiles)
    if "entry_computation_layout" in module.attrs:
        params = ", ".join(p.shape.to_text() for p in module.entry.parameters)
        module.attrs["entry_computation_layout"] = Raw(
            f"{{({params})->{module.entry.root.shape.to_text()}}}")
    return module


# ---- layouts as minor-to-major tuples

def _default(dims: tuple[int, ...]) -> tuple[int, ...]:
    """The descending order with the size-1 dims moved most major (XLA's TPU layouts do
    this: `s8[32,2048,1]{1,0,2:T(8,128)(4,1)}`): a size-1 dim in a tiled position would pad
    to a whole tile row (f32[2,32,1]{2,1,0} stores 2x32x128 elements) and moves nothing
    anywhere else."""
    return degenerate_major(default_layout(len(dims)).minor_to_major, dims)


def degenerate_major(order: tuple[int, ...], dims: tuple[int, ...]) -> tuple[int, ...]:
    """`order` with its size-1 dims moved to the major end, the others kept in order."""
    return tuple(d for d in order if dims[d] != 1) + tuple(d for d in order if dims[d] == 1)


def same_memory(a: Shape, a_order: tuple[int, ...], b: Shape, b_order: tuple[int, ...],
                large_tiles: bool) -> bool:
    """Whether two arrays of one element count, in these orders, hold every element at the
    same offset: a reshape between them, or a change from one order to the other, is a
    bitcast (tpu_tiles.memory_image)."""
    return memory_image(a.element_type, array_dims(a), a_order, large_tiles) == \
        memory_image(b.element_type, array_dims(b), b_order, large_tiles)


def bitcast_order(src: Shape, order: tuple[int, ...], dst: Shape,
                  large_tiles: bool) -> tuple[int, ...] | None:
    """An order for `dst` that makes a reshape from `src` in `order` a bitcast, None if
    none is found. Tried: the same order over the dims that are not 1 (a reshape that only
    adds or drops size-1 dims), then every order of a `dst` of rank <= 4."""
    kept = [d for d in order if src.dims[d] != 1]
    sizes = [d for d in range(dst.rank) if dst.dims[d] != 1]
    if [src.dims[d] for d in sorted(kept)] == [dst.dims[d] for d in sizes]:
        renumber = dict(zip(sorted(kept), sizes))
        guess = tuple(renumber[d] for d in kept) + \
            tuple(d for d in range(dst.rank) if dst.dims[d] == 1)
        if same_memory(src, order, dst, guess, large_tiles):
            return guess
    if dst.rank <= MAX_SEARCHED_RANK:
        for option in itertools.permutations(range(dst.rank - 1, -1, -1)):
            if same_memory(src, order, dst, option, large_tiles):
                return option
    return None


def with_minor(order: tuple[int, ...], dim: int) -> tuple[int, ...]:
    """`order` with `dim` moved to the minor position, the others kept in order."""
    return (dim,) + tuple(d for d in order if d != dim)


def through_transpose(order: tuple[int, ...], perm: tuple[int, ...]) -> tuple[int, ...]:
    """The result layout that makes transpose(dimensions=perm) of an operand in `order` a
    bitcast: result dim j is operand dim perm[j]."""
    return tuple(perm.index(d) for d in order)


def back_through_transpose(order: tuple[int, ...], perm: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(perm[d] for d in order)


def tiled(shape: Shape, order: tuple[int, ...], large_tiles: bool) -> Shape:
    tiles = tiling(shape.element_type, shape.dims, order, large_tiles)
    return Shape(shape.element_type, shape.dims, Layout(order, tile_text(tiles)), shape.dynamic)


def _leaves(shape) -> list[Shape]:
    return shape.leaves() if shape.is_tuple else [shape]


def _relaid(shape, orders: list[tuple[int, ...]], large_tiles: bool):
    """`shape` with its array leaves in `orders`, tiled."""
    it = iter(orders)

    def walk(s):
        if s.is_tuple:
            return TupleShape(tuple(walk(e) for e in s.elements))
        order = next(it)
        return tiled(s, order, large_tiles) if s.dtype.is_array else s
    return walk(shape)


# ---- requirements a consumer puts on an operand

@dataclass(frozen=True)
class _Need:
    """How a consumer wants operand `index` laid out: `same` (the consumer's own layout),
    `minor` (one of these dims minor), `permuted` (a transpose: free when permuted),
    `reshape` (free when both hold the elements at the same offsets), or `prefer` (a
    reduce: a soft wish for one of these dims minor)."""
    kind: str
    dims: tuple[int, ...] = ()


def _needs(inst: Instruction) -> dict[int, _Need]:
    """Operand index -> what `inst` needs of it (operands missing have no preference)."""
    op = inst.opcode
    if op == "dot":
        lhs, rhs = dot_dims(inst.attrs, inst.operands[0].shape.rank,
                            inst.operands[1].shape.rank)
        return {i: _Need("minor", tuple(side.contracting))
                for i, side in enumerate((lhs, rhs)) if side.contracting}
    if op == "transpose":
        return {0: _Need("permuted", tuple(inst.attrs["dimensions"]))}
    if op == "copy":
        return {0: _Need("permuted", tuple(range(inst.shape.rank)))}
    if op == "reshape":
        return {0: _Need("reshape")}
    if op == "reduce" and inst.attrs["dimensions"]:
        n = len(inst.operands) // 2
        return {i: _Need("prefer", tuple(inst.attrs["dimensions"])) for i in range(n)}
    if op == "fusion":
        return _fusion_needs(inst)
    if is_elementwise(op) and not inst.shape.is_tuple:
        return {i: _Need("same") for i, o in enumerate(inst.operands)
                if not o.shape.is_tuple and o.shape.dims == inst.shape.dims}
    return {}


def _fusion_needs(fusion: Instruction) -> dict[int, _Need]:
    """A fusion needs of an operand what its parameter's users inside need: a dot's
    contracting dim minor (through unary elementwise ops), else the fusion's own layout for
    an operand shaped like its (array) result."""
    body: Computation = fusion.attrs["calls"]
    users = defaultdict(list)
    for inst in body.instructions:
        for k, o in enumerate(inst.operands):
            users[id(o)].append((inst, k))
    out: dict[int, _Need] = {}
    for param in body.parameters:
        value = param
        while len(users[id(value)]) == 1 and is_elementwise(users[id(value)][0][0].opcode) \
                and len(users[id(value)][0][0].operands) == 1:
            value = users[id(value)][0][0]
        dot_needs = [_needs(u)[k] for u, k in users[id(value)]
                     if u.opcode == "dot" and k in _needs(u)]
        if dot_needs:
            out[param.parameter_number] = dot_needs[0]
        elif not fusion.shape.is_tuple and not param.shape.is_tuple \
                and param.shape.dims == fusion.shape.dims:
            out[param.parameter_number] = _Need("same")
    return out


# ---- the choice over values outside fusions

class _Graph:
    """Array values of the computations outside fusions, grouped where control flow ties
    them, with the uses that price their layouts."""

    def __init__(self, comps: list[Computation], model, large_tiles: bool):
        self.model, self.large, self.comps = model, large_tiles, comps
        self.copies: dict = {}              # id(copy) -> its order, once inserted
        self.parent: dict = {}
        self.shape_of: dict = {}            # leaf key -> its array Shape
        self.edges = []                     # (consumer, index, producer leaf key, need)
        self.uses: dict = defaultdict(int)
        self.comp_of: dict = {}
        for comp in comps:
            for inst in comp.instructions:
                self.comp_of[id(inst)] = comp
                for k, leaf in enumerate(_leaves(inst.shape)):
                    self.shape_of[(id(inst), k)] = leaf
                    self.parent[(id(inst), k)] = (id(inst), k)
        for comp in comps:
            for inst in comp.instructions:
                self._tie(inst)
                needs = _needs(inst)
                for i, o in enumerate(inst.operands):
                    for k in range(len(_leaves(o.shape))):
                        self.uses[(id(o), k)] += 1
                    if i in needs and not o.shape.is_tuple and \
                            (o.shape.rank >= 2 or needs[i].kind == "reshape"):
                        self.edges.append((inst, i, (id(o), 0), needs[i]))
        self.groups = defaultdict(list)
        for key in self.parent:
            self.groups[self.find(key)].append(key)
        self.layout = {g: _default(self.shape_of[keys[0]].dims)
                       for g, keys in self.groups.items()}

    # union-find over leaves
    def find(self, key):
        while self.parent[key] != key:
            self.parent[key] = self.parent[self.parent[key]]
            key = self.parent[key]
        return key

    def _union_leaves(self, a: Instruction, b: Instruction, offset: int = 0) -> None:
        """Tie b's leaves to a's leaves starting at `offset`."""
        for k in range(len(_leaves(b.shape))):
            ka, kb = (id(a), offset + k), (id(b), k)
            if ka in self.parent and kb in self.parent:
                self.parent[self.find(ka)] = self.find(kb)

    def _tie(self, inst: Instruction) -> None:
        op = inst.opcode
        if op == "get-tuple-element":
            elems = inst.operands[0].shape.elements
            offset = sum(len(_leaves(e)) for e in elems[:inst.attrs["index"]])
            self._union_leaves(inst.operands[0], inst, offset)
        elif op == "tuple":
            offset = 0
            for o in inst.operands:
                self._union_leaves(inst, o, offset)
                offset += len(_leaves(o.shape))
        elif op == "while":
            body, cond = inst.attrs["body"], inst.attrs["condition"]
            for other in (inst.operands[0], body.parameters[0], body.root,
                          cond.parameters[0]):
                self._union_leaves(inst, other)
        elif op == "call":
            callee = inst.attrs["to_apply"]
            for o, p in zip(inst.operands, callee.parameters):
                self._union_leaves(o, p)
            self._union_leaves(inst, callee.root)
        elif op == "conditional":
            branches = inst.attrs.get("branch_computations") or (
                inst.attrs["true_computation"], inst.attrs["false_computation"])
            for o, branch in zip(inst.operands[1:], branches):
                self._union_leaves(o, branch.parameters[0])
                self._union_leaves(inst, branch.root)

    # pricing
    def bytes_of(self, key, order) -> int:
        s = self.shape_of[key]
        return storage_bytes(s.element_type, s.dims, order, self.large)

    def relayout_ns(self, key, src, dst_key, dst) -> float:
        """A relayout kernel: read the value in `src`, write it in `dst`."""
        return self.model.fused_cost(Work(members=1), self.bytes_of(key, src),
                                     self.bytes_of(dst_key, dst))

    def copy_ns(self, key, src, dst) -> float:
        """A copy before a consumer: its kernel, and the consumer reading the new layout
        where it read the value (that read is already in `held_ns`)."""
        change = self.bytes_of(key, dst) - self.bytes_of(key, src)
        return self.relayout_ns(key, src, key, dst) + change / self.model.machine.bytes_per_ns

    def held_ns(self, group, order) -> float:
        """The group's values written once and read once per use, in whole tiles."""
        ns_per_byte = 1.0 / self.model.machine.bytes_per_ns
        return sum(self.bytes_of(k, order) * (1 + self.uses[k]) * ns_per_byte
                   for k in self.groups[group])

    def edge_ns(self, edge, prod, cons) -> float:
        consumer, _, key, need = edge
        if need.kind == "same":
            return 0.0 if self.free(edge, prod, cons) else self.copy_ns(key, prod, cons)
        if need.kind == "minor":
            return 0.0 if prod[0] in need.dims else \
                self.copy_ns(key, prod, with_minor(prod, need.dims[-1]))
        if need.kind in ("permuted", "reshape"):
            free = self.free(edge, prod, cons)
            return 0.0 if free else self.relayout_ns(key, prod, (id(consumer), 0), cons)
        return 0.0 if prod[0] in need.dims else REDUCE_PREFERENCE_NS

    def free(self, edge, prod, cons) -> bool:
        """Whether a `same`, `permuted` or `reshape` edge moves no data with its producer in
        `prod` and its consumer in `cons` (orders that differ only in where size-1 dims sit
        often hold the same bytes)."""
        consumer, _, key, need = edge
        src = self.shape_of[key]
        if need.kind == "permuted":
            src, prod = consumer.shape, through_transpose(prod, need.dims)
        dst = consumer.shape if need.kind != "same" else src
        return same_memory(src, prod, dst, cons, self.large)

    def carried(self, edge, order, forward: bool):
        """The order across a `same`, `permuted` or `reshape` edge that makes it free, from
        the producer's `order` (forward) or the consumer's; None if there is none."""
        consumer, _, key, need = edge
        if need.kind == "same":
            return order
        if need.kind == "permuted":
            return (through_transpose if forward else back_through_transpose)(order, need.dims)
        src, dst = self.shape_of[key], consumer.shape
        return bitcast_order(src, order, dst, self.large) if forward else \
            bitcast_order(dst, order, src, self.large)

    def _consumer_group(self, edge):
        consumer = edge[0]
        if consumer.shape.is_tuple or consumer.shape.rank < 2:
            return None
        return self.find((id(consumer), 0))

    def consumer_layout(self, edge):
        """The consumer's own layout (None for a tuple-shaped consumer)."""
        group, shape = self._consumer_group(edge), edge[0].shape
        if group is not None:
            return self.layout[group]
        return None if shape.is_tuple else _default(shape.dims)

    # the choice
    def candidates(self) -> dict:
        cands = {g: [self.layout[g]] for g in self.groups}
        for edge in self.edges:
            g, need = self.find(edge[2]), edge[3]
            if need.kind in ("minor", "prefer"):
                option = with_minor(self.layout[g], need.dims[-1])
                dims = self.shape_of[edge[2]].dims
                for o in (option, degenerate_major(option, dims)):
                    if o not in cands[g]:
                        cands[g].append(o)
        for _ in range(4):          # spread along same-layout, transpose and reshape edges
            changed = False
            for edge in self.edges:
                c = self._consumer_group(edge)
                if c is None or edge[3].kind not in ("same", "permuted", "reshape"):
                    continue
                p = self.find(edge[2])
                for src, dst, forward in ((p, c, True), (c, p, False)):
                    for o in list(cands[src]):
                        carried = self.carried(edge, o, forward)
                        if carried is not None and carried not in cands[dst] \
                                and len(cands[dst]) < 8:
                            cands[dst].append(carried)
                            changed = True
            if not changed:
                break
        return cands

    def choose(self) -> None:
        """Iterated conditional modes over units: each group alone, and each chain of groups
        that elementwise ops tie (relaying such a chain out one group at a time would cost a
        copy at every step, so it moves as a whole too)."""
        cands = self.candidates()
        touching = defaultdict(list)
        chain = {g: g for g in self.groups}

        def root(g):
            while chain[g] != g:
                g = chain[g]
            return g
        for edge in self.edges:
            p, c = self.find(edge[2]), self._consumer_group(edge)
            touching[p].append(edge)
            if c is not None and c != p:
                touching[c].append(edge)
                if edge[3].kind == "same":
                    chain[root(p)] = root(c)
        chains = defaultdict(list)
        for g in self.groups:
            chains[root(g)].append(g)
        units = [[g] for g in self.groups] + [c for c in chains.values() if len(c) > 1]
        for _ in range(8):
            changed = False
            for unit in units:
                options = cands[unit[0]]
                if len(options) < 2:
                    continue
                edges = list({id(e): e for g in unit for e in touching[g]}.values())
                current = self._cost_with(unit, None, edges)
                costs = {o: self._cost_with(unit, o, edges) for o in options}
                best = min(options, key=costs.__getitem__)
                if costs[best] < current:
                    for g in unit:
                        self.layout[g] = best
                    changed = True
            if not changed:
                return

    def _cost_with(self, unit, order, edges) -> float:
        """The unit's held values and the edges touching it, with the unit in `order`
        (None: as it is)."""
        saved = [self.layout[g] for g in unit]
        if order is not None:
            for g in unit:
                self.layout[g] = order
        total = sum(self.held_ns(g, self.layout[g]) for g in unit)
        for edge in edges:
            total += self.edge_ns(edge, self.layout[self.find(edge[2])],
                                  self.consumer_layout(edge))
        for g, o in zip(unit, saved):
            self.layout[g] = o
        return total

    # the result
    def insert_copies(self) -> None:
        """A copy to the layout a consumer needs, where its operand's layout is not it
        (one per value and layout, shared by the consumers in one computation)."""
        made: dict = {}
        for edge in self.edges:
            consumer, index, key, need = edge
            prod = self.layout[self.find(key)]
            if need.kind == "same":
                target = self.consumer_layout(edge)
                if self.free(edge, prod, target):
                    continue
            elif need.kind == "minor" and prod[0] not in need.dims:
                target = with_minor(prod, need.dims[-1])
            else:
                continue
            if target == prod:
                continue
            comp = self.comp_of[id(consumer)]
            operand = consumer.operands[index]
            cache = (id(comp), id(operand), target)
            if cache not in made:
                made[cache] = Instruction(comp.unique_name(f"{operand.name}.relayout"), "copy",
                                          tiled(operand.shape, target, self.large), [operand])
                comp.instructions.insert(comp.instructions.index(consumer), made[cache])
                self.copies[id(made[cache])] = target
            consumer.operands[index] = made[cache]

    def apply(self) -> None:
        for comp in self.comps:
            for inst in comp.instructions:
                if id(inst) in self.copies:
                    continue
                orders = [self.layout[self.find((id(inst), k))]
                          for k in range(len(_leaves(inst.shape)))]
                inst.shape = _relaid(inst.shape, orders, self.large)


# ---- inside fusions

def _lay_out_fused(fusion: Instruction, large_tiles: bool) -> None:
    """A fused computation's parameters take its operands' layouts, its outputs the fusion's;
    values in between follow their operands (elementwise, transpose, reduce) or default."""
    body: Computation = fusion.attrs["calls"]
    order_of: dict[int, tuple[int, ...]] = {}
    for inst in body.instructions:
        if inst.opcode == "parameter":
            inst.shape = fusion.operands[inst.parameter_number].shape
        elif inst.shape.is_tuple:
            inst.shape = _relaid(inst.shape, [_default(s.dims) for s in inst.shape.leaves()],
                                 large_tiles)
        elif inst.shape.dtype.is_array:
            inst.shape = tiled(inst.shape, _derived_order(inst, order_of, large_tiles), large_tiles)
        if not inst.shape.is_tuple:
            order_of[id(inst)] = inst.shape.minor_to_major
    outputs = body.root.operands if body.root.opcode == "tuple" else [body.root]
    for out, leaf in zip(outputs, _leaves(fusion.shape)):
        if out.opcode != "parameter" and not out.shape.is_tuple:
            out.shape = leaf
    if body.root.opcode == "tuple":
        body.root.shape = fusion.shape
    for inst in body.instructions:
        if inst.opcode == "fusion":
            _lay_out_fused(inst, large_tiles)


def _derived_order(inst: Instruction, order_of: dict, large_tiles: bool) -> tuple[int, ...]:
    arrays = [o for o in inst.operands if not o.shape.is_tuple and id(o) in order_of]
    if is_elementwise(inst.opcode) or inst.opcode == "copy":
        for o in arrays:
            if o.shape.dims == inst.shape.dims:
                return order_of[id(o)]
    if inst.opcode == "transpose" and arrays:
        return through_transpose(order_of[id(arrays[0])], tuple(inst.attrs["dimensions"]))
    if inst.opcode == "reduce" and arrays:
        removed = set(inst.attrs["dimensions"])
        kept = [d for d in order_of[id(arrays[0])] if d not in removed]
        renumber = {d: i for i, d in enumerate(sorted(kept))}
        return tuple(renumber[d] for d in kept)
    if inst.opcode == "reshape" and arrays:
        order = bitcast_order(arrays[0].shape, order_of[id(arrays[0])], inst.shape, large_tiles)
        if order is not None:
            return order
    return _default(inst.shape.dims)
