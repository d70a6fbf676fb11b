"""Packing a loop-invariant GEMM operand once per loop instead of once per iteration.

A packed GEMM copies B into NR-column panels every time it runs (emit_dot.py). In a while
loop whose body multiplies by weights the loop never changes (an RNN's recurrence, its
gradient's `dh @ W^T`), that copy is repeated every iteration, and with few rows of A (a
batch of 64) it costs as much as the multiply-adds. Run on a built program (runtime.build,
after in_place.py): for each kernel of a loop body whose one dot reads its B operand
straight from a parameter nothing else in the kernel reads, where that parameter's buffer
is invariant in the loop (a state element the body passes through and no step writes, or a
constant), a kernel before the loop packs all of B (every batch, every panel over the
whole of K: emit_dot.pack_b_panel) into a buffer that lives through the loop, and the body
runs the kernel's variant that reads those panels (emit_kernel's `packed`).
"""
from __future__ import annotations

from llvmlite import ir

from ..targets import cpu_facts
from . import jit
from .elemental import Elemental, Source
from .emit_dot import dot_gemm, pack_b_panel
from .emit_kernel import KernelCode, _entry_points
from .emit_loops import for_range
from .ltypes import I64, PTR, VOID
from .phases import epilogue_transposes
from .program import Buffer, Conditional, KernelStep, Program, While, written_ids


def apply(program: Program, kernel_for, pack_kernel_for) -> None:
    """Rewrite `program` and the programs it runs in place. `kernel_for(comp, updates,
    packed)` makes a kernel variant, `pack_kernel_for(comp)` the kernel packing B."""
    steps = []
    for step in program.steps:
        if isinstance(step, While):
            apply(step.cond, kernel_for, pack_kernel_for)
            apply(step.body, kernel_for, pack_kernel_for)
            steps.extend(_hoist(program, step, kernel_for, pack_kernel_for))
        elif isinstance(step, Conditional):
            for branch, _ in step.branches:
                apply(branch, kernel_for, pack_kernel_for)
        steps.append(step)
    program.steps = steps


def _hoist(program: Program, loop: While, kernel_for, pack_kernel_for) -> list[KernelStep]:
    """The packing steps to run before `loop`, whose body's kernels now read their panels."""
    written = written_ids(loop.body) | written_ids(loop.cond)
    before = {id(s): i for s, r, i in zip(loop.state, loop.body_results, loop.init)
              if s is r and id(s) not in written}
    packs = []
    for n, step in enumerate(loop.body.steps):
        if not isinstance(step, KernelStep) or step.kernel.comp is None or step.kernel.packed:
            continue
        number = packable(step.kernel.comp)
        if number is None:
            continue
        read = step.ins[number]
        source = read if read.kind == "const" else before.get(id(read))
        if source is None:
            continue
        pack = pack_kernel_for(step.kernel.comp)
        panels = Buffer(panel_bytes(step.kernel.comp), "temp", label=f"{step.label}.panels")
        program.temps.append(panels)
        loop.packed.append(panels)
        packs.append(KernelStep(pack, [panels], [source], [], f"{step.label}.pack"))
        ins = list(step.ins)
        ins[number] = panels
        loop.body.steps[n] = KernelStep(
            kernel_for(step.kernel.comp, step.kernel.updates, (number,)), step.outs, ins,
            step.temps, step.label)
    return packs


def _dot(comp):
    dots = [i for i in comp.post_order() if i.opcode == "dot"]
    return dots[0] if len(dots) == 1 else None


def packable(comp) -> int | None:
    """The parameter number of the B operand of the kernel's one dot, where that dot is a
    packed GEMM and B a parameter only it reads (as B), and no epilogue reads the dot
    transposed; else None."""
    dot = _dot(comp)
    if dot is None or not dot_gemm(dot).packed():
        return None
    lhs, rhs = dot.operands
    if rhs.opcode != "parameter" or lhs is rhs or \
            any(rhs in i.operands for i in comp.post_order() if i is not dot):
        return None
    if any(epilogue_transposes(dot, i) for i in comp.post_order()):
        return None                          # its GEMM packs the lhs as B (dot_gemm)
    return rhs.parameter_number


def panel_bytes(comp) -> int:
    g = dot_gemm(_dot(comp))
    return g.batch * g.b_panel_count() * cpu_facts.gemm_tile(g.acc.bits)[1] * g.k * \
        g.acc.nbytes


def pack_kernel(comp, name: str, key: str) -> KernelCode:
    """A kernel (emit_kernel's entry points; arguments: the panels, B) packing every panel
    of B of the dot in `comp`, one panel per task."""
    g = dot_gemm(_dot(comp))
    operand = g.b_operand
    mod = jit.new_module(name)
    impl = ir.Function(mod, ir.FunctionType(VOID, [PTR] * 3 + [I64] * 3), f"{name}.impl")
    impl.linkage = "internal"
    impl.attributes.add("alwaysinline")
    jit.tune(impl)
    out, src, _, begin, end, _ = impl.args
    for a in (out, src):
        a.add_attribute("noalias")
    b = ir.IRBuilder(impl.append_basic_block("entry"))
    gen = Elemental(b, {id(operand): Source(src, operand.shape)})
    with for_range(b, begin, end, "panel", vectorize=False) as task:
        pack_b_panel(gen, g, task, out)
    b.ret_void()
    code = KernelCode(name, "", 1, 1, [], [], 0, g.batch * g.b_panel_count(),
                      float(panel_bytes(comp) // g.acc.nbytes), key=key, comp=comp)
    _entry_points(mod, impl, name, 3, jit.has_openmp() and code.parallel(
        cpu_facts.threads(), cpu_facts.PARALLEL_MIN_WORK))
    code.ir = str(mod)
    return code
