"""VJP rules of the indexed ops: ``gather``, ``scatter`` and ``sort``.

* gather: a scatter-add of the cotangent into zeros, from start indices clamped as gather
  clamps them (scatter would drop an out-of-bounds window instead).
* scatter (add, or overwrite): the operand's cotangent passes (or is zeroed where
  overwritten); the updates' is a gather of it, zero for windows scatter dropped.
* sort: sorted again with an iota as an extra operand, which gives the permutation the sort
  applies; each cotangent is scattered back through it.

>>> sorted(INDEXED_VJP_RULES)
['gather', 'scatter', 'sort']
"""
from __future__ import annotations

from typing import Sequence

from fusion.ir.attributes import Literal
from fusion.autodiff.combiner_kind import CombinerKind, combiner_kind
from fusion.autodiff.cotangents import Cotangent
from fusion.autodiff.graph_builder import GraphBuilder
from fusion.autodiff.reverse_pass import Rule, VjpContext
from fusion.errors import UnsupportedOpError
from fusion.ir.hlo_module import HloComputation, HloInstruction
from fusion.ir.shape import ArrayShape, TupleShape

Cts = Sequence[Cotangent]


def _upper_bounds(b: GraphBuilder, indices: str, index_vector_dim: int,
                  bounds: Sequence[int]) -> str:
    """``bounds[k]`` laid along the index vector dim of ``indices`` (the largest valid start
    of each indexed operand dim)."""
    shape = b.array_shape(indices).with_layout(None)
    if index_vector_dim == shape.rank:
        return b.full(bounds[0], shape)
    vector = b.emit("constant", (), (("literal", Literal((len(bounds),), tuple(bounds))),),
                    ArrayShape(shape.dtype, (len(bounds),)))
    return b.broadcast(vector, shape.dims, (index_vector_dim,))


def _scatter_attributes(update_window_dims, inserted_window_dims, scatter_dims_to_operand_dims,
                        index_vector_dim, input_batching_dims, scatter_indices_batching_dims,
                        to_apply: str) -> list:
    attributes = [("update_window_dims", tuple(update_window_dims)),
                  ("inserted_window_dims", tuple(inserted_window_dims)),
                  ("scatter_dims_to_operand_dims", tuple(scatter_dims_to_operand_dims)),
                  ("index_vector_dim", index_vector_dim)]
    if input_batching_dims:
        attributes += [("input_batching_dims", tuple(input_batching_dims)),
                       ("scatter_indices_batching_dims", tuple(scatter_indices_batching_dims))]
    return attributes + [("to_apply", to_apply)]


def vjp_gather(ctx: VjpContext, instr: HloInstruction, ct: str) -> Cts:
    b = ctx.b
    operand = ctx.operand_shape(instr, 0)
    indices = ctx.operand(instr, 1)
    index_vector_dim = instr.attr("index_vector_dim")
    start_index_map = tuple(instr.attr("start_index_map"))
    slice_sizes = tuple(instr.attr("slice_sizes"))
    bounds = [operand.dims[d] - slice_sizes[d] for d in start_index_map]
    clamped = b.emit("clamp", (b.zeros(b.array_shape(indices).with_layout(None)), indices,
                               _upper_bounds(b, indices, index_vector_dim, bounds)))
    adder = b.table.scalar_reducer("add", operand.dtype)
    attributes = _scatter_attributes(
        instr.attr("offset_dims"), instr.attr("collapsed_slice_dims"), start_index_map,
        index_vector_dim, instr.attr("operand_batching_dims", ()),
        instr.attr("start_indices_batching_dims", ()), adder)
    grad = b.emit("scatter", (b.zeros(operand.with_layout(None)), clamped, ct), attributes)
    return (grad, None)


def _in_bounds_windows(b: GraphBuilder, instr: HloInstruction, indices: str,
                       operand: ArrayShape, window_sizes: Sequence[int],
                       updates: ArrayShape) -> str:
    """A pred of the updates' shape: whether scatter applies the window holding each element."""
    index_vector_dim = instr.attr("index_vector_dim")
    to_operand = tuple(instr.attr("scatter_dims_to_operand_dims"))
    bounds = [operand.dims[d] - window_sizes[d] for d in to_operand]
    low = b.compare(indices, b.zeros(b.array_shape(indices).with_layout(None)), "GE")
    high = b.compare(indices, _upper_bounds(b, indices, index_vector_dim, bounds), "LE")
    ok = b.emit("and", (low, high))
    if index_vector_dim < b.array_shape(indices).rank:
        ok = b.reduce(ok, b.scalar(True, "pred"), (index_vector_dim,), "and")
    window_dims = tuple(instr.attr("update_window_dims"))
    scatter_dims = [d for d in range(updates.rank) if d not in window_dims]
    return b.broadcast(ok, updates.dims, scatter_dims)


def vjp_scatter(ctx: VjpContext, instr: HloInstruction, ct: str) -> Cts:
    b = ctx.b
    if len(instr.operands) != 3:
        raise UnsupportedOpError(f"no VJP for the variadic scatter %{instr.name}",
                                 **instr._located())
    kind = combiner_kind(ctx.module, instr.attr("to_apply"))
    if kind not in (CombinerKind.ADD, CombinerKind.SET):
        raise UnsupportedOpError(
            f"no VJP for scatter %{instr.name}: its to_apply {instr.attr('to_apply')} is "
            "neither an add nor an overwrite", **instr._located())
    operand, updates = ctx.operand_shape(instr, 0), ctx.operand_shape(instr, 2)
    indices = ctx.operand(instr, 1)
    window_dims = tuple(instr.attr("update_window_dims"))
    inserted = tuple(instr.attr("inserted_window_dims"))
    operand_batching = tuple(instr.attr("input_batching_dims", ()))
    indices_batching = tuple(instr.attr("scatter_indices_batching_dims", ()))
    window_sizes, k = [], 0
    for d in range(operand.rank):
        if d in inserted or d in operand_batching:
            window_sizes.append(1)
        else:
            window_sizes.append(updates.dims[window_dims[k]])
            k += 1
    gather_attributes = [("offset_dims", window_dims), ("collapsed_slice_dims", inserted),
                         ("start_index_map", tuple(instr.attr("scatter_dims_to_operand_dims"))),
                         ("index_vector_dim", instr.attr("index_vector_dim"))]
    if operand_batching:
        gather_attributes += [("operand_batching_dims", operand_batching),
                              ("start_indices_batching_dims", indices_batching)]
    gather_attributes.append(("slice_sizes", tuple(window_sizes)))
    gathered = b.emit("gather", (ct, indices), gather_attributes)
    applied = _in_bounds_windows(b, instr, indices, operand, window_sizes, updates)
    grad_updates = b.select(applied, gathered, b.full_like(0, gathered))
    if kind is CombinerKind.ADD:
        return (ct, None, grad_updates)
    # Overwritten elements of the operand do not reach the result.
    attributes = [(k, v) for k, v in instr.attributes
                  if k not in ("indices_are_sorted", "unique_indices")]
    grad_operand = b.emit("scatter", (ct, indices, b.zeros(updates.with_layout(None))),
                          attributes)
    return (grad_operand, None, grad_updates)


def _comparator_with_indices(b: GraphBuilder, module, name: str, count: int) -> str:
    """The sort comparator ``name`` taking two more (ignored) parameters, for an s32 operand."""
    comp = module.computation(name)
    taken = {i.name for i in comp.instructions}
    extra = []
    for k, hint in enumerate(("index_lhs", "index_rhs")):
        label = hint
        while label in taken:
            label += "_"
        extra.append(HloInstruction(label, "parameter", ArrayShape("s32", ()), (),
                                    (("parameter_number", 2 * count + k),)))
    widened = HloComputation(b.table.fresh_name(name + "_with_indices"),
                             tuple(extra) + comp.instructions, comp.root_name)
    return b.table.add(widened)


def vjp_sort(ctx: VjpContext, instr: HloInstruction, ct: Cotangent) -> Cts:
    b = ctx.b
    (dim,) = instr.attr("dimensions")
    count = len(instr.operands)
    shapes = [ctx.operand_shape(instr, k) for k in range(count)]
    dims = shapes[0].dims
    rank = len(dims)
    comparator = _comparator_with_indices(b, ctx.module, instr.attr("to_apply"), count)
    iota = b.emit("iota", (), (("iota_dimension", dim),), ArrayShape("s32", dims))
    sorted_shape = TupleShape(tuple(s.with_layout(None) for s in shapes)
                              + (ArrayShape("s32", dims),))
    resorted = b.emit("sort", [ctx.operand(instr, k) for k in range(count)] + [iota],
                      (("dimensions", (dim,)), ("is_stable", True), ("to_apply", comparator)),
                      sorted_shape)
    permutation = b.get_tuple_element(resorted, count)
    coordinates = []
    for d in range(rank):
        along = permutation if d == dim else b.emit(
            "iota", (), (("iota_dimension", d),), ArrayShape("s32", dims))
        coordinates.append(b.reshape(along, dims + (1,)))
    indices = coordinates[0] if rank == 1 else b.emit(
        "concatenate", coordinates, (("dimensions", (rank,)),))
    cts = ct if isinstance(ct, tuple) else (ct,)
    grads = []
    for shape, c in zip(shapes, cts):
        if c is None:
            grads.append(None)
            continue
        adder = b.table.scalar_reducer("add", shape.dtype)
        attributes = _scatter_attributes((), range(rank), range(rank), rank, (), (), adder)
        grads.append(b.emit("scatter", (b.zeros(shape.with_layout(None)), indices, c),
                            attributes))
    return tuple(grads)


INDEXED_VJP_RULES: dict[str, Rule] = {
    "gather": vjp_gather,
    "scatter": vjp_scatter,
    "sort": vjp_sort,
}
