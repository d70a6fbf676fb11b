"""`--emit=egraph-dot`: the saturated e-graph of a small module as a Graphviz picture.

Each e-class is a cluster labelled with its number and type, holding its e-nodes (opcode; a
parameter's number, a scalar constant's value); an edge runs from an e-node to each of its
operand e-classes. The e-nodes extraction chose, the program written out before fusion, are
filled orange. An e-class with several e-nodes is where the rules proved terms equal: the
root class of `x * 1 + 0` holds the add, the multiply and the parameter x itself.

The picture is drawn by an `observe` hook of optimize (egraph/pipeline.py) while the e-graph
is alive, from the frozen term arrays only.
"""
from __future__ import annotations

from collections import defaultdict

from ..errors import HloError
from .graphviz import attrs, header, quote, shape_label

NODE_LIMIT = 1000      # larger e-graphs make pictures nobody can read, and take dot minutes
CHOSEN_COLOUR = "#ffb347"


class EgraphPicture:
    """An `observe` hook for optimize: keeps the DOT text of the saturated e-graph in
    `dot`, or raises HloError when it has more than `limit` e-nodes (default NODE_LIMIT)."""

    def __init__(self, title: str, limit: int | None = None):
        self.title, self.limit = title, NODE_LIMIT if limit is None else limit
        self.dot: str | None = None

    def __call__(self, terms, extractions) -> None:
        if len(terms) > self.limit:
            raise HloError(f"--emit=egraph-dot draws e-graphs of at most {self.limit:,} "
                           f"e-nodes; this one has {len(terms):,} after saturation (draw a "
                           f"smaller module, or --emit=dot for the kernels)")
        chosen = {int(node) for ex in extractions for node in ex.choice if node >= 0}
        self.dot = _dot(self.title, terms, chosen)


def _dot(title: str, terms, chosen: set[int]) -> str:
    classes: dict[int, list[int]] = defaultdict(list)
    for node, c in enumerate(terms.eclass.tolist()):
        classes[c].append(node)
    shown = {c: next((n for n in nodes if n in chosen), nodes[0]) for c, nodes in classes.items()}
    lines = header(title, f"{title}: {len(terms)} e-nodes in {terms.n_classes} e-classes; "
                          f"extracted e-nodes filled")
    edges = []
    for c, nodes in sorted(classes.items()):
        text = shape_label(terms.shape(int(terms.class_type[c])))
        lines += [f"subgraph {quote(f'cluster_e{c}')} {{",
                  "graph" + attrs(label=f"e{c}: {text}", style="rounded", color="#777777",
                                  **{"class": "eclass"})]
        for node in nodes:
            extracted = node in chosen
            lines.append(f"n{node}" + attrs(
                label=_label(terms, node),
                fillcolor=CHOSEN_COLOUR if extracted else None,
                **{"class": "extracted" if extracted else None}))
            # an operand in the node's own class (x = x * 1) points at no cluster border
            edges += [f"n{node} -> n{shown[k]}" + attrs(lhead=f"cluster_e{k}" if k != c else None)
                      for k in dict.fromkeys(terms.children(node).tolist())]
        lines.append("}")
    return "\n".join(lines + edges + ["}", ""])


def _label(terms, node: int) -> str:
    opcode = terms.opnames[terms.op[node]]
    key = int(terms.key[node])
    if opcode == "parameter":
        return f"parameter {key}"
    if opcode == "constant":
        return f"constant {terms.attr_value(int(terms.attr[node]))[1][0]}" if key == 0 \
            else f"constant #{key}"
    return opcode
