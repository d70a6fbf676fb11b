"""XLA's TPU tiles per element type and shape, and the padding they cost: each number is
derived by hand in the comment beside it (targets/tpu_tiles.py states the rules and sources)."""
import pytest

from hlo_opt.dtypes import DTYPES
from hlo_opt.targets.tpu_tiles import (memory_image, padded_dims, padding_waste, storage_bytes,
                                       tile_text, tiling)


def test_f32_3x129():
    # Second-minor 3 < 8 rows: the smallest power of two >= 3 from 1 row is 4 -> T(4,128).
    # Padded: rows 3 -> 4, lanes 129 -> 256. Stored 4*256*4 = 4096 B; logical 3*129*4 =
    # 1548 B; waste 1 - 1548/4096 = 0.62207...
    assert tiling("f32", (3, 129), (1, 0)) == ((4, 128),)
    assert padded_dims("f32", (3, 129)) == (4, 256)
    assert storage_bytes("f32", (3, 129)) == 4096
    assert padding_waste("f32", (3, 129)) == pytest.approx(1 - 1548 / 4096)


def test_bf16_17x200():
    # 16-bit: (8,128) tiles of elements, then (2,1) packs two rows into a 32-bit word.
    # Rows 17 -> 24 (three 8-row tiles), lanes 200 -> 256: 24*256*2 = 12288 B stored;
    # logical 17*200*2 = 6800 B; waste 1 - 6800/12288 = 0.44661...
    assert tiling("bf16", (17, 200), (1, 0)) == ((8, 128), (2, 1))
    assert padded_dims("bf16", (17, 200)) == (24, 256)
    assert storage_bytes("bf16", (17, 200)) == 12288
    assert padding_waste("bf16", (17, 200)) == pytest.approx(1 - 6800 / 12288)
    # The large (16,128) tile is used only when it divides the rows: 17 is not a multiple
    # of 16, so the large mode keeps (8,128); 32 rows take it.
    assert tiling("bf16", (17, 200), (1, 0), large=True) == ((8, 128), (2, 1))
    assert tiling("bf16", (32, 200), (1, 0), large=True) == ((16, 128), (2, 1))


def test_s8_5x300():
    # 8-bit packs 4 rows per word: the smallest tile is 4 rows; 5 rows need 8 -> (8,128)(4,1).
    # Rows 5 -> 8, lanes 300 -> 384: 8*384*1 = 3072 B; logical 5*300 = 1500 B;
    # waste 1 - 1500/3072 = 0.51171875.
    assert tiling("s8", (5, 300), (1, 0)) == ((8, 128), (4, 1))
    assert padded_dims("s8", (5, 300)) == (8, 384)
    assert storage_bytes("s8", (5, 300)) == 3072
    assert padding_waste("s8", (5, 300)) == 1 - 1500 / 3072


def test_pred_7():
    # pred is a packed byte (4 per word). Rank 1: ceil(7/128) = 1 row of 128; the smallest
    # tile is 4 rows (one 32-bit sublane of bytes) -> T(512)(128)(4,1). 7 -> 512 elements,
    # 512 B stored, 7 B used: waste 505/512.
    assert tiling("pred", (7,), (0,)) == ((512,), (128,), (4, 1))
    assert padded_dims("pred", (7,)) == (512,)
    assert storage_bytes("pred", (7,)) == 512
    assert padding_waste("pred", (7,)) == pytest.approx(505 / 512)


@pytest.mark.parametrize("element_type, dims, tiles", [
    # Second-minor 1, 2, 3-4 and 5+ rows: 1, 2, 4, 8 rows for 32-bit (XLA prints
    # f32[1,6144]{1,0:T(1,128)}); 16-bit starts at one sublane of 2 rows, 8-bit at 4.
    ("f32", (1, 6144), ((1, 128),)),
    ("f32", (2, 6144), ((2, 128),)),
    ("f32", (4, 100), ((4, 128),)),
    ("f32", (5, 100), ((8, 128),)),
    ("bf16", (1, 6144), ((2, 128), (2, 1))),
    ("bf16", (3, 64), ((4, 128), (2, 1))),
    ("pred", (1, 1), ((4, 128), (4, 1))),
    # Rank 1: 128 * (1, 2, 4 or 8 rows), never more than 1024 elements (one register).
    ("s32", (16,), ((128,),)),
    ("s32", (301,), ((512,),)),         # ceil(301/128) = 3 rows -> 4 -> 512
    ("s32", (2048,), ((1024,),)),
    ("bf16", (128,), ((256,), (128,), (2, 1))),
    ("bf16", (6144,), ((1024,), (128,), (2, 1))),
    # 4-bit packs 8 rows per word: one sublane of it is already 8 rows.
    ("s4", (3, 200), ((8, 128), (8, 1))),
    # 64-bit has no public TPU rule: the 32-bit tiles (the module's stated assumption).
    ("f64", (3, 200), ((4, 128),)),
    # Scalars: one compact tile of one 32-bit sublane.
    ("f32", (), ((128,),)),
    ("bf16", (), ((256,),)),
    ("pred", (), ((512,),)),
])
def test_tiles_xla_prints(element_type, dims, tiles):
    order = tuple(range(len(dims) - 1, -1, -1))
    assert tiling(element_type, dims, order) == tiles


def test_tiles_follow_the_physical_order():
    # f32[129,3]{0,1}: dim 0 (129) is the lane dim, dim 1 (3) the second-minor -> T(4,128);
    # logical padded dims (256, 4).
    assert tiling("f32", (129, 3), (0, 1)) == ((4, 128),)
    assert padded_dims("f32", (129, 3), (0, 1)) == (256, 4)
    # Major dims are not padded: f32[5,3,129] stores 5 x (4 x 256) words.
    assert storage_bytes("f32", (5, 3, 129)) == 5 * 4 * 256 * 4


def test_scalar_occupies_its_tile():
    # f32[]{:T(128)}: the tile's one dimension is beyond the rank, so it pads from 1 to 128
    # elements (XLA's ShapeUtil::ArraySize): 512 B for 4 B of data.
    assert storage_bytes("f32", ()) == 512
    assert padding_waste("f32", ()) == pytest.approx(1 - 4 / 512)


def test_whole_tiles_waste_nothing():
    assert padding_waste("f32", (16, 256)) == 0.0
    assert padding_waste("bf16", (8, 128)) == 0.0
    assert storage_bytes("bf16", (8, 128)) == 8 * 128 * 2


def test_tile_text():
    assert tile_text(((8, 128), (2, 1))) == "T(8,128)(2,1)"
    assert tile_text(((1024,), (128,), (2, 1))) == "T(1024)(128)(2,1)"
    assert tile_text(()) == ""


def test_token_has_no_tiles():
    assert tiling("token", (), ()) == ()


def test_element_type_by_name_or_dtype():
    assert storage_bytes(DTYPES["bf16"], (17, 200)) == storage_bytes("bf16", (17, 200))
    # s4[3,200]: 8 rows x 256 lanes of half-bytes = 1024 B.
    assert storage_bytes("s4", (3, 200)) == 1024


@pytest.mark.parametrize("a, b, same", [
    # Splitting the minor dim: f32[8,256]{1,0} is two (8,128) tiles, row r of tile j at
    # 1024j + 128r; f32[8,2,128]{2,1,0} tiles its [2,128] minor dims by (2,128), so element
    # (r,j,c) lies at 256r + 128j + c: another order of the same elements, a copy.
    (("f32", (8, 256), (1, 0)), ("f32", (8, 2, 128), (2, 1, 0)), False),
    # ... unless the split-off dim is major: {2,0,1} tiles [8,128] by (8,128) and puts j
    # outermost, at 1024j + 128r + c: the same offsets, a bitcast.
    (("f32", (8, 256), (1, 0)), ("f32", (8, 2, 128), (2, 0, 1)), True),
    # Merging a major dim into a second-minor dim of whole tiles: f32[4,8,256] holds
    # (a,r,c) at 2048a + ...; f32[32,256] row 8a + r lies in tile row a: the same.
    (("f32", (4, 8, 256), (2, 1, 0)), ("f32", (32, 256), (1, 0)), True),
    # ... but not one of 6 rows, which pads to 8 (4x8 rows stored, not 24).
    (("f32", (4, 6, 256), (2, 1, 0)), ("f32", (24, 256), (1, 0)), False),
    # A size-1 dim added most major moves nothing: f32[2,32]{1,0:T(2,128)} and
    # f32[2,32,1]{1,0,2:T(2,128)} are one 2x128 tile; minor, it pads each of the 64
    # elements to a 128-lane row.
    (("f32", (2, 32), (1, 0)), ("f32", (2, 32, 1), (1, 0, 2)), True),
    (("f32", (2, 32), (1, 0)), ("f32", (2, 32, 1), (2, 1, 0)), False),
    # A scalar and a one-element vector are one T(128) tile each.
    (("f32", (), ()), ("f32", (1,), (0,)), True),
])
def test_memory_image_tells_bitcasts_from_copies(a, b, same):
    assert (memory_image(*a) == memory_image(*b)) is same
