"""Bit packing helpers, in the interpreter, against NumPy memory-layout packing.

The NumPy truth packs by memory layout, not by shifts: the ``(2,1)`` second-level tile puts
rows ``2r`` and ``2r+1`` of one column next to each other in memory, which is
``x.reshape(R, 2, C).transpose(0, 2, 1)`` made contiguous and viewed as little-endian 32-bit
words.  Likewise for ``(4,1)``; ``(32,1)`` packs bit ``j`` from row ``32r+j``.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from triton_backend.device_lib import bit_packing

ROWS, COLS = 8, 16  # packed rows x columns (words per packed row)
SPECIAL_16 = np.array([0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0x7FC1, 0xFFFF, 0x7F81,
                       0x0001, 0x8001, 0x7C00, 0xFC00, 0x7E01, 0x3F80, 0xBF80, 0x7BFF],
                      dtype=np.uint16)


def np_pack(values: np.ndarray, per_word: int) -> np.ndarray:
    """[per_word*R, C] narrow ints -> [R, C] uint32 by memory layout."""
    rows, cols = values.shape
    grouped = values.reshape(rows // per_word, per_word, cols).transpose(0, 2, 1)
    return np.ascontiguousarray(grouped).view("<u4").reshape(rows // per_word, cols)


def np_pack_bits(preds: np.ndarray) -> np.ndarray:
    rows, cols = preds.shape
    grouped = preds.reshape(rows // 32, 32, cols).transpose(0, 2, 1)  # [R, C, 32]
    bits = np.packbits(np.ascontiguousarray(grouped).astype(np.uint8), axis=-1, bitorder="little")
    return bits.view("<u4").reshape(rows // 32, cols)


@triton.jit
def halves_roundtrip_kernel(w_ptr, even_ptr, odd_ptr, repacked_ptr, N: tl.constexpr):
    o = tl.arange(0, N)
    words = tl.load(w_ptr + o)
    even, odd = bit_packing.unpack_halves(words)
    # Through bf16 and back: bit patterns (NaN payloads, -0.0) must survive a bitcast.
    even_bf16 = even.to(tl.bfloat16, bitcast=True)
    odd_f16 = odd.to(tl.float16, bitcast=True)
    tl.store(even_ptr + o, even_bf16.to(tl.int16, bitcast=True))
    tl.store(odd_ptr + o, odd_f16.to(tl.int16, bitcast=True))
    tl.store(repacked_ptr + o, bit_packing.pack_halves(even_bf16, odd_f16).to(tl.int32, bitcast=True))


@triton.jit
def pack_halves_kernel(even_ptr, odd_ptr, w_ptr, N: tl.constexpr):
    o = tl.arange(0, N)
    packed = bit_packing.pack_halves(tl.load(even_ptr + o), tl.load(odd_ptr + o))
    tl.store(w_ptr + o, packed.to(tl.int32, bitcast=True))


@triton.jit
def bytes_roundtrip_kernel(w_ptr, out_ptr, repacked_ptr, N: tl.constexpr):
    o = tl.arange(0, N)
    words = tl.load(w_ptr + o).to(tl.uint32, bitcast=True)
    b0, b1, b2, b3 = bit_packing.unpack_bytes(words)
    tl.store(out_ptr + o, b0.to(tl.int8, bitcast=True))
    tl.store(out_ptr + N + o, b1.to(tl.int8, bitcast=True))
    tl.store(out_ptr + 2 * N + o, b2.to(tl.int8, bitcast=True))
    tl.store(out_ptr + 3 * N + o, b3.to(tl.int8, bitcast=True))
    tl.store(repacked_ptr + o, bit_packing.pack_bytes(b0, b1, b2, b3).to(tl.int32, bitcast=True))


@triton.jit
def pack_bytes_kernel(b_ptr, w_ptr, N: tl.constexpr):
    o = tl.arange(0, N)
    packed = bit_packing.pack_bytes(tl.load(b_ptr + o), tl.load(b_ptr + N + o),
                                    tl.load(b_ptr + 2 * N + o), tl.load(b_ptr + 3 * N + o))
    tl.store(w_ptr + o, packed.to(tl.int32, bitcast=True))


@triton.jit
def preds_kernel(w_ptr, preds_ptr, unpacked_ptr, by_row_ptr, repacked_ptr, N: tl.constexpr):
    cols = tl.arange(0, N)
    rows = tl.arange(0, 32)
    words = tl.load(w_ptr + cols)
    tl.store(unpacked_ptr + rows[:, None] * N + cols[None, :], bit_packing.unpack_preds(words).to(tl.int8))
    by_row = bit_packing.unpack_pred_bit(words[None, :], rows[:, None])
    tl.store(by_row_ptr + rows[:, None] * N + cols[None, :], by_row.to(tl.int8))
    preds = tl.load(preds_ptr + rows[:, None] * N + cols[None, :]) != 0
    tl.store(repacked_ptr + cols, bit_packing.pack_preds(preds).to(tl.int32, bitcast=True))


def _t(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(array))


@pytest.mark.parametrize("seed", [0, 1])
def test_halves(seed):
    rng = np.random.default_rng(seed)
    values = rng.integers(0, 1 << 16, size=(2 * ROWS, COLS), dtype=np.uint16)
    values.flat[: SPECIAL_16.size] = SPECIAL_16
    values[1, : SPECIAL_16.size] = SPECIAL_16[::-1]
    words = np_pack(values, 2).ravel()
    n = words.size
    even, odd, repacked = (torch.empty(n, dtype=torch.int16), torch.empty(n, dtype=torch.int16),
                           torch.empty(n, dtype=torch.int32))
    halves_roundtrip_kernel[(1,)](_t(words.view(np.int32)), even, odd, repacked, N=n)
    np.testing.assert_array_equal(even.numpy().view(np.uint16).reshape(ROWS, COLS), values[0::2])
    np.testing.assert_array_equal(odd.numpy().view(np.uint16).reshape(ROWS, COLS), values[1::2])
    np.testing.assert_array_equal(repacked.numpy().view(np.uint32), words)

    packed = torch.empty(n, dtype=torch.int32)
    pack_halves_kernel[(1,)](_t(values[0::2].ravel().view(np.int16)), _t(values[1::2].ravel().view(np.int16)),
                             packed, N=n)
    np.testing.assert_array_equal(packed.numpy().view(np.uint32), words)


def test_even_row_is_the_low_half():
    values = np.zeros((2, 1), dtype=np.uint16)
    values[0, 0], values[1, 0] = 0x1234, 0xABCD
    assert np_pack(values, 2)[0, 0] == 0xABCD1234


@pytest.mark.parametrize("seed", [0, 1])
def test_bytes(seed):
    rng = np.random.default_rng(seed)
    values = rng.integers(0, 256, size=(4 * ROWS, COLS), dtype=np.uint8)
    values[0, :4] = [0x00, 0x80, 0xFF, 0x7F]
    words = np_pack(values, 4).ravel()
    n = words.size
    out, repacked = torch.empty(4 * n, dtype=torch.int8), torch.empty(n, dtype=torch.int32)
    bytes_roundtrip_kernel[(1,)](_t(words.view(np.int32)), out, repacked, N=n)
    unpacked = out.numpy().view(np.uint8).reshape(4, ROWS, COLS)
    for j in range(4):
        np.testing.assert_array_equal(unpacked[j], values[j::4])
    np.testing.assert_array_equal(repacked.numpy().view(np.uint32), words)

    packed = torch.empty(n, dtype=torch.int32)
    planes = np.stack([values[j::4].ravel() for j in range(4)]).view(np.int8)
    pack_bytes_kernel[(1,)](_t(planes.ravel()), packed, N=n)
    np.testing.assert_array_equal(packed.numpy().view(np.uint32), words)


@pytest.mark.parametrize("seed", [0, 1])
def test_preds(seed):
    rng = np.random.default_rng(seed)
    preds = rng.integers(0, 2, size=(32, COLS)).astype(bool)
    preds[:, 0], preds[:, 1] = True, False
    preds[31, 2] = True  # the sign bit of an int32 word
    words = np_pack_bits(preds).ravel()
    unpacked = torch.empty((32, COLS), dtype=torch.int8)
    by_row = torch.empty((32, COLS), dtype=torch.int8)
    repacked = torch.empty(COLS, dtype=torch.int32)
    preds_kernel[(1,)](_t(words.view(np.int32)), _t(preds.astype(np.int8)), unpacked, by_row, repacked, N=COLS)
    np.testing.assert_array_equal(unpacked.numpy().astype(bool), preds)
    np.testing.assert_array_equal(by_row.numpy().astype(bool), preds)
    np.testing.assert_array_equal(repacked.numpy().view(np.uint32), words)
    assert words[0] == 0xFFFFFFFF and words[1] == 0
