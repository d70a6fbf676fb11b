"""Result and operand types of new right-side terms, derived from what the rule knows.

Two directions, both as guard IR values so egglog and the checker compute the same thing:
`result_type` types an op from its operands' types (elementwise: the operand's type; compare:
pred of the operands' dims; transpose: permuted dims), `operand_type` types an operand from
its op's result and siblings (a splat in `add(x, 1)` takes the add's type, the value of
`pad(x, 0)` is a scalar of x's element type). None means "not derivable from here".
"""
from __future__ import annotations

from ..ops import OPS
from ..shape_inference import ELEMENTWISE
from .guard_ir import Apply, Lit, MakeType

PRED = Lit("pred", "dtype")
SCALAR_DIMS = Lit((), "ints")


def _same_typed(arity: int) -> tuple[str, ...]:
    return tuple(sorted(op for op, (_, rule) in ELEMENTWISE.items()
                        if rule == "same" and OPS[op].arity == arity
                        and op not in ("select", "clamp")))


# Op classes: a class name in a rule stands for any one of its members, the same one
# wherever the name appears in that rule (`unary(transpose(x, dimensions=p)) =>
# transpose(unary(x), dimensions=p)` moves a transpose through every unary op). Members are
# the elementwise ops whose result has their operands' type and that have no attributes.
REWRITE_OP_CLASSES: dict[str, tuple[str, ...]] = {"unary": _same_typed(1),
                                                  "binary": _same_typed(2)}
# A member the compiler types new terms of the class with (all members type alike).
CLASS_REPRESENTATIVE = {"unary": "negate", "binary": "add"}
# Ops whose result has operand 0's element type: `shape=` on the right side gives their dims.
SHAPED = frozenset({"reshape", "broadcast", "transpose", "slice", "pad", "reverse",
                    "concatenate", "reduce", "copy", "reduce-window", "dot"})


def dims(t):
    return t.dims if isinstance(t, MakeType) else Apply("dims", (t,))


def dtype(t):
    return t.dtype if isinstance(t, MakeType) else Apply("dtype", (t,))


def _main_operands(op: str, n: int) -> tuple[int, ...]:
    """Operands whose type is the result's (select's predicate and clamp's bounds are not)."""
    return {"select": (1, 2), "clamp": (1,)}.get(op, tuple(range(n)))


def _first(types, indices):
    return next((types[i] for i in indices if i < len(types) and types[i] is not None), None)


def _same_as_operand(types, attrs):
    return types[0] if types else None


def _transpose(types, attrs):
    x, perm = types[0], attrs.get("dimensions")
    if x is None or perm is None:
        return None
    return MakeType(dtype(x), Apply("compose", (dims(x), perm)))


def _slice(types, attrs):
    x = types[0]
    parts = [attrs.get(f) for f in ("start", "limit", "stride")]
    if x is None or None in parts:
        return None
    return MakeType(dtype(x), Apply("slice_dims", tuple(parts)))


def _pad(types, attrs):
    x = types[0]
    parts = [attrs.get(f) for f in ("low", "high", "interior")]
    if x is None or None in parts:
        return None
    return MakeType(dtype(x), Apply("pad_dims", (dims(x), *parts)))


# The gather attributes its result dims depend on (a rule names them on its left side).
GATHER_DIMS = ("offset_dims", "collapsed_slice_dims", "index_vector_dim", "slice_sizes",
               "operand_batching_dims")


def _gather(types, attrs):
    x, indices = types[0], types[1]
    parts = [attrs.get(f) for f in GATHER_DIMS]
    if x is None or indices is None or None in parts:
        return None
    return MakeType(dtype(x), Apply("gather_dims", (dims(x), dims(indices), *parts)))


def _concatenate(types, attrs):
    d = attrs.get("dimensions")
    if len(types) != 2 or None in types or d is None:
        return None
    return MakeType(dtype(types[0]), Apply("concat_dims", (dims(types[0]), dims(types[1]), d)))
def _dynamic_slice(types, attrs):
    x, sizes = types[0], attrs.get("dynamic_slice_sizes")
    if x is None or sizes is None:
        return None
    return MakeType(dtype(x), sizes)


_STRUCTURED = {
    "reduce-precision": _same_as_operand, "reverse": _same_as_operand,
    "transpose": _transpose, "slice": _slice, "pad": _pad,
    "scatter": _same_as_operand, "gather": _gather, "concatenate": _concatenate,
    "dynamic-slice": _dynamic_slice, "dynamic-update-slice": _same_as_operand,
}


def result_type(op: str, operands: list, attrs: dict):
    """Type of `op` applied to operands of these types (None entries: unknown)."""
    op = CLASS_REPRESENTATIVE.get(op, op)
    if op in ELEMENTWISE:
        t = _first(operands, _main_operands(op, len(operands)))
        rule = ELEMENTWISE[op][1]
        if t is None or rule == "complex":
            return None
        if rule == "pred":
            return MakeType(PRED, dims(t))
        if rule == "real":
            return MakeType(Apply("real_type", (dtype(t),)), dims(t))
        return t
    rule = _STRUCTURED.get(op)
    return rule(operands, attrs) if rule is not None else None


def operand_type(op: str, i: int, result, operands: list):
    """Type that operand i of `op` must have, given the result's and siblings' types."""
    op = CLASS_REPRESENTATIVE.get(op, op)
    if op in ELEMENTWISE:
        rule = ELEMENTWISE[op][1]
        main = _main_operands(op, len(operands))
        if op == "select" and i == 0:
            t = result if result is not None else _first(operands, main)
            return None if t is None else MakeType(PRED, dims(t))
        if op == "compare":
            return operands[1 - i] if i < 2 else None
        if rule != "same":
            return None
        return result if result is not None else _first(operands, main)
    if op in ("reverse", "reduce-precision", "scatter", "dynamic-update-slice") and i == 0:
        return result
    if op == "pad" and i == 1:
        t = operands[0] if operands[0] is not None else result
        return None if t is None else MakeType(dtype(t), SCALAR_DIMS)
    if op in ("reduce", "reduce-window") and len(operands) % 2 == 0 and i >= len(operands) // 2:
        # n inputs, then their n scalar init values
        t = operands[i - len(operands) // 2]
        if t is None and len(operands) == 2:
            t = result
        return None if t is None else MakeType(dtype(t), SCALAR_DIMS)
    return None
