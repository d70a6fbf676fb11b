"""`.rules` text -> rule AST (grammar in rules.lark).

This stage is purely syntactic: it knows terms, variables, numbers, attribute lists and guards,
not which names are HLO opcodes or guard functions. rule_compiler/rules.py checks meaning (unknown op,
unbound variable, bad guard) and reports it at the position recorded here.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from importlib import resources

from lark import Lark, Transformer
from lark.exceptions import (UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken,
                             VisitError)

from ..errors import HloError

MODES = ("strict", "xla", "fast")     # weakest floating-point semantics a rule needs
DEFAULT_MODE = "xla"
DEFAULT_RULESET = "simplify"


@dataclass(frozen=True)
class Pos:
    file: str
    line: int
    column: int

    def error(self, message: str) -> HloError:
        return HloError(message, self.file, self.line, self.column)


@dataclass(frozen=True)
class Node:
    """What every AST node has: where it was written (not part of its meaning, so nodes
    written at different places compare equal)."""
    pos: Pos = field(compare=False, kw_only=True)


@dataclass(frozen=True)
class Name(Node):
    """A variable (`x`), an enum constant (`LT`), or the matched term (`root`)."""
    name: str


@dataclass(frozen=True)
class Operands(Node):
    """`idx...` as an operation's last operand: the list of its remaining operands (one
    variable for all of them, however many the instruction has); on the right side also a
    function of such lists, `pick(idx, d)...`."""
    value: object           # a Name, or a Call on the right side

    @property
    def name(self) -> str:
        return to_text(self.value)


@dataclass(frozen=True)
class Number(Node):
    """A number: a splat constant in operand position, a plain value elsewhere."""
    text: str

    @property
    def value(self) -> int | float:
        try:
            return int(self.text)
        except ValueError:
            return float(self.text)


@dataclass(frozen=True)
class IntList(Node):
    values: tuple[int, ...]


@dataclass(frozen=True)
class String(Node):
    """A quoted string in attribute position, e.g. `to_apply="add"`."""
    value: str


@dataclass(frozen=True)
class Call(Node):
    """`name(args, key=value)`: an HLO op, a builder (`zeros_like`) or a function
    (`compose`, `rank`); which one is decided by the rule compiler."""
    name: str
    args: tuple
    keywords: tuple[tuple[str, object], ...]


@dataclass(frozen=True)
class Comparison(Node):
    op: str
    left: object
    right: object


@dataclass(frozen=True)
class Declaration(Node):
    """A named item of a rule file with guards (Comparison and Call nodes, all true)."""
    name: str
    guards: tuple


@dataclass(frozen=True)
class Rule(Declaration):
    """`rule NAME [MODE]: LHS => RHS when GUARDS`."""
    mode: str
    lhs: object
    rhs: object
    ruleset: str = ""


@dataclass(frozen=True)
class Fold(Declaration):
    """`fold NAME: op, op, ... when GUARDS`: ops the interpreter may evaluate on constants."""
    ops: tuple[str, ...]
    ruleset: str = ""


@dataclass(frozen=True)
class Fuse(Declaration):
    """`fuse NAME: consumers <- producers when GUARDS` (producer-consumer fusion) or
    `fuse NAME: a ~ b when GUARDS` (sibling kernels merged into a multi-output kernel)."""
    consumers: tuple[str, ...]
    relation: str                   # "<-" or "~"
    producers: tuple[str, ...]


@dataclass(frozen=True)
class Limit(Declaration):
    """`limit NAME: GUARDS`: a condition every fused kernel must satisfy."""


@dataclass(frozen=True)
class RawEgglog(Node):
    text: str
    ruleset: str = ""


@dataclass
class RuleFile:
    rules: list[Rule]
    raw: list[RawEgglog]
    folds: list[Fold] = field(default_factory=list)
    fuses: list[Fuse] = field(default_factory=list)
    limits: list[Limit] = field(default_factory=list)

    def add(self, item) -> None:
        getattr(self, _PART[type(item)]).append(item)

    def extend(self, other: RuleFile) -> None:
        for part in _PART.values():
            getattr(self, part).extend(getattr(other, part))


_PART = {Rule: "rules", RawEgglog: "raw", Fold: "folds", Fuse: "fuses", Limit: "limits"}


class _Builder(Transformer):
    def __init__(self, path: str):
        super().__init__()
        self.path = path

    def _pos(self, tok) -> Pos:
        return Pos(self.path, tok.line, tok.column)

    def start(self, items):
        return items

    def include(self, c):
        return ("include", c[0].value[1:-1], self._pos(c[0]))

    def ruleset(self, c):
        return ("ruleset", c[0].value, self._pos(c[0]))

    def rule(self, c):
        name_tok, mode, lhs, rhs, guards = c
        mode_name = DEFAULT_MODE
        if mode is not None:
            mode_name = mode.value
            if mode_name not in MODES:
                raise self._pos(mode).error(f"unknown floating-point mode '{mode_name}' "
                                            f"(expected one of {', '.join(MODES)})")
        return Rule(name_tok.value, tuple(guards or ()), mode_name, lhs, rhs,
                    pos=self._pos(name_tok))

    def mode(self, c):
        return c[0]

    def fold(self, c):
        name_tok, *op_toks, guards = c
        return Fold(name_tok.value, tuple(guards or ()), tuple(t.value for t in op_toks),
                    pos=self._pos(name_tok))

    def fuse(self, c):
        name_tok, consumers, relation, producers, guards = c
        return Fuse(name_tok.value, tuple(guards or ()), consumers, relation.value, producers,
                    pos=self._pos(name_tok))

    def limit(self, c):
        name_tok, *guards = c
        return Limit(name_tok.value, tuple(guards), pos=self._pos(name_tok))

    def op_list(self, c):
        return tuple(t.value for t in c)

    def string(self, c):
        return String(c[0].value[1:-1], pos=self._pos(c[0]))

    def guards(self, c):
        return c

    def raw_egglog(self, c):
        tok = c[0]
        body = tok.value[tok.value.index("{") + 1:-1]
        return RawEgglog(body, pos=self._pos(tok))

    def comparison(self, c):
        left, op, right = c
        return Comparison(op.value, left, right, pos=self._pos(op))

    def call(self, c):
        name_tok, args = c
        positional, keywords = [], []
        for a in (args or ()):
            if isinstance(a, tuple) and a and a[0] == "keyword":
                keywords.append((a[1], a[2]))
            elif keywords:
                raise a.pos.error("positional argument after keyword arguments") \
                    if hasattr(a, "pos") else self._pos(name_tok).error("bad argument order")
            elif positional and isinstance(positional[-1], Operands):
                raise a.pos.error(f"'{positional[-1].name}...' stands for the remaining "
                                  "operands: it must be the last one")
            else:
                positional.append(a)
        names = [k for k, _ in keywords]
        for k in names:
            if names.count(k) > 1:
                raise self._pos(name_tok).error(f"attribute '{k}' given twice")
        return Call(name_tok.value, tuple(positional), tuple(keywords), pos=self._pos(name_tok))

    def args(self, c):
        return [x for x in c if x is not None]

    def keyword(self, c):
        return ("keyword", c[0].value, c[1])

    def operands(self, c):
        return Operands(c[0], pos=c[0].pos)

    def name(self, c):
        return Name(c[0].value, pos=self._pos(c[0]))

    def number(self, c):
        return Number(c[0].value, pos=self._pos(c[0]))

    def int_list(self, c):
        toks = [t for t in c if t is not None]
        pos = self._pos(toks[0]) if toks else Pos(self.path, 0, 0)
        values = []
        for t in toks:
            try:
                values.append(int(t.value))
            except ValueError:
                raise self._pos(t).error(f"expected an integer, got '{t.value}'") from None
        return IntList(tuple(values), pos=pos)


_LARK: Lark | None = None


def _lark() -> Lark:
    global _LARK
    if _LARK is None:
        grammar = resources.files(__package__).joinpath("rules.lark").read_text()
        _LARK = Lark(grammar, parser="lalr", maybe_placeholders=True)
    return _LARK


def parse_rules(text: str, path: str = "<rules>") -> list:
    """The items of one file, in order: ("include", path, pos) and ("ruleset", name, pos)
    tuples, and declarations and RawEgglog blocks (their ruleset not yet set). Includes are
    not followed."""
    try:
        tree = _lark().parse(text)
    except UnexpectedInput as e:
        raise _syntax_error(e, path) from None
    try:
        return _Builder(path).transform(tree)
    except VisitError as e:             # an HloError raised while building the AST
        if isinstance(e.orig_exc, HloError):
            raise e.orig_exc from None
        raise


def load_rules(path: str, _stack: tuple[str, ...] = (), _loaded: set[str] | None = None,
               _included_at: Pos | None = None) -> RuleFile:
    """Read a rule file and the files it includes (relative to it) into one RuleFile.

    A file is read once per call, however many files include it; an include that leads back
    to a file being read is an error at that include."""
    real = os.path.realpath(path)
    loaded = set() if _loaded is None else _loaded
    if real in _stack:
        chain = " -> ".join(os.path.basename(p) for p in _stack + (real,))
        if _included_at is not None:
            raise _included_at.error(f"include cycle: {chain}")
        raise HloError(f"include cycle: {chain}", path)
    if real in loaded:
        return RuleFile([], [])
    loaded.add(real)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        if _included_at is not None:
            raise _included_at.error(f"cannot read included file {path}: {e.strerror}") from None
        raise HloError(f"cannot read rule file: {e.strerror}", path) from None
    return _collect(parse_rules(text, path), os.path.dirname(path), _stack + (real,), loaded)


def rules_from_text(text: str, path: str = "<rules>") -> RuleFile:
    return _collect(parse_rules(text, path), os.getcwd(), (), set())


def _collect(items: list, folder: str, stack: tuple[str, ...], loaded: set[str]) -> RuleFile:
    out = RuleFile([], [])
    ruleset = DEFAULT_RULESET
    for item in items:
        match item:
            case ("include", path, pos):
                out.extend(load_rules(os.path.join(folder, path), stack, loaded, pos))
            case ("ruleset", name, _):
                ruleset = name
            case Rule() | Fold() | RawEgglog():
                out.add(dataclasses.replace(item, ruleset=ruleset))
            case _:
                out.add(item)
    check_unique_names(out)
    return out


def check_unique_names(rule_file: RuleFile) -> None:
    """Rule, fold and fuse names are unique (they name statistics and counterexamples)."""
    seen: dict[str, Pos] = {}
    for rule in rule_file.rules + rule_file.folds + rule_file.fuses + rule_file.limits:
        if rule.name in seen:
            first = seen[rule.name]
            raise rule.pos.error(f"rule '{rule.name}' is already defined at "
                                 f"{first.file}:{first.line}")
        seen[rule.name] = rule.pos


def to_text(node) -> str:
    """Rule-language text of an AST node, as it would be written in a file."""
    if isinstance(node, Rule):
        return (f"rule {node.name} [{node.mode}]: {to_text(node.lhs)} => {to_text(node.rhs)}"
                + _guards_text(node.guards))
    if isinstance(node, Fold):
        return f"fold {node.name}: {', '.join(node.ops)}" + _guards_text(node.guards)
    if isinstance(node, Call):
        args = [to_text(a) for a in node.args] + [f"{k}={to_text(v)}" for k, v in node.keywords]
        return f"{node.name}({', '.join(args)})"
    if isinstance(node, Comparison):
        return f"{to_text(node.left)} {node.op} {to_text(node.right)}"
    if isinstance(node, IntList):
        return "{" + ", ".join(map(str, node.values)) + "}"
    if isinstance(node, String):
        return '"' + node.value + '"'
    if isinstance(node, Number):
        return node.text
    if isinstance(node, Operands):
        return to_text(node.value) + "..."
    return node.name


def _guards_text(guards) -> str:
    return " when " + " and ".join(map(to_text, guards)) if guards else ""


def _syntax_error(e: UnexpectedInput, path: str) -> HloError:
    line, column = getattr(e, "line", 0) or 0, getattr(e, "column", 0) or 0
    if isinstance(e, UnexpectedEOF) or (isinstance(e, UnexpectedToken) and e.token.type == "$END"):
        return HloError("unexpected end of rule file", path, line, column)
    if isinstance(e, UnexpectedCharacters):
        return HloError(f"unexpected character {e.char!r}", path, line, column)
    if isinstance(e, UnexpectedToken):
        return HloError(f"unexpected {str(e.token.value)!r}", path, e.token.line, e.token.column)
    return HloError(str(e).splitlines()[0], path, line, column)
