"""The part of a layout after `:` (`{1,0:T(8,128)(2,1)S(1)}`), checked as XLA reads it.

The shape token carries this text verbatim (Layout.tail); this module only says whether it
is well formed, so that what XLA refuses is refused here with a position, not carried along.
Parts come in XLA's fixed order, each at most once: D(dim level types) T(tiles) L(alignment)
#(index type) *(pointer type) E(element bits) S(memory space) SC(split configs) P(physical
shape) M(metadata bytes).
"""
from __future__ import annotations

import re

_INT = r"-?[0-9]+"
_TILE = r"\((?:(?:-?[0-9]+|\*)(?:,(?:-?[0-9]+|\*))*)?\)"
_TYPE = r"[a-z][a-z0-9]*"          # XLA asks for an unsigned type but takes any
_TAIL = re.compile(
    rf"(?:D\((?:[DCSH]\+?~?(?:,[DCSH]\+?~?)*)?\))?"
    rf"(?P<tiles>T(?:{_TILE})+)?"
    rf"(?:L\({_INT}\))?"
    rf"(?:#\({_TYPE}\))?"
    rf"(?:\*\({_TYPE}\))?"
    rf"(?:E\({_INT}\))?"
    rf"(?:S\({_INT}\))?"
    rf"(?:SC(?:\({_INT}:(?:{_INT}(?:,{_INT})*)?\))+)?"
    rf"(?P<physical>P\(.*\))?"
    rf"(?:M\({_INT}\))?")
_SPACE_AROUND_PUNCTUATION = re.compile(r"\s*([(),:+~*#])\s*")


def check_layout_tail(tail: str) -> None:
    """ValueError with a message when `tail` is not a layout tail XLA accepts."""
    text = _SPACE_AROUND_PUNCTUATION.sub(r"\1", tail.strip())
    m = _TAIL.fullmatch(text)
    if m is None:
        raise ValueError(f"malformed layout part ':{tail.strip()}'")
    if m["physical"]:
        raise ValueError("a physical shape P(...) is only for sparse arrays")
    for tile in re.findall(r"\(([^)]*)\)", m["tiles"] or ""):
        if any(d != "*" and int(d) <= 0 for d in tile.split(",") if d):
            raise ValueError(f"tile ({tile}) has a dimension that is not positive")
