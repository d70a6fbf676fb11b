"""Gated rulesets: run only the rules that can match.

egglog evaluates every rule of a ruleset in every iteration, each as one semi-naive variant
per query atom, whether or not anything it reads can match: 600 rules that never match
added 1.7 ms to every iteration of a 138-e-node module (2.9 µs a rule). A rule whose query
holds a term atom with a literal opcode (`(Op2 "dot" ...)`) cannot match while no term
has that opcode. So a ruleset's rules are split into groups, consecutive rules with the
same required opcodes sharing one (the rules' order, and so egglog's, is kept); the
ruleset itself becomes the combination of its groups, so `(run simplify 1)` still runs
them all; and the runner (egraph/run.py) runs the combination of the groups whose opcodes
all occur in the e-graph (schema.OPCODES). A rule left out is exact: when its opcodes
appear, its first run looks at every row since its last one, so it finds every match it
would have found all along.

Rulesets the schema declares and rulesets that raw egglog blocks add rules to stay whole
(a combined ruleset takes no rules of its own).
"""
from __future__ import annotations

import re

from typing import NamedTuple

from ..dtypes import DTYPES
from ..egraph.schema import DTYPE_CLASSES, TERM_CONSTRUCTORS, combined_ruleset, ruleset

_OPCODE_ATOM = re.compile(rf'\((?:{"|".join(TERM_CONSTRUCTORS)}) "([^"]+)"')
# An element-type class test of a variable: (IsInt i_dt0).
_CLASS_ATOM = re.compile(rf'\(({"|".join(DTYPE_CLASSES)}) [a-z]_\w+\)')
_QUOTED = re.compile(r'"([a-z0-9_]+)"')


def opcodes_named(text: str) -> frozenset[str]:
    """The opcodes egglog text names literally in term atoms: in a rule's query, each must
    occur for it to match; in its actions, the opcodes of the terms it may build."""
    return frozenset(_OPCODE_ATOM.findall(text))


class Needs(NamedTuple):
    """What a compiled command needs before it can match, and what its actions may add."""
    opcodes: frozenset[str]          # each must occur
    classes: frozenset[str]          # element-type classes: some type of each must occur
    builds: frozenset[str]           # opcodes of the terms it may build
    makes: frozenset[str]            # element types it names literally (a compare's pred...)


def needs(query: str, actions: str) -> Needs:
    return Needs(opcodes_named(query), frozenset(_CLASS_ATOM.findall(query)),
                 opcodes_named(actions),
                 frozenset(t for t in _QUOTED.findall(actions) if t in DTYPES))


def can_match(need: Needs, opcodes: set[str], dtypes: set[str]) -> bool:
    return need.opcodes <= opcodes and all(
        dtypes.intersection(DTYPE_CLASSES[c]) for c in need.classes)


class Gates:
    """Assigns each compiled rule its group; `groups[ruleset]` lists (group, opcodes) in order."""

    def __init__(self, whole: set[str]):
        self.whole = whole
        self.groups: dict[str, list[tuple[str, frozenset[str]]]] = {}

    def ruleset(self, name: str, query: str) -> str:
        """The ruleset a rule of ruleset `name` with this query is declared in."""
        if name in self.whole:
            return name
        ops = opcodes_named(query)
        groups = self.groups.setdefault(name, [])
        if not groups or groups[-1][1] != ops:
            groups.append((f"{name}/{len(groups)}", ops))
        return groups[-1][0]

    def declarations(self, name: str) -> list[str]:
        """Declare ruleset `name`: plain, or its groups and their combination."""
        groups = [group for group, _ in self.groups.get(name, ())]
        if not groups:
            return [ruleset(name)]
        return [*map(ruleset, groups), combined_ruleset(name, groups)]

    def table(self) -> dict[str, tuple[tuple[str, frozenset[str]], ...]]:
        return {name: tuple(groups) for name, groups in self.groups.items()}
