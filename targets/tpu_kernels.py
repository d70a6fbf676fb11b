"""What one instruction costs a TPU kernel, by tiles: padded work, MXU passes, VMEM blocks.

Padding. Arrays are stored and moved in whole tiles (tpu_tiles.py), and the vector unit
works on whole (8,128) registers, so an elementwise op over f32[8,129] moves and computes
f32[8,256]: its HBM bytes and its vector work are those of its padded dims.

MXU passes. A dot runs on size x size systolic arrays (128 on v4/v5e/v5p, 256 on v6e,
tpu_generations.py). One pass multiplies a size x size block of the stationary operand by
`size` rows streamed through it: loading the next block takes about as long as streaming
`size` rows, so fewer rows do not make a pass shorter. A dot of M x K by K x N (per batch
element) takes ceil(M/size) * ceil(K/size) * ceil(N/size) passes of 2 * size^3 flops at the
MXU peak, and its utilization is M*K*N / (passes * size^3): K=100 on a 128 MXU leaves 28 of
128 rows of every pass idle. An f32 dot takes 1, 3 or 6 bf16 passes by its precision
(F32_PASSES). A convolution is the GEMM it lowers to: M = output elements per output
feature, K = input features per group x window taps, N = output features per group, one GEMM
per group (feature_group_count groups of the features, or batch_group_count groups of the
batch, each with its share of the output features).

Depthwise convolutions. A group with a single input feature (feature_group_count == input
features, a depthwise convolution) contracts only its window taps, K = 9 for 3x3; a group
with a single output feature (batch_group_count == output features, a depthwise
convolution's weight gradient) has N = 1. Either fills 1/128 of an MXU side or less, so the
model runs them on the vector units, features along the lanes: each output element takes K
multiply-adds, 2 flops each, over the padded output.

VMEM. A kernel streams its arrays through VMEM in blocks, one block of each operand and
result per step, double-buffered so that the next block's copy overlaps this one's compute.
The model's block is one row of tiles: the array's first tile's rows by its whole minor
(lane) dimension, as a kernel that keeps lane rows whole walks its arrays. A dot's blocks
are one pass's: size x size of each operand and a size x size f32 accumulator (the MXU
takes K `size` deep per pass and accumulates, so K is never resident whole). A member's footprint counts the blocks of its operands and its
result; a kernel's is twice the sum over its members (every block double-buffered, an operand
two members read counted for each): an upper bound on what XLA would allocate.
"""
from __future__ import annotations

import math
from typing import Mapping, NamedTuple, Sequence

from ..dot_dims import dot_dims
from ..shape import AnyShape, Shape
from .tpu_generations import F32_PASSES, TpuGeneration
from .tpu_tiles import memory_image, padded_dims, storage_bytes, tiling
from .work import flops

CONTRACTIONS = frozenset({"dot", "convolution"})


def moves_data(opcode: str, shape: AnyShape, operand_shapes: Sequence[AnyShape]) -> bool:
    """A reshape whose operand and result do not hold their elements at the same offsets
    under their tiled layouts (tpu_tiles.memory_image): free on a CPU, where a row-major
    reshape only relabels, but a copy on TPU, e.g. f32[8,256]{1,0} to f32[8,2,128]{2,1,0}
    (the result's tiles cover 2x128 rows, the operand's 8x128). A bitcast never moves data:
    it is the same bytes by definition."""
    if opcode != "reshape" or shape.is_tuple or operand_shapes[0].is_tuple \
            or not shape.dtype.bits:
        return False
    src = operand_shapes[0]
    return memory_image(src.element_type, array_dims(src), src.minor_to_major) != \
        memory_image(shape.element_type, array_dims(shape), shape.minor_to_major)


def array_dims(shape: Shape) -> tuple[int, ...]:
    return tuple(max(d, 0) for d in shape.dims)     # a dynamic (-1) dimension counts as empty


def padded(shape: AnyShape) -> AnyShape:
    """The shape with its dims rounded up to whole tiles (tuples element by element)."""
    if shape.is_tuple:
        return type(shape)(tuple(padded(s) for s in shape.elements))
    if not shape.dtype.bits:
        return shape
    return shape.with_dims(padded_dims(shape.element_type, array_dims(shape),
                                       shape.minor_to_major))


def stored_bytes(shape: AnyShape) -> float:
    """Bytes a value occupies in HBM, and moves when read or written: whole tiles."""
    if shape.is_tuple:
        return sum(stored_bytes(s) for s in shape.elements)
    if not shape.dtype.bits:
        return 0.0
    return float(storage_bytes(shape.element_type, array_dims(shape), shape.minor_to_major))


def logical_bytes(shape: AnyShape) -> float:
    return float(max(shape.byte_size, 0))


class Mxu(NamedTuple):
    """A contraction's use of the MXUs."""
    passes: int             # size^3 block products (precision passes not included)
    macs: float             # useful multiply-adds
    precision: int          # bf16 passes per product: 1, or 3/6 for an f32 dot

    def utilization(self, size: int) -> float:
        return self.macs / (self.passes * size ** 3) if self.passes else 0.0


def gemm_dims(opcode: str, shape: Shape, attrs: Mapping[str, object],
              operand_shapes: Sequence[AnyShape]) -> tuple[int, int, int, int]:
    """(batch, M, K, N) of a dot or of the GEMMs a convolution lowers to (batch: its
    groups)."""
    lhs, rhs = array_dims(operand_shapes[0]), array_dims(operand_shapes[1])
    if opcode == "dot":
        left, right = dot_dims(attrs, len(lhs), len(rhs))
        return (math.prod(lhs[d] for d in left.batch), math.prod(lhs[d] for d in left.free),
                math.prod(lhs[d] for d in left.contracting),
                math.prod(rhs[d] for d in right.free))
    labels, window = attrs.get("dim_labels"), attrs.get("window")
    feature_groups = attrs.get("feature_group_count", 1) or 1
    batch_groups = attrs.get("batch_group_count", 1) or 1
    taps = math.prod(window.size) if window is not None else 1
    out_features = rhs[labels.rhs_output_feature] if labels is not None else 1
    in_features = lhs[labels.lhs_feature] if labels is not None else 1
    m = max(shape.num_elements, 0) // max(out_features, 1)
    groups = feature_groups * batch_groups          # HLO allows only one of them above 1
    return groups, m, in_features // feature_groups * taps, out_features // groups


def depthwise(opcode: str, attrs: Mapping[str, object],
              operand_shapes: Sequence[AnyShape]) -> bool:
    """A convolution whose groups have one input feature each, or one output feature each:
    priced on the vector units, not the MXUs (module docstring)."""
    labels = attrs.get("dim_labels")
    if opcode != "convolution" or labels is None:
        return False
    lhs, rhs = array_dims(operand_shapes[0]), array_dims(operand_shapes[1])
    groups = attrs.get("feature_group_count", 1) or 1
    batch_groups = attrs.get("batch_group_count", 1) or 1
    return (groups > 1 and groups == lhs[labels.lhs_feature]) or \
        (batch_groups > 1 and batch_groups == rhs[labels.rhs_output_feature])


def mxu_use(gen: TpuGeneration, opcode: str, shape: AnyShape, attrs: Mapping[str, object],
            operand_shapes: Sequence[AnyShape]) -> Mxu | None:
    """The MXU passes of a dot or convolution; None for other instructions and for a
    depthwise convolution."""
    if opcode not in CONTRACTIONS or shape.is_tuple or len(operand_shapes) < 2 \
            or depthwise(opcode, attrs, operand_shapes):
        return None
    batch, m, k, n = gemm_dims(opcode, shape, attrs, operand_shapes)
    s = gen.mxu_size
    passes = batch * math.ceil(m / s) * math.ceil(k / s) * math.ceil(n / s)
    return Mxu(passes, float(batch * m * k * n), precision_passes(attrs, operand_shapes))


def precision_passes(attrs: Mapping[str, object], operand_shapes: Sequence[AnyShape]) -> int:
    """bf16 passes per MXU product: an f32 operand takes its precision's count, the
    highest asked of either operand; bf16 and narrower types one."""
    if not any(s.element_type == "f32" for s in operand_shapes if not s.is_tuple):
        return 1
    asked = attrs.get("operand_precision") or ("default",)
    return max(F32_PASSES.get(str(p).lower(), 1) for p in asked)


def op_flops(gen: TpuGeneration, opcode: str, shape: AnyShape, attrs: Mapping[str, object],
             operand_shapes: Sequence[AnyShape], weights: Mapping[str, float]
             ) -> tuple[float, float]:
    """(vector flops over padded dims, MXU flops of whole passes, times precision passes):
    what the TPU actually computes, padding included."""
    mxu = mxu_use(gen, opcode, shape, attrs, operand_shapes)
    if mxu is not None:
        return 0.0, 2.0 * gen.mxu_size ** 3 * mxu.passes * mxu.precision \
            * weights.get(opcode, 1.0)
    if depthwise(opcode, attrs, operand_shapes) and not shape.is_tuple:
        _, _, k, _ = gemm_dims(opcode, shape, attrs, operand_shapes)
        return 2.0 * k * math.prod(array_dims(padded(shape))), 0.0
    vector, _ = flops(opcode, padded(shape), attrs, [padded(s) for s in operand_shapes],
                      weights)
    return vector, 0.0


def block_bytes(shape: AnyShape) -> float:
    """One pipeline block of an array: its first tile's rows by its whole (padded) minor
    dimension; one linear tile for a scalar or rank-1 array; a tuple, one block per element."""
    if shape.is_tuple:
        return sum(block_bytes(s) for s in shape.elements)
    if not shape.dtype.bits:
        return 0.0
    dims, order = array_dims(shape), shape.minor_to_major
    rows = tiling(shape.element_type, dims, order)[0][0]
    if len(dims) < 2:
        return rows * shape.dtype.bits / 8
    minor = padded_dims(shape.element_type, dims, order)[order[0]]
    return rows * minor * shape.dtype.bits / 8


def vmem_bytes(gen: TpuGeneration, opcode: str, shape: AnyShape,
               attrs: Mapping[str, object], operand_shapes: Sequence[AnyShape]) -> float:
    """One member's blocks, single-buffered: its operands' and its result's (a dot's
    MXU-shaped ones)."""
    if opcode in CONTRACTIONS and not shape.is_tuple and len(operand_shapes) >= 2 \
            and not depthwise(opcode, attrs, operand_shapes):
        s = gen.mxu_size
        lhs, rhs = operand_shapes[0], operand_shapes[1]
        return s * s * (lhs.dtype.bits + rhs.dtype.bits) / 8 + s * s * 4.0
    return block_bytes(shape) + sum(block_bytes(s) for s in operand_shapes)
