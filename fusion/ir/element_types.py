"""HLO element types (XLA's ``PrimitiveType``) as data.

Every type XLA prints has an entry keyed by its HLO spelling, so ``ELEMENT_TYPES["bf16"].bits``
is 16.  NumPy dtypes come from ``ml_dtypes`` for the types NumPy lacks (bf16, the f8/f4 types,
the 2- and 4-bit integers), imported lazily so that ``check`` never pays for it.

>>> ELEMENT_TYPES["bf16"].is_float, ELEMENT_TYPES["bf16"].bits
(True, 16)
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ElementType:
    """One HLO element type.

    ``kind`` is one of ``"pred"``, ``"signed"``, ``"unsigned"``, ``"float"``, ``"complex"``,
    ``"token"`` (XLA's ``OPAQUE`` prints as ``opaque``, kept as kind ``"token"``: no values).
    ``numpy_name`` is the NumPy / ml_dtypes dtype name that holds values of this type exactly.
    """

    name: str
    bits: int
    kind: str
    numpy_name: str | None

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_integer(self) -> bool:
        return self.kind in ("signed", "unsigned")

    @property
    def is_signed(self) -> bool:
        return self.kind in ("signed", "float", "complex")

    @property
    def is_complex(self) -> bool:
        return self.kind == "complex"

    @property
    def is_pred(self) -> bool:
        return self.kind == "pred"

    @property
    def has_values(self) -> bool:
        return self.kind != "token"

    @property
    def byte_size(self) -> int:
        """Bytes one element takes in an unpacked buffer (sub-byte types take one byte)."""
        return max(1, self.bits // 8)

    def numpy_dtype(self) -> np.dtype:
        """The NumPy dtype that holds this type's values exactly.

        >>> ELEMENT_TYPES["f32"].numpy_dtype()
        dtype('float32')
        """
        if self.numpy_name is None:
            raise TypeError(f"element type {self.name} has no array values")
        if hasattr(np, self.numpy_name) and self.numpy_name not in _ML_DTYPES_NAMES:
            return np.dtype(getattr(np, self.numpy_name))
        import ml_dtypes  # noqa: PLC0415 - lazy: only evaluation needs it

        return np.dtype(getattr(ml_dtypes, self.numpy_name))


_ML_DTYPES_NAMES = frozenset(
    {
        "bfloat16", "float8_e5m2", "float8_e4m3fn", "float8_e4m3b11fnuz", "float8_e5m2fnuz",
        "float8_e4m3fnuz", "float8_e4m3", "float8_e3m4", "float4_e2m1fn", "float8_e8m0fnu",
        "int2", "int4", "uint2", "uint4",
    }
)

_TABLE = (
    ElementType("pred", 8, "pred", "bool_"),
    ElementType("s2", 2, "signed", "int2"),
    ElementType("s4", 4, "signed", "int4"),
    ElementType("s8", 8, "signed", "int8"),
    ElementType("s16", 16, "signed", "int16"),
    ElementType("s32", 32, "signed", "int32"),
    ElementType("s64", 64, "signed", "int64"),
    ElementType("u2", 2, "unsigned", "uint2"),
    ElementType("u4", 4, "unsigned", "uint4"),
    ElementType("u8", 8, "unsigned", "uint8"),
    ElementType("u16", 16, "unsigned", "uint16"),
    ElementType("u32", 32, "unsigned", "uint32"),
    ElementType("u64", 64, "unsigned", "uint64"),
    ElementType("f16", 16, "float", "float16"),
    ElementType("bf16", 16, "float", "bfloat16"),
    ElementType("f32", 32, "float", "float32"),
    ElementType("f64", 64, "float", "float64"),
    ElementType("f8e5m2", 8, "float", "float8_e5m2"),
    ElementType("f8e4m3fn", 8, "float", "float8_e4m3fn"),
    ElementType("f8e4m3b11fnuz", 8, "float", "float8_e4m3b11fnuz"),
    ElementType("f8e5m2fnuz", 8, "float", "float8_e5m2fnuz"),
    ElementType("f8e4m3fnuz", 8, "float", "float8_e4m3fnuz"),
    ElementType("f8e4m3", 8, "float", "float8_e4m3"),
    ElementType("f8e3m4", 8, "float", "float8_e3m4"),
    ElementType("f4e2m1fn", 4, "float", "float4_e2m1fn"),
    ElementType("f8e8m0fnu", 8, "float", "float8_e8m0fnu"),
    ElementType("c64", 64, "complex", "complex64"),
    ElementType("c128", 128, "complex", "complex128"),
    ElementType("token", 0, "token", None),
    ElementType("opaque", 0, "token", None),
)

ELEMENT_TYPES: dict[str, ElementType] = {t.name: t for t in _TABLE}

#: The real type of each complex type's parts (what ``real`` and ``imag`` give).
COMPLEX_PART_TYPES: dict[str, str] = {"c64": "f32", "c128": "f64"}

#: The complex type whose parts have each real type (what ``complex`` gives).
COMPLEX_OF_PART_TYPES: dict[str, str] = {part: c for c, part in COMPLEX_PART_TYPES.items()}


def element_type(name: str) -> ElementType:
    """Look up an element type by its HLO spelling; ``KeyError`` names the bad spelling."""
    try:
        return ELEMENT_TYPES[name]
    except KeyError:
        raise KeyError(f"unknown element type {name!r}") from None


def element_type_of_numpy(dtype: np.dtype) -> ElementType:
    """The HLO element type whose NumPy dtype is ``dtype``.

    >>> element_type_of_numpy(np.dtype("int32")).name
    's32'
    """
    dtype = np.dtype(dtype)
    for t in _TABLE:
        if t.numpy_name is not None and t.name != "opaque":
            try:
                if t.numpy_dtype() == dtype:
                    return t
            except (AttributeError, TypeError):
                continue
    raise KeyError(f"no HLO element type for NumPy dtype {dtype}")
