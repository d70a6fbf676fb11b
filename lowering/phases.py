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
  than once per element (through a broadcast, a window, ...; users reading it at their own
  index share one evaluation: the elemental generator caches values per index), or one
  element at a time in order (a reduce with a reducer of several ops, such as an argmax),
  is stored instead: a loop phase computes it first, vectorized;
* index-only producers (`ops.INDEX_ONLY`) that several phases read are duplicated into each,
  and so are producers that loop phases over one index space read (the kernel runs those as
  one loop, which computes a shared value once per index; the rule above still applies per
  phase); a cheap result such loops read is computed inline by them as well as stored;
* with `tees`, a result that a reduce reads as its input (nothing else reading it) is
  stored by the reduce's phase as the reduce reads it: one pass instead of two.
* with `epilogues` (the CPU's kernels), a dot or convolution whose only readers are one loop
  phase, all reading it at that phase's own index through elementwise ops (or a rank-2
  dot's, all transposed: the GEMM then computes the transposed product), joins that phase
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
from ..dot_dims import dot_dims
from ..ir import Computation, Instruction, post_order
from ..ops import EXPENSIVE_PER_ELEMENT, HOST_OPS, INDEX_ONLY, is_elementwise, per_element
from ..shape import TupleShape

Lowerable = Callable[[Instruction], "str | None"]


@dataclass
class Phase:
    """One loop structure: `root` is stored, `members` (root included) are computed inline.
    `reads[id]` counts how often the phase evaluates one element of a member. `tees`:
    members it stores too, where it computes them (a reduce's input that is also a result
    of the kernel, stored as the reduce reads it)."""
    root: Instruction
    members: list[Instruction] = field(default_factory=list)
    reads: dict[int, float] = field(default_factory=dict)
    fallback: str | None = None      # why the root cannot be lowered (run by the interpreter)
    gemm: Instruction | None = None  # a dot/convolution member whose epilogue the root is
    tees: list[Instruction] = field(default_factory=list)

    @property
    def hero(self) -> Instruction:
        """The member whose loop structure the phase runs."""
        return self.gemm or self.root

    def inputs(self) -> list[Instruction]:
        return inputs_of([self])

    def stored(self) -> list[Instruction]:
        """What the phase writes to memory: its root, then its tees."""
        return [self.root, *self.tees]


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


def split(comp: Computation, lowerable: Lowerable, epilogues: bool = False,
          tees: bool = False) -> list[Phase]:
    """The phases of a fused computation (its parameters are the kernel's inputs), in an
    order where every phase's inputs come before it. `lowerable(inst)` says why an op cannot
    be emitted (None if it can); such an op is a phase of its own, marked `fallback`.
    `epilogues`: a GEMM may take the loop that reads it as its epilogue (see above).
    `tees`: a result that a reduce reads as its input is stored by the reduce's phase as it
    reads it (the emitter must store Phase.tees), not by a loop of its own."""
    policy = default_policy("cpu")

    def inline_in(inst, users, owners):
        target = _inline_in(inst, comp, users, owners, policy)
        if target is None and epilogues:
            target = _epilogue_of(inst, comp, users, owners)
            if target:
                target[0].gemm = inst
        return target

    def stored_by(inst, users, owners):
        tee = _tee_in(inst, comp, users, owners, policy) if tees else None
        return tee, [] if tee else _recomputed_in(inst, users[id(inst)], owners)
    return _walk(comp, lowerable, inline_in, stored_by)


def kernels(comp: Computation, lowerable: Lowerable) -> list[Phase]:
    """Each instruction of a computation whose kernels are formed (fusions, and single
    instructions between them) as a kernel of its own, in order."""
    return _walk(comp, lowerable, lambda inst, users, owners: None)


def _walk(comp: Computation, lowerable: Lowerable, inline_in, stored_by=None) -> list[Phase]:
    """Phases from the root towards the inputs: an instruction joins the phases
    `inline_in(inst, users, owners)` names, or is stored. `stored_by(inst, users, owners)`
    (`users`: of every instruction) names the phase storing it as a tee, if one does (else
    it is the root of a phase of its own), and the phases that compute it inline besides."""
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
            continue
        tee, also = stored_by(inst, users, owners) if stored_by and not reason else (None, [])
        if tee:
            tee.tees.append(inst)
            home = tee
        else:
            home = Phase(inst, [], {}, reason)
            phases.append(home)
        _join(inst, [home] + also, owners, users[id(inst)])
    phases.reverse()
    return phases


def _inline_in(inst, comp, inst_users, owners, policy: FusionPolicy) -> list[Phase] | None:
    """The phases that compute `inst` inline, or None if it must be stored."""
    if inst is comp.root or not inst_users or not per_element(inst.opcode):
        return None
    if any(id(u) not in owners for u in inst_users):
        return None                        # a host op or a stored, non-fused user reads it
    phases = {id(p): p for u in inst_users for p in owners[id(u)]}
    if len(phases) > 1 and inst.opcode not in INDEX_ONLY and not _one_loop(phases.values()):
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
    if epilogue_transposes(inst, p.root) is None:
        return None
    return [p]


def epilogue_transposes(gemm: Instruction, root: Instruction) -> bool | None:
    """Whether the members reading `gemm` (its epilogue, computing `root`) read it
    transposed: every path to the root runs through elementwise ops and, on every path
    alike, at most one transpose of a rank-2 dot's rows and columns (an SGD update
    W - lr * (x^T dy)^T, where the GEMM computes the transposed product instead and writes
    it in order). None where they read it neither at one index nor transposed throughout."""
    flipped = {id(gemm): False}
    for m in post_order([root], lambda i: () if i is gemm else i.operands, id):
        read = {flipped[id(o)] for o in m.operands if id(o) in flipped}
        if not read:
            continue
        if len(read) > 1:
            return None
        [turned] = read
        if m.opcode == "transpose" and gemm.opcode == "dot" and not turned and \
                gemm.shape.rank == 2 and tuple(m.attrs["dimensions"]) == (1, 0) \
                and not dot_dims(gemm.attrs, *(o.shape.rank for o in gemm.operands))[0][0]:
            turned = True
        elif not is_elementwise(m.opcode) or \
                m.shape.dims != (gemm.shape.dims[::-1] if turned else gemm.shape.dims):
            return None
        flipped[id(m)] = turned
    return flipped.get(id(root))


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


def _tee_in(inst, comp, users, owners, policy: FusionPolicy) -> Phase | None:
    """The reduce phase that can store `inst` while it reads it: `inst` is a result of the
    kernel that, besides, only one reduce's phase reads, at the index where the reduce reads
    its input (as that input, or through elementwise ops to it). The reduce reads every
    element once, so it computes and stores the result in the same pass (a softmax's exp,
    stored and summed per row) instead of a loop writing it and the reduce reading it back."""
    mine = users[id(inst)]
    owned = [u for u in mine if id(u) in owners]
    if inst is comp.root or not per_element(inst.opcode) or not owned or \
            any(id(u) not in owners and u is not comp.root for u in mine):
        return None
    p = owners[id(owned[0])][0]
    reduce = p.root
    if reduce.opcode != "reduce" or p.fallback or _in_order(reduce) or \
            inst.shape.dims != reduce.operands[0].shape.dims or \
            not policy.may_fuse(reduce, inst, len(owned)):
        return None
    inits = reduce.operands[len(reduce.operands) // 2:]
    stack, seen = [inst], set()
    while stack:                # every path from inst to the reduce keeps the index
        v = stack.pop()
        for u in users[id(v)]:
            if u is comp.root or (u is reduce and not any(op is v for op in inits)):
                continue
            if u is reduce or owners.get(id(u)) != [p] or not all(
                    _at_same_index(u, k) for k, op in enumerate(u.operands) if op is v):
                return None
            if id(u) not in seen:
                seen.add(id(u))
                stack.append(u)
    return p


def _recomputed_in(inst, inst_users, owners) -> list[Phase]:
    """The loop phases reading `inst`, a stored result, that compute it inline instead: a
    cheap per-element value read by loops over its own index space, which run as one loop
    with its own phase (its loads would cost as much as computing it). Other phases read
    it from memory."""
    if not per_element(inst.opcode) or inst.opcode in EXPENSIVE_PER_ELEMENT:
        return []
    phases = {id(p): p for u in inst_users if id(u) in owners for p in owners[id(u)]}
    return [p for p in phases.values() if not p.fallback and per_element(p.hero.opcode)
            and _dims(p.root) == inst.shape.dims]


def _one_loop(phases) -> bool:
    """Loop phases over one index space, which the kernel runs as one loop storing every
    root (emit_kernel.plan_steps): a value they share is computed once per index there,
    as within one phase."""
    dims = {_dims(p.root) for p in phases}
    return len(dims) == 1 and all(per_element(p.hero.opcode) for p in phases)


def _dims(inst: Instruction) -> tuple:
    return (inst.shape.leaves()[0] if inst.shape.is_tuple else inst.shape).dims


def _in_order(root: Instruction) -> bool:
    """A reduce whose reducer is not one associative op (an argmax) folds its elements one
    at a time, in order: what it computes inline runs at scalar speed, not vectorized."""
    from .emit_reduce import simple_reducer        # emit_reduce's import chain reaches here
    return root.opcode == "reduce" and simple_reducer(root.attrs["to_apply"]) is None


def _reads(inst, p: Phase, inst_users) -> float:
    """Evaluations per element of `inst` if computed in `p`. The elemental generator caches
    a value per instruction and index, so the users reading `inst` at their own index (an
    elementwise op of its shape, however many operands name it) share one evaluation: they
    count as the most any of them is evaluated. Users reading it elsewhere (a broadcast, a
    window, a dot, a transpose...) add their own count times how often they read each
    element."""
    same, other = 0.0, 0.0
    for u in {id(u): u for u in inst_users}.values():
        if id(u) not in p.reads:
            continue
        for k, op in enumerate(u.operands):
            if op is not inst:
                continue
            if _at_same_index(u, k):
                same = max(same, p.reads[id(u)])
            else:
                other += p.reads[id(u)] * reuse(u, k)
    return same + other


def _at_same_index(user: Instruction, k: int) -> bool:
    """Does `user` read operand k's element at its own index?"""
    op = user.operands[k]
    return is_elementwise(user.opcode) and not op.shape.is_tuple and \
        not user.shape.is_tuple and op.shape.dims == user.shape.dims


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
        p.reads[id(inst)] = 1.0 if p.root is inst else _reads(inst, p, inst_users)
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
    roots = [mapping[id(r)] for p in phases for r in p.stored()]
    root = roots[0]
    if len(roots) > 1:
        root = Instruction(f"{name}.results", "tuple", TupleShape(tuple(r.shape for r in roots)),
                           roots)
        instructions.append(root)
    return Computation(name, instructions, root)
