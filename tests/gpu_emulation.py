"""Run a GPU kernel's LLVM IR on the host CPU, for tests on machines without a GPU.

The kernel's own IR (before the NVPTX backend) is compiled for the host with the thread
position registers, the block barrier and the tensor-core intrinsics replaced by calls into
Python: each block of the kernel's launch runs as `threads` Python threads (one per GPU
thread, released from the GIL while in the kernel) meeting at a `threading.Barrier` for
every `bar.sync`; shared memory (address space 3) becomes one host global, which is right
because blocks run one after another.

wmma intrinsics (`load.a/b.row.stride`, `mma.row.row`, `store.d.row.stride`,
`f2tf32.rna`) follow PTX's definition of what they compute, with a fragment layout of
this emulator's own (the hardware's is unspecified): lane l holds elements [l * E, (l + 1) *
E) of the row-major fragment, E = elements / 32, in its first registers; mma gathers the
warp's 32 lanes behind a warp barrier. So the kernels' tile layouts, pointers, strides and
conversions are executed, not the hardware's fragment layout or the NVPTX backend. Warp
butterfly shuffles (`shfl.sync.bfly.i32`) exchange values behind the same warp barrier."""
from __future__ import annotations

import ctypes
import re
import threading

import llvmlite.binding as llvm
import numpy as np

from hlo_opt.lowering import jit, libcalls

_I32_FN = ctypes.CFUNCTYPE(ctypes.c_int32)
_VOID_FN = ctypes.CFUNCTYPE(None)
_CALL_FN = ctypes.CFUNCTYPE(None, ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p)
BARRIER_S = 60           # a thread missing a barrier breaks it (an error, not a hang)


def host_ir(text: str, calls: list) -> str:
    """The kernel's IR for the host: no NVPTX triple, layout, calling convention or
    address space 3; special registers and the barrier as calls to `emu_*` functions;
    each wmma, tf32 or shuffle intrinsic as a function spilling its arguments for `emu_call`
    (its description appended to `calls`)."""
    text = re.sub(r"^target (triple|datalayout) = .*$", "", text, flags=re.M)
    text = text.replace("ptx_kernel ", "").replace(" addrspace(3)", "")
    text = re.sub(r'@"?llvm\.nvvm\.read\.ptx\.sreg\.(\w+)\.x"?', r"@emu_\1", text)
    text = re.sub(r'@"?llvm\.nvvm\.barrier0"?', "@emu_barrier", text)
    text = re.sub(r"^declare (.*) @\"llvm\.nvvm\.((?:wmma|f2tf32|shfl)[^\"]*)\"\((.*)\)$",
                  lambda m: _spilling(m[1], m[2], m[3], calls), text, flags=re.M)
    text = re.sub(r'@"llvm\.nvvm\.((?:wmma|f2tf32|shfl)[^"]*)"', r'@"emu.\1"', text)
    if "llvm.nvvm." in text or "@__nv_" in text or '@"__nv_' in text:
        raise ValueError("the kernel uses NVVM intrinsics or libdevice functions, which "
                         "the emulator does not have")
    return text + "\ndeclare void @emu_call(i32, ptr, ptr)\n"


def _spilling(ret: str, name: str, params: str, calls: list) -> str:
    """A definition of intrinsic `name` that stores each argument in an 8-byte slot, calls
    emu_call(its number, arguments, results) and returns the result slots."""
    types = re.findall(r'([^,]+?) %"\.\d+"', params)
    fields = re.findall(r"<[^>]*>|[\w]+", ret.strip("{}")) if ret != "void" else []
    calls.append((name, types, fields))
    lines = [f'define {ret} @"emu.{name}"(' + ", ".join(
        f"{t.strip()} %a{i}" for i, t in enumerate(types)) + ") {",
        f"  %args = alloca [{len(types)} x i64]", "  %res = alloca [8 x i64]"]
    for i, t in enumerate(types):
        lines += [f"  %s{i} = getelementptr i64, ptr %args, i32 {i}",
                  f"  store {t.strip()} %a{i}, ptr %s{i}"]
    lines.append(f"  call void @emu_call(i32 {len(calls) - 1}, ptr %args, ptr %res)")
    value = "undef"
    for i, f in enumerate(fields):
        lines += [f"  %r{i}p = getelementptr i64, ptr %res, i32 {i}",
                  f"  %r{i} = load {f}, ptr %r{i}p"]
        if ret.startswith("{"):
            lines.append(f"  %v{i} = insertvalue {ret} {value}, {f} %r{i}, {i}")
            value = f"%v{i}"
        else:
            value = f"%r{i}"
    lines += [f"  ret {ret} {value}" if fields else "  ret void", "}"]
    return "\n".join(lines)


# fragment element type -> (bytes per element, decode raw bytes to float32)
_ELEMENTS = {
    "f16": (2, lambda raw: np.frombuffer(raw, np.float16).astype(np.float32)),
    "bf16": (2, lambda raw: (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16)
             .view(np.float32)),
    "tf32": (4, lambda raw: np.frombuffer(raw, np.float32)),
    "f32": (4, lambda raw: np.frombuffer(raw, np.float32)),
}


class _Warps:
    """What the wmma intrinsics of one block compute, per calling thread."""

    def __init__(self, threads: int, local):
        self.local = local
        self.barriers = [threading.Barrier(32, timeout=BARRIER_S) for _ in range(threads // 32)]
        self.deposits: dict = {}

    def call(self, calls, number, args, res) -> None:
        name, types, fields = calls[number]
        slot = lambda p, i, n: ctypes.string_at(p + 8 * i, n)          # noqa: E731
        raw = [slot(args, i, 8 if t == "ptr" else 4) for i, t in enumerate(types)]
        if name == "f2tf32.rna":
            bits = int.from_bytes(raw[0], "little")
            out = [((bits + 0x1000) & 0xFFFFE000).to_bytes(4, "little")]
        elif name == "shfl.sync.bfly.i32":
            out = [self._exchange(raw[1], int.from_bytes(raw[2], "little"))]
        else:
            parts = name.split(".")          # wmma.m16n16k16.load.a.row.stride.f16.p3
            k = int(parts[1].split("k")[1])
            out = getattr(self, "_" + parts[2])(parts, k, raw)
        for i, b in enumerate(out or []):
            ctypes.memmove(res + 8 * i, b, len(b))

    def _exchange(self, value: bytes, offset: int) -> bytes:
        """shfl.sync.bfly: the value of the lane whose number differs by xor `offset`."""
        tid = self.local.tid
        self.deposits[tid] = value
        self.barriers[tid // 32].wait()
        other = self.deposits[(tid & ~31) | ((tid % 32) ^ offset)]
        self.barriers[tid // 32].wait()
        return other

    def _lane_elements(self, rows: int, cols: int):
        per = rows * cols // 32
        lane = self.local.tid % 32
        return [divmod(e, cols) for e in range(lane * per, (lane + 1) * per)]

    def _load(self, parts, k, raw):
        which, kind = parts[3], parts[6]
        rows, cols = (16, k) if which == "a" else (k, 16)
        size, _ = _ELEMENTS[kind]
        base, ld = int.from_bytes(raw[0], "little"), int.from_bytes(raw[1], "little")
        data = b"".join(ctypes.string_at(base + (r * ld + c) * size, size)
                        for r, c in self._lane_elements(rows, cols))
        registers = 8 if kind == "f16" else 4
        data = data.ljust(4 * registers, b"\0")
        return [data[4 * i:4 * i + 4] for i in range(registers)]

    def _store(self, parts, k, raw):
        base, ld = int.from_bytes(raw[0], "little"), int.from_bytes(raw[-1], "little")
        for (r, c), value in zip(self._lane_elements(16, 16), raw[1:9]):
            ctypes.memmove(base + (r * ld + c) * 4, value, 4)

    def _mma(self, parts, k, raw):
        kind = {"f32": "f16"}.get(parts[5], parts[5])       # mma.row.row.f32.f32 is f16's
        n = 8 if kind == "f16" else 4
        size, decode = _ELEMENTS[kind]
        tid = self.local.tid
        warp, lane = tid // 32, tid % 32
        self.deposits[tid] = (b"".join(raw[:n]), b"".join(raw[n:2 * n]),
                              np.frombuffer(b"".join(raw[2 * n:]), np.float32))
        self.barriers[warp].wait()
        lanes = [self.deposits[warp * 32 + i] for i in range(32)]
        a_per, b_per = 16 * k // 32, k * 16 // 32
        a = np.concatenate([decode(x[0][:a_per * size]) for x in lanes]).reshape(16, k)
        b = np.concatenate([decode(x[1][:b_per * size]) for x in lanes]).reshape(k, 16)
        c = np.concatenate([x[2] for x in lanes]).reshape(16, 16)
        d = (a.astype(np.float64) @ b + c).astype(np.float32).reshape(-1)
        self.barriers[warp].wait()             # every lane has read the deposits
        return [d[lane * 8 + i].tobytes() for i in range(8)]


def run(kernel, arrays: list[np.ndarray]) -> None:
    """Launch `kernel` (an emit_gpu.GpuKernel) on `arrays` (outputs, then inputs, as the
    kernel's arguments) with its recorded grid; outputs are written in place."""
    jit.target_machine()
    calls: list = []
    machine = llvm.Target.from_default_triple().create_target_machine(opt=2)
    module = llvm.parse_assembly(host_ir(kernel.ir, calls))
    module.link_in(llvm.parse_assembly(libcalls.soft_float_module(     # f16 <-> f32 helpers
        llvm.get_process_triple(), str(machine.target_data))))
    module.verify()
    local, state = threading.local(), {}
    errors: list[BaseException] = []

    def reported(fn):
        """ctypes drops a (void) callback's exception: keep it for the end of the run."""
        def call(*args) -> None:
            try:
                fn(*args)
            except BaseException as e:      # noqa: BLE001 - reported after the join
                errors.append(e)
        return call
    callbacks = {
        "emu_tid": _I32_FN(lambda: local.tid), "emu_ntid": _I32_FN(lambda: kernel.threads),
        "emu_ctaid": _I32_FN(lambda: state["block"]),
        "emu_nctaid": _I32_FN(lambda: kernel.blocks),
        "emu_barrier": _VOID_FN(reported(lambda: state["barrier"].wait() and None)),
        "emu_call": _CALL_FN(reported(lambda number, args, res: state["warps"].call(
            calls, number, args, res))),
    }
    for name, fn in callbacks.items():
        llvm.add_symbol(name, ctypes.cast(fn, ctypes.c_void_p).value)
    engine = llvm.create_mcjit_compiler(module, machine)
    engine.finalize_object()
    entry = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * len(arrays))(
        engine.get_function_address(kernel.name))
    pointers = [a.ctypes.data for a in arrays]

    def thread(tid: int) -> None:
        local.tid = tid
        entry(*pointers)
    for block in range(kernel.blocks):
        state.update(block=block, barrier=threading.Barrier(kernel.threads, timeout=BARRIER_S),
                     warps=_Warps(kernel.threads, local))
        threads = [threading.Thread(target=thread, args=(t,)) for t in range(kernel.threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors
