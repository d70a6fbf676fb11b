"""Constant folding, per the rule files' `fold` declarations, with the interpreter.

Protocol, once per iteration of the runner:
1. The `analysis` ruleset records which e-classes hold a constant: `KLeaf` (a constant leaf)
   and `KSplat` (a broadcast of a scalar constant), both marking `IsK`.
2. The `fold` ruleset records a request (`Fold1/2/3/V`: the term, its opcode, operand classes,
   Attr and Type) for every term whose opcode a declaration names and whose operands are all
   constants.
3. `Folder.apply` reads only those tables from a freeze, skips terms already constant, checks
   the declaration's guards on the result type, evaluates the op with the interpreter and
   unions the term with the result: a splat stays a splat (an elementwise op on splats is
   evaluated once, on scalars, whatever the size), a scalar is a scalar leaf, other arrays
   become new literals. The union is written as text: a constant class can always be named
   by its constant term, so the folded term can be named by its constant operands.
Evaluation failures (unsupported op, error) leave the term alone and are counted.
"""
from __future__ import annotations


import numpy as np

from .. import evaluate
from ..ir import ELIDED, Computation, Instruction, Module
from ..ops import OPS, is_elementwise
from ..shape import AnyShape, Shape
from .callees import Callees
from .constants import canonical_scalar_text, scalar_from_text
from .encode import NEVER_MERGED, Encoding, splat_value
from .frozen import Values, no_gc
from .ingest import run_commands
from .guard_ir import guards_hold
from .rule_ir import FoldIR
from .terms import attr_text, attr_value_text, ir_attrs, type_text

DECLARATIONS = """
(relation KLeaf (Term i64 Attr Type))
(relation KSplat (Term Attr Type Attr Type))
(relation IsK (Term))
(rule ((= x (Leaf "constant" k a t))) ((KLeaf x k a t) (IsK x)) :ruleset analysis)
(rule ((= x (Op1 "broadcast" s ab t)) (= s (Leaf "constant" 0 a ts)))
      ((KSplat x a ts ab t) (IsK x)) :ruleset analysis)
(relation FoldOp (String))
(relation Fold1 (Term String Term Attr Type))
(relation Fold2 (Term String Term Term Attr Type))
(relation Fold3 (Term String Term Term Term Attr Type))
(relation FoldV (Term String TermVec Attr Type))
(ruleset fold)
(rule ((= e (Op1 op x a t)) (FoldOp op) (IsK x)) ((Fold1 e op x a t)) :ruleset fold)
(rule ((= e (Op2 op x y a t)) (FoldOp op) (IsK x) (IsK y)) ((Fold2 e op x y a t)) :ruleset fold)
(rule ((= e (Op3 op x y z a t)) (FoldOp op) (IsK x) (IsK y) (IsK z))
      ((Fold3 e op x y z a t)) :ruleset fold)
(rule ((= e (OpV op xs a t)) (FoldOp op)) ((FoldV e op xs a t)) :ruleset fold)
"""

# Ops whose result on one splat operand is a splat of the same value (not bitcast: it may
# reinterpret the bits as another element type).
SPLAT_PRESERVING = frozenset({"broadcast", "reshape", "transpose", "reverse", "copy", "slice"})

# Elements an evaluation may read at most, whatever the declarations allow: a guard bounds
# the result, and reducing a huge splat to one number would still cost seconds.
MAX_FOLD_INPUT = 1 << 20


class Folder:
    """Analyzed fold declarations; `apply` folds what one iteration requested."""

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
        """The egglog text: constant tracking, requests for the declared ops."""
        facts = "\n".join(f'(FoldOp "{op}")' for op in sorted(self.ops))
        return DECLARATIONS + facts

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
        self.constants: dict[int, tuple] = {}
        for r in functions["KLeaf"].rows:
            x, k, a, t = r.inputs
            self.constants.setdefault(v2i(x), ("leaf", v2i(k), v2i(a), v2i(t)))
        for r in functions["KSplat"].rows:
            x, a, ts, ab, t = r.inputs
            self.constants.setdefault(v2i(x), ("splat", v2i(a), v2i(ts), v2i(ab), v2i(t)))

    def fold_requests(self) -> list[str]:
        v2i, values = self.values.v2i, self.values
        unions, seen = [], set()
        for table in ("Fold1", "Fold2", "Fold3", "FoldV"):
            for r in self.functions[table].rows:
                e, op, xs, a, t = r.inputs[0], r.inputs[1], r.inputs[2:-2], r.inputs[-2], \
                    r.inputs[-1]
                term = v2i(e)
                if term in self.constants or term in seen:
                    continue
                seen.add(term)
                operands = values.ints(xs[0]) if table == "FoldV" else [v2i(x) for x in xs]
                if not all(x in self.constants for x in operands):
                    continue
                union = self._fold(values.string(op), operands, v2i(a), v2i(t), table)
                if union is not None:
                    unions.append(union)
        return unions

    def _fold(self, opcode: str, operands: list[int], attr_id: int, type_id: int,
              table: str) -> str | None:
        shape = self.values.shape(type_id)
        if shape.is_tuple or not shape.dtype.is_array:
            return None
        constants = [self.constants[x] for x in operands]
        inputs = [self._input(c) for c in constants]
        if any(i is None for i in inputs):
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
        term = self._term_text(table, opcode, constants, constructor, fields, shape)
        return f"(union {term} {self._constant_text(result, shape)})"

    def _input(self, constant: tuple) -> tuple[np.ndarray | None, np.ndarray, str] | None:
        """(the scalar a splat or scalar constant stands for, else None; the full value; the
        element type), or None when the value is unknown (an elided literal, a tuple)."""
        values = self.values
        if constant[0] == "splat":
            _, a, ts, _, t = constant
            dtype = values.shape(ts).element_type
            scalar = scalar_from_text(values.attr(a)[1][0], dtype)
            return scalar, np.broadcast_to(scalar, values.shape(t).dims), dtype
        _, key, a, t = constant
        shape = values.shape(t)
        if shape.is_tuple:
            return None
        if key == 0:
            scalar = scalar_from_text(values.attr(a)[1][0], shape.element_type)
            return scalar, scalar, shape.element_type
        literal = self.encoding.literals[key]
        return None if literal is ELIDED else (None, literal, shape.element_type)

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

    def _term_text(self, table: str, opcode: str, constants, constructor: str, fields,
                   shape: AnyShape) -> str:
        operands = " ".join(self._constant_term(c) for c in constants)
        if table == "FoldV":
            operands = f"(vec-of {operands})" if constants else "(vec-empty)"
        head = "OpV" if table == "FoldV" else f"Op{table[-1]}"
        return (f'({head} "{opcode}" {operands} {attr_value_text(constructor, fields)} '
                f"{type_text(shape)})")

    def _constant_term(self, constant: tuple) -> str:
        """The egglog text of a term in a constant class (its constant leaf or splat)."""
        values = self.values
        if constant[0] == "leaf":
            _, key, a, t = constant
            return (f'(Leaf "constant" {key} {attr_value_text(*values.attr(a))} '
                    f"{type_text(values.shape(t))})")
        _, a, ts, ab, t = constant
        return (f'(Op1 "broadcast" (Leaf "constant" 0 {attr_value_text(*values.attr(a))} '
                f"{type_text(values.shape(ts))}) {attr_value_text(*values.attr(ab))} "
                f"{type_text(values.shape(t))})")

    def _constant_text(self, result: np.ndarray, shape: Shape) -> str:
        """The folded value as a term of type `shape`: scalar leaf, splat or literal, the
        forms the encoder gives constants."""
        dtype = shape.element_type
        scalar = result if result.ndim == 0 else splat_value(result)
        if scalar is None:
            key = self.encoding.literal_key(np.ascontiguousarray(result), shape)
            return f'(Leaf "constant" {key} {attr_text("constant", [""], "")} {type_text(shape)})'
        value = attr_text("constant", [canonical_scalar_text(scalar, dtype)], "")
        leaf = f'(Leaf "constant" 0 {value} {type_text(Shape(dtype, ()))})'
        if shape.rank == 0:
            return leaf
        return f'(Op1 "broadcast" {leaf} {attr_text("broadcast", [()], "")} {type_text(shape)})'

