"""Shared test helpers: fixture discovery and structural IR comparison."""
from __future__ import annotations

import pathlib

import numpy as np
import pytest

CORPUS = pathlib.Path(__file__).parent / "corpus"


def corpus_files(include_xla_opt: bool = True) -> list[pathlib.Path]:
    files = sorted(CORPUS.rglob("*.hlo"))
    if not include_xla_opt:
        files = [f for f in files if not f.name.endswith(".xla_opt.hlo")]
    return files


def corpus_ids(files) -> list[str]:
    return [str(f.relative_to(CORPUS)) for f in files]


def assert_same_ir(a, b) -> None:
    """Modules equal as IR: same computations, instructions, shapes (with layouts),
    operands, attributes and literal bits. Names identify operands and callees."""
    assert a.name == b.name
    assert a.attrs == b.attrs
    assert a.extra_sections == b.extra_sections
    assert a.entry.name == b.entry.name
    assert sorted(c.name for c in a.computations) == sorted(c.name for c in b.computations)
    for ca in a.computations:
        cb = b.computation(ca.name)
        assert ca.root.name == cb.root.name, ca.name
        assert ca.execution_thread == cb.execution_thread
        assert [i.name for i in ca.instructions] == [i.name for i in cb.instructions]
        for ia, ib in zip(ca.instructions, cb.instructions):
            where = f"{ca.name}/{ia.name}"
            assert ia.opcode == ib.opcode, where
            assert ia.shape == ib.shape, where
            assert [o.name for o in ia.operands] == [o.name for o in ib.operands], where
            assert ia.parameter_number == ib.parameter_number, where
            assert _attrs_key(ia.attrs) == _attrs_key(ib.attrs), where
            assert _literal_key(ia.literal) == _literal_key(ib.literal), where


def _attrs_key(attrs: dict):
    from hlo_opt.ir import Computation
    def norm(v):
        if isinstance(v, Computation):
            return ("computation", v.name)
        if isinstance(v, tuple):
            return tuple(norm(x) for x in v)
        return v
    return {k: norm(v) for k, v in attrs.items()}


def _literal_key(lit):
    if isinstance(lit, tuple):
        return tuple(_literal_key(x) for x in lit)
    if isinstance(lit, np.ndarray):
        return (lit.dtype.str, lit.shape, lit.tobytes())
    return lit


@pytest.fixture(scope="session")
def xla():
    """The XLA oracle, or a skip with the reason it is unavailable."""
    from hlo_opt import xla_oracle
    if not xla_oracle.available():
        pytest.skip(xla_oracle.reason)
    return xla_oracle


def counted_loop(step: str) -> str:
    """A module whose entry runs a while loop 3 times over (counter, f32[4] x): `step` is
    the body's lines computing `new` (f32[4]) from `v` (the loop's x)."""
    return f"""HloModule m
cond {{
  c = (s32[], f32[4]) parameter(0)
  n = s32[] get-tuple-element(c), index=0
  k = s32[] constant(3)
  ROOT lt = pred[] compare(n, k), direction=LT
}}
body {{
  b = (s32[], f32[4]) parameter(0)
  n = s32[] get-tuple-element(b), index=0
  one = s32[] constant(1)
  m = s32[] add(n, one)
  v = f32[4] get-tuple-element(b), index=1
{step}
  ROOT r = (s32[], f32[4]) tuple(m, new)
}}
ENTRY main {{
  x = f32[4] parameter(0)
  i = s32[] constant(0)
  t = (s32[], f32[4]) tuple(i, x)
  ROOT w = (s32[], f32[4]) while(t), condition=cond, body=body
}}
"""
