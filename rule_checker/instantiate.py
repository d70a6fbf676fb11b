"""Concrete instances of a rule for the rule checker: the left side as an HLO module at random
shapes, element types and attribute values, and the right side built from the same bindings.

The left side is built top-down with expectations (an operand of `add` takes its sibling's
shape, most of the time); element types and fixed ranks come from the instance's pins
(instance_plan.py: what the guards require); attribute values no rule names are drawn per
opcode (samplers.py); anything invalid is filtered out by the verifier, by the rule's guards
evaluated in Python, and by NoValue where the egglog rule would not match. The right side is
typed by the very values the egglog rule computes (guard_ir.evaluate), so a right side that
shape inference rejects is a finding, not a filter.
"""
from __future__ import annotations

import numpy as np

from ..dtypes import DTYPES
from ..errors import HloError
from ..ir import Computation, Instruction, Module
from ..ops import ASSOCIATIVE
from ..shape import Shape, TupleShape, array
from ..shape_inference import ELEMENTWISE, INFERABLE, infer_shape
from ..verifier import verify
from ..egraph.constants import canonical_scalar_text, representable, scalar_from_text
from ..egraph.terms import WINDOWED, field_value, pack_window
from .instance_plan import Pins
from ..rule_compiler.rule_functions import FUNCTIONS, NoValue
from ..rule_compiler.guard_ir import (Apply, Compare, Lit, SplatOf, TypeOf, Var, evaluate,
                                       splat_key)
from ..rule_compiler.rule_ir import PNode, RNode, RuleIR
from ..rule_compiler.rule_types import REWRITE_OP_CLASSES, operand_type
from .samplers import (DTYPE_CHOICES, FITTED_OPERANDS, FREE, OPERAND_LISTS, SAMPLERS, Reject,
                       no_free_fields)

# Ops whose sampler takes any shape the position expects (samplers.py).
ADAPTABLE = frozenset({"broadcast", "reshape", "convert", "iota", "bitcast"})


class IllTyped(Exception):
    """The right side is not a valid module for a valid instance of the left side."""


class Instance:
    def __init__(self, lhs: Module, rhs: Module, params: list[Shape], env: dict):
        self.lhs, self.rhs, self.params, self.env = lhs, rhs, params, env


class _Builder:
    """Instructions of one entry computation, plus the reducers they call."""

    def __init__(self, name: str):
        self.name = name
        self.instructions: list[Instruction] = []
        self.reducers: dict[str, Computation] = {}

    def add(self, opcode: str, shape: Shape, operands=(), attrs=None, **kw) -> Instruction:
        inst = Instruction(f"{opcode}.{len(self.instructions)}", opcode, shape, operands,
                           attrs or {}, **kw)
        self.instructions.append(inst)
        return inst

    def splat(self, text: str, shape: Shape) -> Instruction:
        value = scalar_from_text(text, shape.element_type)
        scalar = self.add("constant", array(shape.element_type), literal=value)
        return scalar if shape.rank == 0 else self.add("broadcast", shape, [scalar],
                                                       {"dimensions": ()})

    def reducer(self, name: str, dtypes: tuple[str, ...]) -> Computation:
        """The computation a reducer name stands for over inputs of these element types:
        "add" (one input), "(add)" returning a 1-tuple, or for several inputs "add" of each
        input's pair, as a tuple."""
        op, k = name.strip("()"), len(dtypes)
        tupled = name != op or k > 1
        label = f"{'tupled_' if tupled else ''}{op}_{'_'.join(dtypes)}"
        if label not in self.reducers:
            params = [Instruction(f"{'ab'[n // k]}{n % k}", "parameter", array(dtypes[n % k]),
                                  parameter_number=n) for n in range(2 * k)]
            results = [Instruction(f"r{i}", op, array(dt), [params[i], params[k + i]])
                       for i, dt in enumerate(dtypes)]
            root, instructions = results[0], params + results
            if tupled:
                root = Instruction("t", "tuple", TupleShape(tuple(r.shape for r in results)),
                                   results)
                instructions.append(root)
            self.reducers[label] = Computation(label, instructions, root)
        return self.reducers[label]

    def adopt(self, computation: Computation) -> Computation:
        """A reducer of the left side, called by the right side's copy of an instruction
        (reducers are named by what they compute, so one name is one computation)."""
        return self.reducers.setdefault(computation.name, computation)

    def module(self, root: Instruction) -> Module:
        entry = Computation(self.name, self.instructions, root)
        return Module(self.name, [*self.reducers.values(), entry], entry)


# Ops whose operands are n inputs, then their n init values.
VARIADIC_REDUCTIONS = frozenset({"reduce", "reduce-window"})


def ir_attrs(op: str, fields: dict, operands: list[Shape], builder: _Builder) -> dict:
    """IR attributes from schema fields (slice/pad triples, windows, reducers named by their
    op)."""
    out = {}
    if op == "slice":
        return {"slice": tuple(zip(fields["start"], fields["limit"], fields["stride"]))}
    if op == "pad":
        return {"padding": tuple(zip(fields["low"], fields["high"], fields["interior"]))}
    for name, value in fields.items():
        if name in ("rest", "value") or (name == "type" and value == ""):
            continue
        if name == "to_apply":
            if value.strip("()") not in ASSOCIATIVE:
                raise Reject(f"reducer {value!r}")
            inputs = operands[:len(operands) // 2] if op in VARIADIC_REDUCTIONS else operands[:1]
            value = builder.reducer(value, tuple(s.element_type for s in inputs))
        elif isinstance(value, str):
            value = field_value(name, value)        # dim_labels' text: its ConvDimLabels
        out[name] = value
    return pack_window(out) if op in WINDOWED else out


class Instantiator:
    """`fill(shape, rng)` draws the values of constants: variables the rule guards with
    is_constant(x) become constants (a splat or a literal) instead of parameters, and those
    whose value a function reads (`log2(c)`) splats of a value the function draws. `pins`
    fixes the element types and ranks of variables and drawn results."""

    def __init__(self, ir: RuleIR, rng: np.random.Generator, fill=None, pins: Pins | None = None):
        self.ir, self.rng, self.fill = ir, rng, fill
        self.pins = pins or Pins()
        self.env: dict = {}
        self.insts: dict[str, Instruction] = {}
        self.params: list[Instruction] = []
        self.base = self.random_shape(free=True)
        # Variables guarded by is_constant(x) are constants; those a function reads the value
        # of (value(c), log2(c)) are splats drawn where it has one.
        calls = list(_arguments(ir.guards))
        self.splat_draws = {a.term: FUNCTIONS[fn].draw for fn, a in calls if isinstance(a, SplatOf)}
        self.constants = {a.name for fn, a in calls if fn == "is_constant"} | set(self.splat_draws)

    def random_shape(self, free: bool = False, dtype: str | None = None, rank: int | None = None,
                     min_rank: int = 0, empty: bool = False) -> Shape:
        """Half the time the base shape's dims (so that variables often fit together),
        else small random dims; `rank`, `min_rank` and `empty` (a zero dim) as pinned."""
        if not free and rank is None and not empty and self.base.rank >= min_rank \
                and self.rng.random() < 0.5:
            return array(dtype or self.base.element_type, self.base.dims)
        dtype = dtype or DTYPE_CHOICES[self.rng.integers(len(DTYPE_CHOICES))]
        if rank is None:
            rank = int(self.rng.integers(max(min_rank, int(empty)), max(min_rank + 1, 4)))
        high = 5 if rank <= 3 else 3              # high ranks stay small
        dims = [int(self.rng.integers(1, high)) if self.rng.random() > 0.05 else 0
                for _ in range(rank)]
        if empty and rank:
            dims[int(self.rng.integers(rank))] = 0
        return array(dtype, dims)

    def pinned_shape(self, var: str) -> Shape:
        """A fresh shape for a variable or a constant, as the pins say."""
        return self.random_shape(dtype=self.pins.types.get(var), rank=self.pins.ranks.get(var),
                                 min_rank=self.pins.min_ranks.get(var, 0),
                                 empty=var in self.pins.empty)

    def run(self) -> Instance:
        lhs = _Builder("lhs")
        root = self.lhs(self.ir.lhs, None, lhs)
        for guard in self.ir.guards:
            if not self.holds(guard):
                raise Reject("guards")
        lhs_module = lhs.module(root)
        try:
            verify(lhs_module)
        except HloError as e:
            raise Reject(f"invalid left side ({_first_words(e.message)})") from None
        rhs = _Builder("rhs")
        copies = {id(p): rhs.add("parameter", p.shape, parameter_number=p.parameter_number)
                  for p in self.params}
        rhs_root = self.rhs(self.ir.rhs, rhs, copies)
        rhs_module = rhs.module(rhs_root)
        try:
            verify(rhs_module)
            if not rhs_root.shape.compatible(root.shape):
                raise HloError(f"its type is {rhs_root.shape.to_text(False)}, the left "
                               f"side's {root.shape.to_text(False)}")
        except HloError as e:
            raise IllTyped(f"the right side is not a valid replacement: {e.message}\n"
                           f"left side:\n{indent(lhs_module.to_text())}\n"
                           f"right side:\n{indent(rhs_module.to_text())}") from None
        return Instance(lhs_module, rhs_module, [p.shape for p in self.params], self.env)

    def holds(self, guard) -> bool:
        try:
            return bool(evaluate(guard, self.env))
        except NoValue:
            return False

    def value(self, v):
        try:
            return evaluate(v, self.env)
        except NoValue:
            raise Reject("a function has no value here") from None
        except KeyError:
            raise Reject("a function of a variable bound later") from None

    # --- left side -------------------------------------------------------------------------

    def lhs(self, node: PNode, expected: Shape | None, b: _Builder) -> Instruction:
        if node.op is None:
            if node.var in self.insts:
                return self.insts[node.var]
            use = expected is not None and self.rng.random() < 0.9
            shape = expected if use else self.pinned_shape(node.var)
            if node.var in self.splat_draws:
                return self._bind_splat(node.var, shape, b)
            if node.var in self.constants:
                return self._bind(node.var, self._constant(shape, b))
            inst = b.add("parameter", shape, parameter_number=len(self.params))
            self.params.append(inst)
            return self._bind(node.var, inst)
        if node.splat is not None:
            shape = expected if expected is not None else self.pinned_shape(node.var)
            if not representable(node.splat, shape.element_type):
                raise Reject("constant not representable")
            return self._bind(node.var, b.splat(node.splat, shape))
        n = len(node.children)
        shapes: list = [None] * n
        insts: list = [None] * n
        fitted, fit = FITTED_OPERANDS.get(node.op, (None, None))
        for i in sorted(range(n), key=lambda i: (i == fitted, self._order(node.children[i]))):
            exp = self._expected_operand(node.op, i, expected, shapes)
            if i == fitted:
                exp = self._fit_operand(node, shapes, fit)
            if exp is None and i == 0 and expected is not None:
                exp = self._moved_operand(node, expected)
            if exp is None and node.op == "concatenate":
                exp = self._concatenated(node, expected, shapes)
                child = node.children[i]
                if child.op is not None and child.op not in ADAPTABLE:
                    exp = None          # its shape comes from its own operands
            insts[i] = self.lhs(node.children[i], exp, b)
            shapes[i] = insts[i].shape
        op = self._op(node, shapes)
        if expected is None and node.var in self.pins.types:
            expected = self._pinned_result(op, self.pins.types[node.var], shapes)
        free, fields = self._fields(node)
        result = SAMPLERS.get(op, no_free_fields)(self, shapes, fields, expected)
        self._bind_free(node, free, fields)
        attrs = ir_attrs(op, fields, shapes, b)
        if node.rest:
            insts += self._operand_list(node.rest, op, shapes, fields, b)
        if result is None:
            if op not in INFERABLE or op == "broadcast":
                if expected is None:
                    raise Reject(f"no result shape for {op}")
                result = expected
            else:
                try:
                    result = infer_shape(op, [i.shape for i in insts], attrs)
                except HloError as e:
                    raise Reject(f"invalid {op} ({_first_words(e.message)})") from None
        if expected is not None and not result.compatible(expected):
            raise Reject("shapes do not fit")
        return self._bind(node.var, b.add(op, result, insts, attrs))

    def _fields(self, node: PNode) -> tuple[set, dict]:
        """The node's attributes: values where known, FREE where the instance draws them."""
        free = {name for name, v in node.attrs if isinstance(v, Var) and v.name not in self.env}
        return free, {name: FREE if name in free else self.value(v) for name, v in node.attrs}

    def _bind_free(self, node: PNode, free: set, fields: dict) -> None:
        for name, v in node.attrs:
            if name in free:
                self.env[v.name] = fields[name]

    def _fit_operand(self, node: PNode, shapes, fit) -> Shape:
        """The shape of an operand that the other operands and the attributes determine
        (a scatter's updates, a dynamic-update-slice's update); draws the attributes the
        rule leaves open first."""
        free, fields = self._fields(node)
        shape = fit(self, shapes, fields)
        self._bind_free(node, free, fields)
        return shape

    def _op(self, node: PNode, shapes: list[Shape]) -> str:
        """The opcode of a left-side node; an op class takes one of its members that accepts
        the operands' element type, the same for every node of that class."""
        if not node.op_var:
            return node.op
        if node.op_var not in self.env:
            kind = DTYPES[shapes[0].element_type].kind if shapes else None
            members = [m for m in REWRITE_OP_CLASSES[node.op] if kind in ELEMENTWISE[m][0]]
            if not members:
                raise Reject(f"no {node.op} op for {kind}")
            self.env[node.op_var] = members[self.rng.integers(len(members))]
        return self.env[node.op_var]

    def _pinned_result(self, op: str, dtype: str, shapes: list[Shape]) -> Shape | None:
        """The result a convert, bitcast-convert or iota is drawn with when its element
        type is pinned (None for other ops: their operands carry the pin)."""
        if op == "convert":
            return array(dtype, shapes[0].dims)
        if op == "bitcast-convert" and DTYPES[dtype].bits == DTYPES[shapes[0].element_type].bits:
            return array(dtype, shapes[0].dims)
        if op == "iota":
            shape = self.random_shape(dtype=dtype)
            return shape if shape.rank else array(dtype, (3,))
        return None

    def _constant(self, shape: Shape, b: _Builder, splat: bool = False) -> Instruction:
        """A splat (always where `splat`, else half the time) or a literal, with values
        from `fill`."""
        if self.fill is None:
            raise Reject("no values for constants")
        if shape.rank and (splat or self.rng.random() < 0.5):
            scalar = array(shape.element_type)
            value = np.asarray(self.fill(scalar, self.rng)).reshape(())
            c = b.add("constant", scalar, literal=value)
            return b.add("broadcast", shape, [c], {"dimensions": ()})
        return b.add("constant", shape, literal=np.asarray(self.fill(shape, self.rng)))

    def _bind_splat(self, var: str, shape: Shape, b: _Builder) -> Instruction:
        """A splat of a value drawn where the function reading it has one (of the usual
        constant values where the function has no draw of its own)."""
        draw = self.splat_draws[var]
        if draw is None:
            inst = self._constant(shape, b, splat=True)
            text = splat_text(inst)
        else:
            try:
                text = draw(shape.element_type, self.rng)
            except NoValue:
                raise Reject("no value to draw for this element type") from None
            inst = b.splat(text, shape)
        self.env[splat_key(var)] = text
        return self._bind(var, inst)

    def _operand_list(self, var: str, op: str, shapes, fields, b: _Builder) -> list:
        """The operands `var...` stands for: those bound before, or drawn for `op`
        (constants or parameters, samplers.OPERAND_LISTS)."""
        if var not in self.insts:
            if op not in OPERAND_LISTS:
                raise Reject(f"no operand lists for {op}")
            out = []
            for dtype, value in OPERAND_LISTS[op](self, shapes, fields):
                if value is None:
                    inst = b.add("parameter", array(dtype), parameter_number=len(self.params))
                    self.params.append(inst)
                else:
                    inst = b.add("constant", array(dtype),
                                 literal=np.asarray(value, DTYPES[dtype].numpy))
                out.append(inst)
            self.insts[var] = out
            self.env[var] = tuple(out)
        return self.insts[var]

    def _bind(self, var: str, inst: Instruction) -> Instruction:
        self.insts[var] = inst
        self.env[var] = inst.shape
        return inst

    def _order(self, child: PNode) -> int:
        """Operations and bound variables first: they give free siblings their shape. Ops
        whose sampler fits any expected shape (a broadcast, a reshape) come after them."""
        if child.splat is not None:
            return 2
        if child.op in ADAPTABLE:
            return 1
        return 1 if child.op is None and child.var not in self.insts else 0

    def _moved_operand(self, node: PNode, result: Shape) -> Shape | None:
        """The operand shape of a broadcast or transpose whose dimensions are already known,
        so that its operand fits the expected result."""
        dims = dict(node.attrs).get("dimensions")
        if node.op not in ("broadcast", "transpose") or dims is None:
            return None
        try:
            d = evaluate(dims, self.env)
        except (NoValue, KeyError):
            return None
        if not all(0 <= i < result.rank for i in d):
            return None
        if node.op == "transpose" and sorted(d) != list(range(result.rank)):
            return None
        source = [result.dims[i] for i in d]
        if node.op == "transpose":                   # result dim j is operand dim d[j]
            source = [0] * len(d)
            for j, i in enumerate(d):
                source[i] = result.dims[j]
        return array(result.element_type, source)

    def _concatenated(self, node: PNode, result: Shape | None, shapes) -> Shape | None:
        """An operand of a concatenate shaped like a sibling (or the result) except along
        the concatenated dimension, which is drawn now if the rule leaves it open."""
        known = next((sh for sh in shapes if sh is not None), result)
        if known is None:
            return None
        if known.rank == 0:
            raise Reject("concatenate of scalars")
        dims = dict(node.attrs)["dimensions"]
        if isinstance(dims, Var) and dims.name not in self.env:
            self.env[dims.name] = (int(self.rng.integers(known.rank)),)
        d = self.value(dims)
        if len(d) != 1 or not 0 <= d[0] < known.rank:
            return None
        sizes = list(known.dims)
        sizes[d[0]] = int(self.rng.integers(0, 5))
        return array(known.element_type, sizes)

    def _expected_operand(self, op: str, i: int, result, shapes) -> Shape | None:
        if op in VARIADIC_REDUCTIONS and 0 < i < len(shapes) // 2 and shapes[0] is not None:
            return shapes[0]        # a variadic reduction's inputs are drawn alike
        lit = lambda s: None if s is None else Lit(s, "type")
        t = operand_type(op, i, lit(result), [lit(s) for s in shapes])
        try:
            return None if t is None else evaluate(t, {})
        except NoValue:
            return None

    # --- right side ------------------------------------------------------------------------

    def rhs(self, node: RNode, b: _Builder, copies: dict) -> Instruction:
        if node.kind == "ref":
            return self._copy(self.insts[node.ref], b, copies)
        # A matched term's type is copied whole, a tuple's too (functions see arrays only).
        shape = (self.env[node.type.term] if isinstance(node.type, TypeOf)
                 else self.value(node.type))
        if node.kind == "splat":
            text = node.splat if node.value is None else str(self.value(node.value))
            return b.splat(text, shape)
        op = self.env[node.op_var] if node.op_var else node.op
        children = []
        for c in node.children:
            if c.kind == "operands":
                children += [self._copy(i, b, copies) for i in self.value(c.value)]
            else:
                children.append(self.rhs(c, b, copies))
        fields = {name: self.value(v) for name, v in node.attrs}
        attrs = ir_attrs(op, fields, [c.shape for c in children], b)
        return b.add(op, shape, children, attrs)

    def _copy(self, inst: Instruction, b: _Builder, copies: dict) -> Instruction:
        """A left-side instruction (and its operands) in the right side's computation."""
        if id(inst) not in copies:
            operands = [self._copy(o, b, copies) for o in inst.operands]
            attrs = {k: b.adopt(v) if isinstance(v, Computation) else v
                     for k, v in inst.attrs.items()}
            copies[id(inst)] = b.add(inst.opcode, inst.shape, operands, attrs,
                                     literal=inst.literal)
        return copies[id(inst)]


def _arguments(values):
    """(function name, argument) of every function call anywhere in guards."""
    for v in values:
        if isinstance(v, Apply):
            for a in v.args:
                yield v.fn, a
            yield from _arguments(v.args)
        elif isinstance(v, Compare):
            yield from _arguments((v.left, v.right))


def splat_text(inst: Instruction) -> str | None:
    """The canonical text of the element of a scalar constant or a broadcast of one."""
    if inst.opcode == "broadcast":
        inst = inst.operands[0]
    if inst.opcode != "constant" or inst.shape.rank:
        return None
    return canonical_scalar_text(inst.literal, inst.shape.element_type)


def indent(text: str) -> str:
    return "\n".join("    " + line for line in text.strip().splitlines())


def _first_words(message: str) -> str:
    return " ".join(message.split()[:6])
