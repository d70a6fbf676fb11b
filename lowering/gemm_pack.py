"""Packing a dot operand that the kernel reads from memory with vector loads.

Element by element (emit_dot._pack), packing costs index arithmetic and a scalar load,
convert and store per element: 1-2 ns, as much as the micro-kernel's multiply-adds that
element feeds in a GEMM with few rows, and a transposed operand (K contiguous, the usual
weight-gradient and `x @ W^T` shapes) packed slowest. When the operand is one of the
kernel's input buffers and its free dimensions, like its contracting ones, collapse into one
evenly strided dimension each, every panel row is a strided run (`Strided`): packing loads
vectors along the panel's width where they are contiguous (or gathers them), and where K is
contiguous instead loads lanes x lanes blocks along K and transposes them in registers
(vector_ops.transpose). Masked loads give the zero padding of partial panels. A reshape
of an input buffer (a scan's slice squeezed) reads that buffer. The packing loops are
shared functions the kernels call (`pack_function`), not code of each kernel.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from llvmlite import ir

from ..targets import cpu_facts
from . import jit
from .emit_loops import delinearize, for_range
from .intrinsics import declare
from .ltypes import I1, I64, PTR, VOID, ElemType
from .vector_ops import flush_denormal, iota, load_run, masked_store, splat, transpose


@dataclass(frozen=True)
class Strided:
    """Where element (batch b, free f, contracting k) of a row-major operand lies:
    base(b) + f*free + k*contracting (elements)."""
    operand: object               # the Instruction read
    batch_dims: tuple             # its batch dimensions, outermost first
    free: int
    contracting: int

    @classmethod
    def of(cls, operand, bdims, fdims, cdims) -> "Strided | None":
        """The operand's layout as the GEMM sees it, or None where a group of its free or
        contracting dimensions is not one evenly strided run (a fused transpose of them)."""
        dims = operand.shape.dims
        strides = [math.prod(dims[d + 1:]) for d in range(len(dims))]
        free, contracting = _stride(dims, strides, fdims), _stride(dims, strides, cdims)
        if free is None or contracting is None:
            return None
        return cls(operand, tuple(bdims), free, contracting)

    def base(self, b, bi):
        dims = self.operand.shape.dims
        coords = delinearize(b, bi, [dims[d] for d in self.batch_dims])
        at = I64(0)
        for d, c in zip(self.batch_dims, coords):
            at = b.add(at, b.mul(I64(c) if isinstance(c, int) else c,
                                 I64(math.prod(dims[d + 1:]))))
        return at


def _stride(dims, strides, group) -> int | None:
    """The stride of the group's linear index, if its non-unit dims are one row-major run."""
    run = [d for d in group if dims[d] != 1]
    for outer, inner in zip(run, run[1:]):
        if strides[outer] != strides[inner] * dims[inner]:
            return None
    return strides[run[-1]] if run else 0


def strided_packer(layout: Strided | None, acc: ElemType):
    """emit_dot's packer hook for an operand with this layout: (gen) -> pack(bi, start,
    count, p0, kcur, dst, width), or None where packing goes element by element (the
    operand is computed in the kernel, or stored in a type that is not widened to `acc`).
    The packing itself is a shared function (`pack_function`) the kernel calls."""
    def packer(gen):
        source = _stored(gen, layout.operand) if layout else None
        if source is None or source.et.name not in ("f32", "f64", "bf16", "f16") or \
                source.et.compute != acc.compute:
            return None

        def pack(bi, start, count, p0, kcur, dst, width):
            b = gen.b
            fn = declare(b.module, pack_function(source.et, acc, width, _order(layout)),
                         VOID, PACK_ARGS)
            base = b.add(layout.base(b, bi), b.mul(p0, I64(layout.contracting)))
            base = b.add(base, b.mul(start, I64(layout.free)))
            b.call(fn, [source.ptr, base, count, kcur, dst, I64(layout.free),
                        I64(layout.contracting)])
        return pack
    return packer


def _stored(gen, operand):
    """The buffer holding `operand` in row-major order: its own, or that of the array it
    reshapes (the same elements in the same order)."""
    while id(operand) not in gen.sources and operand.opcode == "reshape":
        operand = operand.operands[0]
    return gen.sources.get(id(operand))


@dataclass(frozen=True)
class _Buffer:
    """What load_run reads: the pack function's source pointer and its stored type."""
    ptr: object
    et: ElemType


# The orders packing reads an operand in, by its strides: K contiguous (loads along K,
# transposed in registers), the panel's rows contiguous, or neither (gathers).
TRANSPOSING, ALONG_ROWS, GATHERING = "t", "r", "g"

# pack(ptr source, i64 first, i64 count, i64 kcur, ptr dst, i64 free, i64 contracting)
PACK_ARGS = [PTR, I64, I64, I64, PTR, I64, I64]


def _order(layout: Strided) -> str:
    if layout.contracting == 1 and layout.free != 1:
        return TRANSPOSING
    return ALONG_ROWS if layout.free == 1 else GATHERING


@functools.lru_cache(maxsize=None)
def pack_function(stored: ElemType, acc: ElemType, width: int, order: str) -> str:
    """The packing function for one stored and accumulation type, panel width and read
    order, compiled once per process and shared by every GEMM that packs such an operand
    (its name; the JIT resolves it across modules, like emit_dot.micro_kernel): unrolled
    over the panel's width and the register transpose it is kilobytes of IR, which each
    kernel would otherwise carry and compile again (its IR is built once per process too).

        gemm_pack_*(ptr source, i64 first, i64 count, i64 kcur, ptr dst, i64 free, i64 contracting)

    packs `count` rows (element first + f*free + k*contracting of `source`, f < count,
    k < kcur) into panels of `width` rows (see _pack)."""
    lanes = cpu_facts.vector_isa() // acc.bits
    name = f"gemm_pack_{order}_{stored.name}_{acc.name}_{width}x{lanes}"
    mod = jit.new_module(name)
    fn = ir.Function(mod, ir.FunctionType(VOID, PACK_ARGS), name)
    jit.tune(fn)
    for a in (fn.args[0], fn.args[4]):
        a.add_attribute("noalias")
    ptr, first, count, kcur, dst, free, contracting = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    source = _Buffer(ptr, stored)
    _pack(b, source, order, free, contracting, acc, first, count, kcur, dst, width, lanes)
    b.ret_void()
    jit.library(str(mod), [name])
    return name


def _pack(b, source, order: str, free, contracting, acc: ElemType, base, count, kcur, dst,
          width: int, lanes: int) -> None:
    """Rows [0, count) (along the free dims, from element `base` on) and K [0, kcur) into
    panels of `width` rows, dst[(panel*kcur + p)*width + j] (emit_dot._pack's layout), zero
    past `count`. Reads follow the operand's contiguous direction: a panel at a time, K
    block by K block, where K is contiguous; else one K step across every panel at a time
    (a panel at a time would touch a new page per step)."""
    panels = b.udiv(b.add(count, I64(width - 1)), I64(width))

    def panel_at(panel):
        first = b.mul(panel, I64(width))
        return (b.add(base, b.mul(first, free)), b.sub(count, first),
                b.gep(dst, [b.mul(first, kcur)], inbounds=True, source_etype=acc.compute))

    if order == TRANSPOSING:
        with for_range(b, 0, panels, "gpanel", vectorize=False) as panel:
            _pack_transposing(b, source, free, acc, *panel_at(panel), kcur, width, lanes)
        return
    step = 1 if order == ALONG_ROWS else free
    with for_range(b, 0, kcur, "gp", vectorize=False) as p:
        with for_range(b, 0, panels, "gpanel", vectorize=False) as panel:
            at, rows, out = panel_at(panel)
            row = b.add(at, b.mul(p, contracting))
            for g in range(0, width, lanes):
                lane = b.add(splat(b, I64(g), lanes), iota(lanes))
                mask = b.icmp_signed("<", lane, splat(b, rows, lanes))
                v = flush_denormal(b, load_run(b, source, row, I64(g), lane, step, mask, lanes))
                _store(b, v, _at(b, out, acc, b.add(b.mul(p, I64(width)), I64(g))),
                       width - g, None, acc)


def _pack_transposing(b, source, free, acc, at, rows, out, kcur, width, lanes) -> None:
    """One panel with K contiguous: per `lanes` steps of K, a lanes x lanes block of rows
    (each a vector along K) transposed in registers into `lanes` vectors of one K step each."""
    chunks = b.udiv(b.add(kcur, I64(lanes - 1)), I64(lanes))
    with for_range(b, 0, chunks, "gq", vectorize=False) as q:
        c0 = b.mul(q, I64(lanes))
        lane = b.add(splat(b, c0, lanes), iota(lanes))
        in_k = b.icmp_signed("<", lane, splat(b, kcur, lanes))
        left = b.sub(kcur, c0)                       # K steps of this chunk in the block
        for g in range(0, width, lanes):
            vecs = []
            for r in range(lanes):
                if g + r >= width:
                    vecs.append(ir.Constant(ir.VectorType(acc.compute, lanes), None))
                    continue
                on = b.and_(in_k, splat(b, b.icmp_signed("<", I64(g + r), rows), lanes))
                row = b.add(at, b.mul(I64(g + r), free))
                vecs.append(flush_denormal(b, load_run(b, source, row, c0, lane, 1, on, lanes)))
            for c, v in enumerate(transpose(b, vecs)):
                step = b.add(c0, I64(c))
                _store(b, v, _at(b, out, acc, b.add(b.mul(step, I64(width)), I64(g))),
                       width - g, b.icmp_signed("<", I64(c), left), acc)


def _at(b, out, acc, offset):
    return b.gep(out, [offset], inbounds=True, source_etype=acc.compute)


def _store(b, v, ptr, room: int, keep, acc: ElemType) -> None:
    """Store the vector's first `room` lanes (all if it has no more), only if `keep` (None:
    always)."""
    lanes = v.type.count
    if room >= lanes and keep is None:
        b.store(v, ptr, align=acc.nbytes)
        return
    mask = ir.Constant(ir.VectorType(I1, lanes), [j < room for j in range(lanes)])
    if keep is not None:
        mask = b.and_(mask, splat(b, keep, lanes))
    masked_store(b, v, ptr, mask)

