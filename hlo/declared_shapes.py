"""Checks of result shapes the text spells out (as XLA's verifier compares them: up to
layout and to which dimensions are dynamic): ops whose result shape cannot be inferred
from their operands alone (convert, reshape, broadcast, rng, recv, ...), ops whose declared
shape carries a parameter (all-gather's shard count, dot's preferred type), and async
wrappers. Every other op is compared with shape inference. The verifier calls
`check_declared_shape` on every instruction.
"""
from __future__ import annotations

import math
from typing import Sequence

from . import collective_rules
from .dtypes import NUMERIC
from .ops import async_wrapped
from .shape import AnyShape, TupleShape
from .shape_inference import INFERABLE, infer_shape
from .shape_util import computation, expect_array, expect_scalar, fail, relayout, text
from .transfer_rules import CONTEXT, TOKEN, expect_token


def _check_broadcast(operands, attrs, declared):
    operand = expect_array(operands[0], "broadcast operand")
    dims = tuple(attrs.get("dimensions", ()))
    if len(dims) != operand.rank or operand.element_type != declared.element_type:
        fail(f"broadcast of {text(operand)} to {text(declared)} needs one entry in "
             f"dimensions per operand dimension and the same element type")
    if len(set(dims)) != len(dims):
        fail(f"broadcast dimensions {list(dims)} repeat a dimension")
    for i, d in enumerate(dims):
        if not 0 <= d < declared.rank or declared.dims[d] != operand.dims[i]:
            fail(f"broadcast dimensions {list(dims)} map {text(operand)} onto "
                 f"{text(declared)} inconsistently")


def _check_convert(operands, attrs, declared):
    operand = expect_array(operands[0], "convert operand")
    if operand.dims != declared.dims:
        fail(f"convert changes dimensions: {text(operand)} to {text(declared)}")
    src, dst = operand.dtype.kind, declared.dtype.kind
    if {src, dst} & {"token", "opaque"} or (src == "complex" and dst != "complex"):
        fail(f"cannot convert {operand.element_type} to {declared.element_type}")


def _check_stochastic_convert(operands, attrs, declared):
    """A float rounded up or down by comparing its fraction with unsigned random bits of
    the same width and dims."""
    operand = expect_array(operands[0], "stochastic-convert operand")
    bits = expect_array(operands[1], "stochastic-convert random bits")
    if (operand.dtype.kind != "float" or bits.dtype.kind != "uint"
            or bits.dtype.bits != operand.dtype.bits or bits.dims != operand.dims):
        fail(f"stochastic-convert needs a float operand and unsigned random bits of its "
             f"width and dims, got {text(operand)} and {text(bits)}")
    if declared.dims != operand.dims or declared.dtype.kind not in NUMERIC - {"complex"}:
        fail(f"stochastic-convert of {text(operand)} cannot produce {text(declared)}")


def _check_bitcast_convert(operands, attrs, declared):
    operand = expect_array(operands[0], "bitcast-convert operand")
    a, b = operand.dtype.bits, declared.dtype.bits
    if not a or not b:
        fail(f"cannot bitcast-convert {operand.element_type} to {declared.element_type}")
    if a == b:
        ok = operand.dims == declared.dims
    elif a > b:            # one element becomes a trailing dimension of a // b pieces
        ok = declared.dims == operand.dims + (a // b,) and a % b == 0
    else:
        ok = operand.dims == declared.dims + (b // a,) and b % a == 0
    if not ok:
        fail(f"bitcast-convert from {text(operand)} to {text(declared)} changes the "
             "number of bits")


def _check_reshape(operands, attrs, declared):
    operand = expect_array(operands[0], "reshape operand")
    if operand.element_type != declared.element_type:
        fail(f"reshape from {text(operand)} to {text(declared)} changes the element type")
    if math.prod(operand.dims) != math.prod(declared.dims):
        fail(f"reshape from {text(operand)} ({math.prod(operand.dims)} elements) to "
             f"{text(declared)} ({math.prod(declared.dims)} elements) changes the element "
             "count")


def _check_dynamic_reshape(operands, attrs, declared):
    """A reshape whose result dims (at most the declared ones) come as s32 scalars."""
    _check_reshape(operands, attrs, declared)
    sizes = operands[1:]
    if len(sizes) != declared.rank:
        fail(f"dynamic-reshape to {text(declared)} takes {declared.rank} sizes, got "
             f"{len(sizes)}")
    for s in sizes:
        if expect_scalar(s, "dynamic-reshape size").element_type != "s32":
            fail(f"dynamic-reshape sizes must be s32 scalars, got {text(s)}")


def _check_bitcast(operands, attrs, declared):
    operand = expect_array(operands[0], "bitcast operand")
    if operand.byte_size != declared.byte_size or operand.dtype.bits != declared.dtype.bits:
        fail(f"bitcast from {text(operand)} to {text(declared)} changes the byte size")


def _check_iota(operands, attrs, declared):
    d = attrs.get("iota_dimension")
    if d is None or not 0 <= d < declared.rank or declared.dtype.kind not in NUMERIC:
        fail(f"iota_dimension={d} does not fit {text(declared)}")


def _check_contraction(opcode):
    """dot/convolution may declare any numeric or pred result type (XLA's preferred type)."""
    def check(operands, attrs, declared):
        inferred = infer_shape(opcode, operands, attrs)
        if inferred.dims != declared.dims:
            fail(f"{opcode} result should be {text(inferred)}, declared {text(declared)}")
        if declared.dtype.kind not in NUMERIC | {"pred"}:
            fail(f"{opcode} cannot produce {declared.element_type}")
    return check


_RNG_KINDS = {"rng_uniform": {"float", "int", "uint", "pred"}, "rng_normal": {"float"}}


def _check_rng(operands, attrs, declared):
    """Random numbers of the declared shape, between (or around) two scalars of its type."""
    if len(operands) != 2:
        fail(f"rng takes 2 operands, got {len(operands)}")
    a, b = (expect_scalar(s, "rng operand") for s in operands)
    distribution = attrs.get("distribution")
    kinds = _RNG_KINDS.get(distribution)
    if kinds is None:
        fail(f"rng needs distribution=rng_uniform|rng_normal, got {distribution}")
    if not a.element_type == b.element_type == declared.element_type:
        fail(f"rng operands {text(a)}, {text(b)} and result {text(declared)} must share "
             "one element type")
    if declared.dtype.kind not in kinds:
        fail(f"{distribution} cannot produce {declared.element_type}")


def _check_rng_bit_generator(operands, attrs, declared):
    """(new state, random bits): the state keeps the operand's shape. XLA also takes an
    array result: the random bits alone."""
    state = expect_array(operands[0], "rng-bit-generator state")
    if declared.is_tuple and not (len(declared.elements) == 2
            and declared.elements[0].compatible(state) and not declared.elements[1].is_tuple):
        fail(f"rng-bit-generator produces ({text(state)}, random bits), not {text(declared)}")


def _check_transfer_in(opcode: str, context: tuple):
    """infeed -> (data, token), recv -> (data, u32[], token): data shaped as declared."""
    def check(operands, attrs, declared):
        expect_token(operands[0], f"{opcode} operand")
        if not declared.is_tuple or len(declared.elements) != len(context) + 2:
            fail(f"{opcode} produces (data{', u32[]' * len(context)}, token[]), not "
                 f"{text(declared)}")
        expected = TupleShape((relayout(declared.elements[0]),) + context + (TOKEN,))
        if not expected.compatible(declared):
            fail(f"{opcode} result should be {text(expected)}, declared {text(declared)}")
    return check


def _check_async_start(operands, attrs, declared):
    """((operands), the wrapped computation's result, context...)."""
    comp = computation(attrs, "calls", "async-start", None)
    expected = (TupleShape(tuple(relayout(p.shape) for p in comp.parameters)),
                relayout(comp.root.shape))
    params = expected[0].elements
    if len(params) != len(operands) or not all(p.compatible(o) for p, o in zip(params,
                                                                                operands)):
        fail(f"async-start operands ({', '.join(map(text, operands))}) do not match "
             f"computation {comp.name}'s parameters {text(expected[0])}")
    _check_async_tuple("async-start", expected, declared)


def _check_async_tuple(opcode: str, expected: tuple, declared: AnyShape) -> None:
    if not declared.is_tuple or len(declared.elements) < 2 or not TupleShape(
            expected + declared.elements[2:]).compatible(declared, dynamic=False):
        fail(f"{opcode} result should start with {', '.join(map(text, expected))}, "
             f"declared {text(declared)}")


def _check_wrapped_start(opcode: str, operands: list, attrs: dict, declared) -> None:
    """`negate-start(x)` is async-start of a computation running `negate`: its result
    element 1 is checked as that op's result."""
    if not declared.is_tuple or len(declared.elements) < 2:
        fail(f"{opcode}-start produces ((operands), result, context...), not "
             f"{text(declared)}")
    check_declared_shape(opcode, operands, attrs, declared.elements[1])
    inputs = TupleShape(tuple(relayout(s) for s in operands))
    _check_async_tuple(f"{opcode}-start", (inputs, relayout(declared.elements[1])), declared)


# Checks of ops whose result is always an array...
_ARRAY_CHECKS = {
    "broadcast": _check_broadcast, "convert": _check_convert,
    "stochastic-convert": _check_stochastic_convert,
    "bitcast-convert": _check_bitcast_convert, "reshape": _check_reshape,
    "dynamic-reshape": _check_dynamic_reshape,
    "bitcast": _check_bitcast, "iota": _check_iota,
    **{op: _check_contraction(op) for op in ("dot", "convolution", "ragged-dot")},
    "rng": _check_rng,
}

# ... and of ops that may produce (or always produce) tuples.
DECLARED_CHECKS = {
    **_ARRAY_CHECKS,
    "rng-bit-generator": _check_rng_bit_generator,
    "infeed": _check_transfer_in("infeed", ()),
    "recv": _check_transfer_in("recv", (CONTEXT,)),
    "async-start": _check_async_start,
    **collective_rules.DECLARED,
}


def check_declared_shape(opcode: str, operands: Sequence[AnyShape], attrs: dict,
                         declared: AnyShape) -> None:
    """Raise HloError unless `declared` is a valid result shape (layouts ignored).

    Ops with a shape rule compare against it; ops whose text carries the shape (convert,
    reshape, broadcast, ...) get their own consistency check; custom-call's result is
    whatever its target makes (only its size is checked, by the verifier).
    """
    operands = list(operands)
    wrapped = async_wrapped(opcode)
    if wrapped is not None:
        op, generic = wrapped
        if generic == "async-start":
            return _check_wrapped_start(op, operands, attrs, declared)
        opcode = generic
    check = DECLARED_CHECKS.get(opcode)
    if check is not None:
        if declared.is_tuple and opcode in _ARRAY_CHECKS:
            fail(f"{opcode} cannot produce a tuple {text(declared)}")
        check(operands, attrs, declared)
    elif opcode in INFERABLE:
        inferred = infer_shape(opcode, operands, attrs)
        if not inferred.compatible(declared, dynamic=False):
            fail(f"result shape should be {text(inferred)}, declared {text(declared)}")
