"""The public entry points verify what they are given: optimize, compile (of a Module or of
text) and evaluate reject an ill-typed module with an HloError naming the instruction and
its position, instead of crashing natively, failing deep inside a stage or computing a wrong
answer; `verify=False` skips the check for callers that already verified. Arrays larger
than the machine's memory are an HloError before compile or evaluate allocates anything."""
from __future__ import annotations

import re

import numpy as np
import pytest

import hlo_opt
from hlo_opt import HloError, memory, verifier

# Ill-typed modules (the body after `HloModule r`), what went wrong without the verifier,
# and what the verifier says. Each ROOT/instruction sits on line 2 of the text.
REPRODUCERS = {
    "r01_dot_batch_and_contracting_counts": (
        "ENTRY e { a = f32[128,128] parameter(0)  b = f32[128,128] parameter(1)  "
        "ROOT d = f32[128] dot(a, b), lhs_batch_dims={1,0}, lhs_contracting_dims={1,0}, "
        "rhs_batch_dims={0}, rhs_contracting_dims={1} }",
        r"d: dot lhs_contracting_dims \{1,0\} and rhs_contracting_dims \{1\} differ in length"),
    "r02_dot_declared_shape": (
        "ENTRY e { a = f32[8,128] parameter(0)  b = f32[128,128] parameter(1)  "
        "ROOT d = f32[7,128] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0} }",
        r"d: dot result should be f32\[8,128\], declared f32\[7,128\]"),
    "r04_dynamic_update_slice_rank": (
        "ENTRY e { p0 = f32[3,3] parameter(0)  p1 = f32[1,12,512] parameter(1)  "
        "i = u32[] parameter(2)  "
        "ROOT d = f32[1800,12,512] dynamic-update-slice(p0, p1, i, i, i) }",
        r"d: update f32\[1,12,512\] has rank 3, operand f32\[3,3\] has rank 2"),
    "r14_reshape_element_count": (
        "ENTRY e { p = s32[2,4,2] parameter(0)  ROOT r = s32[3,3] reshape(p) }",
        r"r: reshape from s32\[2,4,2\] \(16 elements\) to s32\[3,3\] \(9 elements\)"),
    "r06_parameter_numbers": (
        "ENTRY e { p = f32[4] parameter(1)  ROOT n = f32[4] negate(p) }",
        r"p: parameter\(1\) in computation e, which has 1 parameter: the numbers must be 0..0"),
    "r08_dot_dimension_out_of_range": (
        "ENTRY e { a = f32[4,4] parameter(0)  b = f32[4,4] parameter(1)  "
        "ROOT d = f32[4,4] dot(a, b), lhs_contracting_dims={5}, rhs_contracting_dims={0} }",
        r"d: lhs_contracting_dims entry 5 is out of range for rank 2"),
    "r16_dynamic_slice_sizes": (
        "ENTRY e { c = s32[4] constant({0,16,32,48})  i = u32[] parameter(0)  "
        "ROOT d = s32[1] dynamic-slice(c, i), dynamic_slice_sizes={5} }",
        r"d: dynamic_slice_sizes \{5\} do not fit operand s32\[4\]"),
    "r10_binary_operand_types": (
        "ENTRY e { a = f64[8] parameter(0)  b = f32[8] parameter(1)  "
        "ROOT p = f32[8] power(a, b) }",
        r"p: operand types f64\[8\] and f32\[8\] differ"),
}


def _arguments(module: hlo_opt.Module) -> list[np.ndarray]:
    return [np.zeros(p.shape.dims, p.shape.dtype.numpy) for p in module.entry.parameters]


# Each entry point applied to HLO text (parsed first, except by compile_text).
ENTRIES = {
    "optimize": lambda text, **kw: hlo_opt.optimize(hlo_opt.parse(text), rules="none", **kw),
    "compile": lambda text, **kw: hlo_opt.compile(hlo_opt.parse(text), **kw)(
        *_arguments(hlo_opt.parse(text))),
    "compile_text": lambda text, **kw: hlo_opt.compile(text, **kw)(
        *_arguments(hlo_opt.parse(text))),
    "evaluate": lambda text, **kw: hlo_opt.evaluate(hlo_opt.parse(text),
                                                    _arguments(hlo_opt.parse(text)), **kw),
}


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("name", REPRODUCERS)
def test_ill_typed_modules_are_rejected_at_every_entry(name, entry):
    body, message = REPRODUCERS[name]
    with pytest.raises(HloError) as info:
        ENTRIES[entry](f"HloModule r\n{body}\n")
    e = info.value
    assert re.search(message, e.message), e.message
    assert e.line == 2 and e.column > 1, str(e)


WELL_TYPED = """HloModule m
ENTRY e {
  a = f32[2,3] parameter(0)
  b = f32[3,2] parameter(1)
  d = f32[2,2] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT n = f32[2,2] negate(d)
}
"""


@pytest.mark.parametrize("entry", ENTRIES)
def test_verify_false_skips_the_verifier(entry, monkeypatch):
    calls = []
    real = verifier.verify
    monkeypatch.setattr(verifier, "verify", lambda m: calls.append(m) or real(m))
    ENTRIES[entry](WELL_TYPED)
    assert [m.entry.root.name for m in calls] == ["n"]
    calls.clear()
    ENTRIES[entry](WELL_TYPED, verify=False)
    assert calls == []


def test_results_do_not_depend_on_verification():
    module = hlo_opt.parse(WELL_TYPED)
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.arange(6, dtype=np.float32).reshape(3, 2)
    expected = -(a @ b)
    for verify in (True, False):
        np.testing.assert_array_equal(hlo_opt.evaluate(module, [a, b], verify=verify)[0],
                                      expected)
        np.testing.assert_array_equal(hlo_opt.compile(module, verify=verify)(a, b)[0],
                                      expected)


# XLA infers all-gather's shard count from the declared result (the replica count is not in
# the module), so this is well typed: 99999999999 participants. It cannot be allocated.
BIG_ALL_GATHER = """HloModule r
ENTRY e {
  a = f32[1,4] parameter(0)
  ROOT g = f32[99999999999,4] all-gather(a), dimensions={0}
}
"""


@pytest.mark.parametrize("entry", ["compile", "compile_text", "evaluate"])
def test_arrays_larger_than_memory_are_refused_before_allocation(entry, monkeypatch):
    monkeypatch.setattr(memory, "physical_memory", lambda: 64 << 30)
    with pytest.raises(HloError, match=r"g: f32\[99999999999,4\] needs 1\.5 TiB, more than "
                                       r"this machine's memory \(64\.0 GiB\)") as info:
        ENTRIES[entry](BIG_ALL_GATHER)
    assert (info.value.line, info.value.column) == (4, 8)


def test_optimizing_a_big_but_representable_module_is_fine():
    out = hlo_opt.optimize(hlo_opt.parse(BIG_ALL_GATHER), rules="none")
    assert out.entry.root.shape.dims == (99999999999, 4)


@pytest.mark.parametrize("entry", ENTRIES)
def test_sizes_beyond_int64_bytes_are_rejected_by_the_verifier(entry):
    text = BIG_ALL_GATHER.replace("99999999999", "9999999999999999999")
    with pytest.raises(HloError, match=r"more than an array can hold \(2\^63 - 1 bytes\)"):
        ENTRIES[entry](text)


# Well-typed modules at the edge of what XLA accepts, with arguments: each entry point
# computes XLA's answer (the values below are what the interpreter, an independent numpy
# reading, gives; XLA itself is asked where jax is installed).
# A maximum spelled out (the interpreter's generic reducer path) and a plain add (its
# ufunc path), each returning a 1-tuple.
_SELECT_MAX = ("f { a = f32[] parameter(0)  b = f32[] parameter(1)  "
               "c = pred[] compare(a, b), direction=GE  s = f32[] select(c, a, b)  "
               "ROOT t = (f32[]) tuple(s) }\n")
_ADD = ("f { a = f32[] parameter(0)  b = f32[] parameter(1)  s = f32[] add(a, b)  "
        "ROOT t = (f32[]) tuple(s) }\n")
EDGE_MODULES = {
    "reduce with a 1-tuple reducer": (
        _SELECT_MAX + "ENTRY e { p = f32[4,3] parameter(0)  "
        "z = f32[] constant(1)  r = (f32[3]) reduce(p, z), dimensions={0}, to_apply=f  "
        "g = f32[3] get-tuple-element(r), index=0  ROOT n = f32[3] negate(g) }",
        [np.arange(12, dtype=np.float32).reshape(4, 3) - 5]),
    "reduce-window with a 1-tuple reducer": (
        _ADD + "ENTRY e { p = f32[4,6] parameter(0)  "
        "z = f32[] constant(-1)  ROOT r = (f32[3,5]) reduce-window(p, z), window={size=2x2}, "
        "to_apply=f }",
        [np.arange(24, dtype=np.float32).reshape(4, 6) - 12]),
    "scatter with a 1-tuple combiner": (
        _SELECT_MAX + "ENTRY e { p = f32[4] parameter(0)  i = s32[3,1] parameter(1)  "
        "u = f32[3] parameter(2)  ROOT s = f32[4] scatter(p, i, u), update_window_dims={}, "
        "inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, "
        "to_apply=f }",
        [np.arange(4, dtype=np.float32), np.array([[1], [3], [1]], np.int32),
         np.array([10, -20, 5], np.float32)]),
    "pred dot": (
        "ENTRY e { a = pred[9,30] parameter(0)  b = pred[30,10] parameter(1)  "
        "ROOT d = pred[9,10] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0} }",
        [np.random.default_rng(0).random((9, 30)) < 0.1,
         np.random.default_rng(1).random((30, 10)) < 0.1]),
}


@pytest.mark.parametrize("name", EDGE_MODULES)
def test_edge_modules_give_xla_answer_at_every_entry(name):
    from hlo_opt import xla_oracle
    body, args = EDGE_MODULES[name]
    text = f"HloModule r\n{body}\n"
    expected = hlo_opt.evaluate(hlo_opt.parse(text), args)
    if xla_oracle.available():
        for got, want in zip(xla_oracle.run(text, args), expected):
            np.testing.assert_array_equal(got, want)
    optimized = hlo_opt.optimize(hlo_opt.parse(text))
    for results in (hlo_opt.evaluate(optimized, args), hlo_opt.compile(text)(*args)):
        assert len(results) == len(expected)
        for got, want in zip(results, expected):
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("entry", ["evaluate", "optimize", "compile"])
def test_entry_points_take_a_module_or_text_and_nothing_else(entry):
    text = "HloModule r\nENTRY e { p = f32[2] parameter(0)  ROOT n = f32[2] negate(p) }\n"
    x = np.array([1.0, -2.0], np.float32)
    run = {"evaluate": lambda m: hlo_opt.evaluate(m, [x]),
           "optimize": lambda m: hlo_opt.evaluate(hlo_opt.optimize(m), [x]),
           "compile": lambda m: hlo_opt.compile(m)(x)}[entry]
    assert run(text)[0].tolist() == [-1.0, 2.0]
    with pytest.raises(HloError, match="expected a Module or HLO text, got NoneType"):
        run(None)
