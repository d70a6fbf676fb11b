"""Values for the attributes a rule leaves open, per opcode, for the rule checker's
instances: permutations for transpose, sorted subsets for reduce and broadcast, valid slice
ranges, small paddings. Each sampler fills the FREE fields of one instruction and returns its
result shape where shape inference cannot give it (broadcast, reshape, convert, iota), or
None. What a sampler cannot make valid, the verifier rejects afterwards.
"""
from __future__ import annotations

import itertools

from .. import attributes
from ..attributes import Window
from ..dtypes import DTYPES
from ..shape import array

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
    _fill(fields, "dimensions", lambda: tuple(sorted(
        int(d) for d in rng.choice(rank, size=x.rank, replace=False))))
    dims = [int(rng.integers(1, 5)) if rng.random() > 0.05 else 0 for _ in range(rank)]
    for d, n in zip(fields["dimensions"], x.dims):
        if not 0 <= d < rank:
            raise Reject("broadcast dimensions")
        dims[d] = n
    no_free_fields(inst, shapes, fields, expected)
    return array(x.element_type, dims)


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
    size = tuple(b.dims[rhs.index(c)] for c in spatial)
    window = Window(size, tuple(int(rng.integers(1, 3)) for _ in spatial),
                    tuple((int(rng.integers(2)), int(rng.integers(2))) for _ in spatial),
                    (1,) * len(spatial), (1,) * len(spatial),
                    tuple(bool(rng.integers(2)) for _ in spatial))
    _fill(fields, "dim_labels", lambda: f"{''.join(lhs)}_{''.join(rhs)}->{''.join(out)}")
    _fill(fields, "window", lambda: attributes.encode("window", window) if spatial else "")
    return no_free_fields(inst, shapes, fields, expected)


SAMPLERS = {
    "transpose": _transpose, "reverse": _reverse, "reduce": _reduce, "broadcast": _broadcast,
    "reshape": _reshape, "convert": _convert, "bitcast-convert": _bitcast_convert,
    "iota": _iota, "slice": _slice, "pad": _pad, "concatenate": _concatenate,
    "compare": _compare, "dot": _dot, "convolution": _convolution,
}
