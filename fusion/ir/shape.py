"""HLO shapes: arrays (``bf16[256,512]{1,0:T(8,128)(2,1)}``) and tuples.

>>> s = ArrayShape("f32", (3, 5))
>>> str(s), s.rank, s.num_elements
('f32[3,5]', 2, 15)
>>> str(TupleShape((s, ArrayShape("s32", ()))))
'(f32[3,5], s32[])'
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Union

from fusion.ir.element_types import ElementType, element_type
from fusion.ir.layout import Layout, default_layout


@dataclass(frozen=True)
class ArrayShape:
    """An array shape.  ``dynamic[i]`` marks a bounded dynamic dim printed ``<=dims[i]``.

    ``layout`` is ``None`` when the text gave none (XLA then assumes the default layout).
    A token is ``ArrayShape("token", ())``.
    """

    dtype: str
    dims: tuple[int, ...]
    layout: Layout | None = None
    dynamic: tuple[bool, ...] = ()

    def __post_init__(self) -> None:
        if not self.dynamic:
            object.__setattr__(self, "dynamic", (False,) * len(self.dims))

    @property
    def element_type(self) -> ElementType:
        return element_type(self.dtype)

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def num_elements(self) -> int:
        return math.prod(self.dims)

    @property
    def is_tuple(self) -> bool:
        return False

    @property
    def effective_layout(self) -> Layout:
        """The layout, or XLA's default row-major one when the text had none."""
        return self.layout if self.layout is not None else default_layout(self.rank)

    def with_layout(self, layout: Layout | None) -> "ArrayShape":
        return ArrayShape(self.dtype, self.dims, layout, self.dynamic)

    def with_dtype(self, dtype: str) -> "ArrayShape":
        return ArrayShape(dtype, self.dims, self.layout, self.dynamic)

    def dims_text(self) -> str:
        return ",".join(
            ("<=" if dyn else "") + str(d) for d, dyn in zip(self.dims, self.dynamic)
        )

    def __str__(self) -> str:
        text = f"{self.dtype}[{self.dims_text()}]"
        if self.layout is not None:
            text += str(self.layout)
        return text

    def same_dims_and_type(self, other: "Shape") -> bool:
        """Equal ignoring layout: what shape inference compares."""
        return (
            isinstance(other, ArrayShape)
            and other.dtype == self.dtype
            and other.dims == self.dims
            and other.dynamic == self.dynamic
        )


@dataclass(frozen=True)
class TupleShape:
    """A tuple shape ``(s1, s2, ...)``; may nest and may be empty."""

    elements: tuple["Shape", ...]

    @property
    def is_tuple(self) -> bool:
        return True

    def __str__(self) -> str:
        return "(" + ", ".join(str(e) for e in self.elements) + ")"

    def same_dims_and_type(self, other: "Shape") -> bool:
        return (
            isinstance(other, TupleShape)
            and len(other.elements) == len(self.elements)
            and all(a.same_dims_and_type(b) for a, b in zip(self.elements, other.elements))
        )


Shape = Union[ArrayShape, TupleShape]


def flatten_shape(shape: Shape) -> tuple[ArrayShape, ...]:
    """The array leaves of a shape, depth first, as a tuple result is flattened.

    >>> [str(s) for s in flatten_shape(TupleShape((ArrayShape("f32", (2,)),
    ...     TupleShape((ArrayShape("s8", ()),)))))]
    ['f32[2]', 's8[]']
    """
    if isinstance(shape, ArrayShape):
        return (shape,)
    out: list[ArrayShape] = []
    for e in shape.elements:
        out.extend(flatten_shape(e))
    return tuple(out)
