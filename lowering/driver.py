"""The driver: one LLVM function that runs a whole host program.

    i32 driver(ptr params, ptr outs, ptr arena, ptr consts, ptr fns, ptr fallback)

`params`, `outs` and `consts` are arrays of buffer addresses (params and outs may instead
hold the numpy array objects themselves, whose data pointer the driver reads: see
runtime.py), `arena` the temporaries' memory, `fns` the kernels' entry points (NAME, NAME.par for each kernel slot) and `fallback`
the interpreter callback `i32 (i64 step, ptr buffers)`. Kernel calls, copies, while loops
and conditionals are native code, so a call of the compiled module crosses from Python into
native code once; a kernel worth splitting runs on the OpenMP team through GOMP_parallel.
Returns 0, or the nonzero status of a failed fallback. A driver built with
`flush_denormals` runs its kernels (and their worker threads) with denormals flushed to zero,
XLA:CPU's floating-point mode, and restores the caller's mode on return.
"""
from __future__ import annotations

from llvmlite import ir

from ..targets import cpu_facts
from . import jit
from .intrinsics import declare, restore_fp_mode, set_flush_denormals
from .ltypes import I1, I8, I32, I64, PTR
from .program import Buffer, Conditional, Copy, FallbackCall, KernelStep, Program, While


def step_label(step: KernelStep | FallbackCall) -> str:
    """How profiles name a kernel or fallback step."""
    if isinstance(step, KernelStep):
        return f"{step.label} ({step.kernel.name})"
    return f"{step.call.inst.name} (interpreter)"


class Driver:
    """Emits the driver of one program. With `profile`, a seventh argument points at an
    i64 array where each kernel and fallback step adds its cycle count and call count
    (`steps` lists the steps in that order)."""

    def __init__(self, name: str, slots: dict[str, int], parallel: bool, profile: bool = False,
                 data_offset: int | None = None, flush_denormals: bool = False):
        self.name, self.slots, self.parallel = name, slots, parallel
        self.flush_denormals = flush_denormals
        self.data_offset = data_offset      # params/outs hold numpy array objects: their
                                            # data pointer is this many bytes into them
        self.mod = jit.new_module(name)
        fn = ir.Function(self.mod, ir.FunctionType(I32, [PTR] * (7 if profile else 6)), name)
        self.fn = fn
        self.params, self.outs, self.arena, self.consts, self.fns, self.callback = fn.args[:6]
        self.counters = fn.args[6] if profile else None
        self.steps: list[KernelStep | FallbackCall] = []
        self.b = ir.IRBuilder(fn.append_basic_block("entry"))
        self.argv = None

    def emit(self, program: Program, max_args: int) -> str:
        b = self.b
        self.argv = b.alloca(ir.ArrayType(PTR, max(max_args, 1)))
        self.par_data = b.alloca(ir.LiteralStructType([PTR, I64, I64, I64]))
        self.fail = self.fn.append_basic_block("fail")
        self.status = b.alloca(I32)
        saved = set_flush_denormals(b, True) if self.flush_denormals else None
        self.program(program)
        restore_fp_mode(b, saved)
        b.ret(I32(0))
        b.position_at_end(self.fail)
        restore_fp_mode(b, saved)
        b.ret(b.load(self.status, typ=I32))
        return str(self.mod)

    # ------------------------------------------------------------------------ pieces
    def addr(self, buf: Buffer):
        b = self.b
        if buf.kind == "temp":
            return b.gep(self.arena, [I64(buf.offset)], inbounds=True, source_etype=I8)
        table = {"param": self.params, "out": self.outs, "const": self.consts}[buf.kind]
        ptr = b.load(b.gep(table, [I64(buf.index)], inbounds=True, source_etype=PTR), typ=PTR)
        if buf.kind != "const" and self.data_offset is not None:
            field = b.gep(ptr, [I64(self.data_offset)], inbounds=True, source_etype=I8)
            ptr = b.load(field, typ=PTR)
        return ptr

    def pack(self, bufs: list) -> None:
        b = self.b
        for k, buf in enumerate(bufs):
            slot = b.gep(self.argv, [I64(0), I64(k)], inbounds=True)
            b.store(self.addr(buf) if buf is not None else ir.Constant(PTR, None), slot)

    def fn_pointer(self, index: int):
        b = self.b
        return b.load(b.gep(self.fns, [I64(index)], inbounds=True, source_etype=PTR), typ=PTR)

    def memcpy(self, dst: Buffer, src: Buffer) -> None:
        if dst is src or dst.nbytes == 0:
            return
        f = declare(self.mod, "llvm.memcpy.p0.p0.i64", ir.VoidType(), [PTR, PTR, I64, I1])
        self.b.call(f, [self.addr(dst), self.addr(src), I64(dst.nbytes), I1(0)])

    # ------------------------------------------------------------------------- steps
    def program(self, program: Program) -> None:
        for step in program.steps:
            self._STEPS[type(step)](self, step)

    def timed(self, step, emit) -> None:
        if self.counters is None:
            emit()
            return
        b = self.b
        clock = declare(self.mod, "llvm.readcyclecounter", I64, [])
        start = b.call(clock, [])
        emit()
        k = len(self.steps)
        self.steps.append(step)
        for offset, amount in ((0, b.sub(b.call(clock, []), start)), (1, I64(1))):
            slot = b.gep(self.counters, [I64(2 * k + offset)], inbounds=True, source_etype=I64)
            b.store(b.add(b.load(slot, typ=I64), amount), slot)

    def kernelstep(self, step: KernelStep) -> None:
        self.timed(step, lambda: self._kernel(step))

    def _kernel(self, step: KernelStep) -> None:
        b, k = self.b, step.kernel
        self.pack(step.outs + step.ins + step.temps + [None] * (1 + len(k.temps) - len(step.temps)))
        slot = self.slots[k.key]
        fnty = ir.FunctionType(ir.VoidType(), [PTR, I64, I64, I64])
        if self.parallel and k.parallel(cpu_facts.threads(), cpu_facts.PARALLEL_MIN_WORK):
            data = self.par_data
            b.store(b.bitcast(self.argv, PTR), b.gep(data, [I32(0), I32(0)], inbounds=True))
            b.store(I64(k.extent), b.gep(data, [I32(0), I32(1)], inbounds=True))
            b.store(I64(int(self.flush_denormals)), b.gep(data, [I32(0), I32(2)], inbounds=True))
            b.store(I64(0), b.gep(data, [I32(0), I32(3)], inbounds=True))     # chunk counter
            gomp = declare(self.mod, "GOMP_parallel", ir.VoidType(), [PTR, PTR, I32, I32])
            b.call(gomp, [self.fn_pointer(2 * slot + 1), b.bitcast(data, PTR),
                          I32(cpu_facts.threads()), I32(0)])
        else:
            b.call(_typed(b, self.fn_pointer(2 * slot), fnty),
                   [b.bitcast(self.argv, PTR), I64(0), I64(k.extent), I64(0)])

    def fallbackcall(self, step: FallbackCall) -> None:
        self.timed(step, lambda: self._fallback(step))

    def _fallback(self, step: FallbackCall) -> None:
        b = self.b
        self.pack(step.outs + step.ins)
        cb = _typed(b, self.callback, ir.FunctionType(I32, [I64, PTR]))
        status = b.call(cb, [I64(step.id), b.bitcast(self.argv, PTR)])
        ok = b.icmp_signed("==", status, I32(0))
        b.store(status, self.status)
        cont = self.fn.append_basic_block("ok")
        b.cbranch(ok, cont, self.fail)
        b.position_at_end(cont)

    def copy(self, step: Copy) -> None:
        self.memcpy(step.dst, step.src)

    def loop(self, step: While) -> None:
        b = self.b
        for s, i in zip(step.state, step.init):
            self.memcpy(s, i)
        head = self.fn.append_basic_block("while.cond")
        body = self.fn.append_basic_block("while.body")
        done = self.fn.append_basic_block("while.done")
        b.branch(head)
        b.position_at_end(head)
        self.program(step.cond)
        go = b.load(self.addr(step.cond_result), typ=I8)
        b.cbranch(b.icmp_unsigned("!=", go, I8(0)), body, done)
        b.position_at_end(body)
        self.program(step.body)
        for s, r in zip(step.state, step.body_results):
            self.memcpy(s, r)
        b.branch(head)
        b.position_at_end(done)

    def conditional(self, step: Conditional) -> None:
        b = self.b
        n = len(step.branches)
        if step.by_index:
            v = b.load(self.addr(step.selector), typ=I32)
            out_of_range = b.or_(b.icmp_signed("<", v, I32(0)), b.icmp_signed(">=", v, I32(n)))
            index = b.select(out_of_range, I32(n - 1), v)
        else:
            p = b.load(self.addr(step.selector), typ=I8)
            index = b.select(b.icmp_unsigned("!=", p, I8(0)), I32(0), I32(1))
        blocks = [self.fn.append_basic_block(f"branch{k}") for k in range(n)]
        done = self.fn.append_basic_block("cond.done")
        switch = b.switch(index, blocks[-1])
        for k, blk in enumerate(blocks[:-1]):
            switch.add_case(I32(k), blk)
        for blk, (program, results) in zip(blocks, step.branches):
            b.position_at_end(blk)
            self.program(program)
            for o, r in zip(step.outs, results):
                self.memcpy(o, r)
            b.branch(done)
        b.position_at_end(done)




Driver._STEPS = {KernelStep: Driver.kernelstep, FallbackCall: Driver.fallbackcall,
                 Copy: Driver.copy, While: Driver.loop, Conditional: Driver.conditional}


def _typed(b: ir.IRBuilder, ptr, fnty: ir.FunctionType):
    """An opaque pointer as a callee of type `fnty`: llvmlite reads an indirect call's type
    from its callee's pointee, and its bitcast helper drops ptr -> ptr casts, so the (no-op)
    cast instruction is made directly."""
    cast = ir.instructions.CastInstr(b.block, "bitcast", ptr, fnty.as_pointer())
    b._insert(cast)
    return cast
