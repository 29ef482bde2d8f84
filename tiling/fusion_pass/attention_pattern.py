"""Recognize attention in a (candidate) fused computation by its indexing structure.

*Attention* here is ``dot2(normalize(epilogue(dot1(q, k))), v)``: a first dot's scores, an
elementwise epilogue (scale, an iota-based mask, ...), a normalization made of reductions
over one dim of the scores broadcast back, and a second dot contracting over that same dim,
then an elementwise epilogue, which the root may rearrange (``layout_tail``).  No op name is looked at: each dim of each instruction gets a *role* by walking the indexing
analysis' output -> operand maps (``tiling.indexing_analysis``) from the root down to the
operands:

* ``("b", i)``: batch dim ``i`` of the kernel (one program per batch element): the second
  dot's batch dims, then its lhs free dims but the last;
* ``"q"``: the query dim (the second dot's last lhs free dim);
* ``"k"``: the key dim: the second dot's lhs contracting dim, and the reduced dim of every
  reduction of the normalization;
* ``"d"``: the second dot's rhs free dim (the value dim), ``"c"``: the first dot's contracting
  dim (the head dim);
* ``None``: a dim of extent 1, or one the map reads at a constant index.

It is attention when the walk reaches the first dot with roles ``(b..., "q", "k")`` (its batch
dims, its lhs free dims, its rhs free dim): the dim the reductions reduce and the dim the second
dot contracts are then one and the same dim of the scores.

Grouped-query attention as JAX writes it without repeating K and V (``q`` reshaped to
``[batch, kv_heads, group, queries, head]``, dots batched over ``(batch, kv_heads)``) gives
each dot's lhs two free dims: the group is then one more batch role, which the dots' rhs (K
and V) do not have, so the kernel reads them at ``(batch, kv_head)`` only, each kv head
shared by the ``group`` query heads (the second example below).  Each instruction must be read at
one set of roles (no transposed second read), and the template's limits must hold (float dot
operands, head and value dims of at most ``MAX_HEAD_DIM``).

>>> from fusion.text.parser import parse_hlo
>>> c = parse_hlo('''HloModule m
... mx { a = f32[] parameter(0)
...   b = f32[] parameter(1)
...   ROOT m = f32[] maximum(a, b) }
... ENTRY e {
...   q = f32[2,16,8] parameter(0)
...   k = f32[2,16,8] parameter(1)
...   v = f32[2,16,8] parameter(2)
...   s = f32[2,16,16] dot(q, k), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={2}
...   z = f32[] constant(-inf)
...   m = f32[2,16] reduce(s, z), dimensions={2}, to_apply=mx
...   b = f32[2,16,16] broadcast(m), dimensions={0,1}
...   p = f32[2,16,16] subtract(s, b)
...   ROOT o = f32[2,16,8] dot(p, v), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
... }''')
>>> pattern = analyze_attention(c.entry)
>>> pattern.dot1, pattern.dot2, pattern.batch, pattern.queries, pattern.keys, pattern.reduces
('s', 'o', (2,), 16, 16, ('m',))
>>> pattern.roles["m"]
(('b', 0), 'q')
>>> g = parse_hlo('''HloModule g
... mx { a = f32[] parameter(0)
...   b = f32[] parameter(1)
...   ROOT m = f32[] maximum(a, b) }
... ENTRY e {
...   q = f32[2,4,16,8] parameter(0)
...   k = f32[2,16,8] parameter(1)
...   v = f32[2,16,8] parameter(2)
...   s = f32[2,4,16,16] dot(q, k), lhs_batch_dims={0}, lhs_contracting_dims={3}, rhs_batch_dims={0}, rhs_contracting_dims={2}
...   z = f32[] constant(-inf)
...   m = f32[2,4,16] reduce(s, z), dimensions={3}, to_apply=mx
...   b = f32[2,4,16,16] broadcast(m), dimensions={0,1,2}
...   p = f32[2,4,16,16] subtract(s, b)
...   ROOT o = f32[2,4,16,8] dot(p, v), lhs_batch_dims={0}, lhs_contracting_dims={3}, rhs_batch_dims={0}, rhs_contracting_dims={1}
... }''')
>>> grouped = analyze_attention(g.entry)
>>> grouped.batch, grouped.queries, grouped.roles["k"]
((2, 4), 16, (('b', 0), 'k', 'c'))
"""
from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from fusion.ir.hlo_module import HloComputation, HloInstruction
from fusion.ir.shape import ArrayShape
from fusion.opcodes import traits
from fusion.transforms.dot_algorithm import DOT_ALGORITHM_PRECISIONS
from tiling.fusion_pass.attention_orientation import free_dims, oriented
from tiling.fusion_pass.layout_tail import LayoutTail, layout_tail
from tiling.maps.affine_expr import AffineExpr, Constant, DimExpr, SymbolExpr, const, d
from tiling.maps.expr_variables import substitute, used_variables
from tiling.indexing_analysis import output_to_input_indexing

#: The largest head (contracting) and value dim the attention template holds in one tile.
MAX_HEAD_DIM = 256

#: Dot operand types the template multiplies (as the dot template: tl.dot with fp32 accumulation).
FLOAT_DOT_TYPES = ("f32", "bf16", "f16")

Role = "tuple[str, int] | str | None"


@dataclass(frozen=True)
class AttentionPattern:
    """What the attention template needs to know about the computation.

    ``batch``: sizes of the kernel's batch dims (the second dot's batch dims, then its lhs free
    dims but the query dim: a query-head group); ``queries``/``keys``: the query and key
    extents; ``head_dim``: the first dot's contraction; ``value_dim``: the second dot's rhs
    free dim; ``reduces``: the normalization's reductions in dependency order; ``roles``: the
    role of every dim of every instruction reached from the root (see the module docstring);
    ``tail``: the root's rearrangement of the epilogue's value (``layout_tail``: a transpose to
    the caller's ``[batch, queries, heads, dim]``), which the kernel applies to its store.
    """

    dot1: str
    dot2: str
    batch: tuple[int, ...]
    queries: int
    keys: int
    head_dim: int
    value_dim: int
    reduces: tuple[str, ...]
    roles: dict = field(compare=False, repr=False)
    tail: LayoutTail = field(compare=False, repr=False, default=None)


class NotAttention(Exception):
    """Why a computation is not attention the template can emit (the message says)."""


def analyze_attention(comp: HloComputation, orient: bool = False) -> AttentionPattern:
    """The attention pattern of ``comp``; raises ``NotAttention`` with the reason otherwise.
    See the module docstring for the rules and an example.  ``orient``: judge ``comp`` as
    ``attention_orientation.oriented`` writes it (the fusion pass's candidates: the fused
    computations it builds are oriented), the second dot reading the probabilities as lhs."""
    if orient:
        comp = oriented(comp)
    dots = [i for i in comp.instructions if i.opcode == "dot"]
    if len(dots) != 2:
        raise NotAttention(f"attention holds two dots, this holds {len(dots)}")
    first, second = dots
    if not comp.computed_from(second.operands[0], first.name):
        if comp.computed_from(first.operands[0], second.name):
            first, second = second, first
        else:
            raise NotAttention(f"the lhs of neither dot ({first.name}, {second.name}) is "
                               "computed from the other dot")
    for dot in (first, second):
        check_float_dot(comp, dot)
    if comp.computed_from(second.operands[1], first.name):
        raise NotAttention(f"the rhs of {second.name} is computed from {first.name}")
    tail = layout_tail(comp)
    root = comp.instruction(tail.value)
    if not isinstance(root.shape, ArrayShape) or root.shape.dims != second.shape.dims:
        below = f" (below the rearranging {', '.join(tail.ops)})" if tail.ops else ""
        raise NotAttention(f"the root {root.name}{below} is not one array shaped like "
                           f"{second.name}")
    nb = len(second.attr("lhs_batch_dims", ()))
    if len(first.attr("lhs_batch_dims", ())) != nb:
        raise NotAttention(f"{first.name} and {second.name} have different batch dims")
    if first.shape.rank != second.shape.rank:
        raise NotAttention(f"{first.name} and {second.name} have different ranks")
    # The lhs free dims but the last (a query-head group) are batch dims of the kernel.
    nb = second.shape.rank - 2
    out_roles = tuple(("b", i) for i in range(nb)) + ("q", "d")
    out_roles = _units_dropped(out_roles, second.shape.dims)
    roles = _propagate(comp, root.name, _units_dropped(out_roles, root.shape.dims), first.name,
                       second.name)
    if roles.get(second.name) != out_roles:
        raise NotAttention(f"the root reads {second.name} at {roles.get(second.name)}, not at "
                           "its own index (only elementwise epilogues are fused)")
    score_roles = _units_dropped(tuple(("b", i) for i in range(nb)) + ("q", "k"),
                                 first.shape.dims)
    if roles.get(first.name) != score_roles:
        raise NotAttention(f"the scores {first.name} are read at roles {roles.get(first.name)}, "
                           f"not {score_roles}: the normalization or the second dot does not "
                           "work along the first dot's key dim")
    reduces = tuple(i.name for i in comp.instructions if i.opcode == "reduce")
    for name in reduces:
        if not comp.computed_from(name, first.name):
            raise NotAttention(f"reduction {name} does not read the scores {first.name}")
    if not reduces:
        raise NotAttention("no normalization (no reduction over the key dim) between the dots")
    for instr in comp.instructions:
        if instr.name not in roles and instr.name not in tail.ops and \
                not traits(instr.opcode).given_value:
            raise NotAttention(f"{instr.name} does not reach the root")
    lhs1, rhs1 = (comp.instruction(o).shape for o in first.operands)
    rhs2 = comp.instruction(second.operands[1]).shape
    head_dim = lhs1.dims[first.attr("lhs_contracting_dims")[0]]
    value_dim = rhs2.dims[free_dims(rhs2.rank, second, "rhs")[0]]
    queries, keys = second.shape.dims[nb], rhs1.dims[free_dims(rhs1.rank, first, "rhs")[0]]
    if queries == 1 or keys == 1:
        raise NotAttention(f"{queries} queries and {keys} keys: the template tiles both "
                           "(a single query or key is a plain dot fusion's job)")
    for what, size in (("head", head_dim), ("value", value_dim)):
        if size > MAX_HEAD_DIM:
            raise NotAttention(f"the {what} dim {size} exceeds the template's {MAX_HEAD_DIM}")
    return AttentionPattern(
        first.name, second.name, tuple(second.shape.dims[:nb]), queries, keys, head_dim,
        value_dim, reduces, roles, tail)


def is_attention(comp: HloComputation) -> bool:
    """Whether ``analyze_attention`` accepts ``comp``."""
    try:
        analyze_attention(comp)
    except NotAttention:
        return False
    return True


def check_float_dot(comp: HloComputation, dot: HloInstruction,
                    error: type[Exception] | None = None,
                    grouped: Collection[str] = ("lhs",),
                    algorithms: Collection[str] = DOT_ALGORITHM_PRECISIONS,
                    summed_group: bool = False) -> None:
    """Raise ``error`` (default :class:`NotAttention`) unless ``dot`` is one an attention
    kernel multiplies: array operands of a float type the template takes, one contracting
    dim and one free dim each (several free dims too, a query-head group and the queries, on
    the sides in ``grouped``; several contracting dims, the group summed with the queries
    as the grouped-query backward's ``dK`` and ``dV`` do, when ``summed_group``), a float
    result, and no dot algorithm outside ``algorithms``.

    >>> from fusion.text.parser import parse_hlo
    >>> c = parse_hlo('''HloModule m
    ... ENTRY e {
    ...   p = f32[2,4,16,16] parameter(0)
    ...   q = f32[2,4,16,8] parameter(1)
    ...   ROOT dk = f32[2,16,8] dot(p, q), lhs_batch_dims={0}, lhs_contracting_dims={1,2}, rhs_batch_dims={0}, rhs_contracting_dims={1,2}
    ... }''').entry
    >>> check_float_dot(c, c.root, summed_group=True)
    >>> check_float_dot(c, c.root)
    Traceback (most recent call last):
    ...
    tiling.fusion_pass.attention_pattern.NotAttention: dk contracts 2 lhs dims, not one
    """
    error = error or NotAttention
    shapes = [comp.instruction(o).shape for o in dot.operands]
    if not all(isinstance(s, ArrayShape) for s in (*shapes, dot.shape)):
        raise error(f"{dot.name} has tuple-shaped operands")
    for side, shape in zip(("lhs", "rhs"), shapes):
        contracted = len(dot.attr(f"{side}_contracting_dims", ()))
        if contracted != 1 and not (summed_group and contracted > 1):
            raise error(f"{dot.name} contracts {contracted} {side} dims, not one")
        free = len(free_dims(shape.rank, dot, side))
        if free != 1 and not (side in grouped and free > 1):
            # Several free dims are a query-head group (batch roles) and the query dim.
            raise error(f"{dot.name}'s {side} has {free} free dims, not one")
        if shape.dtype not in FLOAT_DOT_TYPES:
            raise error(f"{dot.name}'s {side} is {shape.dtype}; the template multiplies "
                        f"{', '.join(FLOAT_DOT_TYPES)}")
    if dot.shape.dtype not in FLOAT_DOT_TYPES:
        raise error(f"{dot.name} produces {dot.shape.dtype}")
    algorithm = dot.attr("algorithm", None)
    if algorithm is not None and str(algorithm) not in algorithms:
        raise error(f"{dot.name} names dot algorithm {algorithm}, which the template "
                    "does not lower")


def _dot_operand_roles(dot: HloInstruction, mine: tuple, rank: int, side: str,
                       contracting: str) -> tuple:
    """An operand's roles from the dot's: batch dims and free dims take their output dim's
    role (output = batch dims, lhs free dims, rhs free dim), the contracting dim
    ``contracting``."""
    batch = dot.attr(f"{side}_batch_dims", ())
    roles: list = [None] * rank
    for i, dim in enumerate(batch):
        roles[dim] = mine[i]
    roles[dot.attr(f"{side}_contracting_dims")[0]] = contracting
    free = free_dims(rank, dot, side)
    own = mine[len(batch):len(batch) + len(free)] if side == "lhs" else mine[-1:]
    for dim, role in zip(free, own):
        roles[dim] = role
    return tuple(roles)


def _propagate(comp: HloComputation, root: str, root_roles: tuple, first: str,
               second: str) -> dict[str, tuple]:
    """Roles of every instruction reached from ``root`` (see the module docstring).

    A value that does not depend on the scores (a prologue of ``q``, ``k`` or ``v``, a mask, a
    bias) is rendered by the value emitter at whatever index its users read it, so it may be
    read at a *composite* role (an affine combination of roles, ``heads * 64 + head`` where a
    reshape splits a dim) and at several indices (``q``, ``k`` and ``v`` sliced from one
    array); ``roles`` keeps its first read.  Every value computed from the scores keeps the
    strict rules: one read, each dim at one role of its own."""
    scored = _dependents(comp, first)
    roles: dict[str, tuple] = {root: root_roles}
    reads: dict[str, list[tuple]] = {root: [root_roles]}
    for instr in reversed(comp.instructions):
        if instr.name not in reads or not instr.operands:
            continue
        if instr.opcode == "dot":
            if instr.name not in (first, second):
                raise NotAttention(f"a third dot {instr.name}")
            contracting = "k" if instr.name == second else "c"
            for mine in reads[instr.name]:
                for side, operand in zip(("lhs", "rhs"), instr.operands):
                    rank = comp.instruction(operand).shape.rank
                    _assign(roles, reads, operand,
                            _dot_operand_roles(instr, mine, rank, side, contracting), comp,
                            operand not in scored)
            continue
        maps = output_to_input_indexing(instr, comp)
        for mine in reads[instr.name]:
            for operand, found in zip(instr.operands, maps):
                if not found:
                    continue
                if len(found) != 1:
                    raise NotAttention(f"{instr.name} reads {operand} through {len(found)} maps")
                (m,) = found
                if m.is_undefined or m.rt_vars:
                    raise NotAttention(f"{instr.name} reads {operand} through a map the template "
                                       "cannot follow (undefined or runtime offsets)")
                free = operand not in scored
                _assign(roles, reads, operand,
                        tuple(_role_of(e, m, mine, instr, operand, free) for e in m.results),
                        comp, free)
    return roles


def _dependents(comp: HloComputation, name: str) -> set[str]:
    """``name`` and every instruction computed from it."""
    out = {name}
    for instr in comp.instructions:
        if any(o in out for o in instr.operands):
            out.add(instr.name)
    return out


#: Role atoms as affine dims, to compose roles through a map (composite roles).
_ATOMS = ("q", "k", "c", "d")


def _atom_expr(role) -> AffineExpr:
    if role is None:
        return const(0)
    if isinstance(role, AffineExpr):
        return role
    if isinstance(role, tuple):
        return d(len(_ATOMS) + role[1])
    return d(_ATOMS.index(role))


def _expr_role(e: AffineExpr):
    """The role of an expression over role atoms: an atom, ``None`` or the composite itself."""
    if isinstance(e, DimExpr):
        return _ATOMS[e.index] if e.index < len(_ATOMS) else ("b", e.index - len(_ATOMS))
    if isinstance(e, Constant):
        return None
    return e


def units_dropped(e: AffineExpr, m) -> AffineExpr:
    """``e``, a result of map ``m``, with every dim of extent 1 read as 0: it is always 0,
    though a reshape's map may still name it (``d2 + d3``)."""
    if isinstance(e, (DimExpr, Constant, SymbolExpr)):
        return e
    units = [const(0) if b.lower == b.upper == 0 else d(i) for i, b in enumerate(m.dim_bounds)]
    return substitute(e, units, None)


def _role_of(e, m, mine: tuple, instr: HloInstruction, operand: str, free: bool = False):
    e = units_dropped(e, m)
    if isinstance(e, DimExpr):
        return mine[e.index]
    if isinstance(e, Constant):
        return None
    if isinstance(e, SymbolExpr) and instr.opcode == "reduce" and \
            len(instr.attr("dimensions")) == 1 and "k" not in mine:
        return "k"  # the reduced dim: it must turn out to be the scores' key dim
    if free and not used_variables(e)[1]:
        # A value the scores do not depend on: the emitter renders any affine index of it.
        return _expr_role(substitute(e, [_atom_expr(r) for r in mine], None))
    raise NotAttention(f"{instr.name} reads {operand} at {e}, not at one dim of its own "
                       "(a reduction over several dims, a reshape mixing dims, ...)")


def _units_dropped(roles: tuple, dims: tuple[int, ...]) -> tuple:
    """A dim of extent 1 has no role: it is read at index 0 whichever role reaches it (a
    batch of one, a unit dim a reshape adds or drops)."""
    return tuple(None if n == 1 else r for r, n in zip(roles, dims))


def _assign(roles: dict[str, tuple], reads: dict[str, list[tuple]], name: str, new: tuple,
            comp: HloComputation, free: bool = False) -> None:
    new = _units_dropped(new, comp.instruction(name).shape.dims)
    named = [r for r in new if r is not None and not isinstance(r, AffineExpr)]
    if len(named) != len(set(named)):
        raise NotAttention(f"{name} would be read with one role on two dims: {new}")
    old = roles.setdefault(name, new)
    seen = reads.setdefault(name, [])
    if new not in seen:
        if seen and not free:
            raise NotAttention(f"{name} is read at two different indices ({old} and {new})")
        seen.append(new)


__all__ = ["MAX_HEAD_DIM", "AttentionPattern", "NotAttention", "analyze_attention",
           "check_float_dot", "free_dims", "is_attention", "units_dropped"]
