"""The term language of the e-graph: how one HLO instruction is written as one egglog e-node.

This module is the contract between the encoder (IR -> facts), the rule compiler (.rules ->
egglog rules) and the extractor/decoder (e-graph -> IR). Nothing else writes egglog names.

Terms (the sort `Term`), by operand count:

    (Leaf op key attr type)            parameter: key = parameter number
                                       constant:  key = literal id (0 for scalars, whose value
                                                  is in the attr: (As "1" ""))
                                       others:    key = 0, or a unique id for instructions that
                                                  must never be merged (rng, side effects)
    (Op1 op x attr type)   (Op2 op x y attr type)   (Op3 op x y z attr type)
    (OpV op (vec-of x ...) attr type)  any other operand count (0 for after-all(), 4 and more)

`op` is the HLO opcode string. `type` is (T dtype dims extra) for arrays: dtype "f32", dims
(vec-of 8 128), extra "" unless the shape has a non-default layout or dynamic dimensions, in
which case it is the shape's full text; tuples are (TT (vec-of type ...)).

`attr` is typed per opcode (ATTR_FIELDS): one constructor per sequence of field kinds, named
"A" + kind letters (v = vector of i64, s = String, i = i64), whose last field is always `rest`,
the canonical text of every other attribute except metadata. So (Op1 "transpose" x (Av p rest)
t) matches a transpose with permutation p, and hash-consing stays exact: two instructions are
one e-node only when opcode, operands, every attribute and the type agree.
"""
from __future__ import annotations

from typing import Sequence

from ..dtypes import DTYPES

# The parts of a window, as schema fields of reduce-window and convolution.
WINDOW_FIELDS = ("size", "stride", "low", "high", "lhs_dilate", "rhs_dilate", "rhs_reversal")
_WINDOW = [(name, "v") for name in WINDOW_FIELDS]

# opcode -> [(attribute name, kind)], kinds: v = list of ints, s = string, i = int.
# `slice` and `pad` spread their per-dimension triples over three vectors, reduce-window and
# convolution their window over one vector per window field (rhs_reversal as 0/1);
# `to_apply` and other called computations are strings naming a reducer ("add") or a
# registered computation ("@c3"); a convolution's dim_labels is its HLO text
# (terms.field_value).
ATTR_FIELDS: dict[str, list[tuple[str, str]]] = {
    "broadcast": [("dimensions", "v")],
    "transpose": [("dimensions", "v")],
    "reverse": [("dimensions", "v")],
    "concatenate": [("dimensions", "v")],
    "reduce": [("dimensions", "v"), ("to_apply", "s")],
    "reduce-window": [("to_apply", "s"), *_WINDOW],
    "map": [("to_apply", "s")],
    "sort": [("dimensions", "v"), ("to_apply", "s")],
    "slice": [("start", "v"), ("limit", "v"), ("stride", "v")],
    "pad": [("low", "v"), ("high", "v"), ("interior", "v")],
    "dot": [("lhs_contracting_dims", "v"), ("rhs_contracting_dims", "v"),
            ("lhs_batch_dims", "v"), ("rhs_batch_dims", "v")],
    "compare": [("direction", "s"), ("type", "s")],
    "get-tuple-element": [("index", "i")],
    "iota": [("iota_dimension", "i")],
    "constant": [("value", "s")],
    "dynamic-slice": [("dynamic_slice_sizes", "v")],
    "while": [("condition", "s"), ("body", "s")],
    "call": [("to_apply", "s")],
    "gather": [("offset_dims", "v"), ("collapsed_slice_dims", "v"), ("start_index_map", "v"),
               ("index_vector_dim", "i"), ("slice_sizes", "v"), ("operand_batching_dims", "v"),
               ("start_indices_batching_dims", "v")],
    "scatter": [("update_window_dims", "v"), ("inserted_window_dims", "v"),
                ("scatter_dims_to_operand_dims", "v"), ("index_vector_dim", "i"),
                ("input_batching_dims", "v"), ("scatter_indices_batching_dims", "v"),
                ("to_apply", "s")],
    "custom-call": [("custom_call_target", "s")],
    "reduce-precision": [("exponent_bits", "i"), ("mantissa_bits", "i")],
    "convolution": [*_WINDOW, ("dim_labels", "s")],
}

KIND_SORT = {"v": "IVec", "s": "String", "i": "i64"}


def attr_constructor(opcode: str) -> str:
    """Name of the Attr constructor an opcode's attributes use, e.g. "Avv" ("A" for none)."""
    return "A" + "".join(kind for _, kind in ATTR_FIELDS.get(opcode, ()))


def attr_constructors() -> list[str]:
    names = {attr_constructor(op) for op in ATTR_FIELDS} | {"A"}
    return sorted(names)


# Element-type classes as egglog relations over dtype names: rules guard with (IsFloat dt).
DTYPE_CLASSES = {relation: tuple(name for name, d in DTYPES.items() if d.kind == kind)
                 for relation, kind in (("IsFloat", "float"), ("IsSigned", "int"),
                                        ("IsUnsigned", "uint"), ("IsPred", "pred"),
                                        ("IsComplex", "complex"))}
DTYPE_CLASSES["IsInt"] = DTYPE_CLASSES["IsSigned"] + DTYPE_CLASSES["IsUnsigned"]
# Types whose compare is an exact total order of their values (no NaN, no signed zero).
DTYPE_CLASSES["IsIntOrPred"] = DTYPE_CLASSES["IsInt"] + DTYPE_CLASSES["IsPred"]

TERM_CONSTRUCTORS = ("Leaf", "Op1", "Op2", "Op3", "OpV")

# The constant analysis, the one answer to "is this e-class a constant, and which" that rules
# (left-side constants, `is_constant`) and constant folding (fold.py) read:
#   (Const e k v a ts)           e holds the constant leaf (Leaf "constant" k a ts), whose
#                                attribute a has the value text v, or broadcasts of one
#                                (k = 0: a scalar, e a splat of v; rules match v directly)
#   (ConstBroadcast e c ab t)    e holds (Op1 "broadcast" c ab t) of a constant class c: how
#                                the folder names e when it holds no leaf itself
CONSTANT = "Const"
CONSTANT_BROADCAST = "ConstBroadcast"
OPCODES = "Opcodes"     # (Opcodes op): some term has opcode op (rule_compiler/gates.py)


def declarations() -> str:
    """egglog text declaring every sort, constructor, relation and ruleset of the schema."""
    attrs = "\n".join(
        f"  ({name} {' '.join(KIND_SORT[k] for k in name[1:])} String)"
        for name in attr_constructors())
    dtype_facts = "\n".join(f'({rel} "{dt}")' for rel, dts in DTYPE_CLASSES.items()
                            for dt in dts)
    relations = "\n".join(f"(relation {rel} (String))" for rel in DTYPE_CLASSES)
    return f"""
(sort IVec (Vec i64))
(datatype Attr
{attrs})
(datatype* (Type (T String IVec String) (TT TyVec))
           (sort TyVec (Vec Type)))
(datatype* (Term
              (Leaf String i64 Attr Type)
              (Op1 String Term Attr Type)
              (Op2 String Term Term Attr Type)
              (Op3 String Term Term Term Attr Type)
              (OpV String TermVec Attr Type))
           (sort TermVec (Vec Term)))
(function tyof (Term) Type :no-merge)
{relations}
{dtype_facts}
(relation {OPCODES} (String))
(ruleset analysis)
(rule ((= e (Leaf op k a t))) ((set (tyof e) t) ({OPCODES} op)) :ruleset analysis)
(rule ((= e (Op1 op x a t))) ((set (tyof e) t) ({OPCODES} op)) :ruleset analysis)
(rule ((= e (Op2 op x y a t))) ((set (tyof e) t) ({OPCODES} op)) :ruleset analysis)
(rule ((= e (Op3 op x y z a t))) ((set (tyof e) t) ({OPCODES} op)) :ruleset analysis)
(rule ((= e (OpV op xs a t))) ((set (tyof e) t) ({OPCODES} op)) :ruleset analysis)
(relation {CONSTANT} (Term i64 String Attr Type))
(relation {CONSTANT_BROADCAST} (Term Term Attr Type))
(rule ((= e (Leaf "constant" k a t)) (= a ({attr_constructor("constant")} v r)))
      (({CONSTANT} e k v a t)) :ruleset analysis :name "hlo-opt/constant")
(rule ((= e (Op1 "broadcast" c ab t)) ({CONSTANT} c k v a ts))
      (({CONSTANT} e k v a ts) ({CONSTANT_BROADCAST} e c ab t))
      :ruleset analysis :name "hlo-opt/constant-broadcast")
"""


def splat_atom(term: str, text: str, fresh: str) -> str:
    """A query atom: `term` is a splat of the scalar constant `text` (an egglog string);
    `fresh` prefixes the atom's own variables."""
    return f"({CONSTANT} {term} 0 {text} {fresh}_a {fresh}_t)"


def constant_atom(term: str, fresh: str) -> str:
    """A query atom: `term` is a constant (a literal, a splat, or broadcasts of them)."""
    return f"({CONSTANT} {term} {fresh}_k {fresh}_v {fresh}_a {fresh}_t)"


# --- egglog text: other modules spell commands, terms and atoms through these --------------

def leaf(op: str, key, attr: str, type_: str) -> str:
    """A Leaf term; `op` and the fields are egglog text (a quoted opcode or a variable)."""
    return f"(Leaf {op} {key} {attr} {type_})"


def node(op: str, operands: Sequence[str], attr: str, type_: str) -> str:
    """A term with operands: Op1..Op3 by their count, otherwise OpV over a vector of them."""
    if 1 <= len(operands) <= 3:
        return f"(Op{len(operands)} {op} {' '.join(operands)} {attr} {type_})"
    return f"(OpV {op} {vec_of(operands)} {attr} {type_})"


def vec_of(items: Sequence[str]) -> str:
    """A vector value in actions and facts."""
    return f"(vec-of {' '.join(items)})" if items else "(vec-empty)"


def query_vec(items) -> str:
    """An i64 vector in a query; the empty one is written (vec-range 0) because egglog cannot
    infer the element type of a bare (vec-empty) there."""
    items = list(items)
    return f"(vec-of {' '.join(items)})" if items else "(vec-range 0)"


def array_type(dtype: str, dims: str, extra: str) -> str:
    """An array Type from the egglog text of its element type, dims and extra."""
    return f"(T {dtype} {dims} {extra})"


def tuple_type(elements: Sequence[str]) -> str:
    return f"(TT {vec_of(elements)})"


def attr(constructor: str, fields: Sequence[str]) -> str:
    """An Attr value: its constructor (attr_constructor) applied to the fields' text."""
    return atom(constructor, *fields)


def atom(name: str, *args) -> str:
    """A call: a fact of a relation, a function's value, a constructor's term."""
    return f"({name} {' '.join(map(str, args))})"


def eq(a: str, b: str) -> str:
    return f"(= {a} {b})"


def union(a: str, b: str) -> str:
    return f"(union {a} {b})"


def subsume(term: str) -> str:
    """Retire a term: no rule matches it and extraction never picks it."""
    return f"(subsume {term})"


def set_value(call: str, value) -> str:
    return f"(set {call} {value})"


def ruleset(name: str) -> str:
    return f"(ruleset {name})"


def combined_ruleset(name: str, members: Sequence[str]) -> str:
    """A ruleset running its members' rules together, one iteration as one."""
    return f"(unstable-combined-ruleset {name} {' '.join(members)})"


def relation(name: str, sorts: Sequence[str]) -> str:
    return f"(relation {name} ({' '.join(sorts)}))"


def function(name: str, params: Sequence[str], result: str) -> str:
    """A function whose value is set once per arguments (:no-merge)."""
    return f"(function {name} ({' '.join(params)}) {result} :no-merge)"


def constructor(name: str, params: Sequence[str], sort: str) -> str:
    """A constructor of terms extraction never picks (placeholders)."""
    return f"(constructor {name} ({' '.join(params)}) {sort} :unextractable)"


def run(ruleset: str, iterations: int) -> str:
    return f"(run {ruleset} {iterations})"


def check(*facts: str) -> str:
    """A query that fails (an egglog error) unless every fact holds."""
    return f"(check {' '.join(facts)})"


def rule(query: Sequence[str], actions: Sequence[str], ruleset: str, name: str = "") -> str:
    named = f' :name "{name}"' if name else ""
    return (f"(rule ({' '.join(query)})\n      ({' '.join(actions)})\n"
            f"      :ruleset {ruleset}{named})")


# (OperandOf xs k x): operand k of an OpV term whose operands are xs is x. Rules that read
# the operands of an operand list one by one (rule_emit.Emitter.element) join on it rather
# than compute them with vec-get: egglog would otherwise enumerate a table for each
# computed operand. Each such rule fills the rows it reads with a companion rule
# (operand_of) that runs with its host requests, where its opcode is present.
OPERAND_OF = "OperandOf"


def operand_of_relation() -> str:
    return relation(OPERAND_OF, ["TermVec", "i64", "Term"])


def operand_of(op: str, k: int) -> tuple[str, str]:
    """(query, action) of the rule recording operand k of the OpV terms of opcode `op` (an
    egglog string)."""
    return (f"{eq('e', f'(OpV {op} xs a t)')} {eq('x', atom('vec-get', 'xs', k))}",
            atom(OPERAND_OF, "xs", k, "x"))
