"""Cotangents as the reverse pass holds them: a name, ``None`` (zero) or a tuple of them.

A tuple-shaped value's cotangent is a Python tuple with one entry per element, so reading one
element of a tuple (``get-tuple-element``) costs no instruction, and a zero cotangent costs
none until a gradient must be materialized.

>>> is_zero((None, (None,))), is_zero(("a", None))
(True, False)
"""
from __future__ import annotations

from typing import Union

from fusion.autodiff.graph_builder import GraphBuilder
from fusion.ir.shape import ArrayShape, Shape, TupleShape

Cotangent = Union[str, None, tuple]


def is_differentiable(shape: Shape) -> bool:
    """Floating-point and complex arrays carry gradients; integers, pred and tokens do not.

    A complex value's cotangent follows JAX's convention: rules transpose the linear maps
    over the complex numbers without conjugating (``real``'s transpose is ``complex(ct, 0)``,
    ``imag``'s ``complex(0, -ct)``), so a real function of real inputs through complex
    values gets JAX's (and the textbook's) gradient."""
    if isinstance(shape, TupleShape):
        return any(is_differentiable(e) for e in shape.elements)
    return shape.element_type.is_float or shape.element_type.is_complex


def is_zero(ct: Cotangent) -> bool:
    if ct is None:
        return True
    if isinstance(ct, tuple):
        return all(is_zero(c) for c in ct)
    return False


def prune(ct: Cotangent, shape: Shape) -> Cotangent:
    """``ct`` with the entries of non-differentiable leaves dropped (made zero)."""
    if ct is None or not is_differentiable(shape):
        return None
    if isinstance(shape, TupleShape):
        assert isinstance(ct, tuple), "a tuple value has a tuple cotangent"
        return tuple(prune(c, s) for c, s in zip(ct, shape.elements))
    return ct


def accumulate(b: GraphBuilder, a: Cotangent, c: Cotangent) -> Cotangent:
    """``a + c``, leaf by leaf, adding only where both are non-zero."""
    if a is None:
        return c
    if c is None:
        return a
    if isinstance(a, tuple):
        return tuple(accumulate(b, x, y) for x, y in zip(a, c))
    return b.add(a, c)


def materialize(b: GraphBuilder, ct: Cotangent, shape: Shape) -> str:
    """One value of ``shape`` holding ``ct``: zeros where it is zero, a tuple for a tuple.

    An array keeps ``shape``'s layout (a ``copy`` changes it when it differs), so the result
    can stand where a value of ``shape`` is expected.
    """
    if isinstance(shape, TupleShape):
        parts = ct if isinstance(ct, tuple) else (None,) * len(shape.elements)
        return b.tuple([materialize(b, c, s) for c, s in zip(parts, shape.elements)])
    if ct is None:
        return b.zeros(shape)
    have = b.array_shape(ct)
    if have.effective_layout != shape.effective_layout:
        return b.emit("copy", (ct,), shape=shape)
    return ct


def unpack(b: GraphBuilder, name: str, shape: Shape) -> Cotangent:
    """The cotangent structure of a (possibly tuple) value ``name``."""
    if isinstance(shape, ArrayShape):
        return name
    return tuple(unpack(b, b.get_tuple_element(name, k), s) for k, s in enumerate(shape.elements))
