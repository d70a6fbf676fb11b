"""A frozen e-graph as integer arrays: what extraction, folding and decoding read.

`freeze()` hands out rows of egglog Values; `value_to_i64` turns an e-class Value into its id
(and an i64 into its value) in ~0.15 µs. Each term e-node becomes one entry of flat arrays
(opcode index, compact e-class, leaf key, Type and Attr ids) with its operand e-classes in
CSR form (`child_ptr`, `child`). Subsumed rows are dropped. Type and Attr values are decoded
on demand, once each (`Values`).
"""
from __future__ import annotations

import gc
from contextlib import contextmanager
from itertools import chain

import numpy as np

from ..shape import AnyShape
from .bindings import egg
from .schema import TERM_CONSTRUCTORS, attr_constructors
from .terms import array_shape, tuple_shape, unescape

_ARITY = {"Leaf": 0, "Op1": 1, "Op2": 2, "Op3": 3}


@contextmanager
def no_gc():
    """Python's cyclic collector off for a while: converting rows, fusion and decoding
    allocate hundreds of thousands of short-lived containers, and each collection they
    trigger traverses every live object again (it doubles the time of decoding, about 15%
    of a large module's optimize); what was left in cycles is collected once it is back on."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class Values:
    """Decodes the Type, Attr and String values of one frozen e-graph."""

    def __init__(self, egraph: egg.EGraph, functions: dict, extras: dict):
        """`functions`: `freeze().functions`, read once (each access rebuilds the dict)."""
        self.egraph = egraph
        self.v2i = egraph.value_to_i64
        self._extras = extras
        self._strings: dict[int, str] = {}
        self._type_rows = self._rows(functions, ("T", "TT"))
        self._attr_rows = self._rows(functions, attr_constructors())
        self._shapes: dict[int, AnyShape] = {}
        self._attrs: dict[int, tuple[str, tuple]] = {}

    def _rows(self, functions: dict, names) -> dict:
        out = {}
        for name in names:
            fn = functions.get(name)
            if fn is not None:
                for r in fn.rows:
                    out[self.v2i(r.output)] = (name, r.inputs)
        return out

    def string(self, value) -> str:
        k = self.v2i(value)
        s = self._strings.get(k)
        if s is None:
            s = self._strings[k] = self.egraph.value_to_string(value)
        return s

    def ints(self, value) -> tuple[int, ...]:
        return tuple(self.v2i(v) for v in self.egraph.value_to_vec(value))

    def shape(self, type_id: int) -> AnyShape:
        shape = self._shapes.get(type_id)
        if shape is None:
            name, inputs = self._type_rows[type_id]
            if name == "T":
                shape = array_shape(self.string(inputs[0]), self.ints(inputs[1]),
                                    unescape(self.string(inputs[2])), self._extras)
            else:
                shape = tuple_shape([self.shape(t) for t in self.ints(inputs[0])])
            self._shapes[type_id] = shape
        return shape

    def attr(self, attr_id: int) -> tuple[str, tuple]:
        """(constructor, field values): vectors as int tuples, strings, ints; rest last."""
        value = self._attrs.get(attr_id)
        if value is None:
            name, inputs = self._attr_rows[attr_id]
            fields = []
            for kind, v in zip(name[1:] + "s", inputs):
                if kind == "v":
                    fields.append(self.ints(v))
                elif kind == "i":
                    fields.append(self.v2i(v))
                else:
                    fields.append(unescape(self.string(v)))
            value = self._attrs[attr_id] = (name, tuple(fields))
        return value


class FrozenTerms:
    """Term e-nodes of one e-graph (see module doc). Node order is the frozen row order, which
    egglog keeps reproducible, so ties broken by node index are deterministic."""

    def __init__(self, egraph: egg.EGraph, extras: dict,
                 relations: dict[str, str] | None = None):
        """`relations`: name -> column kinds ("s" String, "t" Term) of relations to read
        as well, into `self.relations` (rows of strings and compact classes, -1 for a class
        without term e-nodes)."""
        with no_gc():
            functions = egraph.freeze().functions
            self.values = Values(egraph, functions, extras)
            self._read_nodes(functions)
            self.row_class = self._placeholders(functions)
            self.relations = {name: self._relation(functions.get(name), kinds)
                              for name, kinds in (relations or {}).items()}
        self.shape = self.values.shape
        self.attr_value = self.values.attr

    def _read_nodes(self, functions: dict) -> None:
        """One table at a time: all Values of a table go through value_to_i64 in one C-level
        `map`, then numpy slices out the columns."""
        v2i = self.values.v2i
        ops, keys, attrs, types, classes, children, counts = [], [], [], [], [], [], []
        names: dict[int, str] = {}
        for name in TERM_CONSTRUCTORS:
            fn = functions.get(name)
            rows = [r for r in fn.rows if not r.subsumed] if fn is not None else []
            if not rows:
                continue
            inputs = [r.inputs for r in rows]
            width = len(inputs[0])
            flat = np.fromiter(map(v2i, chain.from_iterable(inputs)), np.int64,
                               len(rows) * width).reshape(len(rows), width)
            for raw, first in zip(*np.unique(flat[:, 0], return_index=True)):
                names.setdefault(int(raw), self.values.string(inputs[first][0]))
            ops.append(flat[:, 0])
            attrs.append(flat[:, -2])
            types.append(flat[:, -1])
            classes.append(np.fromiter(map(v2i, (r.output for r in rows)), np.int64, len(rows)))
            arity = _ARITY.get(name)
            if arity is None:
                kids = [self.values.ints(i[1]) for i in inputs]
                children.append(np.fromiter(chain.from_iterable(kids), np.int64))
                counts.append(np.array([len(k) for k in kids], dtype=np.int64))
            else:
                children.append(flat[:, 1:1 + arity].reshape(-1))
                counts.append(np.full(len(rows), arity, dtype=np.int64))
            keys.append(flat[:, 1] if arity == 0 else np.zeros(len(rows), dtype=np.int64))
        self.class_ids, self.eclass = np.unique(np.concatenate(classes), return_inverse=True)
        self.n_classes = len(self.class_ids)
        self.opnames = sorted(set(names.values()))
        raw_ops = np.array(sorted(names), dtype=np.int64)
        op_index = np.array([self.opnames.index(names[r]) for r in raw_ops.tolist()],
                            dtype=np.int32)
        self.op = op_index[np.searchsorted(raw_ops, np.concatenate(ops))]
        self.key = np.concatenate(keys)
        self.attr = np.concatenate(attrs)
        self.type = np.concatenate(types)
        count = np.concatenate(counts)
        self.child_ptr = np.zeros(len(count) + 1, dtype=np.int64)
        np.cumsum(count, out=self.child_ptr[1:])
        self.child = self.compact(np.concatenate(children))
        self.class_type = np.empty(self.n_classes, dtype=np.int64)
        self.class_type[self.eclass] = self.type

    def __len__(self) -> int:
        return len(self.op)

    def compact(self, raw: np.ndarray) -> np.ndarray:
        """Compact class indices of raw e-class ids (all must be term classes)."""
        idx = np.searchsorted(self.class_ids, raw)
        if len(raw) and (idx.max() >= self.n_classes or (self.class_ids[idx] != raw).any()):
            raise AssertionError("an operand e-class has no term e-node")
        return idx

    def children(self, node: int) -> np.ndarray:
        return self.child[self.child_ptr[node]:self.child_ptr[node + 1]]

    def _relation(self, fn, kinds: str) -> list[tuple]:
        rows = []
        for r in fn.rows if fn is not None else ():
            rows.append(tuple(self.values.string(v) if kind == "s" else self._class(v)
                              for v, kind in zip(r.inputs, kinds)))
        return rows

    def _class(self, value) -> int:
        raw = self.values.v2i(value)
        i = int(np.searchsorted(self.class_ids, raw))
        return i if i < self.n_classes and self.class_ids[i] == raw else -1

    def _placeholders(self, functions: dict) -> np.ndarray:
        """Encoding row -> compact e-class, from the `(Nd row)` placeholders."""
        v2i = self.values.v2i
        rows = functions["Nd"].rows
        row = np.fromiter(map(v2i, (r.inputs[0] for r in rows)), np.int64, len(rows))
        eclass = np.fromiter(map(v2i, (r.output for r in rows)), np.int64, len(rows))
        out = np.full(int(row.max()) + 1 if len(rows) else 0, -1, dtype=np.int64)
        out[row] = self.compact(eclass)
        return out
