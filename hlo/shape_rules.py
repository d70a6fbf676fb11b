"""Shape rules for structured ops: windows and contractions (convolution, dot), reductions
with called reducers (reduce, reduce-window, select-and-scatter, scatter, sort, map),
control flow (call, fusion, while, conditional) and library ops (fft, topk, cholesky, ...).
Rules with called computations check their signatures, since that is where inconsistent
modules are caught. shape_inference.py dispatches to them."""
from __future__ import annotations

from typing import Sequence

from .attributes import ComputationRef, ConvDimLabels, Window
from .dot_dims import free_dims
from .dtypes import COMPLEX_OF, COMPLEX_PART, INTEGRAL, KIND_RANK
from .shape import AnyShape, Shape, TupleShape
from .shape_util import (array, attr, check_signature, computation, dims_attr, expect_array,
                         expect_scalar, fail, maybe_tuple, relayout, scalars, text)


# ---------------------------------------------------------- windows and contractions

def window_output_dims(dims: Sequence[int], window: Window) -> list[int]:
    """Output size per dimension of a windowed op (convolution, reduce-window)."""
    if window.rank != len(dims):
        fail(f"window has {window.rank} dimensions, operand has {len(dims)}")
    out = []
    for n, size, stride, (lo, hi), base, dil in zip(dims, window.size, window.stride,
                                                      window.pad, window.lhs_dilate,
                                                      window.rhs_dilate):
        if size < 1 or stride < 1 or base < 1 or dil < 1:
            fail(f"window {size=} {stride=} lhs_dilate={base} rhs_dilate={dil} is invalid")
        padded = (0 if n == 0 else (n - 1) * base + 1) + lo + hi
        effective = (size - 1) * dil + 1
        out.append(0 if padded < effective else (padded - effective) // stride + 1)
    return out


def _result_type(lhs: Shape, rhs: Shape) -> str:
    """XLA's HigherPrecisionType for dot/convolution operands of different types."""
    a, b = lhs.dtype, rhs.dtype
    if a.name == b.name:
        return a.name
    return max((a, b), key=lambda t: (KIND_RANK[t.kind], t.bits)).name


def _braced(dims: Sequence[int]) -> str:
    return "{" + ",".join(map(str, dims)) + "}"


def _dot(opcode, operands, attrs):
    lhs = expect_array(operands[0], "dot lhs")
    rhs = expect_array(operands[1], "dot rhs")
    lc, lb = (dims_attr(attrs, f"lhs_{k}_dims", opcode, lhs.rank, ())
              for k in ("contracting", "batch"))
    rc, rb = (dims_attr(attrs, f"rhs_{k}_dims", opcode, rhs.rank, ())
              for k in ("contracting", "batch"))
    for kind, ldims, rdims in (("contracting", lc, rc), ("batch", lb, rb)):
        if len(ldims) != len(rdims):
            fail(f"dot lhs_{kind}_dims {_braced(ldims)} and rhs_{kind}_dims {_braced(rdims)} "
                 "differ in length")
    for side, batch, contracting in (("lhs", lb, lc), ("rhs", rb, rc)):
        if set(batch) & set(contracting):
            fail(f"dot {side}_batch_dims {_braced(batch)} and {side}_contracting_dims "
                 f"{_braced(contracting)} share a dimension")
    for kind, ldims, rdims in (("contracting", lc, rc), ("batch", lb, rb)):
        for l, r in zip(ldims, rdims):
            if lhs.dims[l] != rhs.dims[r]:
                fail(f"dot {kind} dimensions differ: {text(lhs)} dim {l} vs "
                     f"{text(rhs)} dim {r}")
    groups = []
    if opcode == "ragged-dot":
        rc = rc + tuple(attrs.get("rhs_group_dims", ()))
        groups = _ragged_groups(lhs, operands[2], attrs, lc)
    dims = (groups + [lhs.dims[d] for d in lb]
            + [lhs.dims[d] for d in free_dims(lhs.rank, lb, lc)]
            + [rhs.dims[d] for d in free_dims(rhs.rank, rb, rc)])
    return array(_result_type(lhs, rhs), dims)


def _ragged_groups(lhs: Shape, group_sizes: AnyShape, attrs: dict, contracting) -> list[int]:
    """A ragged-dot whose ragged lhs dimension is contracted sums each group apart: the
    result gains a leading dimension of one entry per group (group_sizes' last)."""
    ragged = tuple(attrs.get("lhs_ragged_dims", ()))
    if not set(ragged) & set(contracting):
        return []
    sizes = expect_array(group_sizes, "ragged-dot group sizes")
    if sizes.rank == 0:
        fail(f"ragged-dot group sizes {text(sizes)} need a dimension of groups")
    return [sizes.dims[-1]]


def conv_dims(lhs: Shape, rhs: Shape, labels: ConvDimLabels, window: Window,
              feature_groups: int, batch_groups: int) -> list[int]:
    """Checks a convolution's operands and returns its output dims (in `labels.out` order)."""
    n = len(labels.lhs_spatial)
    if not (len(labels.lhs) == lhs.rank and len(labels.rhs) == rhs.rank
            and len(labels.out) == lhs.rank and len(labels.rhs_spatial) == n
            and len(labels.out_spatial) == n):
        fail(f"dim_labels {labels.lhs}_{labels.rhs}->{labels.out} do not match "
             f"{text(lhs)} and {text(rhs)}")
    if feature_groups < 1 or batch_groups < 1 or (feature_groups > 1 and batch_groups > 1):
        fail("convolution needs feature_group_count >= 1, batch_group_count >= 1, "
             "not both > 1")
    batch, features = lhs.dims[labels.lhs_batch], lhs.dims[labels.lhs_feature]
    kin, kout = rhs.dims[labels.rhs_input_feature], rhs.dims[labels.rhs_output_feature]
    if features % feature_groups or features // feature_groups != kin:
        fail(f"convolution input features {features} / feature_group_count "
             f"{feature_groups} must equal kernel input features {kin}")
    if kout % feature_groups or kout % batch_groups or batch % batch_groups:
        fail(f"kernel output features {kout} and batch {batch} must divide by the "
             "group counts")
    kernel = [rhs.dims[d] for d in labels.rhs_spatial]
    if tuple(kernel) != tuple(window.size):
        fail(f"window size {list(window.size)} does not match kernel spatial dims {kernel}")
    spatial = window_output_dims([lhs.dims[d] for d in labels.lhs_spatial], window)
    out = [0] * lhs.rank
    out[labels.out_batch] = batch // batch_groups
    out[labels.out_feature] = kout
    for d, size in zip(labels.out_spatial, spatial):
        out[d] = size
    return out


def _convolution(opcode, operands, attrs):
    lhs = expect_array(operands[0], "convolution lhs")
    rhs = expect_array(operands[1], "convolution rhs")
    labels = attr(attrs, "dim_labels", opcode)
    window = attrs.get("window") or Window.default(len(labels.lhs_spatial))
    if window.rank == 0 and labels.lhs_spatial:
        window = Window.default(len(labels.lhs_spatial))
    dims = conv_dims(lhs, rhs, labels, window, attrs.get("feature_group_count", 1),
                     attrs.get("batch_group_count", 1))
    return array(_result_type(lhs, rhs), dims)


# ------------------------------------------------------------------ reductions

def _split_inputs(opcode: str, operands: list[AnyShape]) -> tuple[list[Shape], list[Shape]]:
    if not operands or len(operands) % 2:
        fail(f"{opcode} needs N inputs followed by N init values")
    n = len(operands) // 2
    inputs = [expect_array(s, f"{opcode} input") for s in operands[:n]]
    inits = [expect_scalar(s, f"{opcode} init value") for s in operands[n:]]
    for s in inputs[1:]:
        if s.dims != inputs[0].dims:
            fail(f"{opcode} inputs {text(inputs[0])} and {text(s)} differ in dimensions")
    for x, init in zip(inputs, inits):
        if x.element_type != init.element_type:
            fail(f"{opcode} input {text(x)} and init value {text(init)} differ in type")
    return inputs, inits


def _check_reducer(comp, types: Sequence[str], opcode: str) -> bool:
    """A reducer takes 2N scalars (accumulators, then inputs) and returns N scalars, as a
    tuple when N > 1; XLA also takes a 1-tuple for N = 1. Whether it returns a tuple (the
    reduction's result is one too)."""
    acc = scalars(types)
    tupled = len(acc) > 1 or comp.root.shape.is_tuple
    check_signature(comp, acc + acc, TupleShape(tuple(acc)) if tupled else acc[0], opcode)
    return tupled


def _reduced(opcode, operands, attrs, computations, output_dims) -> AnyShape:
    """reduce and reduce-window: one result per init value, of dims `output_dims(input)`."""
    inputs, inits = _split_inputs(opcode, operands)
    tupled = _check_reducer(computation(attrs, "to_apply", opcode, computations),
                            [s.element_type for s in inits], opcode)
    dims = output_dims(inputs[0])
    results = tuple(array(s.element_type, dims) for s in inits)
    return TupleShape(results) if tupled else results[0]


def _reduce(opcode, operands, attrs, computations):
    def kept(x):
        dims = dims_attr(attrs, "dimensions", opcode, x.rank)
        return [n for i, n in enumerate(x.dims) if i not in dims]
    return _reduced(opcode, operands, attrs, computations, kept)


def _reduce_window(opcode, operands, attrs, computations):
    def windowed(x):
        return window_output_dims(x.dims, attrs.get("window") or Window.default(x.rank))
    return _reduced(opcode, operands, attrs, computations, windowed)


def _select_and_scatter(opcode, operands, attrs, computations):
    operand = expect_array(operands[0], "select-and-scatter operand")
    source = expect_array(operands[1], "select-and-scatter source")
    init = expect_scalar(operands[2], "select-and-scatter init value")
    t = operand.element_type
    if source.element_type != t or init.element_type != t:
        fail("select-and-scatter operand, source and init value must share a type")
    window = attrs.get("window") or Window.default(operand.rank)
    expected = window_output_dims(operand.dims, window)
    if list(source.dims) != expected:
        fail(f"select-and-scatter source {text(source)} should have dims {expected}")
    (s,) = scalars([t])
    check_signature(computation(attrs, "select", opcode, computations), [s, s],
                    array("pred", ()), "select")
    check_signature(computation(attrs, "scatter", opcode, computations), [s, s], s, "scatter")
    return relayout(operand)


def _scatter(opcode, operands, attrs, computations):
    if len(operands) < 3 or len(operands) % 2 == 0:
        fail("scatter needs N inputs, indices and N updates")
    n = len(operands) // 2
    inputs = [expect_array(s, "scatter input") for s in operands[:n]]
    indices = expect_array(operands[n], "scatter indices")
    updates = [expect_array(s, "scatter update") for s in operands[n + 1:]]
    if indices.dtype.kind not in INTEGRAL:
        fail(f"scatter indices must be integers, got {text(indices)}")
    for x, u in zip(inputs, updates):
        if x.dims != inputs[0].dims or u.dims != updates[0].dims or x.element_type != u.element_type:
            fail(f"scatter inputs and updates disagree: {text(x)} vs {text(u)}")
    _check_reducer(computation(attrs, "to_apply", opcode, computations),
                   [s.element_type for s in inputs], opcode)
    ivd = attr(attrs, "index_vector_dim", opcode)
    rank = inputs[0].rank
    window_dims = dims_attr(attrs, "update_window_dims", opcode, updates[0].rank, ())
    inserted = dims_attr(attrs, "inserted_window_dims", opcode, rank, ())
    batching = dims_attr(attrs, "input_batching_dims", opcode, rank, ())
    to_operand = dims_attr(attrs, "scatter_dims_to_operand_dims", opcode, rank)
    if len(window_dims) + len(inserted) + len(batching) != rank:
        fail(f"scatter window dims ({len(window_dims)}) + inserted ({len(inserted)}) + "
             f"batching ({len(batching)}) must equal the input rank {rank}")
    index_dims = indices.dims + (1,) if ivd == indices.rank else indices.dims
    if not 0 <= ivd <= indices.rank or len(to_operand) != index_dims[ivd]:
        fail("scatter_dims_to_operand_dims does not match the index vector size")
    update = updates[0]
    batch = [n for i, n in enumerate(index_dims) if i != ivd]
    if [n for i, n in enumerate(update.dims) if i not in window_dims] != batch:
        fail(f"scatter update {text(update)} needs scatter dimensions {batch} (the indices "
             "without index_vector_dim) besides update_window_dims")
    operand_window = [d for d in range(rank) if d not in inserted and d not in batching]
    for wd, od in zip(window_dims, operand_window):
        if not 0 <= wd < update.rank or update.dims[wd] > inputs[0].dims[od]:
            fail(f"scatter update window dimension {wd} does not fit input dimension {od}")
    return maybe_tuple([relayout(s) for s in inputs])


def _sort(opcode, operands, attrs, computations):
    shapes = [expect_array(s, "sort operand") for s in operands]
    if not shapes:
        fail("sort needs an operand")
    for s in shapes[1:]:
        if s.dims != shapes[0].dims:
            fail(f"sort operands {text(shapes[0])} and {text(s)} differ in dimensions")
    dims = dims_attr(attrs, "dimensions", opcode, shapes[0].rank)
    if len(dims) != 1:
        fail(f"sort needs exactly one dimension, got {_braced(dims)}")
    params = [p for s in shapes for p in scalars([s.element_type] * 2)]
    check_signature(computation(attrs, "to_apply", opcode, computations), params,
                    array("pred", ()), "sort comparator")
    return maybe_tuple([relayout(s) for s in shapes])


def _map(opcode, operands, attrs, computations):
    shapes = [expect_array(s, "map operand") for s in operands]
    comp = computation(attrs, "to_apply", opcode, computations)
    for s in shapes[1:]:
        if s.dims != shapes[0].dims:
            fail(f"map operands {text(shapes[0])} and {text(s)} differ in dimensions")
    check_signature(comp, scalars([s.element_type for s in shapes]), None, "map")
    root = expect_scalar(comp.root.shape, f"map computation {comp.name} result")
    return array(root.element_type, shapes[0].dims)


# ----------------------------------------------------------------- control flow

def _call(opcode, operands, attrs, computations):
    key = "calls" if opcode == "fusion" else "to_apply"
    comp = computation(attrs, key, opcode, computations)
    check_signature(comp, operands, None, opcode)
    return relayout(comp.root.shape)


def _while(opcode, operands, attrs, computations):
    state = operands[0]
    check_signature(computation(attrs, "condition", opcode, computations), [state],
                    array("pred", ()), "while condition")
    check_signature(computation(attrs, "body", opcode, computations), [state], state,
                    "while body")
    return relayout(state)


def _conditional(opcode, operands, attrs, computations):
    selector = expect_scalar(operands[0], "conditional selector")
    if "branch_computations" in attrs:
        branches = [c if not isinstance(c, ComputationRef) else
                    computation({"b": c}, "b", opcode, computations)
                    for c in attrs["branch_computations"]]
        if selector.element_type != "s32":
            fail(f"conditional with branch_computations needs an s32 index, got "
                 f"{text(selector)}")
    else:
        branches = [computation(attrs, "true_computation", opcode, computations),
                    computation(attrs, "false_computation", opcode, computations)]
        if selector.element_type != "pred":
            fail(f"conditional with true/false computations needs a pred, got "
                 f"{text(selector)}")
    if not branches or len(operands) != len(branches) + 1:
        fail(f"conditional has {len(branches)} branches but {len(operands) - 1} "
             "branch operands")
    result = branches[0].root.shape
    for comp, operand in zip(branches, operands[1:]):
        check_signature(comp, [operand], result, "conditional branch")
    return relayout(result)


# ---------------------------------------------------- library and dynamic-shape ops

def _topk(opcode, operands, attrs):
    operand = expect_array(operands[0], "topk operand")
    k = attr(attrs, "k", opcode)
    if operand.rank == 0 or not 0 <= k <= operand.dims[-1]:
        fail(f"topk k={k} does not fit {text(operand)}")
    dims = operand.dims[:-1] + (k,)
    return TupleShape((array(operand.element_type, dims), array("s32", dims)))


def _fft(opcode, operands, attrs):
    operand = expect_array(operands[0], "fft operand")
    kind, length = attr(attrs, "fft_type", opcode), tuple(attr(attrs, "fft_length", opcode))
    n = len(length)
    if not 1 <= n <= min(3, operand.rank):
        fail(f"fft_length {list(length)} does not fit {text(operand)}")
    dims, t = list(operand.dims), operand.element_type
    if kind in ("FFT", "IFFT"):
        if operand.dtype.kind != "complex" or tuple(dims[-n:]) != length:
            fail(f"{kind} needs a complex operand ending in {list(length)}")
    elif kind == "RFFT":
        if t not in COMPLEX_OF or tuple(dims[-n:]) != length:
            fail(f"RFFT needs an f32/f64 operand ending in {list(length)}")
        t, dims[-1] = COMPLEX_OF[t], length[-1] // 2 + 1
    elif kind == "IRFFT":
        expected = length[:-1] + (length[-1] // 2 + 1,)
        if operand.dtype.kind != "complex" or tuple(dims[-n:]) != expected:
            fail(f"IRFFT needs a complex operand ending in {list(expected)}")
        t, dims[-n:] = COMPLEX_PART[t], length
    else:
        fail(f"unknown fft_type {kind}")
    return array(t, dims)


def _batch_norm(opcode, operands, attrs):
    operand = expect_array(operands[0], f"{opcode} operand")
    fi = attr(attrs, "feature_index", opcode)
    if not 0 <= fi < operand.rank:
        fail(f"{opcode} feature_index {fi} out of range for {text(operand)}")
    feature = array(operand.element_type, (operand.dims[fi],))
    for s in operands[1:]:
        if s.is_tuple or s.element_type != operand.element_type:
            fail(f"{opcode} operands must share element type {operand.element_type}")
    vectors = operands[1:4] if opcode == "batch-norm-grad" else operands[1:]
    if opcode == "batch-norm-grad" and not operands[4].compatible(operand):
        fail(f"batch-norm-grad output gradient must match {text(operand)}")
    for s in vectors:
        if not s.compatible(feature):
            fail(f"{opcode} expects {text(feature)} scale/offset/mean/variance, got {text(s)}")
    if opcode == "batch-norm-inference":
        return relayout(operand)
    return TupleShape((relayout(operand), feature, feature))


def _triangular_solve(opcode, operands, attrs):
    a, b = (expect_array(s, "triangular-solve operand") for s in operands)
    if a.rank < 2 or a.dims[-1] != a.dims[-2] or a.rank != b.rank or a.element_type != b.element_type:
        fail(f"triangular-solve needs square matrices a and matching b: {text(a)}, {text(b)}")
    return relayout(b)


def _cholesky(opcode, operands, attrs):
    a = expect_array(operands[0], "cholesky operand")
    if a.rank < 2 or a.dims[-1] != a.dims[-2]:
        fail(f"cholesky needs square matrices, got {text(a)}")
    return relayout(a)


def _get_dimension_size(opcode, operands, attrs):
    operand = expect_array(operands[0], opcode)
    dims_attr(attrs, "dimensions", opcode, operand.rank)
    return array("s32", ())


def _set_dimension_size(opcode, operands, attrs):
    operand = expect_array(operands[0], opcode)
    expect_scalar(operands[1], "set-dimension-size size")
    (d,) = dims_attr(attrs, "dimensions", opcode, operand.rank)
    dynamic = list(operand.dynamic or (False,) * operand.rank)
    dynamic[d] = True
    return array(operand.element_type, operand.dims, dynamic)


RULES = {
    "dot": _dot, "ragged-dot": _dot, "convolution": _convolution,
    "topk": _topk, "fft": _fft, "cholesky": _cholesky, "triangular-solve": _triangular_solve,
    **dict.fromkeys(("batch-norm-training", "batch-norm-inference", "batch-norm-grad"),
                    _batch_norm),
    "get-dimension-size": _get_dimension_size, "set-dimension-size": _set_dimension_size,
}

# These rules read called computations, passed as a fourth argument.
CALLING_RULES = {
    "reduce": _reduce, "reduce-window": _reduce_window,
    "select-and-scatter": _select_and_scatter, "scatter": _scatter, "sort": _sort,
    "map": _map, "call": _call, "fusion": _call, "while": _while,
    "conditional": _conditional,
}
