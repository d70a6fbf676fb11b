"""Meaning of a parsed rule: .rules AST -> RuleIR, or an HloError at the offending position.

Checks, in the order a reader would: the left side is an operation; opcodes exist (hlo/ops.py)
and get their operand count; attributes belong to their opcode (schema.ATTR_FIELDS) and have
the right kind; every variable used on the right side or in a guard is bound on the left;
guards and functions exist and take the kinds they are given; and every new right-side term
has a type the compiler can derive (rule_types.py), so egglog never has to guess one.
"""
from __future__ import annotations

import dataclasses

from ..dtypes import DTYPES
from ..grammar.rules_parser import Call, Fold, Name, Number, Pos, Rule
from ..ops import COMMUTATIVE, OPS, VARIADIC
from ..egraph.constants import number_text
from .guard_analysis import (KIND_NAMES, GuardAnalysis, Scope, analyze_guards, describe,
                             fold_scope, is_variable_name, naming, suggest)
from .guard_ir import Apply, Compare, Lit, MakeType, TypeOf, Var
from .rule_functions import FUNCTIONS
from .rule_ir import ROOT, FoldIR, PNode, RNode, RuleIR
from .rule_types import (CLASS_REPRESENTATIVE, REWRITE_OP_CLASSES, SHAPED, dtype, operand_type,
                         result_type)
from ..egraph.schema import ATTR_FIELDS

FIELD_KINDS = {"v": "ints", "s": "str", "i": "int"}
SYMMETRIC_DIRECTIONS = frozenset({"EQ", "NE"})
BUILDERS = {"zeros_like": "0", "ones_like": "1"}
# Attributes a new right-side term may leave out (when it cannot copy them from the root).
# A compare's type "" is XLA's default for the element type, as the encoder writes it.
DEFAULTS = {("dot", "lhs_batch_dims"): Lit((), "ints"), ("dot", "rhs_batch_dims"): Lit((), "ints"),
            ("compare", "type"): Lit("", "str")}
BUILDABLE_LEAVES = frozenset({"iota"})
ALIAS = "as"        # `broadcast(x, as=b)` on the left side names the matched broadcast b
SHAPE = "shape"     # `reshape(x, shape=d)` on the right side gives the new term's dims


def fields_of(op: str) -> list[tuple[str, str]]:
    """(name, value kind) of an opcode's attributes, `rest` last (every other attribute)."""
    return [(n, FIELD_KINDS[k]) for n, k in ATTR_FIELDS.get(op, ())] + [("rest", "str")]


def analyze_rule(rule: Rule) -> RuleIR:
    with naming(f"rule {rule.name}"):
        return _RuleAnalysis(rule).run()


def analyze_fold(fold: Fold) -> FoldIR:
    """Folds name ops (or `elementwise`); their guards may only mention `root`."""
    with naming(f"fold {fold.name}"):
        for op in fold.ops:
            if op != "elementwise" and op not in OPS:
                raise fold.pos.error(f"unknown op '{op}'{suggest(op, OPS)}")
        return FoldIR(fold, analyze_guards(fold.guards, fold_scope()))


class _RuleAnalysis(GuardAnalysis):
    """A rule's scope is its left side's variables, bound as the left side is read, and
    `root` once it is read."""

    def __init__(self, rule: Rule):
        self.vars: dict[str, Var] = {}
        super().__init__(Scope("a rule", self.vars, reads_egraph=True,
                               unbound="variables are bound on the left side",
                               reserved={"root": "'root' is the whole matched term: use it "
                                                 "in guards and on the right side"}))
        self.rule = rule
        self.nodes = 0
        self.rnodes = 0
        self.implicit: list = []
        self.root: PNode | None = None

    def run(self) -> RuleIR:
        rule = self.rule
        self.root = self.lhs_root(rule.lhs)
        self.vars["root"] = Var(ROOT, "term")
        guards = [self.guard(g) for g in rule.guards]
        rhs = self.rhs_root(rule.rhs)
        return RuleIR(rule, self.root, guards + self.implicit, rhs, rhs.kind == "splat")

    # --- left side ---------------------------------------------------------------------

    def lhs_root(self, term) -> PNode:
        known = isinstance(term, Call) and (term.name in OPS or term.name in REWRITE_OP_CLASSES)
        if not known:
            if isinstance(term, Call):
                self.op_info(term)              # says what the name is instead
            raise term.pos.error("the left side must be an operation such as add(x, 0), "
                                 f"not {describe(term)}")
        self.deferred: list[tuple[list, int, object, str]] = []
        root = self.pattern(term)
        for attrs, j, value, kind in self.deferred:     # functions see every LHS binding
            attrs[j] = (attrs[j][0], self.expect(self.value(value), kind, value))
        return root

    def pattern(self, term) -> PNode:
        if isinstance(term, Name):
            if term.name == "root":
                raise term.pos.error("'root' is the whole matched term: use it in guards and "
                                     "on the right side, not inside the left side")
            return PNode(self.bind(term, "term").name, None, term.pos)
        k = self.nodes
        self.nodes += 1
        if isinstance(term, Number):
            return PNode(f"i_n{k}", "constant", term.pos, splat=number_text(term.text))
        if not isinstance(term, Call):
            raise term.pos.error(f"expected a term (an operation, variable or number), got "
                                 f"{describe(term)}")
        term, alias = self.split_keyword(term, ALIAS)
        info = self.op_info(term)
        children = [self.pattern(a) for a in term.args]
        attrs = self.lhs_attrs(term, k)
        direction = dict(attrs).get("direction")
        commutative = term.name in COMMUTATIVE or (
            term.name == "compare" and isinstance(direction, Lit)
            and direction.value in SYMMETRIC_DIRECTIONS)
        var = f"i_n{k}" if alias is None else self.bind_alias(alias, k)
        in_class = term.name in REWRITE_OP_CLASSES
        op_var = self.bind(Name(term.name, pos=term.pos), "op").name if in_class else ""
        return PNode(var, info.name, term.pos, children, attrs, f"i_t{k}",
                     commutative=commutative and len(children) == 2, op_var=op_var)

    def split_keyword(self, term: Call, key: str):
        """(the call without keyword `key`, that keyword's value or None)."""
        value = dict(term.keywords).get(key)
        if value is None:
            return term, None
        rest = tuple((n, v) for n, v in term.keywords if n != key)
        return dataclasses.replace(term, keywords=rest), value

    def bind_alias(self, alias, k: int) -> str:
        """`as=b`: b names the matched term (a variable of its own, bound here)."""
        if k == 0:
            raise alias.pos.error("the whole matched term is 'root'; 'as' names a term inside it")
        if not isinstance(alias, Name) or not is_variable_name(alias.name):
            raise alias.pos.error("'as' takes a variable name, e.g. broadcast(x, as=b)")
        if alias.name in self.vars:
            raise alias.pos.error(f"'{alias.name}' is already bound; 'as' needs a new name")
        return self.bind(alias, "term").name

    def op_info(self, term: Call):
        info = OPS.get(term.name)
        if term.name in REWRITE_OP_CLASSES:
            info = dataclasses.replace(OPS[CLASS_REPRESENTATIVE[term.name]], name=term.name)
        if info is None:
            if term.name in FUNCTIONS:
                raise term.pos.error(f"'{term.name}' is a function of attribute values, not a "
                                     "term")
            if term.name in BUILDERS:
                raise term.pos.error(f"'{term.name}' builds a constant: it can only appear on "
                                     "the right side")
            raise term.pos.error(f"unknown op '{term.name}'{suggest(term.name, OPS)}")
        if info.arity != VARIADIC and len(term.args) != info.arity:
            raise term.pos.error(f"{term.name} takes {info.arity} operand"
                                 f"{'' if info.arity == 1 else 's'}, got {len(term.args)}")
        return info

    def lhs_attrs(self, term: Call, k: int) -> list:
        fields = fields_of(term.name)
        named = self.named_attrs(term, fields)
        out = []
        for j, (name, kind) in enumerate(fields):
            if name not in named:
                out.append((name, Var(f"i_r{k}" if name == "rest" else f"i_a{k}_{j}", kind)))
                continue
            value = named[name]
            if isinstance(value, Call):
                out.append((name, None))
                self.deferred.append((out, j, value, kind))
            elif isinstance(value, Name) and is_variable_name(value.name):
                out.append((name, self.bind(value, kind)))
            else:
                out.append((name, self.expect(self.value(value), kind, value)))
        return out

    def named_attrs(self, term: Call, fields) -> dict:
        names = [n for n, _ in fields]
        for name, value in term.keywords:
            if name not in names:
                raise value.pos.error(
                    f"{term.name} has no attribute '{name}'{suggest(name, names)} "
                    f"(its attributes: {', '.join(names)})")
        return dict(term.keywords)

    def bind(self, name: Name, kind: str) -> Var:
        if not is_variable_name(name.name):
            raise name.pos.error(f"expected {KIND_NAMES[kind]}, got the name '{name.name}' "
                                 "(variables start with a lowercase letter)")
        if name.name in DTYPES or name.name == "root":
            raise name.pos.error(f"'{name.name}' is reserved (an element type or the matched "
                                 "term); choose another variable name")
        var = self.vars.get(name.name)
        if var is None:
            var = self.vars[name.name] = Var(f"v_{name.name}", kind)
        elif var.kind != kind:
            raise name.pos.error(f"'{name.name}' is {KIND_NAMES[var.kind]} elsewhere in this "
                                 f"rule, but {KIND_NAMES[kind]} here")
        return var

    # --- right side --------------------------------------------------------------------

    def rhs_root(self, term) -> RNode:
        if isinstance(term, Name) and term.name == "root":
            raise term.pos.error("a rule whose right side is 'root' changes nothing")
        node = self.build(term, TypeOf(ROOT))
        if node.type != TypeOf(ROOT):
            # A variable or zeros_like(x) stands for the root only when the types agree.
            self.implicit.append(Compare("==", node.type, TypeOf(ROOT)))
        return node

    def new_rnode(self, kind: str, pos: Pos, type_, **kw) -> RNode:
        self.rnodes += 1
        return RNode(kind, self.rnodes, pos, type_, **kw)

    def term_ref(self, term: Name) -> Var:
        if term.name == "root":
            return Var(ROOT, "term")
        var = self.vars.get(term.name)
        if var is None:
            raise term.pos.error(f"unbound variable '{term.name}' (variables are bound on "
                                 "the left side)")
        if var.kind != "term":
            raise term.pos.error(f"'{term.name}' is {KIND_NAMES[var.kind]}, not a term")
        return var

    def splat(self, text: str, type_, pos: Pos) -> RNode:
        self.implicit.append(Apply("can_hold", (Lit(text, "str"), dtype(type_))))
        return self.new_rnode("splat", pos, type_, splat=text)

    def build(self, term, expected) -> RNode:
        if isinstance(term, Name):
            var = self.term_ref(term)
            return self.new_rnode("ref", term.pos, TypeOf(var.name), ref=var.name)
        if isinstance(term, Number):
            if expected is None:
                raise term.pos.error(f"cannot derive the type of the constant {term.text} "
                                     "here: a constant needs a position whose type is known")
            return self.splat(number_text(term.text), expected, term.pos)
        if not isinstance(term, Call):
            raise term.pos.error(f"expected a term, got {describe(term)}")
        if term.name in FUNCTIONS and FUNCTIONS[term.name].public and term.name not in OPS:
            return self.computed_splat(term, expected)
        if term.name in BUILDERS:
            if len(term.args) != 1 or term.keywords:
                raise term.pos.error(f"{term.name} takes one term, e.g. {term.name}(x)")
            type_ = self.bottom_up(term.args[0])
            if type_ is None:
                raise term.args[0].pos.error(f"cannot derive the type of this term for "
                                             f"{term.name}")
            return self.splat(BUILDERS[term.name], type_, term.pos)
        term, shape = self.split_keyword(term, SHAPE)
        info = self.op_info(term)
        if info.arity == 0 and info.name not in BUILDABLE_LEAVES:
            raise term.pos.error(f"a rule cannot build a new {info.name}"
                                 + ("; write a number" if info.name == "constant" else ""))
        op_var = self.class_var(term)
        attrs = self.rhs_attrs(term)
        operand_types = [self.bottom_up(a) for a in term.args]
        if shape is not None:
            if expected is not None:
                raise shape.pos.error("this term's type follows from its position; "
                                      "leave out shape=")
            expected = self.shaped_type(term, shape, operand_types)
        result = expected if expected is not None else result_type(
            term.name, operand_types, attrs)
        if result is None:
            raise term.pos.error(
                f"cannot derive the type of the new '{term.name}' term: its type must follow "
                "from its operands (elementwise ops, compare, transpose, slice, pad) or from "
                "its position (the rule's result, an operand of a typed elementwise op)")
        children = [self.build(a, None if t is not None else operand_type(
            term.name, i, result, operand_types)) for i, (a, t) in enumerate(
            zip(term.args, operand_types))]
        full = []
        for name, _ in fields_of(term.name):
            value = attrs.get(name, DEFAULTS.get((term.name, name)))
            if value is None:
                if name == "rest":
                    value = Lit("", "str")
                else:
                    raise term.pos.error(
                        f"the new '{term.name}' needs attribute '{name}' (only a new term "
                        "with the left root's opcode copies unnamed attributes from it)")
            full.append((name, value))
        return self.new_rnode("op", term.pos, result, op=term.name, children=children,
                              attrs=full, op_var=op_var)

    def class_var(self, term: Call) -> str:
        """The variable of an op class used on the right side (bound on the left)."""
        if term.name not in REWRITE_OP_CLASSES:
            return ""
        var = self.vars.get(term.name)
        if var is None or var.kind != "op":
            raise term.pos.error(f"'{term.name}' stands for the op it matched on the left "
                                 "side, but the left side has none")
        return var.name

    def shaped_type(self, term: Call, shape, operand_types):
        """`shape=d`: the new term has dims d and its first operand's element type."""
        if term.name not in SHAPED:
            raise shape.pos.error(f"shape= applies to {', '.join(sorted(SHAPED))}, "
                                  f"not {term.name}")
        if not operand_types or operand_types[0] is None:
            raise shape.pos.error("shape= needs a first operand whose type is known")
        return MakeType(dtype(operand_types[0]), self.expect(self.value(shape), "ints", shape))

    def computed_splat(self, term: Call, expected) -> RNode:
        """An integer-valued function in operand position: a splat of its value."""
        if FUNCTIONS[term.name].result != "int":
            raise term.pos.error(f"'{term.name}' is a function of attribute values, not a "
                                 "term (only an integer-valued one can stand for a constant)")
        value = self.value(term)
        if expected is None:
            raise term.pos.error("cannot derive the type of this constant here: a constant "
                                 "needs a position whose type is known")
        self.implicit.append(Apply("fits", (value, dtype(expected))))
        return self.new_rnode("splat", term.pos, expected, value=value)

    def rhs_attrs(self, term: Call) -> dict:
        """Named attributes, then those copied from the left root if it has this opcode."""
        fields = fields_of(term.name)
        named = self.named_attrs(term, fields)
        kinds = dict(fields)
        out = {name: self.expect(self.value(v), kinds[name], v) for name, v in named.items()}
        if term.name == self.root.op:
            for name, value in self.root.attrs:
                out.setdefault(name, value)
        return out

    def bottom_up(self, term):
        """The type of a right-side term from its operands alone (None: not derivable)."""
        if isinstance(term, Name):
            return TypeOf(self.term_ref(term).name)
        if isinstance(term, Call) and term.name in BUILDERS and len(term.args) == 1:
            return self.bottom_up(term.args[0])
        if isinstance(term, Call) and (term.name in OPS or term.name in REWRITE_OP_CLASSES):
            term, shape = self.split_keyword(term, SHAPE)
            types = [self.bottom_up(a) for a in term.args]
            if shape is not None:
                return self.shaped_type(term, shape, types)
            return result_type(term.name, types, self.rhs_attrs(term))
        return None

