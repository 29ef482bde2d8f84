"""Shape rules of the collectives (XLA's ``ShapeInference`` for them), on any number of devices.

The participants of an op are the size of its replica groups, or, for ``replica_groups={}``,
every device the module asks for (``replica_count`` times ``num_partitions``, 1 by default).
``all-gather`` multiplies its dimension by that count, ``reduce-scatter`` divides it,
``all-to-all`` keeps the shape (its tuple form takes one operand per participant);
``all-reduce``, ``collective-broadcast`` and ``collective-permute`` keep their operands'
shapes.  Several operands give a
tuple.  The ``-start``/``-done`` halves: ``all-reduce-start`` has the result's shape,
``all-gather-start`` is ``(operand, result)``, ``collective-permute-start`` is
``(operand, result, contexts...)`` with u32/s32 scalar contexts; a ``-done`` gives the result.
Whether the module can run on one device is not a shape question: ``analysis.collectives``.

>>> from fusion.ir.hlo_module import HloInstruction
>>> g = HloInstruction("g", "all-gather", ArrayShape("f32", (2, 8)), ("x",),
...                    (("replica_groups", ((0, 1, 2, 3),)), ("dimensions", (1,))))
>>> str(shape_all_gather(g, (ArrayShape("f32", (2, 2)),), None))
'f32[2,8]'
"""
from __future__ import annotations

from typing import Sequence

from fusion.analysis.collectives import group_key, module_devices
from fusion.ir.element_types import element_type
from fusion.ir.hlo_module import HloInstruction, HloModule
from fusion.ir.shape import ArrayShape, Shape, TupleShape, flatten_shape
from fusion.shapes.checks import (
    expect_array,
    expect_dims_in_range,
    expect_operand_count,
    fail,
    one_dim,
    strip_layout,
)
from fusion.shapes.rules_reduce import expect_reducer


def _groups(instr: HloInstruction) -> tuple[tuple[int, ...], ...]:
    """The replica groups or source-target pairs, checked: lists of distinct ids >= 0."""
    key = group_key(instr)
    groups = instr.attr(key, ())
    if not isinstance(groups, tuple) or not all(
            isinstance(g, tuple) and all(isinstance(i, int) and i >= 0 for i in g)
            for g in groups):
        fail(instr, f"attribute '{key}' of {instr.opcode} must be lists of device ids, got "
             f"{groups}", expected=f"{key}={{{{0,1}},{{2,3}}}}")
    if key == "replica_groups":
        ids = [i for g in groups for i in g]
        if len(ids) != len(set(ids)):
            fail(instr, f"replica_groups of {instr.opcode} name a device twice")
    return groups


def participants(instr: HloInstruction, module: HloModule | None) -> int:
    """How many devices take part in each group of ``instr`` (groups of equal size)."""
    sizes = {len(g) for g in _groups(instr)}
    if len(sizes) > 1:
        fail(instr, f"the replica groups of {instr.opcode} differ in size "
             f"({', '.join(map(str, sorted(sizes)))})")
    return sizes.pop() if sizes else module_devices(module)


def _arrays(instr: HloInstruction, operands: Sequence[Shape]) -> list[ArrayShape]:
    expect_operand_count(instr, operands, 1, -1)
    return [strip_layout(expect_array(instr, s, f"operand {n}")) for n, s in enumerate(operands)]


def _one_or_tuple(shapes: Sequence[Shape]) -> Shape:
    return shapes[0] if len(shapes) == 1 else TupleShape(tuple(shapes))


def _with_reducer(instr: HloInstruction, xs: list[ArrayShape], module: HloModule | None) -> None:
    for dtype in dict.fromkeys(x.dtype for x in xs):
        expect_reducer(instr, module, "to_apply", [dtype], [dtype])


def shape_all_reduce(instr: HloInstruction, operands: Sequence[Shape],
                     module: HloModule | None) -> Shape:
    """``all-reduce`` and ``all-reduce-start``: the operands' shapes, reduced by ``to_apply``."""
    xs = _arrays(instr, operands)
    _groups(instr)
    _with_reducer(instr, xs, module)
    return _one_or_tuple(xs)


def shape_collective_broadcast(instr: HloInstruction, operands: Sequence[Shape],
                               module: HloModule | None) -> Shape:
    """``collective-broadcast``: the operands' shapes (each group's first member's values)."""
    xs = _arrays(instr, operands)
    _groups(instr)
    return _one_or_tuple(xs)


def shape_ragged_all_to_all(instr: HloInstruction, operands: Sequence[Shape],
                            module: HloModule | None) -> Shape:
    """``ragged-all-to-all(input, output, input_offsets, send_sizes, output_offsets,
    recv_sizes)`` (``fusion.analysis.ragged_all_to_all``): the output's shape.  The input and
    output share their type and their dims past the first; the four index operands are
    integer lists of one length, a multiple of the participants."""
    expect_operand_count(instr, operands, 6)
    xs = _arrays(instr, operands)
    data, out, indices = xs[0], xs[1], xs[2:]
    if data.rank == 0 or data.dtype != out.dtype or data.dims[1:] != out.dims[1:]:
        fail(instr, f"ragged-all-to-all sends rows of its input {data} into its output {out}: "
             "they need one type and the same dims past the first")
    n = participants(instr, module)
    lengths = {x.dims for x in indices}
    if any(element_type(x.dtype).kind not in ("signed", "unsigned") or x.rank != 1
           for x in indices) or \
            len(lengths) != 1 or lengths.pop()[0] % max(n, 1):
        fail(instr, "ragged-all-to-all's input_offsets, send_sizes, output_offsets and "
             f"recv_sizes are integer lists of one length, a multiple of its {n} "
             f"participants; got {', '.join(map(str, indices))}")
    return out


def _resized(instr: HloInstruction, xs: list[ArrayShape], module: HloModule | None,
             grow: bool) -> list[ArrayShape]:
    dim, n = one_dim(instr, "dimensions"), participants(instr, module)
    out = []
    for x in xs:
        expect_dims_in_range(instr, (dim,), x.rank, "dimensions")
        dims = list(x.dims)
        if not grow and dims[dim] % max(n, 1):
            fail(instr, f"{instr.opcode} splits dim {dim} of {x} among {n} participants")
        dims[dim] = dims[dim] * n if grow else dims[dim] // max(n, 1)
        out.append(ArrayShape(x.dtype, tuple(dims)))
    return out


def shape_all_gather(instr: HloInstruction, operands: Sequence[Shape],
                     module: HloModule | None) -> Shape:
    """``dimensions={d}``: dim ``d`` of each operand times the participants."""
    return _one_or_tuple(_resized(instr, _arrays(instr, operands), module, grow=True))


def shape_reduce_scatter(instr: HloInstruction, operands: Sequence[Shape],
                         module: HloModule | None) -> Shape:
    """``dimensions={d}``: dim ``d`` of each operand divided among the participants."""
    xs = _arrays(instr, operands)
    _with_reducer(instr, xs, module)
    return _one_or_tuple(_resized(instr, xs, module, grow=False))


def shape_all_to_all(instr: HloInstruction, operands: Sequence[Shape],
                     module: HloModule | None) -> Shape:
    """With ``dimensions={d}`` one array, split along ``d``; without, one operand per
    participant and a tuple result."""
    xs = _arrays(instr, operands)
    n = participants(instr, module)
    if not instr.has_attr("dimensions"):
        if len(xs) != n:
            fail(instr, f"the tuple form of all-to-all takes one operand per participant: "
                 f"{n}, got {len(xs)}")
        return TupleShape(tuple(xs))
    expect_operand_count(instr, operands, 1)
    _resized(instr, xs, module, grow=False)  # the split dim divides among the participants
    return xs[0]


def shape_collective_permute(instr: HloInstruction, operands: Sequence[Shape],
                             module: HloModule | None) -> Shape:
    """Each result is its operand's shape; pairs ``{source,target}`` of distinct ends."""
    if instr.has_attr("slice_sizes"):
        fail(instr, "the in-place form of collective-permute (slice_sizes, start indices) is "
             "not supported", expected="collective-permute(x), source_target_pairs={...}")
    xs = _arrays(instr, operands)
    pairs = _groups(instr)
    if any(len(p) != 2 for p in pairs):
        fail(instr, "source_target_pairs of collective-permute must be {source,target} pairs")
    for end, what in ((0, "source"), (1, "target")):
        if len({p[end] for p in pairs}) != len(pairs):
            fail(instr, f"source_target_pairs of collective-permute repeat a {what}")
    return _one_or_tuple(xs)


def shape_all_gather_start(instr: HloInstruction, operands: Sequence[Shape],
                           module: HloModule | None) -> Shape:
    """``(operand, result)`` (each a tuple when there are several operands)."""
    xs = _arrays(instr, operands)
    return TupleShape((_one_or_tuple(xs), _one_or_tuple(_resized(instr, xs, module, True))))


def shape_collective_permute_start(instr: HloInstruction, operands: Sequence[Shape],
                                   module: HloModule | None) -> Shape:
    """``(operand, result, contexts...)``: the contexts are u32/s32 scalars."""
    expect_operand_count(instr, operands, 1)
    result = shape_collective_permute(instr, operands, module)
    declared = instr.shape
    contexts = declared.elements[2:] if isinstance(declared, TupleShape) else ()
    if any(not isinstance(c, ArrayShape) or c.rank or c.dtype not in ("u32", "s32")
           for c in contexts):
        fail(instr, f"the contexts of collective-permute-start must be u32[] or s32[], got "
             f"{declared}")
    return TupleShape((result, result, *(strip_layout(c) for c in contexts)))


def shape_async_done(instr: HloInstruction, operands: Sequence[Shape],
                     module: HloModule | None) -> Shape:
    """A ``-done``: its start's result (``all-reduce-start``'s value itself; element 1 of
    the ``all-gather-start``/``collective-permute-start`` tuple)."""
    expect_operand_count(instr, operands, 1)
    start = operands[0]
    if instr.opcode == "all-reduce-done":
        return strip_layout(start)
    if not isinstance(start, TupleShape) or len(start.elements) < 2:
        fail(instr, f"the operand of {instr.opcode} must be its start's tuple, got {start}")
    return strip_layout(start.elements[1])


def shape_device_id(instr: HloInstruction, operands: Sequence[Shape],
                    module: HloModule | None) -> Shape:
    """``partition-id()``, ``replica-id()``: ``u32[]``."""
    expect_operand_count(instr, operands, 0)
    return ArrayShape("u32", ())


def shape_sharding_call(instr: HloInstruction, operands: Sequence[Shape],
                        module: HloModule | None) -> Shape:
    """A sharding custom call (``fusion.analysis.sharding``): its declared shape, one array
    per operand with the operand's element type and rank (a shard's dims may differ)."""
    xs = _arrays(instr, operands)
    declared = flatten_shape(instr.shape)
    if len(declared) != len(xs):
        fail(instr, f"custom-call {instr.attr('custom_call_target')} takes {len(xs)} operands "
             f"but declares {len(declared)} results; it gives one per operand")
    for n, (result, x) in enumerate(zip(declared, xs)):
        if result.dtype != x.dtype or result.rank != x.rank:
            fail(instr, f"result {n} of custom-call {instr.attr('custom_call_target')} is "
                 f"{strip_layout(result)}, but its operand is {x}: a sharding call keeps the "
                 "element type and rank")
    return strip_layout(instr.shape)


__all__ = ["participants", "shape_all_gather", "shape_all_gather_start", "shape_all_reduce",
           "shape_all_to_all", "shape_async_done", "shape_collective_broadcast",
           "shape_collective_permute", "shape_collective_permute_start", "shape_device_id",
           "shape_ragged_all_to_all", "shape_reduce_scatter", "shape_sharding_call"]
