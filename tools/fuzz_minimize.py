"""Shrinking a bad fuzz case to a small reproducer: edits that keep the failure are kept.

    small = minimize(text, still_fails)     # still_fails(text) -> bool

Greedy, to a fixed point, over these edits: the module header loses its attributes
(`HloModule m`) and computations their signatures; an instruction of the entry becomes its
ROOT (what it does not use becomes dead); a line or a whole computation is deleted (dead
instructions, unused computations).
Each candidate costs a run of the case, so the edits that remove most come first.
"""
from __future__ import annotations

import re

from .fuzz_mutate import is_header, parse_instruction

_SIGNATURE = re.compile(r"^(ENTRY\s+)?(%?[\w.\-]+)\s*\(.*\)\s*->.*\{\s*$")


def minimize(text: str, still_fails, max_tries: int = 2000) -> str:
    tries = 0
    changed = True
    while changed and tries < max_tries:
        changed = False
        for candidate in _candidates(text):
            tries += 1
            if still_fails(candidate):
                text, changed = candidate, True
                break
            if tries >= max_tries:
                break
    return text


def _candidates(text: str):
    lines = text.split("\n")
    if lines[0].startswith("HloModule") and lines[0].strip() != "HloModule m":
        yield "\n".join(["HloModule m"] + lines[1:])
    bare = [_SIGNATURE.sub(r"\1\2 {", line) if is_header(line) else line for line in lines]
    if bare != lines:                   # computations without signatures: a new ROOT fits
        yield "\n".join(bare)
    for start, end in reversed(_blocks(lines)):
        if not lines[start].startswith("ENTRY"):
            yield "\n".join(lines[:start] + lines[end + 1:])
    yield from _new_roots(lines)
    for i in reversed(range(len(lines))):
        if parse_instruction(lines[i]) and "ROOT" not in lines[i].split("=")[0]:
            yield "\n".join(lines[:i] + lines[i + 1:])


def _blocks(lines) -> list[tuple[int, int]]:
    """(header line, closing brace line) of every computation."""
    blocks, start = [], None
    for i, line in enumerate(lines):
        if is_header(line) and not line.startswith("HloModule"):
            start = i
        elif line.strip() == "}" and start is not None:
            blocks.append((start, i))
            start = None
    return blocks


def _new_roots(lines):
    """The entry with an earlier instruction as its ROOT, the old ROOT line gone."""
    entry = [(s, e) for s, e in _blocks(lines) if lines[s].startswith("ENTRY")]
    if not entry:
        return
    start, end = entry[0]
    roots = [i for i in range(start + 1, end) if "ROOT" in lines[i].split("=")[0]]
    for i in range(start + 1, end):
        inst = parse_instruction(lines[i])
        if inst and i not in roots and inst.opcode != "parameter":
            new = list(lines)
            new[i] = "  ROOT " + new[i].lstrip()
            yield "\n".join(line for k, line in enumerate(new) if k not in roots)
