"""A topological order kept while pairs of nodes of a DAG merge into one.

Nodes carry an `order` (distinct ints, every edge going from a lower to a higher one). When
two nodes merge, the merged node takes the earlier place `lo` of the two; the order then
stays topological but for edges into it from its predecessors placed after `lo` (`late`).
Following Pearce and Kelly's dynamic topological sort, only nodes between `lo` and the last
of those can close a cycle or need to move: the merged node's successors ordered before the
last late predecessor, and the nodes reaching a late predecessor ordered after `lo`. So a
merge costs about the nodes between the two places, not the whole graph.
"""
from __future__ import annotations

from typing import Callable, Iterable, Protocol, TypeVar


class Ordered(Protocol):
    order: int


N = TypeVar("N", bound=Ordered)
Step = Callable[[N], Iterable[N]]


def merge_moves(lo: int, late: set[N], succs: Iterable[N], succs_of: Step, preds_of: Step
                ) -> tuple[set[N], set[N]] | None:
    """None if the node merging two would depend on itself. Else the nodes to re-order
    around it: those that must come before it, and those after it that must move with it.
    `lo`: the earlier place of the two; `late`: the merged node's predecessors placed after
    it; `succs`: its successors; `succs_of`, `preds_of`: any other node's."""
    if not late:
        return set(), set()
    bound = max(p.order for p in late)
    after = closure(succs, succs_of, lambda n: n.order < bound, stop=late)
    if after is None:
        return None
    before = closure(late, preds_of, lambda n: n.order > lo)
    return before, after


def reorder(lo: int, merged: N, moves: tuple[set[N], set[N]]) -> None:
    """Place `merged` and the nodes merge_moves returned in the places they and `lo` held:
    those that come before it first, each group in its old relative order."""
    slots = sorted([lo] + [n.order for n in moves[0] | moves[1]])
    before, after = (sorted(group, key=_by_order) for group in moves)
    for n, slot in zip(before + [merged] + after, slots):
        n.order = slot


def closure(start: Iterable[N], step: Step, within: Callable[[N], bool],
            stop: set[N] = frozenset()) -> set[N] | None:
    """Nodes reachable from `start` by `step` while `within` holds; None if one in `stop`
    is reached."""
    start = set(start)
    if not stop.isdisjoint(start):
        return None
    seen = {n for n in start if within(n)}
    stack = list(seen)
    while stack:
        for n in step(stack.pop()):
            if n in stop:
                return None
            if n not in seen and within(n):
                seen.add(n)
                stack.append(n)
    return seen


def _by_order(n: Ordered) -> int:
    return n.order
