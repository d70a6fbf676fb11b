"""The GPU as the host program sees it: a thin layer over the CUDA driver API.

`CudaDevice` holds one device's primary context and one stream and offers only what the
GPU host program needs (allocate, free, copy host<->device and device->device, zero bytes,
load a PTX module, launch a kernel, wait, time with events); every other module speaks to
the GPU through it, so a recording fake with the same methods can stand in for it in tests.
The driver API comes from NVIDIA's `cuda-bindings` package (`cuda.bindings.driver`): every
call returns a tuple whose first element is a CUresult; anything but success is an HloError
naming the call and the driver's error name.

`open_device()` is the one entry: it raises ONE UnsupportedError saying why there is no GPU
to run on (the package is not installed, the driver library is absent, cuInit or the device
count says no device), so `compile(target="gpu")` and `hlo-run --target=gpu` fail alike.
"""
from __future__ import annotations

import ctypes
import functools

import numpy as np

from ..errors import HloError, UnsupportedError
from ..targets import gpu

PARAMS_CACHE_SIZE = 4096            # launch parameter arrays kept for reuse
INSTALL_HINT = "pip install 'hlo-opt[gpu]' ('hlo-opt[gpu-cu12]' with a CUDA 12 driver)"


def _bindings():
    """The driver module of cuda-bindings (a function, so tests can replace it)."""
    from cuda.bindings import driver
    return driver


class CudaError(HloError):
    """A CUDA driver call failed on a machine that has a GPU."""


class CudaDevice:
    """Device 0's primary context and one stream; all work is queued on that stream."""

    def __init__(self, driver):
        self.cu = driver
        self.device = self._call("cuDeviceGet", 0)
        self.context = self._call("cuDevicePrimaryCtxRetain", self.device)
        self.use()
        self.stream = self._call("cuStreamCreate", 0)
        self._params: dict[tuple, tuple] = {}       # pointers -> kernel_params(pointers)
        attr = driver.CUdevice_attribute
        self.capability = (
            self._call("cuDeviceGetAttribute",
                       attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self.device),
            self._call("cuDeviceGetAttribute",
                       attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self.device))
        name = self._call("cuDeviceGetName", 256, self.device)
        self.name = name.split(b"\0")[0].decode(errors="replace")

    def _call(self, fn: str, *args):
        result = getattr(self.cu, fn)(*args)
        check(self.cu, fn, result[0])
        return result[1] if len(result) > 1 else None

    @property
    def arch(self) -> str:
        """The newest architecture in targets/gpu.ARCHITECTURES this device runs (its own
        when listed; the driver compiles PTX of an older one for a newer device)."""
        return gpu.arch_for(*self.capability)

    def use(self) -> None:
        """Make this device's context the calling thread's (a context is current per
        thread: a call from another thread than the one that opened the device needs it)."""
        self._call("cuCtxSetCurrent", self.context)

    # ------------------------------------------------------------------ memory
    def alloc(self, nbytes: int) -> int:
        return int(self._call("cuMemAlloc", max(1, nbytes)))

    def free(self, ptr: int) -> None:
        self._call("cuMemFree", ptr)

    def copy_h2d(self, dst: int, src: np.ndarray) -> None:
        """Queue a copy of a C-contiguous host array to device memory; the caller keeps
        `src` alive until the stream is synchronized."""
        if src.nbytes:
            self._call("cuMemcpyHtoDAsync", dst, src.ctypes.data, src.nbytes, self.stream)

    def copy_d2h(self, dst: np.ndarray, src: int) -> None:
        if dst.nbytes:
            self._call("cuMemcpyDtoHAsync", dst.ctypes.data, src, dst.nbytes, self.stream)

    def copy_d2d(self, dst: int, src: int, nbytes: int) -> None:
        if nbytes and dst != src:
            self._call("cuMemcpyDtoDAsync", dst, src, nbytes, self.stream)

    def zero(self, ptr: int, nbytes: int) -> None:
        if nbytes:
            self._call("cuMemsetD8Async", ptr, 0, nbytes, self.stream)

    # ----------------------------------------------------------------- kernels
    def load(self, ptx: str):
        """Load a PTX module (the driver compiles it for this device)."""
        return self._call("cuModuleLoadData", ptx.encode() + b"\0")

    def function(self, module, name: str):
        return self._call("cuModuleGetFunction", module, name.encode())

    def launch(self, function, blocks: int, threads: int, shared_bytes: int,
               pointers: list[int]) -> None:
        """Queue one launch of `function` whose parameters are all device pointers."""
        key = tuple(pointers)
        params = self._params.get(key)
        if params is None:                  # the same buffers are passed call after call
            if len(self._params) >= PARAMS_CACHE_SIZE:
                self._params.clear()
            params = self._params[key] = kernel_params(key)
        self._call("cuLaunchKernel", function, blocks, 1, 1, threads, 1, 1, shared_bytes,
                   self.stream, ctypes.addressof(params[1]), 0)

    def sync(self) -> None:
        self._call("cuStreamSynchronize", self.stream)

    # ------------------------------------------------------------------ timing
    def event(self):
        return self._call("cuEventCreate", 0)

    def record(self, event) -> None:
        self._call("cuEventRecord", event, self.stream)

    def elapsed(self, start, end) -> float:
        """Seconds between two recorded events (after they completed)."""
        return self._call("cuEventElapsedTime", start, end) / 1e3


def kernel_params(pointers: tuple[int, ...]) -> tuple:
    """(values, argv) for cuLaunchKernel's kernelParams: argv[k] points at values[k], which
    holds the k-th pointer argument (the caller keeps both alive)."""
    values = (ctypes.c_void_p * max(1, len(pointers)))(*pointers)
    size = ctypes.sizeof(ctypes.c_void_p)
    argv = (ctypes.c_void_p * max(1, len(pointers)))(
        *[ctypes.addressof(values) + k * size for k in range(len(pointers))])
    return values, argv


def check(cu, fn: str, status) -> None:
    if int(status) != 0:
        raise CudaError(f"CUDA {fn} failed: {error_name(cu, status)}")


def error_name(cu, status) -> str:
    ok, name = cu.cuGetErrorName(status)[:2]
    return name.decode() if int(ok) == 0 and name else f"CUresult {int(status)}"


@functools.lru_cache(maxsize=1)
def open_device() -> CudaDevice:
    """Device 0, opened once per process; UnsupportedError saying why when there is no GPU
    to run on."""
    try:
        cu = _bindings()
    except ImportError as e:
        raise UnsupportedError(f"running on a GPU needs NVIDIA's cuda-bindings package, which "
                               f"is not installed ({e}): {INSTALL_HINT}") from None
    try:
        status = cu.cuInit(0)[0]
    except Exception as e:           # cuda-bindings raises when libcuda.so cannot be loaded
        raise UnsupportedError(f"no GPU to run on: the CUDA driver library could not be "
                               f"loaded ({type(e).__name__}: {e})") from None
    if int(status) != 0:
        raise UnsupportedError(f"no GPU to run on: cuInit failed with "
                               f"{error_name(cu, status)}")
    status, count = cu.cuDeviceGetCount()[:2]
    if int(status) != 0 or count == 0:
        why = error_name(cu, status) if int(status) != 0 else "no CUDA device"
        raise UnsupportedError(f"no GPU to run on: cuDeviceGetCount found {why}")
    return CudaDevice(cu)


def unavailable_reason() -> str | None:
    """Why there is no GPU to run on here, or None when there is one."""
    try:
        open_device()
    except UnsupportedError as e:
        return str(e)
    return None
