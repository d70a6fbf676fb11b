"""The topological order the fusion partition keeps while kernels merge (fusion/topo_order.py):
a merge is refused exactly when the merged node would depend on itself, and otherwise the
re-ordered places are again a topological order of the merged graph."""
from __future__ import annotations

import random

import pytest

from hlo_opt.fusion.topo_order import closure, merge_moves, reorder


class Node:
    def __init__(self, name: str, order: int):
        self.name, self.order = name, order

    def __repr__(self) -> str:
        return f"{self.name}@{self.order}"


class Graph:
    """Nodes with edges; merging two keeps the first object for the merged node."""

    def __init__(self, orders: dict[str, int], edges: list[tuple[str, str]]):
        self.nodes = {name: Node(name, order) for name, order in orders.items()}
        self.succs = {n: set() for n in self.nodes.values()}
        self.preds = {n: set() for n in self.nodes.values()}
        for u, v in edges:
            self.add_edge(self.nodes[u], self.nodes[v])

    def add_edge(self, u: Node, v: Node) -> None:
        self.succs[u].add(v)
        self.preds[v].add(u)

    def merge(self, a: Node, b: Node) -> bool:
        """Merge b into a as the partition does; False (graph unchanged) if refused."""
        lo = min(a.order, b.order)
        pair = {a, b}
        late = {p for p in (self.preds[a] | self.preds[b]) - pair if p.order > lo}
        succs = (self.succs[a] | self.succs[b]) - pair
        moves = merge_moves(lo, late, succs, self.succs.__getitem__, self.preds.__getitem__)
        if moves is None:
            return False
        for p in self.preds.pop(b):
            self.succs[p].discard(b)
            if p is not a:
                self.add_edge(p, a)
        for s in self.succs.pop(b):
            self.preds[s].discard(b)
            if s is not a:
                self.add_edge(a, s)
        del self.nodes[b.name]
        reorder(lo, a, moves)
        return True

    def is_topological(self) -> bool:
        orders = [n.order for n in self.nodes.values()]
        return len(set(orders)) == len(orders) and all(
            u.order < v.order for u, vs in self.succs.items() for v in vs)

    def cyclic_if_merged(self, a: Node, b: Node) -> bool:
        """Brute force: is there a path of length two or more between a and b?"""
        def reaches(src: Node, dst: Node) -> bool:
            seen, stack = set(), [s for s in self.succs[src] if s is not dst]
            while stack:
                n = stack.pop()
                if n is dst:
                    return True
                if n not in seen:
                    seen.add(n)
                    stack.extend(self.succs[n])
            return False
        return reaches(a, b) or reaches(b, a)


def test_a_merge_with_no_predecessor_after_the_earlier_place_moves_nothing():
    g = Graph({"a": 0, "b": 1, "c": 2}, [("a", "c"), ("b", "c")])
    assert merge_moves(0, set(), {g.nodes["c"]}, g.succs.__getitem__,
                       g.preds.__getitem__) == (set(), set())
    assert g.merge(g.nodes["a"], g.nodes["b"]) and g.is_topological()


def test_merging_the_ends_of_a_path_is_refused():
    g = Graph({"a": 0, "b": 1, "c": 2}, [("a", "b"), ("b", "c")])
    assert not g.merge(g.nodes["a"], g.nodes["c"])
    assert set(g.nodes) == {"a", "b", "c"} and g.is_topological()


def test_a_late_predecessor_moves_before_the_merged_node_and_its_successors_after():
    g = Graph({"a": 0, "s": 1, "p": 2, "b": 3}, [("a", "s"), ("p", "b")])
    assert g.merge(g.nodes["a"], g.nodes["b"])
    assert sorted(g.nodes.values(), key=lambda n: n.order) == [
        g.nodes["p"], g.nodes["a"], g.nodes["s"]]
    assert g.is_topological()


def test_only_nodes_between_the_two_places_move():
    g = Graph({"x": 0, "a": 1, "s": 2, "p": 3, "b": 4, "y": 5},
              [("x", "a"), ("a", "s"), ("p", "b"), ("b", "y")])
    x, y = g.nodes["x"], g.nodes["y"]
    assert g.merge(g.nodes["a"], g.nodes["b"])
    assert (x.order, y.order) == (0, 5) and g.is_topological()


def test_closure_stops_at_the_window_and_reports_a_stop_node():
    g = Graph({"a": 0, "b": 1, "c": 2, "d": 3}, [("a", "b"), ("b", "c"), ("c", "d")])
    a, b, c, d = (g.nodes[n] for n in "abcd")
    assert closure({a}, g.succs.__getitem__, lambda n: n.order < 3) == {a, b, c}
    assert closure({a}, g.succs.__getitem__, lambda n: n.order < 3, stop={c}) is None
    assert closure({d}, g.succs.__getitem__, lambda n: True, stop={a}) == {d}


@pytest.mark.parametrize("seed", range(20))
def test_random_merges_are_refused_exactly_when_cyclic_and_keep_the_order(seed):
    rng = random.Random(seed)
    n = 30
    places = rng.sample(range(3 * n), n)          # a topological order with gaps
    places.sort()
    edges = [(f"n{i}", f"n{j}") for i in range(n) for j in range(i + 1, n)
             if rng.random() < 0.12]
    g = Graph({f"n{i}": places[i] for i in range(n)}, edges)
    refused = 0
    while len(g.nodes) > 3:
        a, b = rng.sample(list(g.nodes.values()), 2)
        cyclic = g.cyclic_if_merged(a, b)
        assert g.merge(a, b) != cyclic
        refused += cyclic
        assert g.is_topological()
        if refused > 50:
            break
    assert refused > 0
