"""What a rule's guards require of its instances, worked out before the rule checker draws
any: element types as a few free choices and the combinations the guards accept, and the
ranks they fix. The checker then builds instances of those combinations in turn, instead of
drawing types at random and discarding what the guards reject (one f32 -> s32 -> f32 convert
chain in 2,000 random draws is not a check).

Element types: terms that the operations tie together (an add and its operands, a transpose
and its operand, the two sides of a compare) form one *type class*, which is one choice.
Guards that read element types only (`dtype(x) == f32`, `is_float(x)`, `is_widening(dtype(x),
dtype(m))`, the element-type half of the compiler's `type(x) == type(root)`, `can_hold` of a
right-side constant) are evaluated on every combination of the choices they mention. A class
some guard narrows draws from every element type the guard accepts (s4, f8e4m3fn, ...);
the others from samplers.DTYPE_CHOICES. A class is only chosen where the checker draws it:
a variable, a constant, or the result of convert, bitcast-convert or iota.

Shapes: `rank(x) == n`, `is_scalar(x)` and `num_elements(x) == 0` on a variable fix how that
variable is drawn, as does being an operand of concatenate (rank 1 or more). Everything else
is left to drawing and rejection.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from ..dtypes import DTYPES
from ..shape import array
from ..shape_inference import ELEMENTWISE
from ..rule_compiler.rule_functions import ELEMENT_TYPE_FUNCTIONS, NoValue
from ..rule_compiler.guard_ir import Apply, Compare, Lit, TypeOf, evaluate
from ..rule_compiler.rule_ir import PNode, RuleIR
from ..rule_compiler.rule_types import REWRITE_OP_CLASSES, SHAPED
from .samplers import DTYPE_CHOICES

ALL_DTYPES = tuple(sorted(name for name, d in DTYPES.items()
                          if d.is_array and name != "opaque_type"))
# What a class a guard narrows draws from (sub-byte ints and f8 included); the exotic rest
# of ALL_DTYPES only when a guard names one of them.
NARROWED = DTYPE_CHOICES + ("s4", "u4", "u8", "s16", "u16", "u64", "f8e4m3fn", "f8e5m2", "c64",
                            "c128")
# Ops whose result the checker draws a type for (samplers.py); their class is a choice.
DRAWN_RESULTS = frozenset({"convert", "bitcast-convert", "iota"})
# Ops whose result has operand 0's element type, and further operands that share it. The
# checker draws contractions with one element type throughout (no mixed precision).
FOLLOWS_OPERAND = SHAPED | {"reduce-precision", "dynamic-slice", "dynamic-update-slice", "dot",
                            "convolution"}
SHARED_OPERANDS = {"pad": (1,), "reduce": (1,), "dynamic-update-slice": (1,), "dot": (1,),
                   "convolution": (1,)}
# Ops whose operands need a rank of at least 1.
RANKED_OPERANDS = frozenset({"concatenate"})
MAX_COMBINATIONS = 4096


@dataclass
class Pins:
    """What one instance must be: element type, rank (or least rank), emptiness per
    left-side variable."""
    types: dict[str, str] = field(default_factory=dict)
    ranks: dict[str, int] = field(default_factory=dict)
    min_ranks: dict[str, int] = field(default_factory=dict)
    empty: frozenset = frozenset()


class InstancePlan:
    """`choices`: the accepted combinations (class -> element type), in a fixed order;
    `unsatisfiable`: why there are none ("" when there are)."""

    def __init__(self, ir: RuleIR):
        self.parent: dict[str, str] = {}
        self.kinds: dict[str, frozenset] = {}
        self.fixed: dict[str, str] = {}
        self.drawn: set[str] = set()
        self.min_ranks: dict[str, int] = {}
        self.unsatisfiable = ""
        self._walk(ir.lhs)
        classes = {v: self.find(v) for v in list(self.parent)}
        self.members: dict[str, list[str]] = {}
        for var, root in classes.items():
            self.members.setdefault(root, []).append(var)
        self.drawable = {c for c in self.members if c in self.fixed or
                         any(v in self.drawn for v in self.members[c])}
        guards = [g for g in (_element_type_guard(g) for g in ir.guards) if g is not None]
        self.guards = [g for g in guards if _terms(g) and
                       {self.find(t) for t in _terms(g)} <= self.drawable]
        self.candidates = {c: self._candidates(c) for c in self.members}
        self.choices = self._combinations()
        self.ranks, self.empty = _shape_pins(ir.guards)

    def find(self, var: str) -> str:
        self.parent.setdefault(var, var)
        while self.parent[var] != var:
            self.parent[var] = self.parent[self.parent[var]]
            var = self.parent[var]
        return var

    def pins(self, choice: dict[str, str], rng) -> Pins:
        """The pins of one instance: the choice's element types, the other classes drawn
        from their candidates."""
        types = {}
        for c, members in self.members.items():
            options = self.candidates[c]
            dtype = choice.get(c) or (options[rng.integers(len(options))] if options else None)
            if dtype is not None:
                types.update(dict.fromkeys(members, dtype))
        return Pins(types, self.ranks, self.min_ranks, self.empty)

    # --- type classes ---------------------------------------------------------------------

    def _tie(self, first: str, *others: str) -> None:
        root = self.find(first)
        for var in others:
            r = self.find(var)
            if r == root:
                continue
            self.parent[r] = root
            if r in self.kinds:
                self._restrict(root, self.kinds.pop(r))
            if r in self.fixed:
                self._fix(root, self.fixed.pop(r))

    def _restrict(self, var: str, kinds) -> None:
        root = self.find(var)
        self.kinds[root] = self.kinds.get(root, frozenset(kinds)) & frozenset(kinds)

    def _fix(self, var: str, dtype: str) -> None:
        root = self.find(var)
        if self.fixed.setdefault(root, dtype) != dtype:
            self.unsatisfiable = "the operations need two element types of one term"

    def _walk(self, node: PNode) -> None:
        self.find(node.var)
        if node.op is None or node.splat is not None:
            self.drawn.add(node.var)
            return
        for child in node.children:
            self._walk(child)
        kids = [c.var for c in node.children]
        op = node.op
        if op in RANKED_OPERANDS:
            self.min_ranks.update(dict.fromkeys(kids, 1))
        if node.op_var:
            accepted = frozenset().union(*(ELEMENTWISE[m][0] for m in REWRITE_OP_CLASSES[op]))
            self._elementwise(node.var, kids, accepted, "same")
        elif op in ELEMENTWISE:
            accepted, rule = ELEMENTWISE[op]
            if op == "select":
                self._fix(kids[0], "pred")
                kids = kids[1:]
            self._elementwise(node.var, kids, accepted, rule)
        elif op in DRAWN_RESULTS:
            self.drawn.add(node.var)
        elif op in FOLLOWS_OPERAND and kids:
            shared = range(len(kids)) if op == "concatenate" else (0, *SHARED_OPERANDS.get(op, ()))
            self._tie(node.var, *(kids[i] for i in shared if i < len(kids)))

    def _elementwise(self, var: str, operands: list[str], accepted, rule: str) -> None:
        if operands:
            self._tie(*operands)
            self._restrict(operands[0], accepted)
        if rule == "same":
            self._tie(var, *operands)
        elif rule == "pred":
            self._fix(var, "pred")

    # --- element-type choices ---------------------------------------------------------------

    def _candidates(self, c: str) -> list[str]:
        """DTYPE_CHOICES, or where the class's own guards narrow those, the NARROWED types
        they accept (the exotic ALL_DTYPES only where a guard names one)."""
        if c in self.fixed:
            return [self.fixed[c]]
        own = [g for g in self.guards if {self.find(t) for t in _terms(g)} == {c}]
        kinds = self.kinds.get(c)

        def accepted(pool, guards):
            return [d for d in pool if (kinds is None or DTYPES[d].kind in kinds)
                    and all(self._holds(g, {c: d}) for g in guards)]
        plain = accepted(DTYPE_CHOICES, own)
        if plain == accepted(DTYPE_CHOICES, ()):
            return plain                        # the guards narrow nothing
        return accepted(NARROWED, own) or accepted(ALL_DTYPES, own)

    def _holds(self, guard, choice: dict[str, str]) -> bool:
        env = {t: array(choice[self.find(t)]) for t in _terms(guard)}
        try:
            return bool(evaluate(guard, env))
        except NoValue:
            return False

    def _combinations(self) -> list[dict[str, str]]:
        if self.unsatisfiable:
            return []
        chosen = sorted({self.find(t) for g in self.guards for t in _terms(g)})
        options = [self.candidates[c] for c in chosen]
        if any(not o for o in options):
            self.unsatisfiable = "no element type satisfies the guards"
            return []
        out = []
        for combo in itertools.islice(itertools.product(*options), MAX_COMBINATIONS):
            choice = dict(zip(chosen, combo))
            if all(self._holds(g, choice) for g in self.guards):
                out.append(choice)
        if not out:
            self.unsatisfiable = "no combination of element types satisfies the guards"
        return out


def _element_type_guard(g):
    """`g` when it reads element types only; for `type(a) == type(b)`, `dtype(a) ==
    dtype(b)`; otherwise None."""
    if isinstance(g, Compare) and g.op == "==" and isinstance(g.left, TypeOf) \
            and isinstance(g.right, TypeOf):
        return Compare("==", Apply("dtype", (g.left,)), Apply("dtype", (g.right,)))
    return g if _reads_element_types(g) else None


def _reads_element_types(v) -> bool:
    if isinstance(v, Lit):
        return True
    if isinstance(v, Apply):
        if v.fn in ELEMENT_TYPE_FUNCTIONS:
            return isinstance(v.args[0], TypeOf)
        return all(_reads_element_types(a) for a in v.args)
    if isinstance(v, Compare):
        return _reads_element_types(v.left) and _reads_element_types(v.right)
    return False


def _terms(v) -> set[str]:
    """The left-side variables whose types `v` reads."""
    if isinstance(v, TypeOf):
        return {v.term}
    if isinstance(v, Apply):
        return set().union(*(_terms(a) for a in v.args))
    if isinstance(v, Compare):
        return _terms(v.left) | _terms(v.right)
    return set()


def _shape_pins(guards) -> tuple[dict[str, int], frozenset]:
    """Ranks fixed by `rank(x) == n` / `is_scalar(x)`, and variables `num_elements(x) == 0`
    makes empty."""
    ranks, empty = {}, set()
    for g in guards:
        if isinstance(g, Apply) and g.fn == "is_scalar" and isinstance(g.args[0], TypeOf):
            ranks[g.args[0].term] = 0
        if not (isinstance(g, Compare) and g.op == "=="):
            continue
        for fn_side, lit in ((g.left, g.right), (g.right, g.left)):
            if isinstance(fn_side, Apply) and isinstance(fn_side.args[0], TypeOf) \
                    and isinstance(lit, Lit) and isinstance(lit.value, int):
                term = fn_side.args[0].term
                if fn_side.fn == "rank" and lit.value >= 0:
                    ranks[term] = lit.value
                elif fn_side.fn == "num_elements" and lit.value == 0:
                    empty.add(term)
    return ranks, frozenset(empty)
