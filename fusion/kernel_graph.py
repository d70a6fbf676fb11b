"""The kernels of one computation while fusion merges them, and the graph between them.

A kernel carries what pricing a merge needs: its members' summed work, the values it reads
and writes with their bytes, its loop nests. Merges grow the larger kernel in place, so
pricing or applying one costs about the smaller side and the kernels' boundaries, not the
kernel built so far.

A merge that would let a kernel depend on itself through other kernels is refused, so the
kernel graph stays acyclic. The check is exact and searches little: kernels are kept in a
topological order (topo_order.py), so merging two kernels can only close a cycle through
kernels ordered between them, and when it closes none, only those are re-ordered. A `dup`
never closes one: every reader of the producer takes a copy, and keeps its place. Scalar
constants are copied into every kernel that uses them.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Iterable, Sequence

from ..ir import Computation, Instruction, post_order
from ..ops import NOT_KERNELS, SIBLING_HEROES, VIEWS
from ..targets import CostModel, KernelView, Work
from ..targets.work import bytes_read, read_share
from .policy import loop_nest
from .topo_order import merge_moves, reorder

SIBLING_MIN_BYTES = 1024        # sharing a smaller input is not worth a multi-output kernel
SELECTIVE_MIN_BYTES = 1 << 16   # selecting from a smaller operand saves too little to price


@dataclass(eq=False, slots=True)
class Kernel:
    """Instructions computed together, and what pricing their merges needs. Kernels are
    compared by identity; `serial` is renewed whenever its members change, so what was
    learnt or queued about it before is recognizably out of date."""
    serial: int                 # also orders kernels deterministically (newest last)
    order: int                  # its place in a topological order of the kernel graph
    inside: set[int]            # member positions
    inputs: set[int]            # values it reads (free constants are copied in, not read)
    outputs: set[int]           # members it writes: read by another kernel or a non-kernel
    exits: set[int]             # members an instruction outside it uses
    shared: set[int]            # members other kernels hold copies of
    work: Work                  # its members', as the cost model adds them up
    read: float                 # bytes of its inputs (all of each: see read_of)
    written: float              # bytes of its outputs
    nests: frozenset            # loop nests of its heroes (policy.loop_nest)
    hero: int                   # its first reduction or contraction, -1 if none
    last: int                   # its last member
    selective: bool             # some member selects less than all of an operand (read_of)
    cost: float | None = None   # its estimated time, once asked


class KernelGraph:
    """The instructions of a computation by position, the kernels holding them (one per
    instruction at first) and the edges between kernels, kept as merges are applied."""

    def __init__(self, comp: Computation, model: CostModel):
        self.insts = comp.instructions
        self.pos = {id(inst): i for i, inst in enumerate(self.insts)}
        self.operands = [list(dict.fromkeys(self.pos[id(o)] for o in inst.operands))
                         for inst in self.insts]
        self.users: list[list[int]] = [[] for _ in self.insts]
        for i, ops in enumerate(self.operands):
            for o in ops:
                self.users[o].append(i)
        self.user_sets = [frozenset(us) for us in self.users]
        self.nbytes = [model.value_bytes(inst) for inst in self.insts]
        self.selective = [any(read_share(inst, k) < 1.0
                              and o.shape.byte_size >= SELECTIVE_MIN_BYTES
                              for k, o in enumerate(inst.operands)) for inst in self.insts]
        self.shareable = [inst.shape.byte_size >= SIBLING_MIN_BYTES for inst in self.insts]
        self.owned = [_kernelizable(inst) for inst in self.insts]
        self.works = [model.member_work(inst) if owned else None
                      for inst, owned in zip(self.insts, self.owned)]
        root = self.pos[id(comp.root)]
        # values always written: the result, and what a non-kernel (tuple, while...) reads
        self.escapes = [i == root or not all(self.owned[u] for u in self.users[i])
                        for i in range(len(self.insts))]
        self.ahead, self.behind = self._through_non_kernels()
        self.owners: list[set[Kernel]] = [set() for _ in self.insts]
        self.readers: list[set[Kernel]] = [set() for _ in self.insts]   # reading, not computing
        self.kernels: dict[Kernel, None] = {}       # the live ones, least recently changed first
        self._serials = itertools.count()
        for i, inst in enumerate(self.insts):
            if self.owned[i]:
                self._new_kernel(i, inst)
        for k in self.kernels:
            if self.escapes[k.order] or self.readers[k.order]:
                k.outputs.add(k.order)
                k.written = self.nbytes[k.order]

    def _new_kernel(self, i: int, inst: Instruction) -> None:
        inputs = {o for o in self.operands[i] if not is_free(self.insts[o])}
        nest = loop_nest(inst)
        k = Kernel(next(self._serials), i, {i}, inputs, set(),
                   {i} if self.users[i] else set(), set(), self.works[i],
                   sum(self.nbytes[o] for o in inputs), 0.0,
                   frozenset(() if nest is None else (nest,)),
                   i if inst.opcode in SIBLING_HEROES else -1, i, self.selective[i])
        self.kernels[k] = None
        self.owners[i].add(k)
        for o in inputs:
            self.readers[o].add(k)

    def _through_non_kernels(self) -> tuple[dict[int, frozenset], list[frozenset]]:
        """Kernel edges pass through instructions no kernel holds (tuples, get-tuple-element,
        while...). `ahead`: for a value a non-kernel reads, the kernel instructions its value
        reaches that way; `behind`: for a non-kernel, the kernel instructions it passes on."""
        n, owned, users = len(self.insts), self.owned, self.users
        reach: list[frozenset] = [frozenset()] * n
        for u in reversed(range(n)):
            if not owned[u]:
                reach[u] = frozenset().union(*((w,) if owned[w] else reach[w] for w in users[u]))
        ahead = {m: frozenset().union(*(reach[u] for u in users[m] if not owned[u]))
                 for m in range(n) if owned[m] and self.escapes[m]}
        behind: list[frozenset] = [frozenset()] * n
        for o in range(n):
            if not owned[o]:
                behind[o] = frozenset().union(*((p,) if owned[p] else behind[p]
                                                for p in self.operands[o]))
        return ahead, behind

    def views(self) -> list[KernelView]:
        """Each live kernel's members, inputs and outputs, in the order of `kernels`. Inputs
        come in the order a walk from the outputs through the members first reads them,
        whatever the order the computation lists its instructions in, so the same kernel
        gets the same parameters (and one compiled kernel) from any listing of a program."""
        views = []
        for k in self.kernels:
            members = [self.insts[m] for m in sorted(k.inside)]
            outputs = [m for m in members if self.pos[id(m)] in k.outputs]
            walked = post_order(outputs + members, lambda i: [
                o for o in i.operands if self.pos[id(o)] in k.inside], id)
            inputs = dict.fromkeys(o for m in walked for o in m.operands
                                   if self.pos[id(o)] not in k.inside and not is_free(o))
            views.append(KernelView(members, list(inputs), outputs))
        return views

    def read_of(self, inside: set[int], written: Iterable[int], read: float,
                selective: bool) -> float:
        """Bytes a kernel of members `inside` writing `written` reads: `read` unless it is
        `selective` (some member reads less than all of an operand), then each member
        computed only where the members reading it, or its output, need it (work.bytes_read:
        a gather of a few rows through a slice reads those rows)."""
        if not selective:
            return read
        return bytes_read([self.insts[m] for m in sorted(inside)],
                          [self.insts[w] for w in written],
                          lambda o: self.nbytes[self.pos[id(o)]])

    # --- neighbours ----------------------------------------------------------------------
    def succs(self, outputs: Iterable[int]) -> set[Kernel]:
        """Kernels reading any of these values, directly or through non-kernels."""
        found: set[Kernel] = set()
        for m in outputs:
            found |= self.readers[m]
            for w in self.ahead.get(m, ()):
                found |= self.owners[w]
        return found

    def preds(self, inputs: Iterable[int]) -> set[Kernel]:
        """Kernels computing any of these values, directly or through non-kernels."""
        found: set[Kernel] = set()
        for o in inputs:
            for w in (o,) if self.owned[o] else self.behind[o]:
                found |= self.owners[w]
        return found

    def readers_of(self, k: Kernel) -> tuple[list[Kernel], bool]:
        """Kernels reading k's values, and whether nothing else does (a non-kernel, the
        computation's result)."""
        found: set[Kernel] = set()
        for m in k.outputs:
            found |= self.readers[m]
        return sorted(found, key=by_serial), not any(self.escapes[m] for m in k.outputs)

    def read_outside(self, m: int, a: Kernel, b: Kernel) -> bool:
        """Is value m read by anything but kernels a and b?"""
        readers = self.readers[m]
        return self.escapes[m] or len(readers) > (a in readers) + (b in readers)

    # --- applying a merge ----------------------------------------------------------------
    def duplicate(self, p: Kernel, consumers: Sequence[Kernel]) -> Sequence[Kernel]:
        """Each consumer takes a copy of producer p, which goes away."""
        del self.kernels[p]
        unread: set[int] = set(p.inputs)
        for c in consumers:
            del self.kernels[c]
            unread |= self._absorb(c, p)
            self._renew(c)
        self._retire(p)
        self._forget_unread(unread)
        return consumers

    def merge_pair(self, a: Kernel, b: Kernel) -> list[Kernel]:
        """The larger of a and b takes the other's members, unless that makes a cycle."""
        moves = self._placement(a, b)
        if moves is None:
            return []
        lo = min(a.order, b.order)
        big, small = (a, b) if len(a.inside) >= len(b.inside) else (b, a)
        del self.kernels[a], self.kernels[b]
        unread = self._absorb(big, small) | small.inputs
        self._retire(small)
        self._forget_unread(unread)
        self._renew(big)
        reorder(lo, big, moves)
        return [big]

    def _placement(self, a: Kernel, b: Kernel) -> tuple[set[Kernel], set[Kernel]] | None:
        """None if the kernel merging a and b would depend on itself. Else the kernels to
        re-order around it, the merged kernel taking the earlier place of the two: those
        that must come before it, and those after it that must move with it
        (topo_order.merge_moves)."""
        preds = self.preds((a.inputs - b.inside) | (b.inputs - a.inside))
        if a in preds or b in preds:                    # through a non-kernel: a self-loop
            return None
        lo = min(a.order, b.order)
        late = {p for p in preds if p.order > lo}
        if not late:                                    # the order holds as it is
            return set(), set()
        outputs = (m for k in (a, b) for m in k.outputs if self.read_outside(m, a, b))
        merged_succs = {s for s in self.succs(outputs) if s is not a and s is not b}
        return merge_moves(lo, late, merged_succs,
                           lambda k: self.succs(k.outputs), lambda k: self.preds(k.inputs))

    def _absorb(self, k: Kernel, other: Kernel) -> set[int]:
        """k takes other's members; returns the values k no longer reads."""
        for m in other.inside:
            if m not in k.inside:
                k.inside.add(m)
                self._hold(k, m)
                k.work += self.works[m]
        unread = {m for m in other.inside if m in k.inputs}
        for o in unread:
            k.inputs.discard(o)
            self.readers[o].discard(k)
            k.read -= self.nbytes[o]
        for o in other.inputs:
            if o not in k.inside and o not in k.inputs:
                k.inputs.add(o)
                self.readers[o].add(k)
                k.read += self.nbytes[o]
        for m in other.outputs:
            if m not in k.outputs:
                k.outputs.add(m)
                k.written += self.nbytes[m]
        # members whose last outside user came in, or with users outside still
        for m in other.exits | {o for u in other.inside for o in self.operands[u] if o in k.exits}:
            if all(u in k.inside for u in self.users[m]):
                k.exits.discard(m)
            else:
                k.exits.add(m)
        k.nests |= other.nests
        k.hero = min((h for h in (k.hero, other.hero) if h >= 0), default=-1)
        k.last = max(k.last, other.last)
        k.selective = k.selective or other.selective
        return unread

    def _renew(self, k: Kernel) -> None:
        k.serial, k.cost = next(self._serials), None
        self.kernels[k] = None

    def _hold(self, k: Kernel, m: int) -> None:
        owners = self.owners[m]
        owners.add(k)
        if len(owners) > 1:
            for h in owners:
                h.shared.add(m)

    def _retire(self, k: Kernel) -> None:
        k.serial = -1
        for m in k.inside:
            owners = self.owners[m]
            owners.discard(k)
            if len(owners) == 1:
                next(iter(owners)).shared.discard(m)
        for o in k.inputs:
            self.readers[o].discard(k)

    def _forget_unread(self, values: set[int]) -> None:
        """Values no kernel reads any more are no longer written by the kernels holding
        them (merges only ever remove readers)."""
        for o in values:
            if not self.readers[o] and not self.escapes[o]:
                for k in self.owners[o]:
                    if o in k.outputs:
                        k.outputs.discard(o)
                        k.written -= self.nbytes[o]
                        k.cost = None


def by_serial(k: Kernel) -> int:
    return k.serial


def is_free(inst: Instruction) -> bool:
    """Scalar constants: copied into any kernel that reads them, never read from memory."""
    return inst.opcode == "constant" and not inst.shape.is_tuple and inst.shape.rank == 0


def _kernelizable(inst: Instruction) -> bool:
    return (inst.opcode not in NOT_KERNELS or inst.opcode in VIEWS) and not is_free(inst)
