"""`--emit=dot`: an optimized module's kernels as a Graphviz picture (docs/pictures.md).

Each kernel (an instruction the target's cost model runs as a kernel, as `module_cost`
counts them) is a cluster filled with the colour of its kind and holding its fused
instructions; a value passing from one kernel (or parameter, or constant) to another is an
edge labelled with its size in bytes; the costliest kernels have a red bold border, their
rank, and every kernel its estimated time and share of the module's. Views (bitcast,
reshape) and get-tuple-element are not drawn: an edge goes through them to the value's
producer. A while loop, conditional or call is a node whose called computations (body and
condition, branches) are dashed clusters drawn the same way, joined to it by a dashed edge.
"""
from __future__ import annotations

from collections import Counter

from ..ir import Computation, Instruction, Module
from ..kernels import executed_computations
from ..memory import human_bytes
from ..ops import CONTROL, OPS, VIEWS
from ..targets import CostModel, kernel_view
from .graphviz import attrs, header, quote, shape_label

HOT_KERNELS = 3         # at most this many costliest kernels are highlighted,
HOT_SHARE = 0.05        # those taking at least this share of the time (the costliest always)
MEMBER_LIMIT = 40       # a kernel with more members is one node counting their opcodes,
DETAIL_LIMIT = 2000     # and every kernel is, when all kernels have more members than this
                        # (XLA's 507 kernels of 7,043 members for a transformer step: dot
                        # gave up after 17 minutes, 3 s so; 1,658 members in detail take 2 s)
# dot lays out an edge's label as a node of its own between two ranks: with hundreds of
# them a picture takes dot minutes (a 77-kernel transformer: 26 s, 1.2 s without), so past
# this many the sizes become `xlabel`s, placed after the layout (they may overlap there).
EDGE_LABEL_LIMIT = 150
HOT_COLOUR = "#d62728"

# kind -> (legend text, fill colour); a kind is also the cluster's SVG class
KINDS = {
    "loop": ("elementwise loop (kLoop)", "#cfe2ff"),
    "reduction": ("reduction (kInput)", "#c8efd4"),
    "contraction": ("dot / convolution (kOutput)", "#ffe2a0"),
    "data-movement": ("copy / transpose / layout", "#e3e3e3"),
    "collective": ("collective", "#c7ecf0"),
    "library": ("custom call / library / other", "#f3cdee"),
}
_FUSION_KINDS = {"kLoop": "loop", "kInput": "reduction", "kOutput": "contraction"}
_CATEGORY_KINDS = {"reduction": "reduction", "contraction": "contraction",
                   "data_movement": "data-movement", "collective": "collective",
                   **dict.fromkeys(("unary", "binary", "ternary", "convert", "compare", "leaf"),
                                   "loop")}
_COPIES = frozenset({"copy", "copy-start", "copy-done"})


def fusion_dot(module: Module, model: CostModel) -> str:
    """The DOT text of `module`'s kernels priced by `model`."""
    return _Picture(module, model).dot()


def kernel_kind(inst: Instruction) -> str:
    """The colour class of a kernel: a fusion's XLA kind, an unfused op's category."""
    if inst.opcode == "fusion":
        return _FUSION_KINDS.get(inst.attrs.get("kind", "kLoop"), "library")
    if inst.opcode in _COPIES:
        return "data-movement"
    info = OPS.get(inst.opcode)
    return _CATEGORY_KINDS.get(info.category if info else "other", "library")


class _Picture:
    """Draws the entry and, nested in clusters, the computations its control flow runs.
    Nodes come first; the edges between kernels are resolved once every node exists."""

    def __init__(self, module: Module, model: CostModel):
        self.module, self.model = module, model
        self.cost = {id(inst): model.kernel_cost(kernel_view(inst))
                     for comp in executed_computations(module)
                     for inst in comp.instructions if model.runs_as_kernel(inst)}
        self.total = sum(self.cost.values())
        ranked = sorted(self.cost, key=self.cost.__getitem__, reverse=True)[:HOT_KERNELS]
        self.rank = {k: r for r, k in enumerate(ranked, 1)
                     if r == 1 or self.cost[k] >= HOT_SHARE * self.total}
        self.lines: list[str] = []
        self.edges: list[str] = []
        self.reads: list[tuple[str, Instruction]] = []     # (node, the value it reads)
        self.node_of: dict[int, str] = {}                  # id(inst) -> node with its value
        self.elements: dict[int, list[str]] = {}           # id(multi-output kernel) -> nodes
        self.anchor: dict[int, tuple[str, str]] = {}       # id(comp) -> (node, its cluster)
        self.names: set[str] = set()
        self.kinds: set[str] = set()
        self.count = 0
        members = sum(len(_members(inst)) for comp in executed_computations(module)
                      for inst in comp.instructions
                      if id(inst) in self.cost and inst.opcode == "fusion")
        self.member_limit = MEMBER_LIMIT if members <= DETAIL_LIMIT else 0
        self.note = "" if self.member_limit else \
            f" (their {members:,} fused instructions are counted, not drawn)"

    def dot(self) -> str:
        title = (f"{self.module.name} on {self.model.name}: {len(self.cost)} kernels, "
                 f"estimated {_duration(self.total)}{self.note}")
        self.lines += header(self.module.name, title)
        self._computation(self.module.entry)
        label = "label" if len(self.reads) <= EDGE_LABEL_LIMIT else "xlabel"
        for node, value in self.reads:
            self.edges.append(f"{self._source(value)} -> {node}"
                              + attrs(**{label: human_bytes(value.shape.byte_size)}))
        self.lines.append(self._legend())
        return "\n".join(self.lines + self.edges + ["}", ""])

    def _computation(self, comp: Computation) -> str:
        """Draws `comp`; returns the node a dashed edge from its caller points at."""
        for inst in comp.instructions:
            if self.model.runs_as_kernel(inst):
                self._kernel(inst)
            elif inst.opcode not in VIEWS and inst.opcode != "get-tuple-element":
                self._host(inst)
        root = self._node(f"ROOT\n{shape_label(comp.root.shape)}", shape="house")
        self.reads.append((root, comp.root))
        params = comp.parameters
        return self.node_of[id(params[0])] if params else root

    def _kernel(self, inst: Instruction) -> None:
        kind = kernel_kind(inst)
        self.kinds.add(kind)
        cost, rank = self.cost[id(inst)], self.rank.get(id(inst))
        share = cost / self.total if self.total else 0.0
        label = f"{inst.name} · {kind}\n{_duration(cost)} ({share:.0%})"
        hot = {"color": HOT_COLOUR, "penwidth": 3, "style": "filled,bold",
               "label": f"#{rank} costliest: {label}"} if rank else {}
        self._open_cluster(inst.name, **{"class": f"kernel {kind}" + (" hot" if rank else ""),
                                         "style": "filled", "fillcolor": KINDS[kind][1],
                                         "color": "#777777", "label": label, **hot})
        if inst.opcode == "fusion":
            self._fused(inst)
        else:
            node = self.node_of[id(inst)] = self._node(inst.opcode)
            self.reads += [(node, o) for o in _distinct(inst.operands)]
        self.lines.append("}")

    def _fused(self, inst: Instruction) -> None:
        """The fused computation's members inside the kernel's cluster; its parameters are
        points where the kernel's inputs arrive."""
        body = inst.attrs["calls"]
        members = _members(inst)
        if len(members) > self.member_limit:
            counts = Counter(m.opcode for m in members).most_common()
            text = ", ".join(f"{n} {op}" for op, n in counts[:4])
            summary = self._node(f"{len(members)} ops: {text}{', ...' if len(counts) > 4 else ''}")
            node = {id(m): summary for m in body.instructions}
        else:
            node = {id(m): self._node(m.opcode) if m.opcode != "parameter" else
                    self._node("", shape="point", width=0.08) for m in body.instructions}
            self.edges += [f"{node[id(o)]} -> {node[id(m)]}" for m in members
                           for o in _distinct(m.operands)]
        self.reads += [(node[id(p)], inst.operands[p.parameter_number])
                       for p in body.parameters]
        root = body.root
        self.node_of[id(inst)] = node[id(root)]
        if root.opcode == "tuple":
            self.elements[id(inst)] = [node[id(o)] for o in root.operands]

    def _host(self, inst: Instruction) -> None:
        """Parameters, constants, tuples, control flow: nodes outside the kernels."""
        if inst.opcode == "parameter":
            node = self._node(f"{inst.name}\n{shape_label(inst.shape)}", shape="ellipse")
        elif inst.opcode == "constant":
            node = self._node(f"constant\n{shape_label(inst.shape)}", shape="note")
        elif inst.opcode in CONTROL:
            node = self._node(f"{inst.opcode} {inst.name}", shape="box3d", style="filled",
                              fillcolor="#fff7d6")
        else:
            node = self._node(inst.opcode)
        self.node_of[id(inst)] = node
        self.reads += [(node, o) for o in _distinct(inst.operands)]
        if inst.opcode in CONTROL:
            for role, callee in _callees(inst):
                if id(callee) not in self.anchor:
                    cluster = self._open_cluster(
                        callee.name, style="dashed", color="#777777",
                        label=f"{role} of {inst.name}: {callee.name}",
                        **{"class": "computation"})
                    self.anchor[id(callee)] = (self._computation(callee), cluster)
                    self.lines.append("}")
                head, cluster = self.anchor[id(callee)]
                self.edges.append(f"{node} -> {head}" + attrs(
                    lhead=cluster, style="dashed", label=role, arrowhead="empty"))

    def _open_cluster(self, name: str, **graph_attrs) -> str:
        cluster = f"cluster_{name}"
        while cluster in self.names:
            cluster = f"{cluster}'"
        self.names.add(cluster)
        self.lines += [f"subgraph {quote(cluster)} {{", "graph" + attrs(**graph_attrs)]
        return cluster

    def _node(self, label: str, **node_attrs) -> str:
        self.count += 1
        node = f"n{self.count}"
        self.lines.append(node + attrs(label=label, **node_attrs))
        return node

    def _source(self, value: Instruction) -> str:
        """The node that holds `value`: through views and get-tuple-element to the kernel
        output, tuple element or host node computing it."""
        while id(value) not in self.node_of:
            if value.opcode == "get-tuple-element":
                whole, index = value.operands[0], value.attrs["index"]
                if id(whole) in self.elements:
                    return self.elements[id(whole)][index]
                value = whole.operands[index] if whole.opcode == "tuple" else whole
            else:
                value = value.operands[0]
        return self.node_of[id(value)]

    def _legend(self) -> str:
        rows = "".join(f'<tr><td bgcolor="{KINDS[k][1]}">   </td>'
                       f'<td align="left">{KINDS[k][0]}</td></tr>'
                       for k in KINDS if k in self.kinds)
        rows += (f'<tr><td color="{HOT_COLOUR}" border="3">   </td>'
                 f'<td align="left">costliest kernels (up to {HOT_KERNELS}, '
                 f'{HOT_SHARE:.0%} of the time or more)</td></tr>')
        return ('legend [shape=plaintext, style="", class="legend", label=<<table border="0" '
                'cellborder="1" cellspacing="2" cellpadding="3"><tr><td colspan="2">'
                f'<b>kernel kinds</b></td></tr>{rows}</table>>]')


def _callees(inst: Instruction):
    """(role, computation) of a control instruction: body, condition, branch i, to_apply."""
    for key, value in inst.attrs.items():
        if isinstance(value, Computation):
            yield key, value
        elif isinstance(value, tuple) and value and isinstance(value[0], Computation):
            yield from ((f"branch {i}", c) for i, c in enumerate(value))


def _members(fusion: Instruction) -> list[Instruction]:
    return [m for m in fusion.attrs["calls"].instructions if m.opcode != "parameter"]


def _distinct(operands: list[Instruction]) -> list[Instruction]:
    return list({id(o): o for o in operands}.values())


def _duration(ns: float) -> str:
    if ns < 1e3:
        return f"{ns:.0f} ns"
    return f"{ns / 1e3:.1f} us" if ns < 1e6 else f"{ns / 1e6:.2f} ms"
