"""Rules for ops that move elements without computing: broadcast, slices, pad, bitcast, ...

Dynamic start indices are clamped as XLA does: ``clamp(start, 0, dim - size)``.

>>> pad_array(np.array([1, 2, 3]), np.array(0), [(-1, 2, 1)]).tolist()
[0, 2, 0, 3, 0, 0]
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from fusion.evaluator.failures import op_error
from fusion.ir.shape import ArrayShape


def eval_broadcast(ev: Any, instr: Any, args: list) -> np.ndarray:
    operand = args[0]
    shape = instr.array_shape
    dimensions = tuple(instr.attr("dimensions", ()))
    if len(dimensions) != operand.ndim:
        raise op_error(instr, f"dimensions={list(dimensions)} do not match operand rank")
    order = sorted(range(len(dimensions)), key=lambda i: dimensions[i])
    operand = np.transpose(operand, order)
    view = [1] * shape.rank
    for i in order:
        view[dimensions[i]] = args[0].shape[i]
    return np.broadcast_to(operand.reshape(view), shape.dims)


def eval_reshape(ev: Any, instr: Any, args: list) -> np.ndarray:
    source = _declared_operand_shape(ev, instr)
    if not instr.array_shape.dims and isinstance(source, ArrayShape) and not source.dims:
        return np.asarray(args[0])  # a scalar stays itself (a batch of them, in a comparator)
    return np.reshape(args[0], instr.array_shape.dims)


def _physical_order(shape: ArrayShape, instr: Any) -> tuple[int, ...]:
    """Logical dims from major to minor, per the shape's layout (tiled layouts rejected)."""
    layout = shape.effective_layout
    if layout.is_tiled:
        raise op_error(instr, f"bitcast with tiled layout {layout} is not supported")
    if sorted(layout.minor_to_major) != list(range(shape.rank)):
        raise op_error(instr, f"layout {layout} is not a permutation of the dims of {shape}")
    return tuple(reversed(layout.minor_to_major))


def eval_bitcast(ev: Any, instr: Any, args: list) -> np.ndarray:
    operand = args[0]
    source = instr_operand_shape(ev, instr, operand)
    result = instr.array_shape
    if not source.dims and not result.dims:  # a scalar's bits as another type (batched or not)
        target = result.element_type.numpy_dtype()
        if np.asarray(operand).dtype.itemsize != target.itemsize:
            raise op_error(instr, "bitcast between element types of different widths")
        # np.ascontiguousarray would make a rank-0 operand rank 1 (a sort's comparator,
        # called on two scalars, then returned [True] where () was declared).
        return np.array(operand, order="C", copy=None).view(target)
    source_order = _physical_order(source, instr)
    result_order = _physical_order(result, instr)
    buffer = np.transpose(operand, source_order).reshape(-1)
    target = result.element_type.numpy_dtype()
    if buffer.dtype != target:
        if buffer.dtype.itemsize != target.itemsize:
            raise op_error(instr, "bitcast between element types of different widths")
        buffer = np.array(buffer, order="C", copy=None).view(target)
    physical = buffer.reshape([result.dims[d] for d in result_order])
    return np.transpose(physical, np.argsort(result_order))


def _declared_operand_shape(ev: Any, instr: Any) -> Any:
    """The first operand's declared shape, as recorded by the interpreter (None without one)."""
    shapes = getattr(ev, "operand_shapes", None)
    return shapes(instr)[0] if shapes is not None else None


def instr_operand_shape(ev: Any, instr: Any, operand: np.ndarray) -> ArrayShape:
    """The operand's declared shape (for its layout), as recorded by the interpreter."""
    shape = _declared_operand_shape(ev, instr)
    if not isinstance(shape, ArrayShape):
        raise op_error(instr, "bitcast operand shape is unknown")
    return shape


def eval_transpose(ev: Any, instr: Any, args: list) -> np.ndarray:
    return np.transpose(args[0], instr.attr("dimensions"))


def eval_copy(ev: Any, instr: Any, args: list) -> Any:
    return args[0]


def eval_copy_done(ev: Any, instr: Any, args: list) -> Any:
    return args[0][0]


def eval_copy_start(ev: Any, instr: Any, args: list) -> tuple:
    # (destination, source, context): the copy's value in both places; the context is
    # XLA's handle for the transfer in flight.
    return (args[0], args[0], np.uint32(0))


def eval_opt_barrier(ev: Any, instr: Any, args: list) -> Any:
    # XLA's optimization barrier only keeps optimizations from moving work across it (JAX's
    # jax.checkpoint emits it so the recomputation is not merged with the forward pass).
    return args[0]


def eval_reverse(ev: Any, instr: Any, args: list) -> np.ndarray:
    return np.flip(args[0], axis=tuple(instr.attr("dimensions")))


def eval_slice(ev: Any, instr: Any, args: list) -> np.ndarray:
    slices = instr.attr("slice")
    if len(slices) != args[0].ndim:
        raise op_error(instr, f"slice has {len(slices)} dims, operand rank {args[0].ndim}")
    return args[0][tuple(slice(s.start, s.limit, s.stride) for s in slices)]


def _clamped_starts(
    instr: Any, index_args: list, operand_dims: tuple[int, ...], sizes: tuple[int, ...]
) -> list[int]:
    if len(index_args) == 1 and np.ndim(index_args[0]) == 1 and len(operand_dims) != 1:
        starts = [int(v) for v in index_args[0]]
    else:
        starts = [int(np.asarray(v).reshape(())) for v in index_args]
    if len(starts) != len(operand_dims):
        raise op_error(instr, f"{len(starts)} start indices for rank {len(operand_dims)}")
    return [min(max(s, 0), d - z) for s, d, z in zip(starts, operand_dims, sizes)]


def eval_dynamic_slice(ev: Any, instr: Any, args: list) -> np.ndarray:
    operand = args[0]
    sizes = tuple(instr.attr("dynamic_slice_sizes"))
    starts = _clamped_starts(instr, args[1:], operand.shape, sizes)
    return operand[tuple(slice(s, s + z) for s, z in zip(starts, sizes))]


def eval_dynamic_update_slice(ev: Any, instr: Any, args: list) -> np.ndarray:
    operand, update = args[0], args[1]
    starts = _clamped_starts(instr, args[2:], operand.shape, update.shape)
    out = np.array(operand, copy=True)
    out[tuple(slice(s, s + z) for s, z in zip(starts, update.shape))] = update
    return out


def pad_array(
    operand: np.ndarray, value: np.ndarray, config: list[tuple[int, int, int]]
) -> np.ndarray:
    """Pad with ``value``: ``config`` holds (low, high, interior) per dim, low/high may be < 0."""
    grown_shape = []
    placement = []
    crop = []
    for size, (low, high, interior) in zip(operand.shape, config):
        dilated = size + max(size - 1, 0) * interior
        grown = max(low, 0) + dilated + max(high, 0)
        grown_shape.append(grown)
        placement.append(slice(max(low, 0), max(low, 0) + dilated, interior + 1))
        crop.append(slice(max(-low, 0), grown - max(-high, 0)))
    out = np.full(grown_shape, np.asarray(value).reshape(()), dtype=operand.dtype)
    out[tuple(placement)] = operand
    return out[tuple(crop)]


def eval_pad(ev: Any, instr: Any, args: list) -> np.ndarray:
    padding = instr.attr("padding")
    if len(padding.dims) != args[0].ndim:
        raise op_error(instr, f"padding has {len(padding.dims)} dims, operand rank {args[0].ndim}")
    config = [(d.low, d.high, d.interior) for d in padding.dims]
    return pad_array(args[0], args[1], config)


def eval_concatenate(ev: Any, instr: Any, args: list) -> np.ndarray:
    return np.concatenate(args, axis=instr.attr("dimensions")[0])


def eval_tuple(ev: Any, instr: Any, args: list) -> tuple:
    return tuple(args)


def eval_get_tuple_element(ev: Any, instr: Any, args: list) -> Any:
    value = args[0]
    index = instr.attr("index")
    if not isinstance(value, tuple) or not 0 <= index < len(value):
        raise op_error(instr, f"index {index} is not an element of the operand tuple")
    return value[index]


DATA_MOVEMENT_RULES: dict[str, Callable[..., Any]] = {
    "bitcast": eval_bitcast,
    "broadcast": eval_broadcast,
    "concatenate": eval_concatenate,
    "copy": eval_copy,
    "copy-done": eval_copy_done,
    "copy-start": eval_copy_start,
    "dynamic-slice": eval_dynamic_slice,
    "dynamic-update-slice": eval_dynamic_update_slice,
    "get-tuple-element": eval_get_tuple_element,
    "opt-barrier": eval_opt_barrier,
    "pad": eval_pad,
    "reshape": eval_reshape,
    "reverse": eval_reverse,
    "slice": eval_slice,
    "transpose": eval_transpose,
    "tuple": eval_tuple,
}
