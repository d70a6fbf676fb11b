"""Compiling a module for the CPU and calling it on numpy arrays.

    run = hlo_opt.compile(text)          # or a Module
    [y] = run(x)                         # outputs flattened like hlo_opt.evaluate
    run.stats                            # kernels, fallbacks, peak arena bytes, compile time

compile: parse -> kernels formed (hlo_opt.fusion, unless the module has fusions already) ->
host program (program.py) with one kernel per fusion or other instruction (emitted
once while cached, by fingerprint, and compiled in one batch) -> buffer assignment -> the
driver function -> JIT. Executables and kernels are cached by fingerprint, the most
recently used EXECUTABLE_CACHE_SIZE and KERNEL_CACHE_SIZE of them (LruCache). A call checks
the arguments, takes the outputs (large ones from output_pool.py: memory of outputs the
caller has let go of, not fresh pages), and makes one ctypes call into the driver, which releases the GIL while native code runs. The arena of
temporaries is allocated once per executable and reused by calls that do not overlap (a
concurrent call gets its own).

Calls are cheap (a few microseconds) because nothing is converted per call: the pointer
tables are reused, and the driver is handed the numpy array objects themselves and reads
their data pointers (DATA_OFFSET, checked against a live array at import; where the check
fails, calls pass data pointers from `ndarray.ctypes` instead).
"""
from __future__ import annotations

import ctypes
import threading
import time
from collections import OrderedDict

import numpy as np

from ..errors import HloError, UnsupportedError
from ..fusion.stage import fuse, has_fusions
from ..interpreter import refuse_unrunnable_side_effects
from ..interpreter.evaluator import coerce_argument
from ..ir import Computation, Module
from . import buffers, fallback, in_place, jit, loop_packing, output_pool
from .driver import Driver, step_label
from .emit_kernel import KernelCode, emit_kernel
from .fingerprint import fingerprint
from .ltypes import array_bytes
from .program import (Buffer, Conditional, Copy, KernelStep, Program, ProgramBuilder, While,
                      kernel_steps, leaves, step_io)



class LruCache:
    """A dict that keeps its `size` most recently used entries, so a process compiling
    many distinct modules (a JAX integration) does not keep every one.

    Evicting only drops this cache's reference. Machine code is never freed: every object
    file joins the one MCJIT engine (jit.py), which keeps it loaded for the life of the
    process, so an executable or kernel still held by a caller keeps working; what an
    eviction releases is the Python side (IR text, programs, arenas of temporaries). A
    kernel compiled again after eviction is found in jit's cache of addresses by the hash
    of its IR, not loaded twice."""

    def __init__(self, size: int):
        self.size = size
        self._entries: OrderedDict = OrderedDict()

    def get(self, key):
        value = self._entries.get(key)
        if value is not None:
            self._entries.move_to_end(key)
        return value

    def put(self, key, value) -> None:
        self._entries[key] = value
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def get_or_add(self, key, make):
        """The entry for `key`; when absent, `make()`'s result, kept."""
        value = self.get(key)
        if value is None:
            value = make()
            self.put(key, value)
        return value

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


# Executables hold their program and an arena as large as the module's temporaries;
# kernels hold LLVM IR text (kilobytes to a few megabytes for large fusions).
EXECUTABLE_CACHE_SIZE = 64
KERNEL_CACHE_SIZE = 4096
_kernels = LruCache(KERNEL_CACHE_SIZE)
_executables = LruCache(EXECUTABLE_CACHE_SIZE)
_lock = threading.RLock()
_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int64, ctypes.c_void_p)
_DRIVER = ctypes.CFUNCTYPE(ctypes.c_int32, *([ctypes.c_void_p] * 6))   # addresses as ints


def kernel_for(comp: Computation, updates: tuple[int, ...] = (),
               packed: tuple[int, ...] = ()) -> KernelCode:
    """The kernel of a fused computation, shared by every identical one (emitted here,
    compiled in batches by `compile_kernels`); `updates`, `packed`: see emit_kernel."""
    key = "".join(f"{tag}{'.'.join(map(str, v))}_" for tag, v in (("u", updates),
                                                                  ("p", packed)) if v)
    key += fingerprint(comp)
    with _lock:
        return _kernels.get_or_add(key, lambda: emit_kernel(comp, f"k_{key[:20]}", key,
                                                            updates, packed))


def pack_kernel_for(comp: Computation) -> KernelCode:
    """The kernel packing the B operand of the dot in `comp` (loop_packing.py), shared
    like `kernel_for`'s."""
    key = "pack_" + fingerprint(comp)
    with _lock:
        return _kernels.get_or_add(key, lambda: loop_packing.pack_kernel(
            comp, f"k_{key[:20]}", key))


def clear_caches() -> None:
    """Forget compiled modules and kernels (machine code already loaded stays loaded), so
    the next compile starts cold: what tools/bench_cpu.py times."""
    with _lock:
        _kernels.clear()
        _executables.clear()
        jit.clear_cache()


def compile_kernels(kernels) -> None:
    """Machine code for every kernel not compiled yet, in one batch."""
    todo = [k for k in kernels if not k.addresses]
    results = jit.compile_batch([(k.ir, _exported(k)) for k in todo])
    for k, addresses in zip(todo, results):
        k.addresses = addresses


def _exported(k: KernelCode) -> list[str]:
    return [k.name, f"{k.name}.par"] if f'@"{k.name}.par"' in k.ir else [k.name]


def compile_module(module, target: str = "cpu", flush_denormals: bool = False) -> "Executable":
    if isinstance(module, str):
        from .. import parse
        module = parse(module)
    refuse_unrunnable_side_effects(module)
    if target == "gpu":
        if flush_denormals:
            raise UnsupportedError("flush_denormals is an option of the cpu target")
        from .gpu_runtime import compile_gpu
        return compile_gpu(module)
    if target != "cpu":
        raise HloError(f"no code generator for target {target!r} (only 'cpu' and 'gpu')")
    with _lock:
        return _executables.get_or_add((fingerprint(module.entry), flush_denormals),
                                       lambda: Executable(module, flush_denormals))


def build(module: Module, builder: ProgramBuilder | None = None, target: str = "cpu"):
    """(program, builder, output shapes, parameter buffers) of a module: everything but the
    driver. A module without fusions gets its kernels from the fusion stage first (the
    default declarations, `target`'s cost model), as optimize would form them; one with
    fusions keeps its own. `builder` makes another target's kernels (gpu_runtime.py)."""
    if not has_fusions(module):
        module = fuse(module, target)
    builder = builder or ProgramBuilder(kernel_for, update_kernel_for=kernel_for)
    params, k = [], 0
    for p in module.entry.parameters:
        value, k = _param_value(p.shape, k)
        params.append(value)
    program, result = builder.build(module.entry, params)
    results = leaves(result)
    out_shapes = module.entry.root.shape.leaves() if module.entry.root.shape.is_tuple else \
        [module.entry.root.shape]
    out_shapes = [s for s in out_shapes if s.dtype.numpy is not None]
    if builder.update_kernel_for:
        in_place.apply(program, results, builder.update_kernel_for)
    if target == "cpu":
        loop_packing.apply(program, kernel_for, pack_kernel_for)
    _bind_outputs(program, results)
    buffers.assign(program, results)
    return program, builder, out_shapes, k


def _param_value(shape, k: int):
    if shape.is_tuple:
        parts = []
        for s in shape.elements:
            v, k = _param_value(s, k)
            parts.append(v)
        return tuple(parts), k
    if shape.dtype.numpy is None:
        return None, k
    return Buffer(array_bytes(shape), "param", k, f"param{k}"), k + 1


def _bind_outputs(program: Program, results: list[Buffer]) -> None:
    """A result written by a step at the top level (a kernel, a fallback, a loop's state, a
    conditional's result) is written straight into the output array; any other (a
    parameter, a constant, a repeat) is copied there at the end."""
    produced = {id(b) for s in program.steps for b in step_io(s)[0]}
    seen = set()
    for k, buf in enumerate(results):
        if buf.kind == "temp" and id(buf) in produced and id(buf) not in seen:
            buf.kind, buf.index = "out", k
            seen.add(id(buf))
        else:
            program.steps.append(Copy(Buffer(buf.nbytes, "out", k), buf))


def kernels_of(program: Program) -> dict:
    """The distinct kernels `program` (and the programs it runs) calls, by key."""
    return {step.kernel.key: step.kernel for step in kernel_steps(program)}


def _max_args(program: Program) -> int:
    n = 1
    for step in program.steps:
        if isinstance(step, KernelStep):
            n = max(n, step.kernel.n_args)
        elif hasattr(step, "ins"):
            n = max(n, len(step.outs) + len(step.ins))
        elif isinstance(step, While):
            n = max(n, _max_args(step.cond), _max_args(step.body))
        elif isinstance(step, Conditional):
            n = max([n] + [_max_args(p) for p, _ in step.branches])
    return n


def _data_offset() -> int | None:
    """Where a numpy array object keeps its data pointer (right after the object header in
    CPython's numpy: PyArrayObject_fields.data), checked on a live array; None if that
    does not hold here, and then calls pass data pointers instead."""
    probe = np.arange(3.0)
    offset = 2 * ctypes.sizeof(ctypes.c_void_p)
    found = ctypes.c_void_p.from_address(id(probe) + offset).value
    return offset if found == probe.ctypes.data else None


DATA_OFFSET = _data_offset()


def emit_driver(program: Program, kernels: dict[str, KernelCode], profile: bool = False,
                flush_denormals: bool = False):
    """(name, LLVM IR, the steps a profile times, in counter order) of the driver; its name
    is a hash of its body."""
    slots = {key: n for n, key in enumerate(kernels)}
    driver = Driver("driver", slots, jit.has_openmp(), profile, DATA_OFFSET, flush_denormals)
    text = driver.emit(program, _max_args(program))
    name = f"driver_{jit.ir_hash(text)[:20]}"
    return name, text.replace('@"driver"', f'@"{name}"'), driver.steps


class Executable:
    """A module compiled for the host CPU; call it on numpy arrays.

    Arithmetic is IEEE with denormals, like the interpreter, except that packed GEMMs read
    denormal operands as zero (emit_dot.flush_denormal); `flush_denormals` runs it the way
    XLA:CPU does (flush-to-zero and denormals-are-zero), which is faster where elementwise
    code meets denormals (exp of large negative numbers)."""

    def __init__(self, module: Module, flush_denormals: bool = False):
        start = time.perf_counter()
        self.flush_denormals = flush_denormals
        llvm_before = jit.stats["seconds"]
        self.module = module
        self.program, builder, self.out_shapes, self.n_params = build(module)
        self.param_shapes = [s for p in module.entry.parameters
                             for s in (p.shape.leaves() if p.shape.is_tuple else [p.shape])
                             if s.dtype.numpy is not None]
        self.kernels = kernels_of(self.program)
        compile_kernels(self.kernels.values())
        self.driver_name, self.driver_ir, _ = emit_driver(self.program, self.kernels,
                                                          flush_denormals=flush_denormals)
        address = jit.compile_ir(self.driver_ir, [self.driver_name], level=1)[self.driver_name]
        self._driver = _DRIVER(address)
        self._constants = builder.constants
        self._fallbacks = builder.fallbacks
        self._fns = (ctypes.c_void_p * max(1, 2 * len(self.kernels)))(
            *[a for k in self.kernels.values()
              for a in (k.addresses[k.name], k.addresses.get(f"{k.name}.par", 0))])
        self._consts = (ctypes.c_void_p * max(1, len(self._constants)))(
            *[c.ctypes.data for c in self._constants])
        self._callback = _CALLBACK(self._run_fallback)
        self._error: BaseException | None = None
        self._arena_lock = threading.Lock()
        self._arena = _aligned(self.program.peak)
        # What a call needs, prepared once: addresses as ints, reusable pointer arrays.
        self._consts_address = ctypes.addressof(self._consts)
        self._fns_address = ctypes.addressof(self._fns)
        self._callback_address = ctypes.cast(self._callback, ctypes.c_void_p).value
        self._params = _pointer_array(len(self.param_shapes))
        self._outs = _pointer_array(len(self.out_shapes))
        self._param_specs = [(s.dims, s.dtype.numpy) for s in self.param_shapes]
        self._out_specs = [(s.dims, s.dtype.numpy) for s in self.out_shapes]
        self._simple = all(not p.shape.is_tuple and p.shape.dtype.numpy is not None
                           for p in module.entry.parameters)
        self.stats = {
            "kernels": len(self.kernels),
            "kernel_calls": count_launches(self.program),
            "fallbacks": [f"{f.call.inst.name} ({f.call.inst.opcode}): {f.call.reason}"
                          for f in self._fallbacks],
            "peak_bytes": self.program.peak,
            "compile_seconds": time.perf_counter() - start,
            "llvm_seconds": jit.stats["seconds"] - llvm_before,
        }
        fallback.announce([f.call for f in self._fallbacks], module.name)

    def __call__(self, *args) -> list[np.ndarray]:
        return self.run(args)

    def run(self, args, out: list[np.ndarray] | None = None) -> list[np.ndarray]:
        """Outputs for `args` (in parameter order; tuple parameters as tuples), written into
        `out` when given (C-contiguous arrays of the outputs' types and shapes, e.g. the
        previous call's: no fresh pages to fault in for large outputs)."""
        if self._simple and len(args) == len(self.param_shapes):
            arrays = args                        # checked below, array by array
        else:
            arrays = flatten_args(args, self.module.entry.parameters)
            if len(arrays) != len(self.param_shapes):
                raise HloError(f"{self.module.entry.name} takes {len(self.param_shapes)} "
                               f"array arguments, got {len(arrays)}")
        keep = []
        for n, (a, (dims, dt)) in enumerate(zip(arrays, self._param_specs)):
            if not (type(a) is np.ndarray and a.dtype == dt and a.shape == dims
                    and a.flags.c_contiguous):
                a = coerce(a, self.param_shapes[n], n)
            keep.append(a)
        if out is None:
            outputs = [output_pool.take(dims, dt) for dims, dt in self._out_specs]
        else:
            outputs = list(out)
            if len(outputs) != len(self._out_specs) or any(
                    type(o) is not np.ndarray or o.dtype != dt or o.shape != dims
                    or not o.flags.c_contiguous or not o.flags.writeable
                    for o, (dims, dt) in zip(outputs, self._out_specs)):
                raise HloError("out= must be writable C-contiguous arrays of the outputs' "
                               "types and shapes")
        if self._arena_lock.acquire(blocking=False):
            try:
                status = self._call(keep, outputs, self._params, self._outs, self._arena[1])
            finally:
                self._arena_lock.release()
        else:                                    # another thread is in: its own arena
            arena = _aligned(self.program.peak)
            status = self._call(keep, outputs, _pointer_array(len(keep)),
                                _pointer_array(len(outputs)), arena[1])
        if status:
            error, self._error = self._error, None
            raise error if error is not None else RuntimeError(f"driver status {status}")
        return outputs

    def _call(self, arrays, outputs, params, outs, arena) -> int:
        """One driver call; the caller keeps `arrays` and `outputs` alive through it."""
        if DATA_OFFSET is None:
            for k, a in enumerate(arrays):
                params[k] = a.ctypes.data
            for k, o in enumerate(outputs):
                outs[k] = o.ctypes.data
        else:                                    # the driver reads their data pointers
            for k, a in enumerate(arrays):
                params[k] = id(a)
            for k, o in enumerate(outputs):
                outs[k] = id(o)
        return self._driver(ctypes.addressof(params), ctypes.addressof(outs), arena,
                            self._consts_address, self._fns_address, self._callback_address)

    def profile(self, args, calls: int = 20) -> list[tuple[str, float, int, int]]:
        """Per kernel or fallback step: (label (driver.step_label), seconds per call, calls
        per call, bytes its outputs and inputs hold), most expensive first, from a driver
        that reads the CPU's cycle counter around each step (cycles are converted with the
        total time of the calls)."""
        name, text, steps = emit_driver(self.program, self.kernels, profile=True,
                                         flush_denormals=self.flush_denormals)
        address = jit.compile_ir(text, [name], level=1)[name]
        driver = ctypes.CFUNCTYPE(ctypes.c_int32, *([ctypes.c_void_p] * 7))(address)
        flat = flatten_args(args, self.module.entry.parameters)
        arrays = [coerce(a, s, n) for n, (a, s) in enumerate(zip(flat, self.param_shapes))]
        outputs = [np.empty(s.dims, s.dtype.numpy) for s in self.out_shapes]
        params, outs = _pointer_array(len(arrays)), _pointer_array(len(outputs))
        for table, values in ((params, arrays), (outs, outputs)):
            for k, a in enumerate(values):
                table[k] = a.ctypes.data if DATA_OFFSET is None else id(a)
        counters = np.zeros(2 * max(1, len(steps)), np.int64)
        arena = _aligned(self.program.peak)
        start = time.perf_counter()
        for _ in range(calls):
            driver(params, outs, arena[1], self._consts, self._fns, self._callback,
                   counters.ctypes.data)
        elapsed = (time.perf_counter() - start) / calls
        cycles = counters[0::2].astype(np.float64)
        per_cycle = elapsed / max(cycles.sum(), 1.0) * calls
        rows = [(step_label(step), c * per_cycle / calls, int(n) // calls,
                 sum(b.nbytes for b in step.outs + step.ins))
                for step, c, n in zip(steps, cycles, counters[1::2])]
        return sorted(rows, key=lambda r: -r[1])

    def _run_fallback(self, step_id: int, argv: int) -> int:
        try:
            step = self._fallbacks[step_id]
            n = len(step.outs) + len(step.ins)
            pointers = (ctypes.c_void_p * n).from_address(argv)
            step.call.run([p or 0 for p in pointers])
            return 0
        except BaseException as e:            # reported after the driver returns
            self._error = e
            return 1


def _pointer_array(n: int):
    return (ctypes.c_void_p * max(1, n))()


def _aligned(nbytes: int):
    raw = np.empty(nbytes + 64, np.uint8)
    address = raw.ctypes.data
    return raw, (address + 63) // 64 * 64


def count_launches(program: Program) -> int:
    """Kernel steps of `program` and of the programs its loops and branches hold."""
    return sum(1 for _ in kernel_steps(program))


def flatten_args(args, params) -> list:
    """The array arguments in order, tuple arguments flattened like their parameters."""
    flat = []
    for a, p in zip(args, params):
        if p.shape.is_tuple:
            flat.extend(_flatten_tuple(a, p.shape))
        elif p.shape.dtype.numpy is not None:
            flat.append(a)
    if len(args) != len(params):
        raise HloError(f"expected {len(params)} arguments, got {len(args)}")
    return flat


def _flatten_tuple(a, shape) -> list:
    out = []
    for x, s in zip(a, shape.elements):
        if s.is_tuple:
            out.extend(_flatten_tuple(x, s))
        elif s.dtype.numpy is not None:
            out.append(x)
    return out


def coerce(a, shape, position: int) -> np.ndarray:
    """The argument as the interpreter takes it (same checks, same messages), contiguous."""
    return np.ascontiguousarray(coerce_argument(a, shape, position))
