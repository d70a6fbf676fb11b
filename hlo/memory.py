"""Arrays must fit in this machine's memory before compile or evaluate allocates them.

A module may declare arrays of any size up to int64 bytes (the verifier's limit, as XLA's);
optimizing one is fine, but allocating one that is larger than physical memory fails. Those
are reported as an HloError naming the instruction, before any allocation, rather than as
numpy's MemoryError (or the process being killed) halfway through.
"""
from __future__ import annotations

import contextlib
import os

from .errors import HloError
from .ir import Module
from .shape_util import array_leaves, text


def physical_memory() -> int | None:
    """Bytes of RAM on this machine, or None where the platform does not say."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def human_bytes(n: float) -> str:
    units = ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
    i = 0
    while n >= 1024 and i < len(units) - 1:
        n, i = n / 1024, i + 1
    return f"{n:.0f} bytes" if i == 0 else f"{n:.1f} {units[i]}"


def check_fits_in_memory(module: Module, limit: int | None = None) -> None:
    """HloError at the first instruction with an array larger than `limit` bytes (default:
    physical memory). Dynamic dimensions count at their bound; unbounded ones are skipped."""
    limit = limit if limit is not None else physical_memory()
    if limit is None:
        return
    for inst in module.instructions():
        for leaf in array_leaves(inst.shape):
            if -1 not in leaf.dims and leaf.byte_size > limit:
                raise HloError(f"{inst.name}: {text(leaf)} needs "
                               f"{human_bytes(leaf.byte_size)}, more than this machine's "
                               f"memory ({human_bytes(limit)})", line=inst.line,
                               column=inst.column)


@contextlib.contextmanager
def allocating(what: str):
    """Turn a MemoryError inside into an HloError saying what was being done."""
    try:
        yield
    except MemoryError:
        raise HloError(f"out of memory while {what}") from None
