"""Shapes: array shapes (element type, dims, optional layout) and tuple shapes.

Shapes are immutable and hashable, because they are part of every e-graph term: two
instructions are the same value only if their shapes are equal too.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from .dtypes import DTYPES, DType

UNBOUNDED = -1   # size recorded for a `?` dimension


@dataclass(frozen=True, slots=True)
class Layout:
    """Minor-to-major dimension order plus the optional `:...` section kept verbatim.

    The tail (tiles `T(8,128)(2,1)`, memory space `S(1)`, element size `E(4)`, ...) keeps
    XLA's fixed section order because it is printed exactly as it was read or built.
    """
    minor_to_major: tuple[int, ...]
    tail: str = ""

    def to_text(self) -> str:
        body = ",".join(map(str, self.minor_to_major))
        return "{" + body + (":" + self.tail if self.tail else "") + "}"

    @property
    def tiles(self) -> tuple[tuple[int | str, ...], ...]:
        """Tiles as tuples, e.g. ((8, 128), (2, 1)); a `*` combine dimension stays a str."""
        m = re.match(r"(?:D\([^)]*\))?T((?:\([^)]*\))+)", self.tail)
        if not m:
            return ()
        return tuple(tuple(int(x) if x.strip().isdigit() else x.strip() for x in t.split(","))
                     for t in re.findall(r"\(([^)]*)\)", m.group(1)))

    @property
    def memory_space(self) -> int:
        m = re.search(r"(?<![A-Z])S\((\d+)\)", self.tail)
        return int(m.group(1)) if m else 0


@dataclass(frozen=True, slots=True)
class Shape:
    """An array shape, e.g. f32[8,128]{1,0}; scalars have dims ().

    `dynamic[i]` marks `<=N` (bounded, dims[i] = N) and `?` (dims[i] = UNBOUNDED) dimensions;
    it is () when no dimension is dynamic, the common case.
    """
    element_type: str
    dims: tuple[int, ...] = ()
    layout: Layout | None = None
    dynamic: tuple[bool, ...] = ()

    is_tuple = False

    @property
    def dtype(self) -> DType:
        return DTYPES[self.element_type]

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def num_elements(self) -> int:
        return math.prod(self.dims)

    @property
    def byte_size(self) -> int:
        return (self.num_elements * self.dtype.bits + 7) // 8

    @property
    def minor_to_major(self) -> tuple[int, ...]:
        """The physical order of the dims: its layout's, or the default one without a layout."""
        return (self.layout or default_layout(self.rank)).minor_to_major

    def with_dims(self, dims: tuple[int, ...], element_type: str | None = None) -> Shape:
        """Same element type (or a new one), new dims, default layout."""
        return Shape(element_type or self.element_type, tuple(dims), default_layout(len(dims)))

    def with_element_type(self, element_type: str) -> Shape:
        return Shape(element_type, self.dims, self.layout, self.dynamic)

    def without_layout(self) -> Shape:
        return Shape(self.element_type, self.dims, None, self.dynamic)

    def compatible(self, other: Shape | TupleShape, dynamic: bool = True) -> bool:
        """Equal up to layout (what the verifier and the parser's checks compare); with
        `dynamic=False` also up to which dimensions are dynamic (XLA's parser compares
        declared operand and signature shapes that way: `s32[4]` names an `s32[<=4]`)."""
        return (not other.is_tuple and self.element_type == other.element_type
                and self.dims == other.dims and (not dynamic or self.dynamic == other.dynamic))

    def to_text(self, with_layout: bool = True) -> str:
        name = "opaque" if self.element_type == "opaque_type" else self.element_type
        if self.dynamic:
            dims = ",".join("?" if d == UNBOUNDED else f"<={d}" if dyn else str(d)
                            for d, dyn in zip(self.dims, self.dynamic))
        else:
            dims = ",".join(map(str, self.dims))
        text = f"{name}[{dims}]"
        if with_layout and self.layout is not None and (self.dims or self.layout.tail):
            text += self.layout.to_text()       # a scalar's empty `{}` is not valid HLO
        return text

    __str__ = to_text


@dataclass(frozen=True, slots=True)
class TupleShape:
    """A tuple of shapes, e.g. (f32[2], (s32[], pred[])); () is the empty tuple."""
    elements: tuple[Shape | TupleShape, ...] = field(default=())

    is_tuple = True

    def compatible(self, other: Shape | TupleShape, dynamic: bool = True) -> bool:
        return (other.is_tuple and len(self.elements) == len(other.elements)
                and all(a.compatible(b, dynamic) for a, b in zip(self.elements, other.elements)))

    def leaves(self) -> list[Shape]:
        """Array leaves in order (the flattened order tuple results are returned in)."""
        out: list[Shape] = []
        for e in self.elements:
            out.extend(e.leaves() if e.is_tuple else [e])
        return out

    @property
    def byte_size(self) -> int:
        return sum(e.byte_size for e in self.elements)

    def without_layout(self) -> TupleShape:
        return TupleShape(tuple(e.without_layout() for e in self.elements))

    def to_text(self, with_layout: bool = True) -> str:
        return "(" + ", ".join(e.to_text(with_layout) for e in self.elements) + ")"

    __str__ = to_text


AnyShape = Shape | TupleShape


def default_layout(rank: int) -> Layout:
    """The major-to-minor default {rank-1,...,0} that XLA assigns when none is given."""
    return Layout(tuple(range(rank - 1, -1, -1)))


def array(element_type: str, dims: tuple[int, ...] | list[int] = ()) -> Shape:
    """Convenience constructor with the default layout: array("f32", (2, 3))."""
    return Shape(element_type, tuple(dims), default_layout(len(dims)))
