"""dot (and, through emit_conv.py, convolution) as a packed, register-blocked GEMM.

Every contraction is C[b, m, n] = sum_k A[b, m, k] * B[b, k, n] with element accessors for A
and B, so general dimension numbers, batch dimensions, fused transposes/converts and the
implicit im2col of a convolution all reduce to index arithmetic inside packing.

Loop structure (BLIS-style; sizes in targets/cpu_facts.py): the output is cut into tasks of
(batch, column block, row part), which threads split (`Gemm.split`). A task walks K in
blocks of KC; per block it packs its block of B into NR-column panels once, then, MC rows at
a time, A into MR-row panels (zero-padded, converted to the accumulation type), and runs the
micro-kernel for each MR x NR tile of C: MR x NR/W vector accumulators in registers, one
broadcast of A and NR/W vector loads of B per k, fused multiply-adds. Accumulation is in f32
for f32/bf16/f16 and f64 for f64; partial sums over K blocks stay in C when C has that type.
Integer, pred and complex contractions, tiny ones and matrix-vector products use a plain
loop per output element instead. Packing reads denormal operands of both as zero
(`flush_denormal`), the packed GEMM's one departure from IEEE arithmetic with denormals.

Each element is finished once, when its final sum is written (`finish`): rounded to the
GEMM's type and, for a phase whose root is the GEMM's epilogue (phases.Phase.gemm: bias,
activation, convert, residual add), that root computed there by the elemental generator
with the GEMM's value bound, as oneDNN's post-ops do: one pass, no stored product.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
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
from .gemm_pack import Strided, strided_packer
from .intrinsics import call, declare
from .ltypes import I1, I32, I64, PTR, VOID, ElemType, elem, load, opaque, store
from .phases import epilogue_transposes
from .vector_ops import flush_denormal, splat as _splat

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
    c_index: Callable | None = None   # (builder, b, m, n) -> coordinates of C[b, m, n]
                                      # (else they come from its linear position)
    epilogue: tuple | None = None     # (the dot or convolution, the root of its epilogue)
    a_k_minor: bool = True            # whether A's elements are contiguous along K
    b_k_minor: bool = False           # and B's (packing reads along that direction)
    a_packer: Callable | None = None  # (gen) -> pack(b, m0, mcur, p0, kcur, dst, MR) writing
                                 # the A panels _pack would, faster; None: a_value
    b_packer: Callable | None = None  # (gen) -> pack(b, n0, ncur, p0, kcur, dst, NR): the
                                 # same for B's panels; None: b_value
    b_operand: object = None     # the instruction B reads (a dot's rhs): a kernel may get
                                 # its buffer already packed (KernelBuilder.packed)
    reads_destination: bool = False   # the epilogue reads an input whose buffer C is
                                      # (in_place.py, where K is one block:
                                      # finishes_each_once): each element is finished
                                      # before anything is stored over it

    @property
    def acc(self) -> ElemType:
        """The interpreter's accumulation type (dtypes.accumulation_type)."""
        return elem(accumulation_type(self.a_type.dtype, self.b_type.dtype,
                                      self.out_type.dtype).name)

    @property
    def store_type(self) -> ElemType:
        """The type of what is stored: the epilogue's root's, else the GEMM's own."""
        return elem(self.epilogue[1].shape.element_type) if self.epilogue else self.out_type

    def accumulates_in_place(self) -> bool:
        """Partial sums over K blocks are kept in the destination (it has the accumulation
        type); otherwise K is one block and each tile is final when first written."""
        return self.acc.name == self.store_type.name

    def packed(self) -> bool:
        return self.acc.name in ("f32", "f64") and self.k > 0 and self.n > 1 and \
            self.m * self.n * self.k >= 4096

    def blocks(self):
        """(MR, NR, lanes, MC, NC, KC): the micro-tile, the rows of A packed at once (at
        most a row part's), the columns of a column block (balanced: `split`) and the
        depth of a K block (balanced; deep enough that rewriting C per K block is cheap:
        cpu_facts.GEMM_L2_SHARE)."""
        mr, nr, lanes = cpu_facts.gemm_tile(self.acc.bits)
        col_blocks, row_parts = self.split()
        nc = _round_up(-(-self.n // col_blocks), nr)
        mc = min(max(cpu_facts.GEMM_MC // mr, 1) * mr, _round_up(-(-self.m // row_parts), mr))
        kc = self.k
        if self.accumulates_in_place():
            block = cpu_facts.GEMM_L2_SHARE * cpu_facts.cache_bytes(2)
            depth = max(8, int(block) // (cpu_facts.GEMM_NC * self.acc.nbytes) // 8 * 8)
            kc = _round_up(-(-self.k // -(-self.k // depth)), 8)
        return mr, nr, lanes, mc, nc, kc

    def split(self) -> tuple[int, int]:
        """(column blocks, row parts) the tasks cut C into. Column blocks are at most
        GEMM_NC wide; a kernel that runs on threads takes more of them when the batch times
        the blocks would not share evenly, so that each thread packs only its own columns of
        B, while blocks stay GEMM_MIN_SPLIT_COLS wide; else its rows are cut in as many
        parts as threads (each part packs its block of B once per K block)."""
        cols = -(-self.n // cpu_facts.GEMM_NC)
        threads = cpu_facts.threads()
        tasks = self.batch * cols
        if threads == 1 or self.work() < cpu_facts.PARALLEL_MIN_WORK or \
                tasks % threads == 0 or tasks >= 4 * threads:
            return cols, 1
        step = threads // math.gcd(self.batch, threads)
        wider = _round_up(cols, step)
        if self.n >= wider * cpu_facts.GEMM_MIN_SPLIT_COLS:
            return wider, 1
        return cols, min(threads, -(-self.m // cpu_facts.gemm_tile(self.acc.bits)[0]))

    def b_panel_count(self) -> int:
        """NR-column panels of B per batch."""
        return -(-self.n // cpu_facts.gemm_tile(self.acc.bits)[1])

    def grid(self) -> tuple[int, int, int]:
        """(column blocks, row parts, rows per part) of the tasks."""
        _, _, _, _, nc, _ = self.blocks()
        _, parts = self.split()
        rows = _round_up(-(-self.m // parts), cpu_facts.gemm_tile(self.acc.bits)[0])
        return -(-self.n // nc), -(-self.m // rows), rows

    def tasks(self) -> int:
        if not self.packed():
            return self.batch * self.m * self.n
        cols, parts, _ = self.grid()
        return self.batch * cols * parts

    def scratch(self) -> int:
        if not self.packed():
            return 0
        mr, nr, _, mc, nc, kc = self.blocks()
        return (mc * kc + nc * kc) * self.acc.nbytes + 128

    def work(self) -> float:
        """Estimated element-operations (what decides threading): the flops, and for a
        packed GEMM one per element packed, A once per GEMM_NC columns and B once. Packing is
        a gathering loop (index arithmetic per element, more for a convolution's implicit
        im2col): with few output columns, as in a convolution of one input channel, it costs
        more than the micro-kernel's vector FMAs."""
        flops = 2.0 * self.batch * self.m * self.n * max(self.k, 1)
        if not self.packed():
            return flops / 4
        cols = -(-self.n // cpu_facts.GEMM_NC)       # before `split`, which this decides
        packing = self.batch * self.k * (self.m * cols + self.n)
        return flops / cpu_facts.GEMM_FLOPS_PER_WORK + packing


def _round_up(x: int, step: int) -> int:
    return -(-x // step) * step


def emit_gemm(kb, g: Gemm, out, lo, hi, b_panels=None) -> None:
    """Tasks [lo, hi) of the GEMM into `out`; `b_panels`: a pointer to all of B already
    packed (`pack_b_panel`'s layout, for every panel of every batch), or None."""
    if g.packed():
        _emit_packed(kb, g, out, lo, hi, b_panels)
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
        index = b.add(g.c_row(b, bi, m), b.mul(n, I64(g.c_stride)))
        store(b, finish(gen, g, _get(b, slot, acc_t), bi, m, n, index), out.ptr, out.et, index)
        gen.pop_scope()


def finish(gen: Elemental, g: Gemm, x, bi, m, n, at):
    """The value stored for C[bi, m, n] (at linear position `at`) from its final sum `x`:
    rounded once to the GEMM's type and, with an epilogue, the epilogue's root computed
    there from it (the elemental generator, with the GEMM's value bound)."""
    b = gen.b
    v = convert(b, x, g.acc, g.out_type)
    if g.epilogue is None:
        return v
    op, root = g.epilogue
    gen.push_scope()
    gen.bindings[id(op)] = v
    coords = (lambda: g.c_index(b, bi, m, n)) if g.c_index else None
    y = gen.value(root, Index(root.shape.dims, linear=at, make_values=coords))
    del gen.bindings[id(op)]
    gen.pop_scope()
    return y


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

def _min(b, x, y):
    return b.select(b.icmp_signed("<", x, y), x, y)


def _emit_packed(kb, g: Gemm, out, lo, hi, b_panels) -> None:
    """Tasks are (batch, column block, row part) (`Gemm.split`): a task packs its block of
    B once per K block (unless `b_panels` holds B packed) and reuses it for all its rows of
    A, MC at a time."""
    b = kb.b
    gen = kb.elemental()
    mr, nr, lanes, mc, nc, kc = g.blocks()
    acc = g.acc
    n_nb, n_parts, part_rows = g.grid()
    n_kb = -(-g.k // kc)
    base = kb.workspace()
    a_pack = base
    b_pack = b.gep(base, [I64(mc * kc)], inbounds=True, source_etype=acc.compute)
    pack_a = g.a_packer(gen) if g.a_packer else None
    pack_b = g.b_packer(gen) if g.b_packer else None
    with for_range(b, lo, hi, "task", vectorize=False) as t:
        part = b.urem(t, I64(n_parts))
        rest = b.udiv(t, I64(n_parts))
        nb, bi = b.urem(rest, I64(n_nb)), b.udiv(rest, I64(n_nb))
        n0 = b.mul(nb, I64(nc))
        ncur = _min(b, I64(nc), b.sub(I64(g.n), n0))
        n_panels = b.udiv(b.add(ncur, I64(nr - 1)), I64(nr))
        row_lo = b.mul(part, I64(part_rows))
        row_hi = _min(b, b.add(row_lo, I64(part_rows)), I64(g.m))
        n_mb = b.udiv(b.add(b.sub(row_hi, row_lo), I64(mc - 1)), I64(mc))
        with for_range(b, 0, n_kb, "kb", vectorize=False) as q:
            p0 = b.mul(q, I64(kc))
            kcur = _min(b, I64(kc), b.sub(I64(g.k), p0))
            first = I1(1) if n_kb == 1 else b.icmp_signed("==", q, I64(0))
            last = None if n_kb == 1 else b.icmp_signed("==", q, I64(n_kb - 1))
            if b_panels is None:
                b_block, panel_step = b_pack, b.mul(kcur, I64(nr))
                _pack_b(gen, g, pack_b, b_pack, bi, n0, ncur, p0, kcur)
            else:                  # panels of the whole of K: this block starts p0 deep
                b_block = b.gep(b_panels, [b.mul(b.add(b.mul(b.add(
                    b.mul(bi, I64(g.b_panel_count())), b.udiv(n0, I64(nr))), I64(g.k)), p0),
                    I64(nr))], inbounds=True, source_etype=acc.compute)
                panel_step = I64(g.k * nr)
            with for_range(b, 0, n_mb, "mb", vectorize=False) as mb:
                m0 = b.add(row_lo, b.mul(mb, I64(mc)))
                mcur = _min(b, I64(mc), b.sub(row_hi, m0))
                if pack_a:
                    pack_a(bi, m0, mcur, p0, kcur, a_pack, mr)
                else:
                    _pack(gen, g.a_value, g.a_type, acc, a_pack, bi, m0, mcur, p0, kcur, mr,
                          rows_first=True, k_minor=g.a_k_minor)
                m_panels = b.udiv(b.add(mcur, I64(mr - 1)), I64(mr))
                with for_range(b, 0, n_panels, "jp", vectorize=False) as jp:
                    with for_range(b, 0, m_panels, "ip", vectorize=False) as ip:
                        ap = b.gep(a_pack, [b.mul(ip, b.mul(kcur, I64(mr)))], inbounds=True,
                                   source_etype=acc.compute)
                        bp = b.gep(b_block, [b.mul(jp, panel_step)], inbounds=True,
                                   source_etype=acc.compute)
                        rows = _min(b, I64(mr), b.sub(mcur, b.mul(ip, I64(mr))))
                        cols = _min(b, I64(nr), b.sub(ncur, b.mul(jp, I64(nr))))
                        _micro(gen, g, out, ap, bp, kcur, bi, b.add(m0, b.mul(ip, I64(mr))),
                               b.add(n0, b.mul(jp, I64(nr))), rows, cols, first, last)


def _pack_b(gen: Elemental, g: Gemm, pack_b, dst, bi, n0, ncur, p0, kcur) -> None:
    """Columns [n0, n0 + ncur) and K [p0, p0 + kcur) of B into NR-column panels at dst."""
    nr = g.blocks()[1]
    if pack_b:
        pack_b(bi, n0, ncur, p0, kcur, dst, nr)
    else:
        _pack(gen, g.b_value, g.b_type, g.acc, dst, bi, n0, ncur, p0, kcur, nr,
              rows_first=False, k_minor=g.b_k_minor)


def pack_b_panel(gen: Elemental, g: Gemm, task, dst) -> None:
    """Panel `task` of all of B (batch-major, then NR-column panels, each over the whole of
    K) into dst + task*K*NR: what a GEMM given `b_panels` reads, packed once for every call
    (loop_packing.py)."""
    b = gen.b
    nr, panels = g.blocks()[1], g.b_panel_count()
    n0 = b.mul(b.urem(task, I64(panels)), I64(nr))
    _pack_b(gen, g, g.b_packer(gen) if g.b_packer else None,
            b.gep(dst, [b.mul(task, I64(g.k * nr))], inbounds=True, source_etype=g.acc.compute),
            b.udiv(task, I64(panels)), n0, _min(b, I64(nr), b.sub(I64(g.n), n0)), I64(0),
            I64(g.k))


def _pack(gen: Elemental, value, vtype, acc, dst, bi, start, count, p0, kcur, width, rows_first,
          k_minor):
    """Copy a count x kcur block (rows of A, or columns of B) into panels of `width`:
    dst[(panel*kcur + p)*width + j], converted to the accumulation type, zero-padded. The
    loops follow the operand's contiguous direction (`k_minor`: along K, innermost; else
    along the block, one K row across every panel at a time), so reads stream through
    memory instead of striding a row apart per element."""
    b = gen.b
    panels = b.udiv(b.add(count, I64(width - 1)), I64(width))

    def valid(panel):
        return _min(b, I64(width), b.sub(count, b.mul(panel, I64(width))))

    def put(panel, p, j):
        gen.push_scope()
        idx = b.add(start, b.add(b.mul(panel, I64(width)), j))
        k = b.add(p0, p)
        v = value(gen, bi, idx, k) if rows_first else value(gen, bi, k, idx)
        b.store(flush_denormal(b, convert(b, v, vtype, acc)),
                _packed_at(b, dst, acc, kcur, width, panel, p, j))
        gen.pop_scope()

    if k_minor:
        with for_range(b, 0, panels, "pk", vectorize=False) as panel:
            with for_range(b, 0, valid(panel), "pj", vectorize=False) as j:
                with for_range(b, 0, kcur, "pp") as p:
                    put(panel, p, j)
    else:
        with for_range(b, 0, kcur, "pp", vectorize=False) as p:
            with for_range(b, 0, panels, "pk", vectorize=False) as panel:
                with for_range(b, 0, valid(panel), "pj") as j:
                    put(panel, p, j)
    last = b.sub(panels, I64(1))                     # only the last panel can be partial
    with b.if_then(b.icmp_signed(">", panels, I64(0))):
        with for_range(b, 0, kcur, "pz", vectorize=False) as p:
            with for_range(b, valid(last), width, "pzj") as j:
                b.store(acc.compute(0.0), _packed_at(b, dst, acc, kcur, width, last, p, j))


def _packed_at(b, dst, acc, kcur, width, panel, p, j):
    return b.gep(dst, [b.add(b.mul(b.add(b.mul(panel, kcur), p), I64(width)), j)],
                 inbounds=True, source_etype=acc.compute)


def _micro(gen: Elemental, g: Gemm, out, ap, bp, kcur, bi, m0, n0, rows, cols, first,
           last) -> None:
    """One MR x NR tile of C: the shared micro-kernel writes it straight into C when C has
    the accumulation type and uniform rows, else into a stack tile that is then added,
    converted and scattered element by element. On the last K block (`last`; None when
    there is one) every element is finished (`finish`: rounded, the epilogue applied)."""
    b = gen.b
    mr, nr, _, _, _, _ = g.blocks()
    fn = declare(b.module, micro_kernel(g.acc), VOID, [PTR, PTR, I64, PTR, I64, I64, I64, I1])
    if g.accumulates_in_place() and g.c_ld is not None and not g.reads_destination:
        c = b.gep(out.ptr, [b.add(g.c_row(b, bi, m0), n0)], inbounds=True,
                  source_etype=out.et.storage)
        b.call(fn, [ap, bp, kcur, c, I64(g.c_ld), rows, cols, first])
        if g.epilogue:                    # finish the final sums where they lie
            _when_last(b, last, lambda finishing: _write_tile(
                gen, g, out, bi, m0, n0, rows, cols, True,
                lambda i, j, at: load(b, out.ptr, out.et, at)) if finishing else None)
        return
    tile = opaque(b, gen.alloca(ir.ArrayType(g.acc.compute, mr * nr)))
    b.call(fn, [ap, bp, kcur, tile, I64(nr), I64(mr), I64(nr), I1(1)])

    def summed(i, j, at):
        x = b.load(b.gep(tile, [b.add(b.mul(i, I64(nr)), j)], inbounds=True,
                         source_etype=g.acc.compute), typ=g.acc.compute)
        if g.accumulates_in_place():
            x = b.select(first, x, b.fadd(load(b, out.ptr, out.et, at), x))
        return x
    _when_last(b, last, lambda finishing: _write_tile(gen, g, out, bi, m0, n0, rows, cols,
                                                      finishing, summed))


def _when_last(b, last, write) -> None:
    """write(True) on the last K block, write(False) on the others."""
    if last is None:
        write(True)
        return
    with b.if_else(last) as (final, partial):
        with final:
            write(True)
        with partial:
            write(False)


def _write_tile(gen: Elemental, g: Gemm, out, bi, m0, n0, rows, cols, finishing, value):
    """Store value(i, j, at) (an accumulation-type sum) for each element of a rows x cols
    tile of C at (m0, n0); finished (`finish`) when `finishing`."""
    b = gen.b
    with for_range(b, 0, rows, "ti", vectorize=False) as i:
        m = b.add(m0, i)
        row_base = g.c_row(b, bi, m)
        with for_range(b, 0, cols, "tj") as j:
            n = b.add(n0, j)
            at = b.add(row_base, b.mul(n, I64(g.c_stride)))
            x = value(i, j, at)
            store(b, finish(gen, g, x, bi, m, n, at) if finishing else x, out.ptr, out.et, at)


def micro_kernel(acc: ElemType) -> str:
    """The register-blocked MR x NR micro-kernel for one accumulation type, compiled once
    per process and shared by every GEMM (its name; the JIT resolves it across modules):

        gemm_micro_T(ptr a_panel, ptr b_panel, i64 kc, ptr c, i64 ldc, i64 rows, i64 cols, i1 first)

    C[i, j] (= or +=, per `first`) sum_p A[p*MR + i] * B[p*NR + j] for i < rows, j < cols:
    MR x NR/W vector accumulators, per p one broadcast of A per row and NR/W vector loads of
    B, fused multiply-adds, and a prefetch of B's row GEMM_PREFETCH_STEPS ahead (its
    micro-panel does not stay in L1: `_prefetch_b`); full tiles store whole vectors. The sum
    runs in chains of at most cpu_facts.GEMM_CHAIN steps, each added to C: one FMA chain
    over a deep K (768) made errors ~30% above BLAS's, whose K blocks are a few hundred
    deep, at ~1% of the time."""
    mr, nr, lanes = cpu_facts.gemm_tile(acc.bits)
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
    tile = opaque(b, gen.alloca(ir.ArrayType(t, mr * nr)))      # a partial tile's sums
    chain = I64(cpu_facts.GEMM_CHAIN)
    with for_range(b, 0, b.udiv(b.add(kc, I64(cpu_facts.GEMM_CHAIN - 1)), chain), "chain",
                   vectorize=False) as q:
        p0 = b.mul(q, chain)
        _chain(b, accs, tile, ap, bp, p0, _min(b, b.add(p0, chain), kc), c, ldc, rows, cols,
               b.and_(first, b.icmp_signed("==", q, I64(0))), acc)
    b.ret_void()
    jit.library(str(mod), [name])
    return name


def _chain(b, accs, tile, ap, bp, p_lo, p_hi, c, ldc, rows, cols, first, acc: ElemType
           ) -> None:
    """One chain of the micro-kernel: C[i, j] (= or +=, per `first`) sum over p in
    [p_lo, p_hi) of A[p*MR + i] * B[p*NR + j]."""
    mr, nr, lanes = cpu_facts.gemm_tile(acc.bits)
    t = acc.compute
    vt = ir.VectorType(t, lanes)
    nv = nr // lanes
    for row in accs:
        for slot in row:
            b.store(ir.Constant(vt, None), slot)
    with for_range(b, p_lo, p_hi, "p", vectorize=False) as p:
        _prefetch_b(b, bp, p, nr, acc)
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


def _prefetch_b(b, bp, p, nr: int, acc: ElemType) -> None:
    """Prefetch (into L1) the cache lines of the B panel's row cpu_facts.GEMM_PREFETCH_STEPS
    steps of K after p. Past the panel's end it names other memory of the workspace or none:
    a prefetch never faults."""
    prefetch = declare(b.module, "llvm.prefetch.p0", VOID, [PTR, I32, I32, I32])
    row = b.mul(b.add(p, I64(cpu_facts.GEMM_PREFETCH_STEPS)), I64(nr))
    per_line = 64 // acc.nbytes
    for j in range(0, nr, per_line):
        at = b.gep(bp, [b.add(row, I64(j))], source_etype=acc.compute)
        b.call(prefetch, [at, I32(0), I32(3), I32(1)])     # read, keep in L1, data


# ------------------------------------------------------------------------------- dot

def dot_gemm(inst, transposed: bool = False) -> Gemm:
    """The dot as a GEMM; `transposed` (a rank-2 dot without batch dimensions): its
    transpose, C^T = B^T A^T, with A and B trading places (phases.epilogue_transposes)."""
    lhs, rhs = inst.operands
    (lb, lc, lf), (rb, rc, rf) = dot_dims(inst.attrs, lhs.shape.rank, rhs.shape.rank)
    if transposed:
        lhs, rhs, (lb, lc, lf), (rb, rc, rf) = rhs, lhs, (rb, rc, rf), (lb, lc, lf)
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

    def c_index(bld, bi, mi, ni):
        """The output's dimensions are the batch, then lhs free, then rhs free ones."""
        return [x for v, dims in ((bi, [ld[d] for d in lb]), (mi, [ld[d] for d in lf]),
                                  (ni, [rd[d] for d in rf])) for x in delinearize(bld, v, dims)]

    acc = elem(accumulation_type(lhs.shape.dtype, rhs.shape.dtype, inst.shape.dtype).name)
    return Gemm(batch, m, n, k, elem(lhs.shape.element_type), elem(rhs.shape.element_type),
                reader(lhs, lb, lf, lc, True), reader(rhs, rb, rf, rc, False),
                lambda bld, bi, mi: bld.mul(bld.add(bld.mul(bi, I64(m)), mi), I64(n)), 1,
                elem(inst.shape.element_type), c_ld=n, c_index=c_index,
                a_k_minor=lhs.shape.rank - 1 in lc, b_k_minor=rhs.shape.rank - 1 in rc,
                a_packer=strided_packer(Strided.of(lhs, lb, lf, lc), acc),
                b_packer=strided_packer(Strided.of(rhs, rb, rf, rc), acc), b_operand=rhs)


def register_gemm(opcode: str, to_gemm: Callable) -> None:
    """Lower `opcode` as the GEMM `to_gemm(inst)` describes. A phase whose root is the
    epilogue of such a GEMM (phases.Phase.gemm) is given as its root and `gemm`."""
    def gemm_of(root, gemm):
        if gemm is None:
            return to_gemm(root)
        g = to_gemm(gemm, transposed=True) if epilogue_transposes(gemm, root) else to_gemm(gemm)
        return replace(g, epilogue=(gemm, root))

    def plan(root, gemm=None):
        g = gemm_of(root, gemm)
        return g.tasks(), g.work(), g.scratch()

    def emit(kb, root, dests, lo, hi, gemm=None):
        g = gemm_of(root, gemm)
        if g.epilogue and any(s.ptr is dests[0].ptr for s in kb.sources.values()):
            g = replace(g, reads_destination=True)      # emit_kernel's shared buffer
        packed = g.b_operand is not None and id(g.b_operand) in kb.packed
        emit_gemm(kb, g, dests[0], lo, hi,
                  kb.sources[id(g.b_operand)].ptr if packed else None)

    register_phase(opcode, emit, plan)


register_gemm("dot", dot_gemm)


def finishes_each_once(dot) -> bool:
    """Whether the GEMM of `dot` writes each element of C once, finished: its K is one
    block (partial sums are never stored in C) or it is a plain loop per element. Its
    epilogue may then read an input whose buffer C is (a gradient accumulator g + dot)."""
    g = dot_gemm(dot)
    return not g.packed() or g.blocks()[5] >= g.k
