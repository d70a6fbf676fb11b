"""Random well-typed HLO programs, as a hypothesis strategy: `programs()`.

Each program is HLO text: one to three parameters of random element types (f32, bf16, f16,
s32, pred) and shapes (rank 0-4, dims 0-4), then 3-20 steps, each an elementwise op, a compare,
a select, a clamp, a convert, a broadcast, reshape, transpose, slice, concatenate, pad or
reverse, a reduce (add, maximum, minimum, and, or), a dot, or a repeat of an earlier
instruction; leaves are parameters, splat constants, small literals and iotas. The values no
instruction uses are the result.

The programs are made for the rewrite rules: a step's operand is most often the value made
just before, so chains form (negate of negate, reshape of reshape), and some steps come in
the shapes the rules look for: x op c for the constants the rules single out (x * 1, x + -0,
max(x, -inf)), a transpose and its inverse, a reverse twice, two adjacent slices
concatenated, a reduce of a broadcast over its new dims, a reduce of a reduce, a dot of a
transposed operand, compare and select of a value with itself.

Some ops make the sign of a zero matter beyond a zero result (1 / -0 = -inf, rsqrt, atan2,
power, TOTALORDER compares); a quarter of the programs may use them and say so
(`zero_sign_sensitive`), as XLA's own simplifier may turn -0 into +0.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from hlo_opt.printer import format_literal
from hlo_opt.shape import array

MAX_ELEMENTS = 256
MAX_PARAMETERS = 5
DIM_SIZES = (2, 3, 1, 4, 0)          # a 0 now and then: empty arrays
DTYPES = ("f32", "f32", "s32", "pred", "bf16", "f16")
INT_MIN, INT_MAX = -2**31, 2**31 - 1

UNARY = {
    "float": ("negate", "abs", "exponential", "log", "sqrt", "floor", "ceil", "sign", "tanh",
              "round-nearest-even", "copy", "sine", "logistic", "is-finite"),
    "int": ("negate", "abs", "sign", "not", "copy"),
    "pred": ("not", "copy"),
}
BINARY = {
    "float": ("add", "subtract", "multiply", "maximum", "minimum", "remainder"),
    "int": ("add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum", "and",
            "or", "xor"),
    "pred": ("and", "or", "xor", "maximum", "minimum"),
}
# Ops whose result depends on the sign of a zero operand beyond a zero's sign.
ZERO_SIGN_SENSITIVE = {"float": ("divide", "power", "atan2")}
SENSITIVE_UNARY = {"float": ("rsqrt",)}
# Constants the rules single out (neutral, absorbing, powers of two) and edge values.
CONSTANTS = {
    "float": (1.0, 0.0, -0.0, -1.0, 2.0, 0.5, 4.0, np.inf, -np.inf, np.nan, 3.0, 1e-3),
    "int": (1, 0, -1, 2, 4, INT_MIN, INT_MAX, 3, 7),
    "pred": (True, False),
}
# Exponents and divisors that keep a zero a zero of either sign.
SAFE_RIGHT = {"divide": (1.0, -1.0, 2.0, 4.0, 0.5, 3.0), "power": (1.0, 2.0, 0.5, 3.0, 0.0)}
REDUCERS = {"float": ("add", "maximum", "minimum"), "int": ("add", "maximum", "minimum"),
            "pred": ("and", "or")}
REDUCER_INITS = {"add": 0, "maximum": -np.inf, "minimum": np.inf, "and": True, "or": False}


def kind(dtype: str) -> str:
    return "pred" if dtype == "pred" else "int" if dtype == "s32" else "float"


def shape_text(dtype: str, dims) -> str:
    return f"{dtype}[{','.join(map(str, dims))}]"


def literal_text(dtype: str, values, dims=()) -> str:
    numpy_type = array(dtype, dims).dtype.numpy
    with np.errstate(over="ignore", invalid="ignore"):
        value = np.asarray(values).astype(numpy_type).reshape(dims)
    return format_literal(value, array(dtype, dims))


@dataclass
class Value:
    name: str
    dtype: str
    dims: tuple[int, ...]

    @property
    def kind(self) -> str:
        return kind(self.dtype)

    @property
    def size(self) -> int:
        return math.prod(self.dims)


class ProgramWriter:
    """Draws one program step by step; `text()` is the module."""

    def __init__(self, draw, sensitive: bool):
        self.draw = draw
        self.sensitive = sensitive            # may it use zero-sign-sensitive ops?
        self.parameters: list[str] = []
        self.lines: list[str] = []
        self.values: list[Value] = []
        self.users: Counter = Counter()
        self.reducers: dict[str, str] = {}
        self.made: dict[str, tuple[str, list[Value]]] = {}      # name: (rhs, operands)
        self.broadcast_new_dims: dict[str, list[int]] = {}
        self.zero_sign_sensitive = False

    # --- values --------------------------------------------------------------------------

    def emit(self, dtype: str, dims, rhs: str, operands=()) -> Value:
        value = Value(f"v{len(self.lines)}", dtype, tuple(dims))
        self.lines.append(f"  {value.name} = {shape_text(dtype, dims)} {rhs}")
        for o in operands:
            self.users[o.name] += 1
        self.values.append(value)
        self.made[value.name] = (rhs, list(operands))
        return value

    def op(self, opcode: str, dtype: str, dims, operands, attrs: str = "") -> Value:
        args = ", ".join(o.name for o in operands)
        return self.emit(dtype, dims, f"{opcode}({args}){attrs}", operands)

    def parameter(self, dtype: str, dims) -> Value:
        value = Value(f"p{len(self.parameters)}", dtype, tuple(dims))
        self.parameters.append(f"  {value.name} = {shape_text(dtype, dims)} "
                               f"parameter({len(self.parameters)})")
        self.values.append(value)
        return value

    def scalar(self, dtype: str, value=None) -> Value:
        if value is None:
            value = self.draw(st.sampled_from(CONSTANTS[kind(dtype)]))
        return self.emit(dtype, (), f"constant({literal_text(dtype, value)})")

    def splat(self, dtype: str, dims, value=None) -> Value:
        s = self.scalar(dtype, value)
        return self.op("broadcast", dtype, dims, [s], ", dimensions={}") if dims else s

    def leaf(self, dtype: str, dims) -> Value:
        """A new value of this type: a parameter, a splat, a small literal or an iota."""
        choices = ["splat", "parameter", "literal", "iota"]
        pick = self.draw(st.sampled_from(choices))
        size = math.prod(dims)
        if pick == "parameter" and len(self.parameters) < MAX_PARAMETERS:
            return self.parameter(dtype, dims)
        if pick == "literal" and 0 < size <= 12:
            values = self.draw(st.lists(st.sampled_from(CONSTANTS[kind(dtype)]),
                                        min_size=size, max_size=size))
            return self.emit(dtype, dims, f"constant({literal_text(dtype, values, dims)})")
        if pick == "iota" and dims and dtype != "pred":
            k = self.draw(st.integers(0, len(dims) - 1))
            return self.emit(dtype, dims, f"iota(), iota_dimension={k}")
        return self.splat(dtype, dims)

    def pick(self, want=lambda v: True) -> Value | None:
        """An earlier value, most often the latest one that fits."""
        fits = [v for v in reversed(self.values) if want(v)]
        if not fits:
            return None
        return fits[self.draw(st.integers(0, len(fits) - 1)) if self.draw(st.booleans()) else 0]

    def partner(self, x: Value) -> Value:
        """A second operand of x's type: x itself, an earlier value or a new leaf."""
        how = self.draw(st.sampled_from(["leaf", "self", "earlier"]))
        if how == "self":
            return x
        other = self.pick(lambda v: v.dtype == x.dtype and v.dims == x.dims and v is not x)
        return other if how == "earlier" and other else self.leaf(x.dtype, x.dims)

    def random_dims(self) -> tuple[int, ...]:
        rank = self.draw(st.sampled_from([2, 1, 3, 0, 4]))
        dims = self.draw(st.lists(st.sampled_from(DIM_SIZES), min_size=rank,
                                  max_size=rank))
        while math.prod(dims) > MAX_ELEMENTS:
            dims = dims[:-1]
        return tuple(dims)

    # --- steps ---------------------------------------------------------------------------

    def unary(self, x: Value) -> Value:
        ops = UNARY[x.kind] + (SENSITIVE_UNARY.get(x.kind, ()) if self.sensitive else ())
        opcode = self.draw(st.sampled_from(ops))
        self.zero_sign_sensitive |= opcode in SENSITIVE_UNARY.get(x.kind, ())
        if opcode == "is-finite":
            return self.op(opcode, "pred", x.dims, [x])
        return self.op(opcode, x.dtype, x.dims, [x])

    def binary(self, x: Value) -> Value:
        ops = BINARY[x.kind] + (ZERO_SIGN_SENSITIVE.get(x.kind, ()) if self.sensitive else ())
        opcode = self.draw(st.sampled_from(ops))
        self.zero_sign_sensitive |= opcode in ZERO_SIGN_SENSITIVE.get(x.kind, ())
        y = self.partner(x)
        if self.draw(st.booleans()):
            x, y = y, x
        return self.op(opcode, x.dtype, x.dims, [x, y])

    def with_constant(self, x: Value) -> Value:
        """x op c with a splat c the rules single out: x * 1, x + -0, max(x, -inf), x / 2..."""
        ops = BINARY[x.kind] + (("divide", "power") if x.kind == "float" else ())
        opcode = self.draw(st.sampled_from(ops))
        values = SAFE_RIGHT.get(opcode) if x.kind == "float" else None
        c = self.splat(x.dtype, x.dims, self.draw(st.sampled_from(values)) if values else None)
        operands = [c, x] if opcode not in SAFE_RIGHT and self.draw(st.booleans()) else [x, c]
        return self.op(opcode, x.dtype, x.dims, operands)

    def compare(self, x: Value) -> Value:
        direction = self.draw(st.sampled_from(["EQ", "NE", "LT", "LE", "GT", "GE"]))
        attrs = f", direction={direction}"
        if x.kind == "float" and self.sensitive and self.draw(st.booleans()):
            attrs += ", type=TOTALORDER"
            self.zero_sign_sensitive = True
        return self.op("compare", "pred", x.dims, [x, self.partner(x)], attrs)

    def select(self, x: Value) -> Value:
        how = self.draw(st.sampled_from(["compare", "earlier", "constant"]))
        p = self.pick(lambda v: v.dtype == "pred" and v.dims == x.dims) \
            if how == "earlier" else None
        if how == "constant":
            p = self.splat("pred", x.dims)
        elif p is None:
            p = self.compare(x)
        y = self.partner(x)
        if self.draw(st.booleans()):
            x, y = y, x
        return self.op("select", x.dtype, x.dims, [p, x, y])

    def clamp(self, x: Value) -> Value:
        """clamp(lo, x, hi), the bounds scalars or x's shape; often -inf and inf."""
        if x.kind == "pred":
            return self.unary(x)
        bounds = [(-np.inf, np.inf), (INT_MIN, INT_MAX), (None, None)]
        lo, hi = self.draw(st.sampled_from(bounds))
        if self.draw(st.booleans()):
            lo_v, hi_v = self.scalar(x.dtype, lo), self.scalar(x.dtype, hi)
        else:
            lo_v, hi_v = self.splat(x.dtype, x.dims, lo), self.splat(x.dtype, x.dims, hi)
        return self.op("clamp", x.dtype, x.dims, [lo_v, x, hi_v])

    def convert(self, x: Value) -> Value:
        to = self.draw(st.sampled_from(DTYPES))
        return self.op("convert", to, x.dims, [x])

    def broadcast(self, x: Value) -> Value:
        dims, kept = list(x.dims), list(range(len(x.dims)))
        for _ in range(self.draw(st.integers(1 if len(dims) < 4 else 0, 4 - len(dims)))):
            at = self.draw(st.integers(0, len(dims)))
            dims.insert(at, self.draw(st.sampled_from([2, 3, 1, 4])))
            kept = [k + 1 if k >= at else k for k in kept]
        if math.prod(dims) > MAX_ELEMENTS:
            return self.unary(x)
        b = self.op("broadcast", x.dtype, dims, [x], f", dimensions={{{_list(kept)}}}")
        self.broadcast_new_dims[b.name] = [d for d in range(len(dims)) if d not in kept]
        return b

    def reshape(self, x: Value) -> Value:
        factors = _prime_factors(x.size) if x.size else [0]
        rank = self.draw(st.integers(1 if x.size != 1 else 0, 4))
        dims = [1] * rank
        for f in factors:
            at = self.draw(st.integers(0, max(rank - 1, 0)))
            if rank:
                dims[at] *= f
        if not rank and x.size != 1 or math.prod(dims) != x.size:
            dims = [x.size]
        return self.op("reshape", x.dtype, dims, [x])

    def transpose(self, x: Value) -> Value:
        perm = self.draw(st.permutations(range(len(x.dims))))
        dims = [x.dims[p] for p in perm]
        t = self.op("transpose", x.dtype, dims, [x], f", dimensions={{{_list(perm)}}}")
        if self.draw(st.booleans()):        # and back, or on to another order
            back = self.draw(st.sampled_from(["inverse", "random"]))
            perm2 = list(np.argsort(perm)) if back == "inverse" else \
                self.draw(st.permutations(range(len(dims))))
            t = self.op("transpose", x.dtype, [dims[p] for p in perm2], [t],
                        f", dimensions={{{_list(perm2)}}}")
        return t

    def slice(self, x: Value) -> Value:
        ranges, dims = [], []
        for n in x.dims:
            start = self.draw(st.integers(0, n))
            limit = self.draw(st.integers(start, n))
            stride = self.draw(st.integers(1, 3))
            ranges.append(f"[{start}:{limit}:{stride}]")
            dims.append(-(-(limit - start) // stride))
        return self.op("slice", x.dtype, dims, [x], f", slice={{{', '.join(ranges)}}}")

    def concatenate(self, x: Value) -> Value:
        if not x.dims:
            return self.reshape(x)
        d = self.draw(st.integers(0, len(x.dims) - 1))
        n = x.dims[d]
        how = self.draw(st.sampled_from(["adjacent slices", "other", "self"]))
        if how == "adjacent slices" and n >= 2:
            k = self.draw(st.integers(1, n - 1))
            full = [f"[0:{m}]" for m in x.dims]
            parts = []
            for lo, hi in ((0, k), (k, n)):
                ranges = full[:d] + [f"[{lo}:{hi}]"] + full[d + 1:]
                dims = x.dims[:d] + (hi - lo,) + x.dims[d + 1:]
                parts.append(self.op("slice", x.dtype, dims, [x],
                                     f", slice={{{', '.join(ranges)}}}"))
            return self.op("concatenate", x.dtype, x.dims, parts, f", dimensions={{{d}}}")
        if how == "other":
            m = self.draw(st.integers(0, 3))
            other_dims = x.dims[:d] + (m,) + x.dims[d + 1:]
            y = self.pick(lambda v: v.dtype == x.dtype and len(v.dims) == len(x.dims) and
                          v.dims[:d] == x.dims[:d] and v.dims[d + 1:] == x.dims[d + 1:]) \
                if self.draw(st.booleans()) else None
            y = y or self.leaf(x.dtype, other_dims)
        else:
            y = x
        dims = x.dims[:d] + (n + y.dims[d],) + x.dims[d + 1:]
        if math.prod(dims) > MAX_ELEMENTS:
            return self.slice(x)
        operands = [x, y] if self.draw(st.booleans()) else [y, x]
        return self.op("concatenate", x.dtype, dims, operands, f", dimensions={{{d}}}")

    def pad(self, x: Value) -> Value:
        if not x.dims:              # a scalar's pad has no text XLA parses (hlo/printer.py)
            return self.reshape(x)
        zero = self.draw(st.booleans())
        config, dims = [], []
        for n in x.dims:
            lo, hi = (0, 0) if zero else (self.draw(st.integers(-1, 2)),
                                          self.draw(st.integers(-1, 2)))
            interior = 0 if zero else self.draw(st.integers(0, 2))
            size = lo + hi + n + max(n - 1, 0) * interior
            if size < 0 or (n == 0 and (lo < 0 or hi < 0)):
                lo = hi = 0
                size = n + max(n - 1, 0) * interior
            config.append(f"{lo}_{hi}_{interior}")
            dims.append(size)
        if math.prod(dims) > MAX_ELEMENTS:
            return self.slice(x)
        v = self.scalar(x.dtype, 0 if self.draw(st.booleans()) else None)
        return self.op("pad", x.dtype, dims, [x, v], f", padding={'x'.join(config)}")

    def reverse(self, x: Value) -> Value:
        dims = self.draw(st.lists(st.integers(0, max(len(x.dims) - 1, 0)), unique=True,
                                  max_size=len(x.dims)))
        r = self.op("reverse", x.dtype, x.dims, [x], f", dimensions={{{_list(sorted(dims))}}}")
        if self.draw(st.booleans()):
            r = self.op("reverse", x.dtype, x.dims, [r], f", dimensions={{{_list(sorted(dims))}}}")
        return r

    def reduce(self, x: Value) -> Value:
        if not x.dims:
            return self.unary(x)
        new_dims = None
        if self.draw(st.booleans()) and len(x.dims) < 4:       # a reduce of a broadcast
            x = self.broadcast(x)
            new_dims = self.broadcast_new_dims.get(x.name)
        reducer = self.draw(st.sampled_from(REDUCERS[x.kind]))
        init = self.scalar(x.dtype, REDUCER_INITS[reducer] if self.draw(st.booleans()) else None)
        r = self.reduce_with(x, reducer, init, new_dims)
        if r.dims and self.draw(st.booleans()):                 # a reduce of a reduce
            r = self.reduce_with(r, reducer, init)
        return r

    def reduce_with(self, x: Value, reducer: str, init: Value, dims=None) -> Value:
        if dims is None or self.draw(st.booleans()):
            dims = sorted(self.draw(st.lists(st.integers(0, len(x.dims) - 1), unique=True,
                                             max_size=len(x.dims))))
        kept = tuple(n for i, n in enumerate(x.dims) if i not in dims)
        attrs = f", dimensions={{{_list(dims)}}}, to_apply={self.reducer(reducer, x.dtype)}"
        return self.op("reduce", x.dtype, kept, [x, init], attrs)

    def reducer(self, opcode: str, dtype: str) -> str:
        name = f"{opcode}_{dtype}"
        if name not in self.reducers:
            s = shape_text(dtype, ())
            self.reducers[name] = (f"{name} {{\n  {name}.a = {s} parameter(0)\n"
                                   f"  {name}.b = {s} parameter(1)\n"
                                   f"  ROOT {name}.r = {s} {opcode}({name}.a, {name}.b)\n}}\n")
        return name

    def dot(self, x: Value) -> Value:
        if x.kind == "pred" or not x.dims or len(x.dims) > 3:
            return self.binary(x)
        if self.draw(st.booleans()):               # a transposed operand
            x = self.transpose(x)
        rank = len(x.dims)
        lhs_contract = self.draw(st.lists(st.integers(0, rank - 1), unique=True, max_size=2))
        batch = [d for d in range(rank) if d not in lhs_contract][:1] \
            if self.draw(st.integers(0, 3)) == 0 else []
        free = [self.draw(st.sampled_from([2, 3, 1, 4]))
                for _ in range(self.draw(st.integers(0, 1)))]
        rhs_dims = [x.dims[d] for d in batch + lhs_contract] + free
        order = self.draw(st.permutations(range(len(rhs_dims))))
        y = self.pick(lambda v: v.dtype == x.dtype and v.dims == tuple(rhs_dims[o] for o in order))
        y = y or self.leaf(x.dtype, [rhs_dims[o] for o in order])
        where = {o: i for i, o in enumerate(order)}     # rhs position of rhs_dims[o]
        rhs_batch = [where[i] for i in range(len(batch))]
        rhs_contract = [where[len(batch) + i] for i in range(len(lhs_contract))]
        lhs_free = [x.dims[d] for d in range(rank) if d not in batch + lhs_contract]
        rhs_free = [y.dims[d] for d in range(len(y.dims)) if d not in rhs_batch + rhs_contract]
        dims = [x.dims[d] for d in batch] + lhs_free + rhs_free
        if math.prod(dims) > MAX_ELEMENTS:
            return self.binary(x)
        attrs = (f", lhs_batch_dims={{{_list(batch)}}}, lhs_contracting_dims={{"
                 f"{_list(lhs_contract)}}}, rhs_batch_dims={{{_list(rhs_batch)}}}, "
                 f"rhs_contracting_dims={{{_list(rhs_contract)}}}")
        return self.op("dot", x.dtype, dims, [x, y], attrs)

    def repeat(self, x: Value) -> Value:
        """An earlier instruction again, with the same operands: a common subexpression."""
        earlier = [v for v in self.values if self.made.get(v.name, ("", []))[1]]
        if not earlier:
            return self.unary(x)
        source = self.draw(st.sampled_from(earlier))
        rhs, operands = self.made[source.name]
        return self.emit(source.dtype, source.dims, rhs, operands)

    STEPS = ("unary", "binary", "with_constant", "compare", "select", "clamp", "convert",
             "broadcast", "reshape", "transpose", "slice", "concatenate", "pad", "reverse",
             "reduce", "dot", "repeat")

    def step(self) -> None:
        x = self.pick()
        getattr(self, self.draw(st.sampled_from(self.STEPS)))(x)

    def text(self) -> str:
        results = [v for v in self.values if not self.users[v.name] and v.name[0] == "v"]
        body = self.parameters + self.lines
        if len(results) == 1:       # the last instruction
            body[-1] = "  ROOT" + body[-1][1:]
        else:
            shapes = ", ".join(shape_text(v.dtype, v.dims) for v in results)
            names = ", ".join(v.name for v in results)
            body.append(f"  ROOT result = ({shapes}) tuple({names})")
        return ("HloModule random\n\n" + "\n".join(self.reducers.values()) +
                "\nENTRY main {\n" + "\n".join(body) + "\n}\n")


def _list(xs) -> str:
    return ",".join(str(int(x)) for x in xs)


def _prime_factors(n: int) -> list[int]:
    out, f = [], 2
    while n > 1:
        while n % f == 0:
            out.append(f)
            n //= f
        f += 1
    return out


class Program:
    def __init__(self, text: str, zero_sign_sensitive: bool):
        self.text, self.zero_sign_sensitive = text, zero_sign_sensitive

    def __repr__(self) -> str:           # hypothesis prints a failing program as HLO
        return f"Program(zero_sign_sensitive={self.zero_sign_sensitive}):\n{self.text}"


@st.composite
def programs(draw) -> Program:
    writer = ProgramWriter(draw, sensitive=draw(st.integers(0, 3)) == 0)
    for _ in range(draw(st.integers(1, 3))):
        writer.parameter(draw(st.sampled_from(DTYPES)), writer.random_dims())
    for _ in range(draw(st.integers(3, 20))):
        writer.step()
    return Program(writer.text(), writer.zero_sign_sensitive)
