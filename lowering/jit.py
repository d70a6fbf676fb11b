"""The LLVM JIT: target machine, -O3 pipeline, one MCJIT engine, a cache of compiled
kernels keyed by a hash of their IR.

Every kernel is its own LLVM module, so identical kernels (the same fused computation on the
same shapes, in one HLO module or across modules) compile once per process. Code targets
the host CPU's triple and features, or the CPU model `targets/cpu_facts.target_cpu` names
(HLO_OPT_CPU), so the vectorizer uses the widest vectors available (`cpu_facts` says which
width we prefer).

Before an object file joins the engine, its undefined symbols are checked (objfile.py):
each must be defined by code already in the engine (kernels, library code, the soft-float
helpers of libcalls.py, loaded first) or be one the runtime provides (libcalls.provided)
and found in the process. MCJIT aborts the process on a symbol it cannot resolve; this
makes it an UnsupportedError instead.
"""
from __future__ import annotations

import atexit
import ctypes
import ctypes.util
import hashlib
import os
import threading
import time

import llvmlite.binding as llvm
from llvmlite import ir

from ..errors import UnsupportedError
from ..targets import cpu_facts
from . import libcalls, objfile

# Compile-time budget: the vectorizer's epilogue loops and full unrolling of loops beyond a
# small body roughly halve the kernels' compile time when turned down; the main vector loop
# and explicit register blocking (emit_dot.py) carry the speed.
# LLVM 22's SLP vectorizer models a bundle such as (x, x+1, ..., x+7) with x as a
# "copyable" x+0; scheduling such a bundle where x is also the others' operand can fail
# the assertion "Expected valid number of unscheduled deps" (an abort). Our kernels compute
# runs of neighbouring indices everywhere (a conv packer's rows, for one), so that part of
# SLP is off; the rest of SLP still runs.
_LLVM_OPTIONS = ("-unroll-threshold=50", "-slp-copyable-elements=false")
_lock = threading.RLock()
_state: dict = {}
_cache: dict[str, dict[str, int]] = {}     # IR hash -> {function name: address}
_library: set[str] = set()                 # keys of code compiled once per process
stats = {"compiled": 0, "cache_hits": 0, "seconds": 0.0}


def _init():
    """Initialize LLVM once: native target, libm/libc/libgomp symbols for the JIT, the
    target machine (all a compile worker needs)."""
    if _state:
        return _state
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    for option in _LLVM_OPTIONS:
        llvm.set_option("hlo-opt", option)
    for lib in ("m", "c"):
        path = ctypes.util.find_library(lib)
        if path:
            llvm.load_library_permanently(path)
    gomp = cpu_facts.openmp_library()
    if gomp:
        llvm.load_library_permanently(gomp)
    target = llvm.Target.from_triple(llvm.get_process_triple())
    cpu, features = cpu_facts.target_cpu()
    tm = target.create_target_machine(cpu=cpu, features=features, opt=3,
                                      codemodel="jitdefault", jit=True)
    _state.update(tm=tm, openmp=bool(gomp))
    return _state


def _engine():
    """The MCJIT engine, made on first use with the soft-float helpers loaded in it."""
    state = _init()
    if "engine" not in state:
        state.update(engine=llvm.create_mcjit_compiler(llvm.parse_assembly(""), state["tm"]),
                     defined=set())
        helpers = libcalls.soft_float_module(llvm.get_process_triple(),
                                             str(state["tm"].target_data))
        _load([_object_code([helpers], 3)])
    return state["engine"]


def _load(objects: list[bytes]) -> None:
    """Add object files to the engine once every symbol they need resolves (see above)."""
    state = _state
    tables = [objfile.symbols(o) for o in objects]      # None: not ELF, loaded unchecked
    defined = state["defined"].union(*(t.defined for t in tables if t))
    missing = sorted({name for t in tables if t for name in t.undefined - defined
                      if not libcalls.resolvable(name)})
    if missing:
        raise UnsupportedError(f"compiled code needs {', '.join(missing)}, which the "
                               f"runtime does not provide (lowering/libcalls.py)")
    for obj in objects:
        state["engine"].add_object_file(llvm.ObjectFileRef.from_data(obj))
    state["defined"] = defined


def target_machine():
    return _init()["tm"]


def has_openmp() -> bool:
    return _init()["openmp"]


def new_module(name: str) -> ir.Module:
    """An empty llvmlite module for the host triple and data layout."""
    tm = target_machine()
    mod = ir.Module(name)
    mod.triple = llvm.get_process_triple()
    mod.data_layout = str(tm.target_data)
    return mod


def tune(fn: ir.Function) -> None:
    """Function attributes every kernel gets: vector width preference, no unwinding.
    String attributes are not in llvmlite's whitelist, so they are added to the set as is."""
    set.add(fn.attributes, f'"prefer-vector-width"="{cpu_facts.PREFERRED_VECTOR_BITS}"')
    set.add(fn.attributes, '"no-trapping-math"="true"')
    fn.attributes.add("nounwind")


def optimize(mod: llvm.ModuleRef, level: int = 3, tm=None) -> None:
    """LLVM's pipeline at `level` for target machine `tm` (the host CPU's by default)."""
    pto = llvm.create_pipeline_tuning_options(speed_level=level)
    pto.loop_vectorization = level >= 2
    pto.slp_vectorization = level >= 2
    pto.loop_unrolling = level >= 2
    pb = llvm.create_pass_builder(tm or target_machine(), pto)
    pb.getModulePassManager().run(mod, pb)


def parse(text: str) -> llvm.ModuleRef:
    mod = llvm.parse_assembly(text)
    mod.verify()
    return mod


def ir_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def clear_cache() -> None:
    """Forget which modules were compiled, except shared library code (the GEMM
    micro-kernels), which is compiled once per process like a runtime library."""
    with _lock:
        for key in [k for k in _cache if k not in _library]:
            del _cache[key]


def library(text: str, names: list[str]) -> dict[str, int]:
    """Compile shared library code once per process (it survives clear_cache)."""
    key = ir_hash(f"3\n{text}")
    _library.add(key)
    return compile_ir(text, names)


def compile_ir(text: str, names: list[str], level: int = 3) -> dict[str, int]:
    """Compile (or fetch from the cache) a module's text; addresses of `names`."""
    return compile_batch([(text, names)], level)[0]


def compile_batch(items: list[tuple[str, list[str]]], level: int = 3) -> list[dict[str, int]]:
    """Compile many modules (text, exported names); their addresses, in order. Modules
    not in the cache are linked in chunks, optimized and turned into machine code (in
    worker processes, which also keep LLVM's fatal errors out of this one), then loaded
    into the engine here."""
    with _lock:
        engine = _engine()
        keys = [ir_hash(f"{level}\n{text}") for text, _ in items]
        todo = {}
        for key, (text, _) in zip(keys, items):
            if key in _cache:
                stats["cache_hits"] += 1
            else:
                todo.setdefault(key, text)
        start = time.perf_counter()
        texts = list(todo.values())
        chunks = [texts[i:i + _LINK] for i in range(0, len(texts), _LINK)]
        objects = None
        pool = _pool() if chunks else None
        if pool is not None:
            try:
                objects = pool.map(chunks, level)
            except WorkerCrashed as e:
                raise UnsupportedError(str(e)) from None
            except RuntimeError:                # workers unusable here: compile in process
                _disable_pool()
        if objects is None:
            objects = [_object_code(c, level) for c in chunks]
        _load(objects)
        engine.finalize_object()
        for key, (text, names) in zip(keys, items):
            if key in todo and key not in _cache:
                _cache[key] = {n: engine.get_function_address(n) for n in names}
        stats["compiled"] += len(todo)
        stats["seconds"] += time.perf_counter() - start
        return [_cache[key] for key in keys]


class WorkerCrashed(RuntimeError):
    """A compile worker exited while compiling (LLVM aborts on some errors): compiling the
    same code in this process would abort it too."""


# Kernels linked into one LLVM module per compile: LLVM's fixed cost per module (pass
# pipeline set-up, code generation start-up) is a good part of a small kernel's cost.
_LINK = 8
_workers = None


def _pool():
    """The process's compile workers (compile_worker.py), or None on one core or with
    HLO_OPT_COMPILE_WORKERS=0 (then everything compiles in this process). Every compile
    goes through them, one chunk too: LLVM's fatal errors then end a worker (an
    UnsupportedError here), not this process; the round trip costs about a millisecond
    next to tens of milliseconds of LLVM."""
    global _workers
    if _workers and _workers.pid != os.getpid():   # a forked child: the pipes are the parent's
        _workers = None
    if _workers is None:
        from .compile_worker import Workers
        n = int(os.environ.get("HLO_OPT_COMPILE_WORKERS", cpu_facts.threads()))
        _workers = Workers(n) if n > 1 else False
        if _workers:
            atexit.register(_workers.close)
    return _workers or None


def _disable_pool() -> None:
    global _workers
    if _workers:
        _workers.close()
    _workers = False


def _object_code(texts: list[str], level: int) -> bytes:
    """IR texts -> one object file of optimized machine code for the target CPU (also what
    the compile workers run)."""
    _init()
    mod = parse(texts[0])
    for text in texts[1:]:
        mod.link_in(parse(text))
    optimize(mod, level)
    return target_machine().emit_object(mod)


def optimized_ir(text: str, level: int = 3) -> str:
    mod = parse(text)
    optimize(mod, level)
    return str(mod)


def assembly(text: str, level: int = 3) -> str:
    mod = parse(text)
    optimize(mod, level)
    return target_machine().emit_assembly(mod)
