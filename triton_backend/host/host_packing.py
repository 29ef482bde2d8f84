"""Exact packing of torch tensors into the physical buffer of a tiled layout, and back.

The torch twin of ``tiling.layouts.packing``: the same pad / reshape / transpose steps
(``tiling.layouts.tiled_layout.TiledLayout.steps``) run as torch ops on the tensor's device, then sub-32-bit
layouts with a ``(k,1)`` last tile (or ``E(n)``) put ``k`` elements in each ``torch.uint32``
word, lowest bits first.  Values move as same-width integers, so NaN payloads and ``-0.0``
survive.

>>> x = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.bfloat16)
>>> layout = parse_tiles("1,0", "(2,2)(2,1)")
>>> [hex(w) for w in pack_tensor(x, layout).tolist()]
['0x40403f80', '0x40804000']
>>> unpack_tensor(pack_tensor(x, layout), (2, 2), layout, "bf16").tolist()
[[1.0, 2.0], [3.0, 4.0]]
"""
from __future__ import annotations

from typing import Sequence

import torch

from fusion.ir.element_types import element_type
from fusion.ir.layout import Layout
from triton_backend.host.host_dtypes import (BYTE_FLOAT_DTYPE_NAMES, OWN_DTYPE_NAMES,
                                            SUB_BYTE_DTYPE_NAMES)
from tiling.layouts.tiled_layout import (
    LayoutError,
    Step,
    TiledLayout,
    elements_per_word,
    parse_tiles,
    storage_bits,
)
from tiling.layouts.packing import check_buffer, fill_value, run_steps, run_steps_backwards

TORCH_DTYPES: dict[str, torch.dtype] = {
    hlo: getattr(torch, name) for hlo, name in OWN_DTYPE_NAMES.items()}
"""HLO element type -> the torch dtype holding it (types torch lacks are not packable here)."""

#: Sub-byte integers: a logical tensor holds one value per byte (sign- or zero-extended).
SUB_BYTE_CARRIERS: dict[str, torch.dtype] = {
    hlo: getattr(torch, name) for hlo, name in SUB_BYTE_DTYPE_NAMES.items()}
#: 8-bit floats a Triton kernel for NVIDIA GPUs cannot take as such (``host_dtypes``): a uint8
#: tensor holds their bytes, as the kernels move them (``device_lib.float8_formats``).
BYTE_CARRIERS: dict[str, torch.dtype] = {
    hlo: getattr(torch, name) for hlo, name in BYTE_FLOAT_DTYPE_NAMES.items()}
_HLO_OF_TORCH = {v: k for k, v in TORCH_DTYPES.items()}
_CARRIERS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def hlo_type_of(dtype: torch.dtype) -> str:
    """The HLO element type of a torch dtype.

    >>> hlo_type_of(torch.bfloat16)
    'bf16'
    """
    try:
        return _HLO_OF_TORCH[dtype]
    except KeyError:
        raise LayoutError(f"torch dtype {dtype} has no HLO element type") from None


def torch_dtype_of(dtype: str) -> torch.dtype:
    """The torch dtype of an HLO element type (``LayoutError`` when torch has none)."""
    try:
        return TORCH_DTYPES.get(dtype) or SUB_BYTE_CARRIERS.get(dtype) or BYTE_CARRIERS[dtype]
    except KeyError:
        raise LayoutError(f"element type {dtype} has no torch dtype") from None


def _carrier(t: torch.Tensor) -> torch.Tensor:
    uint = _CARRIERS.get(t.element_size())
    return t.view(uint) if uint is not None else t


def _fill(fill: object, hlo: str, device: torch.device) -> torch.Tensor:
    """``fill``'s bits in the carrier dtype, converted exactly as ``tiling.layouts.packing`` does
    (so both packers agree on the padding even where libraries round differently)."""
    bits = fill_value(fill, element_type(hlo).numpy_dtype())
    size = bits.dtype.itemsize
    if size not in _CARRIERS:
        return torch.from_numpy(bits.reshape(1).copy()).to(device)
    value = int(bits)
    if size > 1 and value >= 1 << (8 * size - 1):
        value -= 1 << (8 * size)  # the signed carrier holds the same bits
    return torch.tensor([value], dtype=_CARRIERS[size], device=device)


def apply_steps_tensor(t: torch.Tensor, steps: Sequence[Step], fill: torch.Tensor) -> torch.Tensor:
    """Run pad / reshape / transpose steps on a tensor; padding gets ``fill`` (a 1-element tensor)."""
    return run_steps(t, steps, torch.permute, lambda dims: fill.reshape(()).expand(dims).clone())


def undo_steps_tensor(t: torch.Tensor, steps: Sequence[Step], dims: Sequence[int]) -> torch.Tensor:
    """The inverse of ``apply_steps_tensor`` for a start shape ``dims``."""
    return run_steps_backwards(t, steps, dims, torch.permute)


def pack_tensor(
    t: torch.Tensor, layout: Layout, dtype: str | None = None, fill: object = 0
) -> torch.Tensor:
    """The physical buffer of ``t`` under ``layout``: flat, in memory order, on ``t``'s device.

    ``torch.uint32`` words for word-packed layouts, else ``t.dtype`` elements.  ``fill`` goes
    in the padding (``float("nan")`` or a sentinel lets a test catch reads of padding).
    """
    hlo = dtype or hlo_type_of(t.dtype)
    if torch_dtype_of(hlo) != t.dtype:
        raise LayoutError(f"tensor of {t.dtype} cannot hold element type {hlo}")
    tiled = TiledLayout.of(tuple(t.shape), layout)
    pad = _fill(fill, hlo, t.device)
    physical = apply_steps_tensor(_carrier(t.contiguous()), tiled.steps(), pad).reshape(-1)
    per = elements_per_word(hlo, layout)
    if per == 1:
        return physical.contiguous().view(t.dtype)
    return _pack_words(physical, storage_bits(hlo, layout), per, pad)


def unpack_tensor(buffer: torch.Tensor, dims: Sequence[int], layout: Layout, dtype: str) -> torch.Tensor:
    """The logical tensor held in ``buffer`` (as ``pack_tensor`` gives it); padding is dropped."""
    torch_dtype = torch_dtype_of(dtype)
    tiled = TiledLayout.of(dims, layout)
    n = tiled.padded_elements
    per = elements_per_word(dtype, layout)
    buffer = buffer.reshape(-1)
    check_buffer(buffer.numel(), buffer.dtype, n, per, element=torch_dtype, word=torch.uint32,
                 layout=layout, dtype=dtype, dims=dims)
    if per == 1:
        flat = _carrier(buffer)
    else:
        carrier = _CARRIERS[torch.empty((), dtype=torch_dtype).element_size()]
        bits = storage_bits(dtype, layout)
        flat = _unpack_words(buffer, bits, per, carrier)[:n]
        et = element_type(dtype)
        if et.is_integer and et.is_signed and et.bits < 8:  # a sub-byte field: sign-extend
            wide = flat.to(torch.int16) & ((1 << et.bits) - 1)
            flat = torch.where(wide >= 1 << (et.bits - 1), wide - (1 << et.bits), wide).to(carrier)
    physical = flat.reshape(tiled.physical_shape)
    logical = undo_steps_tensor(physical, tiled.steps(), tiled.dims)
    return logical.contiguous().view(torch_dtype).reshape(tiled.dims)


def _pack_words(flat: torch.Tensor, bits: int, per: int, pad: torch.Tensor) -> torch.Tensor:
    extra = (-flat.numel()) % per
    if extra:
        flat = torch.cat([flat, pad.expand(extra)])
    # int64 arithmetic: torch has few ops on uint32; the fields never overlap, so sum == or.
    values = flat.to(torch.int64) & ((1 << bits) - 1)
    shifts = torch.arange(per, dtype=torch.int64, device=flat.device) * bits
    words = (values.reshape(-1, per) << shifts).sum(dim=1)
    return words.to(torch.uint32)


def _unpack_words(words: torch.Tensor, bits: int, per: int, carrier: torch.dtype) -> torch.Tensor:
    shifts = torch.arange(per, dtype=torch.int64, device=words.device) * bits
    values = ((words.to(torch.int64).reshape(-1, 1) >> shifts) & ((1 << bits) - 1)).reshape(-1)
    if carrier == torch.int16:
        # Values are 0..65535; int16 holds the upper half as negatives with the same bits.
        values = torch.where(values >= 1 << 15, values - (1 << 16), values)
    return values.to(carrier)
