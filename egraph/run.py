"""The saturation runner: a prepared egglog e-graph per rule set, one push/pop session per
optimized module, rulesets run one iteration at a time under limits, and a report of what
happened and why it stopped.

Loading a compiled rule set costs from 0.1 s to seconds and a push/pop from 1 to a few
hundred ms, both growing with the size of the rules' egglog text: `prepared()` keeps the
loaded e-graph and every module runs inside `session()`. A module's e-graph holds only the
rules that can match its opcodes and element types (CompiledRules.usable): push and pop
copy every loaded rule, 15-35 us each per call, so modules that can use the same rules
share one e-graph, loaded with them alone. egglog (13.2) keeps the container
values made inside a push (the dims of every type, attribute lists) after the pop, about
0.4 to 2.5 KB per e-node of each session, and frees them only with the e-graph: so a
prepared e-graph is rebuilt once its sessions have held RECYCLE_ENODES e-nodes in all.

An iteration: `analysis` to saturation (types of new terms, and which opcodes occur), fold
requests and their evaluation, host-call requests and their answers (host_calls.py), then
one `(run <phase> 1)`; the request and phase runs take only the rule groups whose opcodes
occur (rule_compiler/gates.py), which match what the whole ruleset would. Between
iterations the runner checks whether anything changed (saturated), the e-node count
(`get-size!` over the term tables) against the node limit, also predicting the next
iteration from the last growth, and the wall time against the time limit. egglog cannot be
interrupted inside an iteration, hence prediction.
"""
from __future__ import annotations

import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterable

from ..dtypes import COMPLEX_PART
from ..errors import HloError
from .bindings import egg
from .callees import Callees
from .encode import Encoding
from .fold import Folder
from .host_calls import MAX_ROUNDS as HOST_ROUNDS, RULESET as HOST_RULESET, HostCalls, \
    table_rows
from .ingest import DECLARATIONS as INGEST_DECLARATIONS, SPAN
from . import schema
from .schema import OPCODES, TERM_CONSTRUCTORS, combined_ruleset, declarations

ANALYSIS_ROUNDS = 64        # bound on one analysis run (it saturates in a few)
# Measured over the corpus, 424 calls: resident memory levels off ~9 MB above its start
# (it grew 155 KB per call without rebuilds). A rebuild costs about three optimize calls,
# once per ~65 corpus modules.
RECYCLE_ENODES = 10_000


@dataclass
class Limits:
    iterations: int = 30
    nodes: int = 200_000
    seconds: float = 60.0


@dataclass
class RunReport:
    """What one e-graph's run did. `seconds` is wall time per phase (encode, ingest,
    analysis, fold, each ruleset, extract, decode); `matches` counts rule firings and
    `rule_seconds` their search-and-apply time."""
    name: str
    iterations: int = 0
    enodes: int = 0
    eclasses: int = 0
    stop: str = "saturated"     # or "iteration limit", "node limit", "time limit"
    seconds: dict[str, float] = field(default_factory=dict)
    matches: Counter = field(default_factory=Counter)
    rule_seconds: Counter = field(default_factory=Counter)
    first_match: dict[str, int] = field(default_factory=dict)  # rule -> its first iteration
    folds: int = 0
    fold_failures: int = 0
    kernels: str = ""           # after fusion: kernels, bytes, the model's time estimate

    def add_time(self, phase: str, seconds: float) -> None:
        self.seconds[phase] = self.seconds.get(phase, 0.0) + seconds

    def summary(self) -> str:
        """A few lines for people (hlo-opt --stats)."""
        phases = ", ".join(f"{p} {s * 1000:.1f} ms" for p, s in self.seconds.items())
        folds = f"{self.folds} folds" + (f" ({self.fold_failures} failed)"
                                         if self.fold_failures else "")
        lines = [f"{self.name}: {self.iterations} iterations, {self.enodes} e-nodes, "
                 f"{self.eclasses} e-classes, {self.stop}; {folds}; {phases}"]
        fired = ", ".join(f"{name} {n}" for name, n in self.matches.most_common() if n)
        if fired:
            lines.append(f"  rules fired: {fired}")
        if self.kernels:
            lines.append(f"  kernels: {self.kernels}")
        slowest = ", ".join(f"{name} {s * 1000:.1f} ms"
                            for name, s in self.rule_seconds.most_common(5) if s >= 1e-3)
        if slowest:
            lines.append(f"  slowest rules: {slowest}")
        return "\n".join(lines)


class PreparedEGraph:
    """An e-graph holding the schema, the ingest and fold rules and a compiled rule set (its
    `rules` that can match, see CompiledRules.usable)."""

    def __init__(self, compiled, rules: tuple[str, ...] | None = None):
        self.compiled = compiled
        self.rules = rules
        self.phases = tuple(name for name in compiled.rulesets
                            if name not in ("analysis", HOST_RULESET))
        self.gates = compiled.gates
        self.opcodes: frozenset[str] = frozenset()          # see_opcodes, per session
        self.combined: dict[tuple[str, ...], str] = {}      # open_ruleset's, per session
        self.folder = Folder(compiled.folds)
        self.host = HostCalls(compiled.host)
        self.egraph = egg.EGraph()
        self.broken = False
        self.enodes_held = 0        # e-nodes of all sessions so far (see RECYCLE_ENODES)
        for text in (declarations(), INGEST_DECLARATIONS, self.folder.declarations()):
            self.run(text)
        compiled.load(self.egraph, rules)
        self.rule_names = {name: rule.name for name, rule in compiled.rule_names.items()}

    def run(self, text: str) -> list:
        return self.egraph.run_program(*self.egraph.parse_program(text))

    @contextmanager
    def session(self):
        """Everything between push and pop is forgotten afterwards. An egglog error (an
        illegal merge from an unsound rule, a Rust panic) leaves the e-graph half-updated:
        it is marked broken and rebuilt on next use."""
        self.egraph.run_program(egg.Push(1))
        self.host.reset()
        self.opcodes = frozenset()
        self.combined = {}
        try:
            yield self
            self.enodes_held += self.size()
        except BaseException:
            self.broken = True
            raise
        self.egraph.run_program(egg.Pop(SPAN, 1))

    @property
    def worn(self) -> bool:
        """Rebuild before the next session: egglog's leftovers have grown (module doc)."""
        return self.broken or self.enodes_held >= RECYCLE_ENODES

    def see_opcodes(self) -> None:
        """Read which opcodes the terms have (after analysis, which records them)."""
        if self.gates:
            self.opcodes = frozenset(op for (op,) in table_rows(self.egraph, OPCODES))

    def open_ruleset(self, name: str) -> str | None:
        """What to run for ruleset `name`: its groups whose opcodes all occur
        (rule_compiler/gates.py), as one ruleset; None when no group may match."""
        groups = self.gates.get(name)
        if groups is None:
            return name
        members = tuple(group for group, ops in groups if ops <= self.opcodes)
        if len(members) == len(groups):
            return name
        if len(members) <= 1:
            return members[0] if members else None
        if members not in self.combined:
            self.combined[members] = f"{name}/open{len(self.combined)}"
            self.run(combined_ruleset(self.combined[members], members))
        return self.combined[members]

    def same_class(self, row_a: int, row_b: int) -> bool:
        """Are two encoding rows' terms in one e-class?"""
        try:
            self.run(schema.check(schema.eq(schema.atom("Nd", row_a), schema.atom("Nd", row_b))))
        except egg.EggSmolError:
            return False
        return True

    def size(self) -> int:
        """Term e-nodes (hidden tables excluded)."""
        args = [egg.Lit(SPAN, egg.String(name)) for name in TERM_CONSTRUCTORS]
        _, value = self.egraph.eval_expr(egg.Call(SPAN, "get-size!", args))
        return self.egraph.value_to_i64(value)


_PREPARED: dict[tuple, PreparedEGraph] = {}
_CACHE_SIZE = 6
_USABLE: dict[tuple, tuple] = {}        # (id(compiled), opcodes, types) -> (compiled, rules)


def prepared(compiled, opcodes: Iterable[str] | None = None,
             dtypes: Iterable[str] = ()) -> PreparedEGraph:
    """The process-wide e-graph for `compiled` (pipeline.compiled_rules keeps compiled rule
    sets, so the same rules give the same object), loaded with the rules that can match on
    terms of `opcodes` and element types `dtypes` (every rule when `opcodes` is None).
    Modules that can use the same rules share one e-graph."""
    rules = None
    if opcodes is not None:
        types = frozenset(dtypes)
        key = (id(compiled), frozenset(opcodes) | Folder.BUILDS,
               types | {COMPLEX_PART[t] for t in types if t in COMPLEX_PART})
        known = _USABLE.get(key)
        if known is None or known[0] is not compiled:
            if len(_USABLE) >= 64 * _CACHE_SIZE:
                _USABLE.clear()
            known = _USABLE[key] = (compiled, compiled.usable(key[1], key[2]))
        rules = known[1]
    key = (id(compiled), rules)
    entry = _PREPARED.pop(key, None)
    if entry is not None and (entry.worn or entry.compiled is not compiled):
        entry = None                                # freed before its successor is built
    if entry is None:
        if len(_PREPARED) >= _CACHE_SIZE:
            _PREPARED.pop(next(iter(_PREPARED)))
        entry = PreparedEGraph(compiled, rules)
    _PREPARED[key] = entry                          # last used last: evicted last
    return entry


def saturate(prep: PreparedEGraph, encoding: Encoding, callees: Callees, limits: Limits,
             report: RunReport) -> None:
    """Run every phase of the rule set on the loaded computation, within `limits`."""
    start = time.perf_counter()
    size = prev = prep.size()
    last_seconds = 0.0
    report.stop = "saturated"
    for phase in prep.phases:
        while True:
            if report.iterations >= limits.iterations:
                report.stop = "iteration limit"
                break
            growth = size / max(prev, 1)
            elapsed = time.perf_counter() - start
            if size >= limits.nodes or size * growth > limits.nodes:
                report.stop = "node limit"
                break
            if elapsed + last_seconds * growth > limits.seconds:
                report.stop = "time limit"
                break
            t0 = time.perf_counter()
            changed = _iteration(prep, phase, encoding, callees, report)
            last_seconds = time.perf_counter() - t0
            report.iterations += 1
            prev, size = size, prep.size()
            if not changed:
                break
        if report.stop != "saturated":
            break
    report.enodes = size


def _iteration(prep: PreparedEGraph, phase: str, encoding: Encoding, callees: Callees,
               report: RunReport) -> bool:
    """One round; True if the e-graph changed."""
    _timed_run(prep, "analysis", ANALYSIS_ROUNDS, report)
    folds = 0
    if prep.folder.ops:
        _timed_run(prep, "fold", 1, report)
        t0 = time.perf_counter()
        folds = prep.folder.apply(prep.egraph, encoding, callees)
        report.add_time("fold", time.perf_counter() - t0)
        report.folds += folds
        report.fold_failures = prep.folder.failures
        if folds:
            _timed_run(prep, "analysis", ANALYSIS_ROUNDS, report)
    prep.see_opcodes()
    answers = _answer_host_calls(prep, report)
    ruleset = prep.open_ruleset(phase)
    if ruleset is None:
        return folds > 0 or answers > 0
    result = _timed_run(prep, ruleset, 1, report, phase)
    for name, n in result.num_matches_per_rule.items():
        rule = prep.rule_names.get(name, name)
        report.matches[rule] += n
        if n:
            report.first_match.setdefault(rule, report.iterations)
    for name, t in result.search_and_apply_time_per_rule.items():
        # egglog 13.2 stores milliseconds in the timedelta's microseconds field
        report.rule_seconds[prep.rule_names.get(name, name)] += t.total_seconds() * 1000
    return result.updated or folds > 0 or answers > 0


def _answer_host_calls(prep: PreparedEGraph, report: RunReport) -> int:
    """Request rounds until nothing new is asked (a nested call asks once the call inside
    it is answered); returns the number of answers written."""
    ruleset = prep.open_ruleset(HOST_RULESET)
    if not prep.host.functions or ruleset is None:
        return 0
    total = 0
    for _ in range(HOST_ROUNDS):
        _timed_run(prep, ruleset, 1, report, HOST_RULESET)
        t0 = time.perf_counter()
        answers = prep.host.answer(prep.egraph)
        report.add_time("host", time.perf_counter() - t0)
        total += answers
        if not answers:
            break
    return total


def _timed_run(prep: PreparedEGraph, ruleset: str, rounds: int, report: RunReport,
               phase: str = ""):
    """Run `ruleset`, its time counted as `phase`'s (default: its own name)."""
    phase = phase or ruleset
    t0 = time.perf_counter()
    try:
        [output] = prep.run(schema.run(ruleset, rounds))
    except egg.EggSmolError as e:
        raise HloError(f"saturation failed in ruleset {phase}: {e}") from None
    report.add_time(phase, time.perf_counter() - t0)
    return output.report
