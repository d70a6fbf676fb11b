"""Random fused programs lowered to CPU code = the interpreter, bit for bit.

Hypothesis builds modules from exactly rounded ops (arithmetic, comparisons, selects,
converts, max/min reductions, integer sums) wrapped in data movement that changes shapes and
comes back (transpose, reverse, slice + pad, concatenate + slice, reduce + broadcast,
reshape), so every result is determined to the bit and any indexing or fusion mistake shows.
Inputs carry edge values (NaN, ±inf, ±0, integer extremes). HLO_OPT_HYPOTHESIS_EXAMPLES
sets the number of examples per test (30 by default; thousands have passed).
"""
from __future__ import annotations

import os

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hlo_opt
from lowering_helpers import assert_matches, edge_values, run_both

TYPES = ["f32", "bf16", "f64", "s32", "u8", "s64"]
FLOAT_UNARY = ["abs", "negate", "floor", "ceil", "round-nearest-even", "round-nearest-afz",
               "sign", "sqrt"]
FLOAT_BINARY = ["add", "subtract", "multiply", "divide", "maximum", "minimum"]
INT_UNARY = ["abs", "negate", "not", "popcnt", "count-leading-zeros", "sign"]
SIGNED_ONLY = {"abs", "sign"}          # XLA defines them on signed and float types only
INT_BINARY = ["add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum",
              "and", "or", "xor", "shift-left", "shift-right-logical", "shift-right-arithmetic"]
SETTINGS = settings(max_examples=int(os.environ.get("HLO_OPT_HYPOTHESIS_EXAMPLES", 30)), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _shape(t, dims):
    return f"{t}[{','.join(map(str, dims))}]"


def _reducer(t: str, op: str) -> str:
    return (f"r_{op} {{ a = {t}[] parameter(0)\n b = {t}[] parameter(1)\n"
            f" ROOT r = {t}[] {op}(a, b) }}")


@st.composite
def programs(draw):
    t = draw(st.sampled_from(TYPES))
    is_float = t in ("f32", "bf16", "f64")
    dims = draw(st.lists(st.integers(1, 6), min_size=1, max_size=3))
    rank = len(dims)
    full = _shape(t, dims)
    n_params = draw(st.integers(1, 3))
    lines = [f"p{i} = {full} parameter({i})" for i in range(n_params)]
    values = [f"p{i}" for i in range(n_params)]
    reduce_op = "maximum" if is_float else "add"
    init = "-inf" if is_float else "0"
    lines.append(f"init = {t}[] constant({init})")
    counter = [0]

    def fresh():
        counter[0] += 1
        return f"v{counter[0]}"

    pick = lambda: draw(st.sampled_from(values))   # noqa: E731
    for _ in range(draw(st.integers(1, 7))):
        kind = draw(st.sampled_from(["unary", "binary", "binary", "select", "transpose",
                                     "reverse", "slice_pad", "reduce_bcast", "concat_slice",
                                     "reshape", "convert", "iota"]))
        x, v = pick(), fresh()
        d = draw(st.integers(0, rank - 1))
        if kind == "unary":
            op = draw(st.sampled_from(FLOAT_UNARY if is_float else
                                      [u for u in INT_UNARY if t[0] != "u" or u not in SIGNED_ONLY]))
            lines.append(f"{v} = {full} {op}({x})")
        elif kind == "binary":
            op = draw(st.sampled_from(FLOAT_BINARY if is_float else INT_BINARY))
            lines.append(f"{v} = {full} {op}({x}, {pick()})")
        elif kind == "select":
            y = pick()
            direction = draw(st.sampled_from(["LT", "GE", "EQ", "NE"]))
            lines += [f"{v}.c = {_shape('pred', dims)} compare({x}, {y}), direction={direction}",
                      f"{v} = {full} select({v}.c, {x}, {y})"]
        elif kind == "transpose":
            perm = draw(st.permutations(range(rank)))
            inv = [perm.index(i) for i in range(rank)]
            mid = [dims[p] for p in perm]
            lines += [f"{v}.t = {_shape(t, mid)} transpose({x}), dimensions={{{','.join(map(str, perm))}}}",
                      f"{v}.n = {_shape(t, mid)} negate({v}.t)",
                      f"{v} = {full} transpose({v}.n), dimensions={{{','.join(map(str, inv))}}}"]
        elif kind == "reverse":
            lines.append(f"{v} = {full} reverse({x}), dimensions={{{d}}}")
        elif kind == "slice_pad" and dims[d] > 1:
            cut = list(dims)
            cut[d] -= 1
            spec = ", ".join(f"[1:{n}]" if i == d else f"[0:{n}]" for i, n in enumerate(dims))
            pad = "x".join("1_0_0" if i == d else "0_0_0" for i in range(rank))
            lines += [f"{v}.s = {_shape(t, cut)} slice({x}), slice={{{spec}}}",
                      f"{v} = {full} pad({v}.s, init), padding={pad}"]
        elif kind == "reduce_bcast":
            kept = [n for i, n in enumerate(dims) if i != d]
            keep_dims = ",".join(str(i) for i in range(rank) if i != d)
            lines += [f"{v}.r = {_shape(t, kept)} reduce({x}, init), dimensions={{{d}}}, to_apply=r_{reduce_op}",
                      f"{v}.b = {full} broadcast({v}.r), dimensions={{{keep_dims}}}",
                      f"{v} = {full} {'maximum' if is_float else 'add'}({v}.b, {pick()})"]
        elif kind == "concat_slice":
            two = list(dims)
            two[d] *= 2
            spec = ", ".join(f"[{n}:{2 * n}]" if i == d else f"[0:{n}]" for i, n in enumerate(dims))
            lines += [f"{v}.c = {_shape(t, two)} concatenate({x}, {pick()}), dimensions={{{d}}}",
                      f"{v} = {full} slice({v}.c), slice={{{spec}}}"]
        elif kind == "reshape":
            flat = int(np.prod(dims))
            lines += [f"{v}.f = {t}[{flat}] reshape({x})",
                      f"{v}.g = {t}[{flat}] {'abs' if t != 'u8' else 'not'}({v}.f)",
                      f"{v} = {full} reshape({v}.g)"]
        elif kind == "convert":
            other = draw(st.sampled_from([u for u in TYPES if u != t] + ["pred", "f16", "u32"]))
            lines += [f"{v}.c = {_shape(other, dims)} convert({x})", f"{v} = {full} convert({v}.c)"]
        else:
            lines += [f"{v}.i = {full} iota(), iota_dimension={d}",
                      f"{v} = {full} {'add' if t != 'u8' else 'xor'}({x}, {v}.i)"]
        values.append(v)
    out = values[-1]
    all_dims = ",".join(map(str, range(rank)))
    lines.append(f"total = {t}[] reduce({pick()}, init), dimensions={{{all_dims}}}, to_apply=r_{reduce_op}")
    lines.append(f"ROOT root = ({full}, {t}[]) tuple({out}, total)")
    text = (f"HloModule random\n{_reducer(t, reduce_op)}\nENTRY e {{\n  " + "\n  ".join(lines)
            + "\n}\n")
    return text, t, dims, n_params, draw(st.integers(0, 2 ** 16))


@SETTINGS
@given(programs())
def test_random_fused_programs_match_the_interpreter_bit_for_bit(program):
    text, t, dims, n_params, seed = program
    rng = np.random.default_rng(seed)
    n = int(np.prod(dims))
    args = [rng.permutation(edge_values(t, max(n, 24), rng))[:n].reshape(dims)
            for _ in range(n_params)]
    ours, want = run_both(text, args)
    for k, (g, w) in enumerate(zip(ours, want)):
        assert_matches(g, w, 0, f"out{k} of\n{text}")


@st.composite
def sums(draw):
    t = draw(st.sampled_from(["f32", "bf16", "s32"]))
    dims = draw(st.lists(st.integers(1, 40), min_size=1, max_size=3))
    rank = len(dims)
    reduced = sorted(draw(st.sets(st.integers(0, rank - 1), min_size=1)))
    kept = [n for i, n in enumerate(dims) if i not in reduced]
    producer = draw(st.sampled_from(["abs", "negate", "multiply"]))
    return t, dims, reduced, kept, producer


@SETTINGS
@given(sums())
def test_random_sums_with_fused_producers(case):
    """Sums reassociate (our loops are vectorized): equal within the classic error bound
    n * eps * sum |terms| of recursive summation; integer sums exactly."""
    t, dims, reduced, kept, producer = case
    body = (f"y = {_shape(t, dims)} {producer}(x, x)" if producer == "multiply"
            else f"y = {_shape(t, dims)} {producer}(x)")
    text = (f"HloModule s\n{_reducer(t, 'add')}\nENTRY e {{\n  x = {_shape(t, dims)} parameter(0)\n"
            f"  {body}\n  z = {t}[] constant(0)\n  ROOT r = {_shape(t, kept)} reduce(y, z), "
            f"dimensions={{{','.join(map(str, reduced))}}}, to_apply=r_add\n}}\n")
    rng = np.random.default_rng(0)
    if t == "s32":
        x = rng.integers(-1000, 1000, dims).astype(np.int32)
    else:
        x = rng.standard_normal(dims).astype(np.float32).astype(hlo_opt.dtypes.DTYPES[t].numpy)
    ours, want = run_both(text, [x])
    if t == "s32":
        assert_matches(ours[0], want[0], 0, text)
        return
    n = int(np.prod([dims[d] for d in reduced]))
    eps = 2.0 ** -24 if t == "f32" else 2.0 ** -8
    bound = np.abs(x.astype(np.float64) ** (2 if producer == "multiply" else 1)).sum(
        axis=tuple(reduced)) * n * eps
    err = np.abs(ours[0].astype(np.float64) - want[0].astype(np.float64))
    assert np.all(err <= bound + 1e-30), text
