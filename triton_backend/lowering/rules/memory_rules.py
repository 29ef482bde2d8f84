"""Rules for values that come from memory or from the HLO text: parameters and constants.

A parameter (or an array constant, passed to the kernel as an extra buffer) is loaded at its
indices through its buffer's addressing (``addressing.buffer_addressing``), masked by the
bounds of every index so that lanes outside the array (partial tiles, padding, other
concatenate pieces) never touch memory.  Scalar constants become ``tl.full`` literals.
Parameters in tiled layouts are read from their physical buffer; word-packed ones through
``packed_access`` (a word per lane, the field shifted out).  Array constants are buffers the
host builds itself, so they are always passed untiled whatever layout the HLO gives them.
``store_output`` writes a kernel result the same ways (packed: whole words only).

>>> from fusion.ir.element_types import ELEMENT_TYPES as T
>>> scalar_literal(float("-inf"), T["f32"])
'tl.full([], -8388608, tl.int32).to(tl.float32, bitcast=True)'
>>> scalar_literal(0.1, T["bf16"]), scalar_literal(True, T["pred"])
('tl.full([], 0.10009765625, tl.float32)', 'tl.full([], 1, tl.int1)')
"""
from __future__ import annotations

import math

import numpy as np

from fusion.ir.attributes import Literal
from fusion.ir.element_types import ElementType
from fusion.errors import UnsupportedOpError
from fusion.ir.hlo_module import HloInstruction
from fusion.ir.layout import Layout
from fusion.ir.shape import ArrayShape
from tiling.maps.affine_expr import AffineExpr
from triton_backend.lowering.emitter.addressing import buffer_addressing
from triton_backend.lowering.emitter.packed_access import emit_packed_load, emit_packed_store
from triton_backend.lowering.emitter.value_emitter import Value, ValueEmitter, array_shape
from triton_backend.lowering.emitter.triton_types import (
    masked_fill,
    register_dtype,
    render_load_widen,
    render_store_narrow,
    storage_dtype,
)


def scalar_literal(value, t: ElementType) -> str:
    """A ``tl`` scalar holding ``value`` (a Literal element) in register representation."""
    if t.is_pred:
        return f"tl.full([], {int(bool(value))}, tl.int1)"
    if t.is_integer:
        return f"tl.full([], {int(value)}, {storage_dtype(t)})"
    if not t.is_float or t.numpy_name is None:
        raise UnsupportedOpError(f"constant of type {t.name} is not supported", where=t.name)
    # XLA parses the decimal text to a double, then rounds it to the declared type.
    rounded = float(np.array(value, np.float64).astype(np.dtype(_numpy_dtype(t))))
    reg = register_dtype(t)
    if math.isfinite(rounded):
        return f"tl.full([], {rounded!r}, {reg})"
    bits_type, int_type = ("<f8", "tl.int64") if reg == "tl.float64" else ("<f4", "tl.int32")
    bits = int(np.array(rounded, bits_type).view("<i8" if bits_type == "<f8" else "<i4"))
    return f"tl.full([], {bits}, {int_type}).to({reg}, bitcast=True)"


def _numpy_dtype(t: ElementType):
    import ml_dtypes  # noqa: F401 - registers bfloat16 with numpy
    return np.dtype(t.numpy_name)


def load_buffer(em: ValueEmitter, instr: HloInstruction, indices: tuple[AffineExpr, ...]) -> str:
    """Emit the masked load of ``instr``'s buffer at ``indices``; return the widened value."""
    shape = array_shape(instr)
    buffer = em.pointer_for(instr)
    if instr.opcode == "constant":
        shape = untiled(shape)
    addressing = buffer_addressing(shape, instr.name)
    mask = em.in_bounds(indices, shape.dims)
    if addressing.is_packed:
        load = emit_packed_load(em, buffer.pointer, addressing, indices, mask, instr.name)
    else:
        offset = em.index_text(addressing.element_offset(indices))
        fill = masked_fill(shape.element_type)
        load = (f"tl.load({buffer.pointer} + {offset}, mask={mask}, other={fill})" if mask
                else f"tl.load({buffer.pointer} + {offset})")
    return em.bind(render_load_widen(load, shape.element_type), instr.name)


def untiled(shape: ArrayShape) -> ArrayShape:
    """``shape`` with only its dim order kept (how the host passes array constants).

    >>> from tiling.layouts.tiled_layout import parse_tiles
    >>> str(untiled(ArrayShape("bf16", (4, 4), parse_tiles("0,1", "(8,128)(2,1)"))))
    'bf16[4,4]{0,1}'
    """
    if shape.layout is None:
        return shape
    return shape.with_layout(Layout(tuple(shape.layout.minor_to_major)))


def store_output(em: ValueEmitter, value: str, shape: ArrayShape, pointer: str,
                 indices: tuple[AffineExpr, ...], mask: str, zero: str, where: str,
                 tile: tuple[AffineExpr, ...] = ()) -> None:
    """Store ``value`` (register representation) over the output tile at ``indices``.

    ``tile`` holds all the tile's dim variables (default: ``indices``), ``mask`` is true on
    the lanes to store, ``zero`` an index-typed zero tensor spanning the tile; packed
    layouts are written as whole words (see ``packed_access``).
    """
    addressing = buffer_addressing(shape, where)
    narrow = render_store_narrow(value, shape.element_type)
    if addressing.is_packed:
        emit_packed_store(em, pointer, addressing, narrow, indices, mask, zero, tile or indices)
        return
    offset = em.index_text(addressing.element_offset(indices))
    em.emit(f"tl.store({pointer} + {offset} + {zero}, {narrow}, mask={mask})")


def lower_parameter(em: ValueEmitter, instr: HloInstruction, indices: tuple[AffineExpr, ...]) -> Value:
    return load_buffer(em, instr, indices)


def lower_constant(em: ValueEmitter, instr: HloInstruction, indices: tuple[AffineExpr, ...]) -> Value:
    shape = array_shape(instr)
    literal = instr.attr("literal", None)
    if not isinstance(literal, Literal) or len(literal.values) != math.prod(shape.dims):
        raise UnsupportedOpError("constant without a matching array literal", where=instr.name)
    if shape.rank == 0 or len({repr(v) for v in literal.values}) == 1:
        value = em.bind(scalar_literal(literal.values[0], shape.element_type), instr.name)
        # A 0-d tensor whatever ``indices`` span (a splat array constant read at block
        # indices): recorded so, ``spanning`` broadcasts it before an op combines it.
        em.value_axes[value] = frozenset()
        return value
    return load_buffer(em, instr, indices)
