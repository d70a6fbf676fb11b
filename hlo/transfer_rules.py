"""Shape rules for ops that move data to or from somewhere else, or finish later: copy-start
/ copy-done, send / send-done / recv-done, outfeed, async-update / async-done, and the rng
state. What they produce is fixed by XLA (a tuple with a u32 context, a token); ops whose
data shape only the text knows (recv, infeed, async-start) are checked in
declared_shapes.py."""
from __future__ import annotations

from .shape import AnyShape, TupleShape
from .shape_util import array, fail, relayout, text

TOKEN = array("token", ())
CONTEXT = array("u32", ())          # the u32 scalar XLA adds to in-flight transfers


def expect_token(shape: AnyShape, what: str) -> None:
    if shape.is_tuple or shape.element_type != "token":
        fail(f"{what} must be a token, got {text(shape)}")


def tuple_element(opcode: str, operand: AnyShape, index: int) -> AnyShape:
    """Element `index` of the tuple an op's starting half produced."""
    if not operand.is_tuple or len(operand.elements) <= index:
        fail(f"{opcode} needs the tuple its start produced, got {text(operand)}")
    return relayout(operand.elements[index])


def _copy_start(opcode, operands, attrs):
    operand = relayout(operands[0])
    return TupleShape((operand, operand, CONTEXT))


def _copy_done(opcode, operands, attrs):
    destination, source = (tuple_element(opcode, operands[0], i) for i in (0, 1))
    if not destination.compatible(source):
        fail(f"copy-done source {text(source)} and destination {text(destination)} differ")
    return destination


def _send(opcode, operands, attrs):
    expect_token(operands[1], "send operand 1")
    return TupleShape((relayout(operands[0]), CONTEXT, TOKEN))


def _send_done(opcode, operands, attrs):
    expect_token(tuple_element(opcode, operands[0], 2), "send-done's send tuple element 2")
    return TOKEN


def _recv_done(opcode, operands, attrs):
    expect_token(tuple_element(opcode, operands[0], 2), "recv-done's recv tuple element 2")
    return TupleShape((tuple_element(opcode, operands[0], 0), TOKEN))


def _outfeed(opcode, operands, attrs):
    expect_token(operands[1], "outfeed operand 1")
    return TOKEN


def _async_update(opcode, operands, attrs):
    tuple_element(opcode, operands[0], 1)
    return relayout(operands[0])


def done_rule(index: int):
    """Rule of a -done op that returns element `index` of its -start's tuple."""
    return lambda opcode, operands, attrs: tuple_element(opcode, operands[0], index)


RULES = {
    "copy-start": _copy_start, "copy-done": _copy_done,
    "send": _send, "send-done": _send_done, "recv-done": _recv_done, "outfeed": _outfeed,
    "async-update": _async_update, "async-done": done_rule(1),
    "rng-get-and-update-state": lambda opcode, operands, attrs: array("u64", (2,)),
}
