"""Exact host-side packing of NumPy arrays into the physical buffer of a tiled layout, and back.

``pack`` runs the layout's pad / reshape / transpose steps (``TiledLayout.steps``) on the array
and flattens it: the result is the buffer in memory order, padding included.  Layouts whose
elements share 32-bit words (bf16 ``(8,128)(2,1)``, 8-bit ``(8,128)(4,1)``, PRED
``(32,128)(32,1)``, ``E(4)``) give a ``uint32`` array of words; element ``k`` of the memory
order sits in word ``k // per`` at bit ``(k % per) * bits`` (little end first, so that a bf16
pair is the even-row value in the low half and the odd-row value in the high half).

Values are moved as unsigned integers of their width, so NaN payloads and ``-0.0`` survive.

>>> x = np.arange(15, dtype=np.float32).reshape(3, 5)
>>> buf = pack(x, parse_tiles("1,0", "(2,2)"), fill=-1)
>>> buf[17], buf.size
(np.float32(13.0), 24)
>>> bool((unpack(buf, (3, 5), parse_tiles("1,0", "(2,2)"), "f32") == x).all())
True
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from fusion.ir.element_types import element_type, element_type_of_numpy
from fusion.ir.layout import Layout
from tiling.layouts.tiled_layout import (
    LayoutError,
    PadHigh,
    Reshape,
    Step,
    TiledLayout,
    Transpose,
    elements_per_word,
    parse_tiles,
    storage_bits,
)

_UINTS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def carrier(array: np.ndarray) -> np.ndarray:
    """``array`` viewed as unsigned ints of the same width (complex128 stays as it is)."""
    uint = _UINTS.get(array.dtype.itemsize)
    return array.view(uint) if uint is not None else array


def fill_value(fill: object, dtype: np.dtype) -> np.ndarray:
    """``fill`` converted to ``dtype``, as a 0-d carrier array (bit pattern kept)."""
    try:
        with np.errstate(invalid="ignore", over="ignore"):
            value = np.asarray(fill).astype(dtype)
        exact = dtype.kind not in "iub" or int(value) == fill
    except (ValueError, TypeError, OverflowError) as err:
        raise LayoutError(f"padding fill {fill!r} is not a {dtype} value: {err}") from None
    if not exact:
        raise LayoutError(f"padding fill {fill!r} is not a {dtype} value")
    return carrier(value.reshape(1))[0:1].reshape(())


def step_shapes(steps: Sequence[Step], dims: Sequence[int]) -> list[tuple[int, ...]]:
    """The shape before each step, then the final shape.

    >>> step_shapes((Transpose((1, 0)), PadHigh((6, 4))), (3, 5))
    [(3, 5), (5, 3), (6, 4)]
    """
    shapes = [tuple(dims)]
    for step in steps:
        if isinstance(step, Transpose):
            shapes.append(tuple(shapes[-1][p] for p in step.permutation))
        else:
            shapes.append(tuple(step.dims))
    return shapes


def inverse_permutation(permutation: Sequence[int]) -> tuple[int, ...]:
    """The permutation that undoes ``permutation``.

    >>> inverse_permutation((2, 0, 1))
    (1, 2, 0)
    """
    inverse = [0] * len(permutation)
    for i, p in enumerate(permutation):
        inverse[p] = i
    return tuple(inverse)


def run_steps(array: Any, steps: Sequence[Step], transpose: Callable[[Any, tuple[int, ...]], Any],
              padding: Callable[[tuple[int, ...]], Any]) -> Any:
    """Run pad / reshape / transpose steps on ``array``, a NumPy array or a torch tensor.

    Both libraries reshape, slice and assign slices alike; ``transpose(array, permutation)``
    and ``padding(dims)`` (a new array of ``dims`` holding the fill) are the library's own.
    A pad that changes no dim copies nothing.

    >>> run_steps(np.arange(3), (PadHigh((4,)),), np.transpose, lambda d: np.full(d, -1)).tolist()
    [0, 1, 2, -1]
    """
    for step in steps:
        if isinstance(step, Transpose):
            array = transpose(array, step.permutation)
        elif isinstance(step, Reshape):
            array = array.reshape(step.dims)
        elif tuple(step.dims) != tuple(array.shape):
            out = padding(tuple(step.dims))
            out[_leading(array.shape)] = array
            array = out
    return array


def run_steps_backwards(array: Any, steps: Sequence[Step], dims: Sequence[int],
                        transpose: Callable[[Any, tuple[int, ...]], Any]) -> Any:
    """The inverse of ``run_steps`` for a start shape ``dims``: drops the padding.

    >>> run_steps_backwards(np.arange(4), (PadHigh((4,)),), (3,), np.transpose).tolist()
    [0, 1, 2]
    """
    shapes = step_shapes(steps, dims)
    for step, before in zip(reversed(steps), reversed(shapes[:-1])):
        if isinstance(step, Transpose):
            array = transpose(array, inverse_permutation(step.permutation))
        elif isinstance(step, Reshape):
            array = array.reshape(before)
        else:
            array = array[_leading(before)]
    return array


def _leading(dims: Sequence[int]) -> tuple[slice, ...]:
    """The index of the leading ``dims`` block of a (padded) array."""
    return tuple(slice(0, d) for d in dims)


def apply_steps(array: np.ndarray, steps: Sequence[Step], fill: np.ndarray) -> np.ndarray:
    """Run pad / reshape / transpose steps on ``array``; padding gets ``fill``."""
    return run_steps(array, steps, np.transpose,
                     lambda dims: np.full(dims, fill, dtype=array.dtype))


def undo_steps(array: np.ndarray, steps: Sequence[Step], dims: Sequence[int]) -> np.ndarray:
    """The inverse of ``apply_steps`` for a start shape ``dims``: drops the padding."""
    return run_steps_backwards(array, steps, dims, np.transpose)


def pack(
    array: np.ndarray, layout: Layout, dtype: str | None = None, fill: object = 0
) -> np.ndarray:
    """The physical buffer of ``array`` under ``layout``, flat, in memory order.

    ``dtype`` is the HLO element type (default: the one of ``array.dtype``); ``fill`` goes in
    the padding (e.g. ``float("nan")`` or a sentinel so that a test catches reads of padding).

    >>> import ml_dtypes
    >>> x = np.array([[1, 2], [3, 4]], dtype=ml_dtypes.bfloat16)
    >>> [hex(w) for w in pack(x, parse_tiles("1,0", "(2,2)(2,1)"))]
    ['0x40403f80', '0x40804000']
    """
    array = np.asarray(array)
    hlo = dtype or element_type_of_numpy(array.dtype).name
    _check_dtype(array.dtype, hlo)
    tiled = TiledLayout.of(array.shape, layout)
    pad = fill_value(fill, array.dtype)
    physical = apply_steps(carrier(array), tiled.steps(), pad).reshape(-1)
    per = elements_per_word(hlo, layout)
    if per == 1:
        return np.ascontiguousarray(physical).view(array.dtype)
    return pack_words(physical, storage_bits(hlo, layout), per, pad)


def unpack(buffer: np.ndarray, dims: Sequence[int], layout: Layout, dtype: str) -> np.ndarray:
    """The logical array held in ``buffer`` (as ``pack`` gives it); padding is dropped.

    >>> unpack(np.array([0x40403f80, 0x40804000], np.uint32), (2, 2),
    ...        parse_tiles("1,0", "(2,2)(2,1)"), "bf16").astype(np.float32).tolist()
    [[1.0, 2.0], [3.0, 4.0]]
    """
    np_dtype = element_type(dtype).numpy_dtype()
    tiled = TiledLayout.of(dims, layout)
    n = tiled.padded_elements
    per = elements_per_word(dtype, layout)
    buffer = np.asarray(buffer).reshape(-1)
    check_buffer(buffer.size, buffer.dtype, n, per, element=np_dtype, word=np.dtype(np.uint32),
                 layout=layout, dtype=dtype, dims=dims)
    if per == 1:
        flat = carrier(buffer)
    else:
        uint = _UINTS[np_dtype.itemsize]
        flat = unpack_words(buffer, storage_bits(dtype, layout), per, uint)[:n]
    physical = flat.reshape(tiled.physical_shape)
    logical = undo_steps(physical, tiled.steps(), tiled.dims)
    return np.ascontiguousarray(logical).view(np_dtype).reshape(tiled.dims)


def check_buffer(size: int, found: object, n: int, per: int, *, element: object, word: object,
                 layout: Layout, dtype: str, dims: Sequence[int]) -> None:
    """Raise ``LayoutError`` unless ``size`` entries of type ``found`` hold the ``n`` padded
    elements of ``dtype[dims]`` under ``layout``: ``n`` ``element`` entries, or with ``per``
    elements in a word, ``ceil(n / per)`` ``word`` entries.

    >>> check_buffer(3, "uint32", 5, 2, element="bf16", word="uint32", layout=parse_tiles("0", ""),
    ...              dtype="bf16", dims=(5,))
    >>> check_buffer(5, "uint32", 5, 2, element="bf16", word="uint32", layout=parse_tiles("0", ""),
    ...              dtype="bf16", dims=(5,))
    Traceback (most recent call last):
    fusion.errors.LayoutError: buffer has 5 uint32 elements; layout {0} of bf16[5] needs 3 uint32 words
    """
    entries, expected, unit = (n, element, "") if per == 1 else (-(-n // per), word, " words")
    if size != entries or found != expected:
        raise LayoutError(f"buffer has {size} {found} elements; layout {layout} of "
                          f"{dtype}{list(dims)} needs {entries} {expected}{unit}")


def pack_words(flat: np.ndarray, bits: int, per: int, pad: np.ndarray) -> np.ndarray:
    """Put ``per`` consecutive ``bits``-wide values in each uint32 word, lowest bits first.

    >>> [hex(w) for w in pack_words(np.array([1, 2, 3], np.uint8), 8, 4, np.uint8(0))]
    ['0x30201']
    """
    extra = (-flat.size) % per
    if extra:
        flat = np.concatenate([flat, np.full(extra, pad, dtype=flat.dtype)])
    mask = np.uint32((1 << bits) - 1) if bits < 32 else np.uint32(0xFFFFFFFF)
    values = (flat.astype(np.uint32) & mask).reshape(-1, per)
    shifts = (np.arange(per, dtype=np.uint32) * np.uint32(bits)).astype(np.uint32)
    return np.bitwise_or.reduce(values << shifts, axis=1).astype(np.uint32)


def unpack_words(words: np.ndarray, bits: int, per: int, uint: type) -> np.ndarray:
    """The inverse of ``pack_words``: the values, as unsigned ints of type ``uint``.

    >>> unpack_words(np.array([0x30201], np.uint32), 8, 4, np.uint8).tolist()
    [1, 2, 3, 0]
    """
    mask = np.uint32((1 << bits) - 1)
    shifts = np.arange(per, dtype=np.uint32) * np.uint32(bits)
    return ((words.reshape(-1, 1) >> shifts) & mask).astype(uint).reshape(-1)


def _check_dtype(np_dtype: np.dtype, hlo: str) -> None:
    expected = element_type(hlo).numpy_dtype()
    if np_dtype != expected:
        raise LayoutError(f"array of {np_dtype} cannot hold element type {hlo} ({expected})")
