"""A simulated GPU for tests on machines without one: GPU kernels' own LLVM IR run on the host.

A kernel's NVPTX IR (emit_gpu.GpuKernel.ir, before the NVPTX backend) is rewritten for the
host CPU and compiled by the project's JIT: the NVPTX triple, data layout, `ptx_kernel`
calling convention and address space 3 are dropped, and every NVVM intrinsic it declares
is replaced by a host definition from `INTRINSICS` (an intrinsic not in that table is a
`SimulationError`, so a new one cannot be silently mis-simulated):

* special registers (`tid`, `ctaid`, `ntid`, `nctaid` in x/y/z, `laneid`, `warpsize`) read
  the calling host thread's context (pthread_getspecific: MCJIT has no thread-local
  storage; or the running fiber's), launches being 1-D as the host program makes them;
* `barrier0` is a native barrier on host atomics over the block's threads (a generation
  counter; waiting threads sleep on a futex, or yield the CPU where there is none; one not
  every thread reaches is a SimulationError after BARRIER_SECONDS, not a hang);
  `bar.warp.sync` the same over a warp's lanes;
* `shfl.sync.{bfly,up,down,idx}.{i32,f32}`: each lane writes its value into its slot,
  the warp meets at its barrier, each lane reads its source lane's slot (PTX's lane, clamp
  and segment arithmetic), and the warp meets again before the slots are reused;
* tensor cores, every wmma form emit_gpu_dot emits (`load.a/b.row.stride`, `mma.row.row`,
  `store.d.row.stride`: m16n16k16 f16 and bf16, m16n16k8 tf32), follow PTX's definition of
  what they compute, with a fragment layout of this simulator's own (the hardware's is
  unspecified): lane l holds elements [l * E, (l + 1) * E) of the row-major fragment, E =
  elements / 32, in its first registers; mma has each lane put its elements in its row of
  `sim.fragments`, the warp meets at its barrier (a yield point for fibers, as a shuffle's),
  each lane computes its 8 elements of D = A B + C (products exact, summed in double,
  rounded once to f32) and the warp meets again; `f2tf32.rna` rounds to tf32's 10
  mantissa bits, ties away from zero. So tile layouts, pointers, strides and conversions
  are executed, not the hardware's fragment layout;
* `membar.{cta,gl,sys}` are host fences; atomics are the host's own;
* libdevice's `__nv_NAME` functions are the C library's `NAME` (the runtime's libm).

Shared memory (address space 3) becomes one host global per shared array: the blocks of a
launch run one after the other (every thread meets at an end-of-block barrier before the
next block), so one copy is all a block ever sees, as on a GPU. A kernel that meets at a
barrier or shuffles runs its block's threads as that many fibers (glibc's ucontext) in the
calling host thread: a fiber waiting at a barrier switches to the next, and a scheduler
resumes the unfinished ones in turn (about 0.5 us a switch, against several for waking
an OS thread; without ucontext, or when a test asks for `concurrent` threads, they are
pthreads). Any other kernel (whose threads cannot wait for each other) runs every (block,
thread) in order in one host call, one of the interleavings a GPU may execute, unless a
test asks for concurrent threads (atomics under contention).

`SimulatedDevice` has the methods of lowering/cuda_device.CudaDevice, device memory being
host memory; gpu_runtime.GpuExecutable hands it the GpuKernels (its `load_kernels`) rather
than PTX, and each launch runs through the simulator. What this cannot check: timing, the
GPU's memory model (the host's is stronger), the NVPTX backend and ptxas (test_gpu_ptx.py
does), libdevice's own rounding (the host libm's is used), the hardware's wmma fragment
layout and accumulation order, and intrinsics not in the table (mma.sync, vote).
"""
from __future__ import annotations

import ctypes
import platform
import re
import sys
import threading
import time

import numpy as np
from llvmlite import binding, ir

from hlo_opt.lowering import jit, libcalls
from hlo_opt.lowering.emit_gpu import GpuKernel
from hlo_opt.lowering.emit_gpu_dot import ACC_FRAGMENT, TENSOR_CORES
from hlo_opt.lowering.nvptx import LIBDEVICE_PREFIX

WARP = 32
CONTEXT_BYTES = 8192               # one ucontext_t (968 bytes on x86-64, 4560 on arm64)
FIBER_STACK_BYTES = 256 * 1024
MAX_THREADS = 1024                 # a block's threads at most (CUDA's limit)
BARRIER_SECONDS = 60               # a thread waiting this long at one barrier: a hang
NAP_NS = 10_000_000                # a futex wait's timeout
YIELDS = 1 << 25                   # sched_yield calls taken for BARRIER_SECONDS
FUTEX = {"x86_64": 202, "aarch64": 98}.get(platform.machine()) if \
    sys.platform.startswith("linux") else None      # SYS_futex, where there is one


class SimulationError(RuntimeError):
    """The kernel uses what the simulator does not model, or a launch went wrong."""


# ------------------------------------------------------------------ intrinsic table

def _registers() -> dict[str, str]:
    """Special register -> the body of its host definition (x from the thread's context:
    fields tid, ctaid, ntid, nctaid; y and z of a 1-D launch)."""
    table = {}
    for field, register in enumerate(("tid", "ctaid", "ntid", "nctaid")):
        table[f"{register}.x"] = f'%v = call i32 @"sim.context"(i32 {field})\n  ret i32 %v'
        for axis in "yz":
            table[f"{register}.{axis}"] = f"ret i32 {int(register.startswith('n'))}"
    table["laneid"] = '%t = call i32 @"sim.context"(i32 0)\n  %v = and i32 %t, 31\n  ret i32 %v'
    table["warpsize"] = f"ret i32 {WARP}"
    return {f"llvm.nvvm.read.ptx.sreg.{r}": body for r, body in table.items()}


SHUFFLE_MODES = {"up": 0, "down": 1, "bfly": 2, "idx": 3}


def _shuffles() -> dict[str, str]:
    """shfl.sync.MODE.TYPE(mask, value, b, c) -> sim.shuffle on the value's bits."""
    table = {}
    for mode, number in SHUFFLE_MODES.items():
        table[f"llvm.nvvm.shfl.sync.{mode}.i32"] = (
            f'%v = call i32 @"sim.shuffle"(i32 {number}, i32 %a0, i32 %a1, i32 %a2, i32 %a3)\n'
            "  ret i32 %v")
        table[f"llvm.nvvm.shfl.sync.{mode}.f32"] = (
            "%x = bitcast float %a1 to i32\n"
            f'  %v = call i32 @"sim.shuffle"(i32 {number}, i32 %a0, i32 %x, i32 %a2, i32 %a3)\n'
            "  %f = bitcast i32 %v to float\n  ret float %f")
    return table


# wmma operand type -> (bytes of an element, IR making float {f} of its bits {x})
FRAGMENT_ELEMENTS = {
    "f16": (2, "{f}.h = bitcast i16 {x} to half\n  {f} = fpext half {f}.h to float"),
    "bf16": (2, "{f}.w = zext i16 {x} to i32\n  {f}.s = shl i32 {f}.w, 16\n"
                "  {f} = bitcast i32 {f}.s to float"),
    "tf32": (4, "{f} = bitcast i32 {x} to float"),
}
REGISTER_BYTES = 32                # an A or B fragment's registers per lane, at most


def _wmma() -> dict[str, str]:
    """Every wmma form emit_gpu_dot emits (its TENSOR_CORES): row-major loads of A (16 x k)
    and B (k x 16) into this simulator's fragment layout, the warp's D = A B + C (sim.mma)
    and the row-major store of D (both copies: sim.fragment_copy)."""
    table = {}
    acc = str(ir.LiteralStructType([ir.FloatType()] * ACC_FRAGMENT))
    for core in TENSOR_CORES.values():
        size, decode = FRAGMENT_ELEMENTS[core.operand]
        bits = f"i{8 * size}"
        regs = str(ir.LiteralStructType([core.part] * core.parts))
        part_bytes = core.part.get_abi_size(jit.target_machine().target_data)
        assert part_bytes * core.parts <= REGISTER_BYTES
        per = 16 * core.k // WARP                          # elements of A (or B) per lane
        prefix = f"llvm.nvvm.wmma.{core.shape}"
        for which, (rows, cols) in (("a", (16, core.k)), ("b", (core.k, 16))):
            table[f"{prefix}.load.{which}.row.stride.{core.operand}.p3"] = (
                f"%buf = alloca [{REGISTER_BYTES} x i8], align 16\n"
                f"  store [{REGISTER_BYTES} x i8] zeroinitializer, ptr %buf\n"
                f'  call void @"sim.fragment_copy"(ptr %a0, i32 %a1, i32 {rows}, i32 {cols}, '
                f"i32 {size}, ptr %buf, i1 false)\n"
                f"  %v = load {regs}, ptr %buf\n  ret {regs} %v")
        lines = [f"%regs = alloca [2 x [{REGISTER_BYTES} x i8]], align 16",
                 '%tid = call i32 @"sim.context"(i32 0)',
                 '%slot = getelementptr [24 x float], ptr @"sim.fragments", i32 %tid']
        for operand in (0, 1):                   # A's registers, then B's
            for i in range(core.parts):
                at = operand * REGISTER_BYTES + i * part_bytes
                lines += [f"%r{operand}.{i} = getelementptr i8, ptr %regs, i32 {at}",
                          f"store {core.part} %a{operand * core.parts + i}, ptr %r{operand}.{i}"]
            for j in range(per):
                x, f = f"%x{operand}.{j}", f"%f{operand}.{j}"
                lines += [f"{x}.p = getelementptr i8, ptr %regs, i32 "
                          f"{operand * REGISTER_BYTES + j * size}",
                          f"{x} = load {bits}, ptr {x}.p", decode.format(x=x, f=f),
                          f"{f}.at = getelementptr float, ptr %slot, i32 {8 * operand + j}",
                          f"store float {f}, ptr {f}.at"]
        for j in range(ACC_FRAGMENT):
            lines += [f"%c{j} = getelementptr float, ptr %slot, i32 {16 + j}",
                      f"store float %a{2 * core.parts + j}, ptr %c{j}"]
        lines += ["%d = alloca [8 x float]", f'call void @"sim.mma"(i32 {core.k}, ptr %d)',
                  f"%v = load {acc}, ptr %d", f"ret {acc} %v"]
        table[f"{prefix}.mma.row.row.{core.mma}"] = "\n  ".join(lines)
        table[f"{prefix}.store.d.row.stride.f32.p3"] = "\n  ".join(
            ["%d = alloca [8 x float]"]
            + [f"%d{j} = getelementptr float, ptr %d, i32 {j}\n  store float %a{1 + j}, ptr %d{j}"
               for j in range(ACC_FRAGMENT)]
            + [f'call void @"sim.fragment_copy"(ptr %a0, i32 %a{1 + ACC_FRAGMENT}, i32 16, '
               "i32 16, i32 4, ptr %d, i1 true)",
               "ret void"])
    return table


# cvt.rna.tf32.f32: the magnitude rounded to 10 mantissa bits, ties away from zero (adding
# half an ulp of tf32 to the magnitude bits carries into the exponent as rounding does);
# a NaN stays a (quiet) NaN
F2TF32_RNA = """%bits = bitcast float %a0 to i32
  %mag = and i32 %bits, 2147483647
  %nan = icmp ugt i32 %mag, 2139095040
  %quiet = or i32 %bits, 4194304
  %up = add i32 %bits, 4096
  %pick = select i1 %nan, i32 %quiet, i32 %up
  %v = and i32 %pick, -8192
  ret i32 %v"""

# NVVM intrinsic -> body of its host definition (arguments %a0, %a1, ...)
INTRINSICS: dict[str, str] = {
    **_registers(),
    **_shuffles(),
    **_wmma(),
    "llvm.nvvm.f2tf32.rna": F2TF32_RNA,
    "llvm.nvvm.barrier0": 'call void @"sim.block_barrier"()\n  ret void',
    "llvm.nvvm.bar.warp.sync": 'call void @"sim.warp_barrier"(i32 %a0)\n  ret void',
    **{f"llvm.nvvm.membar.{scope}": "fence seq_cst\n  ret void" for scope in ("cta", "gl", "sys")},
}
# what makes a kernel's threads wait for each other (they must then run concurrently)
WAITING = ("llvm.nvvm.barrier0", "llvm.nvvm.bar.warp.sync", "llvm.nvvm.shfl.",
           "llvm.nvvm.wmma.")

# The host half of every simulated kernel: the thread context, barriers, shuffles, and the
# entry a host thread calls. {n} is the block's thread limit, {futex} SYS_futex.
RUNTIME = r"""
@"sim.key" = internal global i32 0
@"sim.getspecific" = internal global ptr null
@"sim.setspecific" = internal global ptr null
@"sim.yield" = internal global ptr null
@"sim.futex" = internal global ptr null
@"sim.create" = internal global ptr null
@"sim.getcontext" = internal global ptr null
@"sim.makecontext" = internal global ptr null
@"sim.swapcontext" = internal global ptr null
@"sim.fiber_mode" = internal global i32 0
@"sim.current" = internal global i32 0
@"sim.fiber_ctx" = internal global [{n} x ptr] zeroinitializer
@"sim.contexts" = internal global ptr null
@"sim.scheduler" = internal global [{ctx_bytes} x i8] zeroinitializer, align 16
@"sim.finished" = internal global [{n} x i32] zeroinitializer
@"sim.fiber_launch" = internal global {{ i32, i32, ptr }} zeroinitializer
@"sim.join" = internal global ptr null
@"sim.tries" = internal global i64 0
@"sim.nap" = internal global {{i64, i64}} {{i64 0, i64 {nap_ns}}}
@"sim.failed" = internal global i32 0
@"sim.block_bar" = internal global [2 x i32] zeroinitializer
@"sim.end_bar" = internal global [2 x i32] zeroinitializer
@"sim.warp_bars" = internal global [{warps} x [2 x i32]] zeroinitializer
@"sim.slots" = internal global [{n} x i32] zeroinitializer
@"sim.fragments" = internal global [{n} x [24 x float]] zeroinitializer

define internal i32 @"sim.context"(i32 %field) {{
entry:
  %fibers = load i32, ptr @"sim.fiber_mode"
  %in_fiber = icmp ne i32 %fibers, 0
  br i1 %in_fiber, label %fiber, label %thread
fiber:
  %current = load i32, ptr @"sim.current"
  %slot = getelementptr [{n} x ptr], ptr @"sim.fiber_ctx", i32 0, i32 %current
  %fiber_ctx = load ptr, ptr %slot
  br label %read
thread:
  %get = load ptr, ptr @"sim.getspecific"
  %key = load i32, ptr @"sim.key"
  %thread_ctx = call ptr %get(i32 %key)
  br label %read
read:
  %ctx = phi ptr [%fiber_ctx, %fiber], [%thread_ctx, %thread]
  %p = getelementptr i32, ptr %ctx, i32 %field
  %v = load i32, ptr %p
  ret i32 %v
}}

; the last of `n` threads to arrive starts the next generation and wakes the others,
; which sleep on the generation word (a futex where the host has one, else they yield),
; giving up after {{tries}} naps, which flags the launch as hung
define internal void @"sim.wait"(ptr %bar, i32 %n) {{
entry:
  %genp = getelementptr i32, ptr %bar, i32 1
  %gen = load atomic i32, ptr %genp acquire, align 4
  %old = atomicrmw add ptr %bar, i32 1 acq_rel
  %n1 = sub i32 %n, 1
  %last = icmp eq i32 %old, %n1
  %futex = load ptr, ptr @"sim.futex"
  %has_futex = icmp ne ptr %futex, null
  br i1 %last, label %release, label %spin
release:
  store atomic i32 0, ptr %bar monotonic, align 4
  %x = atomicrmw add ptr %genp, i32 1 release
  br i1 %has_futex, label %wake, label %done
wake:
  %w = call i64 (i64, ...) %futex(i64 {futex}, ptr %genp, i64 129, i64 2147483647)
  ret void
spin:
  %tries = phi i64 [0, %entry], [%next, %napped]
  %now = load atomic i32, ptr %genp acquire, align 4
  %moved = icmp ne i32 %now, %gen
  %failed = load atomic i32, ptr @"sim.failed" monotonic, align 4
  %gave_up = icmp ne i32 %failed, 0
  %out = or i1 %moved, %gave_up
  br i1 %out, label %done, label %nap
nap:
  %fiber_mode = load i32, ptr @"sim.fiber_mode"
  %in_fiber = icmp ne i32 %fiber_mode, 0
  br i1 %in_fiber, label %switch, label %os_thread
switch:
  %current = load i32, ptr @"sim.current"
  %contexts = load ptr, ptr @"sim.contexts"
  %at = mul i32 %current, {ctx_bytes}
  %mine = getelementptr i8, ptr %contexts, i32 %at
  %swap = load ptr, ptr @"sim.swapcontext"
  %sw = call i32 %swap(ptr %mine, ptr @"sim.scheduler")
  br label %napped
os_thread:
  br i1 %has_futex, label %sleep, label %yield
sleep:
  %gen64 = zext i32 %gen to i64
  %s = call i64 (i64, ...) %futex(i64 {futex}, ptr %genp, i64 128, i64 %gen64, ptr @"sim.nap")
  br label %napped
yield:
  %f = load ptr, ptr @"sim.yield"
  %y = call i32 %f()
  br label %napped
napped:
  %next = add i64 %tries, 1
  %limit = load i64, ptr @"sim.tries"
  %late = icmp ugt i64 %next, %limit
  br i1 %late, label %hung, label %spin
hung:
  store atomic i32 1, ptr @"sim.failed" monotonic, align 4
  ret void
done:
  ret void
}}

define internal void @"sim.block_barrier"() {{
  %ntid = call i32 @"sim.context"(i32 2)
  call void @"sim.wait"(ptr @"sim.block_bar", i32 %ntid)
  ret void
}}

; the lanes of `mask` that exist in the calling thread's warp meet
define internal void @"sim.warp_barrier"(i32 %mask) {{
  %tid = call i32 @"sim.context"(i32 0)
  %ntid = call i32 @"sim.context"(i32 2)
  %warp = udiv i32 %tid, 32
  %first = mul i32 %warp, 32
  %left = sub i32 %ntid, %first
  %full = icmp uge i32 %left, 32
  %low = shl i32 1, %left
  %some = sub i32 %low, 1
  %lanes = select i1 %full, i32 -1, i32 %some
  %members = and i32 %mask, %lanes
  %n = call i32 @llvm.ctpop.i32(i32 %members)
  %bar = getelementptr [2 x i32], ptr @"sim.warp_bars", i32 %warp
  call void @"sim.wait"(ptr %bar, i32 %n)
  ret void
}}

; PTX's shfl.sync: source lane j from the mode, the lane offset/index b and the clamp and
; segment mask packed in c; a source outside [minLane, maxLane] reads the lane's own value
define internal i32 @"sim.shuffle"(i32 %mode, i32 %mask, i32 %v, i32 %b, i32 %c) {{
entry:
  %tid = call i32 @"sim.context"(i32 0)
  %slot = getelementptr i32, ptr @"sim.slots", i32 %tid
  store i32 %v, ptr %slot
  call void @"sim.warp_barrier"(i32 %mask)
  %lane = and i32 %tid, 31
  %base = sub i32 %tid, %lane
  %bval = and i32 %b, 31
  %cval = and i32 %c, 31
  %cs = lshr i32 %c, 8
  %seg = and i32 %cs, 31
  %notseg = xor i32 %seg, 31
  %minlane = and i32 %lane, %seg
  %cpart = and i32 %cval, %notseg
  %maxlane = or i32 %minlane, %cpart
  %up = sub i32 %lane, %bval
  %down = add i32 %lane, %bval
  %bfly = xor i32 %lane, %bval
  %bpart = and i32 %bval, %notseg
  %idx = or i32 %minlane, %bpart
  %is_up = icmp eq i32 %mode, 0
  %is_down = icmp eq i32 %mode, 1
  %is_bfly = icmp eq i32 %mode, 2
  %j1 = select i1 %is_bfly, i32 %bfly, i32 %idx
  %j2 = select i1 %is_down, i32 %down, i32 %j1
  %j = select i1 %is_up, i32 %up, i32 %j2
  %above = icmp sge i32 %j, %maxlane
  %below = icmp sle i32 %j, %maxlane
  %ok = select i1 %is_up, i1 %above, i1 %below
  %src = select i1 %ok, i32 %j, i32 %lane
  %at = add i32 %base, %src
  %from = getelementptr i32, ptr @"sim.slots", i32 %at
  %r = load i32, ptr %from
  call void @"sim.warp_barrier"(i32 %mask)
  ret i32 %r
}}

; wmma's fragments in this simulator's layout (the hardware's is its own): lane l holds
; elements [l * per, (l + 1) * per) of the row-major fragment, per = elements / 32. The
; lane's elements of the rows x cols fragment at %base (leading dimension %ld, elements of
; %size bytes) copied to %lane_buf one after another (a load), or back (%to_memory: a store)
define internal void @"sim.fragment_copy"(ptr %base, i32 %ld, i32 %rows, i32 %cols,
                                          i32 %size, ptr %lane_buf, i1 %to_memory) {{
entry:
  %tid = call i32 @"sim.context"(i32 0)
  %lane = and i32 %tid, 31
  %count = mul i32 %rows, %cols
  %per = udiv i32 %count, 32
  %first = mul i32 %lane, %per
  %wide = icmp eq i32 %size, 4
  br label %element
element:
  %i = phi i32 [0, %entry], [%i.next, %copied]
  %e = add i32 %first, %i
  %r = udiv i32 %e, %cols
  %c = urem i32 %e, %cols
  %row_at = mul i32 %r, %ld
  %at = add i32 %row_at, %c
  %offset = mul i32 %at, %size
  %in_memory = getelementptr i8, ptr %base, i32 %offset
  %buf_at = mul i32 %i, %size
  %in_buf = getelementptr i8, ptr %lane_buf, i32 %buf_at
  %src = select i1 %to_memory, ptr %in_buf, ptr %in_memory
  %dst = select i1 %to_memory, ptr %in_memory, ptr %in_buf
  br i1 %wide, label %four, label %two
four:
  %x4 = load i32, ptr %src, align 1
  store i32 %x4, ptr %dst, align 1
  br label %copied
two:
  %x2 = load i16, ptr %src, align 1
  store i16 %x2, ptr %dst, align 1
  br label %copied
copied:
  %i.next = add i32 %i, 1
  %more = icmp ult i32 %i.next, %per
  br i1 %more, label %element, label %done
done:
  ret void
}}

; the warp's D = A B + C (A 16 x k, B k x 16): each lane has put its elements of A, B and
; C as floats (exact for f16, bf16 and tf32) in its sim.fragments row (A at 0, B at 8, C at
; 16); the warp meets, each lane computes its 8 elements of D (products and sums in
; double, rounded once to f32) into %d, and the warp meets again before the rows are reused
define internal void @"sim.mma"(i32 %k, ptr %d) {{
entry:
  %tid = call i32 @"sim.context"(i32 0)
  %lane = and i32 %tid, 31
  %base = sub i32 %tid, %lane
  %per = udiv i32 %k, 2
  call void @"sim.warp_barrier"(i32 -1)
  %first = mul i32 %lane, 8
  br label %element
element:
  %i = phi i32 [0, %entry], [%i.next, %summed]
  %e = add i32 %first, %i
  %row = udiv i32 %e, 16
  %col = urem i32 %e, 16
  %c_at = add i32 16, %i
  %c_p = getelementptr [24 x float], ptr @"sim.fragments", i32 %tid, i32 %c_at
  %c = load float, ptr %c_p
  %c64 = fpext float %c to double
  %row_k = mul i32 %row, %k
  br label %product
product:
  %kk = phi i32 [0, %element], [%kk.next, %product]
  %sum = phi double [%c64, %element], [%sum.next, %product]
  %fa = add i32 %row_k, %kk
  %a_lane = udiv i32 %fa, %per
  %a_slot = urem i32 %fa, %per
  %a_tid = add i32 %base, %a_lane
  %a_p = getelementptr [24 x float], ptr @"sim.fragments", i32 %a_tid, i32 %a_slot
  %a = load float, ptr %a_p
  %kk16 = mul i32 %kk, 16
  %fb = add i32 %kk16, %col
  %b_lane = udiv i32 %fb, %per
  %b_rem = urem i32 %fb, %per
  %b_slot = add i32 %b_rem, 8
  %b_tid = add i32 %base, %b_lane
  %b_p = getelementptr [24 x float], ptr @"sim.fragments", i32 %b_tid, i32 %b_slot
  %b = load float, ptr %b_p
  %a64 = fpext float %a to double
  %b64 = fpext float %b to double
  %ab = fmul double %a64, %b64
  %sum.next = fadd double %sum, %ab
  %kk.next = add i32 %kk, 1
  %more_k = icmp ult i32 %kk.next, %k
  br i1 %more_k, label %product, label %summed
summed:
  %r = fptrunc double %sum.next to float
  %d_p = getelementptr float, ptr %d, i32 %i
  store float %r, ptr %d_p
  %i.next = add i32 %i, 1
  %more = icmp ult i32 %i.next, 8
  br i1 %more, label %element, label %done
done:
  call void @"sim.warp_barrier"(i32 -1)
  ret void
}}

define void @"{prefix}.init"(i32 %key, ptr %get, ptr %set, ptr %yield, ptr %create,
                             ptr %join, ptr %getcontext, ptr %makecontext,
                             ptr %swapcontext, ptr %futex, i64 %tries) {{
  store i32 %key, ptr @"sim.key"
  store ptr %getcontext, ptr @"sim.getcontext"
  store ptr %makecontext, ptr @"sim.makecontext"
  store ptr %swapcontext, ptr @"sim.swapcontext"
  store ptr %create, ptr @"sim.create"
  store ptr %join, ptr @"sim.join"
  store ptr %futex, ptr @"sim.futex"
  store i64 %tries, ptr @"sim.tries"
  store ptr %get, ptr @"sim.getspecific"
  store ptr %set, ptr @"sim.setspecific"
  store ptr %yield, ptr @"sim.yield"
  ret void
}}

define i32 @"{prefix}.failed"() {{
  %v = atomicrmw xchg ptr @"sim.failed", i32 0 acq_rel
  ret i32 %v
}}

; threads [tid, tid_end) of every block in turn; with %together the caller is one of ntid
; threads (fibers or pthreads), which meet after each block
define void @"{prefix}.run"(i32 %tid, i32 %tid_end, i32 %ntid, i32 %nctaid, i32 %together,
                            ptr %argv) {{
entry:
  %ctx = alloca [4 x i32]
  %ctx_ctaid = getelementptr i32, ptr %ctx, i32 1
  %ctx_ntid = getelementptr i32, ptr %ctx, i32 2
  %ctx_nctaid = getelementptr i32, ptr %ctx, i32 3
  store i32 %ntid, ptr %ctx_ntid
  store i32 %nctaid, ptr %ctx_nctaid
  %set = load ptr, ptr @"sim.setspecific"
  %key = load i32, ptr @"sim.key"
  %r = call i32 %set(i32 %key, ptr %ctx)
  %fiber_slot = getelementptr [{n} x ptr], ptr @"sim.fiber_ctx", i32 0, i32 %tid
  store ptr %ctx, ptr %fiber_slot
{args}
  br label %block
block:
  %ctaid = phi i32 [0, %entry], [%ctaid.next, %next]
  store i32 %ctaid, ptr %ctx_ctaid
  br label %thread
thread:
  %t = phi i32 [%tid, %block], [%t.next, %thread]
  store i32 %t, ptr %ctx
  call void @"{kernel}"({params})
  %t.next = add i32 %t, 1
  %more = icmp ult i32 %t.next, %tid_end
  br i1 %more, label %thread, label %block.end
block.end:
  %meet = icmp ne i32 %together, 0
  br i1 %meet, label %wait, label %next
wait:
  call void @"sim.wait"(ptr @"sim.end_bar", i32 %ntid)
  br label %next
next:
  %ctaid.next = add i32 %ctaid, 1
  %blocks_left = icmp ult i32 %ctaid.next, %nctaid
  br i1 %blocks_left, label %block, label %done
done:
  ret void
}}

; a block's threads as ntid host threads (pthreads), each running every block
%"sim.start" = type {{ i32, i32, i32, ptr }}
define internal ptr @"sim.thread"(ptr %start) {{
  %tidp = getelementptr %"sim.start", ptr %start, i32 0, i32 0
  %tid = load i32, ptr %tidp
  %ntidp = getelementptr %"sim.start", ptr %start, i32 0, i32 1
  %ntid = load i32, ptr %ntidp
  %nctaidp = getelementptr %"sim.start", ptr %start, i32 0, i32 2
  %nctaid = load i32, ptr %nctaidp
  %argvp = getelementptr %"sim.start", ptr %start, i32 0, i32 3
  %argv = load ptr, ptr %argvp
  %end = add i32 %tid, 1
  call void @"{prefix}.run"(i32 %tid, i32 %end, i32 %ntid, i32 %nctaid, i32 1, ptr %argv)
  ret ptr null
}}

define void @"{prefix}.launch"(i32 %ntid, i32 %nctaid, ptr %argv) {{
entry:
  %starts = alloca %"sim.start", i32 %ntid
  %handles = alloca i64, i32 %ntid
  %create = load ptr, ptr @"sim.create"
  %join = load ptr, ptr @"sim.join"
  br label %spawn
spawn:
  %t = phi i32 [0, %entry], [%t.next, %spawned]
  %start = getelementptr %"sim.start", ptr %starts, i32 %t
  %s0 = getelementptr %"sim.start", ptr %start, i32 0, i32 0
  store i32 %t, ptr %s0
  %s1 = getelementptr %"sim.start", ptr %start, i32 0, i32 1
  store i32 %ntid, ptr %s1
  %s2 = getelementptr %"sim.start", ptr %start, i32 0, i32 2
  store i32 %nctaid, ptr %s2
  %s3 = getelementptr %"sim.start", ptr %start, i32 0, i32 3
  store ptr %argv, ptr %s3
  %handle = getelementptr i64, ptr %handles, i32 %t
  store i64 0, ptr %handle
  %rc = call i32 %create(ptr %handle, ptr null, ptr @"sim.thread", ptr %start)
  %ok = icmp eq i32 %rc, 0
  br i1 %ok, label %spawned, label %no_thread
no_thread:
  store i64 0, ptr %handle
  store atomic i32 2, ptr @"sim.failed" monotonic, align 4
  br label %spawned
spawned:
  %t.next = add i32 %t, 1
  %more = icmp ult i32 %t.next, %ntid
  br i1 %more, label %spawn, label %joining
joining:
  %u = phi i32 [0, %spawned], [%u.next, %joined]
  %hp = getelementptr i64, ptr %handles, i32 %u
  %h = load i64, ptr %hp
  %exists = icmp ne i64 %h, 0
  br i1 %exists, label %join_it, label %joined
join_it:
  %jr = call i32 %join(i64 %h, ptr null)
  br label %joined
joined:
  %u.next = add i32 %u, 1
  %left = icmp ult i32 %u.next, %ntid
  br i1 %left, label %joining, label %done
done:
  ret void
}}

; a block's threads as ntid fibers (ucontext) in the calling host thread: each runs every
; block as a pthread would; one waiting at a barrier switches back to the scheduler, which
; resumes the unfinished fibers in turn until all are done, in thread order and in reverse
; order every other round (so that a missing barrier shows whichever side it leaves
; unordered)
define internal void @"sim.fiber_entry"() {{
  %t = load i32, ptr @"sim.current"
  %ntidp = getelementptr {{ i32, i32, ptr }}, ptr @"sim.fiber_launch", i32 0, i32 0
  %ntid = load i32, ptr %ntidp
  %nctaidp = getelementptr {{ i32, i32, ptr }}, ptr @"sim.fiber_launch", i32 0, i32 1
  %nctaid = load i32, ptr %nctaidp
  %argvp = getelementptr {{ i32, i32, ptr }}, ptr @"sim.fiber_launch", i32 0, i32 2
  %argv = load ptr, ptr %argvp
  %end = add i32 %t, 1
  call void @"{prefix}.run"(i32 %t, i32 %end, i32 %ntid, i32 %nctaid, i32 1, ptr %argv)
  %me = load i32, ptr @"sim.current"
  %done = getelementptr [{n} x i32], ptr @"sim.finished", i32 0, i32 %me
  store i32 1, ptr %done
  ret void
}}

define void @"{prefix}.fibers"(i32 %ntid, i32 %nctaid, ptr %argv, ptr %contexts,
                               ptr %stacks, i64 %stack_bytes) {{
entry:
  %ntidp = getelementptr {{ i32, i32, ptr }}, ptr @"sim.fiber_launch", i32 0, i32 0
  store i32 %ntid, ptr %ntidp
  %nctaidp = getelementptr {{ i32, i32, ptr }}, ptr @"sim.fiber_launch", i32 0, i32 1
  store i32 %nctaid, ptr %nctaidp
  %argvp = getelementptr {{ i32, i32, ptr }}, ptr @"sim.fiber_launch", i32 0, i32 2
  store ptr %argv, ptr %argvp
  store ptr %contexts, ptr @"sim.contexts"
  %getcontext = load ptr, ptr @"sim.getcontext"
  %makecontext = load ptr, ptr @"sim.makecontext"
  %swap = load ptr, ptr @"sim.swapcontext"
  br label %make
make:
  %t = phi i32 [0, %entry], [%t.next, %make]
  %at = mul i32 %t, {ctx_bytes}
  %ctx = getelementptr i8, ptr %contexts, i32 %at
  %g = call i32 %getcontext(ptr %ctx)
  %link = getelementptr i8, ptr %ctx, i32 8
  store ptr @"sim.scheduler", ptr %link
  %t64 = zext i32 %t to i64
  %stack_at = mul i64 %t64, %stack_bytes
  %stack = getelementptr i8, ptr %stacks, i64 %stack_at
  %sp = getelementptr i8, ptr %ctx, i32 16
  store ptr %stack, ptr %sp
  %flags = getelementptr i8, ptr %ctx, i32 24
  store i32 0, ptr %flags
  %size = getelementptr i8, ptr %ctx, i32 32
  store i64 %stack_bytes, ptr %size
  call void (ptr, ptr, i32, ...) %makecontext(ptr %ctx, ptr @"sim.fiber_entry", i32 0)
  %done = getelementptr [{n} x i32], ptr @"sim.finished", i32 0, i32 %t
  store i32 0, ptr %done
  %t.next = add i32 %t, 1
  %more = icmp ult i32 %t.next, %ntid
  br i1 %more, label %make, label %started
started:
  store i32 1, ptr @"sim.fiber_mode"
  br label %round
round:
  %u = phi i32 [0, %started], [%u.next, %resumed], [0, %next_round]
  %left = phi i32 [0, %started], [%left.next, %resumed], [0, %next_round]
  %reverse = phi i1 [false, %started], [%reverse, %resumed], [%flipped, %next_round]
  %last_fiber = sub i32 %ntid, 1
  %backwards = sub i32 %last_fiber, %u
  %v = select i1 %reverse, i32 %backwards, i32 %u
  %udone = getelementptr [{n} x i32], ptr @"sim.finished", i32 0, i32 %v
  %finished = load i32, ptr %udone
  %waiting = icmp eq i32 %finished, 0
  br i1 %waiting, label %resume, label %resumed
resume:
  store i32 %v, ptr @"sim.current"
  %uat = mul i32 %v, {ctx_bytes}
  %uctx = getelementptr i8, ptr %contexts, i32 %uat
  %s = call i32 %swap(ptr @"sim.scheduler", ptr %uctx)
  br label %resumed
resumed:
  %ran = zext i1 %waiting to i32
  %left.next = add i32 %left, %ran
  %u.next = add i32 %u, 1
  %more_fibers = icmp ult i32 %u.next, %ntid
  br i1 %more_fibers, label %round, label %round_end
round_end:
  %any = icmp ne i32 %left.next, 0
  br i1 %any, label %next_round, label %done_all
next_round:
  %flipped = xor i1 %reverse, true
  br label %round
done_all:
  store i32 0, ptr @"sim.fiber_mode"
  ret void
}}
"""

_DECLARE = re.compile(r'^declare\s+(?P<ret>.+?)\s+@"?(?P<name>[^"(\s]+)"?\((?P<params>.*)\)'
                      r'(?P<attrs>[^()\n]*)$', re.M)


def _reference(name: str) -> re.Pattern:
    return re.compile(r'@"?' + re.escape(name) + r'"?(?![\w.$-])')


def _param_types(params: str) -> list[str]:
    return [re.sub(r'\s+%\S+$', "", p.strip()) for p in params.split(",") if p.strip()]


def host_ir(kernel: GpuKernel, prefix: str) -> tuple[str, bool]:
    """(the host module of `kernel`, whose entries are `prefix`.init/.failed/.run/.launch;
    whether its threads wait for each other). SimulationError for what cannot be
    simulated."""
    text = re.sub(r'^target (triple|datalayout) = .*$', "", kernel.ir, flags=re.M)
    text = text.replace(" addrspace(3)", "")
    if "addrspace" in text or re.search(r"\basm\b", text):
        raise SimulationError(f"{kernel.name}: an address space cast, another address space "
                              "than shared memory, or inline assembly is not simulated")
    text = re.sub(r"^define (ptx_kernel )?(?!internal|private)", "define internal ", text,
                  flags=re.M)
    declared = {m["name"] for m in _DECLARE.finditer(text)}
    waits = False
    for m in list(_DECLARE.finditer(text)):
        name = m["name"]
        if name.startswith("llvm.nvvm."):
            if name not in INTRINSICS:
                raise SimulationError(f"{kernel.name}: NVVM intrinsic {name} is not simulated "
                                      "(tests/gpu_sim.INTRINSICS)")
            waits |= name.startswith(WAITING)
            params = ", ".join(f"{t} %a{i}" for i, t in enumerate(_param_types(m["params"])))
            new_name = f"sim.{name}"
            replacement = (f'define internal {m["ret"]} @"{new_name}"({params}) {{\n'
                           f'  {INTRINSICS[name]}\n}}')
        elif name.startswith(LIBDEVICE_PREFIX):
            new_name = name[len(LIBDEVICE_PREFIX):]
            if not libcalls.resolvable(new_name):
                raise SimulationError(f"{kernel.name}: libdevice's {name} has no host "
                                      "counterpart in the runtime's C library")
            replacement = "" if new_name in declared else \
                f'declare {m["ret"]} @"{new_name}"({m["params"]})'
            declared.add(new_name)
        else:
            continue
        text = text.replace(m[0], replacement)
        text = _reference(name).sub(f'@"{new_name}"', text)
    if "llvm.ctpop.i32" not in declared:                  # the warp barrier's
        text += "declare i32 @llvm.ctpop.i32(i32)\n"
    n_args = kernel.n_outputs + kernel.n_inputs + (kernel.scratch_bytes > 0)
    args = "\n".join(f"  %p{k}.at = getelementptr ptr, ptr %argv, i32 {k}\n"
                     f"  %p{k} = load ptr, ptr %p{k}.at" for k in range(n_args))
    runtime = RUNTIME.format(warps=MAX_THREADS // WARP, n=MAX_THREADS, futex=FUTEX or 0,
                             ctx_bytes=CONTEXT_BYTES,
                             nap_ns=NAP_NS, prefix=prefix, kernel=kernel.name, args=args,
                             params=", ".join(f"ptr %p{k}" for k in range(n_args)))
    header = (f'target triple = "{binding.get_process_triple()}"\n'
              f'target datalayout = "{jit.target_machine().target_data}"\n')
    return header + text + runtime, waits


# ------------------------------------------------------------------------- running

_libc = ctypes.CDLL(None)
_KEY = ctypes.c_uint(0)
if _libc.pthread_key_create(ctypes.byref(_KEY), None) != 0:
    raise SimulationError("pthread_key_create failed")
_HOST_FUNCTIONS = [ctypes.cast(getattr(_libc, f), ctypes.c_void_p).value
                   for f in ("pthread_getspecific", "pthread_setspecific", "sched_yield",
                             "pthread_create", "pthread_join")]
FIBERS = FUTEX is not None and hasattr(_libc, "swapcontext")     # Linux's glibc ucontext
_CONTEXT_FUNCTIONS = [ctypes.cast(getattr(_libc, f), ctypes.c_void_p).value if FIBERS else None
                      for f in ("getcontext", "makecontext", "swapcontext")]
_FUTEX = ctypes.cast(_libc.syscall, ctypes.c_void_p).value if FUTEX else None
_TRIES = BARRIER_SECONDS * 10**9 // NAP_NS if FUTEX else YIELDS


# The fibers' contexts and stacks (256 MiB, of which each launch touches a few pages per
# thread), made once and shared by every kernel: one set per cached kernel grew the test
# process by about half a gigabyte per corpus module.
_FIBER_MEMORY: list[np.ndarray] = []
_FIBER_LOCK = threading.Lock()


class HostKernel:
    """A GpuKernel compiled for the host; `launch(pointers, threads, blocks)` runs it."""

    def __init__(self, kernel: GpuKernel):
        self.kernel = kernel
        prefix = f"sim.{jit.ir_hash(kernel.ir)}"
        text, self.waits = host_ir(kernel, prefix)
        names = [f"{prefix}.{n}" for n in ("init", "failed", "run", "launch", "fibers")]
        addresses = jit.compile_ir(text, names)
        init, failed, run, launch = (addresses[n] for n in names[:4])
        ctypes.CFUNCTYPE(None, ctypes.c_uint, *[ctypes.c_void_p] * 9, ctypes.c_int64)(init)(
            _KEY.value, *_HOST_FUNCTIONS, *_CONTEXT_FUNCTIONS, _FUTEX, _TRIES)
        self._fibers = ctypes.CFUNCTYPE(None, ctypes.c_int32, ctypes.c_int32, ctypes.c_void_p,
                                        ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(
            addresses[f"{prefix}.fibers"])
        self._launch = ctypes.CFUNCTYPE(None, ctypes.c_int32, ctypes.c_int32,
                                        ctypes.c_void_p)(launch)
        self._failed = ctypes.CFUNCTYPE(ctypes.c_int32)(failed)
        self._run = ctypes.CFUNCTYPE(None, *[ctypes.c_int32] * 5, ctypes.c_void_p)(run)
        self._lock = threading.Lock()          # one launch at a time: one set of globals

    def _as_fibers(self, threads: int, blocks: int, argv) -> None:
        with _FIBER_LOCK:
            if not _FIBER_MEMORY:
                _FIBER_MEMORY.extend((np.zeros(MAX_THREADS * CONTEXT_BYTES + 64, np.uint8),
                                      np.zeros(MAX_THREADS * FIBER_STACK_BYTES + 64, np.uint8)))
            contexts, stacks = (-(-m.ctypes.data // 64) * 64 for m in _FIBER_MEMORY)
            self._fibers(threads, blocks, argv, contexts, stacks, FIBER_STACK_BYTES)

    def launch(self, pointers: list[int], threads: int, blocks: int,
               concurrent: bool | None = None) -> None:
        """`blocks` blocks of `threads` threads on the kernel's arguments; the block's
        threads run as fibers when the kernel waits for them, as pthreads with
        `concurrent` (atomics under contention), else one after the other."""
        if not 0 < threads <= MAX_THREADS or blocks <= 0:
            raise SimulationError(f"{self.kernel.name}: launch of {blocks} blocks of "
                                  f"{threads} threads")
        argv = (ctypes.c_void_p * max(1, len(pointers)))(*pointers)
        together = self.waits if concurrent is None else concurrent
        with self._lock:
            if not together:
                self._run(0, threads, threads, blocks, 0, argv)
                return
            if concurrent is None and FIBERS:
                self._as_fibers(threads, blocks, argv)
            else:
                self._launch(threads, blocks, argv)
            failed = self._failed()
            if failed:
                raise SimulationError(f"{self.kernel.name}: " + (
                    "a host thread could not be started" if failed == 2 else
                    "threads waited at a barrier that not all of their block (or warp) "
                    "reached"))


_compiled: dict[str, HostKernel] = {}


def host_kernel(kernel: GpuKernel) -> HostKernel:
    """The kernel compiled for the host, once per IR."""
    key = jit.ir_hash(kernel.ir)
    if key not in _compiled:
        _compiled[key] = HostKernel(kernel)
    return _compiled[key]


def run_kernel(kernel: GpuKernel, outputs: list[np.ndarray], inputs: list[np.ndarray],
               threads: int | None = None, blocks: int | None = None,
               concurrent: bool | None = None) -> None:
    """Launch `kernel` on numpy arrays as the host program does (initial copies, a zeroed
    scratch buffer), with its recorded launch unless `threads`/`blocks` say otherwise;
    outputs are written in place."""
    if (len(outputs), len(inputs)) != (kernel.n_outputs, kernel.n_inputs):
        raise SimulationError(f"{kernel.name} takes {kernel.n_outputs} outputs and "
                              f"{kernel.n_inputs} inputs, given {len(outputs)} and {len(inputs)}")
    for i, j in kernel.initial_copies:
        outputs[i][...] = inputs[j]
    scratch = [np.zeros(kernel.scratch_bytes, np.uint8)] if kernel.scratch_bytes else []
    pointers = [a.ctypes.data for a in outputs + inputs + scratch]
    host_kernel(kernel).launch(pointers, threads or kernel.threads, blocks or kernel.blocks,
                               concurrent)


# ------------------------------------------------------------------------ the device

ALIGN = 256                        # cuMemAlloc's alignment


class SimulatedDevice:
    """lowering/cuda_device.CudaDevice's methods over host memory, kernels run by the
    simulator. Every launch argument must point into an allocation; `launches` records
    (kernel name, blocks, threads) in order."""
    arch = "sm_90"
    capability = (9, 0)
    name = "simulated GPU (host CPU)"

    def __init__(self):
        self._memory: dict[int, np.ndarray] = {}     # pointer -> its bytes
        self.launches: list[tuple[str, int, int]] = []

    def use(self) -> None:
        pass

    def _check(self, ptr: int, nbytes: int) -> None:
        for start, data in self._memory.items():
            if start <= ptr and ptr + nbytes <= start + data.nbytes:
                return
        raise SimulationError(f"{ptr:#x}..+{nbytes} is not simulated device memory")

    def alloc(self, nbytes: int) -> int:
        raw = np.zeros(max(1, nbytes) + ALIGN, np.uint8)
        skip = -raw.ctypes.data % ALIGN
        data = raw[skip:skip + max(1, nbytes)]
        self._memory[data.ctypes.data] = data
        return data.ctypes.data

    def free(self, ptr: int) -> None:
        del self._memory[ptr]

    def copy_h2d(self, dst: int, src: np.ndarray) -> None:
        self._check(dst, src.nbytes)
        ctypes.memmove(dst, src.ctypes.data, src.nbytes)

    def copy_d2h(self, dst: np.ndarray, src: int) -> None:
        self._check(src, dst.nbytes)
        ctypes.memmove(dst.ctypes.data, src, dst.nbytes)

    def copy_d2d(self, dst: int, src: int, nbytes: int) -> None:
        self._check(dst, nbytes)
        self._check(src, nbytes)
        ctypes.memmove(dst, src, nbytes)

    def zero(self, ptr: int, nbytes: int) -> None:
        self._check(ptr, nbytes)
        ctypes.memset(ptr, 0, nbytes)

    def load_kernels(self, kernels: list[GpuKernel]) -> dict[str, GpuKernel]:
        """What gpu_runtime gives a device that runs kernels from their LLVM IR."""
        return {k.name: k for k in kernels}

    def load(self, ptx: str):
        raise SimulationError("the simulated device runs LLVM IR, not PTX (load_kernels)")

    def function(self, module, name: str) -> GpuKernel:
        return module[name]

    def launch(self, function: GpuKernel, blocks: int, threads: int, shared_bytes: int,
               pointers: list[int]) -> None:
        if shared_bytes:
            raise SimulationError("dynamic shared memory is not simulated")
        for p in pointers:
            self._check(p, 1)
        self.launches.append((function.name, blocks, threads))
        host_kernel(function).launch(list(pointers), threads, blocks)

    def sync(self) -> None:
        pass

    def event(self) -> list:
        return [0.0]

    def record(self, event) -> None:
        event[0] = time.perf_counter()

    def elapsed(self, start, end) -> float:
        return end[0] - start[0]

