"""Packing a convolution's input (the GEMM's A) by runs instead of element by element.

Element by element, packing costs dozens of instructions per element (coordinates, bounds),
several times the multiply-adds it feeds. Instead K splits into runs of evenly spaced input
elements (`input_runs`): per output position and run, the position and bounds are worked
out once and the run is read with masked vector loads where it is contiguous (the input's
features innermost, NHWC), masked gathers elsewhere (lanes on padding read nothing and give
0), and interleaved into the MR-row panels the micro-kernel reads (emit_dot._pack's layout).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from llvmlite import ir

from ..dtypes import DTYPES, accumulation_type
from ..targets import cpu_facts
from .conv_geometry import ConvGeometry, v
from .elemental import Elemental
from .emit_loops import clamp, delinearize, for_range, linearize
from .intrinsics import call
from .ltypes import I32, I64, elem
from .vector_ops import flush_denormal, load_run, masked_store, nbytes_of, splat


@dataclass(frozen=True)
class InputRuns:
    """How K splits into runs of evenly spaced input elements (`step` apart): a run index
    enumerates the taps of the `outer` spatial dims; within a run come the taps of the
    `merged` spatial dim (if any: its input positions are adjacent, so its taps times all
    input features are consecutive elements) and then the group's input features."""
    outer: tuple
    merged: int | None
    length: int
    step: int = 1


def input_runs(inst, cv: ConvGeometry | None = None) -> InputRuns | None:
    """The runs packing copies for the convolution `cv` (by default the whole of `inst`),
    or None where packing reads element by element: an input type other than f32, f64,
    bf16 and f16 (widened to f32 as they are loaded), or one the GEMM accumulates in a
    wider type. Runs are contiguous where the input's feature dimension is innermost
    (NHWC); elsewhere (weight gradients read the input as f01b, NCHW) features are a
    fixed stride apart and runs are gathered."""
    cv = cv or ConvGeometry.of(inst)
    a_type = inst.operands[0].shape.element_type
    acc = accumulation_type(*(DTYPES[s.element_type] for s in (
        inst.operands[0].shape, inst.operands[1].shape, inst.shape))).name
    if a_type not in ("f32", "f64", "bf16", "f16") or \
            elem(a_type).compute != elem(acc).compute or cv.cg * math.prod(cv.taps) == 0:
        return None
    step = math.prod(cv.ld[cv.labels.lhs_feature + 1:])
    if step > 1:
        return InputRuns(tuple(range(cv.rank)), None, cv.cg, step)
    last = cv.rank - 1
    w = cv.window
    if cv.rank and cv.labels.lhs_spatial[last] == cv.labels.lhs_feature - 1 and cv.fgc == 1 \
            and w.rhs_dilate[last] == 1 and w.lhs_dilate[last] == 1:
        return InputRuns(tuple(range(last)), last, cv.taps[last] * cv.cg)
    return InputRuns(tuple(range(cv.rank)), None, cv.cg)


def run_packer(gen: Elemental, cv: ConvGeometry, runs: InputRuns, lhs):
    """The A packer for emit_dot (None where the input is computed in this kernel rather
    than read from memory: then only element by element)."""
    source = gen.sources.get(id(lhs))
    if source is None:
        return None

    def pack(bi, m0, mcur, p0, kcur, dst, mr):
        _pack_runs(gen, cv, runs, source, bi, m0, mcur, p0, kcur, dst, mr)
    return pack


def _pack_runs(gen, cv: ConvGeometry, runs: InputRuns, source, g, m0, mcur, p0, kcur, dst,
               mr: int) -> None:
    """Rows [m0, m0 + mcur) and K [p0, p0 + kcur) of A into MR-row panels,
    dst[(panel*kcur + p)*MR + j] (the layout emit_dot._pack writes): per panel the rows'
    output coordinates once, per run each row's base address and the span of the run that
    lies on the input, then the run in vector chunks."""
    b = gen.b
    et = source.et
    lanes = cpu_facts.PREFERRED_VECTOR_BITS // (8 * nbytes_of(et.compute))
    length = runs.length
    panels = b.udiv(b.add(mcur, I64(mr - 1)), I64(mr))
    first_run = b.udiv(p0, I64(length))
    end_run = b.udiv(b.add(b.add(p0, kcur), I64(length - 1)), I64(length))
    with for_range(b, 0, panels, "cpanel", vectorize=False) as panel:
        rows = []
        for j in range(mr):
            r = b.add(b.mul(panel, I64(mr)), I64(j))
            inside = b.icmp_signed("<", r, mcur)
            rows.append((inside, delinearize(b, b.add(m0, r), [cv.batch] + cv.out_sp)))
        panel_dst = b.gep(dst, [b.mul(panel, b.mul(kcur, I64(mr)))], inbounds=True,
                          source_etype=et.compute)
        with for_range(b, first_run, end_run, "crun", vectorize=False) as run:
            start = b.mul(run, I64(length))
            seg_lo = _max(b, b.sub(p0, start), I64(0))
            seg_hi = _min(b, b.sub(b.add(p0, kcur), start), I64(length))
            out0 = b.sub(b.add(start, seg_lo), p0)
            tk = delinearize(b, run, [cv.taps[d] for d in runs.outer])
            spans = [_row_span(b, cv, runs, g, inside, pos_out, tk, seg_lo, seg_hi)
                     for inside, pos_out in rows]
            chunks = b.udiv(b.add(b.sub(seg_hi, seg_lo), I64(lanes - 1)), I64(lanes))
            with for_range(b, 0, chunks, "cchunk", vectorize=False) as q:
                c0 = b.add(seg_lo, b.mul(q, I64(lanes)))
                lane = b.add(splat(b, c0, lanes), ir.Constant(ir.VectorType(I64, lanes),
                                                               list(range(lanes))))
                vecs = []
                for base, lo, hi in spans:
                    mask = b.and_(b.icmp_signed(">=", lane, splat(b, lo, lanes)),
                                  b.icmp_signed("<", lane, splat(b, hi, lanes)))
                    vecs.append(flush_denormal(b, load_run(b, source, base, c0, lane,
                                                            runs.step, mask, lanes)))
                block = _interleave(b, vecs)
                out = b.gep(panel_dst, [b.mul(b.add(out0, b.mul(q, I64(lanes))), I64(mr))],
                            inbounds=True, source_etype=et.compute)
                count = b.mul(_min(b, I64(lanes), b.sub(seg_hi, c0)), I64(mr))
                with b.if_else(b.icmp_signed("==", count, I64(lanes * mr))) as (full, tail):
                    with full:
                        for i, part in enumerate(block):
                            b.store(part, b.gep(out, [I64(i * lanes)], inbounds=True,
                                                source_etype=et.compute), align=nbytes_of(et.compute))
                    with tail:
                        for i, part in enumerate(block):
                            keep = b.icmp_signed("<", b.add(lane, splat(b, b.sub(
                                I64(i * lanes), c0), lanes)), splat(b, count, lanes))
                            masked_store(b, part, b.gep(out, [I64(i * lanes)], inbounds=True,
                                                         source_etype=et.compute), keep)


def _row_span(b, cv: ConvGeometry, runs: InputRuns, g, inside, pos_out, tk, seg_lo, seg_hi):
    """(linear input index of the run's element 0, first and end element on the input,
    both within [seg_lo, seg_hi)) for one output position; an empty span where the row is
    past the block or an outer tap falls off the input."""
    labels = cv.labels
    coords = cv.input_coords(b, g, pos_out[0])
    ok = inside
    for d, t in zip(runs.outer, tk):
        pos, good = cv.position(b, d, pos_out[1 + d], t)
        ok = b.and_(ok, good)
        coords[labels.lhs_spatial[d]] = pos
    lo, hi = I64(0), I64(runs.length)
    if runs.merged is not None:
        d = runs.merged
        pos, _ = cv.position(b, d, pos_out[1 + d], I64(0))
        coords[labels.lhs_spatial[d]] = pos
        # taps t with 0 <= pos + t < size are on the input
        lo = b.mul(clamp(b, b.sub(I64(0), pos), 0, cv.taps[d]), I64(cv.cg))
        hi = b.mul(clamp(b, b.sub(I64(cv.in_sp[d]), pos), 0, cv.taps[d]), I64(cv.cg))
    base = v(linearize(b, [v(c) for c in coords], cv.ld))
    lo = b.select(ok, _max(b, lo, seg_lo), I64(0))
    hi = b.select(ok, _min(b, hi, seg_hi), I64(0))
    return base, lo, hi


def _interleave(b, vecs) -> list:
    """The rows of a panel element by element, out[c*len(vecs) + j] = vecs[j][c], as
    len(vecs) vectors: each gathers its elements row by row, one two-input shuffle per row
    it draws from (a single permute instruction each with AVX-512)."""
    lanes, rows = vecs[0].type.count, len(vecs)
    mask = lambda m: ir.Constant(ir.VectorType(I32, lanes), m)   # noqa: E731
    outs = []
    for i in range(rows):
        src = [divmod(e, rows) for e in range(i * lanes, (i + 1) * lanes)]   # (c, j)
        order = sorted({j for _, j in src})
        acc = b.shuffle_vector(vecs[order[0]], vecs[order[-1]], mask(
            [c if j == order[0] else lanes + c if j == order[-1] else 0 for c, j in src]))
        for row in order[1:-1]:
            acc = b.shuffle_vector(acc, vecs[row], mask(
                [lanes + c if j == row else k for k, (c, j) in enumerate(src)]))
        outs.append(acc)
    return outs


def _min(b, x, y):
    return call(b, "llvm.smin", [x, y])


def _max(b, x, y):
    return call(b, "llvm.smax", [x, y])
