"""The opcode table: every HLO opcode XLA's parser knows, with its arity and class, and the
properties of opcodes the stages ask about.

Other stages ask this module instead of keeping their own opcode lists: the parser (unknown
opcode?), shape inference and the interpreter (elementwise?), the e-graph encoder and rule
compiler (commutative?), fusion rules and outlining (heroes), the kernel count, the
lowering and the cost models (not a kernel? expensive? computed per element, inline?).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

VARIADIC = -1


@dataclass(frozen=True)
class OpInfo:
    name: str
    arity: int                 # number of operands, or VARIADIC
    category: str              # see CATEGORIES
    shape_required: bool       # the text must spell out the result shape
    attributes: frozenset[str] = frozenset()    # its own attributes (GENERIC_ATTRIBUTES aside)
    required: frozenset[str] = frozenset()      # those of them it cannot do without


CATEGORIES = {
    "unary": "elementwise, one operand, result has the operand's shape",
    "binary": "elementwise, two operands of one shape",
    "ternary": "elementwise, three operands (select, clamp)",
    "convert": "elementwise, element type changes (convert, bitcast-convert, ...)",
    "compare": "elementwise comparison producing pred",
    "leaf": "no operands (parameter, constant, iota, ...)",
    "data_movement": "rearranges elements without arithmetic",
    "reduction": "combines elements with a called computation",
    "contraction": "dot / convolution",
    "control": "calls other computations (call, while, conditional, fusion, ...)",
    "tuple": "builds or reads tuples",
    "collective": "communicates across devices",
    "other": "everything else",
}

_UNARY = """abs cbrt ceil count-leading-zeros cosine erf exponential exponential-minus-one floor
imag is-finite log log-plus-one logistic negate not popcnt real round-nearest-afz
round-nearest-even rsqrt sign sine sqrt tan tanh copy"""
_BINARY = """add and atan2 complex divide maximum minimum multiply or power remainder shift-left
shift-right-arithmetic shift-right-logical subtract xor"""

# name: (arity, category)
_SPECIAL: dict[str, tuple[int, str]] = {
    "select": (3, "ternary"), "clamp": (3, "ternary"),
    "convert": (1, "convert"), "bitcast-convert": (1, "convert"),
    "reduce-precision": (1, "convert"), "stochastic-convert": (2, "convert"),
    "compare": (2, "compare"),
    "parameter": (0, "leaf"), "constant": (0, "leaf"), "iota": (0, "leaf"),
    "replica-id": (0, "leaf"), "partition-id": (0, "leaf"),
    "rng-get-and-update-state": (0, "leaf"), "after-all": (VARIADIC, "other"),
    "broadcast": (1, "data_movement"), "reshape": (1, "data_movement"),
    "dynamic-reshape": (VARIADIC, "data_movement"), "transpose": (1, "data_movement"),
    "slice": (1, "data_movement"), "dynamic-slice": (VARIADIC, "data_movement"),
    "dynamic-update-slice": (VARIADIC, "data_movement"),
    "concatenate": (VARIADIC, "data_movement"), "pad": (2, "data_movement"),
    "reverse": (1, "data_movement"), "bitcast": (1, "data_movement"),
    "gather": (2, "data_movement"), "scatter": (VARIADIC, "reduction"),
    "reduce": (VARIADIC, "reduction"), "reduce-window": (VARIADIC, "reduction"),
    "select-and-scatter": (3, "reduction"), "sort": (VARIADIC, "reduction"),
    "map": (VARIADIC, "control"),
    "dot": (2, "contraction"), "convolution": (2, "contraction"),
    "ragged-dot": (3, "contraction"),
    "call": (VARIADIC, "control"), "while": (1, "control"),
    "conditional": (VARIADIC, "control"), "fusion": (VARIADIC, "control"),
    "custom-call": (VARIADIC, "other"),
    "async-start": (VARIADIC, "control"), "async-update": (1, "control"),
    "async-done": (1, "control"),
    "tuple": (VARIADIC, "tuple"), "get-tuple-element": (1, "tuple"),
    "opt-barrier": (1, "other"), "add-dependency": (2, "other"), "domain": (1, "other"),
    "get-dimension-size": (1, "other"), "set-dimension-size": (2, "other"),
    "batch-norm-grad": (5, "other"), "batch-norm-inference": (5, "other"),
    "batch-norm-training": (3, "other"), "cholesky": (1, "other"), "fft": (1, "other"),
    "triangular-solve": (2, "other"), "topk": (1, "other"),
    "rng": (VARIADIC, "other"), "rng-bit-generator": (1, "other"),
    "infeed": (1, "other"), "outfeed": (2, "other"),
    "send": (2, "other"), "send-done": (1, "other"),
    "recv": (1, "other"), "recv-done": (1, "other"),
    "copy-start": (1, "other"), "copy-done": (1, "other"),
    **{name: (VARIADIC, "collective") for name in (
        "all-gather", "all-gather-start", "all-reduce", "all-reduce-start", "all-to-all",
        "collective-broadcast", "collective-permute", "collective-permute-start",
        "reduce-scatter")},
    **{name: (1, "collective") for name in (
        "all-gather-done", "all-reduce-done", "collective-permute-done")},
    "ragged-all-to-all": (6, "collective"),
}

# Opcodes whose result shape XLA's parser can infer when the text leaves it out.
_INFERABLE = set(("""abs add add-dependency after-all atan2 batch-norm-grad batch-norm-inference
batch-norm-training broadcast call ceil cholesky clamp count-leading-zeros compare complex
concatenate conditional convolution copy cosine opt-barrier divide domain dot erf exponential
exponential-minus-one fft floor gather get-dimension-size set-dimension-size get-tuple-element
imag is-finite log log-plus-one logistic and not or xor map maximum minimum multiply negate pad
partition-id popcnt power ragged-dot real reduce remainder replica-id reverse round-nearest-afz
round-nearest-even rsqrt scatter select shift-left shift-right-arithmetic shift-right-logical
sign sine sqrt cbrt reduce-window select-and-scatter sort subtract tan tanh transpose
triangular-solve tuple while topk""").split())


# Attributes XLA's parser takes on every instruction.
GENERIC_ATTRIBUTES = frozenset(("backend_config", "control-predecessors", "frontend_attributes",
                                "metadata", "origin", "parameter_replication", "sharding",
                                "statistics"))

# Each opcode's own attributes as the parser of XLA (jaxlib 0.10) takes them; a trailing `?`
# marks an optional one. Opcodes not listed take only the generic ones. Two requirements
# depend on operands and are left optional here: broadcast needs `dimensions` unless its
# operand is a scalar, conditional needs true/false_computation (pred index) or
# branch_computations (s32 index).
_ALL_GATHER = "dimensions replica_groups? channel_id? constrain_layout? use_global_device_ids?"
_ALL_REDUCE = "to_apply replica_groups? channel_id? constrain_layout? use_global_device_ids? mode?"
_PERMUTE = "source_target_pairs channel_id? slice_sizes?"
_TRANSFER = "channel_id? is_host_transfer?"
_BATCH_NORM = "epsilon feature_index"
_DOT = ("lhs_contracting_dims? rhs_contracting_dims? lhs_batch_dims? rhs_batch_dims? "
        "operand_precision?")
_ATTRIBUTES: dict[str, str] = {
    "iota": "iota_dimension", "topk": "k largest?",
    "all-gather": _ALL_GATHER, "all-gather-start": _ALL_GATHER,
    "all-reduce": _ALL_REDUCE, "all-reduce-start": _ALL_REDUCE,
    "reduce-scatter": _ALL_REDUCE + " dimensions",
    "all-to-all": "replica_groups? channel_id? dimensions? constrain_layout?",
    "ragged-all-to-all": "replica_groups? channel_id? dimensions?",
    "collective-broadcast": "replica_groups channel_id?",
    "collective-permute": _PERMUTE, "collective-permute-start": _PERMUTE,
    "async-start": "calls async_execution_thread? output_to_operand_aliasing?",
    "async-update": "calls? async_execution_thread?",
    "async-done": "calls? async_execution_thread?",
    "copy-start": "cross_program_prefetch_index?", "reshape": "inferred_dimension?",
    "sort": "dimensions to_apply is_stable?", "while": "condition body",
    "send": _TRANSFER, "send-done": _TRANSFER, "recv": _TRANSFER, "recv-done": _TRANSFER,
    "get-tuple-element": "index", "call": "to_apply is_composite?",
    "reduce-window": "to_apply window?",
    "convolution": "dim_labels window? feature_group_count? batch_group_count? "
                   "operand_precision? convolution_kind? sparsity_config?",
    "fft": "fft_type fft_length",
    "triangular-solve": "left_side? lower? unit_diagonal? transpose_a?", "cholesky": "lower?",
    "compare": "direction type?", "broadcast": "dimensions?", "concatenate": "dimensions",
    "map": "to_apply dimensions?", "reduce": "to_apply dimensions", "reverse": "dimensions",
    "select-and-scatter": "select scatter window?", "slice": "slice",
    "dynamic-slice": "dynamic_slice_sizes", "transpose": "dimensions",
    "batch-norm-training": _BATCH_NORM, "batch-norm-inference": _BATCH_NORM,
    "batch-norm-grad": _BATCH_NORM, "pad": "padding",
    "fusion": "calls kind output_to_operand_aliasing?",
    "infeed": "infeed_config?", "outfeed": "outfeed_config? outfeed_shape?",
    "rng": "distribution", "rng-get-and-update-state": "delta", "rng-bit-generator": "algorithm",
    "reduce-precision": "exponent_bits mantissa_bits",
    "conditional": "true_computation? false_computation? branch_computations?",
    "custom-call": "custom_call_target window? dim_labels? feature_group_count? "
                   "batch_group_count? operand_layout_constraints? custom_call_has_side_effect? "
                   "to_apply? called_computations? output_to_operand_aliasing? padding_type? "
                   "literal? operand_precision? schedule? api_version?",
    "dot": _DOT + " algorithm?", "ragged-dot": _DOT + " lhs_ragged_dims? rhs_group_dims?",
    "gather": "offset_dims collapsed_slice_dims start_index_map index_vector_dim slice_sizes "
              "indices_are_sorted? operand_batching_dims? start_indices_batching_dims?",
    "scatter": "update_window_dims inserted_window_dims scatter_dims_to_operand_dims "
               "index_vector_dim to_apply indices_are_sorted? unique_indices? "
               "input_batching_dims? scatter_indices_batching_dims?",
    "domain": "domain", "get-dimension-size": "dimensions", "set-dimension-size": "dimensions",
    **dict.fromkeys(("cbrt cosine erf exponential exponential-minus-one log log-plus-one "
                     "logistic rsqrt sine sqrt tan tanh").split(), "result_accuracy?"),
}


def _build() -> dict[str, OpInfo]:
    table: dict[str, tuple[int, str]] = {}
    table.update({n: (1, "unary") for n in _UNARY.split()})
    table.update({n: (2, "binary") for n in _BINARY.split()})
    table.update(_SPECIAL)
    ops = {}
    for name, (arity, cat) in table.items():
        words = _ATTRIBUTES.get(name, "").split()
        ops[name] = OpInfo(name, arity, cat, name not in _INFERABLE,
                           frozenset(w.rstrip("?") for w in words),
                           frozenset(w for w in words if not w.endswith("?")))
    return ops


OPS: dict[str, OpInfo] = _build()

ELEMENTWISE_CATEGORIES = frozenset({"unary", "binary", "ternary", "convert", "compare"})


def is_elementwise(opcode: str) -> bool:
    info = OPS.get(opcode)
    return info is not None and info.category in ELEMENTWISE_CATEGORIES


# ---- properties of opcodes other stages ask about (one definition each)

# Binary ops with op(a, b) == op(b, a): a rule's pattern matches both operand orders, and a
# reducer written `op(p1, p0)` is the reducer `op`.
COMMUTATIVE = frozenset("add multiply maximum minimum and or xor".split())
# Binary ops with op(op(a, b), c) == op(a, op(b, c)) (up to float rounding): a reduction by
# one of them may be regrouped (tiled, vectorized), and a rule may name it as a reducer.
ASSOCIATIVE = frozenset("add multiply maximum minimum and or xor".split())

# Heroes: ops that bring a loop structure of their own to a kernel, rather than computing
# one output element per index. A kernel with a reduction is XLA's kInput fusion, one with
# a contraction kOutput; those two also pick the kernel's hero for sibling merges.
REDUCTION_HEROES = frozenset({"reduce", "reduce-window"})
CONTRACTION_HEROES = frozenset({"dot", "convolution"})
SIBLING_HEROES = REDUCTION_HEROES | CONTRACTION_HEROES
HEROES = SIBLING_HEROES | {"scatter", "select-and-scatter", "sort", "gather", "custom-call",
                           "fft"}

# Ops that only relabel a buffer (same bytes, another shape): no loop of their own.
VIEWS = frozenset({"bitcast", "reshape"})
# Ops that build or take apart tuples of buffers.
TUPLE_OPS = frozenset({"tuple", "get-tuple-element"})
# Ops that only order other ops (tokens, barriers, domains): no data of their own.
ORDERING = frozenset({"after-all", "opt-barrier", "add-dependency", "domain"})
# Control flow: its called computations' instructions do the work.
CONTROL = frozenset({"while", "conditional", "call"})

# Opcodes whose two instances are two events (random draws, I/O, communication): equal
# instances must stay two instructions (the e-graph and the fusion stage's merging ask).
NEVER_MERGED = frozenset({
    "rng", "rng-get-and-update-state", "infeed", "outfeed", "send", "send-done", "recv",
    "recv-done"} | {name for name, info in OPS.items() if info.category == "collective"})


def never_merged(opcode: str, attrs: dict) -> bool:
    """Must two equal instructions of `opcode` (with `attrs`) stay apart? Also a custom-call
    declared to have side effects."""
    return opcode in NEVER_MERGED or (
        opcode == "custom-call" and attrs.get("custom_call_has_side_effect") is True)
# Ops the host runs between kernels: they pass buffers around or call computations.
HOST_OPS = frozenset({"parameter"}) | TUPLE_OPS | CONTROL | ORDERING
# Instructions that are not kernels when a module runs: host ops, views, constants (data
# in the executable) and the device's ids.
NOT_KERNELS = HOST_OPS | VIEWS | {"constant", "partition-id", "replica-id"}

# Elementwise ops dearer than an add (polynomial approximations, divisions): worth computing
# once and storing rather than recomputing for every reader.
EXPENSIVE_ELEMENTWISE = frozenset("""divide remainder sqrt rsqrt cbrt exponential
exponential-minus-one log log-plus-one logistic tanh sine cosine tan atan2 erf power""".split())

# Ops whose element at an output index comes from a few operand elements at related indices,
# like an elementwise op's: a loop over the consumer's elements computes them inline instead
# of reading them from memory. The others (dot, reduce, sort, scatter, ...) run loops of
# their own over their operands, so their results are stored before anything reads them.
_PER_ELEMENT = frozenset("""broadcast reshape bitcast transpose slice pad concatenate reverse
iota constant dynamic-slice dynamic-update-slice gather map reduce-window""".split())
# Of those, the ones whose element is one operand element (or its index): recomputing them
# costs only address arithmetic, so every loop that reads one may compute its own copy.
INDEX_ONLY = frozenset("broadcast reshape bitcast transpose slice reverse iota copy".split())
# Of those, the ones dearer than an add per element: computed once and stored when a loop
# would evaluate one element of them several times (through a broadcast, a window, ...).
EXPENSIVE_PER_ELEMENT = EXPENSIVE_ELEMENTWISE | {"reduce-window", "map", "gather"}


def per_element(opcode: str) -> bool:
    return is_elementwise(opcode) or opcode in _PER_ELEMENT


@lru_cache(maxsize=None)
def attribute_rules(opcode: str) -> tuple[frozenset[str], frozenset[str]] | None:
    """(attributes allowed, attributes required) on `opcode`, generic ones included; None
    for an unknown opcode. An async wrapper `X-start` takes X's attributes and async-start's
    (`calls` aside: X-start makes its own wrapped computation); `X-update`/`X-done` take the
    execution thread only."""
    info = OPS.get(opcode)
    if info is not None:
        return GENERIC_ATTRIBUTES | info.attributes, info.required
    wrapped = async_wrapped(opcode)
    if wrapped is None:
        return None
    inner, generic = wrapped
    if generic != "async-start":
        return GENERIC_ATTRIBUTES | {"async_execution_thread"}, frozenset()
    start = OPS["async-start"].attributes - {"calls"}
    return GENERIC_ATTRIBUTES | OPS[inner].attributes | start, OPS[inner].required


def async_wrapped(opcode: str) -> tuple[str, str] | None:
    """`call-start` -> ("call", "async-start"): XLA's shorthand for async-wrapped ops.

    Returns None for real opcodes (all-reduce-start is an opcode of its own)."""
    if opcode in OPS:
        return None
    for suffix, generic in (("-start", "async-start"), ("-update", "async-update"),
                            ("-done", "async-done")):
        if opcode.endswith(suffix) and opcode[: -len(suffix)] in OPS:
            return opcode[: -len(suffix)], generic
    return None
