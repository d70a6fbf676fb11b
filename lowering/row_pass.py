"""Row passes: a kernel whose steps all work row by row runs them a block of rows at a time.

A softmax reads each row three times (its max, the sum of exp(x - max), the divide), a
layer norm three times (mean, variance, the scaled output). Run as whole steps, each of
those passes streams the whole array through memory. But every step only reads the values
earlier steps stored at its own row: so the kernel can loop over blocks of rows and run
every step on the block, which the first step brought into the cache and the others read
from there. The array then crosses memory once, and the kernel is threaded over rows as a
single-step kernel is.

Rows: the leading dimensions a reduce keeps (a reduce over the minor-most dimensions: one
row per output; a row of a [b, k, m] array reduced over k: b rows). A kernel runs as a row
pass when, for one row count, every step is a loop or a reduce whose iterations go through
the rows in order (its extent a multiple of the rows), and every value a step reads that
an earlier step stored is read at the row being computed: through elementwise ops, layout
preserving reshapes, broadcasts and transposes that keep the row dimensions, and reduces
that keep them (`_row_preserving`). A temporary (a reduce's result, an expensive value
stored for several readers) then only needs the block's rows: it lives in a window on the
stack of the thread running the kernel, the same few kilobytes for every block, never
written back to memory (and, a buffer of its own, known not to overlap any other)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..ir import Instruction
from ..ops import is_elementwise
from ..shape import default_layout
from .ltypes import array_bytes

# Bytes of one block's rows over every array the steps read or write: the block stays in
# the first-level data cache (48 KiB here) while the steps run over it.
BLOCK_BYTES = 32 * 1024
# A kernel of fewer rows would give each thread few, large blocks: it runs step by step.
MIN_ROWS = 16
# Rows larger than this fit no cache: a row pass would read them from memory each step.
# It also bounds the stack the windows take (a block is one row, or BLOCK_BYTES of rows).
MAX_ROW_BYTES = 256 * 1024


@dataclass
class RowPass:
    """How a kernel's steps run as one loop over blocks of `block` of its `rows` rows:
    step k runs iterations [r0 * per_row[k], r1 * per_row[k]) for the block [r0, r1).
    `windows[id(temp)]`: (bytes, elements per row) of a temporary's window, which holds
    the block's rows only."""
    rows: int
    block: int
    per_row: list[int]
    windows: dict[int, tuple[int, int]]


def plan(steps, plans, kinds, temps, inputs) -> RowPass | None:
    """The row pass of a kernel's steps (emit_kernel.plan_steps), or None if they cannot
    run as one. `plans`: each step's (extent, work, scratch); `kinds[k]`: "loop" or
    "reduce" for step k's emitter, None for any other; `temps`: the stored values that are
    not outputs of the kernel; `inputs`: the values it reads from memory."""
    if len(steps) < 2 or None in kinds or any(p[2] for p in plans):
        return None
    phases_ = [g for step in steps for g in step]
    stored = [r for g in phases_ for r in g.stored()]
    if any(g.gemm is not None for g in phases_) or any(r.shape.is_tuple for r in stored):
        return None
    stored_ids = {id(r) for r in stored}
    for rows in sorted(_candidates(phases_), reverse=True):
        if rows < MIN_ROWS or any(p[0] % rows for p in plans):
            continue
        if all(_reads_by_row(g, rows, stored_ids) for g in phases_) and \
                all(r.shape.num_elements % rows == 0 for r in stored):
            return _blocks(rows, [p[0] // rows for p in plans], temps, stored + inputs)
    return None


def _candidates(phases_) -> set[int]:
    """Row counts the kernel's reduces suggest: the product of the input dimensions before
    the first reduced one."""
    out = set()
    for g in phases_:
        if g.root.opcode == "reduce" and g.root.attrs.get("dimensions"):
            dims = g.root.operands[0].shape.dims
            out.add(math.prod(dims[:min(g.root.attrs["dimensions"])]))
    return out


def _blocks(rows: int, per_row: list[int], temps, arrays) -> RowPass | None:
    """The blocks of rows that fit BLOCK_BYTES of `arrays` (what the steps read and store),
    and the windows of the temporaries; None if a row is too large."""
    row_bytes = sum(array_bytes(a.shape) // rows for a in {id(a): a for a in arrays}.values()
                    if not a.shape.is_tuple and a.shape.num_elements % rows == 0)
    if row_bytes > MAX_ROW_BYTES:
        return None
    block = max(1, min(rows, BLOCK_BYTES // max(row_bytes, 1)))
    windows = {id(t): (-(-array_bytes(t.shape) * block // rows), t.shape.num_elements // rows)
               for t in temps}
    return RowPass(rows, block, per_row, windows)


def _reads_by_row(g, rows: int, stored: set[int]) -> bool:
    """Does phase g, computing row r of its root, read the values other phases of the
    kernel store (`stored`: ids; the kernel loads those even where g could compute them)
    at row r only? Members reached through an op that does not keep the row
    (`_row_preserving`) may be evaluated anywhere: they must read no such value."""
    own = {id(r) for r in g.stored()}
    loaded = stored - own
    anywhere: set[int] = set()
    if not _has_rows(g.root.shape, rows):
        return False
    for m in g.members:                   # users before their operands
        if id(m) in loaded:
            continue
        for k, op in enumerate(m.operands):
            if id(m) in anywhere or not _row_preserving(m, k, rows):
                if id(op) in loaded:
                    return False
                anywhere.add(id(op))
    return True


def _row_preserving(user: Instruction, k: int, rows: int) -> bool:
    """Does `user` read operand k's element of row r (rows: linear position // row length)
    at each element of its own row r?"""
    op = user.operands[k]
    if user.shape.is_tuple or op.shape.is_tuple or not (
            _has_rows(user.shape, rows) and _has_rows(op.shape, rows)):
        return False
    if is_elementwise(user.opcode):
        return op.shape.dims == user.shape.dims
    if user.opcode in ("reshape", "bitcast", "copy"):
        return True                       # the same linear positions, default layouts
    out_rows, in_rows = _row_dims(user.shape.dims, rows), _row_dims(op.shape.dims, rows)
    if out_rows is None or in_rows is None:
        return False
    if user.opcode == "broadcast":        # operand dim i is output dim dimensions[i]
        return [user.attrs["dimensions"][i] for i in in_rows] == out_rows
    if user.opcode == "transpose":        # output dim j is operand dim dimensions[j]
        return [user.attrs["dimensions"][j] for j in out_rows] == in_rows
    if user.opcode == "reduce" and k < len(user.operands) // 2:
        reduced = set(user.attrs["dimensions"])
        kept = [d for d in range(op.shape.rank) if d not in reduced]
        return not reduced & set(in_rows) and [kept[j] for j in out_rows] == in_rows
    return False


def _has_rows(shape, rows: int) -> bool:
    """A default-layout array that the rows divide evenly."""
    return not shape.is_tuple and shape.num_elements % rows == 0 and (
        shape.layout is None or shape.layout.minor_to_major ==
        default_layout(shape.rank).minor_to_major)


def _row_dims(dims, rows: int) -> list[int] | None:
    """The dimensions (those of size 1 left out) of the shortest prefix of `dims` whose
    elements are `rows`, or None if no prefix is."""
    n = 1
    for d, size in enumerate(dims):
        if n == rows:
            return [e for e in range(d) if dims[e] != 1]
        n *= size
    return [e for e in range(len(dims)) if dims[e] != 1] if n == rows else None
