"""GPU transposes through shared-memory tiles: a loop kernel whose output reads a transpose
that moves the input's minor dimension reads and writes global memory coalesced both ways.

One thread per output element would read the transposed operand with a stride of a whole
row between adjacent threads. Here (`tiled_transpose` decides) the output is cut into
tiles of TILE x TILE elements over two of its dimensions: `across`, the output dimension
that is the operand's minor one, and the output's own minor dimension (the other
dimensions are one coordinate per tile). A block of TILE x ROWS threads takes a tile
(blocks stride over the tiles):

1. thread (y, x) computes the transpose's operand (with whatever is fused into it) at the
   elements with `across` offset x and minor offset y, y + ROWS, ...: adjacent threads
   read adjacent operand elements. It puts them in a shared [TILE][TILE + 1] array at
   [minor offset][across offset] (the padding puts a column's elements in 32 banks);
2. after a barrier, thread (y, x) computes the outputs at minor offset x and across offset
   y, y + ROWS, ..., with the transpose's value taken from the tile at [x][y + ...]:
   adjacent threads write adjacent output elements;
3. a second barrier, before the next tile overwrites the array.

The transposes the tile serves ("heroes": every transpose in the kernel moving the minor
dimension, all with the same permutation and shape, several tiles if there are several)
must be read only elementwise on the way to the outputs, which all have their shape, so
each thread needs exactly the element of the tile at its output position; everything else
the outputs read is computed in step 2 at the output position, as in the loop kernel."""
from __future__ import annotations

import math

from ..ops import is_elementwise
from .elemental import Elemental
from .emit_kernel import PHASES, store_outputs
from .emit_loops import Index, add, delinearize, linearize, mul, udiv, urem
from .gpu_combine import WARP, barrier, load_parts, shared_like, store_parts
from .gpu_loops import Schedule, special, strided
from .ltypes import I64, elem, zero

TILE = WARP                       # a warp reads one tile row, and writes one
ROWS = 8                          # threads per tile column: 256 threads per block
MIN_SIDE = 16                     # tiles narrower than this would idle most of the block


def tiled_transpose(comp, phases_, outputs) -> Schedule | None:
    """The tiled schedule for a loop kernel reading transposes that move the minor dimension
    only elementwise on the way to outputs of the transpose's shape; else None."""
    if any(p.root.opcode in PHASES for p in phases_):
        return None
    heroes = [x for x in comp.post_order() if x.opcode == "transpose" and
              x.shape.rank >= 2 and _across(x) != x.shape.rank - 1]
    if not heroes or len({(tuple(h.attrs["dimensions"]), h.shape.dims) for h in heroes}) != 1:
        return None
    dims = heroes[0].shape.dims
    across = _across(heroes[0])
    if min(dims[across], dims[-1]) < MIN_SIDE or not _read_in_place(comp, heroes, outputs):
        return None
    tiles = _tiles(dims, across)
    return Schedule(lambda gen, stores, _: emit_tiles(gen, heroes, stores), TILE * ROWS,
                    max(1, math.prod(tiles)))


def _across(hero) -> int:
    """The output dimension that is the transpose operand's minor dimension."""
    return list(hero.attrs["dimensions"]).index(hero.shape.rank - 1)


def _read_in_place(comp, heroes, outputs) -> bool:
    """Every output has the heroes' shape, and whatever reads a hero (transitively) is an
    elementwise op of that shape: it reads the hero at its own position."""
    dims = heroes[0].shape.dims
    if any(o.shape.is_tuple or o.shape.dims != dims for o in outputs):
        return False
    reading = {id(h) for h in heroes}
    for x in comp.post_order():
        if id(x) in reading or not any(id(o) in reading for o in x.operands):
            continue
        if x is comp.root and x.opcode == "tuple":
            continue
        if not is_elementwise(x.opcode) or x.shape.is_tuple or x.shape.dims != dims:
            return False
        reading.add(id(x))
    return True


def _tiles(dims, across: int) -> list[int]:
    """Tile counts: the other dimensions' sizes, then across and minor in tiles."""
    others = [n for d, n in enumerate(dims[:-1]) if d != across]
    return others + [-(-dims[across] // TILE), -(-dims[-1] // TILE)]


def tile_coordinates(b, dims, across: int, tile, across_offset, minor_offset) -> list:
    """Output coordinates of the element at (across_offset, minor_offset) of tile number
    `tile` (ints or IR values)."""
    counts = _tiles(dims, across)
    *others, t_across, t_minor = delinearize(b, tile, counts)
    coords = list(others)
    coords.insert(across, add(b, mul(b, t_across, TILE), across_offset))
    return coords + [add(b, mul(b, t_minor, TILE), minor_offset)]


def tile_slot(b, minor_offset, across_offset):
    """Shared-memory slot of the element at (across_offset, minor_offset) of a tile."""
    return add(b, mul(b, minor_offset, TILE + 1), across_offset)


def emit_tiles(gen: Elemental, heroes: list, stores: list) -> None:
    """The body of a tiled transpose kernel (any grid of TILE x ROWS-thread blocks)."""
    b = gen.b
    dims = heroes[0].shape.dims
    across = _across(heroes[0])
    perm = list(heroes[0].attrs["dimensions"])
    in_dims = heroes[0].operands[0].shape.dims
    tid = special(b, "tid.x")
    x, y = urem(b, tid, TILE), udiv(b, tid, TILE)
    likes = [zero(elem(h.shape.element_type)) for h in heroes]    # the registers' types
    shared = [shared_like(b, [v], TILE * (TILE + 1), "tile") for v in likes]

    def inside(coords):
        return b.and_(b.icmp_unsigned("<", coords[across], I64(dims[across])),
                      b.icmp_unsigned("<", coords[-1], I64(dims[-1])))

    count = math.prod(_tiles(dims, across))
    with strided(b, special(b, "ctaid.x"), special(b, "nctaid.x"), count) as tile:
        with strided(b, y, I64(ROWS), TILE) as minor:
            coords = tile_coordinates(b, dims, across, tile, x, minor)
            with b.if_then(inside(coords)):
                gen.push_scope()
                at = Index(in_dims, values=[coords[perm.index(d)] for d in range(len(in_dims))])
                for h, arrays in zip(heroes, shared):
                    store_parts(b, arrays, [gen.value(h.operands[0], at)],
                                tile_slot(b, minor, x))
                gen.pop_scope()
        barrier(b)
        with strided(b, y, I64(ROWS), TILE) as offset:
            coords = tile_coordinates(b, dims, across, tile, offset, x)
            with b.if_then(inside(coords)):
                for h, arrays, like in zip(heroes, shared, likes):
                    [gen.bindings[id(h)]] = load_parts(b, arrays, [like],
                                                       tile_slot(b, x, offset))
                linear = linearize(b, coords, dims)
                store_outputs(gen, [(o, dests, None) for o, dests in stores],
                              Index(dims, values=coords, linear=linear), linear)
                for h in heroes:
                    del gen.bindings[id(h)]
        barrier(b)
