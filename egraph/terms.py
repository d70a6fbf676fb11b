"""Types and attributes as egglog text, and back (the field layout is schema.py's contract).

Encoding writes `(T "f32" (vec-of 8 128) "")` for a Shape and `(Av (vec-of 1 0) "")` for a
transpose's attributes; decoding turns the fields read from a frozen e-graph back into
Shapes and typed IR attributes. Attributes outside the opcode's schema fields go into `rest`,
a canonical string that keys a side table holding their typed values (`RestTable`).
"""
from __future__ import annotations

import functools
import re
import urllib.parse
from typing import Callable, Sequence

from .. import attributes
from ..ir import Computation, Instruction
from ..shape import AnyShape, Shape, TupleShape, default_layout
from .callees import Callees
from .schema import (ATTR_FIELDS, WINDOW_FIELDS, array_type, attr, attr_constructor, tuple_type,
                     vec_of)

# Attributes never encoded: metadata is restored per instruction by the decoder, and
# control-predecessors name instructions that may not survive optimization.
NOT_ENCODED = frozenset({"metadata", "control-predecessors"})

# Schema fields stored in one IR attribute of per-dimension triples.
SPREAD = {"slice": "slice", "pad": "padding"}

# Opcodes whose `window` attribute is spread over one schema field per window part, with how
# many dims of their first operand the window does not span (a convolution's batch and
# feature dims): an instruction without a window has the default one over the others.
WINDOWED = {"reduce-window": 0, "convolution": 2}

# Vector fields left out of the decoded instruction when empty (XLA's defaults).
OMITTED_WHEN_EMPTY = frozenset({"lhs_batch_dims", "rhs_batch_dims", "operand_batching_dims",
                                "start_indices_batching_dims", "input_batching_dims",
                                "scatter_indices_batching_dims"})

_ESCAPES = {"%": "%25", '"': "%22", "\\": "%5C", "\t": "%09", "\n": "%0A", "\r": "%0D"}
_NEEDS_ESCAPE = re.compile('[%"\\\\\t\n\r]')


def egg_string(text: str) -> str:
    """A quoted egglog string literal; characters egglog's lexer or TSV files cannot hold
    are percent-encoded, injectively, so equal attributes still give equal strings."""
    if _NEEDS_ESCAPE.search(text):
        text = "".join(_ESCAPES.get(c, c) for c in text)
    return f'"{text}"'


def unescape(text: str) -> str:
    """Inverse of egg_string's percent-encoding (without the quotes)."""
    return urllib.parse.unquote(text) if "%" in text else text


def ivec(values: Sequence[int]) -> str:
    return vec_of([str(v) for v in values])


# --- types ---------------------------------------------------------------------------------

def type_text(shape: AnyShape) -> str:
    """(T dtype dims extra), extra = the full shape text when its layout is not the default
    or a dimension is dynamic; (TT (vec-of ...)) for tuples."""
    if shape.is_tuple:
        return tuple_type([type_text(e) for e in shape.elements])
    return array_type(egg_string(shape.element_type), ivec(shape.dims),
                      egg_string(type_extra(shape)))


def type_extra(shape: Shape) -> str:
    layout = shape.layout
    if shape.dynamic or (layout is not None and layout != default_layout(shape.rank)):
        return shape.to_text()
    return ""


def array_shape(element_type: str, dims: Sequence[int], extra: str,
                extras: dict[str, Shape]) -> Shape:
    """The Shape of (T element_type dims extra); `extras` maps extra texts seen while encoding
    to their Shapes (rules copy types, they never invent layouts)."""
    if extra:
        return extras[extra]
    return Shape(element_type, tuple(dims), default_layout(len(dims)))


def tuple_shape(elements: Sequence[AnyShape]) -> TupleShape:
    return TupleShape(tuple(elements))


# --- attributes ----------------------------------------------------------------------------

def window_fields(w: attributes.Window) -> dict[str, tuple[int, ...]]:
    """A window as its schema fields (WINDOW_FIELDS)."""
    low, high = (tuple(p[i] for p in w.pad) for i in (0, 1))
    return dict(zip(WINDOW_FIELDS, (w.size, w.stride, low, high, w.lhs_dilate, w.rhs_dilate,
                                    tuple(int(r) for r in w.rhs_reversal))))


def pack_window(attrs: dict) -> dict:
    """`attrs` with its window fields (WINDOW_FIELDS) put back as one `window`, where they
    were (attributes print in order); a window of no dims is left out, as XLA prints it (its
    parser rejects `window={}`)."""
    f = {name: tuple(attrs[name]) for name in WINDOW_FIELDS}
    window = attributes.Window(f["size"], f["stride"], tuple(zip(f["low"], f["high"])),
                               f["lhs_dilate"], f["rhs_dilate"],
                               tuple(bool(r) for r in f["rhs_reversal"]))
    out = {}
    for name, value in attrs.items():
        if name == WINDOW_FIELDS[0] and window.rank:
            out["window"] = window
        elif name not in WINDOW_FIELDS:
            out[name] = value
    return out


class RestTable:
    """rest string -> the typed attributes it stands for (computations as IR objects)."""

    def __init__(self):
        self.attrs: dict[str, tuple[tuple[str, object], ...]] = {"": ()}

    def add(self, items: list[tuple[str, object]], name_of: Callable[[Computation], str],
            unique: int | None = None) -> str:
        """The canonical string of `items`; `unique` marks it so that no other instruction
        has the same one (instructions that must never be merged)."""
        if not items and unique is None:
            return ""
        items.sort(key=lambda kv: kv[0])
        text = ", ".join(f"{k}={_value_text(k, v, name_of)}" for k, v in items)
        if unique is not None:
            text += f"; unique={unique}"
        self.attrs.setdefault(text, tuple(items))
        return text


def _value_text(name: str, value, name_of: Callable[[Computation], str]) -> str:
    if isinstance(value, Computation):
        return name_of(value)
    if isinstance(value, tuple) and value and isinstance(value[0], Computation):
        return "{" + ",".join(name_of(c) for c in value) + "}"
    return attributes.encode(name, value)


def schema_fields(inst: Instruction, name_of: Callable[[Computation], str],
                  value: str = "") -> tuple[list, list[tuple[str, object]]]:
    """(field values in schema order, the instruction's other encodable attributes).

    `value` is the canonical scalar text of a constant (its `value` field)."""
    fields = ATTR_FIELDS.get(inst.opcode, ())
    attrs = inst.attrs
    if not fields and not attrs:
        return [], []
    used = set()
    values: list = []
    if inst.opcode in WINDOWED:
        window = attrs.get("window") or attributes.Window.default(
            inst.operands[0].shape.rank - WINDOWED[inst.opcode])
        attrs = {**attrs, **window_fields(window)}
        used.add("window")
    spread = SPREAD.get(inst.opcode)
    if spread is not None:
        triples = attrs.get(spread, ())
        values = [tuple(t[i] for t in triples) for i in range(3)]
        used.add(spread)
    else:
        for name, kind in fields:
            used.add(name)
            v = attrs.get(name)
            if name == "value":
                values.append(value)
            elif kind == "v":
                values.append(tuple(v) if v is not None else ())
            elif kind == "i":
                values.append(int(v) if v is not None else 0)
            elif isinstance(v, Computation):
                values.append(name_of(v))
            else:
                values.append("" if v is None else v if isinstance(v, str)
                              else attributes.encode(name, v))
    rest = [(k, v) for k, v in attrs.items() if k not in used and k not in NOT_ENCODED]
    return values, rest


def attr_text(opcode: str, values: Sequence, rest: str) -> str:
    """(A... field ... rest) for `opcode`'s schema fields."""
    return attr_value_text(attr_constructor(opcode), (*values, rest))


def attr_value_text(constructor: str, fields: Sequence) -> str:
    """Egglog text of an Attr value given as (constructor, fields with rest last), the form
    frozen.Values.attr decodes."""
    return attr(constructor, [ivec(v) if kind == "v" else str(v) if kind == "i" else
                              egg_string(v) for kind, v in zip(constructor[1:] + "s", fields)])


# Attribute kinds whose typed IR value a string field holds as its HLO text.
_TEXT_FIELD_KINDS = frozenset({"dim_labels"})


@functools.lru_cache(maxsize=4096)
def field_value(name: str, text: str):
    """The typed value of string field `name` (a ConvDimLabels for "dim_labels"); others
    stay text."""
    if text and attributes.KINDS.get(name) in _TEXT_FIELD_KINDS:
        return attributes.decode(name, text)
    return text


def named_attrs(opcode: str, fields: Sequence, rests: RestTable) -> dict:
    """Attributes by name as a cost model reads them: schema fields (slice and pad spread
    as start/limit/stride, low/high/interior) and the typed values behind `rest`."""
    out = {name: field_value(name, v) if kind == "s" else v
           for (name, kind), v in zip(ATTR_FIELDS.get(opcode, ()), fields)}
    if opcode in WINDOWED:
        out = pack_window(out)
    out.update(rests.attrs[fields[-1]])
    return out


def ir_attrs(opcode: str, values: Sequence, rest: str, rests: RestTable, callees: Callees,
             result: AnyShape) -> dict:
    """Typed IR attributes of a decoded term; callee names ("@c3", or a reducer op such as
    "add" at the result's element type) become the output module's computations."""
    out: dict = {}
    fields = ATTR_FIELDS.get(opcode, ())
    leaves = result.leaves() if result.is_tuple else (result,)
    element_type = leaves[0].element_type if leaves else None
    spread = SPREAD.get(opcode)
    if spread is not None:
        out[spread] = tuple(zip(*values)) if values and values[0] else ()
    else:
        for (name, kind), v in zip(fields, values):
            if name == "value":
                continue
            if kind == "v":
                if v or name not in OMITTED_WHEN_EMPTY:
                    out[name] = tuple(v)
            elif kind == "i":
                out[name] = int(v)
            elif v != "":
                is_callee = attributes.KINDS.get(name) == "computation"
                out[name] = (callees.resolve(v, element_type) if is_callee
                             else field_value(name, v))
    if opcode in WINDOWED:
        out = pack_window(out)
    for name, value in rests.attrs[rest]:
        if isinstance(value, Computation):
            value = callees.output(value)
        elif isinstance(value, tuple) and value and isinstance(value[0], Computation):
            value = tuple(callees.output(c) for c in value)
        out[name] = value
    return out
