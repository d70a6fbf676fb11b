"""A convolution's geometry in GEMM terms, and its split into output phases.

Per group g (feature groups split the input features, batch groups the input batch; either
way group g owns the g-th block of output features): M = batch x output positions, N =
output features of the group, K = window taps x input features of the group (input feature
fastest). Where input positions come from: `position` (stride, window dilation, padding,
base dilation); which kernel tap and output position a (sub-)convolution's tap and output
position are: `kernel_tap`, `out_position`.
"""
from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

from ..attributes import Window
from .ltypes import I64


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
        t = b.add(I64(first), b.mul(v(j), I64(step)))
        if self.window.rhs_reversal[d]:
            t = b.sub(I64(self.rd[self.labels.rhs_spatial[d]] - 1), t)
        return t

    def out_position(self, b, d: int, q):
        phase, every = self.out_map[d]
        return b.add(I64(phase), b.mul(v(q), I64(every))) if every > 1 else q

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
            coords[self.labels.lhs_batch] = b.add(b.mul(g, I64(self.batch)), v(n))
        else:                          # feature groups: group g reads features g*cg + c
            coords[self.labels.lhs_batch] = n
            coords[self.labels.lhs_feature] = b.mul(g, I64(self.cg))
        return coords

    def position(self, b, d: int, out, tap):
        """(input position along spatial dim d, whether it is on the input): output
        position `out` under tap `tap`, through stride, window dilation, padding and base
        dilation (positions between dilated elements are off the input)."""
        w = self.window
        pos = b.sub(b.add(b.mul(v(out), I64(w.stride[d])), b.mul(v(tap), I64(w.rhs_dilate[d]))),
                    I64(w.pad[d][0]))
        good = b.icmp_signed(">=", pos, I64(0))
        base = w.lhs_dilate[d]
        if base > 1:
            good = b.and_(good, b.icmp_signed("==", b.srem(pos, I64(base)), I64(0)))
            pos = b.sdiv(pos, I64(base))
        return pos, b.and_(good, b.icmp_signed("<", pos, I64(self.in_sp[d])))


def v(x):
    """An i64 value of an int or a value."""
    return I64(x) if isinstance(x, int) else x

