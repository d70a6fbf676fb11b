"""Compiling a module for the GPU and calling it on numpy arrays or device arrays.

    run = hlo_opt.compile(text, target="gpu")
    [y] = run(x)                               # numpy in, numpy out (tuple results flattened)
    [y] = run.run([x], device=True)            # outputs stay on the GPU: DeviceArray
    x_gpu = run.put(x)                         # an input placed on the GPU beforehand

The host program is the CPU's (program.py: the same ProgramBuilder, buffer assignment by
live range in buffers.py), built with GPU kernels (emit_gpu.py) in the KernelSteps, no
splitting of fusions into threaded steps and no interpreter (what has no GPU kernel is an
UnsupportedError at compile time). Python walks that program and queues its work on one
CUDA stream through cuda_device.CudaDevice: each KernelStep one launch (outputs, inputs,
then the zeroed scratch buffer when the kernel asks for one), copies device to device,
while loops and conditionals decided on the host from a value read back after the
condition's kernels. Every kernel of the module is in one PTX module, loaded once.

Memory is allocated once per executable: the arena of temporaries (its size the program's
peak), the constants (uploaded once), one buffer per parameter (numpy arguments are copied
in) and per output (copied out into fresh numpy arrays). A DeviceArray argument (anything
with `__cuda_array_interface__` of the parameter's shape and type, C-contiguous) is read in
place; `device=True` outputs are fresh DeviceArrays. Executables are cached by fingerprint
and architecture, kernels by fingerprint (runtime.LruCache).
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import numpy as np

from ..errors import HloError
from ..ir import Computation, Module
from . import nvptx
from .cuda_device import open_device
from .emit_gpu import GpuKernel, emit_gpu_kernel, launch_units
from .emit_kernel import array_constants
from .fingerprint import fingerprint
from .gpu_frame import SplitNeeded
from .ltypes import array_bytes
from .program import Buffer, Conditional, Copy, KernelStep, Program, ProgramBuilder, While
from .runtime import (EXECUTABLE_CACHE_SIZE, KERNEL_CACHE_SIZE, LruCache, build, coerce,
                      count_launches, flatten_args, kernels_of)

_kernels = LruCache(KERNEL_CACHE_SIZE)
_executables = LruCache(EXECUTABLE_CACHE_SIZE)
_lock = threading.RLock()


@dataclass
class GpuCode:
    """What a KernelStep of a GPU program runs: one GPU kernel, with the fields the program
    builder reads of any kernel (array constants after the parameters; `temps`: the
    scratch buffer, when the kernel takes one)."""
    kernel: GpuKernel
    key: str
    constants: list = field(default_factory=list)
    temps: list[int] = field(default_factory=list)
    scratch_per_thread: int = 0

    @property
    def name(self) -> str:
        return self.kernel.name


def gpu_kernel_for(arch: str):
    """Computation -> GpuCode for `arch`, shared by every identical computation."""
    def make(comp: Computation, key: str) -> GpuCode:
        k = emit_gpu_kernel(comp, f"k_{key[:20]}", arch)
        return GpuCode(k, key, array_constants(comp), [k.scratch_bytes] if k.scratch_bytes else [])

    def kernel_for(comp: Computation) -> GpuCode:
        key = fingerprint(comp)
        with _lock:
            return _kernels.get_or_add((key, arch), lambda: make(comp, key))
    return kernel_for


def _launches(kernel_for):
    """The program builder's `split`: None for a kernel that is one launch (its code is
    then cached), else its launch units (emit_gpu.launch_units)."""
    def split(comp: Computation):
        try:
            kernel_for(comp)
            return None
        except SplitNeeded:
            return launch_units(comp)
    return split


def compile_gpu(module: Module) -> "GpuExecutable":
    """The module's executable on this machine's GPU (cached); UnsupportedError when there
    is none (cuda_device.open_device says why)."""
    device = open_device()
    with _lock:
        return _executables.get_or_add((fingerprint(module.entry), device.arch),
                                       lambda: GpuExecutable(module, device))


class DeviceArray:
    """An array in GPU memory, C-contiguous; `__cuda_array_interface__` (version 3) lets
    CuPy, Numba or PyTorch read it in place, `get()` copies it to a numpy array."""

    def __init__(self, device, shape, dtype, ptr: int | None = None):
        self.device, self.shape, self.dtype = device, tuple(shape), np.dtype(dtype)
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        self.owned = ptr is None
        self.ptr = device.alloc(self.nbytes) if ptr is None else ptr

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False),
                "strides": None, "version": 3}

    def get(self) -> np.ndarray:
        host = np.empty(self.shape, self.dtype)
        self.device.copy_d2h(host, self.ptr)
        self.device.sync()
        return host

    def __del__(self):
        if getattr(self, "owned", False):
            try:
                self.device.free(self.ptr)
            except Exception:          # the process is exiting and the driver is gone
                pass


def device_pointer(a, dims, dtype, position: int) -> int:
    """The data pointer of a GPU array argument, after checking its shape, type and layout."""
    face = a.__cuda_array_interface__
    shape = tuple(face["shape"])
    dt = a.dtype if isinstance(getattr(a, "dtype", None), np.dtype) else \
        np.dtype(face["typestr"])               # typestr cannot name bfloat16 or float8
    if shape != tuple(dims) or dt != np.dtype(dtype):
        raise HloError(f"argument {position}: GPU array of {dt}{list(shape)} given, "
                       f"{np.dtype(dtype)}{list(dims)} expected")
    strides = face.get("strides")
    if strides is not None and tuple(strides) != _c_strides(shape, dt.itemsize):
        raise HloError(f"argument {position}: a GPU array argument must be C-contiguous")
    return int(face["data"][0])


class GpuExecutable:
    """A module compiled for one GPU (a CudaDevice, or anything with its methods); call it
    on numpy arrays or GPU arrays."""

    def __init__(self, module: Module, device):
        start = time.perf_counter()
        self.module, self.device, self.arch = module, device, device.arch
        kernel_for = gpu_kernel_for(self.arch)
        builder = ProgramBuilder(kernel_for, split=_launches(kernel_for), interpreter=False)
        self.program, builder, self.out_shapes, _ = build(module, builder, "gpu")
        self.param_shapes = [s for p in module.entry.parameters
                             for s in (p.shape.leaves() if p.shape.is_tuple else [p.shape])
                             if s.dtype.numpy is not None]
        self.kernels: dict[str, GpuCode] = kernels_of(self.program)
        codes = list(self.kernels.values())
        self.ptx, self._functions = "", {}
        if codes:
            loaded = self._load(codes)
            self._functions = {c.key: device.function(loaded, c.name) for c in codes}
        self._owned: list[int] = []
        self._arena = self._alloc(self.program.peak)
        self._consts = [self._alloc(c.nbytes) for c in builder.constants]
        for ptr, c in zip(self._consts, builder.constants):
            device.copy_h2d(ptr, c)
        self._params = [self._alloc(array_bytes(s)) for s in self.param_shapes]
        self._outs = [self._alloc(array_bytes(s)) for s in self.out_shapes]
        device.sync()
        self._simple = all(not p.shape.is_tuple and p.shape.dtype.numpy is not None
                           for p in module.entry.parameters)
        self._lock = threading.Lock()
        self._timed: list | None = None          # (step, start event, end event) per launch
        self.stats = {"kernels": len(self.kernels), "kernel_calls": count_launches(self.program),
                      "peak_bytes": self.program.peak, "arch": self.arch,
                      "compile_seconds": time.perf_counter() - start}

    def _load(self, codes: list[GpuCode]):
        """The kernels as one PTX module loaded on the device; a device that runs kernels
        from their LLVM IR instead (the tests' simulated GPU) is given the kernels."""
        if hasattr(self.device, "load_kernels"):
            return self.device.load_kernels([c.kernel for c in codes])
        self.ptx = nvptx.ptx([c.kernel.ir for c in codes], [c.name for c in codes], self.arch)
        return self.device.load(self.ptx)

    def _alloc(self, nbytes: int) -> int:
        ptr = self.device.alloc(nbytes)
        self._owned.append(ptr)
        return ptr

    def __del__(self):
        for ptr in getattr(self, "_owned", []):
            try:
                self.device.free(ptr)
            except Exception:          # the process is exiting and the driver is gone
                pass

    def __call__(self, *args) -> list[np.ndarray]:
        return self.run(args)

    def put(self, array) -> DeviceArray:
        """A copy of a numpy array in GPU memory (an argument placed beforehand)."""
        a = np.array(array, order="C", copy=None)   # ascontiguousarray would make 0-d 1-d
        self.device.use()
        d = DeviceArray(self.device, a.shape, a.dtype)
        self.device.copy_h2d(d.ptr, a)
        self.device.sync()
        return d

    def run(self, args, device: bool = False) -> list:
        """Outputs for `args` (in parameter order; tuple parameters as tuples; numpy arrays or
        GPU arrays), as numpy arrays, or as DeviceArrays with `device`."""
        arrays = args if self._simple and len(args) == len(self.param_shapes) else \
            flatten_args(args, self.module.entry.parameters)
        if len(arrays) != len(self.param_shapes):
            raise HloError(f"{self.module.entry.name} takes {len(self.param_shapes)} array "
                           f"arguments, got {len(arrays)}")
        with self._lock:
            self.device.use()
            keep, params = [], []
            for n, (a, s) in enumerate(zip(arrays, self.param_shapes)):
                if hasattr(a, "__cuda_array_interface__"):
                    params.append(device_pointer(a, s.dims, s.dtype.numpy, n))
                    continue
                a = coerce(a, s, n)
                keep.append(a)
                self.device.copy_h2d(self._params[n], a)
                params.append(self._params[n])
            if device:
                outputs = [DeviceArray(self.device, s.dims, s.dtype.numpy)
                           for s in self.out_shapes]
                outs = [o.ptr for o in outputs]
            else:
                outputs = [np.empty(s.dims, s.dtype.numpy) for s in self.out_shapes]
                outs = self._outs
            self._tables = {"param": params, "out": outs, "const": self._consts}
            self._run(self.program)
            if not device:
                for host, ptr in zip(outputs, outs):
                    self.device.copy_d2h(host, ptr)
            self.device.sync()
            return outputs

    def profile(self, args, calls: int = 20) -> list[tuple[str, float, int, int]]:
        """Per kernel: (label, seconds per call, launches per call, bytes its outputs and
        inputs hold), from CUDA events around each launch, most expensive first."""
        self.run(args)                                   # warm-up
        totals: dict[str, list] = {}
        for _ in range(calls):
            self._timed = []
            try:
                self.run(args)
            finally:
                timed, self._timed = self._timed, None
            for step, start, end in timed:
                row = totals.setdefault(step.label, [0.0, 0, sum(
                    b.nbytes for b in step.outs + step.ins)])
                row[0] += self.device.elapsed(start, end)
                row[1] += 1
        rows = [(label, t / calls, n // calls, nbytes) for label, (t, n, nbytes) in totals.items()]
        return sorted(rows, key=lambda r: -r[1])

    # ------------------------------------------------------------------ the program
    def _address(self, buf: Buffer) -> int:
        if buf.kind == "temp":
            return self._arena + buf.offset
        return self._tables[buf.kind][buf.index]

    def _run(self, program: Program) -> None:
        for step in program.steps:
            self._STEPS[type(step)](self, step)

    def _kernel(self, step: KernelStep) -> None:
        d, code = self.device, step.kernel
        k = code.kernel
        outs = [self._address(b) for b in step.outs]
        ins = [self._address(b) for b in step.ins]
        temps = [self._address(b) for b in step.temps]
        for ptr, b in zip(temps, step.temps):
            d.zero(ptr, b.nbytes)
        for o, i in k.initial_copies:
            d.copy_d2d(outs[o], ins[i], step.outs[o].nbytes)
        if self._timed is not None:
            start, end = d.event(), d.event()
            d.record(start)
        d.launch(self._functions[code.key], k.blocks, k.threads, k.shared_bytes,
                 outs + ins + temps)
        if self._timed is not None:
            d.record(end)
            self._timed.append((step, start, end))

    def _copy(self, step: Copy) -> None:
        self.device.copy_d2d(self._address(step.dst), self._address(step.src), step.dst.nbytes)

    def _copies(self, dsts: list[Buffer], srcs: list[Buffer]) -> None:
        for dst, src in zip(dsts, srcs):
            self.device.copy_d2d(self._address(dst), self._address(src), dst.nbytes)

    def _read(self, buf: Buffer, dtype) -> int:
        """A scalar the host decides on (a loop condition, a branch index): copied back
        after everything queued before it has run."""
        host = np.zeros(1, dtype)
        self.device.copy_d2h(host, self._address(buf))
        self.device.sync()
        return int(host[0])

    def _loop(self, step: While) -> None:
        self._copies(step.state, step.init)
        while True:
            self._run(step.cond)
            if not self._read(step.cond_result, np.uint8):
                return
            self._run(step.body)
            self._copies(step.state, step.body_results)

    def _conditional(self, step: Conditional) -> None:
        n = len(step.branches)
        if step.by_index:
            index = self._read(step.selector, np.int32)
            index = index if 0 <= index < n else n - 1     # out of range: the last branch
        else:
            index = 0 if self._read(step.selector, np.uint8) else 1
        program, results = step.branches[index]
        self._run(program)
        self._copies(step.outs, results)

    _STEPS = {KernelStep: _kernel, Copy: _copy, While: _loop, Conditional: _conditional}


def _c_strides(shape, itemsize: int) -> tuple:
    strides, step = [], itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))
