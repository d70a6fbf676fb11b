"""Fusion: which instructions of an extracted computation run together as one kernel.

What *may* fuse comes from the rule set's `fuse`/`limit` declarations (fusion_rules.py);
what *does* is the target cost model's choice. Starting from one kernel per instruction, the
merge that saves the most estimated time is applied, then the next, while any saves time:

* `dup`: a producer kernel into every kernel that reads it; the producer's kernel goes away
  and its computation is repeated in each consumer (the model charges the repeats);
* `multi`: a producer into one consumer, still written out for its other readers;
* `siblings`: two kernels that read a common input, into one multi-output kernel.

A merge that would let a kernel depend on itself through another kernel is undone, so the
kernel graph stays acyclic. Scalar constants are copied into every kernel that uses them.
The result is a partition: a list of kernels (instruction lists) that outline.py turns into
`fusion` instructions.
"""
from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass

from ..ir import Computation, Instruction
from ..kernels import NOT_KERNELS
from ..targets import CostModel, KernelView
from .fusion_rules import FusionPolicy

FUSIBLE_VIEWS = frozenset({"reshape", "bitcast"})   # views a kernel can absorb
SIBLING_MIN_BYTES = 1024        # sharing a smaller input is not worth a multi-output kernel
SIBLING_NEIGHBOURS = 4          # readers of one input tried as siblings, nearest first
MAX_CONSUMER_TRIES = 8          # consumers tried one by one for a `multi` merge


@dataclass
class Kernel:
    id: int
    members: list[int]          # instruction positions, ascending
    version: int = 0

    def __post_init__(self):
        self.inside = frozenset(self.members)


class Partition:
    """Kernels of one computation under a policy and a cost model (see module doc)."""

    def __init__(self, comp: Computation, policy: FusionPolicy, model: CostModel,
                 extra_roots: tuple[Instruction, ...] = ()):
        self.insts = comp.instructions
        self.pos = {id(inst): i for i, inst in enumerate(self.insts)}
        self.users: list[list[int]] = [[] for _ in self.insts]
        for i, inst in enumerate(self.insts):
            for op in dict.fromkeys(id(o) for o in inst.operands):
                self.users[self.pos[op]].append(i)
        self.escapes = {self.pos[id(comp.root)]} | {self.pos[id(r)] for r in extra_roots}
        self.policy, self.model = policy, model
        self.kernels: dict[int, Kernel] = {}
        self.owners: list[set[int]] = [set() for _ in self.insts]
        self._ids = itertools.count()
        self._costs: dict[tuple[int, int], float] = {}
        self._views: dict[tuple[int, ...], KernelView] = {}    # valid until the next merge
        self._edges: dict[tuple[int, int], bool] = {}           # (user, producer) -> may fuse
        self._limits_ok: dict[tuple[int, ...], bool] = {}       # valid until the next merge
        for i, inst in enumerate(self.insts):
            if _kernelizable(inst):
                self._new_kernel([i])

    # --- structure ----------------------------------------------------------------------
    def _new_kernel(self, members: list[int]) -> Kernel:
        k = Kernel(next(self._ids), sorted(set(members)))
        self.kernels[k.id] = k
        for m in k.members:
            self.owners[m].add(k.id)
        return k

    def _drop(self, k: Kernel) -> None:
        del self.kernels[k.id]
        for m in k.members:
            self.owners[m].discard(k.id)

    def view(self, members: list[int]) -> KernelView:
        """The kernel a set of members would be: what it reads and what it must write."""
        key = tuple(members)
        found = self._views.get(key)
        if found is None:
            found = self._views[key] = self._make_view(members)
        return found

    def _make_view(self, members: list[int]) -> KernelView:
        inside = set(members)
        inputs: dict[int, None] = {}
        outputs = []
        for m in members:
            for op in self.insts[m].operands:
                j = self.pos[id(op)]
                if j not in inside and not _free(op):
                    inputs[j] = None
            if m in self.escapes or any(u not in inside and not self._holds_copy(u, m)
                                        for u in self.users[m]):
                outputs.append(self.insts[m])
        return KernelView([self.insts[m] for m in members],
                          [self.insts[j] for j in inputs], outputs)

    def _holds_copy(self, user: int, member: int) -> bool:
        """The user's own kernel computes the member too (it was duplicated there)."""
        return any(member in self.kernels[k].inside for k in self.owners[user])

    def cost(self, k: Kernel) -> float:
        key = (k.id, k.version)
        if key not in self._costs:
            self._costs[key] = self.model.kernel_cost(self.view(k.members))
        return self._costs[key]

    def _consumers(self, k: Kernel) -> list[Kernel] | None:
        """Kernels reading k's values; None if a non-kernel reads them (a tuple, the root)."""
        found: dict[int, Kernel] = {}
        inside = set(k.members)
        for m in k.members:
            if m in self.escapes:
                return None
            for u in self.users[m]:
                if u in inside:
                    continue
                if not self.owners[u]:
                    return None
                for kid in self.owners[u]:
                    found.setdefault(kid, self.kernels[kid])
        return [found[kid] for kid in sorted(found)]

    def _legal_edges(self, producer: Kernel, consumer_members: set[int]) -> bool:
        """Every edge from the producer's values into the consumer is declared fusible."""
        for m in producer.members:
            for u in self.users[m]:
                if u in consumer_members and u not in producer.inside:
                    if not self._fusible(u, m):
                        return False
        return True

    def _fusible(self, user: int, member: int) -> bool:
        key = (user, member)
        ok = self._edges.get(key)
        if ok is None:
            ok = self._edges[key] = self.policy.may_fuse(
                self.insts[user], self.insts[member], len(self.users[member]))
        return ok

    # --- candidate merges ----------------------------------------------------------------
    def _candidates(self, k: Kernel):
        consumers = self._consumers(k)
        if consumers:
            yield self._dup(k, consumers)
        for c in (consumers or self._some_consumers(k))[:MAX_CONSUMER_TRIES]:
            yield self._multi(k, c)
        yield from self._siblings(k)

    def _dup(self, p: Kernel, consumers: list[Kernel]):
        merged = []
        for c in consumers:
            members = sorted(set(c.members) | set(p.members))
            if not self._legal_edges(p, set(c.members)) or not self._allowed(members):
                return None
            merged.append(members)
        before = self.cost(p) + sum(self.cost(c) for c in consumers)
        after = sum(self.model.kernel_cost(self.view(m)) for m in merged)
        return before - after, "dup", (p, *consumers)

    def _some_consumers(self, k: Kernel) -> list[Kernel]:
        """Kernels reading k's values, when something else reads them too."""
        found: dict[int, Kernel] = {}
        for m in k.members:
            for u in self.users[m]:
                for kid in self.owners[u]:
                    if kid != k.id:
                        found.setdefault(kid, self.kernels[kid])
        return [found[kid] for kid in sorted(found)]

    def _multi(self, p: Kernel, c: Kernel):
        members = sorted(set(c.members) | set(p.members))
        if not self._legal_edges(p, set(c.members)) or not self._allowed(members):
            return None
        before = self.cost(p) + self.cost(c)
        return before - self.model.kernel_cost(self.view(members)), "multi", (p, c)

    def _siblings(self, k: Kernel):
        view = self.view(k.members)
        if not view.outputs:
            return
        for inp in view.inputs:
            if inp.shape.byte_size < SIBLING_MIN_BYTES:
                continue
            readers = sorted({kid for u in self.users[self.pos[id(inp)]]
                              for kid in self.owners[u] if kid != k.id},
                             key=lambda kid: abs(self.kernels[kid].members[-1] - k.members[-1]))
            for kid in readers[:SIBLING_NEIGHBOURS]:
                other = self.kernels[kid]
                if kid < k.id:
                    yield self._sibling(other, k)
                else:
                    yield self._sibling(k, other)

    def _sibling(self, a: Kernel, b: Kernel):
        va, vb = self.view(a.members), self.view(b.members)
        if not va.outputs or not vb.outputs or \
                not self.policy.may_merge_siblings(_hero(va), _hero(vb)):
            return None
        members = sorted(set(a.members) | set(b.members))
        if not self._allowed(members):
            return None
        before = self.cost(a) + self.cost(b)
        return before - self.model.kernel_cost(self.view(members)), "siblings", (a, b)

    def _allowed(self, members: list[int]) -> bool:
        key = tuple(members)
        ok = self._limits_ok.get(key)
        if ok is None:
            ok = self._limits_ok[key] = self.policy.within_limits(self.view(members))
        return ok

    # --- the greedy loop -----------------------------------------------------------------
    def run(self) -> list[list[Instruction]]:
        """Apply profitable merges, best first; returns the kernels' instruction lists."""
        heap: list = []
        seq = itertools.count()

        def push(candidates):
            for cand in candidates:
                if cand is not None and cand[0] > 0:
                    gain, kind, ks = cand
                    heapq.heappush(heap, (-gain, next(seq), kind,
                                          tuple((x.id, x.version) for x in ks)))

        for k in list(self.kernels.values()):
            push(self._candidates(k))
        while heap:
            _, _, kind, stamp = heapq.heappop(heap)
            ks = [self.kernels.get(kid) for kid, _ in stamp]
            if any(k is None or k.version != v for k, (_, v) in zip(ks, stamp)):
                continue
            cand = (self._dup(ks[0], ks[1:]) if kind == "dup" else
                    self._multi(*ks) if kind == "multi" else self._sibling(*ks))
            if cand is None or cand[0] <= 0:
                continue
            made = self._apply(kind, ks)
            if self._cyclic(made):
                self._undo(made, ks)
                continue
            for k in made:
                push(self._candidates(k))
                for n in self._producers(k):
                    push(self._into(n, k))
        return [[self.insts[m] for m in k.members] for k in self.kernels.values()]

    def _apply(self, kind: str, ks: list[Kernel]) -> list[Kernel]:
        self._views.clear()         # outputs depend on which kernels hold copies
        self._limits_ok.clear()
        if kind == "dup":
            p, consumers = ks[0], ks[1:]
            self._drop(p)
            made = []
            for c in consumers:
                self._drop(c)
                made.append(self._new_kernel(c.members + p.members))
            return made
        for k in ks:
            self._drop(k)
        return [self._new_kernel([m for k in ks for m in k.members])]

    def _cyclic(self, made: list[Kernel]) -> bool:
        """Does a new kernel now depend on itself (through another kernel)? Candidates are
        priced without this check; it runs once per merge applied. It follows kernel edges
        (a reader depends on every kernel holding the value it reads, and on values passing
        through instructions no kernel holds), pruning kernels that start after the new one
        ends: positions are topological."""
        for k in made:
            end = k.members[-1]
            stack, seen = self._readers(k), set()
            while stack:
                r = stack.pop()
                if r.id == k.id:
                    return True
                if r.id in seen or r.members[0] > end:
                    continue
                seen.add(r.id)
                stack.extend(self._readers(r))
        return False

    def _readers(self, k: Kernel) -> list[Kernel]:
        found: dict[int, Kernel] = {}
        stack = [(m, u) for m in k.members for u in self.users[m] if u not in k.inside]
        seen: set[int] = set()
        while stack:
            m, u = stack.pop()
            if not self.owners[u]:              # a tuple, a get-tuple-element...
                if u not in seen:
                    seen.add(u)
                    stack.extend((u, w) for w in self.users[u])
                continue
            for kid in self.owners[u]:
                if m not in self.kernels[kid].inside:
                    found.setdefault(kid, self.kernels[kid])
        return list(found.values())

    def _undo(self, made: list[Kernel], old: list[Kernel]) -> None:
        for k in made:
            self._drop(k)
        for k in old:
            self.kernels[k.id] = k
            for m in k.members:
                self.owners[m].add(k.id)
        self._views.clear()
        self._limits_ok.clear()

    def _producers(self, k: Kernel) -> list[Kernel]:
        """Kernels k reads from."""
        found: dict[int, Kernel] = {}
        for m in k.members:
            for op in self.insts[m].operands:
                for kid in self.owners[self.pos[id(op)]]:
                    if kid != k.id:
                        found.setdefault(kid, self.kernels[kid])
        return list(found.values())

    def _into(self, p: Kernel, c: Kernel):
        """The merges of producer p that involve its (new) consumer c. p's other candidates
        stay queued; they are re-priced when they come up."""
        consumers = self._consumers(p)
        if consumers:
            yield self._dup(p, consumers)
        yield self._multi(p, c)


def _kernelizable(inst: Instruction) -> bool:
    return (inst.opcode not in NOT_KERNELS or inst.opcode in FUSIBLE_VIEWS) and not _free(inst)


def _free(inst: Instruction) -> bool:
    """Scalar constants: copied into any kernel that reads them, never read from memory."""
    return inst.opcode == "constant" and not inst.shape.is_tuple and inst.shape.rank == 0


def _hero(view: KernelView) -> Instruction:
    """The instruction that decides a kernel's loop structure: its reduction or contraction
    if it has one, else its first output."""
    for inst in view.members:
        if inst.opcode in ("reduce", "reduce-window", "dot", "convolution"):
            return inst
    return view.outputs[0]
