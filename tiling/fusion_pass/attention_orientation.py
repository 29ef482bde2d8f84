"""Attention's dots in the orientation the attention templates read: the probabilities (the
query rows) on the second dot's left, and the query dim the last of each dot's lhs free dims.

``jax.nn.dot_product_attention`` writes its output as ``einsum('BNTS,BSNH->BTNH', p, v)``,
which JAX lowers with ``v`` as the dot's lhs: the result is ``[B, N, H, T]`` (grouped:
``[B, kv_heads, H, group, T]``) and a transpose puts it in the caller's order.  A dot's value
does not depend on which operand is called lhs, so the same dot with its operands swapped,
transposed back to the original's dims, is the same value (``swap_dot_operands``); the
transposes at the root are then a layout tail the kernel stores through (``layout_tail``).
Its grouped form reshapes q to ``[B, T, kv_heads, group, H]``, so the scores' free dims are
``(T, group)`` where the templates take the group as a batch dim before the queries: the lhs
transposed and the result transposed back reorder them (``query_dim_last``).  ``oriented``
does both to a two-dot candidate (the fusion pass's attention fusions are built so);
``orient_score_dots`` reorders every grouped score dot of a computation before the pass,
so a gradient's score dots share the forward's shape.

>>> from fusion.text.parser import parse_hlo
>>> c = parse_hlo('''HloModule m
... ENTRY e {
...   p = f32[2,4,16,16] parameter(0)
...   v = f32[2,16,8] parameter(1)
...   ROOT o = f32[2,8,4,16] dot(v, p), lhs_batch_dims={0}, lhs_contracting_dims={1}, rhs_batch_dims={0}, rhs_contracting_dims={3}
... }''').entry
>>> from fusion.text.printer import print_computation
>>> print(print_computation(swap_dot_operands(c, "o", "o.swapped")))
ENTRY e {
  p = f32[2,4,16,16] parameter(0)
  v = f32[2,16,8] parameter(1)
  o.swapped = f32[2,4,16,8] dot(p, v), lhs_batch_dims={0}, lhs_contracting_dims={3}, rhs_batch_dims={0}, rhs_contracting_dims={1}
  ROOT o = f32[2,8,4,16] transpose(o.swapped), dimensions={0,3,1,2}
}
"""
from __future__ import annotations

from collections.abc import Callable

from fusion.ir.hlo_module import HloComputation, HloInstruction
from fusion.ir.shape import ArrayShape

_SIDES = {"lhs": "rhs", "rhs": "lhs"}


def _swapped_attributes(dot: HloInstruction) -> tuple:
    out = []
    for key, value in dot.attributes:
        side, _, rest = key.partition("_")
        if side in _SIDES and rest in ("batch_dims", "contracting_dims"):
            key = f"{_SIDES[side]}_{rest}"
        elif key == "operand_precision" and isinstance(value, tuple) and len(value) == 2:
            value = value[::-1]
        out.append((key, value))
    order = {"lhs_batch_dims": 0, "lhs_contracting_dims": 1, "rhs_batch_dims": 2,
             "rhs_contracting_dims": 3}
    return tuple(sorted(out, key=lambda kv: order.get(kv[0], 4)))


def swap_dot_operands(comp: HloComputation, name: str, new_name: str) -> HloComputation:
    """``comp`` with dot ``name`` computed as ``new_name = dot(rhs, lhs)`` and ``name`` a
    transpose of it to the original dims (its users unchanged)."""
    dot = comp.instruction(name)
    shape = dot.array_shape
    nb = len(dot.attr("lhs_batch_dims", ()))
    lhs_rank = comp.instruction(dot.operands[0]).array_shape.rank
    lhs_free = lhs_rank - nb - len(dot.attr("lhs_contracting_dims", ()))
    # swapped result: batch, then the old rhs free dims, then the old lhs free dims
    order = (*range(nb), *range(nb + lhs_free, shape.rank), *range(nb, nb + lhs_free))
    swapped = HloInstruction(new_name, "dot", ArrayShape(shape.dtype,
                                                         tuple(shape.dims[i] for i in order)),
                             dot.operands[::-1], _swapped_attributes(dot), dot.location)
    # original dim i is the swapped result's dim ``order.index(i)``
    perm = tuple(order.index(i) for i in range(shape.rank))
    back = dot.replace(opcode="transpose", operands=(new_name,),
                       attributes=(("dimensions", perm),))
    out: list[HloInstruction] = []
    for instr in comp.instructions:
        out.extend((swapped, back) if instr.name == name else (instr,))
    return HloComputation(comp.name, tuple(out), comp.root_name, comp.is_entry, comp.location)


def query_dim_last(comp: HloComputation, name: str,
                   fresh: Callable[[str], str]) -> HloComputation:
    """``comp`` with dot ``name``'s lhs free dims ordered so the largest (the queries; the
    others are a query-head group, batch dims of the kernel) is the last, as the attention
    template reads them: the lhs transposed before the dot and the result transposed back
    (``comp`` itself when it is last already).  ``fresh(base)``: an unused name.

    JAX's grouped-query form reshapes q ``[B, T, N, H]`` to ``[B, T, kv_heads, group, H]``,
    so its free dims are ``(T, group)``."""
    dot = comp.instruction(name)
    lhs = comp.instruction(dot.operands[0]).array_shape
    free = free_dims(lhs.rank, dot, "lhs")
    query = max(reversed(free), key=lambda i: lhs.dims[i])
    if query == free[-1]:
        return comp
    # the lhs's dims, the query moved to just after the last free dim
    order = [i for i in range(lhs.rank) if i != query]
    order.insert(order.index(free[-1]) + 1, query)
    where = {old: new for new, old in enumerate(order)}
    moved = HloInstruction(fresh(f"{dot.operands[0]}.queries_last"), "transpose",
                           ArrayShape(lhs.dtype, tuple(lhs.dims[i] for i in order)),
                           (dot.operands[0],), (("dimensions", tuple(order)),), dot.location)
    attrs = tuple((k, tuple(where[i] for i in v)) if k in ("lhs_batch_dims",
                                                           "lhs_contracting_dims") else (k, v)
                  for k, v in dot.attributes)
    shape = dot.array_shape
    nb = len(dot.attr("lhs_batch_dims", ()))
    k = free.index(query)
    # result dims: batch, the free dims with the query last, then the rhs's
    out = [*range(nb), *(nb + j for j in range(len(free)) if j != k), nb + k,
           *range(nb + len(free), shape.rank)]
    new = HloInstruction(fresh(f"{name}.queries_last"), "dot",
                         ArrayShape(shape.dtype, tuple(shape.dims[i] for i in out)),
                         (moved.name, dot.operands[1]), attrs, dot.location)
    back = dot.replace(opcode="transpose", operands=(new.name,),
                       attributes=(("dimensions", tuple(out.index(i) for i in range(shape.rank))),))
    instrs: list[HloInstruction] = []
    for instr in comp.instructions:
        instrs.extend((moved, new, back) if instr.name == name else (instr,))
    return HloComputation(comp.name, tuple(instrs), comp.root_name, comp.is_entry, comp.location)


def probabilities_on_the_right(comp: HloComputation) -> str | None:
    """The name of ``comp``'s second dot when it reads the first dot's result through its
    rhs only (two dots in all), else None."""
    dots = [i for i in comp.instructions if i.opcode == "dot"]
    if len(dots) != 2:
        return None
    for first, second in (dots, dots[::-1]):
        lhs, rhs = second.operands
        if comp.computed_from(rhs, first.name) and not comp.computed_from(lhs, first.name):
            return second.name
    return None


def _normalized_scores(comp: HloComputation, dot: HloInstruction) -> bool:
    """Whether ``dot`` looks like grouped attention scores: batch dims, several lhs free dims
    (a query-head group and the queries), one rhs free dim (the keys), and a single-dim
    reduction over an extent like the keys' computed from it (a softmax's)."""
    if dot.opcode != "dot" or not dot.attr("lhs_batch_dims", ()) or \
            not isinstance(dot.shape, ArrayShape):
        return False
    rank = [comp.instruction(o).shape.rank for o in dot.operands]
    if len(free_dims(rank[0], dot, "lhs")) < 2 or len(free_dims(rank[1], dot, "rhs")) != 1:
        return False
    keys = dot.shape.dims[-1]
    return any(r.opcode == "reduce" and len(r.attr("dimensions", ())) == 1
               and comp.instruction(r.operands[0]).shape.dims[r.attr("dimensions")[0]] == keys
               and comp.computed_from(r.name, dot.name)
               for r in comp.instructions)


def free_dims(rank: int, dot: HloInstruction, side: str) -> list[int]:
    """The dims of ``dot``'s ``side`` operand (of ``rank``) neither batch nor contracted."""
    taken = set(dot.attr(f"{side}_batch_dims", ())) | set(dot.attr(f"{side}_contracting_dims", ()))
    return [d for d in range(rank) if d not in taken]


def orient_score_dots(comp: HloComputation, fresh: Callable[[str], str]) -> HloComputation:
    """``comp`` with the query dim last among the lhs free dims of every dot that computes
    grouped attention scores (``_normalized_scores``), before the fusion pass: the forward's
    and the backward's score dots then share one shape, as the attention backward's kernels
    need (JAX's ``dot_product_attention`` orders them ``(tokens, group)``, its gradient's
    ``dP`` dot ``(group, tokens)``).  ``fresh(base)``: an unused name."""
    for name in [i.name for i in comp.instructions if i.opcode == "dot"]:
        if _normalized_scores(comp, comp.instruction(name)):
            comp = query_dim_last(comp, name, fresh)
    return comp


def _same_name(base: str) -> str:
    return base


def oriented(comp: HloComputation, fresh: Callable[[str], str] = _same_name) -> HloComputation:
    """``comp`` as the attention template reads it: the second dot reading the probabilities
    as lhs, and both dots' query dim the last of their lhs free dims (``comp`` itself when
    they are so already, or when it holds other than two dots).  ``fresh(base)``: an unused
    name for each instruction added (default ``base``: the names added end in
    ``.oriented`` and ``.queries_last``, unused in a computation of the fusion pass)."""
    dots = [i.name for i in comp.instructions if i.opcode == "dot"]
    if len(dots) != 2:
        return comp
    second = probabilities_on_the_right(comp)
    if second is not None:
        comp = swap_dot_operands(comp, second, fresh(f"{second}.oriented"))
    for dot in [i.name for i in comp.instructions if i.opcode == "dot"]:
        comp = query_dim_last(comp, dot, fresh)
    return comp


__all__ = ["free_dims", "orient_score_dots", "oriented", "probabilities_on_the_right",
           "query_dim_last", "swap_dot_operands"]
