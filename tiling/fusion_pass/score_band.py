"""Which (query, key) blocks an attention backward kernel may skip: those where every output
dot's score-shaped operand is 0 whatever the inputs (the mask's ``select(mask, ..., 0)``), so
the block adds nothing to ``dQ``, ``dK`` or ``dV``.

Each output dot's score operand is rebuilt point by point (``pointwise_probe``: the score dots,
every parameter and every row vector as inputs, each ``iota`` fed with the query or key
coordinate its dim reads, found by the indexing maps from that operand) and evaluated at
every (query, key) point for three random draws, one value per input; a point is *hidden*
when it is 0 in all of them.  A point 0 for every input contributes nothing, so skipping it
is exact (a factor of the other operand aside, taken finite as in the forward).  The visible
points must form a band around the diagonal (``attention_mask``'s rule); the ``query`` kernel
then visits the key blocks of its rows' band, the ``key`` kernel the query blocks whose band
holds its keys.

The row statistics (the reductions over the keys a ``rows`` or ``query`` kernel recomputes:
the softmax's max and sum, and sums such as ``sum(p * dp)``) skip by the same probe
(``reduction_band``), each point judged by its reducer: a sum's operand must be 0 there, a
maximum's the mask's fill (at most ``attention_mask.FILL_LIMIT``) whatever the scores, as the
forward's online softmax skips it; the earlier statistics a later one reads (``exp(a - m)``
reads the max) are inputs of its probe.  Every row must keep a visible key.

>>> from fusion.text.parser import parse_hlo
>>> from tiling.fusion_pass.score_space import analyze_score_space
>>> m = parse_hlo('''HloModule m
... ENTRY e {
...   q = f32[64,8] parameter(0)
...   k = f32[64,8] parameter(1)
...   g = f32[64,8] parameter(2)
...   s = f32[64,64] dot(q, k), lhs_contracting_dims={1}, rhs_contracting_dims={1}
...   i = s32[64,64] iota(), iota_dimension=0
...   j = s32[64,64] iota(), iota_dimension=1
...   c = pred[64,64] compare(i, j), direction=GE
...   z = f32[] constant(0)
...   zb = f32[64,64] broadcast(z), dimensions={}
...   x = f32[64,64] select(c, s, zb)
...   ROOT o = f32[64,8] dot(x, g), lhs_contracting_dims={1}, rhs_contracting_dims={0}
... }''')
>>> output_band(m, m.entry, analyze_score_space(m.entry))
KeyBand(low=None, high=0, unmasked_at=None)
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from fusion.cache_keys import ByIdentity
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.autodiff.combiner_kind import CombinerKind, combiner_kind
from tiling.fusion_pass.attention_mask import FILL_LIMIT, MAX_POINTS, KeyBand, visible_band
from tiling.fusion_pass.builder import NameAllocator
from tiling.fusion_pass.index_splitting import split_index_values
from tiling.fusion_pass.pointwise_probe import NotPointwise, pointwise
from tiling.fusion_pass.score_space import ScoreSpace
from tiling.indexing_analysis.fusion_indexing import output_to_input_indexing_of_computation
from tiling.maps.affine_expr import Constant, DimExpr, const, d
from tiling.maps.expr_variables import substitute

#: Random draws of the inputs a hidden point must be 0 for.
_DRAWS = 3


def _units_at_zero(m, e):
    """``e`` with the dims of extent 1 (always 0) replaced by 0."""
    units = [const(0) if b.lower == b.upper == 0 else d(i) for i, b in enumerate(m.dim_bounds)]
    return substitute(e, units, None)


def _iota_roles(module: HloModule, comp: HloComputation, root: str, roles: tuple):
    """Per iota ``root`` reads, the role of the dim it counts (None: a unit dim); None when
    one counts along a batch dim or through an expression."""
    view = HloComputation(f"{comp.name}.band", comp.instructions, root)
    maps = output_to_input_indexing_of_computation(view, module)
    out = {}
    for instr in comp.instructions:
        if instr.opcode != "iota" or instr.name not in maps:
            continue
        found = {_units_at_zero(m, m.results[instr.attr("iota_dimension")])
                 for m in maps[instr.name]}
        if len(found) != 1:
            return None
        (e,) = found
        if isinstance(e, Constant):
            out[instr.name] = None
        elif isinstance(e, DimExpr) and roles[e.index] in ("q", "k", None):
            out[instr.name] = roles[e.index]
        else:
            return None
    return out


def _split_iotas(comp: HloComputation) -> HloComputation:
    """``comp`` with every value computed from iotas copied for each further reader
    (``index_splitting``: one iota the mask broadcasts along the queries and along the keys
    feeds two coordinates)."""
    return split_index_values(comp, NameAllocator({i.name for i in comp.instructions}).fresh)


def _hidden(module: HloModule, comp: HloComputation, space: ScoreSpace, name: str,
            neutral=lambda value: value == 0, inputs: tuple[str, ...] = ()):
    """``[queries, keys]``: True where ``name`` is ``neutral`` (0) for every draw; None when
    it is no point-by-point function of the inputs (the score dots, the parameters and
    ``inputs``) and the (query, key) coordinates."""
    comp = _split_iotas(_cut(comp, inputs))
    roles = _iota_roles(module, comp, name, space.roles[name])
    if roles is None:
        return None
    try:
        names = [*space.score_dots, *inputs]
        probe = pointwise(module, comp, name, names, roles, parameters_as_inputs=True)
        q, k = np.divmod(np.arange(space.queries * space.keys, dtype=np.int64), space.keys)
        at = {"q": q, "k": k, None: np.zeros_like(q)}
        rng = np.random.default_rng(0)
        names += [p.name for p in comp.parameters]
        hidden = np.ones(q.size, bool)
        for _ in range(_DRAWS):
            values = {n: np.float32(rng.uniform(-2.0, 2.0)) for n in names}
            values[None] = np.float32(rng.uniform(-2.0, 2.0))
            hidden &= np.broadcast_to(neutral(np.asarray(probe(values, at))), q.shape)
    except NotPointwise:
        return None
    return hidden.reshape(space.queries, space.keys)


def _cut(comp: HloComputation, names: tuple[str, ...]) -> HloComputation:
    """``comp`` with the instructions ``names`` (earlier row statistics) made parameters: a
    later statistic's probe reads them as inputs, not through their reductions."""
    if not names:
        return comp
    first = len(comp.parameters)
    out = [HloInstruction(i.name, "parameter", i.shape, (),
                          (("parameter_number", first + names.index(i.name)),))
           if i.name in names else i for i in comp.instructions]
    return HloComputation(comp.name, tuple(out), comp.root_name)


def reduction_band(module: HloModule, comp: HloComputation, space: ScoreSpace) -> KeyBand | None:
    """The band of keys whose points the row statistics of a ``rows`` or ``query`` kernel
    must visit (None: every key block).  See the module docstring.

    >>> from fusion.text.parser import parse_hlo
    >>> from tiling.fusion_pass.score_space import analyze_score_space
    >>> m = parse_hlo('''HloModule m
    ... mx { a = f32[] parameter(0)
    ...   b = f32[] parameter(1)
    ...   ROOT m = f32[] maximum(a, b) }
    ... ad { a = f32[] parameter(0)
    ...   b = f32[] parameter(1)
    ...   ROOT s = f32[] add(a, b) }
    ... ENTRY e {
    ...   q = f32[64,8] parameter(0)
    ...   k = f32[64,8] parameter(1)
    ...   s = f32[64,64] dot(q, k), lhs_contracting_dims={1}, rhs_contracting_dims={1}
    ...   i = s32[64,64] iota(), iota_dimension=0
    ...   j = s32[64,64] iota(), iota_dimension=1
    ...   c = pred[64,64] compare(i, j), direction=GE
    ...   f = f32[] constant(-1e30)
    ...   fb = f32[64,64] broadcast(f), dimensions={}
    ...   a = f32[64,64] select(c, s, fb)
    ...   ninf = f32[] constant(-inf)
    ...   m = f32[64] reduce(a, ninf), dimensions={1}, to_apply=mx
    ...   mb = f32[64,64] broadcast(m), dimensions={0}
    ...   d = f32[64,64] subtract(a, mb)
    ...   x = f32[64,64] exponential(d)
    ...   z = f32[] constant(0)
    ...   l = f32[64] reduce(x, z), dimensions={1}, to_apply=ad
    ...   ROOT t = (f32[64], f32[64]) tuple(m, l)
    ... }''')
    >>> reduction_band(m, m.entry, analyze_score_space(m.entry))
    KeyBand(low=None, high=0, unmasked_at=None)
    """
    return _reduction_band(ByIdentity(module), comp, space)


# The bands are probed at every (query, key) point (up to ``MAX_POINTS``, a tenth of a second
# each): the kernel's compile and its report's visited fraction ask for the same ones.
@lru_cache(maxsize=64)
def _reduction_band(same_module: ByIdentity, comp: HloComputation,
                    space: ScoreSpace) -> KeyBand | None:
    module = same_module.obj
    if space.kind == "key" or not space.reduces or space.queries * space.keys > MAX_POINTS:
        return None
    neutral_of = {CombinerKind.ADD: lambda value: value == 0,
                  CombinerKind.MAX: lambda value: value <= FILL_LIMIT}
    hidden = np.ones((space.queries, space.keys), bool)
    for k, name in enumerate(space.reduces):
        reduce = comp.instruction(name)
        neutral = neutral_of.get(combiner_kind(module, reduce.attr("to_apply")))
        if neutral is None or len(reduce.operands) != 2:
            return None
        found = _hidden(module, comp, space, reduce.operands[0], neutral, space.reduces[:k])
        if found is None:
            return None
        hidden &= found
    if hidden.all(axis=1).any():
        return None
    return visible_band(~hidden)


def output_band(module: HloModule, comp: HloComputation, space: ScoreSpace) -> KeyBand | None:
    """The band of (query, key) points the output dots of a ``query`` or ``key`` kernel may
    read (None: every block is visited).  See the module docstring."""
    return _output_band(ByIdentity(module), comp, space)


@lru_cache(maxsize=64)
def _output_band(same_module: ByIdentity, comp: HloComputation,
                 space: ScoreSpace) -> KeyBand | None:
    module = same_module.obj
    if space.kind == "rows" or space.queries * space.keys > MAX_POINTS:
        return None
    hidden = np.ones((space.queries, space.keys), bool)
    for dot_name in space.output_dots:
        dot = comp.instruction(dot_name)
        operand = next(o for o in dot.operands if o in space.roles)
        found = _hidden(module, comp, space, operand)
        if found is None:
            return None
        hidden &= found
    if hidden.all(axis=1).any() or hidden.all(axis=0).any():
        return None
    return visible_band(~hidden)


__all__ = ["output_band", "reduction_band"]
