"""Memory for large outputs, reused once the caller lets go of the arrays.

A fresh numpy array of many megabytes gets fresh pages from the kernel: every page faults on
first write and is cleared first, which costs about as much as the kernel that writes it (a
module returning 56 MB spent a quarter of its call doing this), and the new pages are not
in the cache. XLA's runtime hands such buffers out of memory it keeps, and so does this.

    array = take((4096, 512), np.float32)     # a plain C-contiguous numpy array

Each large output is a numpy array over a block kept by the pool, made from a small lease
object that exposes the block (numpy keeps it as the base of the array and of every array
derived from it); when the last of those arrays goes away the lease does too, and a
finalizer puts the block back, keyed by size. So a block comes back only when nothing the caller
holds (the array, its views, slices, reshapes) can still reach its memory. The pool keeps at
most POOL_BYTES of free blocks, the most recently returned ones.
"""
from __future__ import annotations

import math
import threading
import weakref
from collections import OrderedDict

import numpy as np

POOL_MIN_BYTES = 1 << 20     # smaller arrays: numpy's allocator, whose pages stay mapped
POOL_BYTES = 1 << 30         # free bytes kept at most; older blocks are released
ALIGN = 64

_lock = threading.Lock()
_free: OrderedDict[int, list[np.ndarray]] = OrderedDict()     # nbytes -> blocks
_free_bytes = 0


class _Lease:
    """The base numpy keeps for a pooled array and every array derived from it: it exposes
    the block's memory (__array_interface__), and its death returns the block."""
    __slots__ = ("block", "__array_interface__", "__weakref__")

    def __init__(self, block: np.ndarray):
        self.block = block
        self.__array_interface__ = {"data": (block.ctypes.data, False),
                                    "shape": (block.nbytes,), "typestr": "|u1", "version": 3}


def take(dims: tuple[int, ...], dtype) -> np.ndarray:
    """An uninitialized C-contiguous array, from a free block of its size when there is one."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(dims) * dtype.itemsize
    if nbytes < POOL_MIN_BYTES:
        return np.empty(dims, dtype)
    block = _reuse(nbytes)
    if block is None:
        raw = np.empty(nbytes + ALIGN, np.uint8)
        start = -raw.ctypes.data % ALIGN
        block = raw[start:start + nbytes]
    lease = _Lease(block)
    weakref.finalize(lease, _give_back, block).atexit = False
    # bytes viewed as the dtype: the array interface cannot name extension types such as
    # bfloat16 or the float8s (their typestr is a plain void), a view keeps them
    return np.asarray(lease).view(dtype).reshape(dims)


def _reuse(nbytes: int) -> np.ndarray | None:
    global _free_bytes
    with _lock:
        blocks = _free.get(nbytes)
        if not blocks:
            return None
        block = blocks.pop()
        if not blocks:
            del _free[nbytes]
        _free_bytes -= nbytes
        return block


def _give_back(block: np.ndarray) -> None:
    """A block nothing refers to any more joins the free ones; the least recently returned
    sizes are dropped while more than POOL_BYTES are free."""
    global _free_bytes
    nbytes = block.nbytes
    with _lock:
        _free.setdefault(nbytes, []).append(block)
        _free.move_to_end(nbytes)
        _free_bytes += nbytes
        while _free_bytes > POOL_BYTES:
            size, blocks = next(iter(_free.items()))
            blocks.pop(0)
            _free_bytes -= size
            if not blocks:
                del _free[size]


def free_bytes() -> int:
    """Bytes of the free blocks the pool keeps."""
    return _free_bytes


def clear() -> None:
    """Release every free block (blocks still in use come back as usual)."""
    global _free_bytes
    with _lock:
        _free.clear()
        _free_bytes = 0
