"""Writing and rendering Graphviz DOT: what the pictures (fusion_dot, egraph_dot) share.

Rendering uses the `dot` program when it is on PATH, else pygraphviz (the optional extra
`graph`: its wheel carries Graphviz's libraries with the dot layout and the svg and png
renderers), else fails with one line saying how to get either.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile

from ..errors import HloError
from ..memory import human_bytes
from ..shape import AnyShape

NO_RENDERER = ("rendering a picture needs Graphviz: put its `dot` program on PATH "
               "(apt-get install graphviz) or pip install 'hlo-opt[graph]' (pygraphviz); "
               "--emit=dot writes the DOT text, which needs neither")
FORMATS = ("svg", "png")


def quote(text: object) -> str:
    """A DOT string literal (IDs and labels alike); newlines become centred line breaks."""
    s = str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{s}"'


def attrs(**values: object) -> str:
    """`[k="v", ...]` for the values that are not None (an empty string when none are)."""
    items = [f"{k}={quote(v)}" for k, v in values.items() if v is not None]
    return f" [{', '.join(items)}]" if items else ""


def header(name: str, title: str) -> list[str]:
    """The opening lines of a picture: top to bottom, small sans-serif labels, its title
    above; edges may end at a cluster's border (compound)."""
    return [f"digraph {quote(name)} {{",
            "graph" + attrs(compound="true", rankdir="TB", labelloc="t",
                            ranksep=0.3, nodesep=0.2, fontname="Helvetica", fontsize=11,
                            label=title),
            "node" + attrs(fontname="Helvetica", fontsize=9, shape="box", height=0.25,
                           style="rounded,filled", fillcolor="white"),
            "edge" + attrs(fontname="Helvetica", fontsize=8, color="#555555", arrowsize=0.6)]


def shape_label(shape: AnyShape) -> str:
    """A shape as a short label: an array without its layout, a tuple by its size."""
    if shape.is_tuple:
        return f"({len(shape.leaves())} values, {human_bytes(shape.byte_size)})"
    return shape.to_text(with_layout=False)


def render(dot: str, fmt: str) -> bytes:
    """The DOT text laid out by `dot` and drawn as `fmt` (svg or png)."""
    if fmt not in FORMATS:
        raise ValueError(fmt)
    program = shutil.which("dot")
    if program is not None:
        return _render_with_program(program, dot, fmt)
    try:
        import pygraphviz
    except ImportError:
        raise HloError(NO_RENDERER) from None
    return _render_with_pygraphviz(pygraphviz, dot, fmt)


def _render_with_program(program: str, dot: str, fmt: str) -> bytes:
    try:
        done = subprocess.run([program, f"-T{fmt}"], input=dot.encode(), capture_output=True,
                              check=False)
    except OSError as e:
        raise HloError(f"cannot run {program}: {e.strerror}") from None
    if done.returncode != 0:
        raise HloError(f"{program} failed: {_one_line(done.stderr.decode(errors='replace'))}")
    return done.stdout


def _render_with_pygraphviz(pygraphviz, dot: str, fmt: str) -> bytes:
    with _stderr_held() as held:
        try:
            return pygraphviz.AGraph(string=dot).draw(format=fmt, prog="dot")
        except (ValueError, OSError, pygraphviz.agraph.DotError) as e:
            errors = [line for line in held().splitlines() if line.startswith("Error")]
            message = _one_line("\n".join([str(e), *errors]))
    raise HloError(f"pygraphviz failed: {message}")


@contextlib.contextmanager
def _stderr_held():
    """The libraries in pygraphviz's wheel write to file descriptor 2 themselves: Graphviz
    its error messages, the bundled fontconfig a warning about any system configuration
    newer than itself on every png. Held back here; yields a function that reads them."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with tempfile.TemporaryFile() as sink:
            os.dup2(sink.fileno(), 2)

            def read() -> str:
                sink.seek(0)
                return sink.read().decode(errors="replace")
            yield read
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _one_line(text: str) -> str:
    return "; ".join(line.strip() for line in text.splitlines() if line.strip()) or "no message"
