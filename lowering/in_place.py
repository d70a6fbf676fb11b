"""Buffers reused in place: no copy of a large array where its old value is dead.

Run on a built program before buffer assignment (runtime.build), by identity of buffers:

* a kernel output that is a dynamic-update-slice or a scatter of an input nobody else in
  the kernel reads (a scan writing one slice of its stacked outputs per iteration, a
  scatter into a temporary) is written into that input's buffer, storing only the updates
  (emit_kernel's `updates`), and the only output of a kernel elementwise over an input it
  reads at the index it writes (a gradient accumulator g + dot(...)) is written over that
  input, when the old value is dead there: a temporary of the same program, or the state
  of the loop whose body this is and that the body returns in the same position, read by no later step and
  not a result. Module parameters (the caller's arrays) and constants are never written;
* a loop's state element is its initial value's buffer, so nothing is copied in, when the
  loop never writes it (an invariant: weights, the scanned inputs), or when that buffer is a
  temporary of the enclosing program that nothing reads after the loop; else, when a kernel
  computes that value from constants alone, that kernel also writes the state's buffer.

Together: a scan's stacked buffer is made once, updated in place each iteration, and
passes through the loop without a copy.

Updates that cannot overwrite their input copy it into their own output first. Where
several kernels of a program copy the same buffer that way (three updates of one
parameter), one kernel copies it into all their outputs, reading it once, and each then
updates its output in place.
"""
from __future__ import annotations

from dataclasses import fields

from ..ir import Computation, Instruction
from ..ops import is_elementwise
from ..shape import TupleShape
from .emit_dot import finishes_each_once
from .emit_kernel import IN_PLACE, PHASES, kernel_outputs, plan_steps
from .program import Buffer, Conditional, KernelStep, Program, While, step_io, written_ids


def apply(program: Program, results: list[Buffer], update_kernel_for) -> None:
    """Rewrite `program` (and the programs it runs) in place; `results` (its result
    buffers, updated too) stay live to its end. `update_kernel_for(comp, updates)` is the
    kernel computing `comp` with those outputs updated in place."""
    _program(program, results, None, update_kernel_for)


def updatable(comp) -> list[tuple[int, int, int]]:
    """(output position, its buffer's position among the kernel's output buffers, parameter
    number) of every output of a kernel computing `comp` that may update an input in place:
    one of `prefillable` whose parameter no other instruction reads; or the only output of
    the kernel, elementwise over a parameter of its shape that only ops of that shape and
    elementwise read (an accumulator g + dot(...): each element is read at its own index
    before it is written)."""
    outputs = kernel_outputs(comp)
    found = [(k, leaf, p) for k, leaf, p in prefillable(comp)
             if sum(o is outputs[k].operands[0] for i in comp.post_order()
                    for o in i.operands) == 1]
    if len(outputs) == 1 and not found:
        target = _elementwise_target(comp, outputs[0])
        if target is not None:
            found.append((0, 0, target.parameter_number))
    return found


def prefillable(comp) -> list[tuple[int, int, int]]:
    """(as `updatable`) every output of a kernel computing `comp` that an IN_PLACE op (a
    dynamic-update-slice, a scatter) computes from a parameter, an array output once: the
    kernel may be given its buffer already holding that parameter's value and write only
    the updates there."""
    outputs = kernel_outputs(comp)
    found, leaf = [], 0
    for k, out in enumerate(outputs):
        target = out.operands[0] if out.opcode in IN_PLACE and not out.shape.is_tuple \
            else None
        if target is not None and target.opcode == "parameter" and out.shape.rank and \
                sum(o is out for o in outputs) == 1:
            found.append((k, leaf, target.parameter_number))
        leaf += len(out.shape.leaves()) if out.shape.is_tuple else 1
    return found


def elementwise_updates(comp, updates: tuple[int, ...]) -> list[int]:
    """Parameter numbers of the inputs that `updates` (see updatable) write elementwise:
    the kernel reads and writes the same buffer there."""
    outputs = kernel_outputs(comp)
    return [p for k, _, p in updatable(comp) if k in updates and
            outputs[k].opcode not in IN_PLACE]


def _elementwise_target(comp, out):
    """The first parameter of `out`'s shape whose every reader, down to `out`, is an
    elementwise op of that shape, so it is read only at the index being written, in a
    kernel of loops alone or of one dot whose epilogue `out` is and that finishes each
    element in one write."""
    if out.shape.is_tuple or not out.shape.rank or not is_elementwise(out.opcode) or \
            not _loops_or_one_pass_dot(comp, out):
        return None                 # a GEMM, say, keeps partial sums in its destination
    readers: dict[int, list] = {}
    for inst in comp.post_order():
        for o in inst.operands:
            readers.setdefault(id(o), []).append(inst)
    for param in comp.parameters:
        if param.shape == out.shape and _read_at_own_index(param, out, readers):
            return param
    return None


def _loops_or_one_pass_dot(comp, out) -> bool:
    own = [i for i in comp.post_order() if i.opcode in PHASES]
    if not own:
        return True
    if len(own) > 1 or own[0].opcode != "dot":
        return False
    return any(g.root is out and g.gemm is own[0] for g in plan_steps(comp)[0]) and \
        finishes_each_once(own[0])


def _read_at_own_index(value, out, readers) -> bool:
    stack, seen = [value], set()
    while stack:
        inst = stack.pop()
        if id(inst) in seen:
            continue
        seen.add(id(inst))
        users = readers.get(id(inst), [])
        if inst is not out and not users:
            return False                        # read by nothing on the way to out
        for u in users:
            if not is_elementwise(u.opcode) or u.shape.dims != out.shape.dims:
                return False
            stack.append(u)
    return id(out) in seen


def _program(program: Program, results: list[Buffer], loop: While | None, kernel_for) -> None:
    """`loop`: the While whose body `program` is (its state may be updated in place)."""
    for step in list(program.steps):            # loops may get steps before them
        n = next(k for k, s in enumerate(program.steps) if s is step)
        if isinstance(step, While):
            _program(step.cond, [step.cond_result], None, kernel_for)
            _program(step.body, step.body_results, step, kernel_for)
            _share_initial_values(program, n, results)
        elif isinstance(step, Conditional):
            for branch, branch_results in step.branches:
                _program(branch, branch_results, None, kernel_for)
        elif isinstance(step, KernelStep) and step.kernel.comp is not None:
            _update_in_place(program, n, results, loop, kernel_for)
    _copy_once(program, kernel_for)


def _update_in_place(program: Program, n: int, results: list[Buffer], loop: While | None,
                     kernel_for) -> None:
    step = program.steps[n]
    chosen = [(k, step.outs[leaf], step.ins[p]) for k, leaf, p in updatable(step.kernel.comp)
              if _overwritable(program, n, step.ins[p], step.outs[leaf], results, loop)]
    if not chosen:
        return
    step.kernel = kernel_for(step.kernel.comp, tuple(k for k, _, _ in chosen))
    for _, out, target in chosen:
        _substitute(program, out, target, results)


def _copy_once(program: Program, kernel_for) -> None:
    """Where several updates (dynamic-update-slices, scatters: `prefillable`) of one
    buffer still copy it into their own outputs, copy it into all of them with one kernel
    before the first, which reads it once; each then updates its output in place (reading
    the buffer only where its other ops do)."""
    copied: dict[int, list] = {}
    for step in program.steps:
        if isinstance(step, KernelStep) and step.kernel.comp is not None:
            for k, leaf, p in prefillable(step.kernel.comp):
                if k not in step.kernel.updates:
                    copied.setdefault(id(step.ins[p]), []).append((step, k, step.outs[leaf], p))
    for found in copied.values():
        first = _position(program, found[0][0])
        source = found[0][0].ins[found[0][3]]
        found = [f for f in found if _untouched(program, first, f[0], f[2], source)]
        if len(found) < 2:
            continue
        copies = _copies_of(found[0][0].kernel.comp.parameters[found[0][3]], len(found))
        program.steps.insert(first, KernelStep(kernel_for(copies, ()), [f[2] for f in found],
                                               [source], [], f"copies of {source.label}"))
        for step, k, _, _ in found:
            step.kernel = kernel_for(step.kernel.comp, tuple(sorted((*step.kernel.updates, k))))


def _position(program: Program, step) -> int:
    return next(n for n, s in enumerate(program.steps) if s is step)


def _untouched(program: Program, first: int, step, out: Buffer, source: Buffer) -> bool:
    """Whether no step from `first` to `step` (which writes `out` from `source`) reads or
    writes `out`, or writes `source`: `out` may then hold its copy from step `first` on."""
    between = program.steps[first:_position(program, step)]
    return not any(b is out for s in between for b in sum(step_io(s), [])) and \
        not any(b is source for s in between for b in step_io(s)[0])


def _copies_of(param: Instruction, n: int) -> Computation:
    """A computation returning its parameter (of `param`'s shape) n times."""
    source = Instruction("source", "parameter", param.shape, parameter_number=0)
    root = Instruction("copies", "tuple", TupleShape((param.shape,) * n), [source] * n)
    return Computation("copies", [source, root], root)


def _overwritable(program: Program, n: int, target: Buffer, out: Buffer,
                  results: list[Buffer], loop: While | None) -> bool:
    """Whether step n may write `out` into `target`, its input, whose value is then lost."""
    step = program.steps[n]
    if sum(b is target for b in step.ins) != 1 or not _dead_after(program, n, target, results):
        return False
    if any(t is target for t in program.temps):
        return True
    # the loop's own state: the body must return the update in the same position
    return loop is not None and any(s is target and r is out
                                    for s, r in zip(loop.state, loop.body_results))


def _share_initial_values(program: Program, n: int, results: list[Buffer]) -> None:
    """Loop state elements of step n that can live in their initial value's buffer; the
    others, where a kernel computes that value from constants alone (zeros for a scan's
    stacked gradients, several starting from one), have it computed into their own buffer,
    which writes it once instead of reading and writing a copy."""
    step = program.steps[n]
    written = written_ids(step.body) | written_ids(step.cond)
    for k, (state, init) in enumerate(zip(step.state, step.init)):
        invariant = step.body_results[k] is state and id(state) not in written
        shared = sum(i is init for i in step.init) > 1
        dead = any(t is init for t in program.temps) and not shared and \
            _dead_after(program, n, init, results)
        if invariant or dead:
            _substitute(program, state, init, results)
        elif (producer := _made_from_constants(program, n, init)) is not None:
            program.steps.insert(n, KernelStep(producer.kernel, [state], producer.ins,
                                               producer.temps, producer.label))
            n += 1
            step.init[k] = state


def _made_from_constants(program: Program, n: int, buf: Buffer) -> KernelStep | None:
    """The kernel step before step n whose only output is `buf` and whose inputs are
    constants, if there is one."""
    for step in program.steps[:n]:
        if isinstance(step, KernelStep) and len(step.outs) == 1 and step.outs[0] is buf and \
                all(b.kind == "const" for b in step.ins):
            return step
    return None


def _dead_after(program: Program, n: int, buf: Buffer, results: list[Buffer]) -> bool:
    """Nothing after step n reads `buf`, and it is no result of the program."""
    if any(r is buf for r in results):
        return False
    return not any(b is buf for step in program.steps[n + 1:] for b in step_io(step)[1])


def _substitute(program: Program, old: Buffer, new: Buffer, results: list[Buffer]) -> None:
    """`new` wherever `program` (and what it runs) or `results` refers to `old`."""
    program.temps[:] = [t for t in program.temps if t is not old]
    results[:] = _replaced(results, old, new)
    for step in program.steps:
        for f in fields(step):
            setattr(step, f.name, _replaced(getattr(step, f.name), old, new))


def _replaced(value, old: Buffer, new: Buffer):
    if value is old:
        return new
    if isinstance(value, list):
        return [_replaced(v, old, new) for v in value]
    if isinstance(value, tuple):
        return tuple(_replaced(v, old, new) for v in value)
    if isinstance(value, Program):
        _substitute(value, old, new, [])
    return value
