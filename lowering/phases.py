"""Phases of a kernel: which instructions of a fused computation are stored, and which the
loops reading them compute inline.

The fusion stage (hlo_opt.fusion) decides what one kernel computes; this decides how the
kernel runs it, one loop structure at a time. Walking from the results towards the inputs:

* every instruction that must exist in memory is the root of a phase: the results, and the
  ops with loop structures of their own (not `ops.per_element`: dot, convolution, reduce,
  scatter, sort, ...). A reduce whose result a loop broadcasts is computed first, into a
  temporary;
* a per-element producer joins its users' phase when all its users are in that one phase,
  so it is computed inline per element and never stored. A loop (a per-element root)
  computes any; a root with its own loop structure computes what the fusion declarations
  let it hold (`may_fuse`): a reduce its elementwise producers (`input_reduce`), a GEMM what
  it reads while packing its operands (`dot_operands`);
* an expensive producer (`ops.EXPENSIVE_PER_ELEMENT`) that its phase would evaluate more
  than once per element (through a broadcast, a window, ...), or one element at a time in
  order (a reduce with a reducer of several ops, such as an argmax), is stored instead: a
  loop phase computes it first, vectorized;
* index-only producers (`ops.INDEX_ONLY`) that several phases read are duplicated into each;
* with `epilogues` (the CPU's kernels), a dot or convolution whose only readers are one loop
  phase, all reading it at that phase's own index through elementwise ops, joins that phase
  as its `gemm`: the GEMM computes the loop's root per element as it writes its final tiles
  (its epilogue: bias, activation, convert, residual), so nothing is stored in between.

A computation outside fusions is already cut into kernels: each of its instructions is a
kernel of its own (`kernels`). Scalar constants are immediates of their users either way.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from ..fusion.policy import FusionPolicy
from ..fusion.stage import default_policy
from ..ir import Computation, Instruction
from ..ops import EXPENSIVE_PER_ELEMENT, HOST_OPS, INDEX_ONLY, is_elementwise, per_element
from ..shape import TupleShape

Lowerable = Callable[[Instruction], "str | None"]


@dataclass
class Phase:
    """One loop structure: `root` is stored, `members` (root included) are computed inline.
    `reads[id]` counts how often the phase evaluates one element of a member."""
    root: Instruction
    members: list[Instruction] = field(default_factory=list)
    reads: dict[int, float] = field(default_factory=dict)
    fallback: str | None = None      # why the root cannot be lowered (run by the interpreter)
    gemm: Instruction | None = None  # a dot/convolution member whose epilogue the root is

    @property
    def hero(self) -> Instruction:
        """The member whose loop structure the phase runs."""
        return self.gemm or self.root

    def inputs(self) -> list[Instruction]:
        return inputs_of([self])


def inputs_of(phases: list[Phase]) -> list[Instruction]:
    """Operands the phases read from memory: computed in none of them, in first-use order."""
    members = _members(phases)
    inside = {id(m) for m in members}
    seen, out = set(), []
    for m in members:
        for op in m.operands:
            if id(op) not in inside and id(op) not in seen:
                seen.add(id(op))
                out.append(op)
    return out


def _members(phases: list[Phase]) -> list[Instruction]:
    seen, out = set(), []
    for p in phases:
        for m in p.members:
            if id(m) not in seen:
                seen.add(id(m))
                out.append(m)
    return out


def is_scalar_constant(inst: Instruction) -> bool:
    return inst.opcode == "constant" and not inst.shape.is_tuple and inst.shape.rank == 0


def split(comp: Computation, lowerable: Lowerable, epilogues: bool = False) -> list[Phase]:
    """The phases of a fused computation (its parameters are the kernel's inputs), in an
    order where every phase's inputs come before it. `lowerable(inst)` says why an op cannot
    be emitted (None if it can); such an op is a phase of its own, marked `fallback`.
    `epilogues`: a GEMM may take the loop that reads it as its epilogue (see above)."""
    policy = default_policy("cpu")

    def inline_in(inst, users, owners):
        target = _inline_in(inst, comp, users, owners, policy)
        if target is None and epilogues:
            target = _epilogue_of(inst, comp, users, owners)
            if target:
                target[0].gemm = inst
        return target
    return _walk(comp, lowerable, inline_in)


def kernels(comp: Computation, lowerable: Lowerable) -> list[Phase]:
    """Each instruction of a computation whose kernels are formed (fusions, and single
    instructions between them) as a kernel of its own, in order."""
    return _walk(comp, lowerable, lambda inst, users, owners: None)


def _walk(comp: Computation, lowerable: Lowerable, inline_in) -> list[Phase]:
    """Phases from the root towards the inputs: an instruction joins the phases
    `inline_in(inst, users, owners)` names, or is stored as a phase of its own."""
    order = comp.post_order()
    users: dict[int, list[Instruction]] = {id(i): [] for i in order}
    for inst in order:
        for op in inst.operands:
            users[id(op)].append(inst)
    phases: list[Phase] = []
    owners: dict[int, list[Phase]] = {}          # id(inst) -> phases computing it inline
    for inst in reversed(order):
        if inst.opcode in HOST_OPS or (inst.opcode == "constant" and not is_scalar_constant(inst)):
            continue
        if inst.opcode == "constant" and inst is not comp.root and users[id(inst)] and all(
                id(u) in owners and not any(p.fallback for p in owners[id(u)])
                for u in users[id(inst)]):
            _join(inst, {id(p): p for u in users[id(inst)] for p in owners[id(u)]}.values(),
                  owners, users[id(inst)])
            continue
        reason = lowerable(inst)
        target = None if reason else inline_in(inst, users[id(inst)], owners)
        if target:
            _join(inst, target, owners, users[id(inst)])
        else:
            p = Phase(inst, [inst], {id(inst): 1.0}, reason)
            phases.append(p)
            owners[id(inst)] = [p]
    phases.reverse()
    return phases


def _inline_in(inst, comp, inst_users, owners, policy: FusionPolicy) -> list[Phase] | None:
    """The phases that compute `inst` inline, or None if it must be stored."""
    if inst is comp.root or not inst_users or not per_element(inst.opcode):
        return None
    if any(id(u) not in owners for u in inst_users):
        return None                        # a host op or a stored, non-fused user reads it
    phases = {id(p): p for u in inst_users for p in owners[id(u)]}
    if len(phases) > 1 and inst.opcode not in INDEX_ONLY:
        return None
    n_users = len({id(u) for u in inst_users})
    for p in phases.values():
        hero = _deciding(p, inst_users)
        if p.fallback or not (per_element(hero.opcode) or policy.may_fuse(hero, inst, n_users)):
            return None
        if inst.opcode in EXPENSIVE_PER_ELEMENT and (_reads(inst, p, inst_users) > 1.0
                                                    or _in_order(p.root)):
            return None
    return list(phases.values())


GEMMS = ("dot", "convolution")


def _epilogue_of(inst, comp, inst_users, owners) -> list[Phase] | None:
    """[the loop phase whose root is computed from `inst`'s value at each of its positions,
    elementwise], when `inst` is a GEMM that phase alone reads; else None."""
    if inst.opcode not in GEMMS or inst is comp.root or inst.shape.is_tuple or not inst_users \
            or any(id(u) not in owners for u in inst_users):
        return None
    phases = {id(p): p for u in inst_users for p in owners[id(u)]}
    if len(phases) != 1:
        return None
    [p] = phases.values()
    if p.fallback or p.gemm or not per_element(p.root.opcode) or p.root.shape.is_tuple:
        return None
    reading = {id(inst)}
    for m in reversed(p.members):                      # producers before their users
        if any(id(o) in reading for o in m.operands):
            if not is_elementwise(m.opcode) or m.shape.dims != inst.shape.dims:
                return None
            reading.add(id(m))
    return [p]


def _deciding(p: Phase, inst_users) -> Instruction:
    """Whose fusion declarations say whether `p` may compute a producer read by
    `inst_users`: the GEMM's (`dot_operands`) when the producer feeds its operands, else
    the root's."""
    if p.gemm is None:
        return p.root
    side, members = {id(p.gemm)}, {id(m): m for m in p.members}
    stack = [p.gemm]
    while stack:
        for o in stack.pop().operands:
            if id(o) in members and id(o) not in side:
                side.add(id(o))
                stack.append(o)
    return p.gemm if any(id(u) in side for u in inst_users) else p.root


def _in_order(root: Instruction) -> bool:
    """A reduce whose reducer is not one associative op (an argmax) folds its elements one
    at a time, in order: what it computes inline runs at scalar speed, not vectorized."""
    from .emit_reduce import simple_reducer        # emit_reduce's import chain reaches here
    return root.opcode == "reduce" and simple_reducer(root.attrs["to_apply"]) is None


def _reads(inst, p: Phase, inst_users) -> float:
    """Evaluations per element of `inst` if computed in `p`: the sum over its users in p of
    the user's own count times how often the user reads each operand element."""
    total = 0.0
    for u in {id(u): u for u in inst_users}.values():
        if id(u) in p.reads:
            total += p.reads[id(u)] * sum(reuse(u, k) for k, op in enumerate(u.operands)
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


def _join(inst, phases, owners, inst_users) -> None:
    phases = list(phases)
    for p in phases:
        p.members.append(inst)
        p.reads[id(inst)] = _reads(inst, p, inst_users)
    owners[id(inst)] = phases


def computation(phases: list[Phase], order_of: dict[int, int], name: str) -> Computation:
    """Phases as a computation of their own: one parameter per input (in first-use order),
    the members cloned in the original post order, the root as root (a tuple of the roots
    when there are several). This is what a fused computation looks like, so both are
    emitted by the same code."""
    mapping: dict[int, Instruction] = {}
    instructions: list[Instruction] = []
    for n, inp in enumerate(inputs_of(phases)):
        p = Instruction(f"p{n}.{inp.name}", "parameter", inp.shape, parameter_number=n)
        mapping[id(inp)] = p
        instructions.append(p)
    for m in sorted(_members(phases), key=lambda m: order_of[id(m)]):
        clone = Instruction(m.name, m.opcode, m.shape, [mapping[id(o)] for o in m.operands],
                            dict(m.attrs), literal=m.literal, line=m.line, column=m.column)
        mapping[id(m)] = clone
        instructions.append(clone)
    roots = [mapping[id(p.root)] for p in phases]
    root = roots[0]
    if len(roots) > 1:
        root = Instruction(f"{name}.results", "tuple", TupleShape(tuple(r.shape for r in roots)),
                           roots)
        instructions.append(root)
    return Computation(name, instructions, root)
