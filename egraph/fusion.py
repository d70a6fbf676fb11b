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
                 extra_roots: tuple[Instruction, ...] = (), exact: bool = False):
        self.comp, self.extra_roots, self.exact = comp, extra_roots, exact
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
        self._views: dict[tuple, KernelView] = {}               # valid until the next merge
        self._edges: dict[tuple[int, int], bool] = {}           # (user, producer) -> may fuse
        self._limits_ok: dict[tuple[int, ...], bool] = {}       # by kernel ids, until a merge
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

    def view(self, ks: tuple[Kernel, ...], copied: frozenset[int] = frozenset()) -> KernelView:
        """The kernel that merging kernels `ks` would make: what it reads and what it must
        write. `copied`: members that every reader will compute for itself (a producer
        being duplicated into all its consumers), so they are never written."""
        key = (tuple(sorted(k.id for k in ks)), copied)
        found = self._views.get(key)
        if found is None:
            found = self._views[key] = self._make_view(ks, copied)
        return found

    def _make_view(self, ks: tuple[Kernel, ...], copied: frozenset[int]) -> KernelView:
        members = _union(ks)
        inside = set(members)
        merged = {k.id for k in ks}
        inputs: dict[int, None] = {}
        outputs = []
        for m in members:
            for op in self.insts[m].operands:
                j = self.pos[id(op)]
                if j not in inside and not _free(op):
                    inputs[j] = None
            if m in self.escapes or m not in copied and self._read_elsewhere(m, inside, merged):
                outputs.append(self.insts[m])
        return KernelView([self.insts[m] for m in members],
                          [self.insts[j] for j in inputs], outputs)

    def _read_elsewhere(self, member: int, inside: set[int], merged: set[int]) -> bool:
        """Must a kernel made of `inside` (the kernels `merged`) write `member`? Yes if
        some reader of it runs outside: an instruction in no kernel, or a copy of the
        reader in another kernel that does not compute the member itself."""
        for u in self.users[member]:
            owners = self.owners[u]
            if not owners:
                if u not in inside:
                    return True
                continue
            for k in owners:
                kernel = self.kernels[k]
                if k not in merged and member not in kernel.inside:
                    return True
        return False

    def cost(self, k: Kernel) -> float:
        key = (k.id, k.version)
        if key not in self._costs:
            self._costs[key] = self.model.kernel_cost(self.view((k,)))
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

    def _legal_edges(self, producer: Kernel, consumer_members: frozenset[int]) -> bool:
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
        for c in consumers:
            if not self._legal_edges(p, c.inside) or not self._allowed((p, c)):
                return None
        before = self.cost(p) + sum(self.cost(c) for c in consumers)
        after = sum(self.model.kernel_cost(self.view((p, c), p.inside)) for c in consumers)
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
        if not self._legal_edges(p, c.inside) or not self._allowed((p, c)):
            return None
        before = self.cost(p) + self.cost(c)
        return before - self.model.kernel_cost(self.view((p, c))), "multi", (p, c)

    def _siblings(self, k: Kernel):
        view = self.view((k,))
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
        va, vb = self.view((a,)), self.view((b,))
        if not va.outputs or not vb.outputs or \
                not self.policy.may_merge_siblings(_hero(va), _hero(vb)):
            return None
        if not self._allowed((a, b)):
            return None
        before = self.cost(a) + self.cost(b)
        return before - self.model.kernel_cost(self.view((a, b))), "siblings", (a, b)

    def _allowed(self, ks: tuple[Kernel, ...]) -> bool:
        key = tuple(sorted(k.id for k in ks))
        ok = self._limits_ok.get(key)
        if ok is None:
            ok = self._limits_ok[key] = self.policy.within_limits(self.view(ks))
        return ok

    # --- the greedy loop -----------------------------------------------------------------
    def run(self) -> list[list[Instruction]]:
        """Apply profitable merges, best first; returns the kernels' instruction lists.
        The cycle check prunes by position, which paths through multi-output kernels can
        defeat; if the result has a cycle, the merges are redone with the exact check."""
        kernels = self._merge()
        if self.exact or not self._has_cycle():
            return kernels
        self.__init__(self.comp, self.policy, self.model, self.extra_roots, exact=True)
        return self._merge()

    def final_views(self) -> list[KernelView]:
        """The views of the kernels run() returned, in the same order."""
        return [self.view((k,)) for k in self.kernels.values()]

    def _merge(self) -> list[list[Instruction]]:
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
        through instructions no kernel holds). Unless exact, it prunes kernels that start
        after the new one ends, which is right while kernels' members are contiguous in
        position but not in general (run() checks the result)."""
        for k in made:
            end = k.members[-1]
            stack, seen = self._readers(k), set()
            while stack:
                r = stack.pop()
                if r.id == k.id:
                    return True
                if r.id in seen or not self.exact and r.members[0] > end:
                    continue
                seen.add(r.id)
                stack.extend(self._readers(r))
        return False

    def _has_cycle(self) -> bool:
        """One depth-first pass over the whole kernel graph."""
        state: dict[int, int] = {}               # 1: on the current path, 2: finished
        for start in self.kernels.values():
            if start.id in state:
                continue
            stack = [(start, iter(self._readers(start)))]
            state[start.id] = 1
            while stack:
                k, readers = stack[-1]
                r = next(readers, None)
                if r is None:
                    state[k.id] = 2
                    stack.pop()
                elif state.get(r.id) == 1:
                    return True
                elif r.id not in state:
                    state[r.id] = 1
                    stack.append((r, iter(self._readers(r))))
        return False

    def _readers(self, k: Kernel) -> list[Kernel]:
        """Kernels that read a value from k: any other kernel computing a reader of one of
        k's members without computing the member, also through instructions no kernel
        holds (tuples, get-tuple-element...)."""
        found: dict[int, Kernel] = {}
        stack = [(m, u) for m in k.members for u in self.users[m]]
        seen: set[int] = set()
        while stack:
            m, u = stack.pop()
            if not self.owners[u]:
                if u not in seen and u not in k.inside:
                    seen.add(u)
                    stack.extend((u, w) for w in self.users[u])
                continue
            for kid in self.owners[u]:
                if kid != k.id and m not in self.kernels[kid].inside:
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


def _union(ks) -> list[int]:
    return ks[0].members if len(ks) == 1 else sorted(set().union(*(k.inside for k in ks)))


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
