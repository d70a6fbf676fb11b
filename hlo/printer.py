"""IR -> HLO text that XLA's parser and ours both accept.

Output is deterministic: computations are printed callees first, instructions in their
computation's order, attributes in the order they were read or built. Names are printed
without the optional `%`, operands as bare names (the form JAX emits).
"""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from . import attributes
from .errors import UnsupportedError
from .ir import ELIDED, Computation, Instruction, Module
from .shape import Shape


def print_module(module: Module, metadata: bool = True) -> str:
    lines = [_header(module)]
    if module.extra_sections:
        lines.append(module.extra_sections)
    for comp in _callees_first(module):
        lines.append("")
        lines.extend(_computation_lines(comp, comp is module.entry, metadata))
    return "\n".join(lines) + "\n"


def print_instruction(inst: Instruction, metadata: bool = True) -> str:
    """One instruction as it appears inside a computation (without indentation/ROOT)."""
    if inst.opcode == "pad" and inst.shape.rank == 0:
        # XLA's parser reads a padding config only as `lo_hi[_interior]` per dimension (its
        # own print of a rank-0 one, `padding=`, and `padding={}` do not parse), so no text
        # XLA accepts holds a pad of a scalar. It equals its operand (the default rules'
        # pad_noop removes it); printing it anyway would only fail later, in XLA.
        raise UnsupportedError(f"{inst.name}: a pad of a scalar has no HLO text that XLA's "
                               f"parser accepts; it is its operand (rules/default: pad_noop)",
                               line=inst.line, column=inst.column)
    shape = inst.shape.to_text()
    if inst.opcode == "parameter":
        body = f"parameter({inst.parameter_number})"
    elif inst.opcode == "constant":
        body = f"constant({format_literal(inst.literal, inst.shape)})"
    else:
        body = f"{inst.opcode}({', '.join(op.name for op in inst.operands)})"
    attrs = "".join(f", {name}={_attr_text(name, value)}" for name, value in inst.attrs.items()
                    if metadata or name != "metadata")
    return f"{inst.name} = {shape} {body}{attrs}"


def _header(module: Module) -> str:
    attrs = "".join(f", {k}={attributes.encode(k, v)}" for k, v in module.attrs.items())
    return f"HloModule {module.name}{attrs}"


def _computation_lines(comp: Computation, is_entry: bool, metadata: bool) -> list[str]:
    head = f"{'ENTRY ' if is_entry else ''}{comp.name} {{"
    lines = [head]
    for inst in comp.instructions:
        prefix = "  ROOT " if inst is comp.root else "  "
        lines.append(prefix + print_instruction(inst, metadata))
    tail = "}"
    if comp.execution_thread is not None:
        tail += f", execution_thread={attributes.encode_string(comp.execution_thread)}"
    lines.append(tail)
    return lines


def _attr_text(name: str, value) -> str:
    if isinstance(value, Computation):
        return value.name
    if isinstance(value, tuple) and value and isinstance(value[0], Computation):
        return "{" + ", ".join(c.name for c in value) + "}"
    return attributes.encode(name, value)


def _callees_first(module: Module) -> list[Computation]:
    """Module order, except that every computation follows the ones it calls (XLA's parser
    rejects forward references to computations)."""
    order: list[Computation] = []
    done: set[int] = set()
    for top in module.computations:
        stack = [(top, False)]
        while stack:
            comp, expanded = stack.pop()
            if id(comp) in done:
                continue
            if expanded:
                done.add(id(comp))
                order.append(comp)
                continue
            stack.append((comp, True))
            callees = [c for inst in comp.instructions for c in inst.called_computations()]
            stack.extend((c, False) for c in reversed(callees) if id(c) not in done)
    return order


# --- literals ------------------------------------------------------------------------------

def format_literal(literal, shape) -> str:
    """Text of a constant's value; the inverse of grammar.literals.parse_literal."""
    if shape.is_tuple:
        return "(" + ", ".join(format_literal(v, s)
                               for v, s in zip(literal, shape.elements)) + ")"
    if literal is ELIDED:
        return "{...}"
    values = _element_texts(np.asarray(literal), shape)
    if shape.rank == 0:
        return values[0]
    return _nest(values, shape.dims)


def _nest(values: list[str], dims: tuple[int, ...]) -> str:
    """Group flat element texts into nested braces, innermost dimension first."""
    groups = values
    for k in range(len(dims) - 1, -1, -1):
        d, count = dims[k], math.prod(dims[:k])
        groups = ["{" + ", ".join(groups[i * d:(i + 1) * d]) + "}" for i in range(count)]
    return groups[0]


def _element_texts(arr: np.ndarray, shape: Shape) -> list[str]:
    kind = shape.dtype.kind
    flat = arr.reshape(-1)
    if kind == "pred":
        return ["true" if v else "false" for v in flat.tolist()]
    if kind in ("int", "uint"):
        return [str(v) for v in flat.astype(np.int64 if kind == "int" else np.uint64).tolist()]
    if kind == "complex":
        parts = flat.astype(np.complex128)
        return [f"({_float_text(v.real, np.float64)}, {_float_text(v.imag, np.float64)})"
                for v in parts.tolist()]
    return _float_texts(flat, shape.dtype.numpy)


def _float_texts(flat: np.ndarray, dtype: np.dtype) -> list[str]:
    """Shortest text that reads back to the same value of `dtype`; NaN sign and payload
    are kept (`-nan`, `nan(0x7f)`), as XLA prints them."""
    if dtype == np.float64:
        texts = [repr(v) for v in flat.tolist()]
    else:
        # Every f16/bf16/f8 value is exactly a float32, whose shortest repr reads back to it.
        with np.errstate(invalid="ignore"):         # signalling NaNs (payloads) convert too
            texts = [str(v) for v in flat.astype(np.float32)]
    with np.errstate(invalid="ignore"):
        nan_positions = np.flatnonzero(np.isnan(flat))
    for i in nan_positions.tolist():
        texts[i] = _nan_text(flat[i], dtype)
    return [t[:-2] if t.endswith(".0") and "e" not in t else t for t in texts]


def _float_text(value: float, dtype) -> str:
    return _float_texts(np.array([value], dtype=dtype), np.dtype(dtype))[0]


def _nan_text(value, dtype: np.dtype) -> str:
    bits = dtype.itemsize * 8
    word = int(np.array([value], dtype=dtype).view(f"u{dtype.itemsize}")[0])
    negative = bool(word >> (bits - 1))
    sign = "-" if negative else ""
    info = ml_dtypes.finfo(dtype)
    payload = word & ((1 << info.nmant) - 1)
    quiet = 1 << (info.nmant - 1)
    if info.bits != bits or payload in (0, quiet):
        return sign + "nan"
    return f"{sign}nan(0x{payload:x})"
