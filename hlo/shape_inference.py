"""Result shapes of HLO instructions, as XLA's ShapeInference computes them.

The parser calls `infer_shape` when the text leaves a result shape out; the verifier calls it
to check declared shapes; rules that build new terms call it to type them. Elementwise ops are
table-driven (one row per opcode: which element kinds it accepts, what kind it returns);
structured ops have one function each. Results carry default layouts. Inconsistent operands
raise HloError with a message only: the caller knows the position.
"""
from __future__ import annotations

from typing import Callable, Sequence

from . import collective_rules, transfer_rules
from . import shape_rules as rules
from .dtypes import (BITWISE, COMPLEX_OF, COMPLEX_PART, DTYPES, FLOAT_OR_COMPLEX, FLOATING,
                     INTEGRAL, KINDS, NUMERIC, SIGNED)
from .shape import AnyShape, Shape, TupleShape
from .shape_util import (Computations, array, attr, dims_attr, expect_array, expect_scalar, fail,
                         relayout, text)

ARITHMETIC = NUMERIC | {"pred"}          # XLA accepts add/multiply/max/min on pred

# opcode: (accepted element kinds, result type rule). Rules: "same", "pred" (comparisons,
# is-finite), "real" (complex -> its component type), "complex" (f32 -> c64).
ELEMENTWISE: dict[str, tuple[frozenset, str]] = {
    **dict.fromkeys(("exponential", "exponential-minus-one", "log", "log-plus-one", "logistic",
                     "rsqrt", "sqrt", "sine", "cosine", "tan", "tanh"),
                    (FLOAT_OR_COMPLEX, "same")),
    **dict.fromkeys(("floor", "ceil", "round-nearest-afz", "round-nearest-even", "erf", "cbrt"),
                    (FLOATING, "same")),
    "abs": (SIGNED, "real"), "negate": (NUMERIC, "same"), "sign": (SIGNED, "same"),
    "real": (FLOAT_OR_COMPLEX, "real"), "imag": (FLOAT_OR_COMPLEX, "real"),
    "is-finite": (FLOATING, "pred"), "not": (BITWISE, "same"),
    "count-leading-zeros": (INTEGRAL, "same"), "popcnt": (INTEGRAL, "same"),
    "copy": (KINDS, "same"),
    **dict.fromkeys(("add", "multiply"), (ARITHMETIC, "same")),
    **dict.fromkeys(("maximum", "minimum"), (ARITHMETIC - {"complex"}, "same")),
    **dict.fromkeys(("subtract", "divide", "power"), (NUMERIC, "same")),
    "remainder": (NUMERIC - {"complex"}, "same"),
    "atan2": (FLOAT_OR_COMPLEX, "same"), "complex": (FLOATING, "complex"),
    **dict.fromkeys(("and", "or", "xor"), (BITWISE, "same")),
    **dict.fromkeys(("shift-left", "shift-right-arithmetic", "shift-right-logical"),
                    (INTEGRAL, "same")),
    "compare": (KINDS - {"token", "opaque"}, "pred"),
    "select": (KINDS - {"token", "opaque"}, "same"), "clamp": (NUMERIC, "same"),
}


# ---------------------------------------------------------------- elementwise

def _element_result(opcode: str, element_type: str) -> str:
    kinds, rule = ELEMENTWISE[opcode]
    kind = DTYPES[element_type].kind
    if kind not in kinds:
        fail(f"{opcode} does not accept element type {element_type}")
    if rule == "pred":
        return "pred"
    if rule == "real":
        return COMPLEX_PART.get(element_type, element_type)
    if rule == "complex":
        if element_type not in COMPLEX_OF:
            fail(f"complex needs f32 or f64 operands, got {element_type}")
        return COMPLEX_OF[element_type]
    return element_type


def _elementwise(opcode: str, operands: list[AnyShape], attrs: dict) -> AnyShape:
    if opcode == "copy" and operands[0].is_tuple:
        return relayout(operands[0])
    shapes = [expect_array(s, f"{opcode} operand") for s in operands]
    if opcode == "select":
        pred, shapes = shapes[0], shapes[1:]
        if pred.element_type != "pred":
            fail(f"select predicate must be pred, got {text(pred)}")
        if pred.rank and pred.dims != shapes[0].dims:
            fail(f"select predicate {text(pred)} does not match {text(shapes[0])}")
    full = shapes
    if opcode == "clamp":               # min and max may be scalars
        full = [shapes[1]] + [s for s in (shapes[0], shapes[2]) if s.rank]
    first = full[0]
    for s in shapes:
        if s.element_type != first.element_type:
            fail(f"operand types {' and '.join(text(x) for x in shapes)} differ")
    for s in full[1:]:
        if s.dims != first.dims:
            fail(f"operand shapes {text(first)} and {text(s)} differ")
    if opcode == "compare":
        _check_comparison(first.element_type, attrs)
    return array(_element_result(opcode, first.element_type), first.dims, first.dynamic)


_COMPARE_TYPES = {"float": ("FLOAT", "TOTALORDER"), "complex": ("FLOAT", "TOTALORDER"),
                  "int": ("SIGNED",), "uint": ("UNSIGNED",), "pred": ("UNSIGNED",)}


def _check_comparison(element_type: str, attrs: dict) -> None:
    direction = attrs.get("direction")
    if direction not in ("EQ", "NE", "LT", "LE", "GT", "GE"):
        fail(f"compare needs direction=EQ|NE|LT|LE|GT|GE, got {direction}")
    ctype = attrs.get("type")
    allowed = _COMPARE_TYPES[DTYPES[element_type].kind]
    if ctype is not None and ctype not in allowed:
        fail(f"compare type={ctype} does not apply to {element_type}")


def _reduce_precision(opcode, operands, attrs):
    shape = expect_array(operands[0], "reduce-precision operand")
    if shape.dtype.kind != "float":
        fail(f"reduce-precision needs a float operand, got {text(shape)}")
    if attr(attrs, "exponent_bits", opcode) < 1 or attr(attrs, "mantissa_bits", opcode) < 0:
        fail("reduce-precision needs exponent_bits >= 1 and mantissa_bits >= 0")
    return relayout(shape)


# -------------------------------------------------------------- data movement

def _broadcast(opcode, operands, attrs):
    # With no declared shape XLA's parser reads `dimensions` as sizes to prepend.
    operand = expect_array(operands[0], "broadcast operand")
    sizes = tuple(attrs.get("dimensions", ()))
    return array(operand.element_type, sizes + operand.dims)


def _transpose(opcode, operands, attrs):
    operand = expect_array(operands[0], "transpose operand")
    perm = dims_attr(attrs, "dimensions", opcode, operand.rank)
    if len(perm) != operand.rank:
        fail(f"transpose permutation {list(perm)} does not match rank {operand.rank}")
    return array(operand.element_type, [operand.dims[p] for p in perm])


def _reverse(opcode, operands, attrs):
    operand = expect_array(operands[0], "reverse operand")
    dims_attr(attrs, "dimensions", opcode, operand.rank)
    return relayout(operand)


def _concatenate(opcode, operands, attrs):
    shapes = [expect_array(s, "concatenate operand") for s in operands]
    if not shapes:
        fail("concatenate needs at least one operand")
    first = shapes[0]
    dims = dims_attr(attrs, "dimensions", opcode, first.rank)
    if len(dims) != 1:
        fail(f"concatenate needs exactly one dimension, got {list(dims)}")
    dim = dims[0]
    total = 0
    for s in shapes:
        same = s.rank == first.rank and all(
            a == b for i, (a, b) in enumerate(zip(s.dims, first.dims)) if i != dim)
        if not same or s.element_type != first.element_type:
            fail(f"concatenate operands {text(first)} and {text(s)} differ outside "
                 f"dimension {dim}")
        total += s.dims[dim]
    return array(first.element_type, first.dims[:dim] + (total,) + first.dims[dim + 1:])


def _pad(opcode, operands, attrs):
    operand = expect_array(operands[0], "pad operand")
    value = expect_scalar(operands[1], "pad value")
    if value.element_type != operand.element_type:
        fail(f"pad value {text(value)} does not match operand {text(operand)}")
    config = attr(attrs, "padding", opcode)
    if len(config) != operand.rank:
        fail(f"padding has {len(config)} dimensions, operand {text(operand)}")
    dims = []
    for n, (lo, hi, interior) in zip(operand.dims, config):
        size = lo + hi + n + max(n - 1, 0) * interior
        if interior < 0 or size < 0:
            fail(f"padding {lo}_{hi}_{interior} of a dimension of size {n} is invalid")
        dims.append(size)
    return array(operand.element_type, dims)


def _slice(opcode, operands, attrs):
    operand = expect_array(operands[0], "slice operand")
    config = attr(attrs, "slice", opcode)
    if len(config) != operand.rank:
        fail(f"slice has {len(config)} dimensions, operand {text(operand)}")
    dims = []
    for n, (start, limit, stride) in zip(operand.dims, config):
        if not (0 <= start <= limit <= n and stride > 0):
            fail(f"slice [{start}:{limit}:{stride}] is invalid for a dimension of size {n}")
        dims.append(-(-(limit - start) // stride))
    return array(operand.element_type, dims)


def _start_indices(opcode: str, operand: Shape, indices: list[AnyShape]) -> None:
    if len(indices) == 1 and not indices[0].is_tuple and indices[0].rank == 1:
        indices = [array(indices[0].element_type, ())] * indices[0].dims[0]   # legacy form
    if len(indices) != operand.rank:
        fail(f"{opcode} needs {operand.rank} start indices, got {len(indices)}")
    for s in indices:
        if expect_scalar(s, f"{opcode} start index").dtype.kind not in INTEGRAL:
            fail(f"{opcode} start indices must be integers, got {text(s)}")
    if len({s.element_type for s in indices}) > 1:
        fail(f"{opcode} start indices must share one type")


def _dynamic_slice(opcode, operands, attrs):
    operand = expect_array(operands[0], "dynamic-slice operand")
    _start_indices(opcode, operand, operands[1:])
    sizes = tuple(attr(attrs, "dynamic_slice_sizes", opcode))
    if len(sizes) != operand.rank or any(not 0 <= s <= n for s, n in zip(sizes, operand.dims)):
        fail(f"dynamic_slice_sizes {{{','.join(map(str, sizes))}}} do not fit operand "
             f"{text(operand)} (one size per dimension, each at most its size)")
    return array(operand.element_type, sizes)


def _dynamic_update_slice(opcode, operands, attrs):
    if len(operands) < 2:
        fail("dynamic-update-slice needs an operand, an update and start indices")
    operand = expect_array(operands[0], "dynamic-update-slice operand")
    update = expect_array(operands[1], "dynamic-update-slice update")
    if update.rank != operand.rank:
        fail(f"update {text(update)} has rank {update.rank}, operand {text(operand)} has "
             f"rank {operand.rank}")
    if update.element_type != operand.element_type or any(
            u > n for u, n in zip(update.dims, operand.dims)):
        fail(f"update {text(update)} does not fit operand {text(operand)}")
    _start_indices(opcode, operand, operands[2:])
    return relayout(operand)


def _get_tuple_element(opcode, operands, attrs):
    operand = operands[0]
    if not operand.is_tuple:
        fail(f"get-tuple-element operand must be a tuple, got {text(operand)}")
    index = attr(attrs, "index", opcode)
    if not 0 <= index < len(operand.elements):
        fail(f"get-tuple-element index {index} out of range for {text(operand)}")
    return relayout(operand.elements[index])


def _tuple(opcode, operands, attrs):
    return TupleShape(tuple(relayout(s) for s in operands))


def _same_as_operand(opcode, operands, attrs):
    return relayout(operands[0])


def _add_dependency(opcode, operands, attrs):
    """add-dependency(data, token): the data, ordered after the token."""
    if operands[1].is_tuple or operands[1].dtype.kind != "token":
        fail(f"add-dependency's second operand must be a token, got {text(operands[1])}")
    return relayout(operands[0])


def _gather(opcode, operands, attrs):
    operand = expect_array(operands[0], "gather operand")
    indices = expect_array(operands[1], "gather indices")
    if indices.dtype.kind not in INTEGRAL:
        fail(f"gather indices must be integers, got {text(indices)}")
    ivd = attr(attrs, "index_vector_dim", opcode)
    if not 0 <= ivd <= indices.rank:
        fail(f"index_vector_dim {ivd} out of range for indices {text(indices)}")
    index_dims = indices.dims + (1,) if ivd == indices.rank else indices.dims
    offset_dims = tuple(attrs.get("offset_dims", ()))
    collapsed = tuple(attrs.get("collapsed_slice_dims", ()))
    start_map = tuple(attr(attrs, "start_index_map", opcode))
    operand_batching = tuple(attrs.get("operand_batching_dims", ()))
    indices_batching = tuple(attrs.get("start_indices_batching_dims", ()))
    sizes = tuple(attr(attrs, "slice_sizes", opcode))
    if len(sizes) != operand.rank or any(not 0 <= s <= n for s, n in zip(sizes, operand.dims)):
        fail(f"gather slice_sizes {list(sizes)} do not fit operand {text(operand)}")
    if len(start_map) != index_dims[ivd]:
        fail(f"start_index_map has {len(start_map)} entries, index vectors have "
             f"{index_dims[ivd]}")
    for d in collapsed + operand_batching:
        if not 0 <= d < operand.rank or sizes[d] > 1:
            fail(f"gather collapses dimension {d}, which needs slice size <= 1")
    if len(operand_batching) != len(indices_batching):
        fail("operand_batching_dims and start_indices_batching_dims differ in length")
    for d in start_map:
        if not 0 <= d < operand.rank:
            fail(f"start_index_map entry {d} out of range")
    for od, idd in zip(operand_batching, indices_batching):
        if idd == ivd or not 0 <= idd < indices.rank or operand.dims[od] != indices.dims[idd]:
            fail(f"batching dims {od} (operand) and {idd} (indices) do not match")
    batch = [d for i, d in enumerate(index_dims) if i != ivd]
    offsets = [s for i, s in enumerate(sizes) if i not in collapsed and i not in operand_batching]
    if len(offsets) != len(offset_dims):
        fail(f"gather has {len(offsets)} offset dimensions but offset_dims lists "
             f"{len(offset_dims)}")
    rank = len(batch) + len(offsets)
    if any(not 0 <= d < rank for d in offset_dims) or list(offset_dims) != sorted(
            set(offset_dims)):
        fail(f"offset_dims {list(offset_dims)} must be sorted, unique and below {rank}")
    batch_iter, offset_iter = iter(batch), iter(offsets)
    dims = [next(offset_iter) if i in offset_dims else next(batch_iter) for i in range(rank)]
    return array(operand.element_type, dims)


def _fixed(result_type: str, dims: Sequence[int] = ()):
    """Rule for ops whose result shape never depends on operands (replica-id, after-all)."""
    return lambda opcode, operands, attrs: array(result_type, dims)


_Rule = Callable[[str, list, dict], AnyShape]

_RULES: dict[str, _Rule] = {
    **dict.fromkeys(ELEMENTWISE, _elementwise),
    "reduce-precision": _reduce_precision,
    "broadcast": _broadcast, "transpose": _transpose, "reverse": _reverse,
    "concatenate": _concatenate, "pad": _pad, "slice": _slice,
    "dynamic-slice": _dynamic_slice, "dynamic-update-slice": _dynamic_update_slice,
    "get-tuple-element": _get_tuple_element, "tuple": _tuple, "gather": _gather,
    **dict.fromkeys(("opt-barrier", "domain"), _same_as_operand),
    "add-dependency": _add_dependency,
    "after-all": _fixed("token"),
    "replica-id": _fixed("u32"), "partition-id": _fixed("u32"),
    **rules.RULES, **collective_rules.RULES, **transfer_rules.RULES,
}

# Rules that read called computations take them as a fourth argument.
_CALLING_RULES = rules.CALLING_RULES

INFERABLE = frozenset(_RULES) | frozenset(_CALLING_RULES)


def infer_shape(opcode: str, operands: Sequence[AnyShape], attrs: dict,
                computations: Computations = None) -> AnyShape:
    """The result shape of `opcode` applied to operands of these shapes.

    `attrs` holds typed attribute values; computation attributes are Computation objects,
    or ComputationRefs resolved through `computations` (name -> Computation).
    Raises HloError for inconsistent operands and for opcodes whose result shape cannot be
    inferred (convert, reshape, iota, ... need it spelled out).
    """
    operands = list(operands)
    rule = _RULES.get(opcode)
    if rule is not None:
        return rule(opcode, operands, attrs)
    calling = _CALLING_RULES.get(opcode)
    if calling is not None:
        return calling(opcode, operands, attrs, computations)
    fail(f"the result shape of {opcode} cannot be inferred; write it out")
