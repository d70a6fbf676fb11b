"""The reference interpreter against XLA's operation semantics.

Inputs are HLO text; expectations are written out by hand or computed with plain numpy loops
that share no code with the interpreter. The last section compares with XLA itself where the
oracle is installed.
"""
from __future__ import annotations

import itertools
import re

import ml_dtypes
import numpy as np
import pytest

from hlo_opt import HloError, UnsupportedError, parse
from hlo_opt.dtypes import accumulation_type, dtype, from_numpy
from hlo_opt.interpreter import SUPPORTED_OPCODES, evaluate
from hlo_opt.ir import Computation, Instruction, Module
from hlo_opt.shape import array
from lowering_helpers import ARGMAX_REDUCER

NAN, INF = float("nan"), float("inf")
BF16 = ml_dtypes.bfloat16


def run(body: str, *args, computations: str = ""):
    """Evaluate an entry computation given as instruction lines (plus helper computations)."""
    text = f"HloModule m\n{computations}\nENTRY e {{\n{body}\n}}\n"
    return evaluate(parse(text), list(args))


def run1(body: str, *args, computations: str = ""):
    (out,) = run(body, *args, computations=computations)
    return out


def same_bits(a, b) -> bool:
    """Equal dtype, shape and values, NaN = NaN and -0.0 != +0.0."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind == "f" or a.dtype in (BF16,):
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        return bool(np.all((np.isnan(a64) & np.isnan(b64))
                           | ((a64 == b64) & (np.signbit(a64) == np.signbit(b64)))))
    return bool(np.array_equal(a, b))


ADD = "add { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = f32[] add(a, b) }"
MAX = "mx { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = f32[] maximum(a, b) }"


# ------------------------------------------------------------------ elementwise

def test_float_edge_cases_follow_ieee():
    x = np.array([NAN, -0.0, 0.0, INF, -INF, 1.5], np.float32)
    y = np.array([1.0, 0.0, -0.0, INF, 1.0, NAN], np.float32)
    mx, mn, add = run("p = f32[6] parameter(0)\nq = f32[6] parameter(1)\n"
                      "a = f32[6] maximum(p, q)\nb = f32[6] minimum(p, q)\nc = f32[6] add(p, q)\n"
                      "ROOT t = (f32[6], f32[6], f32[6]) tuple(a, b, c)", x, y)
    # NaN propagates; -0 < +0 regardless of argument order (IEEE 754-2019, as XLA).
    assert same_bits(mx, np.array([NAN, 0.0, 0.0, INF, 1.0, NAN], np.float32))
    assert same_bits(mn, np.array([NAN, -0.0, -0.0, INF, -INF, NAN], np.float32))
    assert same_bits(add, np.array([NAN, 0.0, 0.0, INF, -INF, NAN], np.float32))


def test_integer_division_by_zero_and_overflow():
    lo = np.iinfo(np.int32).min
    a = np.array([7, -7, 7, -7, 5, lo, lo, -1], np.int32)
    b = np.array([2, 2, -2, -2, 0, -1, 0, 0], np.int32)
    q, r = run("p = s32[8] parameter(0)\nq = s32[8] parameter(1)\n"
               "d = s32[8] divide(p, q)\nm = s32[8] remainder(p, q)\n"
               "ROOT t = (s32[8], s32[8]) tuple(d, m)", a, b)
    assert q.tolist() == [3, -3, -3, 3, -1, lo, -1, -1]        # truncation; x/0 = -1
    assert r.tolist() == [1, -1, 1, -1, 5, 0, lo, -1]          # sign of dividend; x%0 = x
    u = run1("p = u8[2] parameter(0)\nq = u8[2] parameter(1)\nROOT d = u8[2] divide(p, q)",
             np.array([9, 9], np.uint8), np.array([0, 4], np.uint8))
    assert u.tolist() == [255, 2]


def test_integer_overflow_wraps():
    out = run1("p = s8[3] parameter(0)\nq = s8[3] parameter(1)\nROOT r = s8[3] multiply(p, q)",
               np.array([127, -128, 16], np.int8), np.array([2, -1, 16], np.int8))
    assert out.tolist() == [-2, -128, 0]
    neg = run1("p = s32[1] parameter(0)\nROOT r = s32[1] negate(p)",
               np.array([np.iinfo(np.int32).min], np.int32))
    assert neg.tolist() == [np.iinfo(np.int32).min]


def test_shifts_saturate_at_bit_width():
    x = np.array([1, -8, -8, 3, 255 - 256], np.int8)
    n = np.array([3, 1, 8, -1, 100], np.int8)              # -1 is a huge unsigned amount
    left, logical, arith = run(
        "p = s8[5] parameter(0)\nq = s8[5] parameter(1)\n"
        "a = s8[5] shift-left(p, q)\nb = s8[5] shift-right-logical(p, q)\n"
        "c = s8[5] shift-right-arithmetic(p, q)\nROOT t = (s8[5], s8[5], s8[5]) tuple(a, b, c)",
        x, n)
    assert left.tolist() == [8, -16, 0, 0, 0]
    assert logical.tolist() == [0, 0x7C, 0, 0, 0]
    assert arith.tolist() == [0, -4, -1, 0, -1]


def test_integer_power_follows_xla():
    base = np.array([2, 3, -1, -1, 1, 2, 0, 3], np.int32)
    exp = np.array([10, 3, -3, -2, -5, -1, 0, 64], np.int32)
    out = run1("p = s32[8] parameter(0)\nq = s32[8] parameter(1)\nROOT r = s32[8] power(p, q)",
               base, exp)
    # Negative exponents: 1 for base 1, +-1 for base -1, else 0. XLA squares over the low
    # 6 exponent bits only, so 3**64 is 1.
    assert out.tolist() == [1024, 27, -1, 1, 1, 0, 1, 1]


def test_convert_float_to_int_saturates():
    x = np.array([NAN, INF, -INF, 3e9, -3e9, 2.7, -2.7, -0.5], np.float32)
    s32, u8 = run("p = f32[8] parameter(0)\na = s32[8] convert(p)\nb = u8[8] convert(p)\n"
                  "ROOT t = (s32[8], u8[8]) tuple(a, b)", x)
    big, small = np.iinfo(np.int32).max, np.iinfo(np.int32).min
    assert s32.tolist() == [0, big, small, big, small, 2, -2, 0]
    assert u8.tolist() == [0, 255, 0, 255, 0, 2, 0, 0]


def test_convert_rounds_to_nearest_even_and_wraps_ints():
    x = np.array([1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, 3e38], np.float32)
    out = run1("p = f32[3] parameter(0)\nROOT r = bf16[3] convert(p)", x)
    assert out.astype(np.float32).tolist() == [1.0, 1.015625, np.float32(3e38).astype(BF16)]
    wrapped = run1("p = s32[3] parameter(0)\nROOT r = s8[3] convert(p)",
                   np.array([300, -129, 128], np.int32))
    assert wrapped.tolist() == [44, 127, -128]
    pred = run1("p = f32[3] parameter(0)\nROOT r = pred[3] convert(p)",
                np.array([NAN, -0.0, 2.0], np.float32))
    assert pred.tolist() == [True, False, True]


def test_rounding_and_sign():
    x = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 0.49999997, -0.0, NAN], np.float32)
    afz, even, sign = run("p = f32[8] parameter(0)\na = f32[8] round-nearest-afz(p)\n"
                          "b = f32[8] round-nearest-even(p)\nc = f32[8] sign(p)\n"
                          "ROOT t = (f32[8], f32[8], f32[8]) tuple(a, b, c)", x)
    assert same_bits(afz, np.array([1, 2, 3, -1, -3, 0, -0.0, NAN], np.float32))
    assert same_bits(even, np.array([0, 2, 2, -0.0, -2, 0, -0.0, NAN], np.float32))
    assert same_bits(sign, np.array([1, 1, 1, -1, -1, 1, -0.0, NAN], np.float32))


def test_total_order_comparison():
    x = np.array([-NAN, -INF, -0.0, 0.0, INF, NAN, 1.0], np.float32)
    y = np.array([-INF, -0.0, 0.0, 0.0, NAN, NAN, 1.0], np.float32)
    lt, eq, float_eq = run(
        "p = f32[7] parameter(0)\nq = f32[7] parameter(1)\n"
        "a = pred[7] compare(p, q), direction=LT, type=TOTALORDER\n"
        "b = pred[7] compare(p, q), direction=EQ, type=TOTALORDER\n"
        "c = pred[7] compare(p, q), direction=EQ\n"
        "ROOT t = (pred[7], pred[7], pred[7]) tuple(a, b, c)", x, y)
    assert lt.tolist() == [True, True, True, False, True, False, False]
    assert eq.tolist() == [False, False, False, True, False, True, True]
    assert float_eq.tolist() == [False, False, True, True, False, False, True]


def test_bitwise_ops_on_pred_and_ints():
    p = np.array([True, True, False, False])
    q = np.array([True, False, True, False])
    a, o, x, n = run("p = pred[4] parameter(0)\nq = pred[4] parameter(1)\n"
                     "a = pred[4] and(p, q)\no = pred[4] or(p, q)\nx = pred[4] xor(p, q)\n"
                     "n = pred[4] not(p)\nROOT t = (pred[4], pred[4], pred[4], pred[4]) "
                     "tuple(a, o, x, n)", p, q)
    assert (a.tolist(), o.tolist(), x.tolist(), n.tolist()) == (
        [True, False, False, False], [True, True, True, False],
        [False, True, True, False], [False, False, True, True])
    i = run1("p = s32[2] parameter(0)\nROOT n = s32[2] not(p)", np.array([0, 5], np.int32))
    assert i.tolist() == [-1, -6]


def test_popcnt_and_count_leading_zeros():
    x = np.array([0, 1, -1, 0x00F0, -32768], np.int16)
    pop, clz = run("p = s16[5] parameter(0)\na = s16[5] popcnt(p)\n"
                   "b = s16[5] count-leading-zeros(p)\nROOT t = (s16[5], s16[5]) tuple(a, b)", x)
    assert pop.tolist() == [0, 1, 16, 4, 1]
    assert clz.tolist() == [16, 15, 0, 8, 0]


def test_transcendentals_and_is_finite():
    x = np.array([0.0, 1.0, -1.0, 20.0, -20.0], np.float32)
    exp1, log1, logistic, erf, fin = run(
        "p = f32[5] parameter(0)\na = f32[5] exponential-minus-one(p)\n"
        "b = f32[5] log-plus-one(p)\nc = f32[5] logistic(p)\nd = f32[5] erf(p)\n"
        "e = pred[5] is-finite(b)\n"
        "ROOT t = (f32[5], f32[5], f32[5], f32[5], pred[5]) tuple(a, b, c, d, e)", x)
    np.testing.assert_allclose(exp1, [0, 1.718281828, -0.632120559, 4.85165195e8, -1.0],
                               rtol=1e-6)
    np.testing.assert_allclose(logistic, [0.5, 0.731058579, 0.268941421, 1.0, 2.0611537e-9],
                               rtol=1e-6)
    np.testing.assert_allclose(erf, [0, 0.842700793, -0.842700793, 1, -1], rtol=1e-6)
    assert np.isnan(log1[4]) and fin.tolist() == [True, True, False, True, False]


def test_cbrt_tan_atan2_and_complex_parts():
    x = np.array([-8.0, 27.0], np.float64)
    cbrt, tan = run("p = f64[2] parameter(0)\na = f64[2] cbrt(p)\nb = f64[2] tan(p)\n"
                    "ROOT t = (f64[2], f64[2]) tuple(a, b)", x)
    np.testing.assert_allclose(cbrt, [-2.0, 3.0], rtol=1e-15)
    np.testing.assert_allclose(tan, [6.799711455220379, -3.2737038004281], rtol=1e-12)
    re, im, mag, z = run("p = f32[2] parameter(0)\nq = f32[2] parameter(1)\n"
                         "c = c64[2] complex(p, q)\na = f32[2] real(c)\nb = f32[2] imag(c)\n"
                         "m = f32[2] abs(c)\nROOT t = (f32[2], f32[2], f32[2], c64[2]) "
                         "tuple(a, b, m, c)",
                         np.array([3, INF], np.float32), np.array([4, 1], np.float32))
    assert re.tolist() == [3, INF] and im.tolist() == [4, 1] and mag.tolist() == [5, INF]
    assert z.dtype == np.complex64 and z[1].real == INF and z[1].imag == 1


def test_narrow_floats_compute_in_f32_and_round_once():
    x = np.array([1.0, 256.0], BF16)
    y = np.array([2 ** -9, 1.0], BF16)
    out = run1("p = bf16[2] parameter(0)\nq = bf16[2] parameter(1)\nROOT r = bf16[2] add(p, q)",
               x, y)
    assert out.dtype == BF16 and out.astype(np.float32).tolist() == [1.0, 256.0]


def test_bitcast_convert_changes_the_last_dimension():
    x = np.array([1.0, -2.0], np.float32)
    wide, back = run("p = f32[2] parameter(0)\nb = u8[2,4] bitcast-convert(p)\n"
                     "c = f32[2] bitcast-convert(b)\nROOT t = (u8[2,4], f32[2]) tuple(b, c)", x)
    assert wide.tolist() == [[0, 0, 0x80, 0x3F], [0, 0, 0, 0xC0]]       # little-endian
    assert same_bits(back, x)
    same = run1("p = f32[1] parameter(0)\nROOT r = s32[1] bitcast-convert(p)",
                np.array([-0.0], np.float32))
    assert same.tolist() == [np.iinfo(np.int32).min]


def test_reduce_precision_rounds_and_flushes():
    x = np.array([1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, 70000.0, 1e-10, NAN, -INF], np.float32)
    out = run1("p = f32[6] parameter(0)\n"
               "ROOT r = f32[6] reduce-precision(p), exponent_bits=5, mantissa_bits=7", x)
    # Like bf16's mantissa with f16's exponent range: ties to even, overflow to inf,
    # underflow (below f16's normal range) to zero.
    assert same_bits(out, np.array([1.0, 1.015625, INF, 0.0, NAN, -INF], np.float32))


def test_select_and_clamp_broadcast_scalars():
    x = np.array([-5.0, 0.5, 5.0, NAN], np.float32)
    clamped, picked = run(
        "p = f32[4] parameter(0)\nlo = f32[] constant(-1)\nhi = f32[] constant(1)\n"
        "c = f32[4] clamp(lo, p, hi)\nt = pred[] constant(false)\ns = f32[4] select(t, p, c)\n"
        "ROOT r = (f32[4], f32[4]) tuple(c, s)", x)
    assert same_bits(clamped, np.array([-1.0, 0.5, 1.0, NAN], np.float32))
    assert same_bits(picked, clamped)


def test_sub_byte_integers_wrap():
    x = np.array([7, -8, 5], ml_dtypes.int4)
    out = run1("p = s4[3] parameter(0)\nROOT r = s4[3] add(p, p)", x)
    assert out.astype(np.int8).tolist() == [-2, 0, -6]


# --------------------------------------------------------------- data movement

def test_pad_with_negative_and_interior_padding():
    x = np.arange(1, 5, dtype=np.float32)
    out = run1("p = f32[4] parameter(0)\nz = f32[] constant(0)\n"
               "ROOT r = f32[8] pad(p, z), padding=-1_2_1", x)
    # interior first: 1 0 2 0 3 0 4; drop one at the front; two zeros at the back.
    assert out.tolist() == [0, 2, 0, 3, 0, 4, 0, 0]
    both = run1("p = f32[2,3] parameter(0)\nz = f32[] constant(-1)\n"
                "ROOT r = f32[3,2] pad(p, z), padding=1_0x-1_0", np.ones((2, 3), np.float32))
    assert both.tolist() == [[-1, -1], [1, 1], [1, 1]]


def test_dynamic_slice_clamps_start_indices():
    x = np.arange(10, dtype=np.int32)
    hi, lo = run("p = s32[10] parameter(0)\ni = s32[] constant(8)\nj = s32[] constant(-3)\n"
                 "a = s32[4] dynamic-slice(p, i), dynamic_slice_sizes={4}\n"
                 "b = s32[4] dynamic-slice(p, j), dynamic_slice_sizes={4}\n"
                 "ROOT t = (s32[4], s32[4]) tuple(a, b)", x)
    assert hi.tolist() == [6, 7, 8, 9] and lo.tolist() == [0, 1, 2, 3]
    upd = run1("p = s32[10] parameter(0)\nu = s32[3] constant({-1, -2, -3})\n"
               "i = u32[] constant(4000000000)\n"
               "ROOT r = s32[10] dynamic-update-slice(p, u, i)", x)
    assert upd.tolist() == [0, 1, 2, 3, 4, 5, 6, -1, -2, -3]


def test_broadcast_transpose_reverse_concatenate_slice():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    b, t, r, c, s = run(
        "p = f32[2,3] parameter(0)\nb = f32[3,4,2] broadcast(p), dimensions={2,0}\n"
        "t = f32[3,2] transpose(p), dimensions={1,0}\nr = f32[2,3] reverse(p), dimensions={1}\n"
        "c = f32[4,3] concatenate(p, r), dimensions={0}\n"
        "s = f32[1,2] slice(p), slice={[1:2], [0:3:2]}\n"
        "ROOT o = (f32[3,4,2], f32[3,2], f32[2,3], f32[4,3], f32[1,2]) tuple(b, t, r, c, s)", x)
    assert all(b[j, k, i] == x[i, j] for i in range(2) for j in range(3) for k in range(4))
    assert t.tolist() == [[0, 3], [1, 4], [2, 5]]
    assert r.tolist() == [[2, 1, 0], [5, 4, 3]]
    assert c.tolist() == [[0, 1, 2], [3, 4, 5], [2, 1, 0], [5, 4, 3]]
    assert s.tolist() == [[3, 5]]


def test_iota_and_reshape():
    i, r = run("a = s32[2,3] iota(), iota_dimension=1\nb = f32[3,2] iota(), iota_dimension=0\n"
               "c = f32[6] reshape(b)\nROOT t = (s32[2,3], f32[6]) tuple(a, c)")
    assert i.tolist() == [[0, 1, 2], [0, 1, 2]] and r.tolist() == [0, 0, 1, 1, 2, 2]


def test_bitcast_reinterprets_layouts():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    # The operand is stored column-major ({0,1}): its memory is 0 3 1 4 2 5.
    out = run1("p = f32[2,3]{0,1} parameter(0)\nROOT r = f32[6]{0} bitcast(p)", x)
    assert out.tolist() == [0, 3, 1, 4, 2, 5]
    plain = run1("p = f32[2,3]{1,0} parameter(0)\nROOT r = f32[3,2]{1,0} bitcast(p)", x)
    assert plain.tolist() == [[0, 1], [2, 3], [4, 5]]


def test_constants_elided_tuple_and_token():
    z, a, b = run("c = f32[2,2] constant({...})\n"
                  "t = (s32[], f32[2]) constant((3, {1.5, 2}))\n"
                  "a = s32[] get-tuple-element(t), index=0\nb = f32[2] get-tuple-element(t), index=1\n"
                  "k = token[] after-all()\n"
                  "ROOT r = (f32[2,2], s32[], f32[2]) tuple(c, a, b)")
    assert z.tolist() == [[0, 0], [0, 0]] and a.tolist() == 3 and b.tolist() == [1.5, 2]


# --------------------------------------------------------------- gather/scatter

def test_gather_xla_doc_example():
    # operand_semantics "Gather": pick rows 0 and 2 of a 3x3 matrix.
    x = np.arange(1, 10, dtype=np.int32).reshape(3, 3)
    out = run1("p = s32[3,3] parameter(0)\ni = s32[2] constant({0, 2})\n"
               "ROOT g = s32[2,3] gather(p, i), offset_dims={1}, collapsed_slice_dims={0}, "
               "start_index_map={0}, index_vector_dim=1, slice_sizes={1,3}", x)
    assert out.tolist() == [[1, 2, 3], [7, 8, 9]]


def test_gather_windows_clamp_and_batching_dims():
    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    out = run1("p = f32[4,5] parameter(0)\ni = s32[2,2] constant({{1, 4}, {-3, 2}})\n"
               "ROOT g = f32[2,2,3] gather(p, i), offset_dims={1,2}, collapsed_slice_dims={}, "
               "start_index_map={0,1}, index_vector_dim=1, slice_sizes={2,3}", x)
    # Starts clamp into [0, dim - size]: (1,4)->(1,2), (-3,2)->(0,2).
    assert out.tolist() == [x[1:3, 2:5].tolist(), x[0:2, 2:5].tolist()]
    y = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    idx = np.array([[3, 0], [1, 2]], np.int32)            # per batch b, two column picks
    batched = run1("p = s32[2,3,4] parameter(0)\ni = s32[2,2] parameter(1)\n"
                   "ROOT g = s32[2,2,3] gather(p, i), offset_dims={2}, "
                   "collapsed_slice_dims={2}, start_index_map={2}, index_vector_dim=2, "
                   "slice_sizes={1,3,1}, operand_batching_dims={0}, "
                   "start_indices_batching_dims={0}", y, idx)
    expect = [[[y[b, r, idx[b, k]] for r in range(3)] for k in range(2)] for b in range(2)]
    assert batched.tolist() == expect


SCATTER_ADD = "sa { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = f32[] add(a, b) }"


def test_scatter_combines_duplicates_in_order():
    x = np.zeros((3, 2), np.float32)
    idx = np.array([0, 2, 0, 5], np.int32)                 # 5 is out of bounds: skipped
    upd = np.arange(8, dtype=np.float32).reshape(4, 2)
    out = run1("p = f32[3,2] parameter(0)\ni = s32[4] parameter(1)\nu = f32[4,2] parameter(2)\n"
               "ROOT s = f32[3,2] scatter(p, i, u), update_window_dims={1}, "
               "inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, "
               "index_vector_dim=1, to_apply=sa", x, idx, upd, computations=SCATTER_ADD)
    assert out.tolist() == [[4, 6], [0, 0], [2, 3]]


def test_scatter_generic_combiner_and_overwrite():
    comb = ("f { a = s32[] parameter(0)\n b = s32[] parameter(1)\n two = s32[] constant(2)\n"
            " m = s32[] multiply(a, two)\n ROOT r = s32[] add(m, b) }\n"
            "set { a = s32[] parameter(0)\n ROOT b = s32[] parameter(1) }")
    x = np.array([1, 1, 1], np.int32)
    idx = np.array([[1], [1], [0], [1]], np.int32)
    upd = np.array([10, 20, 30, 40], np.int32)
    body = ("p = s32[3] parameter(0)\ni = s32[4,1] parameter(1)\nu = s32[4] parameter(2)\n"
            "a = s32[3] scatter(p, i, u), update_window_dims={}, inserted_window_dims={0}, "
            "scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=f\n"
            "b = s32[3] scatter(p, i, u), update_window_dims={}, inserted_window_dims={0}, "
            "scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=set\n"
            "ROOT t = (s32[3], s32[3]) tuple(a, b)")
    generic, overwrite = run(body, x, idx, upd, computations=comb)
    # position 1: ((1*2+10)*2+20)*2+40 = 128; position 0: 1*2+30 = 32.
    assert generic.tolist() == [32, 128, 1]
    assert overwrite.tolist() == [30, 40, 1]


def test_scatter_with_batching_dims():
    x = np.zeros((2, 4), np.float32)
    idx = np.array([[3], [0]], np.int32)                   # batch b writes column idx[b]
    upd = np.array([5, 7], np.float32)
    out = run1("p = f32[2,4] parameter(0)\ni = s32[2,1] parameter(1)\nu = f32[2] parameter(2)\n"
               "ROOT s = f32[2,4] scatter(p, i, u), update_window_dims={}, "
               "inserted_window_dims={1}, scatter_dims_to_operand_dims={1}, index_vector_dim=1, "
               "input_batching_dims={0}, scatter_indices_batching_dims={0}, to_apply=sa",
               x, idx, upd, computations=SCATTER_ADD)
    assert out.tolist() == [[0, 0, 0, 5], [7, 0, 0, 0]]


# ------------------------------------------------------------------- reductions

def test_reduce_over_several_dimensions_and_empty():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    out, empty = run("p = f32[2,3,4] parameter(0)\nz = f32[] constant(10)\n"
                     "a = f32[3] reduce(p, z), dimensions={0,2}, to_apply=add\n"
                     "e = f32[3,0] constant({{}, {}, {}})\n"
                     "b = f32[3] reduce(e, z), dimensions={1}, to_apply=add\n"
                     "ROOT t = (f32[3], f32[3]) tuple(a, b)", x, computations=ADD)
    assert out.tolist() == [10 + sum(x[:, j, :].ravel()) for j in range(3)]
    assert empty.tolist() == [10, 10, 10]


def test_variadic_reduce_argmax_and_generic_reducer():
    x = np.array([[1, 5, 5, 2, 0], [9, -1, 9, 3, 9]], np.float32)
    vals, idxs = run("p = f32[2,5] parameter(0)\ni = s32[2,5] iota(), iota_dimension=1\n"
                     "ninf = f32[] constant(-inf)\nz = s32[] constant(0)\n"
                     "ROOT r = (f32[2], s32[2]) reduce(p, i, ninf, z), dimensions={1}, "
                     "to_apply=argmax", x, computations=ARGMAX_REDUCER)
    assert vals.tolist() == [5, 9] and idxs.tolist() == [1, 0]


def test_narrow_float_sum_accumulates_in_f32():
    x = np.ones(1000, BF16)
    out = run1("p = bf16[1000] parameter(0)\nz = bf16[] constant(0)\n"
               "ROOT r = bf16[] reduce(p, z), dimensions={0}, to_apply=add",
               x, computations=ADD.replace("f32", "bf16"))
    assert float(out) == 1000.0      # a bf16 left fold would stall at 256


def test_max_reduce_of_signed_zeros_and_nan():
    x = np.array([[-0.0, 0.0], [-0.0, -0.0], [1.0, NAN]], np.float32)
    out = run1("p = f32[3,2] parameter(0)\nz = f32[] constant(-inf)\n"
               "ROOT r = f32[3] reduce(p, z), dimensions={1}, to_apply=mx", x, computations=MAX)
    assert same_bits(out, np.array([0.0, -0.0, NAN], np.float32))


def test_erf_of_a_scalar():
    out = run1("p = f32[] parameter(0)\nROOT e = f32[] erf(p)", np.float32(0.5))
    assert out.shape == () and abs(float(out) - 0.5204999) < 1e-6


def test_max_reduce_takes_its_init_value_into_account():
    x = np.array([[1.0, 2.0], [-0.0, -0.0], [7.0, 6.0]], np.float32)
    out = run1("p = f32[3,2] parameter(0)\nz = f32[] constant(0)\n"
               "ROOT r = f32[3] reduce(p, z), dimensions={1}, to_apply=mx", x, computations=MAX)
    assert same_bits(out, np.array([2.0, 0.0, 7.0], np.float32))    # max(-0, -0, +0) = +0
    out = run1("p = f32[3,2] parameter(0)\nz = f32[] constant(5)\n"
               "ROOT r = f32[3] reduce(p, z), dimensions={1}, to_apply=mx", x, computations=MAX)
    assert out.tolist() == [5.0, 5.0, 7.0]


def test_reduce_window_padding_and_dilation():
    x = np.arange(1, 6, dtype=np.float32)                     # 1 2 3 4 5
    pooled, dilated = run(
        "p = f32[5] parameter(0)\nz = f32[] constant(0)\nm = f32[] constant(-inf)\n"
        "a = f32[3] reduce-window(p, m), window={size=3 stride=2 pad=1_1}, to_apply=mx\n"
        "b = f32[7] reduce-window(p, z), window={size=2 lhs_dilate=2 rhs_dilate=2}, "
        "to_apply=add\nROOT t = (f32[3], f32[7]) tuple(a, b)", x, computations=ADD + "\n" + MAX)
    assert pooled.tolist() == [2, 4, 5]
    # base-dilated input: 1 _ 2 _ 3 _ 4 _ 5 (9 positions); taps at k and k+2; holes skipped.
    base = [1, None, 2, None, 3, None, 4, None, 5]
    expect = [sum(v for v in (base[k], base[k + 2]) if v is not None) for k in range(7)]
    assert dilated.tolist() == expect


def test_reduce_window_generic_reducer_matches_loop():
    sub = "s { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = f32[] subtract(a, b) }"
    x = np.array([1, 2, 4, 8, 16], np.float32)
    out = run1("p = f32[5] parameter(0)\nz = f32[] constant(100)\n"
               "ROOT r = f32[3] reduce-window(p, z), window={size=3}, to_apply=s",
               x, computations=sub)
    assert out.tolist() == [100 - 1 - 2 - 4, 100 - 2 - 4 - 8, 100 - 4 - 8 - 16]


def test_reduce_window_of_an_empty_operand_is_init_over_the_padding():
    x = np.zeros((3, 0), np.float32)
    out = run1("p = f32[3,0] parameter(0)\nz = f32[] constant(7)\n"
               "ROOT r = f32[5,2] reduce-window(p, z), window={size=1x1 pad=1_1x1_1}, "
               "to_apply=add", x, computations=ADD)
    assert out.tolist() == [[7, 7]] * 5


def test_select_and_scatter_onto_an_empty_operand_is_empty():
    ge = "ge { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = pred[] compare(a, b), direction=GE }"
    out = run1("p = f32[3,0] parameter(0)\ns = f32[5,2] parameter(1)\nz = f32[] constant(0)\n"
               "ROOT r = f32[3,0] select-and-scatter(p, s, z), window={size=1x1 pad=1_1x1_1}, "
               "select=ge, scatter=add", np.zeros((3, 0), np.float32),
               np.ones((5, 2), np.float32), computations=ADD + "\n" + ge)
    assert out.shape == (3, 0)


def test_scatter_into_an_operand_with_no_rows_is_empty():
    """Every update window leaves an operand of no elements, so all are skipped."""
    out = run1("x = f32[0,32] parameter(0)\ni = s32[5,1] parameter(1)\n"
               "u = f32[5,32] parameter(2)\n"
               "ROOT s = f32[0,32] scatter(x, i, u), update_window_dims={1}, "
               "inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, "
               "index_vector_dim=1, to_apply=add", np.zeros((0, 32), np.float32),
               np.zeros((5, 1), np.int32), np.ones((5, 32), np.float32), computations=ADD)
    assert out.shape == (0, 32) and out.dtype == np.float32


def test_select_and_scatter_xla_doc_example():
    # operation_semantics SelectAndScatter: max-pool 2x3 windows with stride 2x3.
    operand = np.array([[7, 2, 5, 3, 10, 2], [3, 8, 9, 3, 4, 2], [1, 5, 7, 5, 6, 1],
                        [0, 6, 2, 7, 2, 8]], np.float32)
    source = np.array([[2, 6], [3, 1]], np.float32)
    ge = "ge { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = pred[] compare(a, b), direction=GE }"
    out = run1("p = f32[4,6] parameter(0)\ns = f32[2,2] parameter(1)\nz = f32[] constant(0)\n"
               "ROOT r = f32[4,6] select-and-scatter(p, s, z), window={size=2x3 stride=2x3}, "
               "select=ge, scatter=add", operand, source, computations=ADD + "\n" + ge)
    expect = np.zeros((4, 6), np.float32)
    expect[1, 2], expect[0, 4], expect[2, 2], expect[3, 5] = 2, 6, 3, 1    # window maxima
    assert out.tolist() == expect.tolist()


# ----------------------------------------------------------------- contractions

def test_dot_general_dimension_order():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)      # batch 2, free 3, contract 4
    b = np.arange(40, dtype=np.float32).reshape(4, 2, 5)      # contract 4, batch 2, free 5
    out = run1("a = f32[2,3,4] parameter(0)\nb = f32[4,2,5] parameter(1)\n"
               "ROOT d = f32[2,3,5] dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2}, "
               "rhs_batch_dims={1}, rhs_contracting_dims={0}, operand_precision={high,default}",
               a, b)
    expect = [[[sum(a[n, i, k] * b[k, n, j] for k in range(4)) for j in range(5)]
               for i in range(3)] for n in range(2)]
    assert out.tolist() == expect


def test_dot_int8_accumulates_in_result_type():
    a = np.full((1, 300), 100, np.int8)
    out = run1("a = s8[1,300] parameter(0)\nb = s8[300,1] parameter(1)\n"
               "ROOT d = s32[1,1] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
               a, a.T.copy())
    assert out.tolist() == [[300 * 100 * 100]]


@pytest.mark.parametrize("types, expected", [
    (("s8", "s8", "s32"), "s32"), (("u8", "u8", "u16"), "u16"), (("u8", "s8", "s8"), "s8"),
    (("s4", "s4", "s4"), "s8"), (("pred", "pred", "pred"), "pred"),
    (("bf16", "bf16", "bf16"), "f32"), (("f32", "f32", "f64"), "f64"),
    (("c64", "f32", "c64"), "c64"), (("c64", "f64", "c64"), "c128"),
    (("s32", "f16", "s32"), "f32")])
def test_dot_accumulation_type(types, expected):
    """Dots and convolutions (interpreted and compiled alike) sum in this type: floats in f32
    unless something is 64-bit, integers in the widest type, at least a byte."""
    assert accumulation_type(*map(dtype, types)).name == expected


def _dot_of_ones(operand: str, result: str, n: int, value) -> np.ndarray:
    """dot of a [n] vector of `value` with a [n] vector of ones, in HLO types."""
    x = np.full(n, value).astype(dtype(operand).numpy)
    return run1(f"a = {operand}[{n}] parameter(0)\nb = {operand}[{n}] parameter(1)\n"
                f"ROOT d = {result}[] dot(a, b), lhs_contracting_dims={{0}}, "
                "rhs_contracting_dims={0}", x, np.ones(n).astype(x.dtype))


@pytest.mark.parametrize("operand,result,n,value,expected", [
    ("f32", "s8", 128, 1.0, 127),           # a float sum saturates, as convert does
    ("f32", "s8", 300, -1.0, -128),
    ("f32", "u8", 300, 1.0, 255),
    ("f32", "u8", 2, -1.0, 0),
    ("bf16", "s8", 3, 100.0, 127),
    ("f64", "s64", 1, 1e19, 2 ** 63 - 1),
    ("f32", "s32", 1, NAN, 0),              # NaN converts to 0
    ("f32", "s4", 3, 3.0, 7),
    ("s32", "s8", 128, 1, -128),            # an integer sum wraps
    ("s8", "u8", 1, -1, 255),
    ("s32", "u8", 1, 300, 44),
    ("s4", "s4", 3, 3, -7),
])
def test_dot_converts_its_sum_into_the_result_type_as_xla(operand, result, n, value, expected):
    out = _dot_of_ones(operand, result, n, value)
    assert out.dtype == dtype(result).numpy
    assert int(out.astype(np.int64)) == expected


def test_convolution_converts_its_sum_into_the_result_type_as_xla():
    x = np.full((1, 1, 200), 1.0, np.float32)
    out = run1("x = f32[1,1,200] parameter(0)\nw = f32[1,1,200] parameter(1)\n"
               "ROOT c = s8[1,1,1] convolution(x, w), window={size=200}, dim_labels=bf0_oi0->bf0",
               x, x)
    assert out.tolist() == [[[127]]]


def naive_conv(x, w, stride, pad, lhs_dil, rhs_dil, fgc=1, bgc=1, reverse=()):
    """Direct definition of XLA's convolution on NC(spatial) / OI(spatial) arrays."""
    n, c = x.shape[:2]
    o, i = w.shape[:2]
    sp = x.shape[2:]
    k = w.shape[2:]
    dil = [(s - 1) * d + 1 if s else 0 for s, d in zip(sp, lhs_dil)]
    size = [d + lo + hi for d, (lo, hi) in zip(dil, pad)]
    eff = [(kk - 1) * d + 1 for kk, d in zip(k, rhs_dil)]
    outs = [max(0, (s - e) // st + 1) if s >= e else 0 for s, e, st in zip(size, eff, stride)]
    y = np.zeros((n // bgc, o) + tuple(outs))
    og = o // max(fgc, bgc)
    for b, f in itertools.product(range(n // bgc), range(o)):
        g = f // og
        for pos in itertools.product(*(range(v) for v in outs)):
            total = 0.0
            for tap in itertools.product(*(range(v) for v in k)):
                coord = []
                for d in range(len(sp)):
                    p = pos[d] * stride[d] + tap[d] * rhs_dil[d] - pad[d][0]
                    if p < 0 or p % lhs_dil[d] or p // lhs_dil[d] >= sp[d]:
                        break
                    coord.append(p // lhs_dil[d])
                else:
                    ktap = tuple(k[d] - 1 - t if d in reverse else t for d, t in enumerate(tap))
                    for ci in range(i):
                        xb = b + g * (n // bgc) if bgc > 1 else b
                        xc = ci + g * i if fgc > 1 else ci
                        total += x[(xb, xc) + tuple(coord)] * w[(f, ci) + ktap]
            y[(b, f) + pos] = total
    return y


@pytest.mark.parametrize("window, kw", [
    ("size=3x3 pad=1_1x1_1", dict(stride=(1, 1), pad=((1, 1), (1, 1)), lhs_dil=(1, 1), rhs_dil=(1, 1))),
    ("size=3x2 stride=2x3 pad=2_-1x0_1 lhs_dilate=1x2 rhs_dilate=2x1",
     dict(stride=(2, 3), pad=((2, -1), (0, 1)), lhs_dil=(1, 2), rhs_dil=(2, 1))),
    ("size=3x2 pad=1_1x0_0 rhs_reversal=1x0",
     dict(stride=(1, 1), pad=((1, 1), (0, 0)), lhs_dil=(1, 1), rhs_dil=(1, 1), reverse=(0,))),
])
def test_convolution_windows(window, kw):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 7, 6)).astype(np.float32)
    ksize = [int(s) for s in window.split()[0][5:].split("x")]
    w = rng.standard_normal((4, 3, *ksize)).astype(np.float32)
    expect = naive_conv(x.astype(np.float64), w.astype(np.float64), **kw)
    text = (f"HloModule m\nENTRY e {{\nx = f32[2,3,7,6] parameter(0)\n"
            f"w = f32[4,3,{ksize[0]},{ksize[1]}] parameter(1)\n"
            f"ROOT c = convolution(x, w), window={{{window}}}, dim_labels=bf01_oi01->bf01\n}}")
    (out,) = evaluate(parse(text), [x, w])
    np.testing.assert_allclose(out, expect, rtol=1e-5, atol=1e-5)


def test_convolution_feature_and_batch_groups_and_layouts():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 6, 5)).astype(np.float32)          # N C W
    w = rng.standard_normal((4, 2, 3)).astype(np.float32)          # O I K
    w6 = rng.standard_normal((6, 2, 3)).astype(np.float32)         # 3 groups of 2 features
    grouped = run1("x = f32[2,6,5] parameter(0)\nw = f32[6,2,3] parameter(1)\n"
                   "ROOT c = f32[2,6,3] convolution(x, w), window={size=3}, "
                   "dim_labels=bf0_oi0->bf0, feature_group_count=3", x, w6)
    np.testing.assert_allclose(grouped, naive_conv(x, w6, (1,), ((0, 0),), (1,), (1,), fgc=3),
                               rtol=1e-5, atol=1e-5)
    xb = rng.standard_normal((4, 2, 5)).astype(np.float32)
    batch_grouped = run1("x = f32[4,2,5] parameter(0)\nw = f32[4,2,3] parameter(1)\n"
                         "ROOT c = f32[2,4,3] convolution(x, w), window={size=3}, "
                         "dim_labels=bf0_oi0->bf0, batch_group_count=2", xb, w)
    np.testing.assert_allclose(batch_grouped,
                               naive_conv(xb, w, (1,), ((0, 0),), (1,), (1,), bgc=2),
                               rtol=1e-5, atol=1e-5)
    # The same convolution with operands and result in other dimension orders.
    nhwc = run1("x = f32[5,2,6] parameter(0)\nw = f32[3,2,6] parameter(1)\n"
                "ROOT c = f32[6,3,2] convolution(x, w), window={size=3}, "
                "dim_labels=0bf_0io->f0b, feature_group_count=3",
                np.transpose(x, (2, 0, 1)).copy(), np.transpose(w6, (2, 1, 0)).copy())
    np.testing.assert_allclose(np.transpose(nhwc, (2, 0, 1)), grouped, rtol=1e-6)


# ----------------------------------------------------------------------- sorting

LT = "lt { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT r = pred[] compare(a, b), direction=LT }"


def test_sort_multi_operand_stable():
    keys = np.array([3, 1, 2, 1, 3], np.float32)
    vals = np.arange(5, dtype=np.int32)
    cmp = ("c { a = f32[] parameter(0)\n b = f32[] parameter(1)\n i = s32[] parameter(2)\n"
           " j = s32[] parameter(3)\n ROOT r = pred[] compare(a, b), direction=GT }")
    k, v = run("p = f32[5] parameter(0)\nq = s32[5] parameter(1)\n"
               "ROOT s = (f32[5], s32[5]) sort(p, q), dimensions={0}, is_stable=true, "
               "to_apply=c", keys, vals, computations=cmp)
    assert k.tolist() == [3, 3, 2, 1, 1] and v.tolist() == [0, 4, 2, 1, 3]


def test_sort_generic_comparator_matches_simple_one():
    # Sort by |x| descending, ties by position: a comparator that is not a single compare.
    cmp = ("c { a = f32[] parameter(0)\n b = f32[] parameter(1)\n x = f32[] abs(a)\n"
           " y = f32[] abs(b)\n ROOT r = pred[] compare(x, y), direction=GT }")
    x = np.array([1, -3, 2, 3, -1, 0, 2.5], np.float32)
    out = run1("p = f32[7] parameter(0)\nROOT s = f32[7] sort(p), dimensions={0}, to_apply=c",
               x, computations=cmp)
    assert out.tolist() == [-3, 3, 2.5, 2, 1, -1, 0]
    rows = np.random.default_rng(2).standard_normal((3, 33)).astype(np.float32)
    generic = run1("p = f32[3,33] parameter(0)\n"
                   "ROOT s = f32[3,33] sort(p), dimensions={1}, to_apply=c", rows,
                   computations=cmp.replace("abs(a)", "negate(a)").replace("abs(b)", "negate(b)"))
    assert generic.tolist() == np.sort(rows, axis=1).tolist()


def test_topk():
    x = np.array([[1, 9, 3, 9, 5]], np.float32)
    v, i = run("p = f32[1,5] parameter(0)\nROOT t = (f32[1,2], s32[1,2]) topk(p), k=2", x)
    assert v.tolist() == [[9, 9]] and i.tolist() == [[1, 3]]


def test_topk_custom_call_comparator_sees_values_and_indices():
    # jax's TopK comparator has four parameters: values and their indices. This one orders by
    # index, largest first, so the top 2 are the last two positions.
    cmp = ("c { a = f32[] parameter(0)\n b = f32[] parameter(1)\n i = s32[] parameter(2)\n"
           " j = s32[] parameter(3)\n ROOT r = pred[] compare(i, j), direction=GT }")
    x = np.array([[1, 9, 3, 9, 5], [4, 0, 2, 8, 6]], np.float32)
    v, i = run("p = f32[2,5] parameter(0)\nROOT t = (f32[2,2], s32[2,2]) custom-call(p), "
               'custom_call_target="TopK", called_computations={c}', x, computations=cmp)
    assert v.tolist() == [[5, 9], [6, 8]] and i.tolist() == [[4, 3], [4, 3]]


def test_topk_custom_call_comparator_of_three_parameters_is_an_error():
    cmp = ("c { a = f32[] parameter(0)\n b = f32[] parameter(1)\n i = s32[] parameter(2)\n"
           " ROOT r = pred[] compare(a, b), direction=GT }")
    with pytest.raises(HloError, match="takes 3 parameters"):
        run("p = f32[5] parameter(0)\nROOT t = (f32[2], s32[2]) custom-call(p), "
            'custom_call_target="TopK", called_computations={c}',
            np.zeros(5, np.float32), computations=cmp)


# ----------------------------------------------------------------- control flow

def test_while_call_conditional_map_fusion():
    comps = """
    cond { s = (s32[], f32[]) parameter(0)
      i = s32[] get-tuple-element(s), index=0
      n = s32[] constant(5)
      ROOT c = pred[] compare(i, n), direction=LT }
    body { s = (s32[], f32[]) parameter(0)
      i = s32[] get-tuple-element(s), index=0
      x = f32[] get-tuple-element(s), index=1
      one = s32[] constant(1)
      j = s32[] add(i, one)
      y = f32[] add(x, x)
      ROOT t = (s32[], f32[]) tuple(j, y) }
    double { x = f32[] parameter(0)
      ROOT y = f32[] add(x, x) }
    neg { x = f32[] parameter(0)
      ROOT y = f32[] negate(x) }
    sq { x = f32[] parameter(0)
      ROOT y = f32[] multiply(x, x) }
    """
    x = np.float32(1.5)
    loop, called, b0, b1, b9, p, mapped, fused = run(
        "x = f32[] parameter(0)\nz = s32[] constant(0)\ns = (s32[], f32[]) tuple(z, x)\n"
        "w = (s32[], f32[]) while(s), condition=cond, body=body\n"
        "l = f32[] get-tuple-element(w), index=1\n"
        "c = f32[] call(x), to_apply=double\n"
        "i0 = s32[] constant(0)\ni1 = s32[] constant(1)\ni9 = s32[] constant(9)\n"
        "b0 = f32[] conditional(i0, x, x), branch_computations={double, neg}\n"
        "b1 = f32[] conditional(i1, x, x), branch_computations={double, neg}\n"
        "b9 = f32[] conditional(i9, x, x), branch_computations={double, neg}\n"
        "t = pred[] constant(false)\n"
        "p = f32[] conditional(t, x, x), true_computation=double, false_computation=neg\n"
        "v = f32[3] broadcast(x), dimensions={}\n"
        "m = f32[3] map(v), dimensions={0}, to_apply=sq\n"
        "f = f32[] fusion(x), kind=kLoop, calls=sq\n"
        "ROOT r = (f32[], f32[], f32[], f32[], f32[], f32[], f32[3], f32[]) "
        "tuple(l, c, b0, b1, b9, p, m, f)", x, computations=comps)
    assert (loop, called, b0, b1, b9, p) == (48.0, 3.0, 3.0, -1.5, -1.5, -1.5)
    assert mapped.tolist() == [2.25] * 3 and fused == 2.25


def test_map_with_non_elementwise_computation_runs_per_element():
    comps = """inner { x = f32[] parameter(0)
      ROOT y = f32[] multiply(x, x) }
    outer { a = f32[] parameter(0)
      b = f32[] parameter(1)
      c = f32[] call(a), to_apply=inner
      ROOT d = f32[] subtract(c, b) }"""
    out = run1("p = f32[3] parameter(0)\nq = f32[3] parameter(1)\n"
               "ROOT m = f32[3] map(p, q), dimensions={0}, to_apply=outer",
               np.array([1, 2, 3], np.float32), np.array([1, 1, 1], np.float32),
               computations=comps)
    assert out.tolist() == [0, 3, 8]


# --------------------------------------------------------------- the evaluator

def test_tuple_results_flatten_and_tuple_parameters():
    m = parse("HloModule m\nENTRY e {\np = (f32[2], (s32[], f32[])) parameter(0)\n"
              "ROOT q = (f32[2], (s32[], f32[])) copy(p)\n}")
    out = evaluate(m, [(np.ones(2, np.float32), (np.int32(3), np.float32(4)))])
    assert [o.tolist() for o in out] == [[1, 1], 3, 4]


def test_arguments_are_checked():
    m = parse("HloModule m\nENTRY e {\nROOT p = f32[2] parameter(0)\n}")
    with pytest.raises(HloError, match="dtype float64"):
        evaluate(m, [np.ones(2)])
    with pytest.raises(HloError, match="dims"):
        evaluate(m, [np.ones(3, np.float32)])
    assert evaluate(m, [[1, 2]])[0].dtype == np.float32


def test_deep_chain_is_evaluated_iteratively():
    s = array("s32", ())
    p = Instruction("p", "parameter", s, parameter_number=0)
    one = Instruction("one", "constant", s, literal=np.int32(1))
    insts, cur = [p, one], p
    for i in range(100_000):
        cur = Instruction(f"a{i}", "add", s, [cur, one])
        insts.append(cur)
    comp = Computation("e", insts, cur)
    assert evaluate(Module("m", [comp], comp), [np.int32(5)])[0] == 100_005


def test_custom_call_is_unsupported_with_a_clear_message():
    with pytest.raises(UnsupportedError, match=r'cc\.1: custom-call \(custom_call_target="foo"\)'):
        run("p = f32[2] parameter(0)\nROOT cc.1 = f32[2] custom-call(p), custom_call_target=\"foo\"",
            np.ones(2, np.float32))


DEAD_SIDE_EFFECTS = [
    ('s = f32[] constant(1)\np = () custom-call(s), custom_call_target="host_print", '
     'custom_call_has_side_effect=true', "5:1: custom-call (p) cannot run: it has side effects",
     "'host_print'"),
    ("tok = token[] after-all()\nof = token[] outfeed(x, tok), outfeed_shape=f32[3]",
     "5:1: outfeed (of) cannot run: it has side effects", ""),
]


@pytest.mark.parametrize("dead,where,target", DEAD_SIDE_EFFECTS)
def test_a_side_effect_no_result_uses_is_refused_not_skipped(dead, where, target):
    """Only what the result depends on is evaluated; an effect the interpreter cannot
    produce is refused wherever it is, with or without verification."""
    module = parse(f"HloModule m\nENTRY e {{\nx = f32[3] parameter(0)\n{dead}\n"
                   "ROOT y = f32[3] multiply(x, x)\n}\n")
    for verify in (True, False):
        with pytest.raises(UnsupportedError, match=f"{re.escape(where)}.*{re.escape(target)}"):
            evaluate(module, [np.ones(3, np.float32)], verify=verify)


def test_a_dead_layout_constraint_marked_with_side_effects_is_evaluated():
    """A custom call the interpreter knows runs (or is skipped) like any instruction."""
    assert run1("x = f32[3] parameter(0)\nc = f32[3] custom-call(x), custom_call_target="
                '"LayoutConstraint", custom_call_has_side_effect=true\n'
                "ROOT y = f32[3] multiply(x, x)", np.full(3, 2, np.float32)).tolist() == [4] * 3


@pytest.mark.parametrize("target", ["LayoutConstraint", "Sharding", "SPMDFullToShardShape",
                                    "SPMDShardToFullShape"])
def test_layout_and_sharding_annotations_are_the_identity(target):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = run1(f'p = f32[2,3] parameter(0)\nROOT c = f32[2,3]{{0,1}} custom-call(p), '
               f'custom_call_target="{target}", sharding={{replicated}}', x)
    assert same_bits(out, x)


def test_a_sharding_annotation_that_changes_the_shape_is_an_error():
    """On one device a shard is the whole array: a shape change has no meaning here."""
    with pytest.raises(HloError, match="c: computed float32\\[4\\] but the instruction declares"):
        run("p = f32[4] parameter(0)\nROOT c = f32[2] custom-call(p), "
            'custom_call_target="SPMDFullToShardShape"', np.ones(4, np.float32))


def test_declared_shape_that_disagrees_with_semantics_fails():
    module = parse("HloModule m\nENTRY e {\np = f32[4] parameter(0)\nROOT r = f32[5] abs(p)\n}\n")
    with pytest.raises(HloError, match=r"r: result shape should be f32\[4\], declared f32\[5\]"):
        evaluate(module, [np.ones(4, np.float32)])
    # unverified, the interpreter's own check of every result still catches it
    with pytest.raises(HloError, match="r: computed float32\\[4\\] but the instruction declares"):
        evaluate(module, [np.ones(4, np.float32)], verify=False)


def test_supported_opcodes_cover_the_brief():
    needed = """parameter constant broadcast reshape transpose slice dynamic-slice
    dynamic-update-slice concatenate pad reverse iota convert bitcast-convert add subtract
    multiply divide remainder power maximum minimum atan2 clamp select compare and or xor not
    shift-left shift-right-logical shift-right-arithmetic popcnt count-leading-zeros is-finite
    exponential-minus-one log-plus-one logistic erf cbrt tan sign round-nearest-afz
    round-nearest-even floor ceil real imag complex dot convolution reduce reduce-window
    select-and-scatter gather scatter sort tuple get-tuple-element call while conditional map
    copy bitcast reduce-precision abs negate exponential log sqrt rsqrt sine cosine tanh""".split()
    assert set(needed) <= SUPPORTED_OPCODES


# ------------------------------------------------------------------ against XLA

EDGE_F32 = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 1e30, -1e30, INF, -INF, NAN, 0.1, 7.25]
EDGE_S32 = [0, 1, -1, 2, 7, -8, 31, 32, 33, 100, -100, 2 ** 31 - 1, -2 ** 31]

UNARY_F32 = """abs negate sign floor ceil round-nearest-afz round-nearest-even exponential
exponential-minus-one log log-plus-one logistic sqrt rsqrt cbrt sine cosine tan tanh erf""".split()
BINARY_F32 = "add subtract multiply divide remainder maximum minimum power atan2".split()
BINARY_S32 = """add subtract multiply divide remainder maximum minimum power and or xor
shift-left shift-right-logical shift-right-arithmetic""".split()


def _tolerance(dt: np.dtype) -> float:
    """Relative error allowed against XLA, whose transcendentals are its own polynomials."""
    if dt in (np.float64, np.complex128):
        return 1e-12
    return 1e-5 if dt in (np.float32, np.complex64) else 1e-2


def _assert_matches_xla(xla, text, args):
    ours = evaluate(parse(text), args)
    theirs = xla.run(text, args)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert a.dtype == b.dtype and a.shape == b.shape
        if from_numpy(a.dtype).kind in ("float", "complex"):
            tol = _tolerance(a.dtype)
            a, b = a.astype(np.complex128), b.astype(np.complex128)
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol, equal_nan=True)
            assert np.array_equal(np.isnan(a), np.isnan(b))
            assert np.array_equal(np.isinf(a), np.isinf(b))
        else:
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("op", UNARY_F32)
@pytest.mark.parametrize("t", ["f32", "f64", "bf16"])
def test_unary_matches_xla(xla, op, t):
    x = np.array(EDGE_F32).astype(np.dtype(BF16) if t == "bf16" else t.replace("f", "float"))
    n = len(x)
    _assert_matches_xla(xla, f"HloModule m\nENTRY e {{\np = {t}[{n}] parameter(0)\n"
                             f"ROOT r = {t}[{n}] {op}(p)\n}}", [x])


@pytest.mark.parametrize("op", BINARY_F32)
def test_binary_f32_matches_xla(xla, op):
    a, b = (v.ravel() for v in np.meshgrid(np.float32(EDGE_F32), np.float32(EDGE_F32)))
    n = len(a)
    _assert_matches_xla(xla, f"HloModule m\nENTRY e {{\np = f32[{n}] parameter(0)\n"
                             f"q = f32[{n}] parameter(1)\nROOT r = f32[{n}] {op}(p, q)\n}}", [a, b])


@pytest.mark.parametrize("op", BINARY_S32)
@pytest.mark.parametrize("t", ["s32", "u8"])
def test_binary_int_matches_xla(xla, op, t):
    dt = np.dtype({"s32": np.int32, "u8": np.uint8}[t])
    vals = np.array(EDGE_S32, np.int64).astype(dt)
    a, b = (v.ravel() for v in np.meshgrid(vals, vals))
    n = len(a)
    _assert_matches_xla(xla, f"HloModule m\nENTRY e {{\np = {t}[{n}] parameter(0)\n"
                             f"q = {t}[{n}] parameter(1)\nROOT r = {t}[{n}] {op}(p, q)\n}}", [a, b])


@pytest.mark.parametrize("direction", ["EQ", "NE", "LT", "LE", "GT", "GE"])
@pytest.mark.parametrize("ctype", ["FLOAT", "TOTALORDER"])
def test_compare_matches_xla(xla, direction, ctype):
    a, b = (v.ravel() for v in np.meshgrid(np.float32(EDGE_F32), np.float32(EDGE_F32)))
    n = len(a)
    _assert_matches_xla(xla, f"HloModule m\nENTRY e {{\np = f32[{n}] parameter(0)\n"
                             f"q = f32[{n}] parameter(1)\nROOT r = pred[{n}] compare(p, q), "
                             f"direction={direction}, type={ctype}\n}}", [a, b])


@pytest.mark.parametrize("src, dst", [(s, d) for s in ["f32", "f64", "s32", "u8", "bf16", "pred"]
                                      for d in ["s8", "u32", "s64", "f16", "bf16", "f32",
                                                "f8e4m3fn", "f8e5m2", "pred"] if s != d])
def test_convert_matches_xla(xla, src, dst):
    from hlo_opt.dtypes import dtype
    vals = EDGE_F32 + [300.0, -129.0, 70000.0, 448.0, 464.0] if src[0] in "fb" else EDGE_S32
    x = np.array(vals, np.float64 if src[0] in "fb" else np.int64)
    x = x.astype(dtype(src).numpy) if src != "pred" else x.astype(bool)
    n = len(x)
    _assert_matches_xla(xla, f"HloModule m\nENTRY e {{\np = {src}[{n}] parameter(0)\n"
                             f"ROOT r = {dst}[{n}] convert(p)\n}}", [x])


XLA_PROGRAMS = {
    "reduce_window_max_pool": (
        f"HloModule m\n{MAX}\nENTRY e {{\np = f32[2,9,9,3] parameter(0)\nm = f32[] constant(-inf)\n"
        "ROOT r = f32[2,5,5,3] reduce-window(p, m), window={size=1x3x3x1 stride=1x2x2x1 "
        "pad=0_0x1_1x1_1x0_0}, to_apply=mx\n}", [(2, 9, 9, 3)]),
    "conv_dilated_grouped": (
        "HloModule m\nENTRY e {\nx = f32[2,6,9,8] parameter(0)\nw = f32[3,3,2,6] parameter(1)\n"
        "ROOT c = convolution(x, w), window={size=3x3 stride=2x1 pad=1_2x0_-1 lhs_dilate=1x2 "
        "rhs_dilate=2x1}, dim_labels=bf01_01io->bf01, feature_group_count=3\n}",
        [(2, 6, 9, 8), (3, 3, 2, 6)]),
    "conv_batch_group": (
        "HloModule m\nENTRY e {\nx = f32[4,3,5,5] parameter(0)\nw = f32[2,2,3,6] parameter(1)\n"
        "ROOT c = convolution(x, w), window={size=2x2}, dim_labels=bf01_01io->bf01, "
        "batch_group_count=2\n}", [(4, 3, 5, 5), (2, 2, 3, 6)]),
    "dot_batched_bf16": (
        "HloModule m\nENTRY e {\na = bf16[3,4,16] parameter(0)\nb = bf16[3,16,5] parameter(1)\n"
        "ROOT d = f32[3,4,5] dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2}, "
        "rhs_batch_dims={0}, rhs_contracting_dims={1}\n}", [(3, 4, 16, "bf16"), (3, 16, 5, "bf16")]),
    "select_and_scatter_overlap": (
        "HloModule m\n" + ADD + "\nge { a = f32[] parameter(0)\n b = f32[] parameter(1)\n"
        " ROOT r = pred[] compare(a, b), direction=GE }\nENTRY e {\np = f32[7,8] parameter(0)\n"
        "s = f32[4,4] parameter(1)\nz = f32[] constant(0)\nROOT r = f32[7,8] "
        "select-and-scatter(p, s, z), window={size=3x3 stride=2x2 pad=1_1x1_1}, select=ge, "
        "scatter=add\n}", [(7, 8), (4, 4)]),
}


@pytest.mark.parametrize("name", sorted(XLA_PROGRAMS))
def test_programs_match_xla(xla, name):
    text, specs = XLA_PROGRAMS[name]
    rng = np.random.default_rng(3)
    args = []
    for spec in specs:
        dt = BF16 if spec[-1] == "bf16" else np.float32
        dims = [d for d in spec if isinstance(d, int)]
        args.append(rng.standard_normal(dims).astype(dt))
    _assert_matches_xla(xla, text, args)


def _corpus():
    from conftest import corpus_files
    return corpus_files()


@pytest.mark.parametrize("path", _corpus(), ids=lambda p: p.name)
def test_corpus_matches_xla(xla, path):
    """Every corpus module, unoptimized and as XLA optimized it, on random inputs."""
    text = path.read_text()
    module = parse(text)
    rng = np.random.default_rng(0)
    args = []
    for p in module.entry.parameters:
        s = p.shape
        if s.dtype.kind == "float":
            args.append((rng.standard_normal(s.dims) * 0.5).astype(s.dtype.numpy))
        elif s.dtype.kind == "complex":
            args.append((rng.standard_normal(s.dims) + 1j * rng.standard_normal(s.dims))
                        .astype(s.dtype.numpy))
        else:
            args.append(rng.integers(0, 3, s.dims).astype(s.dtype.numpy))
    ours = evaluate(module, args)
    theirs = xla.run(text, args)
    for a, b in zip(ours, theirs):
        assert a.dtype == b.dtype and a.shape == b.shape
        if a.dtype.kind in "fcV" and a.dtype != np.bool_:
            a64, b64 = a.astype(np.complex128), b.astype(np.complex128)
            scale = max(1.0, float(np.nanmax(np.abs(b64), initial=0.0)))
            tol = 3e-2 if a.dtype in (BF16, np.float16) else 2e-4
            np.testing.assert_allclose(a64, b64, rtol=tol, atol=tol * scale, equal_nan=True)
        else:
            np.testing.assert_array_equal(a, b)


DOT_TYPES = ["f32", "f64", "bf16", "s32", "s8", "u8", "pred"]


@pytest.mark.parametrize("operand,result", [(a, r) for a in DOT_TYPES for r in DOT_TYPES
                                            if (a, r) != ("pred", "pred")])
def test_dot_result_conversion_matches_xla(xla, operand, result):
    """Sums past the result type's range, negative ones into unsigned types and NaN: the
    accumulation type and the final conversion for every operand/result pairing."""
    rows = [[1.0] * 200, [-1.0] * 200, [100.0] * 3 + [0.0] * 197, [NAN] + [0.0] * 199,
            [3.0] * 5 + [0.0] * 195]
    x = np.array(rows)
    if dtype(operand).kind != "float":
        x = np.nan_to_num(x)
    x = x.astype(dtype(operand).numpy)
    ones = np.ones((200, 1)).astype(x.dtype)
    _assert_matches_xla(xla, f"HloModule m\nENTRY e {{\na = {operand}[5,200] parameter(0)\n"
                             f"b = {operand}[200,1] parameter(1)\n"
                             f"ROOT d = {result}[5,1] dot(a, b), lhs_contracting_dims={{1}}, "
                             "rhs_contracting_dims={0}\n}", [x, ones])
