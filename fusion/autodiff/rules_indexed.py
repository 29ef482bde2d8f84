"""VJP rules of the indexed ops: ``gather``, ``scatter`` and ``sort``.

* gather: a scatter-add of the cotangent into zeros, from start indices clamped as gather
  clamps them (scatter would drop an out-of-bounds window instead).
* scatter (add, or overwrite): the operand's cotangent passes (or is zeroed where
  overwritten); the updates' is a gather of it, zero for windows scatter dropped.  A max
  (min) scatter's goes to the operand and updates equal to the result, shared evenly (JAX's
  ``_scatter_extremal_jvp``).
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
    if kind is CombinerKind.MUL or kind is None:
        raise UnsupportedOpError(
            f"no VJP for scatter %{instr.name}: its to_apply {instr.attr('to_apply')} is "
            "not an add, an overwrite, a max or a min", **instr._located())
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
    if kind in (CombinerKind.MAX, CombinerKind.MIN):
        return _extremal_scatter(ctx, instr, ct, gather_attributes, applied)
    grad_updates = b.select(applied, gathered, b.full_like(0, gathered))
    if kind is CombinerKind.ADD:
        return (ct, None, grad_updates)
    # Overwritten elements of the operand do not reach the result.
    attributes = [(k, v) for k, v in instr.attributes
                  if k not in ("indices_are_sorted", "unique_indices")]
    grad_operand = b.emit("scatter", (ct, indices, b.zeros(updates.with_layout(None))),
                          attributes)
    return (grad_operand, None, grad_updates)


def _extremal_scatter(ctx: VjpContext, instr: HloInstruction, ct: str,
                      gather_attributes: list, applied: str) -> Cts:
    """A max (min) scatter, as JAX's ``_scatter_extremal_jvp`` transposed: the cotangent of
    an element goes to the operand and the updates that equal the result there, shared
    evenly among them."""
    b = ctx.b
    operand, indices, updates = (ctx.operand(instr, k) for k in range(3))
    out = ctx.out(instr)
    operand_shape = ctx.operand_shape(instr, 0).with_layout(None)

    def gather(value: str) -> str:
        return b.emit("gather", (value, indices), gather_attributes)

    adder = b.table.scalar_reducer("add", operand_shape.dtype)
    attributes = [(k, adder if k == "to_apply" else v) for k, v in instr.attributes]

    def count(hits: str) -> str:  # how many applied updates per operand element
        ones = b.select(hits, b.full_like(1, updates), b.full_like(0, updates))
        return b.emit("scatter", (b.zeros(operand_shape), indices, ones), attributes)

    successful = b.emit("and", (b.compare(updates, gather(out), "EQ"), applied))
    retained = b.compare(operand, out, "EQ")
    winners, references = count(successful), count(applied)
    one, zero = b.full_like(1, winners), b.full_like(0, winners)
    shared = b.divide(one, b.add(winners, one))
    update_share = b.select(retained, shared, b.divide(one, winners))
    grad_updates = b.multiply(gather(ct), b.select(successful, gather(update_share),
                                                   b.full_like(0, updates)))
    operand_share = b.select(b.compare(references, zero, "GT"),
                             b.select(retained, shared, zero), one)
    return (b.multiply(ct, operand_share), None, grad_updates)


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
    comparator = _comparator_with_indices(b, ctx.module, instr.attr("to_apply"), count)
    iota = b.emit("iota", (), (("iota_dimension", dim),), ArrayShape("s32", dims))
    sorted_shape = TupleShape(tuple(s.with_layout(None) for s in shapes)
                              + (ArrayShape("s32", dims),))
    resorted = b.emit("sort", [ctx.operand(instr, k) for k in range(count)] + [iota],
                      (("dimensions", (dim,)), ("is_stable", True), ("to_apply", comparator)),
                      sorted_shape)
    permutation = b.get_tuple_element(resorted, count)
    cts = ct if isinstance(ct, tuple) else (ct,)
    return tuple(None if c is None else
                 scatter_add_along(b, c, permutation, dim, shape.with_layout(None))
                 for shape, c in zip(shapes, cts))


def scatter_add_along(b: GraphBuilder, ct: str, positions: str, dim: int,
                      shape: ArrayShape) -> str:
    """Zeros of ``shape`` with each element of ``ct`` added at its own coordinates but
    ``positions`` (s32, ``ct``'s dims) along ``dim``: the transpose of taking the elements at
    ``positions`` along ``dim`` (a sort's permutation, top-k's indices)."""
    dims = b.array_shape(ct).dims
    rank = len(dims)
    coordinates = []
    for d in range(rank):
        along = positions if d == dim else b.emit(
            "iota", (), (("iota_dimension", d),), ArrayShape("s32", dims))
        coordinates.append(b.reshape(along, dims + (1,)))
    indices = coordinates[0] if rank == 1 else b.emit(
        "concatenate", coordinates, (("dimensions", (rank,)),))
    adder = b.table.scalar_reducer("add", shape.dtype)
    attributes = _scatter_attributes((), range(rank), range(rank), rank, (), (), adder)
    return b.emit("scatter", (b.zeros(shape), indices, ct), attributes)


INDEXED_VJP_RULES: dict[str, Rule] = {
    "gather": vjp_gather,
    "scatter": vjp_scatter,
    "sort": vjp_sort,
}
