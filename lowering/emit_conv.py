"""convolution as a GEMM over implicit im2col (emit_dot.py does the blocking).

Per group g (feature groups split the input features, batch groups the input batch; either
way group g owns the g-th block of output features): M = batch x output positions, N =
output features of the group,
K = window taps x input features of the group (input feature fastest, so packing reads an
NHWC input contiguously). A[g, m, k] is the input under tap k at output position m after
padding, base (lhs) dilation, stride and window (rhs) dilation, 0 where the tap falls on
padding or a dilation hole; B[g, k, n] is the kernel element, read reversed where
rhs_reversal says so. Nothing is materialized: both are index arithmetic during packing.

Packing A element by element costs dozens of instructions per element (coordinates,
bounds), several times the multiply-adds it feeds. Where the input's feature dimension is
innermost, K splits into runs that are contiguous in the input (`input_runs`): per output
position and run, the position and bounds are worked out once and the run is copied with
masked vector loads (lanes on padding read nothing and give 0), interleaved into the
MR-row panel the micro-kernel reads.

A convolution with one output feature per group whose group index is innermost in input,
kernel and output (depthwise convolutions, their input gradients, and the weight
gradients of depthwise convolutions as batch groups) is no GEMM: N is 1. It runs as a loop
over output positions and taps with all groups in vector lanes (`Channelwise`).
"""
from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass

from llvmlite import ir

from ..attributes import Window
from ..dtypes import DTYPES, accumulation_type
from ..targets import cpu_facts
from .elemental import Elemental
from .emit_dot import Gemm, _splat, emit_gemm, register_gemm
from .emit_kernel import PHASES
from .emit_kernel import register as register_phase
from .emit_loops import Index, clamp, delinearize, for_range, linearize, sub
from .intrinsics import call, declare
from .ltypes import I1, I32, I64, PTR, VOID, elem, select, zero


@dataclass(frozen=True)
class ConvGeometry:
    """A convolution's shapes in GEMM terms (see the module docstring)."""
    labels: object
    window: Window
    fgc: int
    bgc: int
    ld: tuple
    rd: tuple
    od: tuple
    batch: int           # output batch (input batch per batch group)
    cg: int              # input features per group
    og: int              # output features per group
    taps: list           # window taps per spatial dim
    out_sp: list         # output positions per spatial dim
    in_sp: list
    # Per spatial dim: kernel tap j of this window is kernel element first + step*j, and
    # output position q is output element phase + every*q (a phase of `phases`).
    tap_map: tuple = ()
    out_map: tuple = ()

    @property
    def rank(self) -> int:
        return len(self.taps)

    def kernel_tap(self, b, d: int, j):
        first, step = self.tap_map[d]
        t = b.add(I64(first), b.mul(_v(j), I64(step)))
        if self.window.rhs_reversal[d]:
            t = b.sub(I64(self.rd[self.labels.rhs_spatial[d]] - 1), t)
        return t

    def out_position(self, b, d: int, q):
        phase, every = self.out_map[d]
        return b.add(I64(phase), b.mul(_v(q), I64(every))) if every > 1 else q

    def phases(self) -> list[ConvGeometry]:
        """The convolution as a sum of convolutions without base (lhs) dilation, one per
        output phase: along a dimension dilated by s (with stride 1), the outputs
        congruent to p mod s meet input elements only under the taps t with
        (p + t*rhs_dilate - pad) divisible by s, an arithmetic progression; so they form a
        convolution of the undilated input with those taps. This skips the taps that fall
        on dilation holes (all but about 1/s of them) instead of multiplying zeros. Itself
        where nothing is dilated or a dilated dimension has a stride."""
        w = self.window
        if all(s == 1 for s in w.lhs_dilate) or \
                any(s > 1 and st > 1 for s, st in zip(w.lhs_dilate, w.stride)):
            return [self]
        per_dim = [[self._dim_phase(d, p) for p in range(w.lhs_dilate[d])]
                   for d in range(self.rank)]
        return [self._with(choice) for choice in itertools.product(*per_dim)
                if all(c[1] > 0 for c in choice)]

    def _dim_phase(self, d: int, p: int):
        """(taps, outputs, (first, step), (p, s), rhs dilation, low padding) of phase p."""
        w = self.window
        s, r, pad = w.lhs_dilate[d], w.rhs_dilate[d], w.pad[d][0]
        if s == 1:
            return (self.taps[d], self.out_sp[d], (0, 1), (0, 1), r, pad)
        valid = [t for t in range(self.taps[d]) if (p + t * r - pad) % s == 0]
        step = valid[1] - valid[0] if len(valid) > 1 else 1
        first = valid[0] if valid else 0
        return (len(valid), -(-(self.out_sp[d] - p) // s), (first, step), (p, s),
                step * r // s, -((p + first * r - pad) // s))

    def _with(self, choice) -> ConvGeometry:
        taps, outs, tap_map, out_map, dil, pad = zip(*choice)
        one = (1,) * self.rank
        window = Window(taps, self.window.stride, tuple((p, 0) for p in pad), one, dil,
                        self.window.rhs_reversal)
        return dataclasses.replace(self, window=window, taps=list(taps), out_sp=list(outs),
                                   tap_map=tap_map, out_map=out_map)

    @staticmethod
    def of(inst) -> ConvGeometry:
        lhs, rhs = inst.operands
        labels = inst.attrs["dim_labels"]
        rank = len(labels.lhs_spatial)
        window = inst.attrs.get("window") or Window.default(rank)
        if window.rank != rank:
            window = Window.default(rank)
        fgc = inst.attrs.get("feature_group_count", 1)
        bgc = inst.attrs.get("batch_group_count", 1)
        ld, rd, od = lhs.shape.dims, rhs.shape.dims, inst.shape.dims
        return ConvGeometry(labels, window, fgc, bgc, tuple(ld), tuple(rd), tuple(od),
                            ld[labels.lhs_batch] // bgc, ld[labels.lhs_feature] // fgc,
                            rd[labels.rhs_output_feature] // (fgc * bgc),
                            [rd[d] for d in labels.rhs_spatial],
                            [od[d] for d in labels.out_spatial],
                            [ld[d] for d in labels.lhs_spatial],
                            ((0, 1),) * rank, ((0, 1),) * rank)

    def input_coords(self, b, g, n):
        """Input coordinates of sample n of group g, feature 0 of the group, spatial 0."""
        coords = [0] * len(self.ld)
        if self.bgc > 1:               # batch groups: group g reads samples g*batch + n
            coords[self.labels.lhs_batch] = b.add(b.mul(g, I64(self.batch)), _v(n))
        else:                          # feature groups: group g reads features g*cg + c
            coords[self.labels.lhs_batch] = n
            coords[self.labels.lhs_feature] = b.mul(g, I64(self.cg))
        return coords

    def position(self, b, d: int, out, tap):
        """(input position along spatial dim d, whether it is on the input): output
        position `out` under tap `tap`, through stride, window dilation, padding and base
        dilation (positions between dilated elements are off the input)."""
        w = self.window
        pos = b.sub(b.add(b.mul(_v(out), I64(w.stride[d])), b.mul(_v(tap), I64(w.rhs_dilate[d]))),
                    I64(w.pad[d][0]))
        good = b.icmp_signed(">=", pos, I64(0))
        base = w.lhs_dilate[d]
        if base > 1:
            good = b.and_(good, b.icmp_signed("==", b.srem(pos, I64(base)), I64(0)))
            pos = b.sdiv(pos, I64(base))
        return pos, b.and_(good, b.icmp_signed("<", pos, I64(self.in_sp[d])))


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
    or None where packing reads element by element: an element type the GEMM converts
    while packing. Runs are contiguous where the input's feature dimension is innermost
    (NHWC); elsewhere (weight gradients read the input as f01b, NCHW) features are a
    fixed stride apart and runs are gathered."""
    cv = cv or ConvGeometry.of(inst)
    a_type = inst.operands[0].shape.element_type
    acc = accumulation_type(*(DTYPES[s.element_type] for s in (
        inst.operands[0].shape, inst.operands[1].shape, inst.shape))).name
    if a_type != acc or a_type not in ("f32", "f64") or cv.cg * math.prod(cv.taps) == 0:
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
        coords[labels.lhs_feature] = b.add(_v(coords[labels.lhs_feature]), _v(tk[-1]))
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
        return _v(linearize(b, coords, od))

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
                lambda gen: _run_packer(gen, cv, runs, lhs))


# ---------------------------------------------------------------------- packing by runs

def _run_packer(gen: Elemental, cv: ConvGeometry, runs: InputRuns, lhs):
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
    lanes = cpu_facts.PREFERRED_VECTOR_BITS // et.bits
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
                lane = b.add(_splat(b, c0, lanes), ir.Constant(ir.VectorType(I64, lanes),
                                                               list(range(lanes))))
                vecs = []
                for base, lo, hi in spans:
                    mask = b.and_(b.icmp_signed(">=", lane, _splat(b, lo, lanes)),
                                  b.icmp_signed("<", lane, _splat(b, hi, lanes)))
                    vecs.append(_load_run(b, source, base, c0, lane, runs.step, mask, lanes))
                block = _interleave(b, vecs)
                out = b.gep(panel_dst, [b.mul(b.add(out0, b.mul(q, I64(lanes))), I64(mr))],
                            inbounds=True, source_etype=et.compute)
                count = b.mul(_min(b, I64(lanes), b.sub(seg_hi, c0)), I64(mr))
                with b.if_else(b.icmp_signed("==", count, I64(lanes * mr))) as (full, tail):
                    with full:
                        b.store(block, out, align=et.nbytes)
                    with tail:
                        n = lanes * mr
                        keep = b.icmp_signed("<", ir.Constant(ir.VectorType(I64, n), list(range(n))),
                                             _splat(b, count, n))
                        _masked_store(b, block, out, keep)


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
    base = _v(linearize(b, [_v(c) for c in coords], cv.ld))
    lo = b.select(ok, _max(b, lo, seg_lo), I64(0))
    hi = b.select(ok, _min(b, hi, seg_hi), I64(0))
    return base, lo, hi


def _interleave(b, vecs):
    """out[c*len(vecs) + j] = vecs[j][c]: the rows of a panel, element by element."""
    lanes = vecs[0].type.count
    rows = len(vecs)
    parts = list(vecs)
    while len(parts) & (len(parts) - 1):             # a power of two, to pair them up
        parts.append(ir.Constant(vecs[0].type, None))
    while len(parts) > 1:
        width = parts[0].type.count
        pairs = ir.Constant(ir.VectorType(I32, 2 * width), list(range(2 * width)))
        parts = [b.shuffle_vector(x, y, pairs) for x, y in zip(parts[::2], parts[1::2])]
    order = [j * lanes + c for c in range(lanes) for j in range(rows)]
    whole = parts[0]
    return b.shuffle_vector(whole, ir.Constant(whole.type, None),
                            ir.Constant(ir.VectorType(I32, len(order)), order))


def _load_run(b, source, base, c0, lane, step: int, mask, lanes: int):
    """Run elements c0 .. c0 + lanes - 1 (element e at base + e*step) where `mask` is set,
    0 elsewhere; lanes off the mask read nothing (their address may be off the input)."""
    t = source.et.compute
    vt = ir.VectorType(t, lanes)
    if step == 1:
        ptr = b.gep(source.ptr, [b.add(base, c0)], source_etype=source.et.storage)
        fn = declare(b.module, f"llvm.masked.load.{_vname(vt)}.p0", vt,
                     [PTR, I32, mask.type, vt])
        return b.call(fn, [ptr, I32(_bytes(t)), mask, ir.Constant(vt, None)])
    nbytes = source.et.nbytes
    at = b.add(_splat(b, b.add(b.ptrtoint(source.ptr, I64), b.mul(base, I64(nbytes))), lanes),
               b.mul(lane, ir.Constant(lane.type, [step * nbytes] * lanes)))
    pt = ir.VectorType(PTR, lanes)
    ptrs = b.inttoptr(at, pt)
    fn = declare(b.module, f"llvm.masked.gather.{_vname(vt)}.v{lanes}p0", vt,
                 [pt, I32, mask.type, vt])
    return b.call(fn, [ptrs, I32(_bytes(t)), mask, ir.Constant(vt, None)])


def _masked_store(b, value, ptr, mask):
    fn = declare(b.module, f"llvm.masked.store.{_vname(value.type)}.p0", VOID,
                 [value.type, PTR, I32, mask.type])
    b.call(fn, [value, ptr, I32(_bytes(value.type.element)), mask])


def _bytes(t) -> int:
    return 8 if isinstance(t, ir.DoubleType) else 4


def _vname(vt) -> str:
    return f"v{vt.count}{'f64' if isinstance(vt.element, ir.DoubleType) else 'f32'}"


def _min(b, x, y):
    return call(b, "llvm.smin", [x, y])


def _max(b, x, y):
    return call(b, "llvm.smax", [x, y])


def _v(x):
    return I64(x) if isinstance(x, int) else x


# --------------------------------------------------------------- groups in vector lanes

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
    cv = ConvGeometry.of(inst)
    lhs, rhs = inst.operands
    labels = cv.labels
    groups = cv.fgc * cv.bgc
    types = {s.element_type for s in (lhs.shape, rhs.shape, inst.shape)}
    lane_dim = labels.lhs_feature if cv.bgc == 1 else labels.lhs_batch
    if groups == 1 or cv.og != 1 or len(types) != 1 or types - {"f32", "f64"} or \
            (cv.cg if cv.bgc == 1 else cv.batch) != 1 or \
            not all(_innermost(dims, d) for dims, d in (
                (cv.ld, lane_dim), (cv.rd, labels.rhs_output_feature),
                (cv.od, labels.out_feature))):
        return None
    return Channelwise(inst.shape.num_elements // groups,
                       math.prod(cv.taps) * (cv.ld[labels.lhs_feature] if cv.bgc > 1 else 1),
                       groups)


def _innermost(dims, d) -> bool:
    """Whether dimension d has unit stride in a row-major array."""
    return math.prod(dims[d + 1:]) == 1


def _emit_channelwise(kb, inst, cw: Channelwise, out, lo, hi) -> None:
    """Per output position: its row of groups zeroed, then per K step whose input position
    is on the input, row += input row * kernel row (the operands' values through the
    elemental generator, so fused producers are computed inline)."""
    b = kb.b
    gen = kb.elemental()
    cv = ConvGeometry.of(inst)
    lhs, rhs = inst.operands
    labels = cv.labels
    et = out.et
    # input features outermost: with batch groups they are the input's batch, its major
    # dimension, so consecutive steps read neighbouring rows
    k_dims = [cw.k // max(math.prod(cv.taps), 1)] + cv.taps
    with for_range(b, lo, hi, "cwpos", vectorize=False) as p:
        pos_out = delinearize(b, p, [cv.batch] + cv.out_sp)
        oc = [0] * len(cv.od)
        oc[labels.out_batch] = pos_out[0]
        for d in range(cv.rank):
            oc[labels.out_spatial[d]] = pos_out[1 + d]
        row = b.gep(out.ptr, [_v(linearize(b, oc, cv.od))], inbounds=True,
                    source_etype=et.storage)
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
            lane_dim = labels.lhs_feature if cv.bgc == 1 else labels.lhs_batch
            with b.if_then(ok):
                with for_range(b, 0, cw.groups, "cwg") as g:
                    gen.push_scope()
                    lc[lane_dim] = g
                    rc[labels.rhs_output_feature] = g
                    x = gen.value(lhs, Index(cv.ld, values=list(lc)))
                    w = gen.value(rhs, Index(cv.rd, values=list(rc)))
                    ptr = b.gep(row, [g], inbounds=True, source_etype=et.storage)
                    b.store(call(b, "llvm.fma", [x, w, b.load(ptr, typ=et.compute)]), ptr)
                    gen.pop_scope()


register_gemm("convolution", conv_gemm)
_gemm_emit, _gemm_plan = PHASES["convolution"]


def _plan(inst):
    cw = channelwise(inst)
    if cw:
        return cw.positions, cw.work(), 0
    gemms = conv_gemms(inst)
    if len(gemms) == 1:
        return _gemm_plan(inst)
    return (sum(g.tasks() for g in gemms), sum(g.work() for g in gemms),
            max(g.scratch() for g in gemms))


def _emit(kb, inst, dests, lo, hi):
    """Tasks [lo, hi) of the convolution: of its GEMMs' tasks, one after another."""
    cw = channelwise(inst)
    gemms = [] if cw else conv_gemms(inst)
    if cw:
        _emit_channelwise(kb, inst, cw, dests[0], lo, hi)
    elif len(gemms) == 1:
        _gemm_emit(kb, inst, dests, lo, hi)
    else:
        first = 0
        for g in gemms:
            n = g.tasks()
            emit_gemm(kb, g, dests[0], clamp(kb.b, sub(kb.b, lo, first), 0, n),
                      clamp(kb.b, sub(kb.b, hi, first), 0, n))
            first += n


register_phase("convolution", _emit, _plan)
