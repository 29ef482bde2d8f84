"""Which host tensors are views of an HLO buffer: the element types a torch tensor can hold, and
the layouts whose physical buffer is the row-major logical tensor (so a bitcast or reshape runs
on the host as a view, never a copy).  Torch-free: ``check`` uses it too.
"""
from __future__ import annotations

from fusion.ir.shape import ArrayShape, Shape
from triton_backend.host.host_dtypes import HOST_DTYPE_NAMES

#: Element types a host tensor can hold.
HOST_TENSOR_TYPES = frozenset(HOST_DTYPE_NAMES)


def _bits(shape: Shape) -> int | None:
    return shape.element_type.bits if isinstance(shape, ArrayShape) else None


def is_view_layout(shape: Shape) -> bool:
    """True when a row-major logical tensor is also the physical buffer of ``shape``.

    >>> from fusion.ir.layout import Layout
    >>> is_view_layout(ArrayShape("f32", (4, 1, 6), Layout((2, 0, 1))))
    True
    >>> is_view_layout(ArrayShape("f32", (4, 6), Layout((0, 1))))
    False
    """
    if not isinstance(shape, ArrayShape) or shape.dtype not in HOST_TENSOR_TYPES:
        return False
    layout = shape.effective_layout
    if layout.is_tiled or layout.element_size_in_bits:
        return False
    order = [d for d in reversed(layout.minor_to_major) if shape.dims[d] != 1]
    return order == sorted(order)


def is_host_view(source: Shape, result: Shape) -> bool:
    """True when ``host_ops`` runs a bitcast/reshape from ``source`` to ``result`` as a view.

    >>> from fusion.ir.layout import Layout
    >>> is_host_view(ArrayShape("f32", (2, 3)), ArrayShape("f32", (6,)))
    True
    >>> is_host_view(ArrayShape("f32", (2, 3), Layout((0, 1))), ArrayShape("f32", (6,)))
    False
    """
    return (is_view_layout(source) and is_view_layout(result) and _bits(source) == _bits(result)
            and source.num_elements == result.num_elements)
