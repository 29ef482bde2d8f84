"""Torch tensors at the boundary of a compiled module: dtype table, conversions, argument checks.

HLO element types map to the torch dtypes that hold them exactly.  The sub-byte integers (s4,
u4, s2, u2) travel as int8/uint8 tensors holding one value per element (a value outside the
type's range is an error naming the parameter), or as packed uint32 words when the layout says
so (``E(4)``: ``physical_buffer``).  The small floats a Triton kernel for NVIDIA GPUs cannot
take as such (f4e2m1fn, and the f8 variants other than f8e4m3fn and f8e5m2) travel as uint8
tensors of their codes (``BYTE_CARRIERS``); torch's own fnuz and e8m0 tensors are taken too.

Every wrong argument is a :class:`fusion.errors.EvaluationError` naming the parameter (its
number and ``%name``), what was given and what the parameter declares.

>>> import torch
>>> torch_dtype("bf16"), hlo_type_of(torch.float8_e4m3fn)
(torch.bfloat16, 'f8e4m3fn')
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from fusion.ir.element_types import element_type
from fusion.errors import EvaluationError, UnsupportedOpError
from fusion.ir.hlo_module import HloInstruction
from fusion.ir.shape import ArrayShape
from tiling.layouts.tiled_layout import TiledLayout, elements_per_word
from triton_backend.host.host_packing import TORCH_DTYPES as OWN_TORCH_DTYPES
from triton_backend.host.host_packing import (BYTE_CARRIERS, SUB_BYTE_CARRIERS, pack_tensor,
                                             unpack_tensor)

#: Torch's own fnuz tensors, which a parameter of the type takes too (viewed as their bytes,
#: ``BYTE_CARRIERS``: a uint8 tensor holds the 8-bit floats the kernels move as bytes, and
#: ``tensor_from_numpy`` makes one from the ml_dtypes array).
NATIVE_BYTE_TYPES: dict[str, torch.dtype] = {
    hlo: getattr(torch, name) for hlo, name in (("f8e4m3fnuz", "float8_e4m3fnuz"),
                                                ("f8e5m2fnuz", "float8_e5m2fnuz"),
                                                ("f8e8m0fnu", "float8_e8m0fnu"))
    if hasattr(torch, name)}

#: Every element type a host tensor holds: the torch dtype of ``host_dtypes.HOST_DTYPE_NAMES``.
TORCH_DTYPES: dict[str, torch.dtype] = {**OWN_TORCH_DTYPES, **SUB_BYTE_CARRIERS, **BYTE_CARRIERS}
HLO_TYPES: dict[torch.dtype, str] = {dtype: hlo for hlo, dtype in TORCH_DTYPES.items()
                                     if hlo not in SUB_BYTE_CARRIERS and hlo not in BYTE_CARRIERS}

# Types whose NumPy form (ml_dtypes) torch.from_numpy cannot take: moved as raw bits.
_BITS_DTYPES = {8: torch.uint8, 16: torch.uint16}


def torch_dtype(hlo_type: str, where: str | None = None) -> torch.dtype:
    """The torch dtype holding ``hlo_type`` exactly; ``UnsupportedOpError`` if torch has none.

    >>> torch_dtype("s32")
    torch.int32
    """
    try:
        return TORCH_DTYPES[hlo_type]
    except KeyError:
        raise UnsupportedOpError(
            f"element type {hlo_type} has no torch dtype; tensors of it cannot be passed to or "
            "returned from a compiled module", where=where) from None


def hlo_type_of(dtype: torch.dtype) -> str:
    """The HLO spelling of a torch dtype (``str(dtype)`` for one with no HLO type).

    >>> hlo_type_of(torch.bool)
    'pred'
    """
    return HLO_TYPES.get(dtype, str(dtype).removeprefix("torch."))


def tensor_from_numpy(array: np.ndarray, hlo_type: str, device: torch.device | str = "cpu") -> torch.Tensor:
    """A torch tensor with the values of ``array`` (bf16/f8 arrays move as their bits).

    >>> import ml_dtypes
    >>> t = tensor_from_numpy(np.array([1.5, -2.0], ml_dtypes.bfloat16), "bf16")
    >>> t.dtype, t.tolist()
    (torch.bfloat16, [1.5, -2.0])
    """
    dtype = torch_dtype(hlo_type)
    if hlo_type in SUB_BYTE_CARRIERS:  # ml_dtypes int4 & co: one value per byte
        np_carrier = np.dtype(str(dtype).removeprefix("torch."))
        return torch.from_numpy(np.array(np.asarray(array).astype(np_carrier), order="C")).to(device)
    # np.ascontiguousarray would turn a scalar into shape (1,).
    array = np.array(array, dtype=element_type(hlo_type).numpy_dtype(), order="C", copy=True)
    if array.dtype.kind == "V" or array.dtype.name not in _NUMPY_NATIVE:
        bits = _BITS_DTYPES[max(8, element_type(hlo_type).bits)]  # f4e2m1fn: a code a byte
        tensor = torch.from_numpy(array.view(np.dtype(str(bits).removeprefix("torch.")))).view(dtype)
    else:
        tensor = torch.from_numpy(array)
    return tensor.to(device)


_NUMPY_NATIVE = frozenset({"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                           "uint64", "float16", "float32", "float64", "complex64", "complex128"})


def tensor_to_numpy(tensor: torch.Tensor, hlo_type: str | None = None) -> np.ndarray:
    """The values of ``tensor`` as a NumPy array of the HLO type's NumPy dtype (bf16 -> ml_dtypes).
    ``hlo_type`` names the type a carrier holds (a uint8 tensor of f8e4m3 codes); by default
    the tensor's own dtype's.

    >>> tensor_to_numpy(torch.tensor([1.5], dtype=torch.bfloat16)).dtype.name
    'bfloat16'
    >>> tensor_to_numpy(torch.tensor([0x38], dtype=torch.uint8), "f8e4m3").astype(float).tolist()
    [1.0]
    """
    if hlo_type in BYTE_CARRIERS:
        return tensor.detach().to("cpu").contiguous().numpy().view(
            element_type(hlo_type).numpy_dtype())
    hlo = HLO_TYPES.get(tensor.dtype)
    if hlo is None:
        raise EvaluationError(f"tensor of dtype {tensor.dtype} has no HLO element type")
    tensor = tensor.detach().to("cpu").contiguous()
    want = element_type(hlo).numpy_dtype()
    if want.name in _NUMPY_NATIVE:
        return tensor.numpy()
    bits = _BITS_DTYPES[element_type(hlo).bits]
    return tensor.view(bits).numpy().view(want)


def parameter_label(number: int, param: HloInstruction) -> str:
    """How errors name a parameter: ``parameter 0 (%x)``."""
    return f"parameter {number} (%{param.name})"


def validate_arguments(
    parameters: Sequence[HloInstruction], args: Sequence[Any], device: torch.device,
    *, computation: str = "ENTRY",
) -> list[torch.Tensor]:
    """Check ``args`` against ``parameters``; return them as contiguous tensors on ``device``.

    Kernels read raw row-major buffers, so what they get is normalized first: a non-contiguous
    tensor (a transposed view, a strided slice, a zero-stride ``expand``) is copied to a
    contiguous one, a lazily negated or conjugated view (``is_neg``/``is_conj``) is
    materialized, and autograd is detached (compiled modules are not differentiable: their
    outputs never require grad).  Anything that is not a strided tensor, or has the wrong
    shape, dtype or device (``device`` with an index requires that index; all arguments on one
    device), is an ``EvaluationError`` naming the parameter.

    A parameter in a tiled or word-packed layout (``{1,0:T(8,128)(2,1)}``) is returned as its
    flat physical buffer (what kernels read, ``physical_buffer``): its LOGICAL tensor (the
    HLO's dtype and dims) is packed here, padding zero; a tensor that is already that buffer
    (1-D, the physical length and dtype) is taken as is, padding and all.  A tensor matching
    both (a 1-D layout without padding) is taken as logical.

    >>> from fusion.ir.shape import ArrayShape
    >>> p = HloInstruction("x", "parameter", ArrayShape("f32", (2,)), (), (("parameter_number", 0),))
    >>> validate_arguments([p], [torch.zeros(3)], torch.device("cpu"))
    Traceback (most recent call last):
    ...
    fusion.errors.EvaluationError: parameter 0 (%x): has shape [3], but the parameter is f32[2]
    """
    if len(args) != len(parameters):
        wanted = ", ".join(f"%{p.name}: {p.shape}" for p in parameters) or "nothing"
        raise EvaluationError(
            f"{computation} takes {len(parameters)} argument(s) ({wanted}), got {len(args)}",
            where=computation)
    tensors = [_validate_one(n, p, a, device) for n, (p, a) in enumerate(zip(parameters, args))]
    devices = {t.device for t in tensors}
    if len(devices) > 1:
        where = ", ".join(f"{parameter_label(n, p)} on {t.device}"
                          for n, (p, t) in enumerate(zip(parameters, tensors)))
        raise EvaluationError(f"arguments are on different devices ({where}); a module runs on "
                              "one device", where=computation)
    return tensors


def physical_buffer(shape: ArrayShape) -> tuple[torch.dtype, int] | None:
    """``(dtype, length)`` of the flat physical buffer of a tiled or word-packed shape, else None.

    That buffer is what kernels read and write for such a value (``host_packing.pack_tensor``):
    padding included, ``torch.uint32`` words when elements share 32-bit words.

    >>> from tiling.layouts.tiled_layout import parse_tiles
    >>> physical_buffer(ArrayShape("bf16", (37, 300), parse_tiles("1,0", "(8,128)(2,1)")))
    (torch.uint32, 7680)
    >>> physical_buffer(ArrayShape("f32", (37, 300), parse_tiles("1,0", "(8,128)")))
    (torch.float32, 15360)
    >>> physical_buffer(ArrayShape("f32", (37, 300))) is None
    True
    """
    layout = shape.layout
    if layout is None or not (layout.tiles or layout.element_size_in_bits):
        return None
    entries = TiledLayout.of(shape.dims, layout).padded_elements
    per = elements_per_word(shape.dtype, layout)
    if per > 1:
        return torch.uint32, -(-entries // per)
    return torch_dtype(shape.dtype), entries


def pack_logical(tensor: torch.Tensor, shape: ArrayShape) -> torch.Tensor:
    """The physical buffer of a logical ``tensor`` of ``shape`` (itself if ``shape`` is untiled).

    Padding is zero, as in the buffers kernels write (here rows 2 and 3 of each (4,1) word).

    >>> from tiling.layouts.tiled_layout import parse_tiles
    >>> shape = ArrayShape("s8", (2, 3), parse_tiles("1,0", "(4,1)"))
    >>> [hex(w) for w in pack_logical(torch.tensor([[1, 2, 3], [4, 5, 6]], dtype=torch.int8), shape).tolist()]
    ['0x401', '0x502', '0x603']
    """
    if physical_buffer(shape) is None:
        return tensor

    return pack_tensor(tensor, shape.layout, shape.dtype, fill=0)


def unpack_physical(buffer: torch.Tensor, shape: ArrayShape) -> torch.Tensor:
    """The logical tensor of ``shape`` held in its physical ``buffer`` (``buffer`` if untiled).

    >>> from tiling.layouts.tiled_layout import parse_tiles
    >>> shape = ArrayShape("s8", (2, 3), parse_tiles("1,0", "(4,1)"))
    >>> x = torch.tensor([[1, 2, 3], [4, 5, 6]], dtype=torch.int8)
    >>> torch.equal(unpack_physical(pack_logical(x, shape), shape), x)
    True
    """
    if physical_buffer(shape) is None:
        return buffer

    return unpack_tensor(buffer, shape.dims, shape.layout, shape.dtype)


def _validate_one(number: int, param: HloInstruction, arg: Any, device: torch.device) -> torch.Tensor:
    label = parameter_label(number, param)
    shape = param.shape
    if not isinstance(shape, ArrayShape):
        raise UnsupportedOpError(f"has tuple shape {shape}; compiled modules take arrays only",
                                 where=label)
    if not isinstance(arg, torch.Tensor):
        hint = (f"; wrap a Python number as torch.tensor(value, dtype={torch_dtype(shape.dtype)})"
                if isinstance(arg, (bool, int, float, complex)) else "")
        raise EvaluationError(f"expected a torch.Tensor ({shape}), got {type(arg).__name__}{hint}",
                              where=label)
    if arg.layout != torch.strided:
        raise EvaluationError(f"has layout {arg.layout}; compiled modules take dense (strided) "
                              "tensors: convert with .to_dense()", where=label)
    logical = torch_dtype(shape.dtype, where=label)
    if arg.dtype != logical and NATIVE_BYTE_TYPES.get(shape.dtype) == arg.dtype:
        arg = arg.view(logical)  # torch's fnuz tensor: its bytes, as the kernels read them
    physical = physical_buffer(shape)
    is_logical = arg.dtype == logical and tuple(arg.shape) == shape.dims
    if physical is not None and not is_logical:
        if arg.dtype == physical[0] and tuple(arg.shape) == (physical[1],):
            _check_device(arg, device, label)
            return _normalized(arg)
        raise EvaluationError(
            f"has dtype {arg.dtype} ({hlo_type_of(arg.dtype)}) and shape {list(arg.shape)}, but "
            f"the parameter is {shape}: pass its logical tensor ({logical} "
            f"{list(shape.dims)}) or its flat physical buffer ({physical[0]} [{physical[1]}], "
            "as host_packing.pack_tensor makes it)", where=label)
    if arg.dtype != logical:
        raise EvaluationError(f"has dtype {arg.dtype} ({hlo_type_of(arg.dtype)}), but the "
                              f"parameter is {shape} ({logical})", where=label)
    if tuple(arg.shape) != shape.dims:
        raise EvaluationError(f"has shape {list(arg.shape)}, but the parameter is {shape}",
                              where=label)
    _check_device(arg, device, label)
    if shape.dtype in SUB_BYTE_CARRIERS:
        _check_sub_byte_range(arg, shape, label)
    return pack_logical(_normalized(arg), shape)


def _check_sub_byte_range(arg: torch.Tensor, shape: ArrayShape, label: str) -> None:
    """A sub-byte parameter's int8/uint8 tensor holds values of its type only."""
    t = element_type(shape.dtype)
    low, high = (-(1 << (t.bits - 1)), (1 << (t.bits - 1)) - 1) if t.is_signed else (0, (1 << t.bits) - 1)
    if arg.numel() == 0:
        return
    wide = arg.detach().to(torch.int16)
    bad = (wide < low) | (wide > high)
    if bool(bad.any()):
        first = int(wide[bad].reshape(-1)[0])
        raise EvaluationError(f"holds {first}, outside the range [{low}, {high}] of {shape.dtype} "
                              f"(one {shape.dtype} value per element of the {arg.dtype} tensor)",
                              where=label)


def _check_device(arg: torch.Tensor, device: torch.device, label: str) -> None:
    if arg.device.type != device.type or (device.index is not None
                                          and arg.device.index not in (None, device.index)):
        raise EvaluationError(
            f"is on device {arg.device}, but the module runs on {device}"
            + (" (the Triton interpreter: no CUDA device here)" if device.type == "cpu" else ""),
            where=label)


def _normalized(arg: torch.Tensor) -> torch.Tensor:
    # A neg/conj view is a flag over the raw data; a kernel would read the unflagged values.
    arg = arg.detach().resolve_conj().resolve_neg()
    return arg if arg.is_contiguous() else arg.contiguous()


__all__ = ["BYTE_CARRIERS", "HLO_TYPES", "NATIVE_BYTE_TYPES", "TORCH_DTYPES", "hlo_type_of", "pack_logical", "parameter_label",
           "physical_buffer", "tensor_from_numpy", "tensor_to_numpy", "torch_dtype",
           "unpack_physical", "validate_arguments"]
