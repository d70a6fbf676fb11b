"""Rule sets: `.rules` files -> checked egglog rules, compiled once per process.

    rule_file = load_rule_set(["default"])           # or "none", a file, a folder
    compiled = compile_rules(rule_file, fp_mode="xla")
    egraph.run_program(*egraph.parse_program(schema.declarations()))
    compiled.load(egraph)                            # prelude, then every ruleset's rules
    # ... (run-schedule (saturate (run analysis)) (run simplify)) ...
    compiled.rule_names["mul_one#1"]                 # -> the DSL Rule, for statistics

Rules read what the schema's `analysis` ruleset derives (`tyof`, and the constant analysis
left-side constants match), so analysis must run to saturation before each rewrite round.
Every ruleset named in the files is declared, and `simplify` and `fusion` always are, even
when no rule of the requested mode is in them.

Floating-point modes are ordered strict < xla < fast: a rule runs when its mode is at most
the requested one. Compilation is cached on the rules' content and the mode.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import re
import tempfile
from collections.abc import Iterable
from importlib import resources

from ..errors import HloError
from ..fusion.policy import FusionPolicy
from ..grammar.rules_parser import (MODES, Fuse, Limit, RawEgglog, Rule, RuleFile,
                                    check_unique_names, load_rules)
from ..egraph.host_calls import RULESET as HOST_RULESET, declarations as host_declarations
from .rule_analysis import analyze_fold, analyze_rule
from .gates import Gates, Needs, can_match, needs
from .rule_emit import CLASS_DECLARATIONS, REWROTE_DECLARATION, emit_rule, rule_command
from .rule_functions import FUNCTIONS
from .rule_ir import FoldIR
from ..egraph.schema import declarations

PHASES = ("simplify",)     # always declared, so a schedule may name it

def load_rule_set(specs: list[str]) -> RuleFile:
    """`default` (the rules shipped in hlo_opt.rules/default), `none`, or paths of rule files
    or folders of them; several specs merge, and a name defined twice is an error."""
    out = RuleFile([], [])
    loaded: set[str] = set()
    for spec in specs:
        if spec == "none":
            continue
        if spec == "default":
            with resources.as_file(resources.files("hlo_opt.rules").joinpath("default")) as d:
                files = rule_files(str(d))
        elif os.path.isdir(spec):
            files = rule_files(spec)
        elif os.path.exists(spec):
            files = [spec]
        else:
            raise HloError("no such rule file or folder (expected default, none or a path)", spec)
        for path in files:
            out.extend(load_rules(path, _loaded=loaded))
    check_unique_names(out)
    return out


def rule_files(folder: str) -> list[str]:
    if not os.path.isdir(folder):           # an installed package without default rules
        return []
    return sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".rules"))


def mode_allows(rule_mode: str, fp_mode: str) -> bool:
    return MODES.index(rule_mode) <= MODES.index(fp_mode)


@dataclasses.dataclass(frozen=True)
class CompiledRules:
    fp_mode: str
    prelude: tuple[str, ...]                 # ruleset declarations and the functions' tables
    rulesets: dict[str, tuple[str, ...]]     # ruleset -> its commands (rules, raw blocks)
    rule_names: dict[str, Rule]              # egglog :name -> the DSL rule it came from
    folds: tuple[FoldIR, ...]
    skipped: tuple[Rule, ...]                # rules whose mode is beyond fp_mode
    origins: dict[str, object]               # command -> Rule or RawEgglog, for errors
    host: tuple[str, ...]                    # the host functions the rules call
    gates: dict[str, tuple[tuple[str, frozenset[str]], ...]]   # gates.py: ruleset -> groups
    # command -> what it needs before it can match (gates.Needs); raw blocks need nothing
    needs: dict[str, Needs] = dataclasses.field(default_factory=dict)
    fuses: tuple[Fuse, ...] = ()             # fusion legality (fusion/policy.py reads them)
    limits: tuple[Limit, ...] = ()
    explain: bool = False                    # rules record what they build (rule_emit.REWROTE)

    def commands(self, rules: Iterable[str] | None = None) -> list[str]:
        """The program: the prelude, then the rulesets' commands (those in `rules` only)."""
        chosen = [c for cmds in self.rulesets.values() for c in cmds]
        if rules is not None:
            keep = set(rules)
            chosen = [c for c in chosen if c in keep]
        return [*self.prelude, *chosen]

    def program(self, rules: Iterable[str] | None = None) -> str:
        return "\n".join(self.commands(rules)) + "\n"

    def usable(self, opcodes: Iterable[str], dtypes: Iterable[str]) -> tuple[str, ...]:
        """The commands that can ever match on terms of these opcodes and element types: a
        rule whose query names an opcode (or an element-type class) that no term has, nor
        any usable rule builds, never fires. Leaving such rules out of the e-graph is exact,
        and it matters: egglog copies every loaded rule on each push and pop (15-35 us a
        rule, every optimize call)."""
        have, types = set(opcodes), set(dtypes)
        todo = [c for cmds in self.rulesets.values() for c in cmds]
        chosen: set[str] = set()
        grew = True
        while grew:
            grew = False
            for command in todo:
                need = self.needs.get(command)
                if need is None or can_match(need, have, types):
                    chosen.add(command)
                    if need is not None:
                        have |= need.builds
                        types |= need.makes
                    grew = True
            todo = [c for c in todo if c not in chosen]
        return tuple(c for cmds in self.rulesets.values() for c in cmds if c in chosen)

    def restricted(self, names: Iterable[str]) -> CompiledRules:
        """The same rule set with only the DSL rules named `names` (their variants and host
        requests); raw egglog blocks, folds and fusion declarations stay."""
        keep = set(names)

        def kept(command: str) -> bool:
            origin = self.origins.get(command)
            return not isinstance(origin, Rule) or origin.name in keep
        rulesets = {name: tuple(c for c in cmds if kept(c)) for name, cmds in self.rulesets.items()}
        return dataclasses.replace(self, rulesets=rulesets, rule_names={
            n: r for n, r in self.rule_names.items() if r.name in keep})

    def load(self, egraph, rules: Iterable[str] | None = None) -> None:
        """Add the rules (those in `rules` only) to an egglog EGraph that already has
        schema.declarations().

        The program goes through a file and egglog's `include`: Rust parses it directly, which
        avoids the Python binding's parse cost (quadratic in the text of one call)."""
        from egglog.bindings import EggSmolError, Include, RustSpan
        text = self.program(rules)
        with tempfile.TemporaryDirectory(prefix="hlo-rules-") as folder:
            path = os.path.join(folder, "rules.egg")
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            try:
                egraph.run_program(Include(RustSpan("", 0, 0), path))
            except EggSmolError as e:
                raise self._locate(str(e)) from None

    def _locate(self, message: str) -> HloError:
        """The egglog error as an HloError at the rule (or raw block) that caused it."""
        message = message.replace(" of rules.egg", "")
        m = re.search(r"In (\d+):(\d+)", message)
        if m:
            line = int(m.group(1))
            for command in self.commands():
                n = command.count("\n") + 1
                if line <= n:
                    origin = self.origins.get(command)
                    if isinstance(origin, RawEgglog) and line > 1:     # verbatim lines
                        return HloError(f"egglog rejected this: {message}", origin.pos.file,
                                        origin.pos.line + line - 1, int(m.group(2)))
                    if origin is not None:
                        return HloError(f"egglog rejected this: {message}", origin.pos.file,
                                        origin.pos.line, origin.pos.column)
                    break
                line -= n
        return HloError(f"egglog rejected the compiled rules: {message}")


def compile_rules(rule_file: RuleFile, fp_mode: str = "xla", explain: bool = False
                  ) -> CompiledRules:
    """The rule file's rules for `fp_mode`; with `explain`, each rule also records the terms
    it builds (rule_emit.REWROTE), which costs an insert per built term per match."""
    if fp_mode not in MODES:
        raise HloError(f"unknown floating-point mode '{fp_mode}' (expected one of "
                       f"{', '.join(MODES)})")
    key = (tuple((r, r.pos) for r in rule_file.rules), tuple((r, r.pos) for r in rule_file.raw),
           tuple((f, f.pos) for f in rule_file.folds))
    compiled = _compile(key, fp_mode, explain)
    if not rule_file.fuses and not rule_file.limits:
        return compiled
    FusionPolicy(rule_file.fuses, rule_file.limits, "cpu")     # reports bad guards now
    return dataclasses.replace(compiled, fuses=tuple(rule_file.fuses),
                               limits=tuple(rule_file.limits))


@functools.lru_cache(maxsize=16)
def _compile(key, fp_mode: str, explain: bool) -> CompiledRules:
    rules, raws, folds = ([item for item, _ in part] for part in key)
    rulesets: dict[str, list[str]] = {phase: [] for phase in PHASES}
    names: dict[str, Rule] = {}
    origins: dict[str, object] = {}
    calls: dict[str, set] = {}
    needed: dict[str, Needs] = {}
    skipped = []
    declared = set(re.findall(r"\(ruleset (\S+?)\)", declarations()))
    gates = Gates(declared | {raw.ruleset for raw in raws})
    for rule in rules:
        ir = analyze_rule(rule)          # every rule is checked, whatever the mode
        if not mode_allows(rule.mode, fp_mode):
            skipped.append(rule)
            continue
        variants, requests, used = emit_rule(ir, explain)
        for fn, args in used.items():
            calls.setdefault(fn, set()).update(args)
        for i, (query, actions) in enumerate(variants):
            name = rule.name if len(variants) == 1 else f"{rule.name}#{i}"
            command = rule_command(query, actions, gates.ruleset(rule.ruleset, query), name)
            needed[command] = needs(query, actions)
            rulesets.setdefault(rule.ruleset, []).append(command)
            names[name] = rule
            origins[command] = rule
        for i, (query, action) in enumerate(requests):
            command = rule_command(query, action, gates.ruleset(HOST_RULESET, query),
                                   f"{rule.name}/request{i}")
            needed[command] = needs(query, action)
            rulesets.setdefault(HOST_RULESET, []).append(command)
            origins[command] = rule
    for raw in raws:
        rulesets.setdefault(raw.ruleset, []).append(raw.text)
        needed[raw.text] = needs("", raw.text)
        origins[raw.text] = raw
    fold_irs = tuple(analyze_fold(f) for f in folds)
    for item in (*rules, *raws, *folds):     # declared even when no rule runs in this mode
        rulesets.setdefault(item.ruleset, [])
    prelude = [d for name in rulesets if name not in declared for d in gates.declarations(name)]
    prelude.append(CLASS_DECLARATIONS)
    if explain:
        prelude.append(REWROTE_DECLARATION)
    facts = [FUNCTIONS[fn].facts(args) for fn, args in sorted(calls.items())
             if FUNCTIONS[fn].facts is not None]
    host = tuple(sorted(fn for fn in calls if FUNCTIONS[fn].host))
    prelude += facts + [host_declarations(FUNCTIONS[fn]) for fn in host]
    return CompiledRules(fp_mode, tuple(prelude),
                         {name: tuple(cmds) for name, cmds in rulesets.items()}, names,
                         fold_irs, tuple(skipped), origins, host, gates.table(), needed,
                         explain=explain)
