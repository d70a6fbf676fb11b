"""Fusion: which instructions of an extracted computation run together as one kernel.

What *may* fuse comes from the rule set's `fuse`/`limit` declarations (policy.py);
what *does* is the target cost model's choice (pricing.py). Starting from one kernel per
instruction (kernel_graph.py), the merge that saves the most estimated time is applied,
then the next, while any saves time:

* `dup`: a producer kernel into every kernel that reads it; the producer's kernel goes away
  and its computation is repeated in each consumer (the model charges the repeats);
* `multi`: a producer into one consumer, still written out for its other readers (the
  consumer may also be a kernel holding copies of the producer's instructions);
* `siblings`: two kernels that read a common input, into one multi-output kernel.

Candidates are found around each kernel a merge makes, priced when found (that orders the
queue) and again when they come up, since merges in between may have changed the kernels
around them: about ten pricings per merge. Before that search, one pass from the last
instruction back moves each producer read by one kernel only into that kernel, where the
policy allows it and it saves time: a merge that repeats no work and removes a written
value, at one pricing each. Chains of them are most of an elementwise module's merges (a
128-op exact GELU fuses in 3.5 ms instead of 18). Taking them in this order rather than by
gain changes a few partitions (over the corpus and held-out modules: fewer bytes written
on 17 of 55; one more kernel on 2, where a reduction's producer went into it before it
could join a sibling loop). What the pass leaves (values with several readers, siblings,
multi-output kernels, narrowing producers) is the search's. The result is a partition: a list of kernels (instruction lists) that
outline.py turns into `fusion` instructions.
"""
from __future__ import annotations

import heapq
import itertools
from typing import Callable, Iterable, Iterator, Sequence

from ..ir import Computation, Instruction
from ..targets import CostModel, KernelView
from .kernel_graph import Kernel, KernelGraph, by_serial
from .policy import FusionPolicy
from .pricing import Pricing

SIBLING_NEIGHBOURS = 4          # readers of one input tried as siblings, nearest first
MAX_CONSUMER_TRIES = 8          # consumers tried one by one for a `multi` merge
COPY_HOLDERS_TRIED = 8          # kernels sharing copies with a new kernel tried, nearest first

Candidate = tuple[str, tuple[Kernel, ...]]         # (kind, kernels)


class MergeQueue:
    """Candidate merges, the most profitable first. A queued candidate is out of date once
    one of its kernels has changed (its serial is renewed): pop() passes over those."""

    def __init__(self, gain: Callable[[str, tuple], float | None]):
        self.gain = gain
        self.heap: list = []
        self.queued: set[tuple] = set()
        self.seq = itertools.count()

    def offer(self, candidates: Iterable[Candidate]) -> None:
        """Queue the profitable ones; those already queued are priced when they come up,
        and one offered twice is priced once."""
        priced: set[tuple] = set()
        for kind, ks in candidates:
            key = (kind, tuple([k.serial for k in ks]))
            if key in self.queued or key in priced:
                continue
            priced.add(key)
            gain = self.gain(kind, ks)
            if gain is not None and gain > 0:
                self.queued.add(key)
                heapq.heappush(self.heap, (-gain, next(self.seq), key, ks))

    def pop(self) -> Candidate | None:
        """The best candidate whose kernels have not changed since it was queued."""
        while self.heap:
            _, _, key, ks = heapq.heappop(self.heap)
            self.queued.discard(key)
            if all(k.serial == s for k, s in zip(ks, key[1])):
                return key[0], ks
        return None


class Partition:
    """Kernels of one computation under a policy and a cost model (see module doc)."""

    def __init__(self, comp: Computation, policy: FusionPolicy, model: CostModel):
        self.graph = KernelGraph(comp, model)
        self.pricing = Pricing(self.graph, policy, model)

    def run(self) -> list[list[Instruction]]:
        """Apply profitable merges, best first; returns the kernels' instruction lists."""
        self._into_sole_readers()
        queue = MergeQueue(self.pricing.gain)
        queue.offer(c for k in list(self.graph.kernels) for c in self._around(k))
        while (candidate := queue.pop()) is not None:
            gain = self.pricing.gain(*candidate)    # the kernels' neighbours may have changed
            if gain is not None and gain > 0:
                made = self.merge(*candidate)
                queue.offer(c for k in made for c in self._around(k, into=True))
        insts = self.graph.insts
        return [[insts[m] for m in sorted(k.inside)] for k in self.graph.kernels]

    def _into_sole_readers(self) -> None:
        """Each producer read by one kernel and nothing else into that kernel, when allowed
        and profitable, unless it narrows a shared value: consumers first, so a chain folds
        into its last kernel in one pass."""
        g = self.graph
        for p in sorted(g.kernels, key=lambda k: -k.order):
            readers, only_kernels = g.readers_of(p)
            if only_kernels and len(readers) == 1 and not self._narrows_shared(p, readers[0]):
                gain = self.pricing.gain("dup", (p, readers[0]))
                if gain is not None and gain > 0:
                    g.duplicate(p, readers)

    def _narrows_shared(self, p: Kernel, c: Kernel) -> bool:
        """Does p make a smaller value of one that other kernels read too, and that its
        reader c does not read yet (a compare of an activation for the backward pass, a
        convert to a narrower type)? Then computing it where that input is computed, and
        writing the small value, may beat c reading the wide one: a choice for the search."""
        g = self.graph
        return any(len(g.readers[i]) > 1 and g.nbytes[i] > p.written and i not in c.inputs
                   for i in p.inputs)

    def views(self) -> list[KernelView]:
        """The views of the kernels run() returned, in the same order."""
        return self.graph.views()

    def merge(self, kind: str, ks: Sequence[Kernel]) -> Sequence[Kernel]:
        """Apply a merge (`dup`: a producer and all its readers; `multi`, `siblings`: two
        kernels) unless it would make the kernel graph cyclic; returns the kernels made,
        none if refused."""
        if kind == "dup":
            return self.graph.duplicate(ks[0], ks[1:])
        return self.graph.merge_pair(*ks)

    # --- candidates ----------------------------------------------------------------------
    def _around(self, k: Kernel, into: bool = False) -> Iterator[Candidate]:
        """The merges kernel k takes part in; `into`: also those of its producers that
        involve k (their others stay queued, and are re-priced when they come up)."""
        yield from self._from(k)
        if into:
            yield from self._into(k)

    def _from(self, k: Kernel) -> Iterator[Candidate]:
        """k into its readers, into one consumer, or with a sibling."""
        readers, only_kernels = self.graph.readers_of(k)
        sole = _sole_reader(readers, only_kernels)
        if readers and only_kernels:
            yield "dup", (k, *readers)
        tries = self._consumers(k, False) if only_kernels else []
        for c in (tries or self._consumers(k, True))[:MAX_CONSUMER_TRIES]:
            if c is not sole:
                yield "multi", (k, c)
        if k.outputs:
            for i in sorted(k.inputs):
                if self.graph.shareable[i]:
                    for other in self._nearest_readers(i, k):
                        yield "siblings", (other, k) if other.serial < k.serial else (k, other)

    def _into(self, c: Kernel) -> Iterator[Candidate]:
        """Each kernel c reads from, into all its readers or into c; and the nearest
        kernels holding copies of operands c computes, into c."""
        g = self.graph
        producers: set[Kernel] = set()
        for o in c.inputs:
            if g.owned[o]:
                producers |= g.owners[o]
        for p in sorted(producers, key=by_serial):
            readers, only_kernels = g.readers_of(p)
            if readers and only_kernels:
                yield "dup", (p, *readers)
            if c is not _sole_reader(readers, only_kernels):
                yield "multi", (p, c)
        sharing: set[Kernel] = set()
        for o in c.shared:
            if any(u in c.inside for u in g.users[o]):
                sharing |= g.owners[o]
        sharing -= producers
        sharing.discard(c)
        for p in _nearest(COPY_HOLDERS_TRIED, sharing, c):
            yield "multi", (p, c)

    def _consumers(self, k: Kernel, copies_too: bool) -> list[Kernel]:
        """Kernels computing a user of one of k's members, whether they read the member or
        hold a copy of it too (merging with those saves computing the copies twice);
        `copies_too`: also those holding a copy of a user k computes itself."""
        g = self.graph
        found: set[Kernel] = set()
        for m in k.exits:
            for u in g.users[m]:
                if u not in k.inside:
                    found |= g.owners[u]
        if copies_too:
            for u in k.shared:
                if any(o in k.inside for o in g.operands[u]):
                    found |= g.owners[u]
        found.discard(k)
        return sorted(found, key=by_serial)

    def _nearest_readers(self, value: int, k: Kernel) -> list[Kernel]:
        """The kernels other than k reading `value` (or computing a user of it), nearest to
        k first: candidate siblings."""
        g = self.graph
        others = g.readers[value] | {h for h in g.owners[value] if any(
            u in h.inside for u in g.users[value])}
        others.discard(k)
        return _nearest(SIBLING_NEIGHBOURS, others, k)


def _nearest(n: int, kernels: Iterable[Kernel], k: Kernel) -> list[Kernel]:
    """The n kernels ending nearest to where k ends."""
    return heapq.nsmallest(n, kernels, key=lambda r: (abs(r.last - k.last), r.serial))


def _sole_reader(readers: list[Kernel], only_kernels: bool) -> Kernel | None:
    """The one kernel reading a producer, if nothing else does: merging the producer into
    it is the same kernel, and gain, as duplicating it there (`dup` comes first)."""
    return readers[0] if only_kernels and len(readers) == 1 else None
