"""VJP rules of the collectives and the sharding custom calls: each is linear in its operands,
so its VJP is its transpose, as JAX's transpose rules write.

* ``all-reduce`` of a sum is its own transpose (``psum``'s is ``psum``);
* ``all-gather``'s is a summing ``reduce-scatter`` along the same dimension, and a summing
  ``reduce-scatter``'s is the ``all-gather``;
* ``all-to-all``'s is itself (it sends block ``j`` to participant ``j`` and takes block ``j``
  from it, along one dimension for split and concat);
* ``collective-broadcast``'s sums the group's cotangents onto its first member, zeros
  elsewhere (JAX's ``pbroadcast`` transpose);
* ``collective-permute``'s is the permute with every pair reversed;
* ``ragged-all-to-all``'s sends the cotangent's slices back where they came from, and zeroes
  the rows it wrote in the output's cotangent (JAX's ``_ragged_all_to_all_transpose``);
* a sharding custom call's is the call that undoes it (``SPMDFullToShardShape`` and
  ``SPMDShardToFullShape``, Shardy's ``GlobalToLocalShape`` and ``LocalToGlobalShape``; a
  ``Sharding`` annotation annotates the cotangent alike).

The groups, ``channel_id`` and ``use_global_device_ids`` are kept.  A reducer other than a sum
has no transpose (``pmax`` is not linear): an ``UnsupportedOpError`` at the op.

>>> sorted(COLLECTIVE_VJP_RULES)[:3]
['all-gather', 'all-reduce', 'all-to-all']
"""
from __future__ import annotations

from typing import Sequence

from fusion.analysis.sharding import is_sharding_call
from fusion.analysis.spmd_groups import device_counts, rank_groups
from fusion.autodiff.combiner_kind import CombinerKind, combiner_kind
from fusion.autodiff.cotangents import Cotangent, materialize, unpack
from fusion.autodiff.reverse_pass import Rule, VjpContext
from fusion.errors import UnsupportedOpError
from fusion.ir.attributes import Literal
from fusion.ir.hlo_module import HloInstruction
from fusion.ir.shape import ArrayShape, Shape, TupleShape, flatten_shape

Cts = Sequence[Cotangent]

#: A sharding call -> the call its transpose is.
_INVERSE_TARGET = {
    "MoveToDevice": "MoveToHost",
    "MoveToHost": "MoveToDevice",
    "SPMDFullToShardShape": "SPMDShardToFullShape",
    "SPMDShardToFullShape": "SPMDFullToShardShape",
    "Sharding": "Sharding",
    "annotate_device_placement": "annotate_device_placement",
    "xla.sdy.GlobalToLocalShape": "xla.sdy.LocalToGlobalShape",
    "xla.sdy.LocalToGlobalShape": "xla.sdy.GlobalToLocalShape",
}
_KEPT = ("channel_id", "replica_groups", "use_global_device_ids", "source_target_pairs",
         "dimensions", "frontend_attributes", "sharding")


def _unsupported(instr: HloInstruction, message: str) -> UnsupportedOpError:
    # The reverse pass's wording for an op without a rule, with the reason this one has none.
    return UnsupportedOpError(f"no VJP rule for op {instr.opcode} (%{instr.name}): {message}",
                              **instr._located())


def _kept(instr: HloInstruction) -> list[tuple[str, object]]:
    return [(k, v) for k, v in instr.attributes if k in _KEPT]


def _cts(ctx: VjpContext, instr: HloInstruction, ct: Cotangent) -> list[str]:
    """The cotangent of each result leaf, zeros where none flows back."""
    b = ctx.b
    if isinstance(instr.shape, TupleShape):
        leaves = flatten_shape(instr.shape)
        parts = ct if isinstance(ct, tuple) else (None,) * len(leaves)
        return [materialize(b, c, s.with_layout(None)) for c, s in zip(parts, leaves)]
    return [materialize(b, ct, instr.shape.with_layout(None))]


def _sum_reducer(ctx: VjpContext, instr: HloInstruction, dtype: str) -> str:
    if instr.has_attr("to_apply") and \
            combiner_kind(ctx.module, instr.attr("to_apply")) is not CombinerKind.ADD:
        raise _unsupported(instr, f"its to_apply {instr.attr('to_apply')} is not a sum; only a "
                           "summing collective is linear")
    return ctx.b.table.scalar_reducer("add", dtype)


def _emit(ctx: VjpContext, instr: HloInstruction, opcode: str, cts: list[str],
          shapes: list[Shape], extra: Sequence[tuple[str, object]] = ()) -> Cts:
    """One ``opcode`` over all the cotangents; its results are the operands' cotangents."""
    b = ctx.b
    shape = shapes[0] if len(shapes) == 1 else TupleShape(tuple(shapes))
    out = b.emit(opcode, cts, (*_kept(instr), *extra), shape=shape)
    if len(shapes) == 1:
        return (out,)
    return tuple(unpack(b, out, shape))


def _operand_shapes(ctx: VjpContext, instr: HloInstruction) -> list[Shape]:
    return [ctx.shape(o).with_layout(None) for o in instr.operands]


def vjp_all_reduce(ctx: VjpContext, instr: HloInstruction, ct: Cotangent) -> Cts:
    cts = _cts(ctx, instr, ct)
    reducer = _sum_reducer(ctx, instr, ctx.b.array_shape(cts[0]).dtype)
    extra = [("to_apply", reducer)]
    return _emit(ctx, instr, "all-reduce", cts, _operand_shapes(ctx, instr), extra)


def vjp_all_gather(ctx: VjpContext, instr: HloInstruction, ct: Cotangent) -> Cts:
    cts = _cts(ctx, instr, ct)
    extra = [("to_apply", ctx.b.table.scalar_reducer("add", ctx.b.array_shape(cts[0]).dtype))]
    return _emit(ctx, instr, "reduce-scatter", cts, _operand_shapes(ctx, instr), extra)


def vjp_reduce_scatter(ctx: VjpContext, instr: HloInstruction, ct: Cotangent) -> Cts:
    cts = _cts(ctx, instr, ct)
    _sum_reducer(ctx, instr, ctx.b.array_shape(cts[0]).dtype)
    return _emit(ctx, instr, "all-gather", cts, _operand_shapes(ctx, instr))


def vjp_all_to_all(ctx: VjpContext, instr: HloInstruction, ct: Cotangent) -> Cts:
    return _emit(ctx, instr, "all-to-all", _cts(ctx, instr, ct), _operand_shapes(ctx, instr))


def vjp_collective_permute(ctx: VjpContext, instr: HloInstruction, ct: Cotangent) -> Cts:
    pairs = tuple((t, s) for s, t in instr.attr("source_target_pairs", ()))
    cts = _cts(ctx, instr, ct)
    shapes = _operand_shapes(ctx, instr)
    shape = shapes[0] if len(shapes) == 1 else TupleShape(tuple(shapes))
    attributes = [(k, pairs if k == "source_target_pairs" else v) for k, v in _kept(instr)]
    out = ctx.b.emit("collective-permute", cts, attributes, shape=shape)
    return (out,) if len(shapes) == 1 else tuple(unpack(ctx.b, out, shape))


def vjp_collective_broadcast(ctx: VjpContext, instr: HloInstruction, ct: Cotangent) -> Cts:
    """JAX's transpose of ``pbroadcast``: each group's first member gets the group's sum of
    the cotangents, the others zeros.  The sum is an ``all-reduce`` over the same groups as
    device ids (``use_global_device_ids``, whatever the broadcast's mode); a device finds
    whether it leads its group in a table indexed by its id."""
    b = ctx.b
    counts = device_counts(ctx.module)
    groups = rank_groups(instr, counts)
    channel = instr.attr("channel_id", 1)
    leads = Literal((counts.world,), tuple(any(g and g[0] == d for g in groups)
                                           for d in range(counts.world)))
    table = b.emit("constant", (), (("literal", leads),), shape=ArrayShape("pred",
                                                                           (counts.world,)))
    replica = b.emit("replica-id", (), shape=ArrayShape("u32", ()))
    partition = b.emit("partition-id", (), shape=ArrayShape("u32", ()))
    device = b.add(b.multiply(replica, b.scalar(counts.partitions, "u32")), partition)
    lead = b.reshape(b.emit("dynamic-slice", (table, device), (("dynamic_slice_sizes", (1,)),),
                            shape=ArrayShape("pred", (1,))), ())
    out = []
    for c in _cts(ctx, instr, ct):
        shape = b.array_shape(c).with_layout(None)
        summed = b.emit("all-reduce", (c,), (
            ("channel_id", channel), ("replica_groups", groups),
            ("use_global_device_ids", True),
            ("to_apply", b.table.scalar_reducer("add", shape.dtype))), shape=shape)
        out.append(b.select(b.broadcast(lead, shape.dims, ()), summed, b.zeros(shape)))
    return tuple(out)


def vjp_ragged_all_to_all(ctx: VjpContext, instr: HloInstruction, ct: Cotangent) -> Cts:
    """JAX's transpose: the input's cotangent is the output's slices sent back where they came
    from (a ragged-all-to-all whose offsets are the all-to-all of the forward's, sizes
    swapped); the output's is the cotangent with the rows the op wrote zeroed."""
    b = ctx.b
    (t,) = _cts(ctx, instr, ct)
    offsets, sizes, targets, received = (ctx.operand(instr, k) for k in range(2, 6))
    kept = [(k, v) for k, v in _kept(instr) if k != "dimensions"]

    def exchanged(name: str) -> str:  # slice i of member j to member i // per, in order
        return b.emit("all-to-all", (name,), (*kept, ("dimensions", (0,))),
                      shape=b.array_shape(name).with_layout(None))

    sources, landed = exchanged(offsets), exchanged(targets)
    grad_data = b.emit("ragged-all-to-all",
                       (t, b.zeros(ctx.operand_shape(instr, 0).with_layout(None)), landed,
                        received, sources, sizes), kept,
                       shape=ctx.operand_shape(instr, 0).with_layout(None))
    rows, count = b.array_shape(t).dims[0], b.array_shape(landed).dims[0]
    index_type = b.array_shape(landed).dtype
    row = b.emit("iota", (), (("iota_dimension", 0),), shape=ArrayShape(index_type,
                                                                       (rows, count)))
    start = b.broadcast(landed, (rows, count), (1,))
    end = b.broadcast(b.add(landed, b.convert(received, index_type)), (rows, count), (1,))
    inside = b.emit("and", (b.compare(row, start, "GE"), b.compare(row, end, "LT")))
    written = b.reduce(inside, b.scalar(False, "pred"), (1,), "or")
    shape = b.array_shape(t).with_layout(None)
    mask = b.broadcast(written, shape.dims, (0,))
    grad_output = b.select(mask, b.zeros(shape), t)
    return (grad_data, grad_output, None, None, None, None)


def vjp_sharding_call(ctx: VjpContext, instr: HloInstruction, ct: Cotangent) -> Cts:
    """A sharding call's transpose (``rules_library.vjp_custom_call`` dispatches here)."""
    assert is_sharding_call(instr), instr.name
    inverse = _INVERSE_TARGET[instr.attr("custom_call_target")]
    cts = _cts(ctx, instr, ct)
    out = []
    for c, shape in zip(cts, _operand_shapes(ctx, instr)):
        out.append(ctx.b.emit("custom-call", (c,), [("custom_call_target", inverse),
                                                     *_kept(instr)], shape=shape))
    return tuple(out)


COLLECTIVE_VJP_RULES: dict[str, Rule] = {
    "all-gather": vjp_all_gather,
    "all-reduce": vjp_all_reduce,
    "all-to-all": vjp_all_to_all,
    "collective-broadcast": vjp_collective_broadcast,
    "collective-permute": vjp_collective_permute,
    "ragged-all-to-all": vjp_ragged_all_to_all,
    "reduce-scatter": vjp_reduce_scatter,
}
