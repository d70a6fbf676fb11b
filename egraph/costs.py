"""What each e-node costs: the target's cost model applied to the frozen e-graph.

A cost model prices an instruction from its opcode, type, attributes and operand types.
Programs repeat those signatures a lot, so each distinct one is priced once; numpy finds
the distinct ones.
"""
from __future__ import annotations

import numpy as np

from ..targets import CostModel
from .frozen import FrozenTerms
from .terms import RestTable, named_attrs


def node_costs(terms: FrozenTerms, model: CostModel, rests: RestTable) -> np.ndarray:
    """Each e-node's cost, priced once per distinct (opcode, type, attributes, operand
    types); operand types are padded to 3 columns, wider nodes are priced one by one."""
    n = len(terms.op)
    count = np.diff(terms.child_ptr)
    narrow = np.flatnonzero(count <= 3)
    columns = np.full((len(narrow), 7), -1, dtype=np.int64)
    columns[:, 0], columns[:, 1], columns[:, 2] = (a[narrow] for a in (terms.op, terms.type,
                                                                        terms.attr))
    columns[:, 3] = count[narrow]
    for j in range(3):
        has = narrow[count[narrow] > j]
        operand = terms.child[terms.child_ptr[has] + j]
        columns[count[narrow] > j, 4 + j] = terms.class_type[operand]
    representatives, group = _distinct_rows(columns)
    out = np.empty(n, dtype=np.float64)
    out[narrow] = np.array([_price(terms, model, rests, *row[:3], row[4:4 + row[3]])
                            for row in columns[representatives].tolist()])[group]
    for i in np.flatnonzero(count > 3).tolist():
        out[i] = _price(terms, model, rests, int(terms.op[i]), int(terms.type[i]),
                        int(terms.attr[i]), terms.class_type[terms.children(i)].tolist())
    return out


def _distinct_rows(columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(one row index per distinct row, each row's distinct-row number): lexsort, then a new
    group wherever a row differs from the one before (np.unique(axis=0) is ~20x slower)."""
    order = np.lexsort(columns.T[::-1])
    ordered = columns[order]
    new = np.ones(len(order), dtype=bool)
    new[1:] = (ordered[1:] != ordered[:-1]).any(axis=1)
    group = np.empty(len(order), dtype=np.int64)
    group[order] = np.cumsum(new) - 1
    return order[new], group


def _price(terms: FrozenTerms, model: CostModel, rests: RestTable, op: int, type_id: int,
           attr_id: int, operand_types) -> float:
    opcode = terms.opnames[op]
    _, fields = terms.attr_value(attr_id)
    return model.node_cost(opcode, terms.shape(type_id), named_attrs(opcode, fields, rests),
                           [terms.shape(t) for t in operand_types])
