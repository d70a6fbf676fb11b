"""List functions computed in Python between iterations ("host calls").

Egglog has no loops, so a function over a whole list (compose two permutations, sort, the
complement of a dimension set) could only be written once per list length: one egglog rule
per combination of lengths, ~600 of the default set's ~830 rules, and every push/pop of the
e-graph clones every rule (~0.1 ms each). Instead such a function is a table:

    (relation Req_compose (IVec IVec))                  ; what rules asked for
    (function Host_compose (IVec IVec) IVec :no-merge)  ; what Python answered

A rule using compose(p, q) looks the answer up in its query (`(= r (Host_compose p q))`), and
a companion *request rule* (same query up to that lookup) adds `(Req_compose p q)`. Before
each rewrite round the runner runs the request rules, and `HostCalls.answer` reads the new
requests (one `print-function` per grown table), evaluates the function row's Python
meaning (rule_functions.Fn.py, the one the rule checker uses) and writes the answers; where
the function has no value (NoValue) nothing is written and the rule does not match. Nested
calls take one more request round each. A guard (a "bool" function) is a relation holding
the argument tuples for which it is true.

A "type" parameter travels as three columns: its element type, its dims and its extra text
(the full shape where the layout is not the default), so that Python sees layouts.
"""
from __future__ import annotations

from .bindings import egg
from .ingest import SPAN, run_commands
from ..rule_compiler.rule_functions import FUNCTIONS, NoValue, Fn, type_value
from .schema import atom, function, relation, set_value
from .terms import ivec

RULESET = "host-requests"
MAX_ROUNDS = 8          # request/answer rounds per iteration (nesting depth of host calls)

_SORTS = {"ints": ("IVec",), "int": ("i64",), "str": ("String",), "dtype": ("String",),
          "splat": ("String",), "type": ("String", "IVec", "String")}


def request_table(fn: Fn) -> str:
    return f"Req_{fn.name}"


def answer_table(fn: Fn) -> str:
    return f"Host_{fn.name}"


def declarations(fn: Fn) -> str:
    """The request relation and the answer table of one host function."""
    columns = [s for kind in fn.params for s in _SORTS[kind]]
    answer = relation(answer_table(fn), columns) if fn.result == "bool" else \
        function(answer_table(fn), columns, _SORTS[fn.result][0])
    return f"{relation(request_table(fn), columns)}\n{answer}"


class HostCalls:
    """Answers one e-graph's requests; `reset()` at the start of each push/pop session."""

    def __init__(self, names):
        self.functions = [FUNCTIONS[name] for name in names]
        self.reset()

    def reset(self) -> None:
        self.seen: dict[str, set] = {fn.name: set() for fn in self.functions}
        self.sizes: dict[str, int] = {fn.name: 0 for fn in self.functions}

    def answer(self, egraph) -> int:
        """Answer the requests made since the last call; returns how many facts it wrote."""
        facts = []
        sizes = _table_sizes(egraph)
        for fn in self.functions:
            size = sizes.get(request_table(fn), 0)
            if size == self.sizes[fn.name]:
                continue
            self.sizes[fn.name] = size
            for columns in table_rows(egraph, request_table(fn)):
                if columns in self.seen[fn.name]:
                    continue
                self.seen[fn.name].add(columns)
                fact = _answer_fact(fn, columns)
                if fact is not None:
                    facts.append(fact)
        if facts:
            run_commands(egraph, facts, "host")
        return len(facts)


def _answer_fact(fn: Fn, columns: tuple) -> str | None:
    args, rest = [], list(columns)
    for kind in fn.params:
        if kind == "type":
            args.append((rest.pop(0), rest.pop(0), rest.pop(0)))
        else:
            args.append(rest.pop(0))
    try:
        values = [type_value(*a) if kind == "type" else a for a, kind in zip(args, fn.params)]
        result = fn.py(*values)
    except NoValue:
        return None
    key = atom(answer_table(fn), *map(_text, columns))
    if fn.result == "bool":
        return key if result else None
    return set_value(key, _text(result))


def _text(value) -> str:
    if isinstance(value, tuple):
        return ivec(value)
    if isinstance(value, str):      # read back from egglog: already in its escaped form
        return f'"{value}"'
    return str(int(value))


def _table_sizes(egraph) -> dict[str, int]:
    """Rows per table, all in one command (~0.1 ms at 20k e-nodes)."""
    [out] = egraph.run_program(egg.PrintSize(SPAN, None))
    return dict(out.sizes)


def table_rows(egraph, table: str):
    """The argument tuples of a table's rows, as Python values (lists become tuples)."""
    [out] = egraph.run_program(egg.PrintFunction(SPAN, table, None, None,
                                                 egg.DefaultPrintFunctionMode()))
    dag = out.termdag
    for row, _ in out.terms:
        yield tuple(_value(dag, arg) for arg in dag.get(row).args)


def _value(dag, node: int):
    term = dag.get(node)
    if hasattr(term, "name"):           # (vec-of ...) or (vec-empty)
        return tuple(dag.get(item).value.value for item in term.args)
    return term.value.value
