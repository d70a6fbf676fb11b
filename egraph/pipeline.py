"""`optimize(module)`: encode -> saturate -> extract -> decode.

The entry computation and, recursively, the bodies, conditions and branches of its while and
conditional instructions are encoded into one e-graph (calls and fusions inlined), saturated
once, and extracted one computation at a time: each keeps its interface (parameters, root
shape) and may use only its own parameters. One e-graph per module, because a push/pop of
an e-graph costs ~0.03 ms per loaded rule (~10 ms with the default rules). Other called
computations (reducers, comparators) are kept as they are.
"""
from __future__ import annotations

import os
import time
from importlib import resources

import numpy as np

from .. import verifier
from ..fusion import unroll
from ..fusion.outline import fuse_module
from ..fusion.policy import FusionPolicy
from ..fusion.stage import flattened
from ..ir import Computation, Module, post_order
from ..kernels import executed_computations, kernel_report
from ..targets import cost_model
from .callees import Callees
from .costs import node_costs
from .decode import decode
from .encode import Encoding, Part
from .extract import extract
from .frozen import FrozenTerms, no_gc
from .ingest import load
from ..rule_compiler.rule_emit import REWROTE
from ..rule_compiler.rules import compile_rules, load_rule_set, rule_files
from .run import Limits, RunReport, prepared, saturate


def optimize(module: Module, rules="default", fp_mode: str = "xla", target: str = "cpu",
             time_limit: float = 60.0, node_limit: int = 200_000, iteration_limit: int = 30,
             stats: bool = False, fusion: bool = True, verify: bool = True,
             tpu_gen: str | None = None, explain: bool = False, observe=None):
    """The optimized module (a new Module; the input is not modified), or (module, report)
    with `stats`, the report a run.RunReport, or (module, explanation) with `explain`, an
    explain.Explanation (its `.report` the RunReport): the rules are then compiled to record
    what they build (a rule set passed compiled is used as it is). `rules`: "default",
    "none", a rule file or folder, a list of these, or an already compiled rule set. When
    the rules declare what may fuse (`fuse`), the entry and the loop bodies are then fused
    for `target`, unless `fusion` is False. The input is verified first (the rules and the cost model trust its
    declared shapes) unless `verify` is False, for callers that already did. `tpu_gen`: the
    generation of the tpu target's model (targets.cost_model). `observe(terms, extractions)`,
    when given, sees the saturated e-graph (a frozen.FrozenTerms) and each computation's
    extract.Extraction before the e-graph is let go: what it keeps of `terms`' shapes and
    attributes it must read then (tools/egraph_dot.py draws the e-graph this way)."""
    with no_gc():
        return _optimize(module, rules, fp_mode, target, time_limit, node_limit,
                         iteration_limit, stats, fusion, verify, tpu_gen, explain, observe)


def _optimize(module: Module, rules, fp_mode: str, target: str, time_limit: float,
              node_limit: int, iteration_limit: int, stats: bool, fusion: bool, verify: bool,
              tpu_gen: str | None, explain: bool, observe):
    if verify:
        verifier.verify(module)
    compiled = compiled_rules(rules, fp_mode, explain)
    model = cost_model(target, tpu_gen)
    limits = Limits(iteration_limit, node_limit, time_limit)
    callees = Callees(module)
    report = RunReport(module.name)
    t0 = time.perf_counter()
    encoding = Encoding(callees)
    parts = _encode_with_subcomputations(encoding, module.entry)
    report.add_time("encode", time.perf_counter() - t0)
    prep = prepared(compiled, encoding.opcode, encoding.element_types())
    with prep.session():
        t0 = time.perf_counter()
        load(prep.egraph, encoding)
        report.add_time("ingest", time.perf_counter() - t0)
        saturate(prep, encoding, callees, limits, report)
        # inside the session: frozen values refer to egglog's pools, which pop rewinds
        t0 = time.perf_counter()
        terms = FrozenTerms(prep.egraph, encoding.extras,
                            {REWROTE: "sst"} if compiled.explain else None)
        report.eclasses = terms.n_classes
        costs = node_costs(terms, model, encoding.rests)
        report.add_time("extract", time.perf_counter() - t0)
        decoder = _Decoder(terms, costs, encoding, parts, callees, report, explain)
        entry = decoder.computation(module.entry)
        if observe is not None:
            observe(terms, decoder.extractions)
    out = Module(module.name, _reachable(entry), entry, dict(module.attrs),
                 module.extra_sections)
    if fusion and compiled.fuses:
        t0 = time.perf_counter()
        if unroll.any_to_unroll(out):         # kernels may then span its iterations
            out = flattened(out)
        policy = FusionPolicy(compiled.fuses, compiled.limits, target)
        out = fuse_module(out, executed_computations(out), policy, model)
        report.add_time("fuse", time.perf_counter() - t0)
    if stats or explain:
        report.kernels = f"{target}: {kernel_report(out).summary()}, " \
                         f"estimated {model.module_cost(out) / 1000:,.1f} us"
    if explain:
        from .explain import explain as explained
        t0 = time.perf_counter()
        why = explained(module, out, model, target, report, compiled, encoding,
                        terms.row_class, terms.relations.get(REWROTE, []), decoder.made)
        report.add_time("explain", time.perf_counter() - t0)
        why.report = report
        return out, why
    return (out, report) if stats else out


_COMPILED: dict[tuple, object] = {}
_COMPILED_KEPT = 8


def compiled_rules(rules, fp_mode: str, explain: bool = False):
    """The compiled rule set for `rules` (see optimize; `explain`: rules that record what
    they build). Parsing the rule files costs more than a small module's whole
    optimization, so compiled sets are kept per process, keyed by the files' paths, sizes
    and modification times (a file a rule file includes from elsewhere is not watched)."""
    if hasattr(rules, "rulesets"):
        return rules
    specs = (rules,) if isinstance(rules, str) else tuple(rules)
    key = (specs, fp_mode, explain, _stamp(specs))
    compiled = _COMPILED.get(key)
    if compiled is None:
        compiled = compile_rules(load_rule_set(list(specs)), fp_mode, explain)
        if len(_COMPILED) >= _COMPILED_KEPT:
            _COMPILED.pop(next(iter(_COMPILED)))
        _COMPILED[key] = compiled
    return compiled


def _stamp(specs: tuple[str, ...]) -> tuple:
    out = []
    for spec in specs:
        if spec == "none":
            continue
        root = str(resources.files("hlo_opt.rules").joinpath("default")) \
            if spec == "default" else spec
        files = rule_files(root) if os.path.isdir(root) else [root]
        for path in files:
            try:
                st = os.stat(path)
                out.append((path, st.st_size, st.st_mtime_ns))
            except OSError:
                out.append((path, None, None))
    return tuple(out)


def _encode_with_subcomputations(encoding: Encoding, entry: Computation) -> dict[int, Part]:
    """Encode the entry and every while/conditional computation reachable from it."""
    parts: dict[int, Part] = {}
    queue = [entry]
    while queue:
        comp = queue.pop()
        if id(comp) not in parts:
            parts[id(comp)] = encoding.add(comp)
            queue.extend(parts[id(comp)].calls)
    return parts


class _Decoder:
    """Extracts and decodes computations, each after the sub-computations it calls."""

    def __init__(self, terms: FrozenTerms, costs, encoding: Encoding, parts: dict[int, Part],
                 callees: Callees, report: RunReport, keep_classes: bool = False):
        self.terms, self.costs, self.encoding = terms, costs, encoding
        self.parts, self.callees, self.report = parts, callees, report
        # with keep_classes: computation name -> its e-class -> instruction map (explain)
        self.made: dict[str, dict] | None = {} if keep_classes else None
        self.parameter_nodes = terms.op == terms.opnames.index("parameter") \
            if "parameter" in terms.opnames else np.zeros(len(terms), dtype=bool)
        self.done: dict[int, Computation] = {}
        self.extractions: list = []

    def computation(self, comp: Computation) -> Computation:
        if id(comp) in self.done:
            return self.done[id(comp)]
        part = self.parts[id(comp)]
        for sub in part.calls:
            self.callees.set_output(sub, self.computation(sub))
        t0 = time.perf_counter()
        terms = self.terms
        own = [int(terms.row_class[r]) for r in part.parameters]
        foreign = self.parameter_nodes & ~np.isin(terms.eclass, own)
        roots = own + [int(terms.row_class[r]) for r in (part.root, *part.keep_alive)]
        extraction = extract(terms.eclass, terms.child_ptr, terms.child, terms.n_classes,
                             self.costs, roots, excluded=foreign)
        self.extractions.append(extraction)
        t1 = time.perf_counter()
        made = None if self.made is None else self.made.setdefault(comp.name, {})
        result = decode(terms, extraction, self.encoding, part, self.callees, made)
        self.report.add_time("extract", t1 - t0)
        self.report.add_time("decode", time.perf_counter() - t1)
        self.done[id(comp)] = result
        return result


def prove_equivalent(module_a: Module, module_b: Module, rules="default",
                     fp_mode: str = "xla", time_limit: float = 10.0, node_limit: int = 200_000,
                     iteration_limit: int = 30) -> tuple[bool, RunReport]:
    """Encode both entry computations into one e-graph, saturate, and say whether their
    roots ended in one e-class (equal parameters are one leaf, so this is a proof)."""
    callees = Callees(module_a)
    encoding = Encoding(callees)
    a, b = encoding.add(module_a.entry), encoding.add(module_b.entry)
    report = RunReport(f"{module_a.entry.name} = {module_b.entry.name}")
    prep = prepared(compiled_rules(rules, fp_mode), encoding.opcode, encoding.element_types())
    with prep.session():
        load(prep.egraph, encoding)
        saturate(prep, encoding, callees, Limits(iteration_limit, node_limit, time_limit), report)
        same = prep.same_class(a.root, b.root)
    return same, report


def _reachable(entry: Computation) -> list[Computation]:
    """Computations the entry calls, callees before callers, the entry last."""
    return post_order([entry], lambda comp: [c for inst in comp.instructions
                                             for c in inst.called_computations()], id)
