"""The torch dtype that holds each HLO element type on the host, by name: one table for the
tensors a compiled module takes and returns, the kernel files' buffer specs and the host views
(torch-free, so ``check`` and the kernel file's text read it too).

A type torch has is held as itself.  The others travel in the integers of their storage, as
the kernels move them: the sub-byte integers one value a byte (sign- or zero-extended), the
small floats Triton has no NVIDIA dtype for their codes a byte (``device_lib.float8_formats``).

>>> HOST_DTYPE_NAMES["bf16"], HOST_DTYPE_NAMES["s4"], HOST_DTYPE_NAMES["f8e4m3fnuz"]
('bfloat16', 'int8', 'uint8')
"""
from __future__ import annotations

#: Types torch holds as themselves: HLO spelling -> torch dtype name.
OWN_DTYPE_NAMES: dict[str, str] = {
    "bf16": "bfloat16", "c128": "complex128", "c64": "complex64", "f16": "float16",
    "f32": "float32", "f64": "float64", "f8e4m3fn": "float8_e4m3fn", "f8e5m2": "float8_e5m2",
    "pred": "bool", "s16": "int16", "s32": "int32", "s64": "int64", "s8": "int8",
    "u16": "uint16", "u32": "uint32", "u64": "uint64", "u8": "uint8",
}

#: Sub-byte integers: one value a byte, in the signed or unsigned byte.
SUB_BYTE_DTYPE_NAMES: dict[str, str] = {"s2": "int8", "s4": "int8", "u2": "uint8", "u4": "uint8"}

#: Small floats a Triton kernel for NVIDIA GPUs cannot take as such (no dtype, or, for the
#: fnuz ones, a dtype Triton keeps to AMD): their codes a byte (f4e2m1fn in the low 4 bits).
BYTE_FLOAT_DTYPE_NAMES: dict[str, str] = {
    "f4e2m1fn": "uint8", "f8e3m4": "uint8", "f8e4m3": "uint8", "f8e4m3b11fnuz": "uint8",
    "f8e4m3fnuz": "uint8", "f8e5m2fnuz": "uint8", "f8e8m0fnu": "uint8",
}

#: Every element type a host tensor holds: HLO spelling -> torch dtype name.
HOST_DTYPE_NAMES: dict[str, str] = {**OWN_DTYPE_NAMES, **SUB_BYTE_DTYPE_NAMES,
                                    **BYTE_FLOAT_DTYPE_NAMES}

__all__ = ["BYTE_FLOAT_DTYPE_NAMES", "HOST_DTYPE_NAMES", "OWN_DTYPE_NAMES",
           "SUB_BYTE_DTYPE_NAMES"]
