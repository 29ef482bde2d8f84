"""The *score space* of a fused computation: values shaped like attention scores
``[batch..., q, k]`` computed point by point from score dots and per-row vectors, and the dots
that contract them; what the attention backward's kernels are made of.

A *score dot* is a dot whose operands are computed from no dot, one free dim each: its result
is ``(batch..., q, k)`` (the lhs free dim is the query role, the rhs free dim the key role), its
contracting dim the head role ``c``.  Grouped-query attention (``attention_pattern``'s second
example) gives the lhs more free dims before the query dim: a query-head *group* the rhs (K, V)
does not have, which takes batch roles after the dot's own (``ScoreSpace.group``).  Roles then
flow *forward* through the indexing maps: every value computed from a score dot gets, per dim,
the role of the operand dim its map reads (an elementwise op, a transpose, a broadcast keep
them; a reduction drops the dim it reduces, which must be the key role).  An *output dot*
contracts a score-space operand (over ``q`` or ``k``) with a free operand (one free dim, role
``d``).  No op name is looked at.

The kernel a score-space computation becomes is one of three *kinds*:

* ``rows``: no output dot; the outputs are per-row vectors ``(batch..., q)`` (the row
  statistics: reductions over the keys, any number, in dependency order);
* ``query``: every output dot contracts the key role (``dQ = dS @ K``): one program per block
  of queries streams the keys;
* ``key``: every output dot contracts the query role (``dK = dS^T @ Q``, ``dV = P^T @ dO``),
  and with it every group role (a kv head's ``dK`` sums its group's query heads): one program
  per block of keys streams the queries of each query head of the group; nothing computed from
  the scores may be reduced (the row statistics come in as inputs).

>>> from fusion.text.parser import parse_hlo
>>> c = parse_hlo('''HloModule m
... ENTRY e {
...   q = f32[2,16,8] parameter(0)
...   k = f32[2,16,8] parameter(1)
...   g = f32[2,16,8] parameter(2)
...   s = f32[2,16,16] dot(q, k), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={2}
...   e = f32[2,16,16] exponential(s)
...   ROOT o = f32[2,8,16] dot(g, e), lhs_batch_dims={0}, lhs_contracting_dims={1}, rhs_batch_dims={0}, rhs_contracting_dims={1}
... }''')
>>> space = analyze_score_space(c.entry)
>>> space.kind, space.score_dots, space.output_dots, space.roles["o"]
('key', ('s',), ('o',), (('b', 0), 'd', 'k'))
>>> g = parse_hlo('''HloModule g
... ENTRY e {
...   q = f32[2,4,16,8] parameter(0)
...   k = f32[2,16,8] parameter(1)
...   s = f32[2,4,16,16] dot(q, k), lhs_batch_dims={0}, lhs_contracting_dims={3}, rhs_batch_dims={0}, rhs_contracting_dims={2}
...   e = f32[2,4,16,16] exponential(s)
...   ROOT dk = f32[2,16,8] dot(e, q), lhs_batch_dims={0}, lhs_contracting_dims={1,2}, rhs_batch_dims={0}, rhs_contracting_dims={1,2}
... }''')
>>> grouped = analyze_score_space(g.entry)
>>> grouped.kind, grouped.batch, grouped.group, grouped.roles["dk"]
('key', (2, 4), (4,), (('b', 0), 'k', 'd'))
"""
from __future__ import annotations

from dataclasses import dataclass, field

from fusion.ir.hlo_module import HloComputation, HloInstruction
from fusion.ir.shape import ArrayShape
from fusion.opcodes import traits
from tiling.fusion_pass.attention_pattern import (MAX_HEAD_DIM, NotAttention, check_float_dot,
                                               free_dims, units_dropped)
from tiling.fusion_pass.layout_tail import layout_tail
from tiling.indexing_analysis import output_to_input_indexing
from tiling.maps.affine_expr import Constant, DimExpr, SymbolExpr


@dataclass(frozen=True)
class ScoreSpace:
    """What the score-space kernel needs to know (see the module docstring).

    ``reduces``: the reductions over the key role computed from the scores, in order;
    ``batch``: the batch roles' extents, the score dots' batch dims then the query-head group
    (``group``: the last ``len(group)`` of them, which K and V do not have; a ``key`` kernel
    sums over them); ``head_dims``: the extents of the ``c`` and ``d`` dims the kernel holds
    whole; ``roles``: per value computed from a score dot, the role of each dim; ``tails``:
    per output (a root tuple's element), the ``layout_tail`` the kernel stores it through."""

    kind: str
    score_dots: tuple[str, ...]
    output_dots: tuple[str, ...]
    reduces: tuple[str, ...]
    batch: tuple[int, ...]
    queries: int
    keys: int
    head_dims: tuple[int, ...]
    group: tuple[int, ...]
    roles: dict = field(compare=False, repr=False)
    tails: dict = field(compare=False, repr=False, default_factory=dict)

    @property
    def kv_batch(self) -> tuple[int, ...]:
        """The batch extents K and V have (``batch`` without the query-head group)."""
        return self.batch[:len(self.batch) - len(self.group)]

    @property
    def streamed(self) -> str:
        """The role the kernel's loop walks (``k`` unless the kind is ``key``)."""
        return "q" if self.kind == "key" else "k"


class NotScoreSpace(NotAttention):
    """Why a computation is not a score-space kernel (the message says)."""


def _dependents(comp: HloComputation, names) -> set[str]:
    out = set(names)
    for instr in comp.instructions:
        if any(o in out for o in instr.operands):
            out.add(instr.name)
    return out


def _units(roles: tuple, dims: tuple[int, ...]) -> tuple:
    return tuple(None if n == 1 else r for r, n in zip(roles, dims))


def _score_roles(dot: HloInstruction) -> tuple:
    """Batch roles for the batch dims and the lhs free dims before the query (the group)."""
    nb = dot.shape.rank - 2
    return _units(tuple(("b", i) for i in range(nb)) + ("q", "k"), dot.shape.dims)


def _output_roles(comp: HloComputation, dot: HloInstruction, roles: dict,
                  group: tuple) -> tuple[tuple, str]:
    """An output dot's roles and the role it contracts (``group``: the group's roles, which a
    dot contracting the queries must contract too)."""
    scored = [i for i, o in enumerate(dot.operands) if o in roles]
    if len(scored) != 1:
        raise NotScoreSpace(f"{dot.name} multiplies two values computed from the scores")
    side = ("lhs", "rhs")[scored[0]]
    x = roles[dot.operands[scored[0]]]
    contracted = {x[c] for c in dot.attr(f"{side}_contracting_dims")} - {None}
    if contracted == {"k"} or contracted == {"q", *group}:
        role = "k" if "k" in contracted else "q"
    else:
        raise NotScoreSpace(f"{dot.name} contracts {sorted(map(str, contracted))} of the "
                            "scores, not the key dim or the query dim with the query-head "
                            "group")
    free = tuple(x[f] for f in free_dims(len(x), dot, side))
    batch = tuple(x[i] for i in dot.attr(f"{side}_batch_dims", ()))
    own = free + ("d",) if side == "lhs" else ("d",) + free
    return _units(batch + own, dot.shape.dims), role


def _forward(comp: HloComputation, instr: HloInstruction, roles: dict) -> tuple:
    """``instr``'s roles from its operands' (the dims its maps read them at)."""
    out: list = [None] * instr.shape.rank
    maps = output_to_input_indexing(instr, comp)
    for operand, found in zip(instr.operands, maps):
        if operand not in roles or not found:
            continue
        if len(found) != 1:
            raise NotScoreSpace(f"{instr.name} reads {operand} through {len(found)} maps")
        (m,) = found
        if m.is_undefined or m.rt_vars:
            raise NotScoreSpace(f"{instr.name} reads {operand} through a map the kernel cannot "
                                "follow")
        for j, e in enumerate(m.results):
            role = roles[operand][j]
            e = units_dropped(e, m)
            if isinstance(e, DimExpr):
                if out[e.index] not in (None, role) and role is not None:
                    raise NotScoreSpace(f"{instr.name} combines {out[e.index]!r} and {role!r} "
                                        "on one dim")
                out[e.index] = out[e.index] if role is None else role
            elif isinstance(e, SymbolExpr) and traits(instr.opcode).reduction:
                if role != "k":
                    raise NotScoreSpace(f"{instr.name} reduces a {role!r} dim of the scores, "
                                        "not the key dim")
            elif not isinstance(e, Constant) and role is not None:
                raise NotScoreSpace(f"{instr.name} reads {operand} at {e}, not at one dim of "
                                    "its own")
    return _units(tuple(out), instr.shape.dims)


def _classify(comp: HloComputation):
    dots = [i for i in comp.instructions if i.opcode == "dot"]
    from_dots = _dependents(comp, [d.name for d in dots])
    scores = [d for d in dots if not any(o in from_dots for o in d.operands)]
    outputs = [d for d in dots if d not in scores]
    if not scores:
        raise NotScoreSpace("no dot computes scores from free operands")
    return scores, outputs


def _walk_roles(comp: HloComputation, scores, outputs, group: tuple,
                rearranging: set[str]) -> tuple[dict, set[str]]:
    roles: dict = {d.name: _score_roles(d) for d in scores}
    contracted: set[str] = set()
    out_names = {d.name for d in outputs}
    for instr in comp.instructions:
        if instr.name in roles or instr.name in rearranging or \
                not any(o in roles for o in instr.operands):
            continue
        if not isinstance(instr.shape, ArrayShape):
            if instr is comp.root:
                continue
            raise NotScoreSpace(f"{instr.name} computed from the scores is tuple-shaped")
        if instr.name in out_names:
            roles[instr.name], role = _output_roles(comp, instr, roles, group)
            contracted.add(role)
        else:
            roles[instr.name] = _forward(comp, instr, roles)
    return roles, contracted


def analyze_score_space(comp: HloComputation) -> ScoreSpace:
    """The score space of ``comp``; raises ``NotScoreSpace`` with the reason otherwise.  See the
    module docstring for the rules and an example."""
    scores, outputs = _classify(comp)
    for dot in scores:  # the lhs's free dims: a query-head group (if any), the queries
        check_float_dot(comp, dot, NotScoreSpace, grouped=("lhs",), algorithms=())
    from_scores = _dependents(comp, [d.name for d in scores])
    for dot in outputs:  # the scored side keeps the group or sums it with the queries
        side = "lhs" if dot.operands[0] in from_scores else "rhs"
        check_float_dot(comp, dot, NotScoreSpace, grouped=(side,), algorithms=(),
                        summed_group=True)
    first = scores[0]
    nb = len(first.attr("lhs_batch_dims", ()))
    for dot in scores[1:]:
        if dot.shape.dims != first.shape.dims or len(dot.attr("lhs_batch_dims", ())) != nb:
            raise NotScoreSpace(f"the scores {dot.name} and {first.name} differ in shape")
    nall = first.shape.rank - 2
    group_roles = tuple(("b", i) for i in range(nb, nall) if first.shape.dims[i] != 1)
    root = comp.root
    tails = {out: layout_tail(comp, out)
             for out in (root.operands if root.opcode == "tuple" else (root.name,))}
    roles, contracted = _walk_roles(comp, scores, outputs, group_roles,
                                    {op for t in tails.values() for op in t.ops})
    if len(contracted) > 1:
        raise NotScoreSpace("some output dots contract the queries, others the keys")
    kind = {"k": "query", "q": "key"}.get(next(iter(contracted), None), "rows")
    reduces = tuple(i.name for i in comp.instructions
                    if traits(i.opcode).reduction and i.name in roles)
    if any(comp.instruction(r).opcode != "reduce" for r in reduces):
        raise NotScoreSpace("a reduction of the scores other than reduce")
    if kind == "key" and reduces:
        raise NotScoreSpace(f"{reduces[0]} reduces the keys in a kernel that streams the "
                            "queries: the row statistics must come in as inputs")
    _check_outputs(comp, roles, kind, group_roles, tails)
    heads = {comp.instruction(d.operands[0]).shape.dims[d.attr("lhs_contracting_dims")[0]]
             for d in scores}
    for d in outputs:
        side = 1 if d.operands[0] in roles else 0
        shape = comp.instruction(d.operands[side]).shape
        heads.add(shape.dims[free_dims(shape.rank, d, ("lhs", "rhs")[side])[0]])
    if max(heads) > MAX_HEAD_DIM:
        raise NotScoreSpace(f"a head dim {max(heads)} exceeds {MAX_HEAD_DIM}")
    queries, keys = first.shape.dims[nall], first.shape.dims[nall + 1]
    if queries == 1 or keys == 1:
        raise NotScoreSpace("a single query or key is a plain dot fusion's job")
    return ScoreSpace(kind, tuple(d.name for d in scores), tuple(d.name for d in outputs),
                      reduces, tuple(first.shape.dims[:nall]), queries, keys,
                      tuple(sorted(heads)), tuple(first.shape.dims[nb:nall]), roles, tails)


def _check_outputs(comp: HloComputation, roles: dict, kind: str, group: tuple,
                   tails: dict) -> None:
    root = comp.root
    allowed = {"rows": {"q"}, "query": {"q", "d"}, "key": {"k", "d"}}[kind]
    rearranging = {op for t in tails.values() for op in t.ops}
    for name in (t.value for t in tails.values()):
        if name not in roles:
            raise NotScoreSpace(f"the output {name} is not computed from the scores")
        spread = {r for r in roles[name] if r is not None and not isinstance(r, tuple)}
        if not spread <= allowed:
            raise NotScoreSpace(f"the output {name} spans {sorted(spread)}; a {kind} kernel "
                                f"writes {sorted(allowed)}")
        if kind == "key" and set(roles[name]) & set(group):
            raise NotScoreSpace(f"the output {name} keeps the query-head group a key kernel "
                                "sums over")
    for instr in comp.instructions:
        if instr.name not in roles and instr.name not in rearranging and \
                not traits(instr.opcode).given_value and instr is not root and \
                not _is_read(comp, instr.name):
            raise NotScoreSpace(f"{instr.name} reaches no output")


def _is_read(comp: HloComputation, name: str) -> bool:
    return any(name in i.operands for i in comp.instructions)


def is_score_space(comp: HloComputation) -> bool:
    """Whether ``analyze_score_space`` accepts ``comp`` with at least one output dot or
    reduction (a kernel of the attention backward)."""
    try:
        space = analyze_score_space(comp)
    except NotAttention:
        return False
    return bool(space.output_dots or space.reduces)


__all__ = ["NotScoreSpace", "ScoreSpace", "analyze_score_space", "is_score_space"]
