"""dot and convolution kernels on the GPU: a shared-memory tiled GEMM whose fused epilogue
is applied where the tile is stored.

Both ops come as `emit_dot.Gemm` (C[b, m, n] = sum_k A[b, m, k] * B[b, k, n] with element
accessors; a convolution's A is its implicit im2col, emit_conv.py), so dimension numbers,
operand layouts, fused operand converts and a convolution's padding, strides, dilations and
groups are all index arithmetic in the tile loads, shared with the CPU.

Per block of TILE_THREADS = 256 threads: one BM x BN (64 x 64) tile of C of one batch; the
blocks stride over the (batch, row tile, column tile) tiles, so any grid is correct (the
launch recorded gives each tile a block; the block must have exactly 256 threads). K is
walked BK = 16 at a time: the block loads the A tile (BM x BK) and the B tile (BK x BN) into
shared memory, four elements of each per thread, zero where the position falls outside
M, N or K (ragged edges add nothing); barrier; multiply; barrier. Two ways to multiply:

* tensor cores (`wmma`, m16n16k16; tf32 m16n16k8): eight warps, warp w computing rows
  16 (w // 2) and columns 32 (w % 2) of the tile as two 16 x 16 fragments accumulated in
  f32, for f16 operands (sm_70 on), bf16 (sm_80 on) and f32 as tf32 (sm_80 on, rounded by
  cvt.rna.tf32 when stored to the tile) when the dot's operand_precision is default or
  high, as XLA:GPU does: `highest` (or algorithm=dot_f32_f32_f32) keeps full f32;
* otherwise (f32 highest, f64, integers, pred): each thread a 4 x 4 register tile (rows
  ty + 16 i, columns tx + 16 j of the tile, ty, tx = tid / 16, tid % 16) of multiply-adds
  in the accumulation type, the tiles held in that type (emit_dot's, as on the CPU).

Then the accumulated tile goes to shared memory (over the A and B tiles) and the block
stores it, consecutive threads at consecutive columns: per element the dot's value (rounded
once to its type) is bound in the Elemental and every kernel output is computed where that
element lands in it (its own position, or through slices, reshapes and transposes: a split
QKV projection; gpu_views.py), so a bias, activation or convert after the dot is part of
the one launch. A kernel whose outputs read the result otherwise (a reduce or broadcast of
it), or with another op with a loop structure of its own, is an UnsupportedError, as are
complex contractions.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass

from llvmlite import ir

from ..ops import is_elementwise
from .convert import convert
from .elemental import Elemental
from .emit_conv import conv_gemm
from .emit_dot import Gemm, dot_gemm, multiply_add, zero_of
from .emit_loops import Index, const, for_range
from .gpu_frame import unsupported
from .gpu_views import LANDING, landing, plain_view
from .emit_kernel import PHASES, store_outputs
from .gpu_loops import special, strided
from .intrinsics import call, declare
from .ltypes import F32, I32, I64, VOID, elem, store

TILE_THREADS = 256
BM, BN, BK = 64, 64, 16
SIMT_ROWS = SIMT_COLS = 4                      # a thread's register tile (16 x 16 threads)
TO_GEMM = {"dot": dot_gemm, "convolution": conv_gemm}


@dataclass(frozen=True)
class TensorCore:
    """One wmma shape for an operand type: the intrinsics' names, the fragments' register
    types, the k of one mma and the first architecture that has it."""
    shape: str                  # m16n16k16 / m16n16k8
    operand: str                # the intrinsics' type suffix
    mma: str                    # the mma intrinsic's type suffix
    part: ir.Type               # one register of an A or B fragment
    parts: int                  # registers per A (and B) fragment
    k: int
    since: int                  # sm_XX

    def tile_type(self) -> ir.Type:
        """How the block's tiles hold the operand (f16 as half, bf16 and tf32 as bits)."""
        return {"f16": ir.HalfType(), "bf16": ir.IntType(16), "tf32": I32}[self.operand]


HALF2 = ir.VectorType(ir.HalfType(), 2)
SHARED = ir.PointerType(addrspace=3)
TENSOR_CORES = {
    "f16": TensorCore("m16n16k16", "f16", "f32.f32", HALF2, 8, 16, 70),
    "bf16": TensorCore("m16n16k16", "bf16", "bf16", I32, 4, 16, 80),
    "f32": TensorCore("m16n16k8", "tf32", "tf32", I32, 4, 8, 80),
}
ACC_FRAGMENT = 8                 # f32 registers per 16 x 16 accumulator fragment per thread
WARP_ROWS, WARP_COLS = 16, 32    # what one warp computes: two fragments side by side


def emit_gemm_kernel(gen: Elemental, comp, groups, stores, arch: str) -> tuple[int, int]:
    """The body of a kernel computing one dot or convolution and its epilogue (the GPU
    frame of emit_gpu.GPU_FRAMES); returns the launch (threads, blocks)."""
    op = _contraction(groups)
    g = TO_GEMM[op.opcode](op)
    paths = epilogue_paths(comp, op, stores)
    if g.acc.kind == "complex":
        raise unsupported(op, "complex contractions have no GPU code yet")
    core = tensor_core(op, g, arch)
    b = gen.b
    m_tiles, n_tiles = -(-g.m // BM), -(-g.n // BN)
    tiles = g.batch * m_tiles * n_tiles
    acc_t = elem("f32") if core else g.acc
    tile_t = core.tile_type() if core else acc_t.compute          # of the A and B tiles
    a_bytes = BM * BK * _bytes(tile_t)
    smem = _shared(b, max(a_bytes + BK * BN * _bytes(tile_t), BM * BN * _bytes(acc_t.compute)))
    a_tile, b_tile = smem, b.gep(smem, [I64(a_bytes)], source_etype=ir.IntType(8))
    c_tile = smem                                              # over both, after the K loop
    tid = special(b, "tid.x")
    ar = IrArith(b)
    barrier = declare(b.module, "llvm.nvvm.barrier0", VOID, [])
    multiply = _WmmaTile(gen, core, tid) if core else _SimtTile(gen, g.acc, tid)
    with strided(b, special(b, "ctaid.x"), special(b, "nctaid.x"), tiles) as t:
        bi, m0, n0 = tile_origin(ar, t, m_tiles, n_tiles)
        multiply.clear()
        with for_range(b, 0, -(-g.k // BK), "kt", vectorize=False) as kt:
            k0 = b.mul(kt, I64(BK))
            for row, col in load_positions(ar, tid, BM, BK):
                _load_element(gen, g, core, "a", a_tile, tile_t, bi, b.add(m0, row),
                              b.add(k0, col), b.add(b.mul(row, I64(BK)), col))
            for row, col in load_positions(ar, tid, BK, BN):
                _load_element(gen, g, core, "b", b_tile, tile_t, bi, b.add(n0, col),
                              b.add(k0, row), b.add(b.mul(row, I64(BN)), col))
            b.call(barrier, [])
            multiply.step(a_tile, b_tile, tile_t)
            b.call(barrier, [])
        multiply.store(c_tile)
        b.call(barrier, [])
        _epilogue(gen, g, op, acc_t, stores, paths, c_tile, tid, bi, m0, n0)
        b.call(barrier, [])                    # the next tile's loads overwrite the tile
    return TILE_THREADS, max(1, tiles)


def _contraction(groups):
    """The kernel's one dot or convolution; any other op with a loop structure of its own
    beside it is refused (reduces, computed per element, are fine)."""
    ops = [g.root for g in groups if g.root.opcode in TO_GEMM]
    others = [g.root for g in groups if g.root.opcode in PHASES and
              g.root.opcode not in TO_GEMM and g.root.opcode not in ("reduce", "reduce-window")]
    if len(ops) > 1 or others:
        raise unsupported((ops[1:] + others)[0], f"a GPU kernel computes one "
                          f"{ops[0].opcode} with elementwise ops around it, not several",
                          split=True)
    return ops[0]


# ----------------------------------------------- where the outputs read the result

def epilogue_paths(comp, op, stores) -> dict[int, tuple]:
    """id(output) -> the views (reshape, layout-keeping bitcast, transpose, slice) between
    the contraction and that output, through elementwise ops: each output reads the result
    at exactly one position per element, so the thread holding the result at position p
    computes the output element(s) that read p (`landing`), with p's value bound. An output
    that does not read the result has its shape and takes it position for position.
    Anything else (a reduce or a broadcast of the result, two positions of it read by one
    element) is refused."""
    paths = {id(op): ()}
    for x in comp.post_order():
        reading = [o for o in x.operands if id(o) in paths]
        if not reading or x is comp.root and x.opcode == "tuple":
            continue
        path = paths[id(reading[0])]
        if any([id(v) for v in paths[id(o)]] != [id(v) for v in path] for o in reading):
            raise unsupported(op, f"{x.opcode} ({x.name}) reads its result at two positions",
                              split=True)
        if (is_elementwise(x.opcode) or x.opcode == "copy") and \
                all(o.shape.dims == x.shape.dims for o in reading):
            paths[id(x)] = path
        elif x.opcode in LANDING and plain_view(x):
            paths[id(x)] = path + (x,)
        else:
            raise unsupported(op, f"{x.opcode} ({x.name}) reads its result other than at "
                                  "one position per element", split=True)
    out = {}
    for o, _ in stores:
        if o.shape.is_tuple or id(o) not in paths and o.shape.dims != op.shape.dims:
            raise unsupported(op, f"kernel output {o.name} neither reads it nor has its shape",
                              split=True)
        out[id(o)] = paths.get(id(o), ())
    return out


def tensor_core(op, g: Gemm, arch: str) -> TensorCore | None:
    """The wmma shape this contraction runs on for `arch`, or None for SIMT: both operands
    f16, bf16 or (precision allowing) f32, accumulating in f32."""
    if g.a_type.name != g.b_type.name or g.acc.name != "f32":
        return None
    core = TENSOR_CORES.get(g.a_type.name)
    if core is None or int(arch[3:].rstrip("af")) < core.since:
        return None
    if g.a_type.name == "f32" and not tf32_allowed(op):
        return None
    return core


def tf32_allowed(op) -> bool:
    """f32 operands may be rounded to tf32 (XLA:GPU's reading of default and high
    precision); `highest` on either operand or an explicit f32 algorithm forbids it."""
    precision = op.attrs.get("operand_precision") or ()
    algorithm = op.attrs.get("algorithm", "unset")
    return "highest" not in precision and algorithm in ("unset", "dot_tf32_tf32_f32")


# ------------------------------------------------------- where each thread works
# Written once over an arithmetic (IrArith at the builder, IntArith on Python ints), so the
# tests check the tiling the kernel uses by running the same functions on integers.

class IntArith:
    """Index arithmetic on Python ints."""
    add, mul = staticmethod(operator.add), staticmethod(operator.mul)
    udiv, urem = staticmethod(operator.floordiv), staticmethod(operator.mod)


class IrArith:
    """Index arithmetic on i64 values (ints taken as constants), at the builder's position."""

    def __init__(self, b: ir.IRBuilder):
        i64 = lambda x: I64(x) if isinstance(x, int) else x      # noqa: E731
        for name in ("add", "mul", "udiv", "urem"):
            op = getattr(b, name)
            setattr(self, name, lambda x, y, op=op: op(i64(x), i64(y)))


def tile_origin(ar, t, m_tiles: int, n_tiles: int):
    """Batch, first row and first column of output tile t (column tiles fastest)."""
    rest = ar.udiv(t, n_tiles)
    return (ar.udiv(rest, m_tiles), ar.mul(ar.urem(rest, m_tiles), BM),
            ar.mul(ar.urem(t, n_tiles), BN))


def load_positions(ar, tid, rows: int, cols: int) -> list:
    """(row, column) of the elements thread `tid` loads into a rows x cols row-major tile:
    elements tid, tid + 256, ..., so consecutive threads read consecutive columns."""
    return [(ar.add(ar.udiv(tid, cols), r * TILE_THREADS // cols), ar.urem(tid, cols))
            for r in range(rows * cols // TILE_THREADS)]


def simt_positions(ar, tid) -> tuple[list, list]:
    """Rows and columns of a SIMT thread's register tile: ty + 16 i, tx + 16 j."""
    ty, tx = ar.udiv(tid, 16), ar.urem(tid, 16)
    return ([ar.add(ty, 16 * i) for i in range(SIMT_ROWS)],
            [ar.add(tx, 16 * j) for j in range(SIMT_COLS)])


def warp_origin(ar, tid):
    """First row and column of the WARP_ROWS x WARP_COLS strip warp tid / 32 computes."""
    warp = ar.udiv(tid, 32)
    return (ar.mul(ar.udiv(warp, BN // WARP_COLS), WARP_ROWS),
            ar.mul(ar.urem(warp, BN // WARP_COLS), WARP_COLS))


def fragment_offsets(ar, row, col, kk: int, f: int):
    """Offsets of the A fragment (rows row.., columns kk..; leading dimension BK), the B
    fragment f (rows kk.., columns col + 16 f..; BN) and the C fragment f (BN) in their
    row-major tiles."""
    col = ar.add(col, 16 * f)
    return ar.add(ar.mul(row, BK), kk), ar.add(kk * BN, col), ar.add(ar.mul(row, BN), col)


def store_position(ar, e):
    """Row and column of element e of the BM x BN output tile."""
    return ar.udiv(e, BN), ar.urem(e, BN)


def _load_element(gen, g: Gemm, core, which, tile, tile_t, bi, outer, k, at) -> None:
    """Element `at` of the A (which="a": row m = outer, column k) or B (row k, column
    n = outer) tile: the operand's value converted for the tile, zero outside the operand."""
    b = gen.b
    extent = g.m if which == "a" else g.n
    inside = b.and_(b.icmp_unsigned("<", outer, I64(extent)), b.icmp_unsigned("<", k, I64(g.k)))
    outer, k = _clamp(b, outer, extent), _clamp(b, k, g.k)
    gen.push_scope()
    if which == "a":
        x = convert(b, g.a_value(gen, bi, outer, k), g.a_type, _tile_elem(g, core))
    else:
        x = convert(b, g.b_value(gen, bi, k, outer), g.b_type, _tile_elem(g, core))
    gen.pop_scope()
    x = b.select(inside, x, zero_of(_tile_elem(g, core)))
    _store_tile(b, x, tile, tile_t, at, core)


def _tile_elem(g: Gemm, core):
    """The type operands are converted to on their way into the tiles."""
    return elem("f32") if core else g.acc


def _clamp(b, i, n: int):
    """`i` kept inside [0, n) so a masked-off position still reads a real element."""
    return b.select(b.icmp_unsigned("<", i, I64(n)), i, I64(max(n - 1, 0)))


def _store_tile(b, x, tile, tile_t, at, core) -> None:
    ptr = b.gep(tile, [at], source_etype=tile_t)
    if core is None or core.operand == "f16":
        b.store(b.fptrunc(x, tile_t) if core else x, ptr)
    elif core.operand == "bf16":
        store(b, x, ptr, elem("bf16"), I64(0))
    else:                                      # tf32: round to nearest, ties away
        rna = declare(b.module, "llvm.nvvm.f2tf32.rna", I32, [F32])
        b.store(b.call(rna, [x]), ptr)


def _bytes(t: ir.Type) -> int:
    if isinstance(t, ir.IntType):
        return max(1, t.width // 8)
    return {ir.HalfType: 2, ir.FloatType: 4, ir.DoubleType: 8}[type(t)]


def _shared(b, n: int):
    """`n` bytes of the block's shared memory, aligned for wmma's fragment loads, as an
    untyped shared pointer (tiles of several types live there)."""
    mod = b.module
    arr = ir.ArrayType(ir.IntType(8), n)
    gv = ir.GlobalVariable(mod, arr, mod.get_unique_name("gemm_tiles"), addrspace=3)
    gv.linkage = "internal"
    gv.initializer = ir.Constant(arr, ir.Undefined)
    gv.align = 128
    cast = ir.instructions.CastInstr(b.block, "bitcast", gv, SHARED)
    b._insert(cast)
    return cast


class _SimtTile:
    """A thread's SIMT_ROWS x SIMT_COLS accumulators: rows ty + 16 i, columns tx + 16 j."""

    def __init__(self, gen: Elemental, acc, tid):
        b = gen.b
        self.gen, self.acc = gen, acc
        self.rows, self.cols = simt_positions(IrArith(b), tid)
        self.slots = [[gen.alloca(acc.compute) for _ in range(SIMT_COLS)]
                      for _ in range(SIMT_ROWS)]

    def clear(self) -> None:
        for row in self.slots:
            for s in row:
                self.gen.b.store(zero_of(self.acc), s)

    def step(self, a_tile, b_tile, t) -> None:
        b = self.gen.b
        rows, cols = self.rows, self.cols
        for kk in range(BK):
            xs = [b.load(b.gep(a_tile, [b.add(b.mul(r, I64(BK)), I64(kk))], source_etype=t),
                         typ=t) for r in rows]
            ys = [b.load(b.gep(b_tile, [b.add(I64(kk * BN), c)], source_etype=t), typ=t)
                  for c in cols]
            for i, x in enumerate(xs):
                for j, y in enumerate(ys):
                    s = self.slots[i][j]
                    b.store(_multiply_add(b, b.load(s, typ=t), x, y, self.acc), s)

    def store(self, c_tile) -> None:
        b, t = self.gen.b, self.acc.compute
        for i, r in enumerate(self.rows):
            for j, c in enumerate(self.cols):
                at = b.add(b.mul(r, I64(BN)), c)
                b.store(b.load(self.slots[i][j], typ=t), b.gep(c_tile, [at], source_etype=t))


class _WmmaTile:
    """A warp's two 16 x 16 f32 accumulator fragments (rows 16 (w // 2), columns
    32 (w % 2) + 16 f of the tile), eight registers each per thread."""

    def __init__(self, gen: Elemental, core: TensorCore, tid):
        b = gen.b
        self.gen, self.core = gen, core
        self.ar = IrArith(b)
        self.row, self.col = warp_origin(self.ar, tid)
        self.slots = [[gen.alloca(F32) for _ in range(ACC_FRAGMENT)]
                      for _ in range(WARP_COLS // 16)]

    def clear(self) -> None:
        for frag in self.slots:
            for s in frag:
                self.gen.b.store(F32(0.0), s)

    def step(self, a_tile, b_tile, t) -> None:
        b, core = self.gen.b, self.core
        mod = b.module
        frag_t = ir.LiteralStructType([core.part] * core.parts)
        name = f"llvm.nvvm.wmma.{core.shape}.load.{{}}.row.stride.{core.operand}.p3"
        load_a = declare(mod, name.format("a"), frag_t, [SHARED, I32])
        load_b = declare(mod, name.format("b"), frag_t, [SHARED, I32])
        mma = declare(mod, f"llvm.nvvm.wmma.{core.shape}.mma.row.row.{core.mma}",
                      ir.LiteralStructType([F32] * ACC_FRAGMENT),
                      [core.part] * (2 * core.parts) + [F32] * ACC_FRAGMENT)
        for kk in range(0, BK, core.k):
            for f, frag in enumerate(self.slots):
                a_at, b_at, _ = fragment_offsets(self.ar, self.row, self.col, kk, f)
                if f == 0:
                    a_ptr = b.gep(a_tile, [a_at], source_etype=t)
                    a = _parts(b, b.call(load_a, [a_ptr, I32(BK)]), core.parts)
                b_ptr = b.gep(b_tile, [b_at], source_etype=t)
                y = _parts(b, b.call(load_b, [b_ptr, I32(BN)]), core.parts)
                c = [b.load(s, typ=F32) for s in frag]
                d = _parts(b, b.call(mma, a + y + c), ACC_FRAGMENT)
                for s, v in zip(frag, d):
                    b.store(v, s)

    def store(self, c_tile) -> None:
        b, core = self.gen.b, self.core
        fn = declare(b.module, f"llvm.nvvm.wmma.{core.shape}.store.d.row.stride.f32.p3",
                     VOID, [SHARED] + [F32] * ACC_FRAGMENT + [I32])
        for f, frag in enumerate(self.slots):
            _, _, at = fragment_offsets(self.ar, self.row, self.col, 0, f)
            ptr = b.gep(c_tile, [at], source_etype=F32)
            b.call(fn, [ptr] + [b.load(s, typ=F32) for s in frag] + [I32(BN)])


def _multiply_add(b, acc, x, y, t):
    """acc + x * y: a fused multiply-add for floats (the NVPTX backend keeps emit_dot's
    separately rounded fmul and fadd apart), emit_dot's for integers and pred."""
    if t.kind == "float":
        return call(b, "llvm.fma", [x, y, acc])
    return multiply_add(b, acc, x, y, t)


def _parts(b, value, n: int) -> list:
    return [b.extract_value(value, i) for i in range(n)]


def _epilogue(gen: Elemental, g: Gemm, op, acc_t, stores, paths, c_tile, tid, bi, m0, n0):
    """Store the tile: element e = (row, column) of it by thread e mod 256, the
    contraction's value bound for every output computed where that element lands in it
    (outputs on the same views share one computation)."""
    b = gen.b
    by_path: dict[tuple, tuple] = {}
    for o, dests in stores:
        path = paths[id(o)]
        by_path.setdefault(tuple(map(id, path)), (path, []))[1].append((o, dests, None))
    with strided(b, tid, I64(TILE_THREADS), BM * BN) as e:
        row, col = store_position(IrArith(b), e)
        m, n = b.add(m0, row), b.add(n0, col)
        inside = b.and_(b.icmp_unsigned("<", m, I64(g.m)), b.icmp_unsigned("<", n, I64(g.n)))
        with b.if_then(inside):
            x = b.load(b.gep(c_tile, [e], source_etype=acc_t.compute), typ=acc_t.compute)
            gen.bindings[id(op)] = convert(b, x, acc_t, g.out_type)
            at = b.add(g.c_row(b, bi, m), b.mul(n, I64(g.c_stride)))
            for path, outputs in by_path.values():
                valid, where = landing(b, path, Index(op.shape.dims, linear=at))
                if valid is None:
                    store_outputs(gen, outputs, where, where.linear(b))
                    continue
                if valid is False:                 # lands nowhere (an empty output)
                    continue
                with b.if_then(valid):
                    store_outputs(gen, outputs, where, const(where.linear(b)))
            del gen.bindings[id(op)]
