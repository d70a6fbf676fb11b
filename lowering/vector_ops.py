"""Vector building blocks shared by the GEMM's packing code (emit_dot.py, gemm_pack.py,
conv_pack.py): broadcasts, masked loads, gathers and stores, a register transpose, and the
denormal flush that packing applies to every operand value."""
from __future__ import annotations

from llvmlite import ir

from .intrinsics import call, declare
from .ltypes import I32, I64, PTR, VOID


def splat(b, x, lanes: int):
    vt = ir.VectorType(x.type, lanes)
    v = b.insert_element(ir.Constant(vt, ir.Undefined), x, ir.IntType(32)(0))
    return b.shuffle_vector(v, ir.Constant(vt, ir.Undefined),
                            ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes))


def iota(lanes: int):
    """The vector 0, 1, ..., lanes - 1 (i64)."""
    return ir.Constant(ir.VectorType(I64, lanes), list(range(lanes)))


def flush_denormal(b, x):
    """x (a float or a vector of floats) with denormals read as zero: what packing stores.
    The micro-kernel's fused multiply-adds then never see a denormal operand, which Intel
    cores handle in microcode at ~100 cycles each (a softmax gradient whose exp underflowed
    can be 10% denormals: 20x slower GEMMs). A product with a denormal factor is below
    2^-126 (f32; 2^-1022 f64) times the other factor, so each sum changes by less than that
    times the sum of the other factors' magnitudes; only sums that are themselves of
    denormal scale change relatively (to 0 where all their products were denormal-scale)."""
    t = x.type.element if isinstance(x.type, ir.VectorType) else x.type
    tiny = t(2.0 ** (-126 if isinstance(t, ir.FloatType) else -1022))
    zero = t(0.0)
    if isinstance(x.type, ir.VectorType):
        tiny, zero = (ir.Constant(x.type, [c.constant] * x.type.count) for c in (tiny, zero))
    return b.select(b.fcmp_ordered("<", call(b, "llvm.fabs", [x]), tiny), zero, x)


def load_run(b, source, base, c0, lane, step, mask, lanes: int):
    """Elements c0 .. c0 + lanes - 1 of a run of `source` (element e at base + e*step) where
    `mask` is set, 0 elsewhere, widened to the compute type; lanes off the mask read
    nothing (their address may be off the array). `lane` is c0 + iota; `step` an int, or an
    i64 value (then not 1)."""
    et = source.et
    vt = ir.VectorType(et.storage, lanes)
    nbytes = et.nbytes
    if step == 1:
        ptr = b.gep(source.ptr, [b.add(base, c0)], source_etype=et.storage)
        fn = declare(b.module, f"llvm.masked.load.{vname(vt)}.p0", vt,
                     [PTR, I32, mask.type, vt])
        raw = b.call(fn, [ptr, I32(nbytes), mask, ir.Constant(vt, None)])
    else:
        apart = ir.Constant(lane.type, [step * nbytes] * lanes) if isinstance(step, int) \
            else splat(b, b.mul(step, I64(nbytes)), lanes)
        at = b.add(splat(b, b.add(b.ptrtoint(source.ptr, I64), b.mul(base, I64(nbytes))),
                         lanes), b.mul(lane, apart))
        pt = ir.VectorType(PTR, lanes)
        fn = declare(b.module, f"llvm.masked.gather.{vname(vt)}.v{lanes}p0", vt,
                     [pt, I32, mask.type, vt])
        raw = b.call(fn, [b.inttoptr(at, pt), I32(nbytes), mask, ir.Constant(vt, None)])
    wide = ir.VectorType(et.compute, lanes)
    if et.name == "bf16":            # the upper half of an f32 (ltypes.from_storage)
        return b.bitcast(b.shl(b.zext(raw, ir.VectorType(I32, lanes)),
                               ir.Constant(ir.VectorType(I32, lanes), [16] * lanes)), wide)
    return b.fpext(raw, wide) if et.name == "f16" else raw


def masked_store(b, value, ptr, mask):
    fn = declare(b.module, f"llvm.masked.store.{vname(value.type)}.p0", VOID,
                 [value.type, PTR, I32, mask.type])
    b.call(fn, [value, ptr, I32(nbytes_of(value.type.element)), mask])


def transpose(b, rows: list) -> list:
    """The transpose of a square block held as len(rows) vectors of as many lanes (a power
    of two): out[r][c] = rows[c][r]. One stage per bit of the index swaps that bit between
    row and lane, each output row a two-input shuffle of two rows: n log2 n shuffles."""
    n = len(rows)
    h = 1
    while h < n:
        nxt = []
        for r in range(n):
            # lane c takes lane (c with bit h of r) of the row (r with bit h of c)
            mask = [(c & ~h) | (r & h) | (n if c & h else 0) for c in range(n)]
            nxt.append(b.shuffle_vector(rows[r & ~h], rows[r | h],
                                        ir.Constant(ir.VectorType(I32, n), mask)))
        rows, h = nxt, 2 * h
    return rows


def nbytes_of(t) -> int:
    return 8 if isinstance(t, ir.DoubleType) else 4


def vname(vt) -> str:
    return f"v{vt.count}" + {"double": "f64", "float": "f32", "half": "f16"}.get(
        str(vt.element), str(vt.element))
