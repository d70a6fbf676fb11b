"""Helpers shared by the shape rules (shape_inference.py, shape_rules.py): building result
shapes, reading attributes, checking called computations' signatures."""
from __future__ import annotations

from typing import Mapping, Sequence

from .attributes import ComputationRef
from .errors import HloError
from .shape import AnyShape, Shape, TupleShape, default_layout

Computations = Mapping[str, object] | None


def fail(message: str):
    raise HloError(message)


def array(element_type: str, dims: Sequence[int], dynamic: Sequence[bool] = ()) -> Shape:
    dims = tuple(int(d) for d in dims)
    dynamic = tuple(dynamic) if any(dynamic) else ()
    return Shape(element_type, dims, default_layout(len(dims)), dynamic)


def relayout(shape: AnyShape) -> AnyShape:
    """The same shape with default layouts throughout."""
    if shape.is_tuple:
        return TupleShape(tuple(relayout(e) for e in shape.elements))
    return array(shape.element_type, shape.dims, shape.dynamic)


def array_leaves(shape: AnyShape) -> list[Shape]:
    """The arrays a shape is made of: itself, or a tuple's leaves."""
    return shape.leaves() if shape.is_tuple else [shape]


def expect_array(shape: AnyShape, what: str) -> Shape:
    if shape.is_tuple or not shape.dtype.is_array:
        fail(f"{what} must be an array, got {shape.to_text(False)}")
    return shape


def expect_scalar(shape: AnyShape, what: str) -> Shape:
    if expect_array(shape, what).rank != 0:
        fail(f"{what} must be a scalar, got {shape.to_text(False)}")
    return shape


def text(shape: AnyShape) -> str:
    return shape.to_text(False)


def attr(attrs: dict, name: str, opcode: str, default=None):
    value = attrs.get(name, default)
    if value is None:
        fail(f"{opcode} needs attribute {name}")
    return value


def dims_attr(attrs: dict, name: str, opcode: str, rank: int,
              default: tuple | None = None) -> tuple[int, ...]:
    """A list of distinct dimension numbers below `rank` (required unless `default`)."""
    dims = tuple(attr(attrs, name, opcode, default))
    for d in dims:
        if not 0 <= d < rank:
            fail(f"{name} entry {d} is out of range for rank {rank}")
    if len(set(dims)) != len(dims):
        fail(f"{name} {list(dims)} repeats a dimension")
    return dims


def computation(attrs: dict, name: str, opcode: str, computations: Computations):
    comp = attr(attrs, name, opcode)
    if isinstance(comp, ComputationRef):
        if computations is None or comp.name not in computations:
            fail(f"computation {comp.name} is not defined")
        comp = computations[comp.name]
    return comp


def check_signature(comp, params: Sequence[AnyShape], result: AnyShape | None,
                    what: str) -> None:
    """The computation takes `params` (up to layout) and returns `result` (if given)."""
    got, root = [p.shape for p in comp.parameters], comp.root.shape
    if len(got) != len(params) or not all(a.compatible(b) for a, b in zip(got, params)):
        fail(f"{what} computation {comp.name} takes ({', '.join(map(text, got))}), "
             f"expected ({', '.join(map(text, params))})")
    if result is not None and not root.compatible(result):
        fail(f"{what} computation {comp.name} returns {text(root)}, expected {text(result)}")


def scalars(types: Sequence[str]) -> list[Shape]:
    return [array(t, ()) for t in types]


def maybe_tuple(shapes: Sequence[AnyShape]) -> AnyShape:
    return shapes[0] if len(shapes) == 1 else TupleShape(tuple(shapes))
