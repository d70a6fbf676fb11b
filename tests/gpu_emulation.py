"""Run a GPU kernel's LLVM IR on the host CPU, for tests on machines without a GPU.

The kernel's own IR (before the NVPTX backend) is compiled for the host with the thread
position registers and the block barrier replaced by calls into Python: each block of the
kernel's launch runs as `threads` Python threads (one per GPU thread, released from the GIL
while in the kernel) meeting at a `threading.Barrier` for every `bar.sync`; shared memory
(address space 3) becomes one host global, which is right because blocks run one after
another. Only what the host can execute is supported: warp shuffles and tensor-core (wmma)
intrinsics are not, so this checks SIMT kernels, their indexing, masking, barriers and
epilogues, not the NVPTX backend or the tensor-core path."""
from __future__ import annotations

import ctypes
import re
import threading

import llvmlite.binding as llvm
import numpy as np

from hlo_opt.lowering import jit

_I32_FN = ctypes.CFUNCTYPE(ctypes.c_int32)
_VOID_FN = ctypes.CFUNCTYPE(None)


def host_ir(text: str) -> str:
    """The kernel's IR for the host: no NVPTX triple, layout, calling convention or
    address space 3; special registers and the barrier as calls to `emu_*` functions."""
    text = re.sub(r"^target (triple|datalayout) = .*$", "", text, flags=re.M)
    text = text.replace("ptx_kernel ", "").replace(" addrspace(3)", "")
    text = re.sub(r'@"?llvm\.nvvm\.read\.ptx\.sreg\.(\w+)\.x"?', r"@emu_\1", text)
    if re.search(r"llvm\.nvvm\.(?!barrier0)", text):
        raise ValueError("the kernel uses NVVM intrinsics the host cannot run")
    return re.sub(r'@"?llvm\.nvvm\.barrier0"?', "@emu_barrier", text)


def run(kernel, arrays: list[np.ndarray]) -> None:
    """Launch `kernel` (an emit_gpu.GpuKernel) on `arrays` (outputs, then inputs, as the
    kernel's arguments) with its recorded grid; outputs are written in place."""
    jit.target_machine()
    module = llvm.parse_assembly(host_ir(kernel.ir))
    module.verify()
    local, state = threading.local(), {}
    callbacks = {
        "emu_tid": _I32_FN(lambda: local.tid), "emu_ntid": _I32_FN(lambda: kernel.threads),
        "emu_ctaid": _I32_FN(lambda: state["block"]),
        "emu_nctaid": _I32_FN(lambda: kernel.blocks),
        "emu_barrier": _VOID_FN(lambda: state["barrier"].wait() and None),
    }
    for name, fn in callbacks.items():
        llvm.add_symbol(name, ctypes.cast(fn, ctypes.c_void_p).value)
    machine = llvm.Target.from_default_triple().create_target_machine(opt=2)
    engine = llvm.create_mcjit_compiler(module, machine)
    engine.finalize_object()
    entry = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * len(arrays))(
        engine.get_function_address(kernel.name))
    pointers = [a.ctypes.data for a in arrays]
    errors: list[BaseException] = []

    def thread(tid: int) -> None:
        local.tid = tid
        try:
            entry(*pointers)
        except BaseException as e:          # noqa: BLE001 - reported after the join
            errors.append(e)
    for block in range(kernel.blocks):
        state.update(block=block, barrier=threading.Barrier(kernel.threads))
        threads = [threading.Thread(target=thread, args=(t,)) for t in range(kernel.threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors
