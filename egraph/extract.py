"""DAG-aware extraction: one e-node per needed e-class, minimizing the summed cost of the
nodes a program runs, where a shared e-class is paid once.

1. Tree choice (Knuth's generalization of Dijkstra): a node becomes a candidate once all its
   operand classes have a final choice; classes are finalized cheapest tree cost first. The
   result is finite wherever anything is, and acyclic by construction. `height` (longest
   chosen path down to a leaf, in steps of HEIGHT_STEP) then orders it: every chosen edge
   goes down in height.
2. Improvement passes: for each live class with alternatives, try each alternative and keep
   it when the exact change of the DAG cost is negative. Reference counts over the chosen
   DAG give that change: operands the alternative needs that are not yet live are added
   (with what they need), those only the old node needed are released. A switch that would
   close a cycle is rejected: only operands higher than the class can reach it, so the
   search stays between the two heights.

Ties break by node index (egglog's frozen row order is reproducible), so runs are
deterministic. All loops are bounded; the work of the passes has a budget.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

MAX_PASSES = 8
WORK_PER_NODE = 20          # improvement budget, in graph steps per e-node
CYCLE_SEARCH_LIMIT = 500    # classes one cycle test may visit before it answers "cycle"
HEIGHT_STEP = 16            # heights start this far apart, so raising one rarely ripples
# Tree costs grow exponentially with depth on DAGs (a shared term counts once per use);
# capped, they stay finite and only order the first choice, which improvement then fixes.
TREE_COST_CAP = 1e300
_EPS = 1e-9


@dataclass
class Extraction:
    choice: np.ndarray          # class -> chosen node (-1: not needed)
    order: list[int]            # needed classes, operands before users
    cost: float                 # DAG cost of the chosen program
    tree_cost: float            # DAG cost of the tree choice, before improvement
    passes: int


class ExtractionError(Exception):
    """A root class has no finite-cost term (cannot happen for encoded programs)."""


def extract(eclass: np.ndarray, child_ptr: np.ndarray, child: np.ndarray, n_classes: int,
            cost: np.ndarray, roots: list[int], excluded: np.ndarray | None = None
            ) -> Extraction:
    """Choose nodes for `roots` (class indices); `excluded` nodes are never chosen. Arrays
    as in frozen.FrozenTerms."""
    g = _Graph(eclass, child_ptr, child, n_classes, cost)
    g.tree_choice(excluded)
    for r in roots:
        if g.choice[r] < 0:
            raise ExtractionError(f"e-class {r} has no finite-cost term")
    g.count_references(roots)
    tree_cost = g.dag_cost
    passes = g.improve()
    order = g.topological_order()
    choice = np.full(n_classes, -1, dtype=np.int64)
    for c in order:
        choice[c] = g.choice[c]
    return Extraction(choice, order, g.dag_cost, tree_cost, passes)


class _Graph:
    """The e-graph as Python lists (faster than numpy scalars for the graph walks)."""

    def __init__(self, eclass, child_ptr, child, n_classes, cost):
        self.n_classes = n_classes
        self.eclass = eclass.tolist()
        self.ptr = child_ptr.tolist()
        self.child = child.tolist()
        self.cost = cost.tolist()
        n = len(self.eclass)
        # parents: for each class, the nodes that use it (once per use)
        users = np.repeat(np.arange(n), np.diff(child_ptr))
        by_child = np.argsort(child, kind="stable")
        self.parent = users[by_child].tolist()
        self.parent_ptr = np.concatenate(
            ([0], np.cumsum(np.bincount(child, minlength=n_classes)))).tolist()
        by_class = np.argsort(eclass, kind="stable")
        self.members = by_class.tolist()
        self.member_ptr = np.concatenate(
            ([0], np.cumsum(np.bincount(eclass, minlength=n_classes)))).tolist()
        self.choice = [-1] * n_classes
        self.height = [0] * n_classes
        self.work = 0
        self.node_total = [math.inf] * n

    # --- 1. tree choice ------------------------------------------------------------------
    def tree_choice(self, excluded: np.ndarray | None) -> None:
        """Knuth's algorithm. A node of a single-node class needs no heap: the moment it is
        ready its class is final (nothing finalized later can be cheaper, costs being
        monotone), so those drain from a stack and only real choices go through the heap."""
        ptr, child, cost, eclass = self.ptr, self.child, self.cost, self.eclass
        members = self.member_ptr
        single = [members[c + 1] - members[c] == 1 for c in range(self.n_classes)]
        pending = np.diff(np.array(ptr))
        if excluded is not None:
            pending[excluded] = -1              # never reaches 0: never a candidate
        pending = pending.tolist()
        best = [math.inf] * self.n_classes
        heap: list[tuple[float, int]] = []
        ready: list[tuple[float, int]] = []
        for node, p in enumerate(pending):
            if p == 0:
                (ready if single[eclass[node]] else heap).append((cost[node], node))
        heapq.heapify(heap)
        finalized: list[int] = []
        while ready or heap:
            total, node = ready.pop() if ready else heapq.heappop(heap)
            c = eclass[node]
            if self.choice[c] >= 0:
                continue
            best[c] = total
            self.choice[c] = node
            finalized.append(c)
            for user in self.parent[self.parent_ptr[c]:self.parent_ptr[c + 1]]:
                pending[user] -= 1
                if pending[user] == 0:
                    t = min(cost[user] + sum(map(best.__getitem__, child[ptr[user]:ptr[user + 1]])),
                            TREE_COST_CAP)
                    self.node_total[user] = t
                    if single[eclass[user]]:
                        ready.append((t, user))
                    else:
                        heapq.heappush(heap, (t, user))
        height = self.height
        for c in finalized:                     # operands are finalized before their users
            node = self.choice[c]
            self.node_total[node] = best[c]
            height[c] = HEIGHT_STEP + max(map(height.__getitem__, self._operands(node)),
                                          default=-HEIGHT_STEP)

    # --- 2. DAG improvement ----------------------------------------------------------------
    def count_references(self, roots: list[int]) -> None:
        self.refs = [0] * self.n_classes
        self.dag_cost = 0.0
        for r in roots:
            self.dag_cost += self._acquire([r], [])

    def _operands(self, node: int) -> list[int]:
        return self.child[self.ptr[node]:self.ptr[node + 1]]

    def _acquire(self, classes: list[int], log: list[int], limit: float = math.inf) -> float:
        """Reference `classes`; those that become live bring their operands. Returns the
        cost added, or inf once more than `limit` classes were touched (a node that needs a
        large part of the e-graph revived is not worth the walk). `log` records every class
        touched (+c), for undo."""
        added = 0.0
        stack = list(classes)
        start = len(log)
        while stack:
            c = stack.pop()
            self.refs[c] += 1
            log.append(c)
            if self.refs[c] == 1:
                node = self.choice[c]
                added += self.cost[node]
                stack.extend(self._operands(node))
                if len(log) - start > limit:
                    added = math.inf
                    break
        self.work += len(log) - start
        return added

    def _release(self, classes: list[int], log: list[int]) -> float:
        """Drop references; classes no longer needed release theirs. Returns the cost saved.
        `log` records every class touched (~c), for undo."""
        saved = 0.0
        stack = list(classes)
        start = len(log)
        while stack:
            c = stack.pop()
            self.refs[c] -= 1
            log.append(~c)
            if self.refs[c] == 0:
                node = self.choice[c]
                saved += self.cost[node]
                stack.extend(self._operands(node))
        self.work += len(log) - start
        return saved

    def _undo(self, log: list[int]) -> None:
        for entry in reversed(log):
            if entry >= 0:
                self.refs[entry] -= 1
            else:
                self.refs[~entry] += 1

    def improve(self) -> int:
        """Improvement passes until one changes nothing; returns the passes run."""
        self.work = 0
        budget = WORK_PER_NODE * len(self.eclass) + 10_000
        self.activation_limit = max(1000, len(self.eclass) // 10)
        candidates = [c for c in range(self.n_classes)
                      if self.member_ptr[c + 1] - self.member_ptr[c] > 1 and self.choice[c] >= 0]
        candidates.sort(key=self.height.__getitem__)
        for passes in range(1, MAX_PASSES + 1):
            changed = False
            for c in candidates:
                if self.refs[c] and self._improve_class(c):
                    changed = True
                if self.work > budget:
                    return passes
            if not changed:
                return passes
        return MAX_PASSES

    def _improve_class(self, c: int) -> bool:
        members = self.members[self.member_ptr[c]:self.member_ptr[c + 1]]
        members.sort(key=lambda n: (self.node_total[n], n))
        changed = False
        for node in members:
            current = self.choice[c]
            if node == current or self.node_total[node] == math.inf:
                continue
            operands = self._operands(node)
            if sorted(operands) == sorted(self._operands(current)):   # e.g. commuted
                if self.cost[node] < self.cost[current] - _EPS:
                    self.choice[c] = node
                    self.dag_cost += self.cost[node] - self.cost[current]
                    changed = True
                continue
            log: list[int] = []
            # The change in cost first (safe: refcounts stop at live classes, so this
            # terminates even if the node would close a cycle), the costlier cycle test only
            # for an improvement.
            delta = self.cost[node] - self.cost[current] + \
                self._acquire(operands, log, self.activation_limit)
            if delta < math.inf:
                delta -= self._release(self._operands(current), log)
            if delta < -_EPS * max(1.0, self.dag_cost) and not self._closes_cycle(c, operands):
                self.choice[c] = node
                self.dag_cost += delta
                self._raise(c, operands)
                changed = True
            else:
                self._undo(log)
        return changed

    def _closes_cycle(self, c: int, operands: list[int]) -> bool:
        """Would choosing a node with these operands for class c make c reach itself? Only
        classes higher than c can reach it. A search longer than CYCLE_SEARCH_LIMIT answers
        yes: rejecting a good node is safe, a cycle is not."""
        height = self.height
        floor = height[c]
        stack = [k for k in operands if height[k] >= floor]
        seen = set()
        while stack:
            k = stack.pop()
            if k == c or len(seen) > CYCLE_SEARCH_LIMIT:
                self.work += len(seen)
                return True
            if k in seen:
                continue
            seen.add(k)
            stack.extend(j for j in self._operands(self.choice[k]) if height[j] >= floor)
        self.work += len(seen)
        return False

    def _raise(self, c: int, operands: list[int]) -> None:
        """Restore `height[user] > height[operand]` on chosen edges after class c changed
        node (heights only grow: a potential need not be tight)."""
        height = self.height
        stack = [(c, 1 + max(map(height.__getitem__, operands), default=-1))]
        while stack:
            k, need = stack.pop()
            if height[k] >= need:
                continue
            height[k] = need
            for user in self.parent[self.parent_ptr[k]:self.parent_ptr[k + 1]]:
                u = self.eclass[user]
                if self.choice[u] == user:
                    stack.append((u, need + 1))
            self.work += 1

    # --- result ----------------------------------------------------------------------------
    def topological_order(self) -> list[int]:
        """The needed classes by height: operands come first because every chosen edge goes
        down in height, which also proves the choice acyclic (asserted)."""
        height = np.array(self.height)
        live = np.flatnonzero(np.array(self.refs))
        nodes = np.array(self.choice)[live]
        ptr = np.array(self.ptr)
        count = ptr[nodes + 1] - ptr[nodes]
        first = np.repeat(ptr[nodes] - np.cumsum(count) + count, count)
        operands = np.array(self.child, dtype=np.int64)[first + np.arange(count.sum())]
        assert (height[operands] < np.repeat(height[live], count)).all(), \
            "extraction chose a cycle"
        return live[np.argsort(height[live], kind="stable")].tolist()
