"""A recording stand-in for lowering/cuda_device.CudaDevice: device memory is a bytearray,
every call is logged in order, and a kernel launch runs `on_launch(name, pointers)` (the
test's model of what that kernel computes), so host programs can be checked without a GPU."""
from __future__ import annotations

import ctypes

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

    def use(self) -> None:
        pass

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
        assert blocks > 0 and threads > 0
        for p in pointers:
            self._span(p, 1)                        # every argument is device memory
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


class FakeDriver:
    """A stand-in for `cuda.bindings.driver` with the signatures cuda-bindings documents
    (parameter names included): records each call, returns (CUDA_SUCCESS, value). A
    launch's parameters are read while the call is on (as the driver copies them)."""

    class CUdevice_attribute:                       # noqa: N801 - the binding's name
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76

    NAMES = {0: b"CUDA_SUCCESS", 2: b"CUDA_ERROR_OUT_OF_MEMORY", 100: b"CUDA_ERROR_NO_DEVICE"}

    def __init__(self, fail: dict | None = None):
        self.calls: list[tuple] = []
        self.fail = fail or {}                      # call name -> CUresult it returns
        self.next_ptr = 0x7000_0000
        self.arity: dict = {}                       # function -> parameters a launch reads

    def _record(self, name, *args, result=()):
        self.calls.append((name, *args))
        return (self.fail.get(name, 0), *result)

    def cuInit(self, Flags):
        return self._record("cuInit", Flags)

    def cuDeviceGetCount(self):
        return self._record("cuDeviceGetCount", result=(1,))

    def cuDeviceGet(self, ordinal):
        return self._record("cuDeviceGet", ordinal, result=("dev0",))

    def cuDevicePrimaryCtxRetain(self, dev):
        return self._record("cuDevicePrimaryCtxRetain", dev, result=("ctx",))

    def cuCtxSetCurrent(self, ctx):
        return self._record("cuCtxSetCurrent", ctx)

    def cuStreamCreate(self, Flags):
        return self._record("cuStreamCreate", Flags, result=("stream",))

    def cuDeviceGetAttribute(self, attrib, dev):
        value = {75: 9, 76: 0}[attrib]
        return self._record("cuDeviceGetAttribute", attrib, dev, result=(value,))

    def cuDeviceGetName(self, length, dev):
        return self._record("cuDeviceGetName", length, dev,
                            result=(b"Fake H100".ljust(length, b"\0"),))

    def cuMemAlloc(self, bytesize):
        self.next_ptr += 1 << 20
        return self._record("cuMemAlloc", bytesize, result=(self.next_ptr,))

    def cuMemFree(self, dptr):
        return self._record("cuMemFree", dptr)

    def cuMemcpyHtoDAsync(self, dstDevice, srcHost, ByteCount, hStream):
        return self._record("cuMemcpyHtoDAsync", dstDevice, srcHost, ByteCount, hStream)

    def cuMemcpyDtoHAsync(self, dstHost, srcDevice, ByteCount, hStream):
        return self._record("cuMemcpyDtoHAsync", dstHost, srcDevice, ByteCount, hStream)

    def cuMemcpyDtoDAsync(self, dstDevice, srcDevice, ByteCount, hStream):
        return self._record("cuMemcpyDtoDAsync", dstDevice, srcDevice, ByteCount, hStream)

    def cuMemsetD8Async(self, dstDevice, uc, N, hStream):
        return self._record("cuMemsetD8Async", dstDevice, uc, N, hStream)

    def cuModuleLoadData(self, image):
        return self._record("cuModuleLoadData", image, result=("module",))

    def cuModuleGetFunction(self, hmod, name):
        return self._record("cuModuleGetFunction", hmod, name, result=(("fn", name),))

    def cuLaunchKernel(self, f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,
                       blockDimZ, sharedMemBytes, hStream, kernelParams, extra):
        n = self.arity.get(f, 0)
        slots = (ctypes.c_void_p * n).from_address(kernelParams) if n else []
        values = [ctypes.c_void_p.from_address(s).value for s in slots]
        return self._record("cuLaunchKernel", f, gridDimX, gridDimY, gridDimZ, blockDimX,
                            blockDimY, blockDimZ, sharedMemBytes, hStream, values, extra)

    def cuStreamSynchronize(self, hStream):
        return self._record("cuStreamSynchronize", hStream)

    def cuEventCreate(self, Flags):
        return self._record("cuEventCreate", Flags, result=(object(),))

    def cuEventRecord(self, hEvent, hStream):
        return self._record("cuEventRecord", hEvent, hStream)

    def cuEventElapsedTime(self, hStart, hEnd):
        return self._record("cuEventElapsedTime", hStart, hEnd, result=(2.5,))

    def cuGetErrorName(self, error):
        return (0, self.NAMES[int(error)])
