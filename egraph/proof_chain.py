"""`hlo-equiv A B --explain`: the rules that link two proved-equal roots, in order.

egglog-python 13.2 exposes no proof mode, so the chain is found by search, each trial a
proof of its own (sound by construction): start from the rules that matched in the proving
run and drop chunks of them while the two roots still end in one e-class (delta debugging,
complements only), then order the rules left by the iteration each first matched in a run
with only them, and show A's root after each step: the cheapest term of its e-class once
the rules up to that step have run. A trial budget and a time budget bound the search; a
chain found within them is 1-minimal (dropping any one rule breaks the proof), and the
chain says so when the budget ran out first. Constant folding is not a rule and always runs.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

from ..ir import Instruction, Module
from ..printer import format_literal
from .explain import rule_path
from .pipeline import compiled_rules, optimize, prove_equivalent

MAX_TRIALS = 64
MAX_SECONDS = 60.0
TERM_CHARS = 160             # a step's term is cut here


@dataclass
class Step:
    rule: str
    file: str
    line: int
    iteration: int          # the first iteration it matched in, with the chain's rules only
    term: str               # A's root after the rules up to this one


@dataclass
class ProofChain:
    start: str              # A's root with no rules (common subexpressions merged, folded)
    goal: str               # B's root, likewise
    steps: list[Step] = field(default_factory=list)
    minimal: bool = True
    trials: int = 0
    folds: int = 0          # constant folds in the chain's run

    def as_json(self) -> dict:
        return asdict(self)

    def text(self) -> str:
        if not self.steps and self.minimal:
            return ("no rule needed: the roots are one term once common subexpressions "
                    f"merge and constants fold\n  A, B:         {self.start}\n")
        lines = [f"chain of {len(self.steps)} rules ({self.trials} trial proofs; "
                 + ("1-minimal: without any one of them the proof fails)" if self.minimal
                    else "NOT minimal: the trial budget ran out)"),
                 f"  A:            {self.start}"]
        lines += [f"  {s.rule} ({rule_path(s.file)}:{s.line}), iteration {s.iteration}:\n"
                  f"                {s.term}" for s in self.steps]
        lines.append(f"  B:            {self.goal}")
        if self.folds:
            lines.append(f"  (with {self.folds} constant folds, which are not rules)")
        return "\n".join(lines) + "\n"


def proof_chain(a: Module, b: Module, fired: list[str], rules="default", fp_mode: str = "xla",
                time_limit: float = 10.0, max_trials: int = MAX_TRIALS,
                max_seconds: float = MAX_SECONDS) -> ProofChain:
    """The chain for two modules proved equal with `rules`, from the rules that matched
    (`fired`, in any order)."""
    compiled = compiled_rules(rules, fp_mode)
    deadline = time.perf_counter() + max_seconds
    chain = ProofChain(_root_term(a, compiled.restricted(())),
                       _root_term(b, compiled.restricted(())))

    def proves(names: list[str]) -> bool | None:
        if chain.trials >= max_trials or time.perf_counter() > deadline:
            return None
        chain.trials += 1
        return prove_equivalent(a, b, compiled.restricted(names), fp_mode, time_limit)[0]

    kept, chain.minimal = _minimize(sorted(fired), proves)
    same, report = prove_equivalent(a, b, compiled.restricted(kept), fp_mode, time_limit)
    chain.folds = report.folds
    positions = {r.name: (r.pos.file, r.pos.line) for r in compiled.rule_names.values()}
    order = sorted(kept, key=lambda r: (report.first_match.get(r, 1 << 30), positions[r]))
    for i, name in enumerate(order):
        file, line = positions[name]
        chain.steps.append(Step(name, file, line, report.first_match.get(name, -1),
                                _root_term(a, compiled.restricted(order[:i + 1]))))
    return chain


def _minimize(items: list[str], proves) -> tuple[list[str], bool]:
    """Delta debugging over complements: a sublist of `items` that still proves, and
    whether it is 1-minimal (False when `proves` answered None: out of budget)."""
    n = 2
    while len(items) >= 2:
        size = -(-len(items) // n)
        chunks = [items[i:i + size] for i in range(0, len(items), size)]
        for chunk in chunks:
            rest = [x for x in items if x not in chunk]
            answer = proves(rest)
            if answer is None:
                return items, False
            if answer:
                items, n = rest, max(n - 1, 2)
                break
        else:
            if n >= len(items):
                break
            n = min(len(items), 2 * n)
    if len(items) == 1:             # the proof may need no rule at all
        answer = proves([])
        if answer is None:
            return items, False
        if answer:
            items = []
    return items, True


def _root_term(module: Module, compiled) -> str:
    """The cheapest term of the entry root's e-class under `compiled`, as an expression."""
    out = optimize(module, compiled, fusion=False, verify=False)
    text = _expression(out.entry.root, 6)
    return text if len(text) <= TERM_CHARS else text[:TERM_CHARS - 3] + "..."


def _expression(inst: Instruction, depth: int) -> str:
    if inst.opcode == "parameter":
        return inst.name
    if inst.opcode == "constant":
        scalar = not inst.shape.is_tuple and inst.shape.rank == 0
        return format_literal(inst.literal, inst.shape) if scalar else f"constant({inst.shape})"
    if depth == 0 or not inst.operands:
        return f"{inst.opcode}(...)" if inst.operands else f"{inst.opcode}()"
    return f"{inst.opcode}({', '.join(_expression(o, depth - 1) for o in inst.operands)})"
