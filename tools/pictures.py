"""hlo-opt's pictures (--emit=dot|svg|png|egraph-dot, docs/pictures.md): the kernels of the
optimized module as DOT text or rendered, and where the bytes go.

PNG is binary: without -o it goes to stdout only when stdout is not a terminal (a pipe or a
file); to a terminal it is refused before any work is done.
"""
from __future__ import annotations

import sys

from ..errors import HloError
from ..ir import Module
from ..targets import CostModel
from .cli import write_atomically
from .fusion_dot import fusion_dot
from .graphviz import render

PICTURES = ("dot", "svg", "png", "egraph-dot")


def check_destination(emit: str, output: str | None) -> None:
    """Refuse to write a PNG to a terminal (it would print garbage and may upset it)."""
    if emit == "png" and output in (None, "-") and sys.stdout.isatty():
        raise HloError("--emit=png writes binary data: give -o FILE.png or redirect stdout")


def kernel_picture(module: Module, emit: str, model: CostModel) -> bytes:
    """The kernels of `module` as DOT text (emit dot) or rendered (svg, png)."""
    dot = fusion_dot(module, model)
    return dot.encode() if emit == "dot" else render(dot, emit)


def write_bytes(path: str | None, data: bytes) -> None:
    """To stdout (None or `-`) or atomically to a file."""
    if path in (None, "-"):
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    write_atomically(path, data)
