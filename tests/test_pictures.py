"""Pictures (docs/pictures.md): `hlo-opt --emit=dot|svg|png` draws the optimized module's
kernels as Graphviz clusters coloured by kind, edges labelled with the bytes between them,
the costliest kernels highlighted; `--emit=egraph-dot` draws the saturated e-graph."""
from __future__ import annotations

import re
import shutil
import sys
import xml.etree.ElementTree as ET

import pytest

from hlo_opt import HloError, parse
from hlo_opt.egraph.pipeline import optimize
from hlo_opt.kernels import kernel_report
from hlo_opt.targets import cost_model
from hlo_opt.tools import graphviz
from hlo_opt.tools.egraph_dot import EgraphPicture
from hlo_opt.tools.fusion_dot import HOT_COLOUR, KINDS, fusion_dot
from hlo_opt.tools.hlo_opt_cli import main

ADD = """add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
"""

# A module as fusion leaves it: a multi-output dot kernel, an unfused reduce, a loop fusion
# and a layout-changing copy.
FUSED = f"""HloModule fused

{ADD}
fused_dot {{
  p0 = f32[64,128] parameter(0)
  p1 = f32[128,256] parameter(1)
  d = f32[64,256] dot(p0, p1), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  t = f32[64,256] tanh(d)
  c = f32[256,64] transpose(t), dimensions={{1,0}}
  ROOT tuple = (f32[64,256], f32[256,64]) tuple(t, c)
}}

fused_scale {{
  q = f32[64] parameter(0)
  half = f32[] constant(0.5)
  b = f32[64] broadcast(half), dimensions={{}}
  ROOT m = f32[64] multiply(q, b)
}}

ENTRY e {{
  x = f32[64,128] parameter(0)
  w = f32[128,256] parameter(1)
  dot_fusion = (f32[64,256], f32[256,64]) fusion(x, w), kind=kOutput, calls=fused_dot
  t.1 = f32[64,256] get-tuple-element(dot_fusion), index=0
  c.1 = f32[256,64] get-tuple-element(dot_fusion), index=1
  z = f32[] constant(0)
  r = f32[64] reduce(t.1, z), dimensions={{1}}, to_apply=add
  s = f32[64] fusion(r), kind=kLoop, calls=fused_scale
  k = f32[256,64]{{0,1}} copy(c.1)
  ROOT out = (f32[64], f32[256,64]{{0,1}}) tuple(s, k)
}}
"""

LOOP = f"""HloModule loop

body {{
  st = (s32[], f32[1024]) parameter(0)
  i = s32[] get-tuple-element(st), index=0
  v = f32[1024] get-tuple-element(st), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one)
  e = f32[1024] exponential(v)
  ROOT next = (s32[], f32[1024]) tuple(j, e)
}}

cond {{
  st = (s32[], f32[1024]) parameter(0)
  i = s32[] get-tuple-element(st), index=0
  n = s32[] constant(10)
  ROOT lt = pred[] compare(i, n), direction=LT
}}

ENTRY e {{
  x = f32[1024] parameter(0)
  zero = s32[] constant(0)
  init = (s32[], f32[1024]) tuple(zero, x)
  loop = (s32[], f32[1024]) while(init), condition=cond, body=body
  ROOT v = f32[1024] get-tuple-element(loop), index=1
}}
"""

# The same computation before optimization, for the command line.
UNFUSED = f"""HloModule small

{ADD}
ENTRY e {{
  x = f32[64,128] parameter(0)
  w = f32[128,256] parameter(1)
  d = f32[64,256] dot(x, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  t = f32[64,256] tanh(d)
  z = f32[] constant(0)
  r = f32[64] reduce(t, z), dimensions={{1}}, to_apply=add
  c = f32[256,64] transpose(t), dimensions={{1,0}}
  ROOT out = (f32[64], f32[256,64]) tuple(r, c)
}}
"""

X_TIMES_ONE_PLUS_ZERO = """HloModule simplify
ENTRY e {
  x = f32[4] parameter(0)
  one = f32[] constant(1)
  ones = f32[4] broadcast(one), dimensions={}
  zero = f32[] constant(0)
  zeros = f32[4] broadcast(zero), dimensions={}
  m = f32[4] multiply(x, ones)
  ROOT a = f32[4] add(m, zeros)
}
"""

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SVG = "{http://www.w3.org/2000/svg}"


class Dot:
    """The pictures' DOT text read back: one statement a line, as the writers print it.
    `clusters`: name -> (graph attributes, parent cluster or None); `nodes`: id ->
    (attributes, cluster or None); `edges`: (tail, head, attributes)."""
    ATTR = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')

    def __init__(self, text: str):
        self.clusters: dict[str, tuple[dict, str | None]] = {}
        self.nodes: dict[str, tuple[dict, str | None]] = {}
        self.edges: list[tuple[str, str, dict]] = []
        stack: list[str] = []
        for line in text.splitlines()[1:]:
            if m := re.match(r'subgraph "(cluster_[^"]*)" \{', line):
                self.clusters[m[1]] = ({}, stack[-1] if stack else None)
                stack.append(m[1])
            elif line == "}":
                if stack:
                    stack.pop()
            elif line.startswith("graph [") and stack:
                self.clusters[stack[-1]][0].update(self.attrs(line))
            elif m := re.match(r"(n\d+) -> (n\d+)", line):
                self.edges.append((m[1], m[2], self.attrs(line)))
            elif m := re.match(r"(n\d+) \[", line):
                self.nodes[m[1]] = (self.attrs(line), stack[-1] if stack else None)

    def attrs(self, line: str) -> dict:
        return {k: v.replace("\\n", "\n").replace('\\"', '"') for k, v in self.ATTR.findall(line)}

    def kernels(self) -> dict[str, dict]:
        return {name.removeprefix("cluster_"): attrs for name, (attrs, _) in self.clusters.items()
                if attrs.get("class", "").startswith("kernel")}

    def cluster_of(self, node: str) -> str | None:
        return self.nodes[node][1]

    def labels_in(self, cluster: str) -> list[str]:
        return sorted(a.get("label", "") for a, c in self.nodes.values() if c == cluster)

    def edge_labels(self, tail_cluster: str, head_cluster: str) -> list[str]:
        return sorted(a.get("label") or a.get("xlabel") for t, h, a in self.edges
                      if self.cluster_of(t) == tail_cluster and self.cluster_of(h) == head_cluster)


def fused_picture(text: str = FUSED, target: str = "cpu") -> Dot:
    return Dot(fusion_dot(parse(text), cost_model(target)))


def has_renderer() -> bool:
    if shutil.which("dot"):
        return True
    try:
        import pygraphviz  # noqa: F401
    except ImportError:
        return False
    return True


needs_renderer = pytest.mark.skipif(not has_renderer(),
                                    reason="neither Graphviz's dot nor pygraphviz (extra graph)")


def test_each_kernel_is_one_cluster_coloured_by_its_kind():
    dot = fused_picture()
    kinds = {name: attrs["class"].split()[1] for name, attrs in dot.kernels().items()}
    assert kinds == {"dot_fusion": "contraction", "r": "reduction", "s": "loop",
                     "k": "data-movement"}
    for name, attrs in dot.kernels().items():
        assert attrs["fillcolor"] == KINDS[kinds[name]][1]
        assert attrs["label"].split("\n")[0].endswith(f"{name} · {kinds[name]}")
    # the fused instructions are its nodes; its parameters are points where inputs arrive
    assert [lab for lab in dot.labels_in("cluster_dot_fusion") if lab] == \
        ["dot", "tanh", "transpose", "tuple"]
    assert dot.labels_in("cluster_r") == ["reduce"]
    text = fusion_dot(parse(FUSED), cost_model("cpu"))
    legend = next(line for line in text.splitlines() if line.startswith("legend "))
    assert all(KINDS[k][0] in legend for k in kinds.values())


def test_edges_between_kernels_carry_the_bytes_of_the_value():
    dot = fused_picture()
    # t (f32[64,256]) from the dot kernel's tanh into the reduce; c into the copy
    assert dot.edge_labels("cluster_dot_fusion", "cluster_r") == ["64.0 KiB"]
    assert dot.edge_labels("cluster_dot_fusion", "cluster_k") == ["64.0 KiB"]
    assert dot.edge_labels("cluster_r", "cluster_s") == ["256 bytes"]
    inputs = sorted(a["label"] for t, h, a in dot.edges
                    if dot.cluster_of(h) == "cluster_dot_fusion" and dot.cluster_of(t) is None)
    assert inputs == ["128.0 KiB", "32.0 KiB"]      # w f32[128,256], x f32[64,128]
    # edges inside a kernel are not priced
    assert all("label" not in a for t, h, a in dot.edges
               if dot.cluster_of(t) == dot.cluster_of(h) == "cluster_dot_fusion")


def test_the_costliest_kernel_is_highlighted_with_its_cost_and_share():
    model = cost_model("cpu")
    module = parse(FUSED)
    kernels = fused_picture().kernels()
    hot = kernels["dot_fusion"]
    assert hot["color"] == HOT_COLOUR and "hot" in hot["class"].split()
    assert re.fullmatch(r"#1 costliest: dot_fusion · contraction\n[\d.]+ (ns|us|ms) \(\d+%\)",
                        hot["label"])
    share = int(re.search(r"\((\d+)%\)", hot["label"])[1])
    assert share > 50
    # a kernel taking a sliver of the time is not highlighted
    assert kernels["s"]["color"] != HOT_COLOUR and "#" not in kernels["s"]["label"]
    total = model.module_cost(module)
    assert f"estimated {total / 1e3:.1f} us" in fusion_dot(module, model).splitlines()[1]


def test_big_modules_draw_each_kernel_as_one_node_counting_its_instructions(monkeypatch):
    monkeypatch.setattr("hlo_opt.tools.fusion_dot.DETAIL_LIMIT", 6)     # FUSED has 7
    dot = fused_picture()
    assert dot.labels_in("cluster_dot_fusion") == ["4 ops: 1 dot, 1 tanh, 1 transpose, 1 tuple"]
    assert dot.labels_in("cluster_s") == ["3 ops: 1 constant, 1 broadcast, 1 multiply"]
    assert dot.labels_in("cluster_r") == ["reduce"]
    assert dot.edge_labels("cluster_dot_fusion", "cluster_r") == ["64.0 KiB"]
    title = fusion_dot(parse(FUSED), cost_model("cpu")).splitlines()[1]
    assert "(their 7 fused instructions are counted, not drawn)" in title


def test_a_loop_body_is_a_dashed_cluster_joined_to_its_while():
    dot = fused_picture(LOOP)
    body, = (name for name, (a, _) in dot.clusters.items() if a["label"] == "body of loop: body")
    cond, = (name for name, (a, _) in dot.clusters.items()
             if a["label"] == "condition of loop: cond")
    assert dot.clusters[body][0]["style"] == "dashed"
    kernels = {name: dot.clusters[f"cluster_{name}"][1] for name in dot.kernels()}
    assert kernels == {"j": body, "e": body, "lt": cond}
    loop, = (n for n, (a, _) in dot.nodes.items() if a.get("label") == "while loop")
    assert sorted((a["label"], a["lhead"], a["style"]) for t, h, a in dot.edges
                  if t == loop and "lhead" in a) == \
        [("body", body, "dashed"), ("condition", cond, "dashed")]
    # the state enters the body through its tuple parameter; the result leaves the while
    param, = (n for n, (a, c) in dot.nodes.items() if c == body and a.get("shape") == "ellipse")
    assert [a["label"] for t, h, a in dot.edges if t == param and dot.cluster_of(h) ==
            "cluster_e"] == ["4.0 KiB"]


def test_the_command_line_writes_dot(tmp_path, capsys):
    src = tmp_path / "small.hlo"
    src.write_text(UNFUSED)
    assert main([str(src), "--emit=dot"]) == 0
    out = capsys.readouterr().out
    expected = fusion_dot(optimize(parse(UNFUSED)), cost_model("cpu"))
    assert out == expected and out.startswith('digraph "small" {')


@needs_renderer
def test_svg_is_rendered_for_real_with_one_cluster_per_kernel(tmp_path):
    src, out = tmp_path / "small.hlo", tmp_path / "small.svg"
    src.write_text(UNFUSED)
    assert main([str(src), "--emit=svg", "-o", str(out)]) == 0
    optimized = optimize(parse(UNFUSED))
    names = [i.name for i in optimized.entry.instructions if cost_model("cpu").runs_as_kernel(i)]
    assert len(names) == kernel_report(optimized).kernels == 2
    assert_svg_clusters(out.read_bytes(), names)


def assert_svg_clusters(svg: bytes, kernel_names: list[str]) -> None:
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    clusters = [g for g in root.iter(f"{SVG}g") if "cluster" in g.get("class", "").split()]
    titles = sorted(g.find(f"{SVG}title").text for g in clusters)
    assert titles == sorted(f"cluster_{name}" for name in kernel_names)
    assert all("kernel" in g.get("class").split() for g in clusters)


@needs_renderer
def test_png_goes_to_a_file_or_a_redirected_stdout(tmp_path, capsysbinary):
    src, out = tmp_path / "small.hlo", tmp_path / "small.png"
    src.write_text(UNFUSED)
    assert main([str(src), "--emit=png", "-o", str(out)]) == 0
    assert out.read_bytes().startswith(PNG_SIGNATURE)
    assert main([str(src), "--emit=png"]) == 0
    assert capsysbinary.readouterr().out.startswith(PNG_SIGNATURE)


def test_png_is_not_written_to_a_terminal(tmp_path, capsys, monkeypatch):
    src = tmp_path / "small.hlo"
    src.write_text(UNFUSED)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    assert main([str(src), "--emit=png"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "hlo-opt: --emit=png writes binary data: give -o FILE.png or " \
                           "redirect stdout\n"


@pytest.mark.parametrize("emit", ["svg", "png"])
def test_without_a_renderer_the_error_says_how_to_get_one(tmp_path, capsys, monkeypatch, emit):
    src, out = tmp_path / "small.hlo", tmp_path / f"small.{emit}"
    src.write_text(UNFUSED)
    monkeypatch.setenv("PATH", str(tmp_path))            # no dot program
    monkeypatch.setitem(sys.modules, "pygraphviz", None)  # import pygraphviz fails
    assert main([str(src), f"--emit={emit}", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == f"{src}: {graphviz.NO_RENDERER}\n"
    assert "apt-get install graphviz" in err and "pip install 'hlo-opt[graph]'" in err
    assert not out.exists()


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot program not on PATH")
def test_the_dot_program_renders_when_on_path(monkeypatch):
    monkeypatch.setitem(sys.modules, "pygraphviz", None)
    svg = graphviz.render(fusion_dot(parse(FUSED), cost_model("cpu")), "svg")
    assert_svg_clusters(svg, ["dot_fusion", "r", "s", "k"])
    with pytest.raises(HloError, match=r"dot failed: .*syntax error"):
        graphviz.render("digraph { a -> }", "svg")


def test_pygraphviz_renders_without_the_dot_program(tmp_path, monkeypatch):
    pytest.importorskip("pygraphviz")
    monkeypatch.setenv("PATH", str(tmp_path))
    svg = graphviz.render(fusion_dot(parse(FUSED), cost_model("cpu")), "svg")
    assert_svg_clusters(svg, ["dot_fusion", "r", "s", "k"])
    assert graphviz.render("digraph { a -> b }", "png").startswith(PNG_SIGNATURE)
    with pytest.raises(HloError, match=r"pygraphviz failed: .*syntax error"):
        graphviz.render("digraph { a -> }", "svg")


def test_egraph_dot_shows_the_merged_class_and_what_was_extracted(tmp_path, capsys):
    src = tmp_path / "simplify.hlo"
    src.write_text(X_TIMES_ONE_PLUS_ZERO)
    assert main([str(src), "--emit=egraph-dot"]) == 0
    dot = Dot(capsys.readouterr().out)
    param, = (n for n, (a, _) in dot.nodes.items() if a["label"] == "parameter 0")
    merged = dot.cluster_of(param)
    assert dot.labels_in(merged) == ["add", "multiply", "parameter 0"]
    assert dot.clusters[merged][0]["label"].endswith(": f32[4]")
    extracted = {a["label"] for a, _ in dot.nodes.values() if a.get("class") == "extracted"}
    assert extracted == {"parameter 0"}            # the module became `ROOT x`
    # multiply(x, broadcast(1)) points into its own class and at the broadcast's
    multiply, = (n for n, (a, _) in dot.nodes.items() if a["label"] == "multiply")
    heads = sorted(dot.cluster_of(h) for t, h, a in dot.edges if t == multiply)
    assert merged in heads and len(heads) == 2


def test_egraph_dot_refuses_a_large_egraph_naming_the_limit(tmp_path, capsys, monkeypatch):
    with pytest.raises(HloError, match=r"at most 3 e-nodes; this one has 7 after saturation"):
        optimize(parse(X_TIMES_ONE_PLUS_ZERO), observe=EgraphPicture("simplify", limit=3))
    src = tmp_path / "simplify.hlo"
    src.write_text(X_TIMES_ONE_PLUS_ZERO)
    monkeypatch.setattr("hlo_opt.tools.egraph_dot.NODE_LIMIT", 5)
    assert main([str(src), "--emit=egraph-dot"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{src}: --emit=egraph-dot draws e-graphs of at most 5 e-nodes; "
                          f"this one has 7") and err.count("\n") == 1


def test_observing_the_egraph_does_not_change_the_result():
    module = parse(UNFUSED)
    seen = []
    observed = optimize(module, observe=lambda terms, extractions: seen.append(
        (len(terms), len(extractions))))
    assert observed.to_text() == optimize(module).to_text()
    assert len(seen) == 1 and seen[0][0] > 0 and seen[0][1] == 1
