"""Values for the attributes a rule leaves open, per opcode, for the rule checker's
instances: permutations for transpose, sorted subsets for reduce and broadcast, valid slice
ranges, small paddings. Each sampler fills the FREE fields of one instruction and returns its
result shape where shape inference cannot give it (broadcast, reshape, convert, iota), or
None. What a sampler cannot make valid, the verifier rejects afterwards.
"""
from __future__ import annotations

import itertools

from ..dtypes import DTYPES, float_info
from ..interpreter.control import IDENTITY_CUSTOM_CALLS
from ..shape import Layout, Shape, array

DTYPE_CHOICES = ("pred", "s8", "s32", "u32", "s64", "f16", "bf16", "f32", "f64")
FREE = object()         # an attribute the rule leaves to the instance


class Reject(Exception):
    """This draw is not an instance of the rule (the reason is counted for the report)."""


def no_free_fields(inst, shapes, fields, expected):
    """The default: only `rest` may be left open (an instance has no other attributes)."""
    for name, value in fields.items():
        if value is FREE:
            if name != "rest":
                raise Reject(f"no sampler for {name}")
            fields[name] = ""
    return None


def _fill(fields, name, make):
    if fields.get(name) is FREE:
        fields[name] = make()


def _subset(rng, n: int) -> tuple[int, ...]:
    return tuple(i for i in range(n) if rng.random() < 0.5)


def _transpose(inst, shapes, fields, expected):
    _fill(fields, "dimensions", lambda: tuple(int(i) for i in inst.rng.permutation(shapes[0].rank)))
    return no_free_fields(inst, shapes, fields, expected)


def _reverse(inst, shapes, fields, expected):
    _fill(fields, "dimensions", lambda: _subset(inst.rng, shapes[0].rank))
    return no_free_fields(inst, shapes, fields, expected)


def _reduce(inst, shapes, fields, expected):
    _fill(fields, "dimensions", lambda: _subset(inst.rng, shapes[0].rank))
    kind = DTYPES[shapes[0].element_type].kind
    ops = ("and", "or", "maximum", "minimum") if kind == "pred" else (
        "add", "multiply", "maximum", "minimum")
    _fill(fields, "to_apply", lambda: ops[inst.rng.integers(len(ops))])
    return no_free_fields(inst, shapes, fields, expected)


def _reduce_window(inst, shapes, fields, expected):
    """Each window part is trivial (size 1, no padding, ...) in every dimension half the time
    (stride, dilations, reversal: three times in four), so that rules about trivial windows
    get instances; else per dimension trivial, a small value, or for size and padding one
    spanning the operand's dim (a window over the whole dim, padded by n-1 for a cumulative
    one)."""
    dims, rng = shapes[0].dims, inst.rng

    def part(trivial, lo, hi, spanning):
        if rng.random() < (0.5 if spanning else 0.75):
            return (trivial,) * len(dims)
        return tuple(trivial if u < 0.3 else
                     max(spanning(n), trivial) if spanning and u > 0.5 else
                     int(rng.integers(lo, hi))
                     for n, u in zip(dims, rng.random(len(dims))))
    whole, before_last = (lambda n: n), (lambda n: n - 1)
    for name, trivial, lo, hi, spanning in (
            ("size", 1, 1, 4, whole), ("stride", 1, 1, 3, None), ("low", 0, 0, 3, before_last),
            ("high", 0, 0, 3, before_last), ("lhs_dilate", 1, 1, 3, None),
            ("rhs_dilate", 1, 1, 3, None), ("rhs_reversal", 0, 0, 1, None)):
        _fill(fields, name, lambda: part(trivial, lo, hi, spanning))
    return _reduce(inst, shapes, fields, expected)


def _reduce_precision(inst, shapes, fields, expected):
    """The operand type's own precision half the time (a no-op), else a smaller one."""
    info = DTYPES[shapes[0].element_type]
    if info.kind != "float":
        raise Reject("reduce-precision of a non-float")
    mantissa = int(float_info(info.name).nmant)
    exponent = info.bits - 1 - mantissa
    own = inst.rng.random() < 0.5
    _fill(fields, "exponent_bits", lambda: exponent if own else int(inst.rng.integers(1, exponent + 1)))
    _fill(fields, "mantissa_bits", lambda: mantissa if own else int(inst.rng.integers(0, mantissa + 1)))
    return no_free_fields(inst, shapes, fields, expected)


def _broadcast(inst, shapes, fields, expected):
    x, rng = shapes[0], inst.rng
    if expected is not None:
        if fields["dimensions"] is FREE:
            fits = [c for c in itertools.combinations(range(expected.rank), x.rank)
                    if all(expected.dims[d] == n for d, n in zip(c, x.dims))]
            if not fits:
                raise Reject("broadcast does not fit")
            fields["dimensions"] = fits[rng.integers(len(fits))]
        no_free_fields(inst, shapes, fields, expected)
        return expected
    rank = x.rank + int(rng.integers(3))
    # Mostly increasing, as frontends write them; sometimes not: a broadcast may permute.
    _fill(fields, "dimensions", lambda: _maybe_sorted(
        rng, [int(d) for d in rng.choice(rank, size=x.rank, replace=False)]))
    dims = [int(rng.integers(1, 5)) if rng.random() > 0.05 else 0 for _ in range(rank)]
    for d, n in zip(fields["dimensions"], x.dims):
        if not 0 <= d < rank:
            raise Reject("broadcast dimensions")
        dims[d] = n
    no_free_fields(inst, shapes, fields, expected)
    return array(x.element_type, dims)


def _maybe_sorted(rng, values: list[int]) -> tuple[int, ...]:
    return tuple(sorted(values) if rng.random() < 0.7 else values)


def _reshape(inst, shapes, fields, expected):
    no_free_fields(inst, shapes, fields, expected)
    x = shapes[0]
    if expected is not None:
        return expected
    n, dims = x.num_elements, []
    while n > 1 and len(dims) < 3:
        f = next(f for f in (2, 3, 5, 7, n) if n % f == 0)
        dims.append(f)
        n //= f
    if n != 1 or x.num_elements == 0:
        dims = [x.num_elements]
    return array(x.element_type, [int(d) for d in inst.rng.permutation(dims)])


def _bitcast(inst, shapes, fields, expected):
    """A reshape's dims or the operand's permuted, in a random layout: bitcasts reinterpret
    the layout-ordered bytes, so the draws must not all be row-major."""
    shape = _reshape(inst, shapes, fields, expected)
    if expected is not None:
        return expected
    if inst.rng.integers(2):
        x = shapes[0]
        shape = array(x.element_type, [x.dims[d] for d in inst.rng.permutation(x.rank)])
    return _random_layout(inst, shape)


def _copy(inst, shapes, fields, expected):
    """The operand's shape in a random layout."""
    no_free_fields(inst, shapes, fields, expected)
    return expected if expected is not None else _random_layout(inst, shapes[0])


def _custom_call(inst, shapes, fields, expected):
    """Only the identities (a layout constraint, sharding annotations) have a result shape
    the checker knows: a copy's."""
    if fields.get("custom_call_target") not in IDENTITY_CUSTOM_CALLS or len(shapes) != 1:
        raise Reject("no result shape for this custom-call target")
    return _copy(inst, shapes, fields, expected)


def _random_layout(inst, shape):
    order = tuple(int(d) for d in inst.rng.permutation(shape.rank))
    return Shape(shape.element_type, shape.dims, Layout(order))


def _convert(inst, shapes, fields, expected):
    no_free_fields(inst, shapes, fields, expected)
    if expected is not None:
        return expected
    return array(DTYPE_CHOICES[inst.rng.integers(len(DTYPE_CHOICES))], shapes[0].dims)


def _bitcast_convert(inst, shapes, fields, expected):
    no_free_fields(inst, shapes, fields, expected)
    bits = DTYPES[shapes[0].element_type].bits
    same = [d for d in DTYPE_CHOICES if DTYPES[d].bits == bits and d != "pred"]
    if expected is not None or not same:
        return expected
    return array(same[inst.rng.integers(len(same))], shapes[0].dims)


def _iota(inst, shapes, fields, expected):
    shape = expected
    if shape is None:
        shape = inst.random_shape()
        if shape.rank == 0:
            shape = array(shape.element_type, (3,))
    _fill(fields, "iota_dimension", lambda: int(inst.rng.integers(max(shape.rank, 1))))
    no_free_fields(inst, shapes, fields, expected)
    return shape


def _slice(inst, shapes, fields, expected):
    rng, dims = inst.rng, shapes[0].dims
    full = [rng.random() < 0.3 for _ in dims]        # some dims whole: full slices happen
    starts = [0 if f else int(rng.integers(n + 1)) for f, n in zip(full, dims)]
    _fill(fields, "start", lambda: tuple(starts))
    _fill(fields, "limit", lambda: tuple(n if f else int(rng.integers(s, n + 1))
                                         for f, s, n in zip(full, fields["start"], dims)))
    _fill(fields, "stride", lambda: tuple(1 if f else int(rng.integers(1, 4)) for f in full))
    return no_free_fields(inst, shapes, fields, expected)


def _pad(inst, shapes, fields, expected):
    rank, rng = shapes[0].rank, inst.rng
    none = [rng.random() < 0.3 for _ in range(rank)]   # some dims unpadded
    pick = lambda lo, hi: tuple(0 if z else int(rng.integers(lo, hi)) for z in none)  # noqa: E731
    _fill(fields, "low", lambda: pick(-1, 3))
    _fill(fields, "high", lambda: pick(-1, 3))
    _fill(fields, "interior", lambda: pick(0, 3))
    return no_free_fields(inst, shapes, fields, expected)


def _concatenate(inst, shapes, fields, expected):
    _fill(fields, "dimensions", lambda: (int(inst.rng.integers(max(shapes[0].rank, 1))),))
    return no_free_fields(inst, shapes, fields, expected)


def _compare(inst, shapes, fields, expected):
    directions = ("EQ", "NE", "LT", "LE", "GT", "GE")
    _fill(fields, "direction", lambda: directions[inst.rng.integers(6)])
    # Floats are compared by default (IEEE) or, one time in three, in TOTALORDER.
    total = DTYPES[shapes[0].element_type].is_float and inst.rng.integers(3) == 0
    _fill(fields, "type", lambda: "TOTALORDER" if total else "")
    return no_free_fields(inst, shapes, fields, expected)


def _dot(inst, shapes, fields, expected):
    """Batch and contracting dims from pairs of equal-sized lhs/rhs dims: at most one batch
    pair, usually one contracting pair (sometimes none or two)."""
    a, b = shapes[:2]
    rng = inst.rng
    batch_free = fields["lhs_batch_dims"] is FREE and fields["rhs_batch_dims"] is FREE
    contract_free = (fields["lhs_contracting_dims"] is FREE
                     and fields["rhs_contracting_dims"] is FREE)
    used_a = set() if batch_free else set(fields["lhs_batch_dims"] or ())
    used_b = set() if batch_free else set(fields["rhs_batch_dims"] or ())
    pairs = [(i, j) for i in range(a.rank) for j in range(b.rank) if a.dims[i] == b.dims[j]]
    rng.shuffle(pairs)
    chosen = []
    for i, j in pairs:
        if i not in used_a and j not in used_b:
            chosen.append((i, j))
            used_a.add(i)
            used_b.add(j)
    batch = chosen[:1] if batch_free and chosen and rng.random() < 0.3 else []
    rest = chosen[len(batch):]
    if batch_free:
        fields["lhs_batch_dims"] = tuple(i for i, _ in batch)
        fields["rhs_batch_dims"] = tuple(j for _, j in batch)
    if contract_free:
        contract = rest[:int(rng.choice([0, 1, 1, 1, 2]))]
        fields["lhs_contracting_dims"] = tuple(i for i, _ in contract)
        fields["rhs_contracting_dims"] = tuple(j for _, j in contract)
    _fill(fields, "lhs_batch_dims", lambda: ())
    _fill(fields, "rhs_batch_dims", lambda: ())
    _fill(fields, "lhs_contracting_dims", lambda: (a.rank - 1,) if a.rank else ())
    _fill(fields, "rhs_contracting_dims", lambda: (0,) if b.rank and a.rank else ())
    return no_free_fields(inst, shapes, fields, expected)


def _batching_pairs(rng, operand, indices, skip_index_dim):
    """(operand dims, indices dims): equal-sized pairs, each taken one time in three."""
    pairs, used = [], set()
    for d in range(operand.rank):
        fits = [j for j in range(indices.rank) if j != skip_index_dim and j not in used
                and indices.dims[j] == operand.dims[d]]
        if fits and rng.random() < 0.3:
            used.add(fits[0])
            pairs.append((d, fits[0]))
    return tuple(d for d, _ in pairs), tuple(j for _, j in pairs)


def _addressing(inst, operand, indices, fields, names) -> set:
    """Fills index_vector_dim and the fields `names` (gather's or scatter's names for: the
    operand's and the indices' batching dims, the operand dims the index vectors address,
    the dropped window dims); returns the operand dims the window drops."""
    rng = inst.rng
    batching, indices_batching, addressed, collapsed = names
    # index_vector_dim: a dim no longer than the operand's rank, or none (vectors of one).
    fitting = [j for j in range(indices.rank) if indices.dims[j] <= operand.rank]
    _fill(fields, "index_vector_dim", lambda: int(rng.choice(fitting + [indices.rank])))
    ivd = fields["index_vector_dim"]
    if fields.get(batching) is FREE or fields.get(indices_batching) is FREE:
        fields[batching], fields[indices_batching] = _batching_pairs(rng, operand, indices, ivd)
    k = indices.dims[ivd] if 0 <= ivd < indices.rank else 1
    free = [d for d in range(operand.rank) if d not in fields[batching]]
    if k > len(free):
        raise Reject("index vectors longer than the operand's rank")
    _fill(fields, addressed, lambda: tuple(int(d) for d in rng.permutation(free)[:k]))
    _fill(fields, collapsed, lambda: tuple(d for d in free if rng.random() < 0.4))
    return set(fields[batching]) | set(fields[collapsed])


def _window(inst, operand, dropped):
    """Window sizes: whole dims half the time, any size up to the dim otherwise."""
    rng = inst.rng
    return tuple(min(1, n) if d in dropped else n if rng.random() < 0.5 else
                 int(rng.integers(n + 1)) for d, n in enumerate(operand.dims))


def _window_positions(inst, rank: int, count: int) -> tuple[int, ...]:
    """Where the window dims go among the `rank` dims of a gather's result (scatter's updates)."""
    return tuple(sorted(int(d) for d in inst.rng.choice(rank, size=count, replace=False)))


def _gather(inst, shapes, fields, expected):
    """Dimension numbers for these operand and indices shapes; start indices in and out of
    range are the interpreter's random values (gather clamps them)."""
    operand, indices = shapes[:2]
    dropped = _addressing(inst, operand, indices, fields, (
        "operand_batching_dims", "start_indices_batching_dims", "start_index_map",
        "collapsed_slice_dims"))
    _fill(fields, "slice_sizes", lambda: _window(inst, operand, dropped))
    batch_rank = indices.rank - (fields["index_vector_dim"] < indices.rank)
    offsets = operand.rank - len(dropped)
    _fill(fields, "offset_dims", lambda: _window_positions(inst, batch_rank + offsets, offsets))
    return no_free_fields(inst, shapes, fields, expected)


def scatter_updates(inst, shapes, fields):
    """Fills a scatter's open dimension numbers for its operand and indices shapes and
    returns the updates shape they call for (window sizes drawn as for gather)."""
    operand, indices = shapes[:2]
    dropped = _addressing(inst, operand, indices, fields, (
        "input_batching_dims", "scatter_indices_batching_dims", "scatter_dims_to_operand_dims",
        "inserted_window_dims"))
    window = [n for d, n in enumerate(_window(inst, operand, dropped)) if d not in dropped]
    scatter = [n for d, n in enumerate(indices.dims) if d != fields["index_vector_dim"]]
    rank = len(scatter) + len(window)
    _fill(fields, "update_window_dims", lambda: _window_positions(inst, rank, len(window)))
    _fill(fields, "to_apply", lambda: "add")
    window_dims = fields["update_window_dims"]
    if len(window_dims) != len(window) or any(not 0 <= d < rank for d in window_dims):
        raise Reject("update_window_dims do not fit")
    windows, scatters = iter(window), iter(scatter)
    return array(operand.element_type, [next(windows) if d in window_dims else next(scatters)
                                        for d in range(rank)])


def _sizes_within(rng, dims) -> tuple[int, ...]:
    """A window in `dims`: each dim whole a third of the time, else any size up to it."""
    return tuple(n if rng.random() < 0.3 else int(rng.integers(n + 1)) for n in dims)


def _dynamic_slice(inst, shapes, fields, expected):
    _fill(fields, "dynamic_slice_sizes", lambda: _sizes_within(inst.rng, shapes[0].dims))
    return no_free_fields(inst, shapes, fields, expected)


def _convolution(inst, shapes, fields, expected):
    """Operands of one rank (2 or more) labelled at random: the rhs's input-feature dim is
    one of the dims as large as the lhs's feature dim; the window covers the kernel's
    spatial dims with strides of 1 or 2, paddings of 0 or 1 and random reversal."""
    a, b = shapes[:2]
    rng = inst.rng
    if a.rank != b.rank or a.rank < 2:
        raise Reject("convolution operands of one rank >= 2")
    spatial = [str(i) for i in range(a.rank - 2)]
    lhs = [str(c) for c in rng.permutation(["b", "f", *spatial])]
    feature = a.dims[lhs.index("f")]
    inputs = [d for d in range(b.rank) if b.dims[d] == feature]
    if not inputs:
        raise Reject("no kernel dim as large as the input features")
    rhs = [""] * b.rank
    rhs[inputs[rng.integers(len(inputs))]] = "i"
    rest = [d for d in range(b.rank) if not rhs[d]]
    for d, label in zip((int(i) for i in rng.permutation(rest)), ["o", *spatial]):
        rhs[d] = label
    out = [str(c) for c in rng.permutation(["b", "f", *spatial])]
    _fill(fields, "dim_labels", lambda: f"{''.join(lhs)}_{''.join(rhs)}->{''.join(out)}")
    drawn = lambda low, high: tuple(int(rng.integers(low, high)) for _ in spatial)
    for name, make in (("size", lambda: tuple(b.dims[rhs.index(c)] for c in spatial)),
                       ("stride", lambda: drawn(1, 3)), ("low", lambda: drawn(0, 2)),
                       ("high", lambda: drawn(0, 2)), ("lhs_dilate", lambda: (1,) * len(spatial)),
                       ("rhs_dilate", lambda: (1,) * len(spatial)),
                       ("rhs_reversal", lambda: drawn(0, 2))):
        _fill(fields, name, make)
    return no_free_fields(inst, shapes, fields, expected)


SAMPLERS = {
    "transpose": _transpose, "reverse": _reverse, "reduce": _reduce, "broadcast": _broadcast,
    "reshape": _reshape, "convert": _convert, "bitcast-convert": _bitcast_convert,
    "iota": _iota, "slice": _slice, "pad": _pad, "concatenate": _concatenate,
    "compare": _compare, "dot": _dot, "gather": _gather, "bitcast": _bitcast,
    "custom-call": _custom_call, "copy": _copy, "reduce-window": _reduce_window,
    "reduce-precision": _reduce_precision, "dynamic-slice": _dynamic_slice,
    "convolution": _convolution,
}

# --- operand lists (`i...`) ------------------------------------------------------------------
# Start indices of dynamic slices: XLA clamps each start into [0, size - window], so half
# of them are drawn outside that range (negative, or past the end) to test that a rule
# clamps as the original does; a third are parameters (the checker's edge values).
INDEX_DTYPES = ("s32", "u32", "s64", "s8")


def window(shapes, fields) -> tuple[int, ...]:
    """The window a dynamic slice reads or a dynamic-update-slice writes."""
    if "dynamic_slice_sizes" in fields:
        return tuple(fields["dynamic_slice_sizes"])
    return shapes[1].dims


def start_indices(inst, shapes, fields) -> list[tuple[str, int | None]]:
    """(element type, value; None for a parameter) of each start index, one per dimension
    of the sliced array."""
    rng = inst.rng
    dtype = INDEX_DTYPES[rng.integers(len(INDEX_DTYPES))]
    low = 0 if DTYPES[dtype].kind == "uint" else -2
    out = []
    for n, w in zip(shapes[0].dims, window(shapes, fields)):
        value = int(rng.integers(low, max(n - w, 0) + 3))
        out.append((dtype, None if rng.random() < 0.3 else value))
    return out


def update_shape(inst, shapes, fields):
    """The update of a dynamic-update-slice for its operand's shape: a window in its dims."""
    return array(shapes[0].element_type, _sizes_within(inst.rng, shapes[0].dims))


# Operands drawn last, shaped by a function of the others and the op's attributes.
FITTED_OPERANDS = {"scatter": (2, scatter_updates), "dynamic-update-slice": (1, update_shape)}


# op -> what its `i...` operands are drawn as, given its other operands and attributes.
OPERAND_LISTS = {"dynamic-slice": start_indices, "dynamic-update-slice": start_indices}
