"""Shape rules for cross-device ops (all-gather, all-reduce, reduce-scatter, all-to-all,
collective-permute, collective-broadcast, ragged-all-to-all and their -start/-done halves),
as XLA's shape inference and verifier define them.

The number of participants is not in the module (it is the replica or partition count XLA
is configured with), so all-gather and reduce-scatter read their shard count off the
declared result, as XLA's verifier does, and check it against the replica groups when those
name it. Those two are declared-shape checks (DECLARED); the others infer (RULES).
"""
from __future__ import annotations

import math
import re

import numpy as np

from .attributes import Raw
from .shape import AnyShape, Shape, TupleShape
from .shape_util import (array, attr, dims_attr, expect_array, fail, maybe_tuple, relayout,
                         text)
from .transfer_rules import done_rule

_WHITESPACE = re.compile(r"\s+")      # lists may span lines
_IOTA_GROUPS = re.compile(r"\[(\d+),(\d+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?")


def _int_lists(value, name: str) -> list[list[int]]:
    """`{{0,1},{2,3}}` (Raw text or already decoded) as lists of integers."""
    if isinstance(value, (tuple, list)):
        return [list(v) if isinstance(v, (tuple, list)) else [v] for v in value]
    source = value.text if isinstance(value, Raw) else str(value)
    body = _WHITESPACE.sub("", source)
    if not re.fullmatch(r"\{(\{[\d,]*\},?)*\}", body):
        fail(f"{name}={source} is not a list of integer lists")
    return [[int(x) for x in group.split(",") if x] for group in re.findall(r"\{([\d,]*)\}",
                                                                            body[1:-1])]


def replica_groups(attrs: dict) -> list[list[int]]:
    """The replica groups, explicit or in iota form (`[2,4]<=[4,2]T(1,0)`); [] when the
    instruction names none (one group of every participant)."""
    value = attrs.get("replica_groups")
    if value is None:
        return []
    source = value.text if isinstance(value, Raw) else value
    if isinstance(source, str) and source.startswith("["):
        m = _IOTA_GROUPS.fullmatch(_WHITESPACE.sub("", source))
        if m is None:
            fail(f"replica_groups={source} is not [groups,size]<=[dims] (T(permutation))")
        count, size = int(m[1]), int(m[2])
        dims = [int(d) for d in m[3].split(",")]
        perm = [int(p) for p in m[4].split(",")] if m[4] else list(range(len(dims)))
        if math.prod(dims) != count * size or sorted(perm) != list(range(len(dims))):
            fail(f"replica_groups={source}: {count}x{size} devices do not match {dims}")
        ids = np.arange(count * size).reshape(dims).transpose(perm)
        return ids.reshape(count, size).tolist()
    return _int_lists(value, "replica_groups")


def group_size(opcode: str, attrs: dict, uniform: bool = True) -> int | None:
    """Participants per group, or None when the module does not say. Groups must name each
    participant 0..n-1 exactly once and (except all-reduce's) have one size.
    Global device ids are only meaningful across partitions, which a channel_id selects:
    use_global_device_ids=true without one names no group mode XLA knows."""
    if attrs.get("use_global_device_ids") and "channel_id" not in attrs:
        fail(f"{opcode} with use_global_device_ids=true needs a channel_id")
    groups = replica_groups(attrs)
    if not groups:
        return None
    seen = [i for g in groups for i in g]
    if any(not g for g in groups) or sorted(seen) != list(range(len(seen))):
        fail(f"{opcode} replica_groups must name each participant 0..{len(seen) - 1} "
             "exactly once, in non-empty groups")
    if uniform and len({len(g) for g in groups}) > 1:
        fail(f"{opcode} replica_groups must all have the same size")
    return len(groups[0])


def _arrays(opcode: str, operands: list[AnyShape]) -> list[Shape]:
    if not operands:
        fail(f"{opcode} needs at least one operand")
    return [expect_array(s, f"{opcode} operand") for s in operands]


def _dimension(opcode: str, attrs: dict, shapes: list[Shape]) -> int:
    """The one dimension the op gathers, scatters or splits (below every operand's rank)."""
    dims = dims_attr(attrs, "dimensions", opcode, min(s.rank for s in shapes))
    if len(dims) != 1:
        fail(f"{opcode} needs one dimension, got dimensions={{{','.join(map(str, dims))}}}")
    return dims[0]


def _results(opcode: str, declared: AnyShape, count: int) -> list[Shape]:
    """The declared result per operand (a tuple of them when there are several)."""
    results = [declared] if count == 1 else list(getattr(declared, "elements", ()))
    if len(results) != count or any(r.is_tuple for r in results):
        fail(f"{opcode} of {count} operand{'s' if count != 1 else ''} cannot produce "
             f"{text(declared)}")
    return results


def _shard_count(opcode: str, attrs: dict, whole: int, part: int) -> int:
    """How many pieces `whole` is cut into (from the shapes), checked against the groups.
    Sizes that say nothing (0, or unbounded: -1) leave it to the groups."""
    size = group_size(opcode, attrs)
    if part <= 0 or whole < 0:
        return size or 1
    shards = -(-whole // part)
    if size is not None and shards != size:
        fail(f"{opcode} over groups of {size} needs a factor of {size} between dimension "
             f"sizes {part} and {whole}, not {shards}")
    return shards


def _scaled(shape: Shape, d: int, scale) -> Shape:
    """`shape` with dimension d resized by `scale` (an unbounded size stays unbounded)."""
    n = shape.dims[d]
    return array(shape.element_type,
                 shape.dims[:d] + (scale(n) if n >= 0 else n,) + shape.dims[d + 1:],
                 shape.dynamic)


def _resized(opcode: str, operands: list, attrs: dict, results: list[Shape],
             gather: bool) -> list[Shape]:
    """Each operand with its `dimensions` entry multiplied (all-gather) or divided
    (reduce-scatter) by the shard count that the first operand and result imply."""
    shapes = _arrays(opcode, operands)
    d = _dimension(opcode, attrs, shapes)
    if any(r.rank <= d for r in results):
        fail(f"{opcode} dimension {d} is not in the result {text(results[0])}")
    small, big = (shapes[0], results[0]) if gather else (results[0], shapes[0])
    shards = _shard_count(opcode, attrs, big.dims[d], small.dims[d])
    if gather:
        return [_scaled(s, d, lambda n: n * shards) for s in shapes]
    for s in shapes:
        if s.dims[d] > 0 and s.dims[d] % shards:
            fail(f"{opcode} cannot split dimension {d} of {text(s)} into {shards}")
    return [_scaled(s, d, lambda n: n // shards) for s in shapes]


def _check(opcode: str, inferred: AnyShape, declared: AnyShape) -> None:
    if not inferred.compatible(declared, dynamic=False):
        fail(f"{opcode} result should be {text(inferred)}, declared {text(declared)}")


def _check_all_gather(operands, attrs, declared):
    results = _results("all-gather", declared, len(operands))
    _check("all-gather", maybe_tuple(_resized("all-gather", operands, attrs, results, True)),
           declared)


def _check_all_gather_start(operands, attrs, declared):
    """(input, gathered), the input a tuple when there are several operands."""
    if not declared.is_tuple or len(declared.elements) != 2:
        fail(f"all-gather-start produces (input, gathered), not {text(declared)}")
    results = _results("all-gather-start", declared.elements[1], len(operands))
    gathered = _resized("all-gather-start", operands, attrs, results, True)
    inferred = TupleShape((maybe_tuple([relayout(s) for s in operands]), maybe_tuple(gathered)))
    _check("all-gather-start", inferred, declared)


def _check_reduce_scatter(operands, attrs, declared):
    results = _results("reduce-scatter", declared, len(operands))
    _check("reduce-scatter",
           maybe_tuple(_resized("reduce-scatter", operands, attrs, results, False)), declared)


def _all_reduce(opcode, operands, attrs):
    group_size(opcode, attrs, uniform=False)
    return maybe_tuple([relayout(s) for s in _arrays(opcode, operands)])


def _all_to_all(opcode, operands, attrs):
    shapes = _arrays(opcode, operands)
    size = group_size(opcode, attrs)
    if "dimensions" in attrs:             # one array, split and concatenated along one dim
        if len(shapes) != 1:
            fail(f"all-to-all with dimensions takes one operand, got {len(shapes)}")
        d = _dimension(opcode, attrs, shapes)
        if size and shapes[0].dims[d] % size:
            fail(f"all-to-all cannot split dimension {d} of {text(shapes[0])} into "
                 f"{size} pieces")
        return relayout(shapes[0])
    if size is not None and len(shapes) != size:
        fail(f"all-to-all over groups of {size} takes {size} operands, got {len(shapes)}")
    if any(not s.compatible(shapes[0]) for s in shapes):
        fail(f"all-to-all operands {', '.join(map(text, shapes))} differ")
    return TupleShape(tuple(relayout(s) for s in shapes))


def _ragged_all_to_all(opcode, operands, attrs):
    shapes = _arrays(opcode, operands)
    if len(shapes) != 6:
        fail(f"ragged-all-to-all takes 6 operands, got {len(shapes)}")
    offsets = shapes[2:]
    if any(s.rank not in (1, 2) or not s.compatible(offsets[0]) for s in offsets):
        fail("ragged-all-to-all offsets and sizes (operands 2-5) must share one shape of "
             "rank 1 or 2")
    return relayout(shapes[1])


def _collective_broadcast(opcode, operands, attrs):
    return relayout(_arrays(opcode, operands)[0])


def _in_place(operands: list, attrs: dict) -> bool:
    """The in-place form: (input, output, input offsets, output offsets) with slice_sizes."""
    return len(operands) == 4 and "slice_sizes" in attrs


def _permuted(opcode: str, operands: list, attrs: dict) -> AnyShape:
    """What a collective-permute delivers: its operand(s), or in place the output buffer."""
    pairs = _int_lists(attr(attrs, "source_target_pairs", opcode), "source_target_pairs")
    if any(len(p) != 2 or min(p) < 0 for p in pairs):
        fail(f"{opcode} source_target_pairs must be {{source,target}} pairs of ids >= 0")
    if _in_place(operands, attrs):
        return relayout(operands[1])
    for ends, what in ((sorted(p[0] for p in pairs), "source"),
                       (sorted(p[1] for p in pairs), "target")):
        if len(set(ends)) != len(ends):
            fail(f"{opcode}: a {what} appears twice in source_target_pairs")
    return maybe_tuple([relayout(s) for s in _arrays(opcode, operands)])


def _check_collective_permute_start(operands, attrs, declared):
    """(sent, received, context...): the context (u32 scalars) is whatever is declared."""
    opcode = "collective-permute-start"
    if not declared.is_tuple or len(declared.elements) < 2:
        fail(f"{opcode} produces (sent, received, context...), not {text(declared)}")
    received = _permuted(opcode, operands, attrs)
    sent = relayout(operands[0]) if _in_place(operands, attrs) else received
    _check(opcode, TupleShape((sent, received) + declared.elements[2:]), declared)


RULES = {
    "all-reduce": _all_reduce, "all-reduce-start": _all_reduce,
    "all-reduce-done": lambda opcode, operands, attrs: relayout(operands[0]),
    "all-gather-done": done_rule(1), "collective-permute-done": done_rule(1),
    "all-to-all": _all_to_all, "ragged-all-to-all": _ragged_all_to_all,
    "collective-broadcast": _collective_broadcast, "collective-permute": _permuted,
}

DECLARED = {
    "all-gather": _check_all_gather, "all-gather-start": _check_all_gather_start,
    "reduce-scatter": _check_reduce_scatter,
    "collective-permute-start": _check_collective_permute_start,
}
