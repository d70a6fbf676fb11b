"""dot (and, through emit_conv.py, convolution) as a packed, register-blocked GEMM.

Every contraction is C[b, m, n] = sum_k A[b, m, k] * B[b, k, n] with element accessors for A
and B, so general dimension numbers, batch dimensions, fused transposes/converts and the
implicit im2col of a convolution all reduce to index arithmetic inside packing.

Loop structure (BLIS-style; sizes in targets/cpu_facts.py): the output is cut into tasks of
MC x NC (times batch), which threads split. A task walks K in blocks of KC; per block it packs
A into MR-row panels and B into NR-column panels (zero-padded, converted to the accumulation
type), then runs the micro-kernel for each MR x NR tile of C: MR x NR/W vector accumulators
in registers, one broadcast of A and NR/W vector loads of B per k, fused multiply-adds.
Accumulation is in f32 for f32/bf16/f16 (rounded once at the end) and f64 for f64.
Integer, pred and complex contractions, tiny ones and matrix-vector products use a plain
loop per output element instead.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from llvmlite import ir

from ..dot_dims import dot_dims
from ..dtypes import accumulation_type
from ..targets import cpu_facts
from .convert import convert
from .elemental import Elemental
from .emit_kernel import register as register_phase
from . import jit
from .emit_loops import Index, delinearize, for_range, placed
from .intrinsics import call, declare
from .ltypes import I1, I64, PTR, VOID, ElemType, elem, load, opaque, store

@dataclass
class Gemm:
    """C[b, m, n] = sum_k A[b, m, k] * B[b, k, n]; accessors return operand values."""
    batch: int
    m: int
    n: int
    k: int
    a_type: ElemType
    b_type: ElemType
    a_value: Callable            # (gen, b, m, k) -> value of a_type
    b_value: Callable            # (gen, b, k, n) -> value of b_type
    c_row: Callable              # (builder, b, m) -> linear index of C[b, m, 0]
    c_stride: int                # elements from C[b, m, n] to C[b, m, n + 1]
    out_type: ElemType
    c_ld: int | None = None      # elements from C[b, m, 0] to C[b, m + 1, 0] if uniform
                                 # (and c_stride == 1): tiles are written in place

    @property
    def acc(self) -> ElemType:
        """The interpreter's accumulation type (dtypes.accumulation_type)."""
        return elem(accumulation_type(self.a_type.dtype, self.b_type.dtype,
                                      self.out_type.dtype).name)

    def packed(self) -> bool:
        return self.acc.name in ("f32", "f64") and self.k > 0 and self.n > 1 and \
            self.m * self.n * self.k >= 4096

    def blocks(self):
        lanes = cpu_facts.PREFERRED_VECTOR_BITS // self.acc.bits
        mr, nr = cpu_facts.GEMM_MR, cpu_facts.GEMM_NR_VECTORS * lanes
        mc = min(cpu_facts.GEMM_MC, -(-self.m // mr) * mr)
        nc = min(cpu_facts.GEMM_NC, -(-self.n // nr) * nr)
        kc = self.k if self.acc.name != self.out_type.name else min(cpu_facts.GEMM_KC, self.k)
        return mr, nr, lanes, mc, nc, kc

    def tasks(self) -> int:
        if not self.packed():
            return self.batch * self.m * self.n
        _, _, _, mc, nc, _ = self.blocks()
        rows = -(-self.m // mc) if self.split_rows() else 1
        return self.batch * rows * -(-self.n // nc)

    def split_rows(self) -> bool:
        """Whether tasks also split the rows: only for a kernel that will run on threads
        and has fewer (batch, column block) tasks than threads to go round."""
        _, _, _, mc, nc, _ = self.blocks()
        threads = cpu_facts.threads()
        return self.work() >= cpu_facts.PARALLEL_MIN_WORK and threads > 1 and \
            self.batch * -(-self.n // nc) < 2 * threads

    def scratch(self) -> int:
        if not self.packed():
            return 0
        mr, nr, _, mc, nc, kc = self.blocks()
        return (mc * kc + nc * kc) * self.acc.nbytes + 128

    def work(self) -> float:
        """Estimated element-operations (what decides threading): the flops, and for a
        packed GEMM one per element packed, A once per column block and B once. Packing is
        a gathering loop (index arithmetic per element, more for a convolution's implicit
        im2col): with few output columns, as in a convolution of one input channel, it costs
        more than the micro-kernel's vector FMAs."""
        flops = 2.0 * self.batch * self.m * self.n * max(self.k, 1)
        if not self.packed():
            return flops / 4
        nc = self.blocks()[4]
        packing = self.batch * self.k * (self.m * -(-self.n // nc) + self.n)
        return flops / cpu_facts.GEMM_FLOPS_PER_WORK + packing


def emit_gemm(kb, g: Gemm, out, lo, hi) -> None:
    if g.packed():
        _emit_packed(kb, g, out, lo, hi)
    else:
        _emit_simple(kb, g, out, lo, hi)


# ------------------------------------------------------------------ plain loop per output

def multiply_add(b, acc, x, y, t: ElemType):
    if t.kind == "complex":
        re = b.fsub(b.fmul(x[0], y[0]), b.fmul(x[1], y[1]))
        im = b.fadd(b.fmul(x[0], y[1]), b.fmul(x[1], y[0]))
        return (b.fadd(acc[0], re), b.fadd(acc[1], im))
    if t.kind == "float":
        s = b.fadd(acc, b.fmul(x, y))
        s.flags.append("reassoc")
        return s
    if t.kind == "pred":
        return b.or_(acc, b.and_(x, y))
    return b.add(acc, b.mul(x, y))


def zero_of(t: ElemType):
    if t.kind == "complex":
        return (t.compute(0.0), t.compute(0.0))
    return t.compute(0.0) if t.kind == "float" else t.compute(0)


def _emit_simple(kb, g: Gemm, out, lo, hi) -> None:
    b = kb.b
    gen = kb.elemental()
    acc_t = g.acc
    slot = gen.alloca(ir.LiteralStructType([acc_t.compute] * 2) if acc_t.kind == "complex"
                      else acc_t.compute)
    with for_range(b, lo, hi, "o", vectorize=False) as t:
        gen.push_scope()
        n = b.urem(t, I64(g.n))
        rest = b.udiv(t, I64(g.n))
        m, bi = b.urem(rest, I64(g.m)), b.udiv(rest, I64(g.m))
        _put(b, slot, zero_of(acc_t))
        with for_range(b, 0, g.k, "k") as k:
            gen.push_scope()
            x = convert(b, g.a_value(gen, bi, m, k), g.a_type, acc_t)
            y = convert(b, g.b_value(gen, bi, k, n), g.b_type, acc_t)
            _put(b, slot, multiply_add(b, _get(b, slot, acc_t), x, y, acc_t))
            gen.pop_scope()
        value = convert(b, _get(b, slot, acc_t), acc_t, g.out_type)
        index = b.add(g.c_row(b, bi, m), b.mul(n, I64(g.c_stride)))
        store(b, value, out.ptr, out.et, index)
        gen.pop_scope()


def _put(b, slot, v):
    if isinstance(v, tuple):
        for i, part in enumerate(v):
            b.store(part, b.gep(slot, [I64(0), ir.IntType(32)(i)], inbounds=True))
    else:
        b.store(v, slot)


def _get(b, slot, t: ElemType):
    if t.kind == "complex":
        return tuple(b.load(b.gep(slot, [I64(0), ir.IntType(32)(i)], inbounds=True),
                            typ=t.compute) for i in range(2))
    return b.load(slot, typ=t.compute)


# ------------------------------------------------------------------------ packed GEMM

def _splat(b, x, lanes: int):
    vt = ir.VectorType(x.type, lanes)
    v = b.insert_element(ir.Constant(vt, ir.Undefined), x, ir.IntType(32)(0))
    return b.shuffle_vector(v, ir.Constant(vt, ir.Undefined),
                            ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes))


def _min(b, x, y):
    return b.select(b.icmp_signed("<", x, y), x, y)


def _emit_packed(kb, g: Gemm, out, lo, hi) -> None:
    """Tasks are (batch, column block[, row block]): a task packs its B block once per K
    block and reuses it for all its rows of A (row blocks split tasks only when a kernel
    worth threading has too few column blocks to share)."""
    b = kb.b
    gen = kb.elemental()
    mr, nr, lanes, mc, nc, kc = g.blocks()
    acc = g.acc
    n_mb, n_nb, n_kb = -(-g.m // mc), -(-g.n // nc), -(-g.k // kc)
    m_tasks = n_mb if g.split_rows() else 1
    per_thread = g.scratch()
    base = b.gep(kb.scratch, [b.mul(kb.slot, I64(per_thread))], inbounds=True,
                 source_etype=ir.IntType(8))
    a_pack = base
    b_pack = b.gep(base, [I64(mc * kc)], inbounds=True, source_etype=acc.compute)
    with for_range(b, lo, hi, "task", vectorize=False) as t:
        mt = b.urem(t, I64(m_tasks))
        rest = b.udiv(t, I64(m_tasks))
        nb, bi = b.urem(rest, I64(n_nb)), b.udiv(rest, I64(n_nb))
        n0 = b.mul(nb, I64(nc))
        ncur = _min(b, I64(nc), b.sub(I64(g.n), n0))
        n_panels = b.udiv(b.add(ncur, I64(nr - 1)), I64(nr))
        mb_lo = mt if m_tasks > 1 else I64(0)
        mb_hi = b.add(mt, I64(1)) if m_tasks > 1 else I64(n_mb)
        with for_range(b, 0, n_kb, "kb", vectorize=False) as q:
            p0 = b.mul(q, I64(kc))
            kcur = _min(b, I64(kc), b.sub(I64(g.k), p0))
            first = I1(1) if n_kb == 1 else b.icmp_signed("==", q, I64(0))
            _pack(gen, g.b_value, g.b_type, acc, b_pack, bi, n0, ncur, p0, kcur, nr, rows_first=False)
            with for_range(b, mb_lo, mb_hi, "mb", vectorize=False) as mb:
                m0 = b.mul(mb, I64(mc))
                mcur = _min(b, I64(mc), b.sub(I64(g.m), m0))
                _pack(gen, g.a_value, g.a_type, acc, a_pack, bi, m0, mcur, p0, kcur, mr,
                      rows_first=True)
                m_panels = b.udiv(b.add(mcur, I64(mr - 1)), I64(mr))
                with for_range(b, 0, n_panels, "jp", vectorize=False) as jp:
                    with for_range(b, 0, m_panels, "ip", vectorize=False) as ip:
                        ap = b.gep(a_pack, [b.mul(ip, b.mul(kcur, I64(mr)))], inbounds=True,
                                   source_etype=acc.compute)
                        bp = b.gep(b_pack, [b.mul(jp, b.mul(kcur, I64(nr)))], inbounds=True,
                                   source_etype=acc.compute)
                        rows = _min(b, I64(mr), b.sub(mcur, b.mul(ip, I64(mr))))
                        cols = _min(b, I64(nr), b.sub(ncur, b.mul(jp, I64(nr))))
                        _micro(kb, g, out, ap, bp, kcur, bi, b.add(m0, b.mul(ip, I64(mr))),
                               b.add(n0, b.mul(jp, I64(nr))), rows, cols, first)


def _pack(gen: Elemental, value, vtype, acc, dst, bi, start, count, p0, kcur, width, rows_first):
    """Copy a count x kcur block (rows of A, or columns of B) into panels of `width`:
    dst[(panel*kcur + p)*width + j], converted to the accumulation type, zero-padded."""
    b = gen.b
    panels = b.udiv(b.add(count, I64(width - 1)), I64(width))
    with for_range(b, 0, panels, "pk", vectorize=False) as panel:
        valid = _min(b, I64(width), b.sub(count, b.mul(panel, I64(width))))
        with for_range(b, 0, kcur, "pp", vectorize=False) as p:
            row = b.mul(b.add(b.mul(panel, kcur), p), I64(width))
            with for_range(b, 0, valid, "pj") as j:
                gen.push_scope()
                idx = b.add(start, b.add(b.mul(panel, I64(width)), j))
                k = b.add(p0, p)
                v = value(gen, bi, idx, k) if rows_first else value(gen, bi, k, idx)
                b.store(convert(b, v, vtype, acc),
                        b.gep(dst, [b.add(row, j)], inbounds=True, source_etype=acc.compute))
                gen.pop_scope()
            with for_range(b, valid, width, "pz") as j:
                b.store(acc.compute(0.0), b.gep(dst, [b.add(row, j)], inbounds=True,
                                                source_etype=acc.compute))


def _micro(kb, g: Gemm, out, ap, bp, kcur, bi, m0, n0, rows, cols, first) -> None:
    """One MR x NR tile of C: the shared micro-kernel writes it straight into C when C has
    the accumulation type and uniform rows, else into a stack tile that is then converted
    (and scattered, for a strided C) element by element."""
    b = kb.b
    mr, nr, _, _, _, _ = g.blocks()
    fn = declare(b.module, micro_kernel(g.acc), VOID, [PTR, PTR, I64, PTR, I64, I64, I64, I1])
    if g.acc.name == g.out_type.name and g.c_ld is not None:
        c = b.gep(out.ptr, [b.add(g.c_row(b, bi, m0), n0)], inbounds=True,
                  source_etype=out.et.storage)
        b.call(fn, [ap, bp, kcur, c, I64(g.c_ld), rows, cols, first])
        return
    gen = Elemental(b)
    tile = opaque(b, gen.alloca(ir.ArrayType(g.acc.compute, mr * nr)))
    b.call(fn, [ap, bp, kcur, tile, I64(nr), I64(mr), I64(nr), I1(1)])
    with for_range(b, 0, rows, "ti", vectorize=False) as i:
        row_base = g.c_row(b, bi, b.add(m0, i))
        with for_range(b, 0, cols, "tj") as j:
            x = b.load(b.gep(tile, [b.add(b.mul(i, I64(nr)), j)], inbounds=True,
                             source_etype=g.acc.compute), typ=g.acc.compute)
            index = b.add(row_base, b.mul(b.add(n0, j), I64(g.c_stride)))
            if g.acc.name == g.out_type.name:
                x = b.select(first, x, b.fadd(load(b, out.ptr, out.et, index), x))
            store(b, convert(b, x, g.acc, g.out_type), out.ptr, out.et, index)


def micro_kernel(acc: ElemType) -> str:
    """The register-blocked MR x NR micro-kernel for one accumulation type, compiled once
    per process and shared by every GEMM (its name; the JIT resolves it across modules):

        gemm_micro_T(ptr a_panel, ptr b_panel, i64 kc, ptr c, i64 ldc, i64 rows, i64 cols, i1 first)

    C[i, j] (= or +=, per `first`) sum_p A[p*MR + i] * B[p*NR + j] for i < rows, j < cols:
    MR x NR/W vector accumulators, per p one broadcast of A per row and NR/W vector loads of
    B, fused multiply-adds; full tiles store whole vectors."""
    lanes = cpu_facts.PREFERRED_VECTOR_BITS // acc.bits
    mr, nr = cpu_facts.GEMM_MR, cpu_facts.GEMM_NR_VECTORS * lanes
    name = f"gemm_micro_{acc.name}_{mr}x{nr}"
    mod = jit.new_module(name)
    fn = ir.Function(mod, ir.FunctionType(VOID, [PTR, PTR, I64, PTR, I64, I64, I64, I1]), name)
    jit.tune(fn)
    for a in fn.args[:2] + fn.args[3:4]:
        a.add_attribute("noalias")
    ap, bp, kc, c, ldc, rows, cols, first = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    gen = Elemental(b)
    t = acc.compute
    vt = ir.VectorType(t, lanes)
    nv = nr // lanes
    accs = [[gen.alloca(vt) for _ in range(nv)] for _ in range(mr)]
    for row in accs:
        for slot in row:
            b.store(ir.Constant(vt, None), slot)
    with for_range(b, 0, kc, "p", vectorize=False) as p:
        bvs = [b.load(b.gep(bp, [b.add(b.mul(p, I64(nr)), I64(v * lanes))], inbounds=True,
                            source_etype=t), typ=vt, align=acc.nbytes) for v in range(nv)]
        for i in range(mr):
            a = b.load(b.gep(ap, [b.add(b.mul(p, I64(mr)), I64(i))], inbounds=True,
                             source_etype=t), typ=t)
            av = _splat(b, a, lanes)
            for v in range(nv):
                b.store(call(b, "llvm.fma", [av, bvs[v], b.load(accs[i][v], typ=vt)]), accs[i][v])
    full = b.and_(b.icmp_signed("==", rows, I64(mr)), b.icmp_signed("==", cols, I64(nr)))
    with b.if_else(full) as (whole, partial):
        with whole:
            for i, row in enumerate(accs):
                for v, slot in enumerate(row):
                    ptr = b.gep(c, [b.add(b.mul(ldc, I64(i)), I64(v * lanes))], inbounds=True,
                                source_etype=t)
                    x = b.load(slot, typ=vt)
                    old = b.load(ptr, typ=vt, align=acc.nbytes)
                    b.store(b.select(first, x, b.fadd(old, x)), ptr, align=acc.nbytes)
        with partial:
            tile = opaque(b, gen.alloca(ir.ArrayType(t, mr * nr)))
            for i, row in enumerate(accs):
                for v, slot in enumerate(row):
                    ptr = b.gep(tile, [I64(i * nr + v * lanes)], inbounds=True, source_etype=t)
                    b.store(b.load(slot, typ=vt), ptr, align=acc.nbytes)
            with for_range(b, 0, rows, "i", vectorize=False) as i:
                with for_range(b, 0, cols, "j") as j:
                    x = b.load(b.gep(tile, [b.add(b.mul(i, I64(nr)), j)], inbounds=True,
                                     source_etype=t), typ=t)
                    ptr = b.gep(c, [b.add(b.mul(ldc, i), j)], inbounds=True, source_etype=t)
                    old = b.load(ptr, typ=t)
                    b.store(b.select(first, x, b.fadd(old, x)), ptr)
    b.ret_void()
    jit.library(str(mod), [name])
    return name


# ------------------------------------------------------------------------------- dot

def dot_gemm(inst) -> Gemm:
    lhs, rhs = inst.operands
    (lb, lc, lf), (rb, rc, rf) = dot_dims(inst.attrs, lhs.shape.rank, rhs.shape.rank)
    ld, rd = lhs.shape.dims, rhs.shape.dims
    batch = math.prod(ld[d] for d in lb)
    m, n, k = math.prod(ld[d] for d in lf), math.prod(rd[d] for d in rf), math.prod(ld[d] for d in lc)

    def reader(operand, bdims, fdims, cdims, free_first: bool):
        dims = operand.shape.dims

        def value(gen, bi, first, second):
            bld = gen.b
            f, c = (first, second) if free_first else (second, first)
            xs = placed(len(dims), *((group, delinearize(bld, v, [dims[d] for d in group]))
                                     for group, v in ((bdims, bi), (fdims, f), (cdims, c))))
            return gen.value(operand, Index(dims, values=xs))
        return value

    return Gemm(batch, m, n, k, elem(lhs.shape.element_type), elem(rhs.shape.element_type),
                reader(lhs, lb, lf, lc, True), reader(rhs, rb, rf, rc, False),
                lambda bld, bi, mi: bld.mul(bld.add(bld.mul(bi, I64(m)), mi), I64(n)), 1,
                elem(inst.shape.element_type), c_ld=n)


def register_gemm(opcode: str, to_gemm: Callable) -> None:
    """Lower `opcode` as the GEMM `to_gemm(inst)` describes."""
    def plan(inst):
        g = to_gemm(inst)
        return g.tasks(), g.work(), g.scratch()

    def emit(kb, inst, dests, lo, hi):
        emit_gemm(kb, to_gemm(inst), dests[0], lo, hi)

    register_phase(opcode, emit, plan)


register_gemm("dot", dot_gemm)
