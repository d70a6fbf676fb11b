"""HLO text -> IR, in one LALR pass (grammar in hlo.lark).

The Lark parser calls `_Builder`'s methods as it reduces rules, so IR is built inline with no
parse tree. Names are resolved as they are reduced: XLA allows no forward references, so an
operand must already be in the current computation's scope and a called computation in the
module's. Every problem becomes an HloError at the offending token's line and column.
"""
from __future__ import annotations

import re
import threading
from functools import lru_cache
from importlib import resources

from lark import Lark, Transformer
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from .. import attributes
from ..errors import HloError
from ..ir import Computation, Instruction, Module
from ..ops import OPS, attribute_rules
from ..verifier import check_parameter_numbers
from ..shape import UNBOUNDED, Layout, Shape, TupleShape
from .async_ops import async_step, check_async
from .layouts import check_layout_tail
from .literals import LiteralError, parse_literal

try:                                    # the Cython lexer/parser: same results, ~2x faster
    import lark_cython
    _PLUGINS = {"_plugins": lark_cython.plugins}
except ImportError:                     # pragma: no cover - lark-cython is a declared dependency
    _PLUGINS = {}

MAX_TUPLE_DEPTH = 64                    # deeper tuple shapes are refused, not recursed into


def parse_module(text: str, filename: str | None = None) -> Module:
    """Parse one HLO module. Raises HloError(file:line:col) on any bad input."""
    with _LOCK:
        return _parser().parse_module(blank_comments(text), filename)


# XLA reads a module when the text starts with `HloModule` or `ENTRY` or its second token is
# `{` (`name {`); any other text is one instruction.
_MODULE_START = re.compile(r"\s*(?:(?:HloModule|ENTRY)(?![A-Za-z0-9_.\-])"
                           r"|%?[A-Za-z_][A-Za-z0-9_.\-]*:?\s*\{)")

# Either a run of text that is no comment (strings included, so that `"a/*b*/"` stays; an
# unterminated string runs to the end) or a comment. Matching long runs at once keeps this
# pass at a few milliseconds per megabyte.
_TEXT_OR_COMMENT = re.compile(
    r'((?:[^"/]+|"(?:[^"\\]|\\.)*(?:"|\Z)|/(?![*/]))+)|(/\*(?:[^*]|\*(?!/))*\*/|//[^\n]*)')


def blank_comments(text: str) -> str:
    """Comments turned into spaces (newlines kept, so every position stays where it was).

    XLA's lexer skips comments between any two tokens, also inside shapes, layouts and
    literals, which this grammar reads as single tokens; blanking them first makes them
    whitespace everywhere. An unterminated `/*` is left for the lexer to report."""
    if "/*" not in text and "//" not in text:
        return text
    return _TEXT_OR_COMMENT.sub(_blank, text)


def _blank(m: re.Match) -> str:
    comment = m.group(2)
    return m.group(1) if comment is None else re.sub(r"[^\n]", " ", comment)


class _Scope:
    """What is being built: the current computation's instructions and names."""
    __slots__ = ("insts", "names", "root")

    def __init__(self):
        self.insts: list[Instruction] = []
        self.names: dict[str, Instruction] = {}
        self.root: Instruction | None = None


class _Builder(Transformer):
    """Rule callbacks (one per grammar rule or alias) that build the IR while parsing."""

    def __init__(self):
        super().__init__(visit_tokens=False)
        self.lark: Lark | None = None

    # --- driving ------------------------------------------------------------------------
    def parse_module(self, text: str, filename: str | None) -> Module:
        self.filename = filename
        self.text = text
        self.comps: dict[str, Computation] = {}
        self.comp_list: list[Computation] = []
        self.scope = _Scope()
        self.module_name: str | None = None
        self.module_attrs: dict = {}
        self.stack_tables: list[str] = []
        self.entry_marks: list = []
        self.entry_layout_tok = None
        self.single: _Scope | None = None
        self.shape_tok = None
        self.async_calls: set[int] = set()     # computations generic async-starts call
        try:
            if _MODULE_START.match(text):
                return self.lark.parse(text, start="start")
            self.single = self.scope
            return self.lark.parse(text, start="single_instruction")
        except UnexpectedInput as e:
            raise self._syntax_error(e) from None
        except RecursionError:
            raise HloError("input nests too deeply", filename) from None

    def error(self, message: str, tok) -> HloError:
        return HloError(message, self.filename, getattr(tok, "line", 0) or 0,
                        getattr(tok, "column", 0) or 0)

    # --- module level -------------------------------------------------------------------
    def start(self, c):
        comps = [x for x in c if isinstance(x, Computation)]
        entries = [comp for comp, tok in self.entry_marks if tok is not None]
        if len(entries) > 1:
            raise self.error("more than one ENTRY computation", self.entry_marks[-1][1])
        entry = entries[0] if entries else comps[-1]
        if self.entry_layout_tok is not None:
            self._check_entry_layout(entry, self.entry_layout_tok)
        name = self.module_name or f"module_{entry.name}"
        return Module(name, self.comp_list, entry, self.module_attrs,
                      "\n".join(self.stack_tables))

    def header(self, c):
        self.module_name = _strip(c[0].value)
        for name_tok, value_tok in c[1:]:
            name = name_tok.value[:-1]
            if name not in attributes.MODULE_ATTRIBUTES:
                raise self.error(f"unexpected module attribute '{name}' (a module takes "
                                 f"{', '.join(sorted(attributes.MODULE_ATTRIBUTES))})",
                                 name_tok)
            if name in self.module_attrs:
                raise self.error(f"duplicate module attribute '{name}'", name_tok)
            pattern = attributes.MODULE_ATTRIBUTES[name]
            if pattern is not None and not pattern.fullmatch(value_tok.value):
                raise self.error(f"malformed {name} value {value_tok.value[:60]!r}", value_tok)
            if name == "entry_computation_layout":
                self.entry_layout_tok = value_tok
            self.module_attrs[name] = attributes.Raw(value_tok.value)

    def _check_entry_layout(self, entry: Computation, tok) -> None:
        """`entry_computation_layout={(f32[2]{0}, s32[])->f32[2]{0}}` must be well formed and
        name the entry's parameter and result shapes (layouts may differ), as XLA's verifier
        requires; XLA's parser alone would take a mismatched one."""
        params, result = self._parse_at(tok.value, tok, "computation_layout")
        declared = sorted(entry.parameters, key=lambda p: p.parameter_number)
        self._check_listed_shapes(params, declared, "entry_computation_layout", "parameter",
                                  tok)
        if not result.compatible(entry.root.shape, dynamic=False):
            raise self.error(f"entry_computation_layout says the result is {result}, it is "
                             f"{entry.root.shape}", tok)

    def computation_layout(self, c):
        return c[0] or [], c[1]

    def module_attr(self, c):
        return c[0], c[1]

    def attribute(self, c):
        return c[0], c[1]

    comp_attr = module_attr

    def stack_table(self, c):
        self.stack_tables.append("\n".join(t.value for t in c))

    def comp_head(self, c):
        entry_tok, name_tok, signature = c
        self.scope = _Scope()
        return entry_tok, name_tok, signature

    def signature(self, c):
        return c[0] or [], c[1]

    def params(self, c):
        return c

    def param(self, c):
        return c[0], c[1]

    def computation(self, c):
        (entry_tok, name_tok, signature), comp_attr = c[0], c[-1]
        name = _strip(name_tok.value)
        if name in self.comps:
            raise self.error(f"duplicate computation name '{name}'", name_tok)
        scope = self.scope
        root = scope.root or scope.insts[-1]
        thread = None
        if comp_attr is not None:
            attr_tok, value_tok = comp_attr
            if attr_tok.value != "execution_thread=":
                raise self.error(f"unexpected computation attribute '{attr_tok.value[:-1]}'",
                                 attr_tok)
            thread = self._decode_string(value_tok)
        try:
            check_parameter_numbers(name, scope.insts)
        except HloError as e:
            raise HloError(e.message, self.filename, e.line, e.column) from None
        comp = Computation(name, scope.insts, root, thread, name_tok.line, name_tok.column)
        if signature is not None:
            self._check_signature(comp, signature, name_tok)
        self.comps[name] = comp
        self.comp_list.append(comp)
        self.entry_marks.append((comp, entry_tok))
        return comp

    def _check_signature(self, comp: Computation, signature, name_tok) -> None:
        """XLA checks only the result: the parameter list of a signature is not compared
        with the body's parameters (test modules rely on that)."""
        _, result = signature
        if not result.compatible(comp.root.shape, dynamic=False):
            raise self.error(f"root of '{comp.name}' has shape {comp.root.shape}, its "
                             f"signature says {result}", name_tok)

    # --- instructions -------------------------------------------------------------------
    def instruction(self, c):
        root_tok, name_tok, shape, call, attrs = c
        inst = self._make(_strip(name_tok.value), name_tok, shape, call, attrs)
        if root_tok is not None:
            if self.scope.root is not None:
                raise self.error("more than one ROOT instruction", root_tok)
            self.scope.root = inst
        return inst

    def op_call(self, c):
        return "op", c[0], c[1]

    def constant_call(self, c):
        return "constant", c[0], ()

    def parameter_call(self, c):
        return "parameter", c[0], ()

    def operands(self, c):
        return c[0] if c else []

    def operand_list(self, c):
        if len(c) == 1:
            return c
        c[0].append(c[1])
        return c[0]

    def attributes(self, c):
        if not c:
            return []
        c[0].append(c[1])
        return c[0]

    def instructions(self, c):
        return None

    def operand_ref(self, c):
        shape, name_tok = c
        name = _strip(name_tok.value)
        inst = self.scope.names.get(name)
        if inst is None and shape is not None and self.scope is self.single:
            return self._new_parameter(name, shape, name_tok)
        if inst is None:
            raise self.error(f"undefined operand '{name}' (operands must be defined before "
                             f"they are used)", name_tok)
        if shape is not None and not shape.compatible(inst.shape, dynamic=False):
            raise self.error(f"operand '{name}' is declared {shape} but has shape "
                             f"{inst.shape}", name_tok)
        return inst

    def operand_shape_only(self, c):
        if self.scope is not self.single:
            raise self.error("an operand needs a name (only a single-instruction text may "
                             "give just a shape)", self.shape_tok)
        return self._new_parameter(None, c[0], self.shape_tok)

    def _new_parameter(self, name: str | None, shape, tok) -> Instruction:
        """Single-instruction text (`f32[2] add(f32[2] x, f32[2])`): as in XLA, an operand
        that is not defined becomes the next parameter, named `_N` when it has no name."""
        number = sum(1 for i in self.scope.insts if i.opcode == "parameter")
        inst = Instruction(name or f"_{number}", "parameter", shape, (), {},
                           parameter_number=number, line=tok.line, column=tok.column)
        self.scope.insts.append(inst)
        self.scope.names[inst.name] = inst
        return inst

    def single_instruction(self, c):
        """The module XLA makes of one instruction: entry computation `_` holding the
        parameters made for its operands and the instruction as root."""
        root = self.scope.insts[-1]
        entry = Computation("_", self.scope.insts, root, line=root.line, column=root.column)
        return Module("_", self.comp_list + [entry], entry, {})

    def anonymous_instruction(self, c):
        shape, call, attrs = c
        return self._make("_", call[1], shape, call, attrs)

    def operand_nested(self, c):
        shape, call = c
        kind, tok, _ = call
        opcode = tok.value.split("(", 1)[0].rstrip() if kind != "op" else tok.value
        base = f"{opcode}.anon"
        name, n = base, 0
        while name in self.scope.names:
            n += 1
            name = f"{base}.{n}"
        return self._make(name, tok, shape, call, ())

    def _make(self, name: str, name_tok, shape, call, attr_pairs) -> Instruction:
        kind, tok, operands = call
        if name in self.scope.names:
            raise self.error(f"duplicate instruction name '{name}'", name_tok)
        opcode = kind if kind != "op" else tok.value
        if kind == "op" and opcode in ("parameter", "constant"):
            what = "a number, parameter(N)" if opcode == "parameter" else "a literal"
            raise self.error(f"{opcode} expects {what}", tok)
        rules = attribute_rules(opcode)
        if rules is None:
            raise self.error(f"unknown opcode '{opcode}'", tok)
        attrs = {}
        if attr_pairs:
            attrs = self._decode_attributes(attr_pairs, name, opcode, rules[0], operands)
        if rules[1] and not rules[1] <= attrs.keys():
            missing = sorted(rules[1] - attrs.keys())
            raise self.error(f"{opcode} needs the attribute {missing[0]}", tok)
        inst: Instruction
        if kind == "parameter":
            if shape is None:
                raise self.error("parameter needs an explicit shape", tok)
            number = int(tok.value[tok.value.index("(") + 1:-1])
            inst = Instruction(name, "parameter", shape, (), attrs, parameter_number=number,
                               line=name_tok.line, column=name_tok.column)
        elif kind == "constant":
            if shape is None:
                raise self.error("constant needs an explicit shape", tok)
            try:
                literal = parse_literal(tok.value[tok.value.index("(") + 1:-1], shape)
            except LiteralError as e:
                raise self.error(str(e), tok) from None
            inst = Instruction(name, "constant", shape, (), attrs, literal=literal,
                               line=name_tok.line, column=name_tok.column)
        else:
            info = OPS.get(opcode)
            if info is not None and info.arity >= 0 and len(operands) != info.arity:
                raise self.error(f"{opcode} takes {info.arity} operand"
                                 f"{'s' if info.arity != 1 else ''}, got {len(operands)}", tok)
            if shape is None:
                shape = self._infer(opcode, operands, attrs, info, tok)
            elif opcode in _REBUILT:
                shape = _rebuilt_shape(opcode, operands, shape)
            inst = Instruction(name, opcode, shape, operands, attrs,
                               line=name_tok.line, column=name_tok.column)
            if info is None or info.category == "control":
                problem = async_step(opcode) and check_async(inst, self.async_calls)
                if problem:
                    raise self.error(problem, tok)
        self.scope.insts.append(inst)
        self.scope.names[name] = inst
        return inst

    def _infer(self, opcode, operands, attrs, info, tok):
        if info is None or info.shape_required:
            raise self.error(f"{opcode} needs an explicit result shape", tok)
        from ..shape_inference import infer_shape
        try:
            return infer_shape(opcode, [o.shape for o in operands], attrs)
        except HloError as e:
            raise self.error(f"cannot infer the shape of {opcode}: {e.message}", tok) from None

    def _decode_attributes(self, pairs, inst_name: str, opcode: str, allowed,
                           operands) -> dict:
        attrs: dict = {}
        for name_tok, value_tok in pairs:
            name = name_tok.value[:-1]
            if name not in allowed:
                raise self.error(f"{opcode} takes no attribute '{name}' (it takes "
                                 f"{', '.join(sorted(allowed))})", name_tok)
            if name in attrs:
                raise self.error(f"duplicate attribute '{name}'", name_tok)
            try:
                value = _decode(name, value_tok.value)
            except attributes.AttributeError_ as e:
                raise self.error(f"{name}: {e}", value_tok) from None
            if isinstance(value, attributes.ComputationRef):
                value = self._resolve(value, value_tok, f"{inst_name}.{name}")
            elif isinstance(value, tuple) and value and \
                    isinstance(value[0], attributes.ComputationRef):
                value = tuple(self._resolve(v, value_tok, f"{inst_name}.{name}.{i}")
                              for i, v in enumerate(value))
            elif name == "control-predecessors":
                missing = [n for n in value if n not in self.scope.names]
                if missing:
                    raise self.error(f"control predecessor '{missing[0]}' is not defined",
                                     value_tok)
            elif name == "operand_layout_constraints":
                self._check_operand_layouts(value_tok, operands)
            attrs[name] = value
        return attrs

    def _check_operand_layouts(self, tok, operands) -> None:
        """`operand_layout_constraints={f32[2,3]{0,1}, s32[]}`: one shape per operand, each
        the operand's shape up to layout."""
        shapes = self._parse_at(tok.value, tok, "braced_shapes")
        self._check_listed_shapes(shapes, operands, "operand_layout_constraints", "operand",
                                  tok)

    def _check_listed_shapes(self, listed, insts, attribute: str, role: str, tok) -> None:
        """The shapes an attribute lists name those of `insts`, one for one, up to layout."""
        if len(listed) != len(insts):
            raise self.error(f"{attribute} lists {len(listed)} shapes for {len(insts)} "
                             f"{role}s", tok)
        for number, (shape, inst) in enumerate(zip(listed, insts)):
            if not shape.compatible(inst.shape, dynamic=False):
                raise self.error(f"{attribute} lists {shape} for {role} {number}, which is "
                                 f"{inst.shape}", tok)

    def braced_shapes(self, c):
        return c[0] or []

    def _resolve(self, ref: attributes.ComputationRef, tok, inline_name: str) -> Computation:
        if ref.inline_body is not None:
            return self._parse_inline(ref.inline_body, tok, inline_name)
        comp = self.comps.get(ref.name)
        if comp is None:
            raise self.error(f"computation '{ref.name}' does not exist (computations must be "
                             f"defined before they are called)", tok)
        return comp

    def _parse_inline(self, body: str, tok, name: str) -> Computation:
        """`to_apply={ ... }`: parse the body as a computation of its own, placed before the
        caller. Padding keeps positions in errors relative to the whole file."""
        outer = self.scope
        self.scope = _Scope()
        self._parse_at(body, tok, "inline_body")
        scope, self.scope = self.scope, outer
        while name in self.comps:
            name += "_"
        comp = Computation(name, scope.insts, scope.root or scope.insts[-1],
                           line=tok.line, column=tok.column)
        self.comps[name] = comp
        self.comp_list.append(comp)
        return comp

    def _parse_at(self, text: str, tok, start: str):
        """Parse `text`, the value of attribute token `tok`, from grammar rule `start`;
        padding keeps positions in errors relative to the whole file."""
        padded = "\n" * (tok.line - 1) + " " * (tok.column - 1) + text
        try:
            return self.lark.parse(padded, start=start)
        except UnexpectedInput as e:
            raise self._syntax_error(e) from None

    def inline_body(self, c):
        return None

    # --- shapes -------------------------------------------------------------------------
    def shape(self, c):
        tok = self.shape_tok = c[0]         # the last shape read, for positions
        try:
            return _array_shape(tok.value)
        except ValueError as e:
            raise self.error(str(e), tok) from None

    def tuple_shape(self, c):
        elements = tuple(c[0] or ())
        if _tuple_depth(elements) > MAX_TUPLE_DEPTH:
            raise HloError(f"tuple shapes nest deeper than {MAX_TUPLE_DEPTH}", self.filename)
        return TupleShape(elements)

    def shape_list(self, c):
        return c

    # --- helpers ------------------------------------------------------------------------
    def _decode_string(self, tok) -> str:
        try:
            return attributes.decode("custom_call_target", tok.value)
        except attributes.AttributeError_ as e:
            raise self.error(str(e), tok) from None

    def _syntax_error(self, e: UnexpectedInput) -> HloError:
        line, column = getattr(e, "line", 0) or 0, getattr(e, "column", 0) or 0
        if isinstance(e, UnexpectedEOF) or (isinstance(e, UnexpectedToken)
                                            and e.token.type == "$END"):
            last_line = self.text.rsplit("\n", 1)[-1]
            return HloError("unexpected end of input", self.filename,
                            self.text.count("\n") + 1, len(last_line) + 1)
        if isinstance(e, UnexpectedCharacters):
            return HloError(f"unexpected character {e.char!r}{_comment_hint(e.char)}",
                            self.filename, line, column)
        if isinstance(e, UnexpectedToken):
            expected = ", ".join(sorted({_describe(self.lark, t) for t in e.expected}))
            value = str(getattr(e.token, "value", e.token))
            return HloError(f"unexpected {value[:40]!r}{_comment_hint(value)}; expected "
                            f"{expected}", self.filename, e.token.line or line,
                            e.token.column or column)
        return HloError(str(e).splitlines()[0], self.filename, line, column)


_TERMINAL_NAMES = {
    "NAME": "a name", "DEF_NAME": "a name", "ATTR_NAME": "an attribute (name=value)",
    "ATTR_VALUE": "an attribute value", "ARRAY_SHAPE": "a shape", "CONSTANT_CALL": "constant(...)",
    "PARAMETER_CALL": "parameter(N)", "ENTRY": "ENTRY", "ROOT": "ROOT",
    "STACK_TABLE": "a stack-frame table", "STACK_ENTRY": "a table entry",
}


def _describe(parser: Lark, terminal: str) -> str:
    if terminal in _TERMINAL_NAMES:
        return _TERMINAL_NAMES[terminal]
    try:
        pattern = parser.get_terminal(terminal).pattern
    except KeyError:
        return terminal
    return f"'{pattern.value}'" if pattern.type == "str" else terminal


def _comment_hint(text: str) -> str:
    return " (unterminated comment?)" if text.startswith("/") else ""


# Ops whose result shape XLA's parser builds itself, whatever the text declares: from the
# operands, or (recv, infeed) from the declared data shape, element 0 of the tuple.
_REBUILT = frozenset({"after-all", "add-dependency", "send", "outfeed", "send-done",
                      "recv-done", "recv", "infeed"})


def _rebuilt_shape(opcode: str, operands, declared):
    """The shape XLA gives an op of _REBUILT; the declared one where the operands (or a
    declared data shape) are missing or wrong, for the verifier to report."""
    from ..shape_inference import infer_shape
    from ..transfer_rules import CONTEXT, TOKEN
    if opcode in ("recv", "infeed"):
        if not declared.is_tuple or not declared.elements:
            return declared
        context = (CONTEXT,) if opcode == "recv" else ()
        return TupleShape((declared.elements[0],) + context + (TOKEN,))
    try:
        return infer_shape(opcode, [o.shape for o in operands], {})
    except HloError:
        return declared


def _strip(name: str) -> str:
    """`%name` and `name:` (a defining occurrence) -> `name`."""
    return name[1:] if name.startswith("%") else name[:-1] if name.endswith(":") else name


def _tuple_depth(elements) -> int:
    depth = 1
    for e in elements:
        if e.is_tuple:
            depth = max(depth, 1 + _tuple_depth(e.elements))
    return depth


_ARRAY_SHAPE = re.compile(r"([a-z0-9_]+)\s*\[([^\]]*)\]\s*(?:\{(.*)\})?", re.S)


def shape_from_text(text: str) -> Shape:
    """An array shape as Shape.to_text prints it, read back."""
    return _array_shape(text)


@lru_cache(maxsize=8192)
def _array_shape(text: str) -> Shape:
    """`f32[8,<=4,?]{2,1,0:T(8,128)}` -> Shape; cached, shapes repeat throughout a module."""
    m = _ARRAY_SHAPE.fullmatch(text)
    etype, dims_text, layout_text = m.group(1), m.group(2).strip(), m.group(3)
    shown = _one_line(text)
    dims, dynamic = [], []
    for d in (dims_text.split(",") if dims_text else ()):
        d = d.strip()
        if d == "?":
            dims.append(UNBOUNDED), dynamic.append(True)
        elif d.startswith("<="):
            dims.append(_dim(d[2:], shown)), dynamic.append(True)
        else:
            dims.append(_dim(d, shown)), dynamic.append(False)
    layout = None
    if layout_text is not None:
        order_text, _, tail = layout_text.partition(":")
        order = tuple(_dim(x.strip(), shown) for x in order_text.split(",") if x.strip())
        if sorted(order) != list(range(len(dims))):
            raise ValueError(f"layout {{{_one_line(layout_text)}}} is not a permutation of "
                             f"the {len(dims)} dimensions of {shown}")
        if tail.strip():
            check_layout_tail(tail)
        layout = Layout(order, tail.strip())
    return Shape(etype, tuple(dims), layout, tuple(dynamic) if any(dynamic) else ())


def _dim(text: str, shape_text: str) -> int:
    """A dimension or layout entry: an integer XLA's lexer reads (`-0` is 0), not negative."""
    digits = text[1:] if text.startswith("-") else text
    if not (digits.isascii() and digits.isdigit()) or int(text) < 0:
        raise ValueError(f"bad dimension '{_one_line(text)}' in {shape_text}")
    return int(text)


def _one_line(text: str, limit: int = 80) -> str:
    """`text` for a one-line message: whitespace runs as one space, cut at `limit`."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


@lru_cache(maxsize=16384)
def _decode_cached(name: str, text: str):
    return attributes.decode(name, text)


def _decode(name: str, text: str):
    """Typed attribute values are immutable, so equal texts share one decoded value; Raw
    attributes and metadata (mostly unique) skip the cache."""
    kind = attributes.KINDS.get(name)
    if kind is None:
        return attributes.Raw(text)
    if kind in attributes.UNCACHED_KINDS:
        return attributes.decode(name, text)
    return _decode_cached(name, text)


_LOCK = threading.Lock()
_BUILDER: _Builder | None = None


def _parser() -> _Builder:
    """The Lark parser is built once (~0.1 s) and bound to one builder, reset per parse."""
    global _BUILDER
    if _BUILDER is None:
        grammar = resources.files(__package__).joinpath("hlo.lark").read_text()
        builder = _Builder()
        builder.lark = Lark(grammar, parser="lalr", lexer="contextual",
                            start=["start", "single_instruction", "inline_body",
                                   "computation_layout", "braced_shapes"],
                            transformer=builder, maybe_placeholders=True, **_PLUGINS)
        _BUILDER = builder
    return _BUILDER
