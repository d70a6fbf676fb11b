"""convolution as a GEMM over implicit im2col (emit_dot.py does the blocking).

Per group g (feature groups split the input features, batch groups the input batch; either
way group g owns the g-th block of output features): M = batch x output positions, N =
output features of the group,
K = window taps x input features of the group (input feature fastest, so packing reads an
NHWC input contiguously). A[g, m, k] is the input under tap k at output position m after
padding, base (lhs) dilation, stride and window (rhs) dilation, 0 where the tap falls on
padding or a dilation hole; B[g, k, n] is the kernel element, read reversed where
rhs_reversal says so. Nothing is materialized: both are index arithmetic during packing.
"""
from __future__ import annotations

import math

from ..attributes import Window
from .elemental import Elemental
from .emit_dot import Gemm, register_gemm
from .emit_loops import Index, delinearize, linearize
from .ltypes import I1, I64, elem, select, zero


def conv_gemm(inst) -> Gemm:
    lhs, rhs = inst.operands
    labels = inst.attrs["dim_labels"]
    rank = len(labels.lhs_spatial)
    window = inst.attrs.get("window") or Window.default(rank)
    if window.rank != rank:
        window = Window.default(rank)
    fgc = inst.attrs.get("feature_group_count", 1)
    bgc = inst.attrs.get("batch_group_count", 1)
    groups = fgc * bgc
    ld, rd, od = lhs.shape.dims, rhs.shape.dims, inst.shape.dims
    batch, in_feat = ld[labels.lhs_batch] // bgc, ld[labels.lhs_feature]
    cg = in_feat // fgc
    og = rd[labels.rhs_output_feature] // groups
    taps = [rd[d] for d in labels.rhs_spatial]
    out_sp = [od[d] for d in labels.out_spatial]
    in_sp = [ld[d] for d in labels.lhs_spatial]
    a_type = elem(lhs.shape.element_type)

    def a_value(gen: Elemental, g, m, k):
        b = gen.b
        pos_out = delinearize(b, m, [batch] + out_sp)
        tk = delinearize(b, k, taps + [cg])
        coords = [0] * len(ld)
        if bgc > 1:                    # batch groups: group g reads samples g*batch + n
            coords[labels.lhs_batch] = b.add(b.mul(g, I64(batch)), _v(pos_out[0]))
            coords[labels.lhs_feature] = tk[-1]
        else:                          # feature groups: group g reads features g*cg + c
            coords[labels.lhs_batch] = pos_out[0]
            coords[labels.lhs_feature] = b.add(b.mul(g, I64(cg)), _v(tk[-1]))
        ok = I1(1)
        for d in range(rank):
            pos = b.sub(b.add(b.mul(_v(pos_out[1 + d]), I64(window.stride[d])),
                              b.mul(_v(tk[d]), I64(window.rhs_dilate[d]))), I64(window.pad[d][0]))
            good = b.icmp_signed(">=", pos, I64(0))
            base = window.lhs_dilate[d]
            if base > 1:
                good = b.and_(good, b.icmp_signed("==", b.srem(pos, I64(base)), I64(0)))
                pos = b.sdiv(pos, I64(base))
            good = b.and_(good, b.icmp_signed("<", pos, I64(in_sp[d])))
            ok = b.and_(ok, good)
            coords[labels.lhs_spatial[d]] = b.select(good, pos, I64(0))
        x = gen.value(lhs, Index(ld, values=coords))
        return select(b, ok, x, zero(a_type))

    def b_value(gen: Elemental, g, k, n):
        b = gen.b
        tk = delinearize(b, k, taps + [cg])
        coords = [0] * len(rd)
        coords[labels.rhs_output_feature] = b.add(b.mul(g, I64(og)), n)
        coords[labels.rhs_input_feature] = tk[-1]
        for d in range(rank):
            t = tk[d]
            if window.rhs_reversal[d]:
                t = b.sub(I64(taps[d] - 1), _v(t))
            coords[labels.rhs_spatial[d]] = t
        return gen.value(rhs, Index(rd, values=coords))

    def c_row(b, g, m):
        pos_out = delinearize(b, m, [batch] + out_sp)
        coords = [0] * len(od)
        coords[labels.out_batch] = pos_out[0]
        coords[labels.out_feature] = b.mul(g, I64(og))
        for d in range(rank):
            coords[labels.out_spatial[d]] = pos_out[1 + d]
        return _v(linearize(b, coords, od))

    stride = math.prod(od[labels.out_feature + 1:])
    # Output laid out batch, spatial..., feature: rows of C (output positions) are evenly
    # spaced and features contiguous, so tiles go straight into the output.
    natural = labels.out_batch == 0 and labels.out_feature == len(od) - 1 and \
        list(labels.out_spatial) == list(range(1, len(od) - 1))
    return Gemm(groups, batch * math.prod(out_sp), og, math.prod(taps) * cg, a_type,
                elem(rhs.shape.element_type), a_value, b_value, c_row, stride,
                elem(inst.shape.element_type), c_ld=od[-1] if natural else None)


def _v(x):
    return I64(x) if isinstance(x, int) else x


register_gemm("convolution", conv_gemm)
