"""A recording stand-in for lowering/cuda_device.CudaDevice: device memory is a bytearray,
every call is logged in order, and a kernel launch runs `on_launch(name, pointers)` (the
test's model of what that kernel computes), so host programs can be checked without a GPU."""
from __future__ import annotations

import numpy as np

BASE = 0x10000
ALIGN = 256


class FakeDevice:
    arch = "sm_90"
    capability = (9, 0)
    name = "fake GPU"

    def __init__(self, on_launch=None):
        self.memory = bytearray()
        self.log: list[tuple] = []
        self.freed: list[int] = []
        self.on_launch = on_launch or (lambda name, pointers: None)
        self.ptx = None

    def _span(self, ptr: int, nbytes: int) -> slice:
        start = ptr - BASE
        assert 0 <= start and start + nbytes <= len(self.memory), "outside device memory"
        return slice(start, start + nbytes)

    def alloc(self, nbytes: int) -> int:
        ptr = BASE + len(self.memory)
        self.memory.extend(bytes(-(-max(1, nbytes) // ALIGN) * ALIGN))
        self.log.append(("alloc", ptr, nbytes))
        return ptr

    def free(self, ptr: int) -> None:
        self.freed.append(ptr)

    def copy_h2d(self, dst: int, src: np.ndarray) -> None:
        self.memory[self._span(dst, src.nbytes)] = src.tobytes()
        self.log.append(("h2d", dst, src.nbytes))

    def copy_d2h(self, dst: np.ndarray, src: int) -> None:
        data = self.memory[self._span(src, dst.nbytes)]
        dst.reshape(-1).view(np.uint8)[:] = np.frombuffer(bytes(data), np.uint8)
        self.log.append(("d2h", src, dst.nbytes))

    def copy_d2d(self, dst: int, src: int, nbytes: int) -> None:
        self.memory[self._span(dst, nbytes)] = self.memory[self._span(src, nbytes)]
        self.log.append(("d2d", dst, src, nbytes))

    def zero(self, ptr: int, nbytes: int) -> None:
        self.memory[self._span(ptr, nbytes)] = bytes(nbytes)
        self.log.append(("zero", ptr, nbytes))

    def load(self, ptx: str):
        self.ptx = ptx
        return "module"

    def function(self, module, name: str):
        return name

    def launch(self, function, blocks: int, threads: int, shared_bytes: int,
               pointers: list[int]) -> None:
        self.log.append(("launch", function, blocks, threads, shared_bytes, list(pointers)))
        self.on_launch(function, list(pointers))

    def sync(self) -> None:
        self.log.append(("sync",))

    def event(self):
        return object()

    def record(self, event) -> None:
        pass

    def elapsed(self, start, end) -> float:
        return 1e-6

    # what tests read
    def launches(self) -> list[tuple]:
        return [e for e in self.log if e[0] == "launch"]

    def write(self, ptr: int, array: np.ndarray) -> None:
        self.memory[self._span(ptr, array.nbytes)] = array.tobytes()

    def read(self, ptr: int, dtype, count: int) -> np.ndarray:
        nbytes = np.dtype(dtype).itemsize * count
        return np.frombuffer(bytes(self.memory[self._span(ptr, nbytes)]), dtype).copy()
