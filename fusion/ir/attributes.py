"""Typed values of HLO instruction attributes.

The parser turns each ``key=value`` it understands into one of these (or a plain ``int``,
``bool``, ``str``, ``tuple[int, ...]``, ``tuple[str, ...]``); anything else, and the opaque
attributes (``metadata``, ``backend_config``, ``frontend_attributes``, ``sharding``,
``control-predecessors``, ...), is kept as ``RawText`` and printed back verbatim.

>>> str(PaddingConfig((PaddingDim(0, 0), PaddingDim(1, 2, 1))))
'0_0x1_2_1'
>>> str(SliceDim(0, 10, 2))
'[0:10:2]'
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Union


@dataclass(frozen=True)
class RawText:
    """An attribute value kept exactly as written (e.g. ``{op_name="jit(f)/add"}``)."""

    text: str

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class SliceDim:
    """One dim of ``slice={[start:limit:stride], ...}``."""

    start: int
    limit: int
    stride: int = 1

    def __str__(self) -> str:
        if self.stride == 1:
            return f"[{self.start}:{self.limit}]"
        return f"[{self.start}:{self.limit}:{self.stride}]"


@dataclass(frozen=True)
class PaddingDim:
    """``low_high[_interior]`` of one dim; low and high may be negative."""

    low: int
    high: int
    interior: int = 0

    def __str__(self) -> str:
        text = f"{self.low}_{self.high}"
        if self.interior:
            text += f"_{self.interior}"
        return text


@dataclass(frozen=True)
class PaddingConfig:
    """``padding=0_0x1_2_1``: one ``PaddingDim`` per dim."""

    dims: tuple[PaddingDim, ...]

    def __str__(self) -> str:
        return "x".join(str(d) for d in self.dims)


@dataclass(frozen=True)
class WindowDim:
    """One dim of a ``window={size=.. stride=.. pad=.. lhs_dilate=.. rhs_dilate=.. rhs_reversal=..}``.

    ``base_dilation`` is XLA's ``lhs_dilate``; ``window_dilation`` is ``rhs_dilate``.
    """

    size: int
    stride: int = 1
    padding_low: int = 0
    padding_high: int = 0
    window_dilation: int = 1
    base_dilation: int = 1
    window_reversal: bool = False


@dataclass(frozen=True)
class Window:
    """A window attribute; prints only the fields that differ from their defaults, as XLA does."""

    dims: tuple[WindowDim, ...]

    def __str__(self) -> str:
        if not self.dims:
            return "{}"
        parts = ["size=" + "x".join(str(d.size) for d in self.dims)]
        if any(d.stride != 1 for d in self.dims):
            parts.append("stride=" + "x".join(str(d.stride) for d in self.dims))
        if any(d.padding_low or d.padding_high for d in self.dims):
            parts.append("pad=" + "x".join(f"{d.padding_low}_{d.padding_high}" for d in self.dims))
        if any(d.base_dilation != 1 for d in self.dims):
            parts.append("lhs_dilate=" + "x".join(str(d.base_dilation) for d in self.dims))
        if any(d.window_dilation != 1 for d in self.dims):
            parts.append("rhs_dilate=" + "x".join(str(d.window_dilation) for d in self.dims))
        if any(d.window_reversal for d in self.dims):
            parts.append(
                "rhs_reversal=" + "x".join("1" if d.window_reversal else "0" for d in self.dims)
            )
        return "{" + " ".join(parts) + "}"


def _value_key(value: Any) -> Any:
    """A key under which equal literal values compare equal, NaN included (NaN != NaN)."""
    if isinstance(value, float):
        return ("nan", math.copysign(1.0, value)) if math.isnan(value) else value
    if isinstance(value, complex):
        return ("complex", _value_key(value.real), _value_key(value.imag))
    return value


@dataclass(frozen=True, eq=False)
class Literal:
    """The value of a ``constant(...)``.

    ``values`` holds the elements flattened in row-major (logical) order as Python values:
    ``bool`` for pred, ``int`` for integers, ``float`` for floats (``inf``/``nan`` included),
    ``complex`` for c64/c128; a tuple-shaped constant holds one ``Literal`` per element in
    ``elements`` instead.  ``dims`` is the logical shape.  Two literals are equal when their
    values are, a NaN being equal to a NaN of the same sign (so a printed module parses back
    equal).

    >>> Literal((1,), (complex(0, float("nan")),)) == Literal((1,), (complex(0, float("nan")),))
    True
    """

    dims: tuple[int, ...]
    values: tuple[Any, ...] = ()
    elements: tuple["Literal", ...] | None = None

    def _key(self) -> tuple:
        return (self.dims, tuple(_value_key(v) for v in self.values), self.elements)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Literal) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())


AttributeValue = Union[
    int, bool, str, tuple, RawText, SliceDim, PaddingConfig, Window, Literal
]
