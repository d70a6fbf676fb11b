"""Kernel formation: which instructions are computed together in one loop nest.

Until our optimizer's fusion decisions reach the lowering, an unfused module gets this small
built-in grouping (a module that already has `fusion` instructions keeps them: each fusion is
one kernel, every other instruction another, and nothing is grouped; see `grouping`).
Walking from the results towards the inputs:

* every instruction that must exist in memory starts a group: results of the computation,
  operands of host-level ops (tuple, while, conditional, ...), and ops with their own loop
  structure (dot, convolution, reduce, scatter, sort, ...);
* an elemental producer (elementwise, broadcast, reshape, transpose, slice, pad, iota, ...)
  joins its users' group when all its users are in that one group, so it is computed inline
  per element and never stored; reductions take their producers this way (XLA's input
  fusion), dots and convolutions take only data movement and converts (read while packing);
* an expensive producer (exp, divide, ...) that its group would read more than once per
  element (through a broadcast, a window, ...) is stored instead of recomputed;
* cheap index-only producers (scalar constants, iota, broadcast, reshape, transpose, slice)
  used by several groups are duplicated into each.

The same partition runs inside a fused computation, where its groups become the kernel's
phases: a reduce whose result a loop fusion broadcasts is computed first into a temporary.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..ir import Computation, Instruction
from ..ops import EXPENSIVE_ELEMENTWISE, HOST_OPS, VIEWS, is_elementwise
from ..shape import TupleShape

# Ops computed inline at an output index by elemental.py / emit_reduce.py / emit_gather.py.
ELEMENTAL = frozenset("""broadcast reshape bitcast transpose slice pad concatenate reverse iota
copy dynamic-slice dynamic-update-slice gather map reduce-window constant fft""".split())
# Ops with their own loop structure: always the root of a group.
ROOT_ONLY = frozenset("""dot convolution reduce scatter sort select-and-scatter fusion
rng-bit-generator topk custom-call""".split())
# Index-only ops cheap enough to duplicate into every group that reads them.
DUPLICABLE = frozenset("broadcast reshape bitcast transpose slice reverse iota copy".split())
# Ops worth storing rather than recomputing when a group reads them more than once each.
EXPENSIVE = EXPENSIVE_ELEMENTWISE | {"reduce", "reduce-window", "map", "dot", "convolution",
                                     "gather", "fft"}
# What each kind of group root lets its producers be.
_DOT_PRODUCERS = frozenset("""broadcast reshape bitcast transpose slice reverse copy convert
constant iota""".split())


@dataclass
class Group:
    """One kernel (or phase): `root` is stored; `members` (root included) are computed
    inline. `reads[id]` counts how often the group evaluates one element of a member."""
    root: Instruction
    members: list[Instruction] = field(default_factory=list)
    reads: dict[int, float] = field(default_factory=dict)
    fallback: str | None = None      # why the root cannot be lowered (run by the interpreter)
    siblings: list["Group"] = field(default_factory=list)   # more results of one loop

    @property
    def roots(self) -> list[Instruction]:
        return [self.root] + [s.root for s in self.siblings]

    def all_members(self) -> list[Instruction]:
        seen, out = set(), []
        for g in [self] + self.siblings:
            for m in g.members:
                if id(m) not in seen:
                    seen.add(id(m))
                    out.append(m)
        return out

    def inputs(self) -> list[Instruction]:
        """Operands read from memory: not computed in the group, in first-use order."""
        members = self.all_members()
        inside = {id(m) for m in members}
        seen, out = set(), []
        for m in members:
            for op in m.operands:
                if id(op) not in inside and id(op) not in seen:
                    seen.add(id(op))
                    out.append(op)
        return out


def is_scalar_constant(inst: Instruction) -> bool:
    return inst.opcode == "constant" and not inst.shape.is_tuple and inst.shape.rank == 0


def fusible(inst: Instruction) -> bool:
    if inst.opcode == "constant":
        return is_scalar_constant(inst)
    return is_elementwise(inst.opcode) or inst.opcode in ELEMENTAL


def partition(comp: Computation, lowerable, *, fused: bool = False,
              grouping: bool = True) -> list[Group]:
    """Groups of `comp` in an order where every group's inputs come before it.

    `lowerable(inst)` says whether an op can be emitted at all; one that cannot becomes a
    group of its own (the caller runs it through the interpreter). With `fused`, the
    computation is a fusion body: its parameters are the kernel's inputs. Without
    `grouping` (a module that has its own fusion decisions) every instruction is a group of
    its own, scalar constants aside (they are immediates of their users)."""
    order = comp.post_order()
    users: dict[int, list[Instruction]] = {id(i): [] for i in order}
    for inst in order:
        for op in inst.operands:
            users[id(op)].append(inst)
    groups: list[Group] = []
    owners: dict[int, list[Group]] = {}          # id(inst) -> groups computing it inline
    for inst in reversed(order):
        if inst.opcode in HOST_OPS or (inst.opcode == "constant" and not is_scalar_constant(inst)):
            continue
        if inst.opcode == "constant" and inst is not comp.root and users[id(inst)] and all(
                id(u) in owners and not any(g.fallback for g in owners[id(u)])
                for u in users[id(inst)]):
            _join(inst, {id(g): g for u in users[id(inst)] for g in owners[id(u)]}.values(),
                  owners, users[id(inst)])
            continue
        reason = lowerable(inst)
        target = None if reason or not grouping else _fusion_target(inst, comp,
                                                                    users[id(inst)], owners)
        if target:
            _join(inst, target, owners, users[id(inst)])
        else:
            g = Group(inst, [inst], {id(inst): 1.0}, reason)
            groups.append(g)
            owners[id(inst)] = [g]
    groups.reverse()
    return groups if fused or not grouping else _merge_results(groups, comp, users)


MAX_SIBLINGS = 8
_NOT_MERGED = VIEWS | {"constant", "copy"}   # buffers, not loops


def _merge_results(groups: list[Group], comp: Computation, users) -> list[Group]:
    """Loop groups whose roots only the computation's result tuple reads, and that have the
    same shape, become one group with several results (XLA's multi-output loop fusion): one
    loop over the index space instead of several, one kernel instead of several. Nothing
    else reads them, so computing them all once the last one's inputs exist is safe."""
    root = comp.root
    if root.opcode != "tuple":
        return groups
    leads: dict[tuple, Group] = {}
    merged = []
    for g in groups:
        r = g.root
        if g.fallback is None and r.opcode not in ROOT_ONLY and r.opcode not in _NOT_MERGED \
                and not r.shape.is_tuple and users[id(r)] and all(u is root for u in users[id(r)]):
            lead = leads.get(r.shape.dims)
            if lead is not None and len(lead.siblings) < MAX_SIBLINGS - 1:
                lead.siblings.append(g)
                continue
            leads[r.shape.dims] = g
        merged.append(g)
    return merged


def _fusion_target(inst, comp, inst_users, owners) -> list[Group] | None:
    """The groups `inst` should be computed in, or None if it must be stored."""
    if inst is comp.root or not inst_users or not fusible(inst):
        return None
    if any(id(u) not in owners for u in inst_users):
        return None                        # a host op or a stored, non-fused user reads it
    groups = {id(g): g for u in inst_users for g in owners[id(u)]}
    if len(groups) > 1 and inst.opcode not in DUPLICABLE:
        return None
    for g in groups.values():
        if g.fallback or not _accepts(g.root, inst):
            return None
        if inst.opcode in EXPENSIVE and _reads(inst, g, inst_users) > 1.0:
            return None
    return list(groups.values())


def _accepts(root: Instruction, producer: Instruction) -> bool:
    if root.opcode in ("dot", "convolution"):
        return producer.opcode in _DOT_PRODUCERS
    if root.opcode in ("scatter", "sort", "select-and-scatter", "fusion", "rng-bit-generator",
                       "topk", "custom-call"):
        return False
    return True


def _reads(inst, g: Group, inst_users) -> float:
    """Evaluations per element of `inst` if computed in `g`: the sum over its users in g of
    the user's own count times how often the user reads each operand element."""
    total = 0.0
    for u in {id(u): u for u in inst_users}.values():
        if id(u) in g.reads:
            total += g.reads[id(u)] * sum(reuse(u, k) for k, op in enumerate(u.operands)
                                          if op is inst)
    return total


def reuse(user: Instruction, k: int) -> float:
    """How many times `user` reads each element of operand k, on average."""
    op = user.operands[k]
    if op.shape.is_tuple or user.shape.is_tuple:
        return 1.0
    n_in, n_out = max(op.shape.num_elements, 1), user.shape.num_elements
    if user.opcode in ("broadcast", "gather", "reduce-window", "pad", "concatenate",
                       "dynamic-update-slice") or is_elementwise(user.opcode):
        return max(n_out / n_in, 1.0) if user.opcode != "dynamic-update-slice" or k == 0 \
            else 1.0
    if user.opcode == "dot":
        return float(math.prod(user.shape.dims) / n_in) if n_in else 1.0
    return 1.0


def _join(inst, groups, owners, inst_users) -> None:
    groups = list(groups)
    for g in groups:
        g.members.append(inst)
        g.reads[id(inst)] = _reads(inst, g, inst_users)
    owners[id(inst)] = groups


def group_computation(group: Group, order_of: dict[int, int], name: str) -> Computation:
    """The group as a computation of its own: one parameter per input (in first-use order),
    the members cloned in the original post order, the root as root (a tuple of the roots
    when it has siblings). This is what a fused computation of XLA looks like, so both are
    emitted by the same code."""
    inputs = group.inputs()
    mapping: dict[int, Instruction] = {}
    instructions: list[Instruction] = []
    for n, inp in enumerate(inputs):
        p = Instruction(f"p{n}.{inp.name}", "parameter", inp.shape, parameter_number=n)
        mapping[id(inp)] = p
        instructions.append(p)
    for m in sorted(group.all_members(), key=lambda m: order_of[id(m)]):
        clone = Instruction(m.name, m.opcode, m.shape, [mapping[id(o)] for o in m.operands],
                            dict(m.attrs), literal=m.literal, line=m.line, column=m.column)
        mapping[id(m)] = clone
        instructions.append(clone)
    root = mapping[id(group.root)]
    if group.siblings:
        parts = [mapping[id(r)] for r in group.roots]
        root = Instruction(f"{name}.results", "tuple", TupleShape(tuple(p.shape for p in parts)),
                           parts)
        instructions.append(root)
    return Computation(name, instructions, root)
