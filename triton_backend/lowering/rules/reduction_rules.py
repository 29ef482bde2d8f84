"""The ``reduce`` rule: reduced dims become extra tensor axes, reduced with ``tl.reduce``.

Each reduce of the fusion owns one kernel axis per reduced dim (assigned by ``kernel_plan``).
A *persistent* reduction holds the whole dim padded to a power of two; a *looped* one
(``kernel_plan`` chose a reduction chunk) walks the dim in chunks, reducing each chunk and
combining it into a loop-carried accumulator.  A persistent reduction over a dim that the
output tile walks whole reduces along the tile's axis instead (``_tile_dims``).  Padding lanes are marked invalid and ignored
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
from fusion.ir.hlo_module import HloComputation, HloInstruction
from fusion.analysis.reduction_kind import kept_and_reduced
from tiling.maps.affine_expr import AffineExpr, DimExpr
from triton_backend.lowering.rules.combine_function import (
    accumulator_type,
    render_combine_function,
)
from triton_backend.lowering.emitter.value_emitter import Value, ValueEmitter, array_shape
from triton_backend.lowering.emitter.triton_types import register_dtype, render_round
from triton_backend.lowering.emitter.identifiers import sanitize
from triton_backend.lowering.rules.ordered_reduction import emit_ordered_fold, folds_in_order
from triton_backend.lowering.rules.split_reduction import join_parts

#: ``lanes(fresh dims) -> (values, extra validity mask or None)`` for one reduction.
Lanes = Callable[[list[DimExpr]], tuple[list[str], str | None]]


def combine_function(em: ValueEmitter, to_apply: str, arity: int, masked: bool = True) -> str:
    """The name of the generated masked (or plain) combiner of ``to_apply`` (generated once
    per kernel)."""
    key = f"{to_apply}/{arity}" + ("" if masked else "/plain")
    if key not in em.helper_functions:
        name = em.names.fresh(f"combine_{sanitize(to_apply)}" + ("" if masked else "_plain"))
        em.helper_functions[key] = render_combine_function(em.module.computation(to_apply), name,
                                                           arity, masked)
        em.helper_names[key] = name
    return em.helper_names[key]


def emit_reduction(em: ValueEmitter, instr: HloInstruction, out_indices: tuple[AffineExpr, ...],
                   extents: Sequence[int], lanes: Lanes, input_types, init_names: Sequence[str],
                   tree_windows: bool = False, on_tile: bool = False) -> Value:
    """Reduce ``lanes`` over the axes ``kernel_plan`` gave ``instr``; combine the inits in once.

    ``out_indices`` are the indices the result is wanted at (they fix its kept axes).  An
    8-bit float result folds in XLA:CPU's order instead (``ordered_reduction``; with
    ``tree_windows``, a reduce's long dims windowed as XLA does).  ``on_tile``: a persistent
    reduction may walk the output tile's own dims (:func:`_tile_dims`).
    """
    arity = len(init_names)
    combine = combine_function(em, instr.attr("to_apply"), arity)
    if folds_in_order(instr, arity):
        return emit_ordered_fold(em, instr, out_indices, extents, lanes, init_names[0], combine,
                                 tree_windows)
    axes = em.reduce_axes[instr.name]
    tile = _tile_dims(em, out_indices, extents) if on_tile and em.reduction_chunk is None \
        else None
    if tile:
        axes = tuple(em.dims[v.index].axis for v in tile)
    reduced_shape = em.shape_of(out_indices)
    full_shape = tuple(em.axis_blocks[a] if a in axes else n for a, n in enumerate(reduced_shape))
    if em.reduction_chunk is None:
        dims = tile or [em.new_dim(f"r_{instr.name}_{k}", axis, extent)
                        for k, (axis, extent) in enumerate(zip(axes, extents))]
        accumulators = _reduced_chunk(em, instr, dims, extents, lanes, full_shape, axes, combine,
                                      partner=not tile, plain=True)
    else:
        split = em.split is not None and em.split.plan.reduce == instr.name
        accumulators = _looped(em, instr, axes, extents, lanes, full_shape, reduced_shape,
                               input_types, combine, split)
        if split:
            dtypes = [register_dtype(accumulator_type(t)) for t in input_types] + ["tl.int8"]
            accumulators = join_parts(em, instr.name, accumulators, dtypes, reduced_shape,
                                      combine)
    return _with_inits(em, instr, reduced_shape, accumulators, init_names, combine)


def _with_inits(em: ValueEmitter, instr: HloInstruction, reduced_shape: tuple[int, ...],
                accumulators: list[str], init_names: Sequence[str], combine: str) -> Value:
    """The result of ``instr``: its init values combined into ``accumulators`` (values, then
    validity flags) once with the masked ``combine``, 16-bit and 8-bit float results rounded
    to their declared type."""
    return fold_in(em, instr, reduced_shape, accumulators,
                   [em.scalar_value(name) for name in init_names], combine)


def fold_in(em: ValueEmitter, instr: HloInstruction, reduced_shape: tuple[int, ...],
            accumulators: list[str], starts: Sequence[str], combine: str) -> Value:
    """:func:`_with_inits` with the values ``starts`` (broadcast to ``reduced_shape``) in place
    of the init values: a carried scan starts from its output next to the tile."""
    arity = len(starts)
    # Scalars are broadcast to the reduced shape: the interpreter mishandles rank-0 operands.
    init_values = [f"tl.broadcast_to({value}, {reduced_shape})" for value in starts]
    results = [em.names.fresh(f"{instr.name}_r{i}") for i in range(arity)]
    em.emit(f"{', '.join(results)}, _ = {combine}({', '.join(init_values)}, "
            f"tl.full({reduced_shape}, 1, tl.int8), {', '.join(accumulators)})")
    tuple_shaped = arity > 1 or not hasattr(instr.shape, "dims")
    out_types = [s.element_type for s in instr.shape.elements] if tuple_shaped else [instr.shape.element_type]
    for name, t in zip(results, out_types):
        # xla_math's rounding: the interpreter's .to(tl.bfloat16) truncates
        rounded = render_round(name, t)
        if rounded != name:
            em.emit(f"{name} = {rounded}")
    return tuple(results) if tuple_shaped else results[0]


def _tile_dims(em: ValueEmitter, out_indices: tuple[AffineExpr, ...],
               extents: Sequence[int]) -> list[DimExpr] | None:
    """Per reduced dim, a dim variable of the output tile (``em.tile_dims``) that walks the
    whole of it, or None where some reduced dim has none.

    A softmax's row of 1,024 is one output tile: its max and sum may reduce along the tile's
    own axis instead of an axis of their own, so the row is loaded and ``exp(x - max)``
    computed once, for the sum and for the output (``em.value`` finds them at the same
    indices), as Triton's softmax tutorial does.  A dim variable qualifies when it walks
    exactly ``[0, extent)`` (one tile along its axis: ``upper`` is ``block - 1``), the
    result does not vary along its axis, and no other reduced dim took it.
    """
    taken: list[DimExpr] = []
    spanned = em.shape_of(out_indices)
    for extent in extents:
        for v in em.tile_dims:
            var = em.dims[v.index]
            if (v not in taken and var.extent == extent and var.upper == var.block - 1
                    and var.block > 1 and spanned[var.axis] == 1):
                taken.append(v)
                break
        else:
            return None
    return taken


def _reduced_chunk(em, instr, fresh, extents, lanes, shape, axes, combine,
                   partner: bool = True, plain: bool = False) -> list[str]:
    """Emit one chunk's values and validity, reduced over ``axes``; return the identifiers
    (the values' then the validity flag's).  With ``plain``, where every lane is valid, the
    values reduce with the plain combiner and the flag is a constant.

    Only persistent reductions take the plain combiner: in the chunks of a loop it saved
    instructions but not registers (on Triton 3.9 the f32 cross-entropy's loop spilled 8
    bytes with it, the attention backward's row statistics 24; none with the flags)."""
    values, extra = lanes(fresh)
    valid = em.in_bounds(tuple(fresh), tuple(extents))
    valid = " & ".join(f"({v})" for v in (valid, extra) if v)
    flagged = bool(valid) or not plain
    accumulators = [em.bind(f"tl.broadcast_to({v}, {shape})", f"{instr.name}_in") for v in values]
    if flagged:
        accumulators.append(em.bind(f"tl.broadcast_to(({valid or 'tl.full([], 1, tl.int1)'})"
                                    f".to(tl.int8), {shape})", f"{instr.name}_valid"))
    else:
        combine = combine_function(em, instr.attr("to_apply"), len(values), masked=False)
    # A variadic reducer (argmax's value and index) need not be commutative: JAX's picks the
    # first of two NaNs.  tl.reduce combines lanes in no fixed order (a GPU argmax over [.., nan,
    # -nan, ..] gave the second NaN's index), halving steps always combine (lower, higher).
    in_order = em.tree_reductions or len(values) > 1
    for axis in axes:
        if in_order:
            accumulators = emit_tree_reduce(em, accumulators, axis, shape, combine, instr.name)
        else:
            accumulators = _emit_tl_reduce(em, accumulators, axis, shape, combine, instr.name,
                                           partner)
        shape = tuple(1 if a == axis else n for a, n in enumerate(shape))
    if not flagged:
        accumulators.append(em.bind(f"tl.full({shape}, 1, tl.int8)", f"{instr.name}_valid"))
    return accumulators


def _emit_tl_reduce(em: ValueEmitter, tensors: list[str], axis: int, shape: tuple[int, ...],
                    combine: str, hint: str, partner_axis: bool = True) -> list[str]:
    """``tl.reduce`` of ``tensors`` over ``axis`` keeping it as size 1, along the partner
    axis (``_partner_axis``) when there is one and ``partner_axis`` allows it."""
    partner = _partner_axis(em, axis, shape) if partner_axis else None
    if partner is not None:
        order = list(range(len(shape)))
        order[axis], order[partner] = partner, axis
        tensors = [em.bind(f"tl.permute({t}, {tuple(order)})", f"{hint}_t") for t in tensors]
    reduced = [em.names.fresh(f"{hint}_acc") for _ in tensors]
    # One tensor goes in bare: a 1-tuple in gives a 1-tuple out.
    operand = tensors[0] if len(tensors) == 1 else f"({', '.join(tensors)},)"
    em.emit(f"{', '.join(reduced)} = tl.reduce({operand}, "
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
    accumulators = _zero_accumulators(em, instr, reduced_shape, input_types)
    fresh, loops = _open_loops(em, instr.name, axes, extents, split, above_accumulators)
    chunk = _reduced_chunk(em, instr, fresh, extents, lanes, full_shape, axes, combine)
    em.emit(f"{', '.join(accumulators)} = {combine}({', '.join(accumulators)}, {', '.join(chunk)})")
    for context in reversed(loops):
        context.__exit__(None, None, None)
    return accumulators


def _zero_accumulators(em, instr, reduced_shape, input_types) -> list[str]:
    accumulators = [em.bind(f"tl.zeros({reduced_shape}, {register_dtype(accumulator_type(t))})",
                            f"{instr.name}_acc") for t in input_types]
    accumulators.append(em.bind(f"tl.zeros({reduced_shape}, tl.int8)", f"{instr.name}_acc_valid"))
    return accumulators


def _open_loops(em, hint: str, axes, extents, split: bool, above_accumulators: int):
    """Open the loop nest walking ``axes`` in chunks (left open: the caller closes the
    returned contexts, innermost last); the fresh dim variable of each axis."""
    loops = []
    # A split reduction's outermost loop walks this program's span of the dim only.
    for k, (axis, extent) in enumerate(zip(axes, extents)):
        block = em.axis_blocks[axis]
        start = em.names.fresh(f"r_{hint}_{k}_start")
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
        fresh.append(em.new_dim(f"r_{hint}_{len(fresh)}", axis, extent, start, upper))
    return fresh, [context for context, *_ in loops]


def emit_sibling_reductions(em: ValueEmitter, requests: Sequence[tuple[str, tuple[AffineExpr, ...]]],
                            online: Callable[[str, str], bool] | None = None) -> None:
    """Emit the reduces ``requests`` (``(name, output indices)``), siblings sharing a loop,
    and remember their results, so that later ``em.value`` asks find them.

    The loop that each looped reduce gets alone (:func:`emit_reduction`) recomputes what its
    operands read per chunk (an attention backward's row statistics recompute the scores, one
    ``tl.dot`` or two per key block, in each).  Here the requests are taken by dependency
    level (a reduce reading no other request first, then those reading only the first level,
    ...), and the looped ones of a level walking the same kernel axes share one loop nest,
    which computes what they read once per chunk.  Each keeps its own accumulators and
    combiner, so every result is what its own loop gives, bit for bit.  A request that cannot
    share (a persistent reduction, one split among programs or folded in order, one on other
    axes) is emitted alone, after its level's shared loop.

    ``online(top, total)`` (None: never) says that the sum ``total`` of ``exp(a - top)``
    may join the level of the maximum ``top`` it reads (``tiling.fusion_pass.online_softmax.
    online_sum`` checks that): the loop keeps the running maximum and rescales the running
    sum as it grows, FlashAttention's online softmax (:func:`_emit_shared_loop`).  That sum
    is then rounded differently from its own loop's (within f32's tolerance), not bit for bit.
    """
    pending = [(name, tuple(idx)) for name, idx in requests]
    names = [name for name, _ in pending]
    reads = _reads(em, names)
    at = dict(pending)
    pairs = {total: top for top in names for total in names
             if online is not None and top in reads[total] and at[top] == at[total]
             and online(top, total)}
    for level in _levels(names, reads, pairs):
        batch = [r for r in pending if r[0] in level and r not in em.memo]
        shared = [r for r in batch if _can_share(em, r[0], batch[0][0])] if batch else []
        if len(shared) > 1:
            together = {r[0] for r in shared}
            _emit_shared_loop(em, shared, {total: top for total, top in pairs.items()
                                           if total in together and top in together})
        for name, indices in batch:
            em.value(name, indices)


def _reads(em: ValueEmitter, names: Sequence[str]) -> dict[str, set[str]]:
    """Per name, the others of ``names`` it reads through the fused computation."""
    wanted = set(names)
    reads: dict[str, set[str]] = {}
    for name in names:
        seen, stack = set(), list(em.instruction(name).operands)
        while stack:
            current = stack.pop()
            if current not in seen:
                seen.add(current)
                stack.extend(em.instruction(current).operands)
        reads[name] = seen & wanted
    return reads


def _levels(names: Sequence[str], reads: dict[str, set[str]],
            pairs: dict[str, str]) -> list[set[str]]:
    """``names`` by dependency level: each reads only names of earlier levels, except that
    an online sum (``pairs``: sum -> maximum) counts as reading what its maximum reads."""
    reads = {n: ((r - {pairs[n]}) | reads[pairs[n]]) if n in pairs else r
             for n, r in reads.items()}
    level: dict[str, int] = {}
    remaining = list(names)
    while remaining:
        ready = [n for n in remaining if all(r in level for r in reads[n])]
        if not ready:  # a cycle cannot occur in HLO; keep the given order if it did
            ready = remaining[:1]
        for n in ready:
            level[n] = 1 + max((level[r] for r in reads[n] if r in level), default=0)
        remaining = [n for n in remaining if n not in level]
    return [{n for n in names if level[n] == k} for k in sorted(set(level.values()))]


def _can_share(em: ValueEmitter, name: str, first: str) -> bool:
    instr = em.instruction(name)
    arity = len(instr.operands) // 2
    return (instr.opcode == "reduce" and em.reduction_chunk is not None
            and not (em.split is not None and em.split.plan.reduce == name)
            and not folds_in_order(instr, arity)
            and em.reduce_axes.get(name) == em.reduce_axes.get(first)
            and reduced_extents(em.computation, name) == reduced_extents(em.computation, first))


def reduced_extents(computation: HloComputation, name: str) -> tuple[int, ...]:
    """The sizes a reduce's (reduce-window's) reduction axes walk, in its dim order."""
    instr = computation.instruction(name)
    if instr.opcode == "reduce-window":
        return tuple(d.size for d in instr.attr("window").dims if d.size > 1)
    operand = array_shape(computation.instruction(instr.operands[0]))
    _, reduced = kept_and_reduced(operand.rank, instr.attr("dimensions"))
    return tuple(operand.dims[k] for k in reduced)


def _emit_shared_loop(em: ValueEmitter, requests: list[tuple[str, tuple[AffineExpr, ...]]],
                      pairs: dict[str, str]) -> None:
    """One loop nest computing every reduce of ``requests``; ``pairs`` (sum -> maximum, both
    requested at the same indices) are online sums.

    An online sum reads its maximum's running value, as ``emit_reduction`` would give it were
    the loop to stop at this chunk, with ``-inf`` read as 0 (FlashAttention's ``m_used``: the
    lanes seen so far are then all ``-inf`` and add ``exp(-inf) = 0``, not NaN).  Before a
    chunk is added, the sum is rescaled by ``exp(min(m_used_before - m_used, 0))`` (at most 1;
    below 1 only as the maximum grows).  A row whose maximum ends ``-inf`` sums to NaN, as
    ``exp(-inf - -inf)`` in its own loop does (``online_sum`` checked the sum's operand).
    """
    first = em.instruction(requests[0][0])
    axes, extents = em.reduce_axes[first.name], reduced_extents(em.computation, first.name)
    above_accumulators = len(em.lines)
    requests = sorted(requests, key=lambda r: r[0] in pairs)  # a sum after its maximum
    plans = []
    for name, indices in requests:
        instr = em.instruction(name)
        arity = len(instr.operands) // 2
        inputs = instr.operands[:arity]
        types = [array_shape(em.instruction(n)).element_type for n in inputs]
        reduced_shape = em.shape_of(indices)
        full_shape = tuple(em.axis_blocks[a] if a in axes else n
                           for a, n in enumerate(reduced_shape))
        combine = combine_function(em, instr.attr("to_apply"), arity)
        plans.append((instr, indices, reduced_shape, full_shape, combine,
                      _zero_accumulators(em, instr, reduced_shape, types)))
    used_before = {top: em.bind(f"tl.zeros({em.shape_of(indices)}, tl.float32)",
                                f"{sanitize(top)}_used")
                   for top, indices in requests if top in pairs.values()}
    fresh, loops = _open_loops(em, "_".join(sanitize(n) for n, _ in requests[:2]), axes, extents,
                               False, above_accumulators)
    for instr, indices, reduced_shape, full_shape, combine, accumulators in plans:
        top = pairs.get(instr.name)
        if top is not None:  # the running maximum, as the sum's operand reads it
            used = em.memo[(top, indices)]
            alpha = em.bind(f"tl.exp(tl.minimum({used_before[top]} - {used}, 0.0))",
                            f"{sanitize(instr.name)}_rescale")
            em.emit(f"{accumulators[0]} = {accumulators[0]} * {alpha}")
        chunk = _reduced_chunk(em, instr, fresh, extents, _operand_lanes(em, instr, indices),
                               full_shape, axes, combine)
        em.emit(f"{', '.join(accumulators)} = {combine}({', '.join(accumulators)}, "
                f"{', '.join(chunk)})")
        if top is not None:
            em.emit(f"{used_before[top]} = {em.memo[(top, indices)]}")
        if instr.name in used_before:
            arity = len(instr.operands) // 2
            running = _with_inits(em, instr, reduced_shape, accumulators,
                                  instr.operands[arity:], combine)
            used = em.bind(f"tl.where({running} == -float('inf'), 0.0, {running})",
                           f"{sanitize(instr.name)}_running")
            em.remember(instr.name, indices, used)  # forgotten when the loop's block closes
    for context in reversed(loops):
        context.__exit__(None, None, None)
    for instr, indices, reduced_shape, _, combine, accumulators in plans:
        top = pairs.get(instr.name)
        if top is not None:
            em.emit(f"{accumulators[0]} = tl.where(({accumulators[-1]} != 0) & "
                    f"({em.memo[(top, indices)]} == -float('inf')), float('nan'), "
                    f"{accumulators[0]})")
        arity = len(instr.operands) // 2
        em.remember(instr.name, indices, _with_inits(em, instr, reduced_shape, accumulators,
                                                     instr.operands[arity:], combine))


def lower_reduce(em: ValueEmitter, instr: HloInstruction, indices: tuple[AffineExpr, ...]) -> Value:
    """Emit ``instr`` (a possibly variadic reduce) at its output ``indices``."""
    arity = len(instr.operands) // 2
    inputs, inits = instr.operands[:arity], instr.operands[arity:]
    types = [array_shape(em.instruction(n)).element_type for n in inputs]
    return emit_reduction(em, instr, indices, list(reduced_extents(em.computation, instr.name)),
                          _operand_lanes(em, instr, indices), types, inits, tree_windows=True,
                          on_tile=True)


def _operand_lanes(em: ValueEmitter, instr: HloInstruction,
                   indices: tuple[AffineExpr, ...]) -> Lanes:
    """The lanes of reduce ``instr``'s operands at output ``indices`` and the fresh dims."""
    arity = len(instr.operands) // 2
    inputs = instr.operands[:arity]
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

    return lanes


__all__ = ["combine_function", "emit_reduction", "emit_sibling_reductions", "emit_tree_reduce",
           "fold_in", "lower_reduce", "reduced_extents"]
