"""Why the optimized module looks as it does: `optimize(..., explain=True)`'s Explanation.

Three parts, each read from what the run left behind:

* rules: how often each rule matched (RunReport.matches) and where it is written (file:line);
* kernels: per kernel of the output, the target model's estimated time after (the kernel as
  the model prices it) and before: the input's kernels whose value it now computes, each
  priced alone as it was in the input (an input fusion by its fused body; an input kernel
  goes to the output kernel that writes its value, else to one that computes it inside,
  else to one computing a value of its fused body). Input kernels no output kernel
  computes are listed apart (their value became a parameter, a view, or is not needed);
* the diff: the fate of each input instruction (kept; merged, when another input
  instruction's identical term is the output's; rewritten into an output instruction of
  another term; removed, when nothing needs its value), and each new output instruction
  with the rules that made it.

Provenance: an e-class is a set of equal values, so an input instruction maps to the output
instruction extracted for its e-class. Rules compiled for explaining also record, per
match, each term their right side builds as (rule, opcode, e-class) in REWROTE
(rule_compiler/rule_emit.py). An output instruction is *new* when no input row of its
e-class has its opcode and operand e-classes; it is attributed to the rules that built a
term of its opcode in its e-class (a constant or splat without one: constant folding).
Two rules that build the same opcode in one e-class are both named.
"""
from __future__ import annotations

import os
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field

from ..ir import Instruction, Module
from ..kernels import executed_computations
from ..targets import kernel_view

FOLDING = "constant folding"
SHOWN_RULES = 4             # rules named per line of the text before "+N more"


@dataclass
class RuleUse:
    rule: str
    matches: int
    file: str                   # absolute (the text shows it relative to the working folder)
    line: int


@dataclass
class KernelCost:
    computation: str
    kernel: str                 # the output instruction that runs as the kernel
    members: list[str]          # output instructions it computes (itself, or a fusion's body)
    inputs: list[str]           # input kernels whose value it computes
    before_ns: float
    after_ns: float


@dataclass
class GoneKernel:
    computation: str
    input: str
    before_ns: float
    now: str | None             # the output instruction holding its value, if any


@dataclass
class Fate:
    computation: str
    input: str
    opcode: str
    fate: str                   # kept | merged | rewritten | removed
    output: str | None = None
    output_opcode: str | None = None
    kernel: str | None = None   # the output kernel computing it, if another instruction
    rules: list[str] = field(default_factory=list)     # rewritten: rules on its e-class


@dataclass
class NewInstruction:
    computation: str
    output: str
    opcode: str
    replaces: list[str]         # input instructions of its e-class
    made_by: list[str]          # rules (or "constant folding")
    kernel: str | None = None


@dataclass
class Explanation:
    module: str
    entry: str                  # names in other computations are written computation/name
    target: str
    iterations: int
    stop: str
    rules: list[RuleUse]
    kernels: list[KernelCost]
    gone_kernels: list[GoneKernel]
    fates: list[Fate]
    new: list[NewInstruction]
    before_ns: float            # the model's estimate of the input module, and the output's
    after_ns: float
    report: object = None       # the run.RunReport (not part of as_json)

    def as_json(self) -> dict:
        out = asdict(self)
        out.pop("report")
        return out

    def text(self) -> str:
        """The report for people (hlo-opt --explain)."""
        return _render(self)

    def at(self, computation: str, name: str) -> str:
        return name if computation == self.entry else f"{computation}/{name}"


def explain(module: Module, out: Module, model, target: str, report, compiled, encoding,
            row_class, rewrote: list[tuple[str, str, int]], made: dict) -> Explanation:
    """`made`: per input computation's name, its output (pre-fusion) e-class -> instruction
    map (decode's); `rewrote`: REWROTE's rows (rule, opcode, compact class)."""
    rules = {r.name: r for r in compiled.rule_names.values()}
    uses = [RuleUse(name, n, rules[name].pos.file, rules[name].pos.line)
            for name, n in sorted(report.matches.items(), key=lambda x: (-x[1], x[0]))
            if n and name in rules]
    by_class: dict[int, set[str]] = defaultdict(set)
    by_made: dict[tuple[str, int], set[str]] = defaultdict(set)
    for rule, opcode, c in rewrote:
        by_class[c].add(rule)
        if opcode:
            by_made[opcode, c].add(rule)
    input_rows: dict[int, list[int]] = defaultdict(list)
    for r in range(len(encoding.opcode)):
        input_rows[int(row_class[r])].append(r)
    explanation = Explanation(module.name, module.entry.name, target, report.iterations,
                              report.stop, uses, [], [], [], [], model.module_cost(module),
                              model.module_cost(out))
    outputs = {c.name: c for c in executed_computations(out)}
    for part in encoding.parts:
        name = part.computation.name
        classes = made.get(name)
        if classes is None:
            continue
        diff = _Diff(name, classes, encoding, row_class, input_rows, by_class, by_made,
                     report.folds)
        kernel_of = _kernels(outputs.get(name), diff.class_of_name, model)
        diff.run(part, kernel_of)
        explanation.fates += diff.fates
        explanation.new += diff.new
        _price(explanation, outputs.get(name), part, model, row_class, kernel_of, classes)
    return explanation


class _Diff:
    """The fates and new instructions of one computation."""

    def __init__(self, computation: str, classes: dict[int, Instruction], encoding, row_class,
                 input_rows, by_class, by_made, folds: int):
        self.computation, self.classes, self.encoding = computation, classes, encoding
        self.row_class, self.input_rows = row_class, input_rows
        self.by_class, self.by_made, self.folds = by_class, by_made, folds
        self.class_of = {id(inst): c for c, inst in classes.items()}
        self.class_of_name = {inst.name: c for c, inst in classes.items()}
        self.fates: list[Fate] = []
        self.new: list[NewInstruction] = []

    def same_term(self, row: int, inst: Instruction) -> bool:
        """Is the input row's term the output instruction's (opcode, operand e-classes)?"""
        enc = self.encoding
        return enc.opcode[row] == inst.opcode and \
            [int(self.row_class[k]) for k in enc.operands[row]] == \
            [self.class_of[id(o)] for o in inst.operands]

    def folded(self, out: Instruction, rules: list[str]) -> list[str]:
        """`rules`, or constant folding for a constant no rule made when folds happened."""
        if not rules and self.folds and out.opcode in ("constant", "broadcast"):
            return [FOLDING]
        return rules

    def run(self, part, kernel_of: dict[int, str]) -> None:
        # merged: several input instructions' values in one e-class (renamed alone: kept)
        sharing = Counter(int(self.row_class[row]) for inst, row, _ in part.instructions
                          if inst.opcode != "parameter")
        for inst, row, _ in part.instructions:
            if inst.opcode == "parameter":
                continue
            c = int(self.row_class[row])
            out = self.classes.get(c)
            if out is None:
                self.fates.append(Fate(self.computation, inst.name, inst.opcode, "removed"))
                continue
            if not self.same_term(row, out):
                fate, rules = "rewritten", self.folded(out, sorted(self.by_class.get(c, ())))
            else:
                alone = sharing[c] == 1 or out.name == inst.name
                fate, rules = ("kept" if alone else "merged"), []
            kernel = kernel_of.get(c)
            self.fates.append(Fate(self.computation, inst.name, inst.opcode, fate, out.name,
                                   out.opcode, kernel if kernel != out.name else None, rules))
        origins = {id(i): i.name for i, _, _ in part.instructions}
        for c, out in self.classes.items():
            rows = self.input_rows.get(c, ())
            if any(self.same_term(r, out) for r in rows):
                continue
            made_by = self.folded(out, sorted(self.by_made.get((out.opcode, c), ())))
            replaces = sorted({origins[id(self.encoding.origin[r])] for r in rows
                               if id(self.encoding.origin[r]) in origins})
            kernel = kernel_of.get(c)
            self.new.append(NewInstruction(self.computation, out.name, out.opcode, replaces,
                                           made_by, kernel if kernel != out.name else None))


def _kernels(comp, class_of_name: dict[str, int], model) -> dict[int, str]:
    """e-class -> the output kernel computing it (one writing it first, then one holding
    it), over the kernels of the fused output computation `comp`."""
    inside: dict[int, str] = {}
    written: dict[int, str] = {}
    for inst in comp.instructions if comp is not None else ():
        if not model.runs_as_kernel(inst):
            continue
        view = kernel_view(inst)
        for names, out in ((view.members, inside), (view.outputs, written)):
            for m in names:
                if m.name in class_of_name:
                    out.setdefault(class_of_name[m.name], inst.name)
    return {**inside, **written}


def _price(explanation: Explanation, comp, part, model, row_class, kernel_of: dict[int, str],
           classes: dict[int, Instruction]) -> None:
    """Each kernel of the fused output computation `comp` with its cost, and the input
    kernels of `part` it now computes with theirs (module doc)."""
    kernels: dict[str, KernelCost] = {}
    for inst in comp.instructions if comp is not None else ():
        if model.runs_as_kernel(inst):
            view = kernel_view(inst)
            kernels[inst.name] = KernelCost(comp.name, inst.name, [m.name for m in view.members],
                                            [], 0.0, model.kernel_cost(view))
    name = part.computation.name
    for inst, row, rows in part.instructions:
        if not model.runs_as_kernel(inst):
            continue
        cost = model.kernel_cost(kernel_view(inst))
        value = int(row_class[row])
        home = kernel_of.get(value) or next(
            (kernel_of[c] for c in map(int, row_class[rows.start:rows.stop]) if c in kernel_of),
            None)
        if home in kernels:
            kernels[home].inputs.append(inst.name)
            kernels[home].before_ns += cost
        else:
            now = classes.get(value)
            explanation.gone_kernels.append(GoneKernel(name, inst.name, cost,
                                                       now.name if now is not None else None))
    explanation.kernels += kernels.values()


def rule_path(path: str) -> str:
    """A rule file's path relative to the working folder when it is inside it."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def _names(names: list[str], shown: int = 8) -> str:
    more = f" +{len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def _render(e: Explanation) -> str:
    lines = [f"explain {e.module} (target {e.target}: {e.iterations} iterations, {e.stop})",
             "rules that matched (matches, where the rule is written):"]
    lines += [f"  {u.matches:6}  {u.rule:32} {rule_path(u.file)}:{u.line}" for u in e.rules] or \
        ["  (none)"]
    lines.append(f"kernels (the {e.target} model's estimate, before -> after: the input "
                 "kernels each one computes now):")
    for k in e.kernels:
        inputs = f"from input {_names(k.inputs)}" if k.inputs else "no input kernel"
        lines.append(f"  {e.at(k.computation, k.kernel)}: {_ns(k.before_ns)} -> "
                     f"{_ns(k.after_ns)}; {inputs}")
        if k.members != [k.kernel]:
            lines.append(f"      computes {_names(k.members)}")
    for g in e.gone_kernels:
        now = f"its value is {g.now} now" if g.now else "its value is no longer computed"
        lines.append(f"  {e.at(g.computation, g.input)}: {_ns(g.before_ns)} -> none ({now})")
    lines.append(f"  module: {_ns(e.before_ns)} -> {_ns(e.after_ns)}")
    lines.append("changes (input instruction: what became of it):")
    kept = 0
    for f in e.fates:
        if f.fate == "kept":
            kept += 1
            continue
        what = {"merged": f"merged into {f.output} (the same operation on equal operands)",
                "rewritten": f"rewritten into {f.output} ({f.output_opcode})"
                             + _by(f.rules),
                "removed": "removed (no output instruction computes its value)"}[f.fate]
        fused = f", fused into {f.kernel}" if f.kernel else ""
        lines.append(f"  {e.at(f.computation, f.input)} ({f.opcode}): {what}{fused}")
    lines.append(f"  {kept} input instructions kept as they were")
    lines.append("new instructions (output instruction: the rule that made it):")
    for n in e.new:
        replaces = f"; computes what {_names(n.replaces)} did" if n.replaces else ""
        fused = f", fused into {n.kernel}" if n.kernel else ""
        made = _by(n.made_by).strip() or "no rule recorded"
        lines.append(f"  {e.at(n.computation, n.output)} ({n.opcode}): {made}{replaces}{fused}")
    if not e.new:
        lines.append("  (none)")
    return "\n".join(lines) + "\n"


def _by(rules: list[str]) -> str:
    if not rules:
        return ""
    more = f" +{len(rules) - SHOWN_RULES} more" if len(rules) > SHOWN_RULES else ""
    return " by " + ", ".join(rules[:SHOWN_RULES]) + more


def _ns(ns: float) -> str:
    return f"{ns:,.0f} ns" if ns >= 100 else f"{ns:.1f} ns"
