"""Constant folding, per the rule files' `fold` declarations, with the interpreter.

Protocol, once per iteration of the runner:
1. The `analysis` ruleset runs the schema's constant analysis: which e-classes hold a
   constant (`Const`: its leaf, also through broadcasts) and through which broadcasts
   (`ConstBroadcast`).
2. The `fold` ruleset records a request (`Fold1/2/3/V`: the term, its opcode, operand classes,
   Attr and Type) for every term whose opcode a declaration names and whose operands are all
   constants.
3. `Folder.apply` reads only those tables from a freeze, skips terms already constant, checks
   the declaration's guards on the result type, evaluates the op with the interpreter and
   unions the term with the result: a splat stays a splat (an elementwise op on splats is
   evaluated once, on scalars, whatever the size), a scalar is a scalar leaf, other arrays
   become new literals. The union is written as text: a constant class can always be named
   by a constant term in it (its leaf, or a broadcast chain down to one), so the folded term
   can be named by its constant operands.
4. The analysis run after the folds retires (subsumes) every term of a folded opcode whose
   operands and whose own class are constants, broadcasts aside (a splat is a broadcast of
   its scalar): rules no longer match it and extraction takes the constant. Left matchable, a class of constants offers operations on constants to
   every rule, and regrouping rules ((x*c)*d = x*(c*d) with x itself a product of
   constants) make new constants without end: 20 million matches on a 50-line module.
   (Terms of four or more operands, FoldV, are left matchable; no rule regroups them.)
Evaluation failures (unsupported op, error) leave the term alone and are counted.
"""
from __future__ import annotations


import numpy as np

from .. import evaluate
from ..ir import ELIDED, Computation, Instruction, Module
from ..ops import NEVER_MERGED, OPS, is_elementwise
from ..shape import Shape
from . import schema
from .callees import Callees
from .constants import canonical_scalar_text, scalar_from_text
from .encode import Encoding, splat_value
from .frozen import Values, no_gc
from .ingest import run_commands
from ..rule_compiler.guard_ir import guards_hold
from ..rule_compiler.rule_ir import FoldIR
from .terms import attr_text, attr_value_text, egg_string, ir_attrs, type_text

_REQUESTS = ("Fold1", "Fold2", "Fold3", "FoldV")


def declarations(ops) -> list[str]:
    """Requests (`Fold1/2/3`: a term whose operands are all constants, `FoldV`: any term
    with another operand count, checked here) for the opcodes `ops`."""
    out = [schema.relation("FoldOp", ["String"]), schema.ruleset("fold")]
    out += [schema.atom("FoldOp", egg_string(op)) for op in sorted(ops)]
    for n, table in enumerate(_REQUESTS, 1):
        operands = ["xs"] if table == "FoldV" else [f"x{i}" for i in range(n)]
        sorts = ["TermVec"] if table == "FoldV" else ["Term"] * n
        out.append(schema.relation(table, ["Term", "String", *sorts, "Attr", "Type"]))
        term = schema.atom("OpV", "op", "xs", "a", "t") if table == "FoldV" else \
            schema.node("op", operands, "a", "t")
        constant = [] if table == "FoldV" else [schema.constant_atom(x, f"i_{x}")
                                                for x in operands]
        out.append(schema.rule([schema.eq("e", term), schema.atom("FoldOp", "op"), *constant],
                               [schema.atom(table, "e", "op", *operands, "a", "t")], "fold"))
        if table != "FoldV":
            out.append(schema.rule([schema.eq("e", term), schema.atom("FoldOp", "op"), *constant,
                                    schema.constant_atom("e", "i_e"),
                                    schema.atom("!=", "op", '"broadcast"')],
                                   [schema.subsume(term)], "analysis"))
    return out


# Ops whose result on one splat operand is a splat of the same value (not bitcast: it may
# reinterpret the bits as another element type).
SPLAT_PRESERVING = frozenset({"broadcast", "reshape", "transpose", "reverse", "copy", "slice"})

# Elements an evaluation may read at most, whatever the declarations allow: a guard bounds
# the result, and reducing a huge splat to one number would still cost seconds.
MAX_FOLD_INPUT = 1 << 20


class Folder:
    """Analyzed fold declarations; `apply` folds what one iteration requested."""

    BUILDS = frozenset({"constant", "broadcast"})     # the opcodes of the terms folding adds

    def __init__(self, folds: list[FoldIR]):
        self.ops: dict[str, list[FoldIR]] = {}
        for fold in folds:
            for op in fold.fold.ops:
                members = [o for o in OPS if is_elementwise(o)] if op == "elementwise" else [op]
                for member in members:
                    if member not in NEVER_MERGED:
                        self.ops.setdefault(member, []).append(fold)
        self.failures = 0

    def declarations(self) -> str:
        """The egglog text of the requests for the declared ops."""
        return "\n".join(declarations(self.ops))

    def apply(self, egraph, encoding: Encoding, callees: Callees) -> int:
        """Fold the pending requests; returns how many terms were unioned with constants."""
        if not self.ops:
            return 0
        with no_gc():
            session = _Session(self, egraph, egraph.freeze().functions, encoding, callees)
            unions = session.fold_requests()
        if unions:
            run_commands(egraph, unions, "folds")
        return len(unions)


class _Session:
    """One round of folding over one freeze."""

    def __init__(self, folder: Folder, egraph, functions: dict, encoding: Encoding,
                 callees: Callees):
        self.folder, self.functions = folder, functions
        self.encoding, self.callees = encoding, callees
        self.values = Values(egraph, functions, encoding.extras)
        v2i = self.values.v2i
        # the constant analysis (schema.CONSTANT): class -> its leaves, its broadcasts
        self.leaves: dict[int, list[tuple[int, int, int]]] = {}
        for r in functions[schema.CONSTANT].rows:
            x, k, _, a, ts = r.inputs
            self.leaves.setdefault(v2i(x), []).append((v2i(k), v2i(a), v2i(ts)))
        self.broadcasts: dict[int, list[tuple[int, int, int]]] = {}
        for r in functions[schema.CONSTANT_BROADCAST].rows:
            x, c, ab, t = r.inputs
            self.broadcasts.setdefault(v2i(x), []).append((v2i(c), v2i(ab), v2i(t)))
        self.names: dict[int, str] = {}

    def fold_requests(self) -> list[str]:
        v2i, values = self.values.v2i, self.values
        unions, seen = [], set()
        for table in _REQUESTS:
            for r in self.functions[table].rows:
                e, op, xs, a, t = r.inputs[0], r.inputs[1], r.inputs[2:-2], r.inputs[-2], \
                    r.inputs[-1]
                term = v2i(e)
                if term in self.leaves or term in seen:
                    continue
                seen.add(term)
                operands = values.ints(xs[0]) if table == "FoldV" else [v2i(x) for x in xs]
                if not all(x in self.leaves for x in operands):
                    continue
                union = self._fold(values.string(op), operands, v2i(a), v2i(t))
                if union is not None:
                    unions.append(union)
        return unions

    def _fold(self, opcode: str, operands: list[int], attr_id: int, type_id: int) -> str | None:
        shape = self.values.shape(type_id)
        if shape.is_tuple or not shape.dtype.is_array:
            return None
        inputs = [self._input(x) for x in operands]
        names = [self._name(x, frozenset()) for x in operands]
        if None in inputs or None in names:
            return None
        on_scalars = all(scalar is not None for scalar, _, _ in inputs) and (
            is_elementwise(opcode) or (opcode in SPLAT_PRESERVING and len(inputs) == 1))
        if not on_scalars and sum(full.size for _, full, _ in inputs) > MAX_FOLD_INPUT:
            return None
        target = Shape(shape.element_type, ()) if on_scalars else shape
        if not any(guards_hold(f.guards, {"root": target}) for f in self.folder.ops[opcode]):
            return None
        constructor, fields = self.values.attr(attr_id)
        try:
            result = self._evaluate(opcode, fields, target, inputs, on_scalars)
        except Exception:           # an op the interpreter cannot fold is simply not folded
            self.folder.failures += 1
            return None
        term = schema.node(egg_string(opcode), names, attr_value_text(constructor, fields),
                           type_text(shape))
        return schema.union(term, self._constant_text(result, shape))

    def _type(self, x: int) -> int:
        """The type of constant class x (a class holding no broadcast holds its leaves)."""
        return self.broadcasts[x][0][2] if x in self.broadcasts else self.leaves[x][0][2]

    def _input(self, x: int) -> tuple[np.ndarray | None, np.ndarray, str] | None:
        """(the scalar a splat or scalar constant stands for, else None; the full value; the
        element type) of constant class x, or None when the value is unknown (an elided
        literal, a broadcast of a literal, a tuple)."""
        values = self.values
        type_id = self._type(x)
        shape = values.shape(type_id)
        if shape.is_tuple:
            return None
        for key, a, ts in self.leaves[x]:
            if key == 0:
                dtype = values.shape(ts).element_type
                scalar = scalar_from_text(values.attr(a)[1][0], dtype)
                return scalar, np.broadcast_to(scalar, shape.dims), dtype
        for key, a, ts in self.leaves[x]:
            if ts == type_id and self.encoding.literals[key] is not ELIDED:
                return None, self.encoding.literals[key], shape.element_type
        return None

    def _name(self, x: int, seen: frozenset) -> str | None:
        """The egglog text of a term in constant class x: its leaf, or one of its
        broadcasts of a constant class named the same way (None: only through a cycle)."""
        name = self.names.get(x)
        if name is not None:
            return name
        values = self.values
        for c, ab, t in self.broadcasts.get(x, ()):
            inner = None if c == x or c in seen else self._name(c, seen | {x})
            if inner is not None:
                name = schema.node('"broadcast"', [inner], attr_value_text(*values.attr(ab)),
                                   type_text(values.shape(t)))
                break
        else:
            own = [(k, a, ts) for k, a, ts in self.leaves[x]
                   if x not in self.broadcasts or ts == self._type(x)]
            if not own:
                return None
            key, a, ts = own[0]
            name = schema.leaf('"constant"', key, attr_value_text(*values.attr(a)),
                               type_text(values.shape(ts)))
        self.names[x] = name
        return name

    def _evaluate(self, opcode: str, fields, target: Shape, inputs, on_scalars: bool) -> np.ndarray:
        """The folded value: a 0-d array when evaluated on scalars, else the full array."""
        if on_scalars and not is_elementwise(opcode):
            return inputs[0][0]                     # moving a splat's elements around
        operands = []
        for i, (scalar, full, dtype) in enumerate(inputs):
            value = np.asarray(scalar if on_scalars else full)
            operands.append(Instruction(f"operand.{i}", "constant", Shape(dtype, value.shape),
                                        literal=value))
        attrs = ir_attrs(opcode, fields[:-1], fields[-1], self.encoding.rests, self.callees,
                         target)
        root = Instruction("folded", opcode, target, operands, attrs)
        comp = Computation("fold", operands + [root], root)
        with np.errstate(all="ignore"):
            [result] = evaluate(Module("fold", [comp], comp), [], verify=False)
        return np.asarray(result)

    def _constant_text(self, result: np.ndarray, shape: Shape) -> str:
        """The folded value as a term of type `shape`: scalar leaf, splat or literal, the
        forms the encoder gives constants."""
        dtype = shape.element_type
        scalar = result if result.ndim == 0 else splat_value(result)
        if scalar is None:
            key = self.encoding.literal_key(np.ascontiguousarray(result), shape)
            return schema.leaf('"constant"', key, attr_text("constant", [""], ""),
                               type_text(shape))
        value = attr_text("constant", [canonical_scalar_text(scalar, dtype)], "")
        leaf = schema.leaf('"constant"', 0, value, type_text(Shape(dtype, ())))
        if shape.rank == 0:
            return leaf
        return schema.node('"broadcast"', [leaf], attr_text("broadcast", [()], ""),
                           type_text(shape))

