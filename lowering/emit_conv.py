"""convolution as GEMMs over an implicit im2col (emit_dot.py does the blocking).

A[g, m, k] is the input under tap k at output position m after padding, base (lhs)
dilation, stride and window (rhs) dilation, 0 where the tap falls on padding or a dilation
hole; B[g, k, n] is the kernel element, read reversed where rhs_reversal says so (shapes:
conv_geometry.py). Nothing is materialized: A is packed by runs of the input where it can
be (conv_pack.py), else both are index arithmetic during packing. A base-dilated
convolution is one GEMM per output phase (ConvGeometry.phases); one with a single output
feature per group and groups innermost is no GEMM (conv_lanes.py).
"""
from __future__ import annotations

import math
from dataclasses import replace

from .conv_geometry import ConvGeometry, v
from .conv_lanes import channelwise, emit_channelwise
from .conv_pack import input_runs, run_packer
from .elemental import Elemental
from .emit_dot import Gemm, emit_gemm, register_gemm
from .emit_kernel import PHASES
from .emit_kernel import register as register_phase
from .emit_loops import Index, clamp, delinearize, linearize, sub
from .ltypes import I1, I64, elem, select, zero


def conv_gemm(inst) -> Gemm:
    return _gemm(inst, ConvGeometry.of(inst))


def conv_gemms(inst) -> list[Gemm]:
    """The GEMMs that together compute `inst`: one per output phase (ConvGeometry.phases)."""
    return [_gemm(inst, cv) for cv in ConvGeometry.of(inst).phases()]


def _gemm(inst, cv: ConvGeometry) -> Gemm:
    lhs, rhs = inst.operands
    runs = input_runs(inst, cv)
    labels, rank = cv.labels, cv.rank
    ld, rd, od = cv.ld, cv.rd, cv.od
    taps, cg = cv.taps, cv.cg
    a_type = elem(lhs.shape.element_type)

    def a_value(gen: Elemental, g, m, k):
        b = gen.b
        pos_out = delinearize(b, m, [cv.batch] + cv.out_sp)
        tk = delinearize(b, k, taps + [cg])
        coords = cv.input_coords(b, g, pos_out[0])
        coords[labels.lhs_feature] = b.add(v(coords[labels.lhs_feature]), v(tk[-1]))
        ok = I1(1)
        for d in range(rank):
            pos, good = cv.position(b, d, pos_out[1 + d], tk[d])
            ok = b.and_(ok, good)
            coords[labels.lhs_spatial[d]] = b.select(good, pos, I64(0))
        x = gen.value(lhs, Index(ld, values=coords))
        return select(b, ok, x, zero(a_type))

    def b_value(gen: Elemental, g, k, n):
        b = gen.b
        tk = delinearize(b, k, taps + [cg])
        coords = [0] * len(rd)
        coords[labels.rhs_output_feature] = b.add(b.mul(g, I64(cv.og)), n)
        coords[labels.rhs_input_feature] = tk[-1]
        for d in range(rank):
            coords[labels.rhs_spatial[d]] = cv.kernel_tap(b, d, tk[d])
        return gen.value(rhs, Index(rd, values=coords))

    def c_row(b, g, m):
        pos_out = delinearize(b, m, [cv.batch] + cv.out_sp)
        coords = [0] * len(od)
        coords[labels.out_batch] = pos_out[0]
        coords[labels.out_feature] = b.mul(g, I64(cv.og))
        for d in range(rank):
            coords[labels.out_spatial[d]] = cv.out_position(b, d, pos_out[1 + d])
        return v(linearize(b, coords, od))

    stride = math.prod(od[labels.out_feature + 1:])
    # Output laid out batch, spatial..., feature: rows of C (output positions) are evenly
    # spaced and features contiguous, so tiles go straight into the output.
    natural = labels.out_batch == 0 and labels.out_feature == len(od) - 1 and \
        list(labels.out_spatial) == list(range(1, len(od) - 1)) and \
        all(every == 1 for _, every in cv.out_map)
    return Gemm(cv.fgc * cv.bgc, cv.batch * math.prod(cv.out_sp), cv.og,
                math.prod(taps) * cg, a_type, elem(rhs.shape.element_type), a_value, b_value,
                c_row, stride, elem(inst.shape.element_type), c_ld=od[-1] if natural else None,
                a_packer=None if runs is None else
                lambda gen: run_packer(gen, cv, runs, lhs))


def one_gemm(inst) -> bool:
    """Whether the convolution is lowered as exactly one GEMM through emit_dot's phase
    entry (not in vector lanes, not split into output phases)."""
    return channelwise(inst) is None and len(ConvGeometry.of(inst).phases()) == 1


# The GEMM's phase entry stays emit_dot's (register_gemm); this one wraps it for the
# convolutions that are several GEMMs or none. With `gemm` (a GEMM epilogue), `root` is
# the phase's root and `gemm` the convolution: every path applies the epilogue as it
# writes final values.
register_gemm("convolution", conv_gemm)
_gemm_emit, _gemm_plan, _ = PHASES["convolution"]


def _plan(root, gemm=None):
    conv = gemm or root
    if one_gemm(conv):
        return _gemm_plan(root, **_epilogue(gemm))
    cw = channelwise(conv)
    if cw:
        return cw.positions, cw.work(), 0
    gemms = conv_gemms(conv)
    return (sum(g.tasks() for g in gemms), sum(g.work() for g in gemms),
            max(g.scratch() for g in gemms))


def _emit(kb, root, dests, lo, hi, gemm=None):
    """Tasks [lo, hi) of the convolution: of its GEMMs' tasks, one after another."""
    conv = gemm or root
    if one_gemm(conv):
        _gemm_emit(kb, root, dests, lo, hi, **_epilogue(gemm))
        return
    cw = channelwise(conv)
    if cw:
        emit_channelwise(kb, conv, cw, dests[0], lo, hi, root if gemm else None)
        return
    first = 0
    for g in conv_gemms(conv):
        n = g.tasks()
        emit_gemm(kb, replace(g, epilogue=(gemm, root)) if gemm else g, dests[0],
                  clamp(kb.b, sub(kb.b, lo, first), 0, n),
                  clamp(kb.b, sub(kb.b, hi, first), 0, n))
        first += n


def _epilogue(gemm) -> dict:
    return {} if gemm is None else {"gemm": gemm}


register_phase("convolution", _emit, _plan)
