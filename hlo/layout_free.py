"""Bitcasts as the layout-free ops they stand for, so that layouts may change under them, or
be dropped.

A `bitcast` reinterprets its operand's bytes: its meaning is in both shapes' layouts. Before a
pass gives values new layouts (targets/tpu_layout.py), and before XLA's text goes through
StableHLO, which drops layouts (hlo/xla_oracle.py), each one becomes: read the operand in
memory order (transpose), regroup the elements (reshape), retype them (bitcast-convert, same
width only), view them in the result's logical order (transpose). Only the minor-to-major
orders are read: a bitcast that relies on tiles (a TPU one exposing a tile as dimensions)
has no such form.
"""
from __future__ import annotations

from .errors import UnsupportedError
from .ir import Computation, Instruction
from .shape import Shape


def has_layout_free_form(inst: Instruction) -> bool:
    """A bitcast between element types of one width (a wider or narrower one regroups the
    bits of elements, which no layout-free op does)."""
    return inst.operands[0].shape.dtype.bits == inst.shape.dtype.bits


def rewrite_bitcasts(comp: Computation) -> None:
    """Every `bitcast` of `comp` as its layout-free ops; UnsupportedError for one between
    element widths."""
    for inst in list(comp.instructions):
        if inst.opcode != "bitcast":
            continue
        if not has_layout_free_form(inst):
            raise UnsupportedError(f"{inst.name}: a bitcast between element widths "
                                   f"({inst.operands[0].shape} to {inst.shape}) has no "
                                   f"layout-free form")
        rewrite_bitcast(comp, inst)


def rewrite_bitcast(comp: Computation, inst: Instruction) -> None:
    """The bitcast `inst` (has_layout_free_form) becomes: read the operand in memory order
    (transpose), regroup (reshape), retype (bitcast-convert), view in the result's logical
    order (transpose). The last op keeps the bitcast's name and users."""
    operand, result = inst.operands[0].shape, inst.shape
    read = operand.minor_to_major[::-1]             # major to minor
    view = result.minor_to_major[::-1]
    steps = []
    if list(read) != sorted(read):
        steps.append((operand.element_type, [operand.dims[d] for d in read], "transpose",
                      {"dimensions": tuple(read)}))
    memory = [result.dims[d] for d in view]
    steps.append((operand.element_type, memory, "reshape", {}))
    if operand.element_type != result.element_type:
        steps.append((result.element_type, memory, "bitcast-convert", {}))
    if list(view) != sorted(view):
        steps.append((result.element_type, list(result.dims), "transpose",
                      {"dimensions": tuple(view.index(j) for j in range(result.rank))}))
    value, where = inst.operands[0], comp.instructions.index(inst)
    for element_type, dims, opcode, attrs in steps[:-1]:
        value = Instruction(comp.unique_name(f"{inst.name}.{opcode}"), opcode,
                            Shape(element_type, tuple(dims)), [value], attrs)
        comp.instructions.insert(where, value)
        where += 1
    element_type, dims, opcode, attrs = steps[-1]
    metadata = {k: v for k, v in inst.attrs.items() if k == "metadata"}
    inst.opcode, inst.operands, inst.attrs = opcode, [value], {**attrs, **metadata}
    inst.shape = Shape(element_type, result.dims, None, result.dynamic)
