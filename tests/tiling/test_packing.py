"""NumPy packing: bit-exact round trips, TPU formats, word packing, padding fill."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusion.ir.element_types import ELEMENT_TYPES
from fusion.ir.layout import COMBINED, Layout, Tile
from fusion.ir.shape import ArrayShape
from tiling.layouts.tiled_layout import LayoutError, TiledLayout, elements_per_word, parse_tiles, storage_bits
from tiling.layouts.packing import pack, unpack
from tiling.layouts.tpu_formats import tpu_layout

VALUE_TYPES = [n for n, t in ELEMENT_TYPES.items() if t.has_values]


def random_bits(dtype: str, dims, seed=0) -> np.ndarray:
    """Arbitrary bit patterns of an element type (NaN payloads, -0.0 and all), canonical bytes."""
    et = ELEMENT_TYPES[dtype]
    np_dtype = et.numpy_dtype()
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=(math.prod(dims) * np_dtype.itemsize,), dtype=np.uint8)
    if et.is_pred:
        raw &= 1
    elif et.bits < 8:
        raw &= (1 << et.bits) - 1
    return raw.view(np_dtype).reshape(dims)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def element_bits(values: np.ndarray) -> np.ndarray:
    """Each element's bit pattern as a Python-int-sized unsigned array."""
    size = values.dtype.itemsize
    if size == 16:
        return values.view(np.uint64).reshape(values.shape + (2,))
    return values.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[size])


def test_nan_payloads_and_negative_zero_survive():
    x = np.array([[np.nan, -0.0, 1.5], [np.inf, -np.inf, 0.0]], dtype=np.float32)
    x.view(np.uint32)[0, 0] = 0x7FA00001  # a signalling NaN with a payload
    layout = parse_tiles("1,0", "(8,128)")
    back = unpack(pack(x, layout), (2, 3), layout, "f32")
    assert same_bits(back, x)
    bf = np.array([[-0.0, np.nan]], dtype=ml_dtypes.bfloat16)
    bf.view(np.uint16)[0, 1] = 0xFFC3
    layout = parse_tiles("1,0", "(8,128)(2,1)")
    assert same_bits(unpack(pack(bf, layout), (1, 2), layout, "bf16"), bf)


@pytest.mark.parametrize("dtype", VALUE_TYPES)
def test_round_trip_every_dtype(dtype):
    x = random_bits(dtype, (5, 7), seed=len(dtype))
    for layout in (Layout((1, 0)), parse_tiles("0,1", "(2,4)"), parse_tiles("1,0", "(4,2)(2,1)")):
        buf = pack(x, layout, dtype)
        assert same_bits(unpack(buf, (5, 7), layout, dtype), x), str(layout)


@pytest.mark.parametrize(
    "dtype, dims",
    [("bf16", (37, 300)), ("f16", (9, 130)), ("s8", (37, 300)), ("u8", (5, 129)),
     ("f8e4m3fn", (11, 3)), ("pred", (37, 300)), ("f32", (37, 300)), ("f32", (2, 300)),
     ("s32", (3, 129)), ("f32", (1, 5, 129)), ("f32", (7,))],
)
def test_tpu_formats_place_every_element_at_its_offset(dtype, dims):
    layout = tpu_layout(ArrayShape(dtype, dims))
    x = random_bits(dtype, dims, seed=3)
    buf = pack(x, layout, dtype, fill=1)
    tiled = TiledLayout.of(dims, layout)
    offsets = tiled.offsets_array().reshape(-1)
    per = elements_per_word(dtype, layout)
    bits = storage_bits(dtype, layout)
    values = element_bits(x).reshape(-1).astype(np.uint64)
    if per == 1:
        assert buf.dtype == x.dtype and buf.size == tiled.padded_elements
        got = element_bits(buf)[offsets].astype(np.uint64)
    else:
        assert buf.dtype == np.uint32 and buf.size * per == tiled.padded_elements
        words = buf[offsets // per].astype(np.uint64)
        got = (words >> ((offsets % per) * bits).astype(np.uint64)) & ((1 << bits) - 1)
    np.testing.assert_array_equal(got, values)
    assert same_bits(unpack(buf, dims, layout, dtype), x)


def test_bf16_pairs_even_row_low_half_odd_row_high_half():
    x = np.arange(16 * 256, dtype=np.float32).reshape(16, 256).astype(ml_dtypes.bfloat16)
    layout = parse_tiles("1,0", "(8,128)(2,1)")
    words = pack(x, layout)
    u = x.view(np.uint16).astype(np.uint32)
    # Word 0 of the first tile holds rows 0 and 1 of column 0, word 1 column 1, ...
    np.testing.assert_array_equal(words[:128], u[0, :128] | (u[1, :128] << 16))
    np.testing.assert_array_equal(words[128:256], u[2, :128] | (u[3, :128] << 16))
    # The second 8x128 tile in memory is the next 128 columns of rows 0..7.
    np.testing.assert_array_equal(words[512:640], u[0, 128:] | (u[1, 128:] << 16))


def test_s8_four_rows_per_word_and_pred_one_bit_each():
    x = np.arange(8 * 128, dtype=np.int64).reshape(8, 128).astype(np.int8)
    words = pack(x, parse_tiles("1,0", "(8,128)(4,1)"))
    u = x.view(np.uint8).astype(np.uint32)
    np.testing.assert_array_equal(words[:128], u[0] | u[1] << 8 | u[2] << 16 | u[3] << 24)
    p = np.random.default_rng(1).integers(0, 2, size=(32, 128)).astype(bool)
    words = pack(p, parse_tiles("1,0", "(32,128)(32,1)"))
    assert words.size == 128
    expected = (p.astype(np.uint64) << np.arange(32, dtype=np.uint64)[:, None]).sum(axis=0)
    np.testing.assert_array_equal(words, expected.astype(np.uint32))


def test_padding_gets_the_fill_value():
    x = np.zeros((3, 5), dtype=np.float32)
    layout = parse_tiles("1,0", "(2,2)")
    buf = pack(x, layout, fill=np.nan)
    offsets = TiledLayout.of((3, 5), layout).offsets_array().reshape(-1)
    padding = np.setdiff1d(np.arange(24), offsets)
    assert np.isnan(buf[padding]).all() and len(padding) == 9
    assert (buf[offsets] == 0).all()
    assert (pack(x, layout)[padding] == 0).all()
    s = pack(np.ones((3, 3), np.int8), parse_tiles("1,0", "(4,4)(4,1)"), fill=-7)
    assert s.view(np.int8).tolist().count(-7) == 7


def test_sub_byte_values_pack_into_words_with_element_size():
    x = random_bits("s4", (9,))
    layout = Layout((0,), (), element_size_in_bits=4)
    buf = pack(x, layout)
    assert buf.dtype == np.uint32 and buf.size == 2
    nibbles = x.view(np.uint8).astype(np.uint64)
    assert int(buf[0]) == int((nibbles[:8] << (4 * np.arange(8, dtype=np.uint64))).sum())
    assert same_bits(unpack(buf, (9,), layout, "s4"), x)


def test_bad_inputs_raise_layout_errors():
    layout = parse_tiles("1,0", "(2,2)")
    with pytest.raises(LayoutError, match="needs 24"):
        unpack(np.zeros(23, np.float32), (3, 5), layout, "f32")
    with pytest.raises(LayoutError, match="uint32 words"):
        unpack(np.zeros(3, np.float32), (2, 2), parse_tiles("1,0", "(2,2)(2,1)"), "bf16")
    with pytest.raises(LayoutError, match="cannot hold"):
        pack(np.zeros((2, 2), np.float32), layout, "bf16")
    with pytest.raises(LayoutError, match="not a permutation"):
        pack(np.zeros((2, 2), np.float32), Layout((0, 0)))


@st.composite
def packing_cases(draw):
    rank = draw(st.integers(0, 3))
    dims = tuple(draw(st.lists(st.integers(1, 5), min_size=rank, max_size=rank)))
    m2m = tuple(draw(st.permutations(range(rank))))
    dtype = draw(st.sampled_from(VALUE_TYPES))
    tiles = []
    for _ in range(draw(st.integers(0, 2))):
        k = draw(st.integers(1, rank + 1))
        t = draw(st.lists(st.integers(1, 4), min_size=k, max_size=k))
        if k > 1 and draw(st.booleans()):
            t[0] = COMBINED
        tiles.append(Tile(tuple(t)))
    bits = ELEMENT_TYPES[dtype].bits
    if bits < 32 and draw(st.booleans()):
        per = 32 if dtype == "pred" else 32 // max(bits, 8)
        tiles.append(Tile((per, 1)))
    return dims, Layout(m2m, tuple(tiles)), dtype, draw(st.integers(0, 2**16))


@settings(max_examples=120, deadline=None)
@given(packing_cases())
def test_pack_then_unpack_is_identity(case):
    dims, layout, dtype, seed = case
    x = random_bits(dtype, dims, seed)
    buf = pack(x, layout, dtype, fill=1)
    assert same_bits(unpack(buf, dims, layout, dtype), x)


@pytest.mark.parametrize("fill", [float("nan"), 300, 1.5])
def test_fill_that_the_integer_type_cannot_hold_is_an_error(fill):
    with pytest.raises(LayoutError, match="padding fill"):
        pack(np.zeros((3, 3), np.uint8), parse_tiles("1,0", "(2,2)"), fill=fill)
