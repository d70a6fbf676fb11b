"""The host program: what the compiled module does, step by step, on which buffers.

A computation, its kernels formed by the fusion stage, becomes a list of steps over buffers:
kernel calls (one per `fusion` and per other instruction with work of its own: a fusion
whose loop steps one would rather thread runs as one call per step, see
emit_kernel.threaded_steps), interpreter fallbacks, copies, and while / conditional steps
holding the programs of their computations. tuple, get-tuple-element, call (inlined)
and layout-preserving reshape/bitcast/copy of a stored value move no data: a value is a tree
of buffers and these ops rearrange the tree. driver.py turns a program into LLVM code,
buffers.py gives every temporary an offset in one arena.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

import numpy as np

from ..errors import UnsupportedError
from ..ir import ELIDED, Computation, Instruction
from ..shape import default_layout
from ..targets import cpu_facts
from . import emit_kernel, fallback, phases
from .emit_kernel import ALIGN, KernelCode
from .ltypes import array_bytes


class Buffer:
    """Bytes for one array: an entry parameter, an output, a constant, or an arena temp."""
    __slots__ = ("nbytes", "kind", "index", "offset", "label")

    def __init__(self, nbytes: int, kind: str = "temp", index: int = 0, label: str = ""):
        self.nbytes, self.kind, self.index, self.label = nbytes, kind, index, label
        self.offset = -1                 # arena offset of a temp, set by buffers.assign

    @property
    def size(self) -> int:
        """Bytes reserved in the arena (rounded up so every buffer stays aligned)."""
        return max(ALIGN, -(-self.nbytes // ALIGN) * ALIGN)

    def __repr__(self) -> str:
        return f"<{self.kind}{self.index if self.kind != 'temp' else ''} {self.label} " \
               f"{self.nbytes}B @{self.offset}>"


Value = Union[Buffer, tuple, None]


def leaves(value: Value) -> list[Buffer]:
    if isinstance(value, tuple):
        return [b for v in value for b in leaves(v)]
    return [] if value is None else [value]


@dataclass
class KernelStep:
    kernel: KernelCode
    outs: list[Buffer]
    ins: list[Buffer]
    temps: list[Buffer]
    label: str


@dataclass
class FallbackCall:
    call: fallback.FallbackStep
    outs: list[Buffer]
    ins: list[Buffer]
    id: int


@dataclass
class Copy:
    dst: Buffer
    src: Buffer


@dataclass
class While:
    state: list[Buffer]
    init: list[Buffer]
    cond: "Program"
    cond_result: Buffer
    body: "Program"
    body_results: list[Buffer]
    scratch: Buffer
    packed: list[Buffer] = field(default_factory=list)   # loop invariants packed before
                                                          # the loop (loop_packing.py)


@dataclass
class Conditional:
    selector: Buffer
    by_index: bool                     # s32 branch index (else a pred: true -> branch 0)
    operands: list[Buffer]             # what the branches read
    branches: list[tuple["Program", list[Buffer]]]
    outs: list[Buffer]
    scratch: Buffer


@dataclass
class Program:
    steps: list = field(default_factory=list)
    temps: list[Buffer] = field(default_factory=list)
    base: int = 0                      # arena offset of this program's region
    peak: int = 0                      # bytes of that region
    offsets: dict = field(default_factory=dict)   # id(temp) -> offset in the region


class ProgramBuilder:
    """Builds programs for one module; shares its constant table, kernels and fallbacks.

    The CPU and GPU programs are built here alike; a target differs in `kernel_for` (what a
    KernelStep runs: an object with the KernelCode fields `constants`, `temps`,
    `scratch_per_thread`), `split` (a fusion to run as several kernel steps, or None) and
    `interpreter` (whether what has no kernel runs in the interpreter; without one, that is
    an UnsupportedError at the op's position). `update_kernel_for(comp, updates)`, where the
    target has one, makes a kernel whose dynamic-update-slice outputs write only their
    updates into their operand's buffer (in_place.py)."""

    def __init__(self, kernel_for, split=emit_kernel.threaded_steps, interpreter: bool = True,
                 update_kernel_for=None):
        self.kernel_for = kernel_for   # Computation -> compiled KernelCode (cached)
        self.update_kernel_for = update_kernel_for
        self.split, self.interpreter = split, interpreter
        self.constants: list[np.ndarray] = []
        self._const_values: dict[int, Value] = {}
        self.fallbacks: list[FallbackCall] = []

    def constant(self, inst: Instruction) -> Value:
        """The constant's buffer(s) in the constant table (made once per instruction)."""
        if id(inst) not in self._const_values:
            self._const_values[id(inst)] = self._literal(inst.literal, inst.shape, inst.name)
        return self._const_values[id(inst)]

    def _literal(self, literal, shape, label) -> Value:
        if shape.is_tuple:
            parts = literal if isinstance(literal, tuple) else (None,) * len(shape.elements)
            return tuple(self._literal(v, s, label) for v, s in zip(parts, shape.elements))
        dt = shape.dtype.numpy
        if dt is None:
            return None
        if literal is None or literal is ELIDED:
            array = np.zeros(shape.dims, dt)
        else:
            array = np.ascontiguousarray(np.asarray(literal).astype(dt).reshape(shape.dims))
        self.constants.append(array)
        return Buffer(array.nbytes, "const", len(self.constants) - 1, label)

    def build(self, comp: Computation, args: list[Value]) -> tuple[Program, Value]:
        program = Program()
        result = self._emit(program, comp, args)
        return program, result

    def _emit(self, program: Program, comp: Computation, args: list[Value],
              units: list[list[phases.Phase]] | None = None) -> Value:
        """Append `comp`'s steps to `program`; its parameters are `args`. Returns its value.
        `units`: what each kernel computes (one or more phases), in an order where each
        runs after what it reads; by default each instruction one kernel. A unit runs when
        the walk over the instructions reaches one of its roots, after the units before it
        (a unit's roots need not be adjacent in that walk)."""
        order = comp.post_order()
        position = {id(i): n for n, i in enumerate(order)}
        if units is None:
            units = [[k] for k in phases.kernels(comp, fallback.why_not)]
        groups = {id(p.root): n for n, unit in enumerate(units) for p in unit}
        done = 0                                # units run so far
        values: dict[int, Value] = {id(p): args[p.parameter_number] for p in comp.parameters}

        def value(inst):
            """inst's value; constants and the ops that only rearrange values are made on
            first use (a unit may run before the walk reaches what it reads)."""
            if id(inst) not in values:
                op = inst.opcode
                if op == "constant":
                    values[id(inst)] = self.constant(inst)
                elif op == "tuple":
                    values[id(inst)] = tuple(value(o) for o in inst.operands)
                elif op == "get-tuple-element":
                    values[id(inst)] = value(inst.operands[0])[inst.attrs["index"]]
                elif op in ("opt-barrier", "add-dependency", "domain"):
                    values[id(inst)] = value(inst.operands[0])
                elif op == "after-all":
                    values[id(inst)] = None
                else:
                    raise UnsupportedError(f"{inst.name} has no value on the host")
            return values[id(inst)]

        for inst in order:
            op = inst.opcode
            if op in ("parameter", "tuple", "get-tuple-element", "opt-barrier",
                      "add-dependency", "domain", "after-all") or \
                    (op == "constant" and id(inst) not in groups):
                continue                   # made on first use (fused scalars never are)
            elif op == "call":
                values[id(inst)] = self._emit(program, inst.attrs["to_apply"],
                                              [value(o) for o in inst.operands])
            elif op == "while":
                values[id(inst)] = self._while(program, inst, value(inst.operands[0]))
            elif op == "conditional":
                values[id(inst)] = self._conditional(program, inst, [value(o) for o in inst.operands])
            elif id(inst) in groups:
                while done <= groups[id(inst)]:
                    unit = units[done]
                    done += 1
                    results = self._unit(program, unit, value, position)
                    stored = [r for p in unit for r in p.stored()]
                    if len(stored) > 1:
                        values.update((id(r), v) for r, v in zip(stored, results))
                    else:
                        values[id(stored[0])] = results
        return value(comp.root)

    def _new(self, program: Program, shape, label: str) -> Value:
        if shape.is_tuple:
            return tuple(self._new(program, s, label) for s in shape.elements)
        if shape.dtype.numpy is None:
            return None
        buf = Buffer(array_bytes(shape), "temp", label=label)
        program.temps.append(buf)
        return buf

    def _unit(self, program, unit: list[phases.Phase], value, position) -> Value:
        """The steps computing one kernel's roots; returns their values."""
        root = unit[0].root
        if root.opcode == "constant":
            return self.constant(root)
        if unit[0].fallback:
            return self._fallback(program, root, unit[0].fallback,
                                  [value(o) for o in root.operands])
        if len(unit) == 1 and len(unit[0].members) == 1 and is_view(root) and \
                isinstance(value(root.operands[0]), Buffer):
            return value(root.operands[0])
        if root.opcode == "fusion":
            comp, inputs = root.attrs["calls"], list(root.operands)
        else:
            inputs = phases.inputs_of(unit)
            comp = phases.computation(unit, position, root.name)
        try:
            steps = self.split(comp) if root.opcode == "fusion" else None
            kernel = None if steps else self.kernel_for(comp)
        except UnsupportedError as e:               # an emitter refused: run the group
            if not self.interpreter:
                raise
            return self._fallback(program, comp.root, str(e), [value(i) for i in inputs],
                                  comp=comp, inputs=inputs)
        if steps:
            return self._emit(program, comp, [value(i) for i in inputs], steps)
        ins = [value(i) for i in inputs] + [self.constant(c) for c in kernel.constants]
        if any(not isinstance(v, Buffer) for v in ins):
            raise UnsupportedError(f"{root.name}: a kernel input is not an array")
        out = self._new(program, comp.root.shape, root.name)
        temps = [Buffer(n, "temp", label=f"{root.name}.tmp") for n in kernel.temps]
        if kernel.scratch_per_thread:
            temps.append(Buffer(kernel.scratch_per_thread * cpu_facts.threads(), "temp",
                                label=f"{root.name}.scratch"))
        program.temps.extend(temps)
        program.steps.append(KernelStep(kernel, leaves(out), ins, temps, root.name))
        return out

    def _fallback(self, program, root, reason, operands, comp=None, inputs=None) -> Value:
        if not self.interpreter:
            raise UnsupportedError(f"{root.opcode} ({root.name}) cannot run here: {reason}",
                                   line=root.line, column=root.column)
        out = self._new(program, root.shape, root.name)
        step = FallbackCall(fallback.FallbackStep(root, reason, comp, inputs), leaves(out),
                            [b for v in operands for b in leaves(v)], len(self.fallbacks))
        self.fallbacks.append(step)
        program.steps.append(step)
        return out

    def _while(self, program, inst, init: Value) -> Value:
        state = self._new(program, inst.shape, inst.name)
        cond, cond_value = self.build(inst.attrs["condition"], [state])
        body, body_value = self.build(inst.attrs["body"], [state])
        state_leaves, results = leaves(state), leaves(body_value)
        # The results are copied into the state after the body. A result that is another
        # state element (a rotation of the loop state) is saved first, so no copy reads a
        # state buffer already overwritten.
        index = {id(s): k for k, s in enumerate(state_leaves)}
        for k, r in enumerate(results):
            if index.get(id(r), k) != k:
                saved = Buffer(r.nbytes, "temp", label=f"{inst.name}.carry{k}")
                body.temps.append(saved)
                body.steps.append(Copy(saved, r))
                results[k] = saved
        scratch = Buffer(0, "temp", label=f"{inst.name}.scratch")
        program.temps.append(scratch)
        program.steps.append(While(state_leaves, leaves(init), cond, cond_value, body,
                                   results, scratch))
        return state

    def _conditional(self, program, inst, operands: list[Value]) -> Value:
        out = self._new(program, inst.shape, inst.name)
        if "branch_computations" in inst.attrs:
            comps, by_index = inst.attrs["branch_computations"], True
        else:
            comps, by_index = (inst.attrs["true_computation"], inst.attrs["false_computation"]), False
        branches = []
        for k, comp in enumerate(comps):
            p, v = self.build(comp, [operands[1 + k]])
            branches.append((p, leaves(v)))
        scratch = Buffer(0, "temp", label=f"{inst.name}.scratch")
        program.temps.append(scratch)
        program.steps.append(Conditional(operands[0], by_index,
                                         [b for v in operands[1:] for b in leaves(v)],
                                         branches, leaves(out), scratch))
        return out


def step_io(step) -> tuple[list[Buffer], list[Buffer]]:
    """(written, read) buffers of one step, as seen from its own program."""
    if isinstance(step, KernelStep):
        return step.outs + step.temps, step.ins + step.temps
    if isinstance(step, FallbackCall):
        return step.outs, step.ins
    if isinstance(step, Copy):
        return [step.dst], [step.src]
    if isinstance(step, While):
        return step.state + [step.scratch], \
            step.init + step.state + [step.scratch] + step.packed
    if isinstance(step, Conditional):
        return step.outs + [step.scratch], [step.selector] + step.operands + [step.scratch]
    raise TypeError(step)


def written_ids(program: Program) -> set[int]:
    """Ids of every buffer the steps of `program` (and the programs they run) write."""
    out: set[int] = set()
    for step in program.steps:
        out.update(id(b) for b in step_io(step)[0])
        if isinstance(step, While):
            out |= written_ids(step.cond) | written_ids(step.body)
        elif isinstance(step, Conditional):
            for branch, _ in step.branches:
                out |= written_ids(branch)
    return out


def kernel_steps(program: Program):
    """Every KernelStep of `program` and of the programs its loops and branches hold, in
    program order (a loop's condition before its body)."""
    for step in program.steps:
        if isinstance(step, KernelStep):
            yield step
        elif isinstance(step, While):
            yield from kernel_steps(step.cond)
            yield from kernel_steps(step.body)
        elif isinstance(step, Conditional):
            for p, _ in step.branches:
                yield from kernel_steps(p)


def is_view(inst: Instruction) -> bool:
    """reshape, copy (buffers are always row-major, whatever the layout says) and a bitcast
    that keeps the row-major byte order: the result is the operand's buffer."""
    if inst.opcode not in ("reshape", "copy", "bitcast"):
        return False
    a, b = inst.operands[0].shape, inst.shape
    if a.is_tuple or b.is_tuple or a.element_type != b.element_type:
        return False
    if inst.opcode != "bitcast":
        return True
    return all(s.layout is None or s.layout.minor_to_major == default_layout(s.rank).minor_to_major
               for s in (a, b))
