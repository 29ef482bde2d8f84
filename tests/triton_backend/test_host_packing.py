"""Torch packing agrees bit for bit with NumPy packing and round-trips exactly."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fusion.ir.element_types import ELEMENT_TYPES
from fusion.ir.layout import COMBINED, Layout, Tile
from fusion.ir.shape import ArrayShape
from tiling.layouts.tiled_layout import LayoutError, parse_tiles
from tiling.layouts.packing import pack, unpack
from tiling.layouts.tpu_formats import tpu_layout
from triton_backend.host.host_packing import TORCH_DTYPES, pack_tensor, unpack_tensor

_UINT_NP = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_INT_TORCH = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def random_pair(dtype: str, dims, seed=0):
    """The same arbitrary bit patterns as a NumPy array and a torch tensor."""
    np_dtype = ELEMENT_TYPES[dtype].numpy_dtype()
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=(math.prod(dims) * np_dtype.itemsize,), dtype=np.uint8)
    if dtype == "pred":
        raw &= 1
    array = raw.view(np_dtype).reshape(dims)
    tensor = torch.from_numpy(raw.copy()).view(TORCH_DTYPES[dtype]).reshape(dims)
    return array, tensor


def tensor_bytes(t: torch.Tensor) -> bytes:
    if t.dtype == torch.complex128:
        return t.contiguous().numpy().tobytes()
    return t.contiguous().view(_INT_TORCH[t.element_size()]).numpy().tobytes()


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and tensor_bytes(a) == tensor_bytes(b)


@pytest.mark.parametrize("dtype", sorted(TORCH_DTYPES))
def test_matches_numpy_packing_and_round_trips(dtype):
    dims = (5, 7)
    array, tensor = random_pair(dtype, dims, seed=len(dtype))
    layouts = [Layout((1, 0)), parse_tiles("0,1", "(2,4)"), parse_tiles("1,0", "(4,2)(2,1)")]
    if ELEMENT_TYPES[dtype].bits < 32 or dtype == "f32":
        layouts.append(tpu_layout(ArrayShape(dtype, dims)))
    for layout in layouts:
        expected = pack(array, layout, dtype, fill=1)
        got = pack_tensor(tensor, layout, fill=1)
        assert tensor_bytes(got) == expected.tobytes(), str(layout)
        assert got.numel() == expected.size
        back = unpack_tensor(got, dims, layout, dtype)
        assert same_bits(back, tensor), str(layout)


def test_word_packed_buffers_are_uint32():
    x = torch.randn(37, 300).to(torch.bfloat16)
    layout = tpu_layout(ArrayShape("bf16", (37, 300)))
    words = pack_tensor(x, layout)
    assert words.dtype == torch.uint32 and words.numel() == 40 * 384 // 2
    u = x.view(torch.int16).to(torch.int64) & 0xFFFF
    assert words[0].item() == (u[0, 0] | (u[1, 0] << 16)).item()
    assert same_bits(unpack_tensor(words, (37, 300), layout, "bf16"), x)
    p = torch.rand(37, 300) > 0.5
    layout = tpu_layout(ArrayShape("pred", (37, 300)))
    words = pack_tensor(p, layout)
    assert words.numel() == 64 * 384 // 32
    assert torch.equal(unpack_tensor(words, (37, 300), layout, "pred"), p)


def test_nan_payloads_negative_zero_and_nan_fill():
    x = torch.tensor([[float("nan"), -0.0, 1.0]], dtype=torch.float16)
    x.view(torch.int16)[0, 0] = 0x7D01  # a signalling NaN with payload
    layout = parse_tiles("1,0", "(2,2)")
    buf = pack_tensor(x, layout, fill=float("nan"))
    assert torch.isnan(buf).sum().item() == 1 + 5  # the NaN element plus the padding
    assert same_bits(unpack_tensor(buf, (1, 3), layout, "f16"), x)


def test_bad_inputs():
    with pytest.raises(LayoutError, match="cannot hold"):
        pack_tensor(torch.zeros(2, 2), parse_tiles("1,0"), "bf16")
    with pytest.raises(LayoutError, match="torch.uint32 words"):
        unpack_tensor(torch.zeros(3), (2, 2), parse_tiles("1,0", "(2,2)(2,1)"), "bf16")
    with pytest.raises(LayoutError, match="not a"):
        pack_tensor(torch.zeros(2, 2, dtype=torch.int32), parse_tiles("1,0"), fill=float("nan"))


@st.composite
def cases(draw):
    rank = draw(st.integers(0, 3))
    dims = tuple(draw(st.lists(st.integers(1, 5), min_size=rank, max_size=rank)))
    m2m = tuple(draw(st.permutations(range(rank))))
    dtype = draw(st.sampled_from(sorted(TORCH_DTYPES)))
    tiles = []
    for _ in range(draw(st.integers(0, 2))):
        k = draw(st.integers(1, rank + 1))
        t = draw(st.lists(st.integers(1, 4), min_size=k, max_size=k))
        if k > 1 and draw(st.booleans()):
            t[0] = COMBINED
        tiles.append(Tile(tuple(t)))
    bits = ELEMENT_TYPES[dtype].bits
    if bits < 32 and draw(st.booleans()):
        tiles.append(Tile((32 if dtype == "pred" else 32 // bits, 1)))
    return dims, Layout(m2m, tuple(tiles)), dtype, draw(st.integers(0, 2**16))


@settings(max_examples=80, deadline=None)
@given(cases())
def test_pack_then_unpack_is_identity_and_agrees_with_numpy(case):
    dims, layout, dtype, seed = case
    array, tensor = random_pair(dtype, dims, seed)
    buf = pack_tensor(tensor, layout)
    assert same_bits(unpack_tensor(buf, dims, layout, dtype), tensor)
    assert tensor_bytes(buf) == pack(array, layout, dtype).tobytes()
    assert np.asarray(unpack(pack(array, layout, dtype), dims, layout, dtype)).tobytes() == array.tobytes()
