"""``@triton.jit`` helpers that unpack and pack the TPU sub-32-bit tiled formats.

The seed ``tiled_layout_tpu_formats.bn.txt`` (Figure 2 and the "TPU 16-bit tile format"
paragraph) describes ``(8,128)(2,1)`` for bf16: the second-level ``2x1`` tile puts "one element
from an even row and one from an odd row" in one 32-bit word.  The figure numbers the elements
of the ``2x1`` tile by their linear index in memory: the even-row element comes first (index
``2k``), the odd-row element second (``2k+1``).  Memory is little-endian on every target we
emit for, so our reading is:

* ``(2,1)``: bits 0-15 (low half) = element of row ``2r``, bits 16-31 = element of row ``2r+1``.
* ``(4,1)``: bits ``8j .. 8j+7`` = element of row ``4r+j``, ``j = 0..3``.
* ``(32,1)``: bit ``j`` = PRED element of row ``32r+j`` (1 = true), ``j = 0..31``.

Everything uses shifts, masks and ``.to(..., bitcast=True)`` only (no inline asm), so it runs
in the interpreter (``TRITON_INTERPRET=1``) and compiles for a GPU.  Words may be ``uint32``
or ``int32`` tensors; unpacked 16-bit values are returned as ``uint16`` bit patterns (bitcast
them with ``.to(tl.bfloat16, bitcast=True)``), bytes as ``uint8``, bits as ``int1``.  Packed
words are ``uint32``.
"""
from __future__ import annotations

import triton.language as tl
from triton_backend.device_lib.device_function import device_function


@device_function
def as_uint32(words):
    """The same 32 bits as ``uint32`` (no-op for ``uint32`` input)."""
    return words.to(tl.uint32, bitcast=True)


@device_function
def unpack_halves(words):
    """``(even_row, odd_row)`` 16-bit patterns (``uint16``) from ``(2,1)``-packed words."""
    bits = as_uint32(words)
    even = (bits & 0xFFFF).to(tl.uint16)
    odd = (bits >> 16).to(tl.uint16)
    return even, odd


@device_function
def pack_halves(even, odd):
    """One ``uint32`` word per pair: ``even`` (any 16-bit type) low, ``odd`` high."""
    lo = even.to(tl.uint16, bitcast=True).to(tl.uint32)
    hi = odd.to(tl.uint16, bitcast=True).to(tl.uint32)
    return lo | (hi << 16)


@device_function
def unpack_bytes(words):
    """``(row0, row1, row2, row3)`` bytes (``uint8``) from ``(4,1)``-packed words."""
    bits = as_uint32(words)
    b0 = (bits & 0xFF).to(tl.uint8)
    b1 = ((bits >> 8) & 0xFF).to(tl.uint8)
    b2 = ((bits >> 16) & 0xFF).to(tl.uint8)
    b3 = (bits >> 24).to(tl.uint8)
    return b0, b1, b2, b3


@device_function
def pack_bytes(b0, b1, b2, b3):
    """One ``uint32`` word from four 8-bit values (any 8-bit type), ``b0`` least significant."""
    w0 = b0.to(tl.uint8, bitcast=True).to(tl.uint32)
    w1 = b1.to(tl.uint8, bitcast=True).to(tl.uint32)
    w2 = b2.to(tl.uint8, bitcast=True).to(tl.uint32)
    w3 = b3.to(tl.uint8, bitcast=True).to(tl.uint32)
    return w0 | (w1 << 8) | (w2 << 16) | (w3 << 24)


@device_function
def unpack_pred_bit(words, row_in_word):
    """The PRED element ``row_in_word`` (0..31, tensor or scalar) of ``(32,1)``-packed words."""
    bits = as_uint32(words)
    return ((bits >> row_in_word.to(tl.uint32)) & 1) != 0


@device_function
def unpack_preds(words):
    """All 32 PRED elements of each word: ``[N]`` words -> ``[32, N]`` ``int1`` (row = bit)."""
    bits = as_uint32(words)
    shifts = tl.arange(0, 32).to(tl.uint32)
    return ((bits[None, :] >> shifts[:, None]) & 1) != 0


@device_function
def pack_preds(preds):
    """``[32, N]`` booleans (row ``j`` = bit ``j``) -> ``[N]`` ``uint32`` words."""
    shifts = tl.arange(0, 32).to(tl.uint32)
    # Bits are disjoint, so the sum equals the bitwise or (and tl.sum exists everywhere).
    return tl.sum((preds != 0).to(tl.uint32) << shifts[:, None], axis=0)
