"""Fusion: which instructions of an extracted computation run together as one kernel.

What *may* fuse comes from the rule set's `fuse`/`limit` declarations (policy.py);
what *does* is the target cost model's choice. Starting from one kernel per instruction, the
merge that saves the most estimated time is applied, then the next, while any saves time:

* `dup`: a producer kernel into every kernel that reads it; the producer's kernel goes away
  and its computation is repeated in each consumer (the model charges the repeats);
* `multi`: a producer into one consumer, still written out for its other readers (the
  consumer may also be a kernel holding copies of the producer's instructions);
* `siblings`: two kernels that read a common input, into one multi-output kernel.

A merge that would let a kernel depend on itself through other kernels is refused, so the
kernel graph stays acyclic. The check is exact and searches little: kernels are kept in a
topological order (topo_order.py), so merging two kernels can only close a cycle through
kernels ordered between them, and when it closes none, only those are re-ordered. A `dup`
never closes one: every reader of the producer takes a copy, and keeps its place. Scalar
constants are copied into every kernel that uses them.

A kernel carries what pricing a merge needs: its members' summed work, the values it reads
and writes with their bytes, its loop nests. Merges grow the larger kernel in place, so
pricing or applying one costs about the smaller side and the kernels' boundaries, not the
kernel built so far. The result is a partition: a list of kernels (instruction lists) that
outline.py turns into `fusion` instructions.
"""
from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from typing import Callable, Iterable, NamedTuple, Sequence

from ..ir import Computation, Instruction
from ..ops import NOT_KERNELS, SIBLING_HEROES, VIEWS
from ..targets import CostModel, KernelView, Work
from .policy import FusionPolicy, KernelSize, loop_nest
from .topo_order import merge_moves, reorder

SIBLING_MIN_BYTES = 1024        # sharing a smaller input is not worth a multi-output kernel
SIBLING_NEIGHBOURS = 4          # readers of one input tried as siblings, nearest first
MAX_CONSUMER_TRIES = 8          # consumers tried one by one for a `multi` merge
COPY_HOLDERS_TRIED = 8          # kernels sharing copies with a new kernel tried, nearest first


@dataclass(eq=False, slots=True)
class Kernel:
    """Instructions computed together, and what pricing their merges needs. A merge grows a
    kernel in place under a new id (candidates queued under the old one are then stale)."""
    id: int
    order: int                  # its place in a topological order of the kernel graph
    inside: set[int]            # member positions
    inputs: set[int]            # values it reads (free constants are copied in, not read)
    outputs: set[int]           # members it writes: read by another kernel or a non-kernel
    exits: set[int]             # members an instruction outside it uses
    shared: set[int]            # members other kernels hold copies of
    work: Work                  # its members', as the cost model adds them up
    read: float                 # bytes of its inputs
    written: float              # bytes of its outputs
    nests: frozenset            # loop nests of its heroes (policy.loop_nest)
    hero: int                   # its first reduction or contraction, -1 if none
    last: int                   # its last member
    cost: float | None = None   # its estimated time, once asked


class Union(NamedTuple):
    """What the kernel merging two kernels would compute and read."""
    work: Work
    heroes: int                 # distinct loop nests of its heroes
    fan_in: int                 # values it reads
    read: float                 # their bytes


class MergeQueue:
    """Candidate merges, the most profitable first. A candidate is (kind, kernels), queued by
    (kind, their ids): it is priced when offered and again when it comes up, since merges in
    between may have changed its kernels' neighbours."""

    def __init__(self, gain: Callable[[str, tuple], float | None]):
        self.gain = gain
        self.heap: list = []
        self.queued: set[tuple] = set()
        self.seq = itertools.count()

    def offer(self, candidates: Iterable[tuple[str, tuple]], priced: set[tuple]) -> None:
        """Queue the profitable ones; skip those queued (re-priced when they come up) and
        those in `priced` (priced since the last merge), and add those priced now to it."""
        for kind, ks in candidates:
            key = (kind, tuple([k.id for k in ks]))
            if key in self.queued or key in priced:
                continue
            priced.add(key)
            gain = self.gain(kind, ks)
            if gain is not None and gain > 0:
                self.queued.add(key)
                heapq.heappush(self.heap, (-gain, next(self.seq), key))

    def pop(self) -> tuple | None:
        """The best candidate's key (kind, kernel ids), None when none is left."""
        if not self.heap:
            return None
        key = heapq.heappop(self.heap)[2]
        self.queued.discard(key)
        return key


class Partition:
    """Kernels of one computation under a policy and a cost model (see module doc)."""

    def __init__(self, comp: Computation, policy: FusionPolicy, model: CostModel):
        self.insts = comp.instructions
        self.pos = {id(inst): i for i, inst in enumerate(self.insts)}
        self.operands = [list(dict.fromkeys(self.pos[id(o)] for o in inst.operands))
                         for inst in self.insts]
        self.users: list[list[int]] = [[] for _ in self.insts]
        for i, ops in enumerate(self.operands):
            for o in ops:
                self.users[o].append(i)
        self.user_sets = [frozenset(us) for us in self.users]
        self.policy, self.model = policy, model
        self.nbytes = [model.value_bytes(inst) for inst in self.insts]
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
        self.kernels: dict[int, Kernel] = {}
        self._ids = itertools.count()
        self._edges: dict[tuple[int, int], bool] = {}           # (user, producer) -> may fuse
        self._legal: dict[tuple[int, int], bool] = {}           # (producer, consumer) ids
        self._unions: dict[tuple[int, int], Union] = {}         # by kernel ids
        self._heroes_ok: dict[tuple[int, int], bool] = {}
        for i, inst in enumerate(self.insts):
            if self.owned[i]:
                self._new_kernel(i, inst)
        for k in self.kernels.values():
            if self.escapes[k.order] or self.readers[k.order]:
                k.outputs.add(k.order)
                k.written = self.nbytes[k.order]

    def _new_kernel(self, i: int, inst: Instruction) -> None:
        inputs = {o for o in self.operands[i] if not _free(self.insts[o])}
        nest = loop_nest(inst)
        k = Kernel(next(self._ids), i, {i}, inputs, set(), {i} if self.users[i] else set(),
                   set(), self.works[i], sum(self.nbytes[o] for o in inputs),
                   0.0, frozenset(() if nest is None else (nest,)),
                   i if inst.opcode in SIBLING_HEROES else -1, i)
        self.kernels[k.id] = k
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

    # --- the kernel graph ----------------------------------------------------------------
    def _succs(self, outputs: Iterable[int]) -> set[Kernel]:
        """Kernels reading any of these values, directly or through non-kernels."""
        found: set[Kernel] = set()
        for m in outputs:
            found |= self.readers[m]
            for w in self.ahead.get(m, ()):
                found |= self.owners[w]
        return found

    def _preds(self, inputs: Iterable[int]) -> set[Kernel]:
        """Kernels computing any of these values, directly or through non-kernels."""
        found: set[Kernel] = set()
        for o in inputs:
            for w in (o,) if self.owned[o] else self.behind[o]:
                found |= self.owners[w]
        return found

    def _placement(self, a: Kernel, b: Kernel) -> tuple[set[Kernel], set[Kernel]] | None:
        """None if the kernel merging a and b would depend on itself. Else the kernels to
        re-order around it, the merged kernel taking the earlier place of the two: those
        that must come before it, and those after it that must move with it
        (topo_order.merge_moves)."""
        preds = self._preds((a.inputs - b.inside) | (b.inputs - a.inside))
        if a in preds or b in preds:                    # through a non-kernel: a self-loop
            return None
        lo = min(a.order, b.order)
        late = {p for p in preds if p.order > lo}
        if not late:                                    # the order holds as it is
            return set(), set()
        return merge_moves(lo, late, self._merged_succs(a, b),
                           lambda k: self._succs(k.outputs), lambda k: self._preds(k.inputs))

    def _merged_succs(self, a: Kernel, b: Kernel) -> set[Kernel]:
        """The kernels the kernel merging a and b would feed."""
        outputs = (m for k in (a, b) for m in k.outputs if self._read_outside(m, a, b))
        return {s for s in self._succs(outputs) if s not in (a, b)}

    # --- what a merge would make -------------------------------------------------------------
    def _read_outside(self, m: int, a: Kernel, b: Kernel) -> bool:
        """Is value m read by anything but kernels a and b?"""
        readers = self.readers[m]
        return self.escapes[m] or len(readers) > (a in readers) + (b in readers)

    def _union(self, a: Kernel, b: Kernel) -> Union:
        """What the kernel merging a and b would compute and read. Membership alone
        decides it, so it is remembered by the kernels' ids."""
        key = (a.id, b.id) if a.id < b.id else (b.id, a.id)
        found = self._unions.get(key)
        if found is None:
            work = a.work + b.work
            if a.shared and b.shared:           # members both hold count once
                for m in a.shared & b.inside:
                    work -= self.works[m]
            # the values read: theirs, less those both read and those one computes for
            # the other (disjoint sets)
            fan_in, read = len(a.inputs) + len(b.inputs), a.read + b.read
            for common in (a.inputs & b.inputs, a.inputs & b.inside, b.inputs & a.inside):
                fan_in -= len(common)
                for o in common:
                    read -= self.nbytes[o]
            heroes = len(a.nests | b.nests) if b.nests else len(a.nests)
            found = self._unions[key] = Union(work, heroes, fan_in, read)
        return found

    def _writes(self, a: Kernel, b: Kernel, copied: Kernel | None = None) -> tuple[int, float]:
        """How many values the kernel merging a and b would write (those read outside it),
        and their bytes. `copied`: a or b, a producer being duplicated into all its
        consumers: every reader computes its members for itself, so they are not written."""
        base, other = (a, b) if len(a.outputs) >= len(b.outputs) else (b, a)
        count, nbytes = 0, 0.0
        if copied is not base:
            count, nbytes = len(base.outputs), base.written
            for m in base.outputs & other.inputs:
                if not self._read_outside(m, a, b):
                    count, nbytes = count - 1, nbytes - self.nbytes[m]
            if copied is other:
                common = base.outputs & other.inside
                count -= len(common)
                for m in common:
                    nbytes -= self.nbytes[m]
        if copied is not other:
            for m in other.outputs - base.inside:
                if self._read_outside(m, a, b):
                    count, nbytes = count + 1, nbytes + self.nbytes[m]
        return count, nbytes

    def cost(self, k: Kernel) -> float:
        if k.cost is None:
            k.cost = self.model.fused_cost(k.work, k.read, k.written)
        return k.cost

    def _allowed(self, union: Union, fan_out: int) -> bool:
        return self.policy.within_limits(
            KernelSize(union.heroes, union.fan_in, union.work.members, fan_out))

    def _legal_edges(self, producer: Kernel, consumer: Kernel) -> bool:
        """Every edge from the producer's members to the consumer's others is declared
        fusible (membership alone decides: remembered by kernel ids)."""
        key = (producer.id, consumer.id)
        ok = self._legal.get(key)
        if ok is None:
            sources = producer.exits & consumer.inputs
            sources.update(producer.exits & producer.shared & consumer.inside)
            ok = self._legal[key] = all(
                self._fusible(u, m) for m in sources
                for u in (self.user_sets[m] & consumer.inside) - producer.inside)
        return ok

    def _fusible(self, user: int, member: int) -> bool:
        key = (user, member)
        ok = self._edges.get(key)
        if ok is None:
            ok = self._edges[key] = self.policy.may_fuse(
                self.insts[user], self.insts[member], len(self.users[member]))
        return ok

    # --- candidate merges ----------------------------------------------------------------
    def _readers_of(self, k: Kernel) -> tuple[list[Kernel], bool]:
        """Kernels reading k's values, and whether nothing else does (a non-kernel, the
        computation's result)."""
        found: set[Kernel] = set()
        for m in k.outputs:
            found |= self.readers[m]
        return sorted(found, key=_by_id), not any(self.escapes[m] for m in k.outputs)

    def _consumers(self, k: Kernel, copies_too: bool) -> list[Kernel]:
        """Kernels computing a user of one of k's members, whether they read the member or
        hold a copy of it too (merging with those saves computing the copies twice);
        `copies_too`: also those holding a copy of a user k computes itself."""
        found: set[Kernel] = set()
        for m in k.exits:
            for u in self.users[m]:
                if u not in k.inside:
                    found |= self.owners[u]
        if copies_too:
            for u in k.shared:
                if any(o in k.inside for o in self.operands[u]):
                    found |= self.owners[u]
        found.discard(k)
        return sorted(found, key=_by_id)

    def _candidates(self, k: Kernel):
        """The merges a (new) kernel k takes part in, as (kind, kernels)."""
        readers, only_kernels = self._readers_of(k)
        sole = _sole_reader(readers, only_kernels)
        if readers and only_kernels:
            yield "dup", (k, *readers)
        tries = self._consumers(k, False) if only_kernels else []
        for c in (tries or self._consumers(k, True))[:MAX_CONSUMER_TRIES]:
            if c is not sole:
                yield "multi", (k, c)
        if k.outputs:
            for i in sorted(k.inputs):
                if self.shareable[i]:
                    for other in self._nearest_readers(i, k):
                        yield "siblings", (other, k) if other.id < k.id else (k, other)

    def _into(self, c: Kernel):
        """The merges of c's producers that involve c (their others stay queued and are
        re-priced when they come up): each kernel c reads from, into all its readers or
        into c; and the nearest kernels holding copies of operands c computes, into c."""
        producers: set[Kernel] = set()
        for o in c.inputs:
            if self.owned[o]:
                producers |= self.owners[o]
        for p in sorted(producers, key=_by_id):
            readers, only_kernels = self._readers_of(p)
            if readers and only_kernels:
                yield "dup", (p, *readers)
            if c is not _sole_reader(readers, only_kernels):
                yield "multi", (p, c)
        sharing: set[Kernel] = set()
        for o in c.shared:
            if any(u in c.inside for u in self.users[o]):
                sharing |= self.owners[o]
        sharing -= producers
        sharing.discard(c)
        for p in _nearest(COPY_HOLDERS_TRIED, sharing, c):
            yield "multi", (p, c)

    def _nearest_readers(self, value: int, k: Kernel) -> list[Kernel]:
        """The kernels other than k reading `value` (or computing a user of it), nearest to
        k first: candidate siblings."""
        others = self.readers[value] | {h for h in self.owners[value] if any(
            u in h.inside for u in self.users[value])}
        others.discard(k)
        return _nearest(SIBLING_NEIGHBOURS, others, k)

    def _gain(self, kind: str, ks: tuple[Kernel, ...]) -> float | None:
        """The time a merge saves; None if it may not be made."""
        if kind == "dup":
            return self._dup(ks[0], ks[1:])
        a, b = ks
        if kind == "siblings" and (not a.outputs or not b.outputs
                                   or not self._may_share(self._hero(a), self._hero(b))):
            return None
        if not (self._legal_edges(a, b) and self._legal_edges(b, a)):
            return None         # every edge between the two must be declared fusible
        union, (fan_out, written) = self._union(a, b), self._writes(a, b)
        if not self._allowed(union, fan_out):
            return None
        before = self.cost(a) + self.cost(b)
        return before - self.model.fused_cost(union.work, union.read, written)

    def _dup(self, p: Kernel, consumers: tuple[Kernel, ...]) -> float | None:
        priced = []
        for c in consumers:
            if not self._legal_edges(p, c):
                return None
            union = self._union(p, c)
            if not self._allowed(union, self._writes(p, c)[0]):
                return None
            written = self._writes(p, c, copied=p)[1]
            priced.append(self.model.fused_cost(union.work, union.read, written))
        before = self.cost(p) + sum(self.cost(c) for c in consumers)
        return before - sum(priced)

    def _hero(self, k: Kernel) -> int:
        """The member that decides a kernel's loop structure: its reduction or contraction
        if it has one, else its first output."""
        return k.hero if k.hero >= 0 else min(k.outputs)

    def _may_share(self, a: int, b: int) -> bool:
        ok = self._heroes_ok.get((a, b))
        if ok is None:
            ok = self._heroes_ok[(a, b)] = self.policy.may_merge_siblings(self.insts[a],
                                                                         self.insts[b])
        return ok

    # --- the greedy loop -----------------------------------------------------------------
    def run(self) -> list[list[Instruction]]:
        """Apply profitable merges, best first; returns the kernels' instruction lists."""
        queue = MergeQueue(self._gain)
        priced: set[tuple] = set()
        for k in list(self.kernels.values()):
            queue.offer(self._candidates(k), priced)
        while (key := queue.pop()) is not None:
            kind, ids = key
            ks = tuple([self.kernels.get(i) for i in ids])
            if None in ks:
                continue                        # a kernel merged since: its candidates are stale
            gain = self._gain(kind, ks)         # the kernels' neighbours may have changed
            if gain is None or gain <= 0:
                continue
            priced = set()
            for k in self.merge(kind, ks):
                queue.offer(self._candidates(k), priced)
                queue.offer(self._into(k), priced)
        return [[self.insts[m] for m in sorted(k.inside)] for k in self.kernels.values()]

    def final_views(self) -> list[KernelView]:
        """The views of the kernels run() returned, in the same order."""
        views = []
        for k in self.kernels.values():
            members = [self.insts[m] for m in sorted(k.inside)]
            inputs = dict.fromkeys(o for m in members for o in m.operands
                                   if self.pos[id(o)] not in k.inside and not _free(o))
            views.append(KernelView(members, list(inputs),
                                    [m for m in members if self.pos[id(m)] in k.outputs]))
        return views

    # --- applying a merge ----------------------------------------------------------------
    def merge(self, kind: str, ks: Sequence[Kernel]) -> Sequence[Kernel]:
        """Apply a merge (`dup`: a producer and all its readers; `multi`, `siblings`: two
        kernels) unless it would make the kernel graph cyclic; returns the kernels made,
        none if refused."""
        if kind == "dup":
            return self._duplicate(ks[0], ks[1:])
        return self._merge_pair(*ks)

    def _duplicate(self, p: Kernel, consumers: Sequence[Kernel]) -> Sequence[Kernel]:
        """Each consumer takes a copy of producer p, which goes away."""
        del self.kernels[p.id]
        unread: set[int] = set(p.inputs)
        for c in consumers:
            del self.kernels[c.id]
            unread |= self._absorb(c, p)
            self._renew(c)
        self._retire(p)
        self._forget_unread(unread)
        return consumers

    def _merge_pair(self, a: Kernel, b: Kernel) -> list[Kernel]:
        """The larger of a and b takes the other's members, unless that makes a cycle."""
        moves = self._placement(a, b)
        if moves is None:
            return []
        lo = min(a.order, b.order)
        big, small = _by_size(a, b)
        del self.kernels[a.id], self.kernels[b.id]
        unread = self._absorb(big, small) | small.inputs
        self._retire(small)
        self._forget_unread(unread)
        self._renew(big)
        reorder(lo, big, moves)
        return [big]

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
        return unread

    def _renew(self, k: Kernel) -> None:
        k.id, k.cost = next(self._ids), None
        self.kernels[k.id] = k

    def _hold(self, k: Kernel, m: int) -> None:
        owners = self.owners[m]
        owners.add(k)
        if len(owners) > 1:
            for h in owners:
                h.shared.add(m)

    def _retire(self, k: Kernel) -> None:
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


def _nearest(n: int, kernels: Iterable[Kernel], k: Kernel) -> list[Kernel]:
    """The n kernels ending nearest to where k ends."""
    return heapq.nsmallest(n, kernels, key=lambda r: (abs(r.last - k.last), r.id))


def _sole_reader(readers: list[Kernel], only_kernels: bool) -> Kernel | None:
    """The one kernel reading a producer, if nothing else does: merging the producer into
    it is the same kernel, and gain, as duplicating it there (`dup` comes first)."""
    return readers[0] if only_kernels and len(readers) == 1 else None


def _by_size(a: Kernel, b: Kernel) -> tuple[Kernel, Kernel]:
    return (a, b) if len(a.inside) >= len(b.inside) else (b, a)


def _by_id(k: Kernel) -> int:
    return k.id


def _kernelizable(inst: Instruction) -> bool:
    return (inst.opcode not in NOT_KERNELS or inst.opcode in VIEWS) and not _free(inst)


def _free(inst: Instruction) -> bool:
    """Scalar constants: copied into any kernel that reads them, never read from memory."""
    return inst.opcode == "constant" and not inst.shape.is_tuple and inst.shape.rank == 0
