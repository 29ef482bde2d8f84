"""The ``reduce`` rule: reduced dims become extra tensor axes, reduced with ``tl.reduce``.

Each reduce of the fusion owns one kernel axis per reduced dim (assigned by ``kernel_plan``).
A *persistent* reduction holds the whole dim padded to a power of two; a *looped* one
(``kernel_plan`` chose a reduction chunk) walks the dim in chunks, reducing each chunk and
combining it into a loop-carried accumulator.  Padding lanes are marked invalid and ignored
by the generated masked combiner (``combine_function``), so any ``to_apply`` works, identity
or not; the accumulator starts invalid (its value is never read).  Axes are reduced one at a
time with ``keep_dims=True`` so results still broadcast against the rank-K kernel space; then
the init value is combined in once, and 16-bit results are rounded to their declared type
(16-bit inputs accumulate in fp32).  Variadic reduces (argmax), and every reduce of a kernel
for the interpreter, reduce by halving steps instead, which keep the operands' order.
:func:`emit_reduction` is shared with reduce-window.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

from fusion.errors import UnsupportedOpError
from fusion.ir.hlo_module import HloInstruction
from fusion.analysis.reduction_kind import kept_and_reduced
from tiling.maps.affine_expr import AffineExpr, DimExpr
from triton_backend.lowering.rules.combine_function import (
    accumulator_type,
    render_combine_function,
)
from triton_backend.lowering.emitter.value_emitter import Value, ValueEmitter, array_shape
from triton_backend.lowering.emitter.triton_types import (FLOAT8, register_dtype, render_round,
                                                          storage_dtype)
from triton_backend.lowering.emitter.identifiers import sanitize
from triton_backend.lowering.rules.ordered_reduction import emit_ordered_fold, folds_in_order
from triton_backend.lowering.rules.split_reduction import join_parts

#: ``lanes(fresh dims) -> (values, extra validity mask or None)`` for one reduction.
Lanes = Callable[[list[DimExpr]], tuple[list[str], str | None]]


def combine_function(em: ValueEmitter, to_apply: str, arity: int) -> str:
    """The name of the generated masked combiner of ``to_apply`` (generated once per kernel)."""
    key = f"{to_apply}/{arity}"
    if key not in em.helper_functions:
        name = em.names.fresh(f"combine_{sanitize(to_apply)}")
        em.helper_functions[key] = render_combine_function(em.module.computation(to_apply), name, arity)
        em.helper_names[key] = name
    return em.helper_names[key]


def emit_reduction(em: ValueEmitter, instr: HloInstruction, out_indices: tuple[AffineExpr, ...],
                   extents: Sequence[int], lanes: Lanes, input_types, init_names: Sequence[str],
                   tree_windows: bool = False) -> Value:
    """Reduce ``lanes`` over the axes ``kernel_plan`` gave ``instr``; combine the inits in once.

    ``out_indices`` are the indices the result is wanted at (they fix its kept axes).  An
    8-bit float result folds in XLA:CPU's order instead (``ordered_reduction``; with
    ``tree_windows``, a reduce's long dims windowed as XLA does).
    """
    arity = len(init_names)
    combine = combine_function(em, instr.attr("to_apply"), arity)
    if folds_in_order(instr, arity):
        return emit_ordered_fold(em, instr, out_indices, extents, lanes, init_names[0], combine,
                                 tree_windows)
    axes = em.reduce_axes[instr.name]
    reduced_shape = em.shape_of(out_indices)
    full_shape = tuple(em.axis_blocks[a] if a in axes else n for a, n in enumerate(reduced_shape))
    if em.reduction_chunk is None:
        fresh = [em.new_dim(f"r_{instr.name}_{k}", axis, extent)
                 for k, (axis, extent) in enumerate(zip(axes, extents))]
        accumulators = _reduced_chunk(em, instr, fresh, extents, lanes, full_shape, axes, combine)
    else:
        split = em.split is not None and em.split.plan.reduce == instr.name
        accumulators = _looped(em, instr, axes, extents, lanes, full_shape, reduced_shape,
                               input_types, combine, split)
        if split:
            dtypes = [register_dtype(accumulator_type(t)) for t in input_types] + ["tl.int8"]
            accumulators = join_parts(em, instr.name, accumulators, dtypes, reduced_shape,
                                      combine)
    # Scalars are broadcast to the reduced shape: the interpreter mishandles rank-0 operands.
    init_values = [f"tl.broadcast_to({em.scalar_value(name)}, {reduced_shape})" for name in init_names]
    results = [em.names.fresh(f"{instr.name}_r{i}") for i in range(arity)]
    em.emit(f"{', '.join(results)}, _ = {combine}({', '.join(init_values)}, "
            f"tl.full({reduced_shape}, 1, tl.int8), {', '.join(accumulators)})")
    tuple_shaped = arity > 1 or not hasattr(instr.shape, "dims")
    out_types = [s.element_type for s in instr.shape.elements] if tuple_shaped else [instr.shape.element_type]
    for name, t in zip(results, out_types):
        if t.name in ("bf16", "f16"):
            em.emit(f"{name} = {name}.to({storage_dtype(t)}).to(tl.float32)")
        elif t.name in FLOAT8:
            em.emit(f"{name} = {render_round(name, t)}")
    return tuple(results) if tuple_shaped else results[0]


def _reduced_chunk(em, instr, fresh, extents, lanes, shape, axes, combine) -> list[str]:
    """Emit one chunk's values and validity, reduced over ``axes``; return the identifiers."""
    values, extra = lanes(fresh)
    valid = em.in_bounds(tuple(fresh), tuple(extents))
    valid = " & ".join(f"({v})" for v in (valid, extra) if v) or "tl.full([], 1, tl.int1)"
    accumulators = [em.bind(f"tl.broadcast_to({v}, {shape})", f"{instr.name}_in") for v in values]
    accumulators.append(em.bind(f"tl.broadcast_to(({valid}).to(tl.int8), {shape})", f"{instr.name}_valid"))
    # A variadic reducer (argmax's value and index) need not be commutative: JAX's picks the
    # first of two NaNs.  tl.reduce combines lanes in no fixed order (a GPU argmax over [.., nan,
    # -nan, ..] gave the second NaN's index), halving steps always combine (lower, higher).
    in_order = em.tree_reductions or len(values) > 1
    for axis in axes:
        if in_order:
            accumulators = emit_tree_reduce(em, accumulators, axis, shape, combine, instr.name)
        else:
            accumulators = _emit_tl_reduce(em, accumulators, axis, shape, combine, instr.name)
        shape = tuple(1 if a == axis else n for a, n in enumerate(shape))
    return accumulators


def _emit_tl_reduce(em: ValueEmitter, tensors: list[str], axis: int, shape: tuple[int, ...],
                    combine: str, hint: str) -> list[str]:
    """``tl.reduce`` of ``tensors`` over ``axis`` keeping it as size 1, along the partner
    axis (``_partner_axis``) when there is one."""
    partner = _partner_axis(em, axis, shape)
    if partner is not None:
        order = list(range(len(shape)))
        order[axis], order[partner] = partner, axis
        tensors = [em.bind(f"tl.permute({t}, {tuple(order)})", f"{hint}_t") for t in tensors]
    reduced = [em.names.fresh(f"{hint}_acc") for _ in tensors]
    em.emit(f"{', '.join(reduced)} = tl.reduce(({', '.join(tensors)},), "
            f"{axis if partner is None else partner}, {combine}, keep_dims=True)")
    return reduced


def _partner_axis(em: ValueEmitter, axis: int, shape: tuple[int, ...]) -> int | None:
    """The output axis to reduce along instead of ``axis``: the last one the operand is
    broadcast over (size 1 in ``shape``) while the kernel's tile spans it; None when none.

    A row reduction's operand is ``[rows, 1, R]`` and its result broadcasts back over the
    ``[rows, C, 1]`` tile.  Reduced along axis 2, the result's layout is a slice of the
    reduction's (threads along axis 2), and Triton before 3.9 then moved the whole tile into
    that layout, every thread holding all C elements (a 1024x8192 layernorm compiled for 7
    minutes to 3 MB of PTX).  Swapping the reduced axis onto the tile's axis first (one
    permute of the operand, whose result is the same since both axes end with size 1) keeps
    the result in the tile's layout family.
    """
    reduce_axes = {a for axes in em.reduce_axes.values() for a in axes}
    for k in reversed(range(len(shape))):
        if k != axis and k not in reduce_axes and shape[k] == 1 and em.axis_blocks[k] > 1:
            return k
    return None


def emit_tree_reduce(em: ValueEmitter, tensors: list[str], axis: int, shape: tuple[int, ...],
                     combine: str, hint: str) -> list[str]:
    """Reduce ``tensors`` (one shape, ``axis`` a power of two) over ``axis`` with ``combine``,
    keeping the axis as size 1, by halving steps: split the axis into (even, odd) element
    pairs with ``tl.reshape`` + ``tl.split`` and combine the halves, ``log2(n)`` times.

    The result equals ``tl.reduce`` for an associative combiner (a pairwise tree, as a GPU
    reduces too); under the interpreter each step is one vectorized combine, where
    ``tl.reduce`` calls the combiner once per element.
    """
    rank = len(shape)
    order = [a for a in range(rank) if a != axis] + [axis]
    outer = [shape[a] for a in order[:-1]]
    n = shape[axis]
    if n == 1:
        return tensors
    if axis != rank - 1:
        tensors = [em.bind(f"tl.permute({t}, {tuple(order)})", f"{hint}_t") for t in tensors]
    while n > 1:
        n //= 2
        evens, odds = [], []
        for t in tensors:
            even, odd = em.names.fresh(f"{hint}_even"), em.names.fresh(f"{hint}_odd")
            em.emit(f"{even}, {odd} = tl.split(tl.reshape({t}, {tuple(outer + [n, 2])}))")
            evens.append(even)
            odds.append(odd)
        tensors = [em.names.fresh(f"{hint}_acc") for _ in tensors]
        em.emit(f"{', '.join(tensors)} = {combine}({', '.join(evens)}, {', '.join(odds)})")
    # The reduced axis has size 1, so putting it back in place reorders no data.
    kept = tuple(1 if a == axis else m for a, m in enumerate(shape))
    return [em.bind(f"tl.reshape({t}, {kept})", f"{hint}_acc") for t in tensors]


def _looped(em, instr, axes, extents, lanes, full_shape, reduced_shape, input_types, combine,
            split: bool) -> list[str]:
    # Reductions the chunks need that do not depend on the loop (softmax's max, needed by its
    # sum's chunks) are emitted once, above the accumulators: the loops hoist them.
    above_accumulators = len(em.lines)
    accumulators = [em.bind(f"tl.zeros({reduced_shape}, {register_dtype(accumulator_type(t))})",
                            f"{instr.name}_acc") for t in input_types]
    accumulators.append(em.bind(f"tl.zeros({reduced_shape}, tl.int8)", f"{instr.name}_acc_valid"))
    loops = []
    # A split reduction's outermost loop walks this program's span of the dim only.
    for k, (axis, extent) in enumerate(zip(axes, extents)):
        block = em.axis_blocks[axis]
        start = em.names.fresh(f"r_{instr.name}_{k}_start")
        bounds = em.split.loop_bounds(block) if split and k == 0 else \
            em.loop_bounds.get(axis, f"0, {extent}, {block}")
        header = f"for {start} in range({bounds}):"
        context = em.block(header, hoist=True, hoist_at=None if loops else above_accumulators)
        loops.append((context, start, axis, extent, block))
    fresh = []
    for context, start, axis, extent, block in loops:
        context.__enter__()
        upper = -(-extent // block) * block - 1
        if split and not fresh:  # the parts' spans may run past the dim (masked lanes)
            upper = max(upper, em.split.plan.parts * em.split.plan.span - 1)
        fresh.append(em.new_dim(f"r_{instr.name}_{len(fresh)}", axis, extent, start, upper))
    chunk = _reduced_chunk(em, instr, fresh, extents, lanes, full_shape, axes, combine)
    em.emit(f"{', '.join(accumulators)} = {combine}({', '.join(accumulators)}, {', '.join(chunk)})")
    for context, *_ in reversed(loops):
        context.__exit__(None, None, None)
    return accumulators


def lower_reduce(em: ValueEmitter, instr: HloInstruction, indices: tuple[AffineExpr, ...]) -> Value:
    """Emit ``instr`` (a possibly variadic reduce) at its output ``indices``."""
    arity = len(instr.operands) // 2
    inputs, inits = instr.operands[:arity], instr.operands[arity:]
    in_shape = array_shape(em.instruction(inputs[0]))
    kept, dims = kept_and_reduced(in_shape.rank, instr.attr("dimensions"))

    def lanes(fresh: list[DimExpr]) -> tuple[list[str], None]:
        at = {**dict(zip(dims, fresh)), **dict(zip(kept, indices))}
        operand_indices = tuple(at[k] for k in range(in_shape.rank))
        values = []
        for name in inputs:
            value = em.value(name, operand_indices)
            if not isinstance(value, str):
                raise UnsupportedOpError("reduce of a tuple-shaped operand", where=instr.name)
            values.append(value)
        return values, None

    types = [array_shape(em.instruction(n)).element_type for n in inputs]
    return emit_reduction(em, instr, indices, [in_shape.dims[d] for d in dims], lanes, types, inits,
                          tree_windows=True)


__all__ = ["combine_function", "emit_reduction", "emit_tree_reduce", "lower_reduce"]
