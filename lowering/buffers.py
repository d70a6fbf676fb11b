"""Buffer assignment: one arena per call, temporaries packed by live range.

Each program's steps are numbered; a temporary lives from the step that writes it to the
last step that reads it (a program's results to its end). Temporaries whose live ranges do not
overlap share bytes: greedy first-fit in order of definition, largest first among equals.
A while or conditional step reserves one region for the programs it runs (they never run at
the same time as each other's steps), assigned recursively inside that region. The arena's
size is the peak reported in the executable's stats.
"""
from __future__ import annotations

from .program import Buffer, Conditional, Program, While, step_io


def assign(program: Program, results: list[Buffer]) -> int:
    """Give every temp of `program` (and nested programs) an absolute arena offset; returns
    the bytes the program needs. `results` stay live to the end."""
    relative = _assign(program, results)
    _place(program, relative, 0)
    return program.peak


def _assign(program: Program, results: list[Buffer]) -> dict[int, int]:
    for step in program.steps:
        if isinstance(step, While):
            step.cond.peak = _peak(step.cond, [step.cond_result])
            step.body.peak = _peak(step.body, step.body_results)
            step.scratch.nbytes = max(step.cond.peak, step.body.peak)
        elif isinstance(step, Conditional):
            for p, res in step.branches:
                p.peak = _peak(p, res)
            step.scratch.nbytes = max(p.peak for p, _ in step.branches)
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    temps = {id(b): b for b in program.temps if b.kind == "temp"}
    for n, step in enumerate(program.steps):
        written, read = step_io(step)
        for b in written + read:
            if id(b) in temps:
                first.setdefault(id(b), n)
                last[id(b)] = n
    for b in results:
        if id(b) in temps:
            first.setdefault(id(b), 0)
            last[id(b)] = len(program.steps)
    order = sorted(first, key=lambda k: (first[k], -temps[k].size))
    placed: list[tuple[int, int, int]] = []          # (offset, end offset, last step)
    offsets: dict[int, int] = {}
    peak = 0
    for k in order:
        buf, start = temps[k], first[k]
        live = sorted((o, e) for o, e, stop in placed if stop >= start)
        offset = 0
        for o, e in live:
            if offset + buf.size <= o:
                break
            offset = max(offset, e)
        placed.append((offset, offset + buf.size, last[k]))
        offsets[k] = offset
        peak = max(peak, offset + buf.size)
    program.peak = peak
    program.offsets = offsets
    return offsets


def _peak(program: Program, results: list[Buffer]) -> int:
    _assign(program, results)
    return program.peak


def _place(program: Program, relative: dict[int, int], base: int) -> None:
    program.base = base
    for b in program.temps:
        b.offset = base + relative.get(id(b), 0)
    for step in program.steps:
        if isinstance(step, While):
            for p in (step.cond, step.body):
                _place(p, p.offsets, step.scratch.offset)
        elif isinstance(step, Conditional):
            for p, _ in step.branches:
                _place(p, p.offsets, step.scratch.offset)
