"""What a candidate merge of kernels saves, by the target's cost model, and whether the
rule set's `fuse`/`limit` declarations and the target (CostModel.fits) allow it at all.

Pricing runs thousands of times per computation, on kernels that mostly did not change
since they were last priced against each other: what their members alone decide (the union
of two kernels, whether every edge between them is declared fusible) is remembered per pair
of kernels until either changes (PairMemo). What depends on the kernels around them (which
of their values are still read elsewhere) is computed each time.
"""
from __future__ import annotations

from typing import Callable, Generic, NamedTuple, TypeVar

from ..targets import CostModel, Work
from .kernel_graph import Kernel, KernelGraph
from .policy import FusionPolicy, KernelSize

T = TypeVar("T")


class Union(NamedTuple):
    """What the kernel merging two kernels would compute and read."""
    work: Work
    heroes: int                 # distinct loop nests of its heroes
    fan_in: int                 # values it reads
    read: float                 # their bytes


class PairMemo(Generic[T]):
    """A fact about a pair of kernels that their members alone decide: kept with the
    kernels' serials, and computed again once either kernel has changed. `symmetric`: the
    fact does not depend on the pair's order."""

    def __init__(self, compute: Callable[[Kernel, Kernel], T], symmetric: bool = False):
        self.compute, self.symmetric = compute, symmetric
        self.facts: dict[tuple[Kernel, Kernel], tuple[int, int, T]] = {}

    def __call__(self, a: Kernel, b: Kernel) -> T:
        key = (b, a) if self.symmetric and b.serial < a.serial else (a, b)
        found = self.facts.get(key)
        if found is None or found[0] != key[0].serial or found[1] != key[1].serial:
            found = self.facts[key] = (key[0].serial, key[1].serial, self.compute(a, b))
        return found[2]


class Pricing:
    """Gains of candidate merges in a kernel graph under a policy and a cost model."""

    def __init__(self, graph: KernelGraph, policy: FusionPolicy, model: CostModel):
        self.graph, self.policy, self.model = graph, policy, model
        self.legal_into = PairMemo(self._legal_into)    # (producer, consumer)
        self.union = PairMemo(self._union, symmetric=True)
        # per kernel member: its users it may not be fused into (mostly none)
        self._unfusible = [frozenset(u for u in graph.users[m] if graph.owned[u]
                                     and not policy.may_fuse(graph.insts[u], graph.insts[m],
                                                             len(graph.users[m])))
                           if graph.owned[m] else frozenset() for m in range(len(graph.insts))]
        self._siblings: dict[tuple[int, int], bool] = {}

    def gain(self, kind: str, ks: tuple[Kernel, ...]) -> float | None:
        """The time a merge saves; None if it may not be made."""
        if kind == "dup":
            return self._dup(ks[0], ks[1:])
        a, b = ks
        if kind == "siblings" and (not a.outputs or not b.outputs
                                   or not self._may_share(_hero(a), _hero(b))):
            return None
        if not (self.legal_into(a, b) and self.legal_into(b, a)):
            return None         # every edge between the two must be declared fusible
        union, (fan_out, written) = self.union(a, b), self._writes(a, b)
        if not self._allowed(union, fan_out):
            return None
        g = self.graph
        read = g.read_of(a.inside | b.inside, [m for m in a.outputs | b.outputs
                                               if g.read_outside(m, a, b)], union.read,
                         a.selective or b.selective)
        return self.cost(a) + self.cost(b) - self.model.fused_cost(union.work, read, written)

    def _dup(self, p: Kernel, consumers: tuple[Kernel, ...]) -> float | None:
        """Producer p copied into each of its readers, and gone."""
        priced = []
        for c in consumers:
            if not self.legal_into(p, c):
                return None
            union = self.union(p, c)
            if not self._allowed(union, self._writes(p, c)[0]):
                return None
            written = self._writes(p, c, copied=p)[1]
            read = self.graph.read_of(p.inside | c.inside, c.outputs, union.read,
                                      p.selective or c.selective)
            priced.append(self.model.fused_cost(union.work, read, written))
        before = self.cost(p) + sum(self.cost(c) for c in consumers)
        return before - sum(priced)

    def cost(self, k: Kernel) -> float:
        if k.cost is None:
            read = self.graph.read_of(k.inside, k.outputs, k.read, k.selective)
            k.cost = self.model.fused_cost(k.work, read, k.written)
        return k.cost

    def _union(self, a: Kernel, b: Kernel) -> Union:
        """What the kernel merging a and b would compute and read."""
        g = self.graph
        work = a.work + b.work
        if a.shared and b.shared:           # members both hold count once
            for m in a.shared & b.inside:
                work -= g.works[m]
        # the values read: theirs, less those both read and those one computes for the
        # other (disjoint sets)
        fan_in, read = len(a.inputs) + len(b.inputs), a.read + b.read
        for common in (a.inputs & b.inputs, a.inputs & b.inside, b.inputs & a.inside):
            fan_in -= len(common)
            for o in common:
                read -= g.nbytes[o]
        heroes = len(a.nests | b.nests) if b.nests else len(a.nests)
        return Union(work, heroes, fan_in, read)

    def _writes(self, a: Kernel, b: Kernel, copied: Kernel | None = None) -> tuple[int, float]:
        """How many values the kernel merging a and b would write (those read outside it),
        and their bytes. `copied`: a or b, a producer being duplicated into all its
        consumers: every reader computes its members for itself, so they are not written."""
        g = self.graph
        base, other = (a, b) if len(a.outputs) >= len(b.outputs) else (b, a)
        count, nbytes = 0, 0.0
        if copied is not base:
            count, nbytes = len(base.outputs), base.written
            for m in base.outputs & other.inputs:
                if not g.read_outside(m, a, b):
                    count, nbytes = count - 1, nbytes - g.nbytes[m]
            if copied is other:
                common = base.outputs & other.inside
                count -= len(common)
                for m in common:
                    nbytes -= g.nbytes[m]
        if copied is not other:
            for m in other.outputs - base.inside:
                if g.read_outside(m, a, b):
                    count, nbytes = count + 1, nbytes + g.nbytes[m]
        return count, nbytes

    def _allowed(self, union: Union, fan_out: int) -> bool:
        """Within the rules' limits, and a kernel the target can run (CostModel.fits)."""
        return self.policy.within_limits(
            KernelSize(union.heroes, union.fan_in, union.work.members, fan_out)) \
            and self.model.fits(union.work)

    def _legal_into(self, producer: Kernel, consumer: Kernel) -> bool:
        """Every edge from the producer's members to the consumer's others is declared
        fusible."""
        unfusible = self._unfusible
        inside = consumer.inside
        for sources in (producer.exits & consumer.inputs,
                        producer.exits & producer.shared & inside if producer.shared else ()):
            for m in sources:
                refused = unfusible[m]
                if refused and not (refused & inside) <= producer.inside:
                    return False
        return True

    def _may_share(self, a: int, b: int) -> bool:
        ok = self._siblings.get((a, b))
        if ok is None:
            insts = self.graph.insts
            ok = self._siblings[(a, b)] = self.policy.may_merge_siblings(insts[a], insts[b])
        return ok


def _hero(k: Kernel) -> int:
    """The member that decides a kernel's loop structure: its reduction or contraction if it
    has one, else its first output."""
    return k.hero if k.hero >= 0 else min(k.outputs)
