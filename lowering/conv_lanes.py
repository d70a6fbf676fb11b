"""Convolutions that are no GEMM: one output feature per group (N = 1), groups innermost.

Depthwise convolutions, their input gradients, and the weight gradients of depthwise
convolutions (batch groups) run as a loop over output positions and K steps with all
groups in vector lanes: per step, output row += input row * kernel row, contiguous.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from llvmlite import ir

from .conv_geometry import ConvGeometry, v
from .emit_loops import Index, delinearize, for_range, linearize
from .intrinsics import call
from .ltypes import I1, I64, elem, opaque, store


@dataclass(frozen=True)
class Channelwise:
    """out[p, g] = sum over k of in(p, k, g) * kernel(k, g) for output positions p (batch x
    spatial), K = taps x input features per group, groups g innermost everywhere (unit
    stride), so the loop over g is a contiguous vector multiply-add."""
    positions: int
    k: int
    groups: int

    def work(self) -> float:
        """Per (position, K step): its coordinates and bounds (~8 scalar ops) and one
        vector multiply-add per 8 groups."""
        return self.positions * self.k * (8 + self.groups / 8)


def channelwise(inst) -> Channelwise | None:
    """The loop for `inst` if it is such a convolution (f32 or f64 throughout), else None."""
    cv = ConvGeometry.of(inst)
    lhs, rhs = inst.operands
    labels = cv.labels
    groups = cv.fgc * cv.bgc
    types = {s.element_type for s in (lhs.shape, rhs.shape, inst.shape)}
    if groups == 1 or cv.og != 1 or len(types) != 1 or types - {"f32", "f64"} or \
            (cv.cg if cv.bgc == 1 else cv.batch) != 1 or \
            not all(_innermost(dims, d) for dims, d in (
                (cv.ld, _lane_dim(cv)), (cv.rd, labels.rhs_output_feature),
                (cv.od, labels.out_feature))):
        return None
    return Channelwise(inst.shape.num_elements // groups,
                       math.prod(cv.taps) * (cv.ld[labels.lhs_feature] if cv.bgc > 1 else 1),
                       groups)


def _lane_dim(cv: ConvGeometry) -> int:
    """The input dimension that indexes the groups: features, or the batch for batch
    groups (one sample per group)."""
    return cv.labels.lhs_feature if cv.bgc == 1 else cv.labels.lhs_batch


def _innermost(dims, d) -> bool:
    """Whether dimension d has unit stride in a row-major array."""
    return math.prod(dims[d + 1:]) == 1


def emit_channelwise(kb, inst, cw: Channelwise, out, lo, hi, epilogue=None) -> None:
    """Per output position: its row of groups zeroed, then per K step whose input position
    is on the input, row += input row * kernel row (the operands' values through the
    elemental generator, so fused producers are computed inline). With an `epilogue` (the
    root of a loop reading the convolution elementwise), the row is summed on the stack and
    the root's values at its positions are stored."""
    b = kb.b
    gen = kb.elemental()
    cv = ConvGeometry.of(inst)
    lhs, rhs = inst.operands
    labels = cv.labels
    et = out.et if epilogue is None else elem(inst.shape.element_type)
    # input features outermost: with batch groups they are the input's batch, its major
    # dimension, so consecutive steps read neighbouring rows
    k_dims = [cw.k // max(math.prod(cv.taps), 1)] + cv.taps
    with for_range(b, lo, hi, "cwpos", vectorize=False) as p:
        pos_out = delinearize(b, p, [cv.batch] + cv.out_sp)
        oc = [0] * len(cv.od)
        oc[labels.out_batch] = pos_out[0]
        for d in range(cv.rank):
            oc[labels.out_spatial[d]] = pos_out[1 + d]
        at = v(linearize(b, oc, cv.od))
        row = b.gep(out.ptr, [at], inbounds=True, source_etype=et.storage) if epilogue is None \
            else opaque(b, gen.alloca(ir.ArrayType(et.compute, cw.groups)))
        with for_range(b, 0, cw.groups, "cwzero") as g:
            b.store(et.compute(0.0), b.gep(row, [g], inbounds=True, source_etype=et.storage))
        with for_range(b, 0, cw.k, "cwk", vectorize=False) as k:
            c, *tk = delinearize(b, k, k_dims)
            lc = cv.input_coords(b, I64(0), pos_out[0])
            lc[labels.lhs_feature] = c
            ok = I1(1)
            for d in range(cv.rank):
                pos, good = cv.position(b, d, pos_out[1 + d], tk[d])
                ok = b.and_(ok, good)
                lc[labels.lhs_spatial[d]] = pos
            rc = [0] * len(cv.rd)
            rc[labels.rhs_input_feature] = c
            for d in range(cv.rank):
                rc[labels.rhs_spatial[d]] = cv.kernel_tap(b, d, tk[d])
            with b.if_then(ok):
                with for_range(b, 0, cw.groups, "cwg") as g:
                    gen.push_scope()
                    lc[_lane_dim(cv)] = g
                    rc[labels.rhs_output_feature] = g
                    x = gen.value(lhs, Index(cv.ld, values=list(lc)))
                    w = gen.value(rhs, Index(cv.rd, values=list(rc)))
                    ptr = b.gep(row, [g], inbounds=True, source_etype=et.storage)
                    b.store(call(b, "llvm.fma", [x, w, b.load(ptr, typ=et.compute)]), ptr)
                    gen.pop_scope()
        if epilogue is not None:
            with for_range(b, 0, cw.groups, "cwepi") as g:
                gen.push_scope()
                gen.bindings[id(inst)] = b.load(b.gep(row, [g], inbounds=True,
                                                      source_etype=et.storage), typ=et.compute)
                index = b.add(at, g)
                store(b, gen.value(epilogue, Index(epilogue.shape.dims, linear=index)),
                      out.ptr, out.et, index)
                del gen.bindings[id(inst)]
                gen.pop_scope()
