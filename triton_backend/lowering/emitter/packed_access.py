"""Reading and writing word-packed buffers (bf16 ``(8,128)(2,1)``, s8 ``(8,128)(4,1)``, PRED
``(32,128)(32,1)``, ``E(n)``) inside a generated kernel, with shifts, masks and bitcasts only.

Element ``k`` of a packed buffer's memory order sits in 32-bit word ``k // per`` at bit
``(k % per) * bits`` (``tiling.layouts.packing``; little end first: the even row of a ``(2,1)`` pair
is the low half).  ``k`` is the layout's physical offset of the logical index
(``addressing.BufferAddressing.element_offset``).

*Loads* gather per lane: each lane loads its element's word and shifts its field out, so any
index expression (transposes, reductions, slices) works and padding fields are never looked at.

*Stores* must write whole words (a plain read-modify-write of a word shared by two programs
would race), so every word is assembled and written by the one program owning all its elements:
:func:`word_grouping` proves, on the layout's simplified indexing map, that a word holds the
``per`` elements ``per*q .. per*q + per-1`` of one logical dim ``D`` (all other indices
fixed), at the slot ``index_D % per``; the kernel's output tile along ``D`` is then required
to be a multiple of ``per`` (tiles start at multiples of their size, so they are then
aligned) -- :func:`word_aligned_tile_sizes` adjusts any tiling to that.  The
program ORs its fields into words (``reshape`` to ``[.., T_D/per, per, ..]`` and a sum of
disjoint bit fields) and stores each word once.  Lanes outside the logical shape contribute
zero bits, so the padding fields of a written word are zero; words holding only padding are
never written (the host allocates packed outputs zero-filled, so all padding reads zero).  A
layout whose words hold one element each (e.g. a rank-1 array under ``(8,128)(2,1)``) is
written lane by lane.

An untiled ``E(n)`` layout whose words do *not* lie along one logical dim (``s4[10,6]{1,0:E(4)}``:
a word holds the end of one row and the start of the next) is stored through its
:func:`flat_word_view`, the same words seen as one dim of elements in memory order: the kernel
then iterates over that flat space (``kernel_file.iteration_space``), each tile a whole number
of words, so again one program writes each word, whole.  Only a *tiled* layout whose words
lie along no dim (nor in memory order along the output) is written field by field, with one
atomic read-modify-write each (:func:`emit_field_update`), as a scatter's targets are.

>>> from tiling.layouts.tiled_layout import parse_tiles
>>> word_grouping((37, 300), parse_tiles("1,0", "(8,128)(2,1)"), "bf16")
WordGrouping(per_word=2, bits=16, dim=0, slot=0)
>>> word_grouping((300,), parse_tiles("0", "(8,128)(2,1)"), "bf16")
WordGrouping(per_word=2, bits=16, dim=None, slot=0)
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

from fusion.ir.element_types import ElementType
from fusion.errors import UnsupportedOpError
from fusion.ir.layout import Layout
from fusion.ir.shape import ArrayShape
from tiling.maps.affine_expr import AffineExpr, Constant, DimExpr, const, d
from tiling.maps.expr_variables import substitute, used_variables
from tiling.maps.indexing_map import IndexingMap
from tiling.maps.interval import Interval
from tiling.layouts.tiled_layout import elements_per_word, layout_indexing_map, storage_bits
from tiling.maps.range_evaluator import RangeEvaluator
from tiling.symbolic.tiled_fusion import next_power_of_two
from triton_backend.lowering.emitter.addressing import BufferAddressing, buffer_addressing
from triton_backend.lowering.emitter.value_emitter import ValueEmitter
from triton_backend.lowering.emitter.triton_types import render_load_widen, storage_dtype


@dataclass(frozen=True)
class WordGrouping:
    """Which elements share a 32-bit word: ``per_word`` aligned consecutive indices along
    logical ``dim`` (slot = index mod ``per_word``), or, ``dim`` None, one element per word
    at slot ``slot``."""

    per_word: int
    bits: int
    dim: int | None
    slot: int


@functools.lru_cache(maxsize=256)
def word_grouping(dims: tuple[int, ...], layout: Layout, dtype: str) -> WordGrouping | None:
    """How a packed layout groups elements into words (None: not along one logical dim).

    Proved on the layout's indexing map over the logical domain, never on a sample (pure
    memoization: it depends on its arguments only).

    >>> from tiling.layouts.tiled_layout import parse_tiles
    >>> word_grouping((13, 260), parse_tiles("0,1", "(8,128)(4,1)"), "s8").dim
    1
    """
    per, bits = elements_per_word(dtype, layout), storage_bits(dtype, layout)
    # Size-1 dims are 0: the simplifier keeps ``d0 * 256`` over ``d0 in [0, 0]`` as it is.
    offset = substitute(layout_indexing_map(dims, layout).results[0],
                        [const(0) if n == 1 else d(k) for k, n in enumerate(dims)], None)
    domain = [(0, n - 1) for n in dims]
    slot = IndexingMap.create((offset % per,), domain).simplify().results[0]
    slot_range = RangeEvaluator([Interval(lo, hi) for lo, hi in domain], []).compute(slot)
    if slot_range.lower == slot_range.upper:
        return WordGrouping(per, bits, None, slot_range.lower)
    rank = len(dims)
    q, j = d(rank), d(rank + 1)
    for dim in (k for k in range(rank) if dims[k] > 1):
        split = [d(k) for k in range(rank)]
        split[dim] = (q * per if dims[dim] > per else const(0)) + j
        e = substitute(offset, split, None)
        bounds = list(domain) + [(0, -(-dims[dim] // per) - 1), (0, per - 1)]
        bounds[dim] = (0, 0)
        m = IndexingMap.create((e % per, e // per), bounds,
                               constraints=[(q * per + j, (0, dims[dim] - 1))]).simplify()
        in_word, word = m.results
        if in_word == j and (rank + 1) not in used_variables(word)[0]:
            return WordGrouping(per, bits, dim, 0)
    return None


def flat_word_view(shape: ArrayShape) -> ArrayShape | None:
    """The rank-1 view, in memory order, of a word-packed shape with an untiled ``E(n)``
    layout (its words lie along the one dim); None for any other shape.

    >>> from fusion.text.parser import parse_layout
    >>> str(flat_word_view(ArrayShape("s4", (10, 6), parse_layout("{0,1:E(4)}"))))
    's4[60]{0:E(4)}'
    """
    layout = shape.layout
    if layout is None or layout.tiles or not layout.element_size_in_bits or \
            elements_per_word(shape.dtype, layout) < 2:
        return None
    return ArrayShape(shape.dtype, (math.prod(shape.dims),),
                      Layout((0,), element_size_in_bits=layout.element_size_in_bits))


def needs_flat_words(shape: ArrayShape) -> bool:
    """Whether a packed output is stored through its :func:`flat_word_view`: its words do not
    lie along one logical dim, and its layout is untiled.

    >>> from fusion.text.parser import parse_layout
    >>> needs_flat_words(ArrayShape("s4", (10, 6), parse_layout("{1,0:E(4)}")))
    True
    >>> needs_flat_words(ArrayShape("s4", (10, 16), parse_layout("{1,0:E(4)}")))
    False
    """
    return flat_word_view(shape) is not None and \
        word_grouping(tuple(shape.dims), shape.layout, shape.dtype) is None


def minimum_tile_sizes(outputs: tuple[ArrayShape, ...]) -> tuple[int, ...]:
    """Per dim, what an output tile must be a multiple of for one program to own every
    word it stores.

    >>> from tiling.layouts.tiled_layout import parse_tiles
    >>> minimum_tile_sizes((ArrayShape("pred", (40, 130), parse_tiles("1,0", "(32,128)(32,1)")),))
    (32, 1)
    """
    rank = outputs[0].rank if outputs else 0
    need = [1] * rank
    for i, shape in enumerate(outputs):
        a = buffer_addressing(shape, f"output {i}")
        if a.is_packed:
            # No grouping: no tile owns the words, which are then updated atomically.
            g = word_grouping(tuple(shape.dims), shape.layout, shape.dtype)
            if g is not None and g.dim is not None:
                need[g.dim] = max(need[g.dim], g.per_word)
    return tuple(need)


def word_aligned_tile_sizes(tile_sizes: tuple[int, ...], outputs: tuple[ArrayShape, ...]) -> tuple[int, ...]:
    """``tile_sizes`` adjusted so that the tiles of packed outputs hold whole words.

    A tile along a word dim that is not a multiple of the word becomes the next power of two
    at least the word (powers of two never break the plan's rules); other dims are then
    halved while the padded tile exceeds its former padded size (at least one word).  Tiles
    already aligned are kept, whoever chose them.

    >>> from tiling.layouts.tiled_layout import parse_tiles
    >>> out = (ArrayShape("pred", (40, 130), parse_tiles("1,0", "(32,128)(32,1)")),)
    >>> word_aligned_tile_sizes((4, 256), out), word_aligned_tile_sizes((64, 16), out)
    ((32, 32), (64, 16))
    """
    need = minimum_tile_sizes(outputs)
    if not need or all(t % n == 0 for t, n in zip(tile_sizes, need)):
        return tuple(tile_sizes)
    limit = max(math.prod(next_power_of_two(t) for t in tile_sizes), max(need))
    sizes = [t if t % n == 0 else next_power_of_two(max(t, n)) for t, n in zip(tile_sizes, need)]
    while math.prod(next_power_of_two(t) for t in sizes) > limit:
        shrinkable = [k for k in range(len(sizes)) if sizes[k] // 2 >= need[k]
                      and (sizes[k] // 2) % need[k] == 0]
        if not shrinkable:
            break
        k = max(shrinkable, key=lambda i: sizes[i])
        sizes[k] //= 2
    return tuple(sizes)


# --- kernel text -----------------------------------------------------------------------------


def _field_carrier(t: ElementType, bits: int) -> str:
    """The unsigned Triton type as wide as a packed ``bits``-bit field of a ``t`` element."""
    carrier = {8: "tl.uint8", 16: "tl.uint16"}.get(bits)
    if carrier is None:
        raise UnsupportedOpError(f"{bits}-bit packed {t.name} elements are not supported", where=t.name)
    return carrier


def _field_to_storage(field: str, t: ElementType, bits: int) -> str:
    """A ``uint32`` field (the element's bits, low-aligned) as the element's storage dtype."""
    if t.is_pred:
        return f"({field} != 0)"
    if t.is_integer and t.bits < 8:  # a sub-byte integer (E(4)): one value per byte in registers
        if t.is_signed:
            return f"((({field}.to(tl.int32) << {32 - bits}) >> {32 - bits}).to(tl.int8))"
        return f"{field}.to(tl.uint8)"
    carrier = _field_carrier(t, bits)
    return f"{field}.to({carrier}).to({storage_dtype(t)}, bitcast=True)"


def _storage_to_field(value: str, t: ElementType, bits: int) -> str:
    """A storage-dtype value as a ``uint32`` holding its bits in the low ``bits``."""
    if t.is_pred:
        return f"({value}).to(tl.uint32)"
    if t.is_integer and t.bits < 8:  # the value's low ``bits`` (its sign extension dropped)
        return f"(({value}).to(tl.uint8, bitcast=True).to(tl.uint32) & {(1 << bits) - 1})"
    carrier = _field_carrier(t, bits)
    return f"({value}).to({carrier}, bitcast=True).to(tl.uint32)"


def emit_packed_load(em: ValueEmitter, pointer: str, addressing: BufferAddressing,
                     indices: tuple[AffineExpr, ...], mask: str | None, hint: str) -> str:
    """Load each lane's word and extract its field; returns the storage-dtype value."""
    per, bits = addressing.per_word, addressing.bits
    offset = addressing.element_offset(indices)
    if isinstance(offset, Constant):
        word_text, shift_text = str(offset.value // per), str((offset.value % per) * bits)
    else:
        off = em.bind(em.index_text(offset), f"{hint}_off")
        # ``& (per - 1)`` keeps the shift in [0, 32) even on masked lanes with wild offsets.
        word_text, shift_text = f"{off} // {per}", f"(({off} & {per - 1}) * {bits}).to(tl.uint32)"
    load = (f"tl.load({pointer} + {word_text}, mask={mask}, other=0)" if mask
            else f"tl.load({pointer} + {word_text})")
    word = em.bind(load, f"{hint}_word")
    field = em.bind(f"(({word}.to(tl.uint32, bitcast=True) >> {shift_text}) & {(1 << bits) - 1})",
                    f"{hint}_field")
    return _field_to_storage(field, addressing.shape.element_type, bits)


def emit_field_update(em: ValueEmitter, pointer: str, addressing: BufferAddressing,
                      offset: str, mask: str, update: Callable[[str], str]) -> None:
    """Read-modify-write one packed field per lane, in words other programs (or lanes) may
    write at the same time: a scatter's targets are data, so no tiling can own its words.

    ``offset`` is each lane's physical element offset (a tensor as large as ``mask``);
    ``update(old)`` gives the new value
    (storage dtype) from the old (register representation).  Each field is written by one
    lane at a time (the caller's contract), so ``atomic_xor`` of ``(old ^ new) << shift``
    sets it whatever the word's other fields do meanwhile.  The word is read ``volatile``:
    the previous row of a serial scatter may have changed it through an atomic.
    """
    t = addressing.shape.element_type
    per, bits = addressing.per_word, addressing.bits
    off = em.bind(offset, "field_off")
    word_pointer = em.bind(f"{pointer} + {off} // {per}", "word_ptr")
    shift = em.bind(f"(({off} & {per - 1}) * {bits}).to(tl.uint32)", "field_shift")
    word = em.bind(f"tl.load({word_pointer}, mask={mask}, other=0, volatile=True)", "word")
    old_field = em.bind(f"(({word}.to(tl.uint32, bitcast=True) >> {shift}) & {(1 << bits) - 1})",
                        "old_field")
    old = em.bind(render_load_widen(_field_to_storage(old_field, t, bits), t), "old")
    new_field = em.bind(_storage_to_field(update(old), t, bits), "new_field")
    em.emit(f"tl.atomic_xor({word_pointer}, ({old_field} ^ {new_field}) << {shift}, mask={mask})")


def emit_packed_store(em: ValueEmitter, pointer: str, addressing: BufferAddressing,
                      value: str, indices: tuple[AffineExpr, ...], mask: str, zero: str,
                      tile: tuple[AffineExpr, ...]) -> None:
    """Assemble whole words from ``value`` (storage dtype, over the output tile) and store them.

    ``indices`` are the output's indices (dim variables of the tile), ``tile`` all the tile's
    dim variables (``mask`` and ``zero`` span them), ``mask`` is true on the lanes to store,
    ``zero`` an index-typed zero tensor over the tile (it broadcasts offsets to the tile).
    A tiled layout whose words lie along no logical dim (``s8[260]{0:T(128)(4,1)}``: a word
    holds elements ``i, i+128, i+256, i+384``) has words no tile can own, and neither does a
    tiled output of a flat space (``kernel_file``): each lane then updates its field
    atomically (:func:`emit_field_update`).
    """
    shape = addressing.shape
    g = word_grouping(tuple(shape.dims), shape.layout, shape.dtype)
    if g is None or (g.dim is not None and not isinstance(indices[g.dim], DimExpr)):
        # No tile owns the words (or, at computed indices, a flat space's, no tile is known to)
        offset = f"{em.index_text(addressing.element_offset(indices))} + {zero}"
        emit_field_update(em, pointer, addressing, offset, mask, lambda old: value)
        return
    t = addressing.shape.element_type
    per, bits = g.per_word, g.bits
    fields = em.bind(f"tl.where({mask}, {_storage_to_field(value, t, bits)}, "
                     "tl.full([], 0, tl.uint32))", "packed_fields")
    if g.dim is None:
        offset = addressing.element_offset(indices)
        word = f"{fields} << {g.slot * bits}" if g.slot else fields
        em.emit(f"tl.store({pointer} + ({em.index_text(offset)}) // {per} + {zero}, {word}, "
                f"mask={mask})")
        return
    var = indices[g.dim]
    block = em.dims[var.index].block
    if block % per:
        raise UnsupportedOpError(
            f"the output tile of {block} along dim {g.dim} splits the {per}-element words of "
            f"{addressing.name} ({addressing.shape.layout})", where=addressing.name)
    axis = em.dims[var.index].axis
    name = em.dims[var.index].name
    shape = list(em.shape_of(tuple(tile) or tuple(indices)))
    split = shape[:axis] + [shape[axis] // per, per] + shape[axis + 1:]
    shifted = em.bind(f"{fields} << (({name} % {per}) * {bits}).to(tl.uint32)", "packed_shifted")
    words = em.bind(f"tl.sum(tl.reshape({shifted}, {split}), axis={axis + 1})", "packed_words")
    first = list(indices)
    first[g.dim] = (var // per) * per
    base = em.index_text(addressing.element_offset(first))
    offsets = em.bind(f"tl.max(tl.reshape(({base}) // {per} + {zero}, {split}), axis={axis + 1})",
                      "packed_word_off")
    word_mask = em.bind(f"tl.max(tl.reshape(({mask}).to(tl.int32) + {zero}, {split}), "
                        f"axis={axis + 1}) != 0", "packed_word_mask")
    em.emit(f"tl.store({pointer} + {offsets}, {words}, mask={word_mask})")


__all__ = ["WordGrouping", "emit_field_update", "emit_packed_load", "emit_packed_store",
           "flat_word_view",
           "needs_flat_words",
           "minimum_tile_sizes", "word_aligned_tile_sizes", "word_grouping"]
