"""Indexing of gather: start indices are runtime variables read from the indices operand.

The seed shows the canonical form (``indices`` is ``[N, K]`` with ``index_vector_dim=1``, no
collapsed dims, ``start_index_map={0..K-1}``); this rule also accepts collapsed slice dims,
any ``start_index_map``, any ``index_vector_dim`` and operand batching dims.  Output dims not
in ``offset_dims`` are the batch dims; they index the indices operand, with ``index_vector_dim``
in between.  Operand dim ``k`` is read at ``offset_dim + rt_k`` (``rt_k`` only for ``k`` in
``start_index_map``, feasible in ``[0, operand_dim - slice_size]`` since XLA clamps the start
indices); an operand batching dim (``operand_batching_dims[i]``, slice size 1) is read at the
output batch dim of its partner ``start_indices_batching_dims[i]``, the gather ``jnp.take_along_axis``
and vmapped indexing give.
"""
from __future__ import annotations

from typing import Sequence

from tiling.maps.affine_expr import AffineExpr, Constant, d, s
from tiling.indexing_analysis.operands import Operand, array_dims
from tiling.maps.indexing_map import AffineMap, IndexingMap, RTVar
from tiling.maps.interval import Interval


def o2i_gather(instr, operands: Sequence[Operand], output_index: int):
    out = array_dims(instr.shape)
    operand_dims, indices_dims = operands[0].dims, operands[1].dims
    offset_dims = tuple(instr.attr("offset_dims"))
    collapsed = set(instr.attr("collapsed_slice_dims", ()))
    start_index_map = tuple(instr.attr("start_index_map"))
    index_vector_dim = instr.attr("index_vector_dim")
    slice_sizes = tuple(instr.attr("slice_sizes"))
    batch_dims = [i for i in range(len(out)) if i not in offset_dims]
    rank = len(out)
    # Indices dim -> the output batch dim it becomes (the indices dims but the index vector
    # dim, in order); operand batching dim -> that output dim of its indices partner.
    indices_batch = [j for j in range(len(indices_dims)) if j != index_vector_dim]
    batching = {k: d(batch_dims[indices_batch.index(j)]) for k, j in
                zip(instr.attr("operand_batching_dims", ()),
                    instr.attr("start_indices_batching_dims", ()))}

    def indices_index(component: AffineExpr) -> tuple[AffineExpr, ...]:
        exprs: list[AffineExpr] = []
        batch = iter(batch_dims)
        for j in range(len(indices_dims)):
            exprs.append(component if j == index_vector_dim else d(next(batch)))
        return tuple(exprs)

    index_vector_length = (indices_dims[index_vector_dim]
                           if index_vector_dim < len(indices_dims) else 1)
    indices_map = IndexingMap.from_sizes(indices_index(s(0)), out, (index_vector_length,))
    if index_vector_dim == len(indices_dims):
        indices_map = IndexingMap.from_sizes(indices_index(s(0)), out)

    results: list[AffineExpr] = []
    rt_vars: list[RTVar] = []
    offsets = iter(offset_dims)
    for k, n in enumerate(operand_dims):
        if k in batching:
            results.append(batching[k])
            continue
        e: AffineExpr = Constant(0) if k in collapsed else d(next(offsets))
        if k in start_index_map:
            component = start_index_map.index(k)
            rt_map = AffineMap(rank, 0, indices_index(Constant(component)))
            e = e + s(len(rt_vars))
            rt_vars.append(RTVar(Interval(0, n - slice_sizes[k]), operands[1].instruction,
                                 rt_map))
        results.append(e)
    operand_map = IndexingMap.create(tuple(results), [(0, n - 1) for n in out], (), rt_vars)
    return operand_map, indices_map
