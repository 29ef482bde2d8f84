"""Which keys an attention mask hides from each query row, so the kernel never visits them.

A causal, sliding-window or offset (KV-cache) mask replaces the scores of hidden keys by a fill
value whose ``exp`` is 0 next to any visible score (``-inf``, or a huge negative number such as
``-1e30`` or the type's lowest).  A block of keys that is hidden from every query row of a
program adds nothing to the softmax's sum or to the output, so the online-softmax loop skips
it.  The mask is read from the HLO by what it does, not by its name: the max's operand ``a``
(the masked scores) is rebuilt point by point (``pointwise_probe``: the scores and any other
load as inputs, each ``iota`` fed with its dim's query or key coordinate) and evaluated over
every (query, key) point for two different score values; a key is *hidden* from a row when
``a`` is the same fill (at most :data:`FILL_LIMIT`) for both.

The hidden keys must form a band ``q + low <= k <= q + high`` around the diagonal (``low`` or
``high`` unbounded when the band does not end on that side), every row must see at least one
key, and the mask may not depend on the batch: then a program's query rows
``[q0, q0 + block_m)`` visit the key blocks from ``q0 + low`` to ``q0 + block_m - 1 + high``.
Anything else (a padding mask read from a parameter, a mask over a batch dim, holes): every key
block is visited, as without a mask.

>>> from fusion.text.parser import parse_hlo
>>> from tiling.fusion_pass.attention_pattern import analyze_attention
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
...   v = f32[64,8] parameter(2)
...   s = f32[64,64] dot(q, k), lhs_contracting_dims={1}, rhs_contracting_dims={1}
...   i = s32[64,64] iota(), iota_dimension=0
...   j = s32[64,64] iota(), iota_dimension=1
...   c = pred[64,64] compare(i, j), direction=GE
...   f = f32[] constant(-inf)
...   fb = f32[64,64] broadcast(f), dimensions={}
...   a = f32[64,64] select(c, s, fb)
...   ninf = f32[] constant(-inf)
...   mx = f32[64] reduce(a, ninf), dimensions={1}, to_apply=mx
...   mb = f32[64,64] broadcast(mx), dimensions={0}
...   d = f32[64,64] subtract(a, mb)
...   x = f32[64,64] exponential(d)
...   z = f32[] constant(0)
...   l = f32[64] reduce(x, z), dimensions={1}, to_apply=ad
...   lb = f32[64,64] broadcast(l), dimensions={0}
...   p = f32[64,64] divide(x, lb)
...   ROOT o = f32[64,8] dot(p, v), lhs_contracting_dims={1}, rhs_contracting_dims={0}
... }''')
>>> band = key_band(m, m.entry, analyze_attention(m.entry), "mx")
>>> band
KeyBand(low=None, high=0, unmasked_at=(0, 0))
>>> band.key_range(32, 16, 64), band.visited_fraction(64, 64, 16, 16)
((0, 48), 0.625)
>>> band.inside_range(32, 16, 0, 48, 16)  # the blocks left of the diagonal need no mask
(0, 32)
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from fusion.cache_keys import ByIdentity
from fusion.ir.hlo_module import HloComputation, HloModule
from tiling.fusion_pass.attention_pattern import AttentionPattern
from tiling.fusion_pass.pointwise_probe import NotPointwise, pointwise

#: A fill at most this large hides its key: ``exp(fill - m)`` is 0 in f32 for any score ``m``
#: above ``FILL_LIMIT + 104``, that is for every score a dot of finite values gives in
#: practice.  ``-inf`` hides its key for any finite ``m``.
FILL_LIMIT = -1e20

#: The most (query, key) points the mask is evaluated at; a larger one visits every key block.
MAX_POINTS = 1 << 26

#: Points evaluated at once (bounds the evaluator's arrays).
_CHUNK = 1 << 21


@dataclass(frozen=True)
class KeyBand:
    """The keys each query row ``q`` sees: ``q + low <= k <= q + high`` (None: unbounded).

    ``unmasked_at``: when every key inside the band is visible and its masked score is the same
    function of the score as at this one (query, key) point, that point; a key block inside
    the band for every row of a program is then computed at its coordinates, where the mask's
    arithmetic folds away.  None otherwise.
    """

    low: int | None
    high: int | None
    unmasked_at: tuple[int, int] | None = None

    def key_range(self, q0: int, block_m: int, keys: int) -> tuple[int, int]:
        """The keys ``[first, end)`` any of the rows ``[q0, q0 + block_m)`` may see."""
        first = 0 if self.low is None else min(max(q0 + self.low, 0), keys)
        end = keys if self.high is None else min(max(q0 + block_m + self.high, 0), keys)
        return first, max(first, end)

    def inside_range(self, q0: int, block_m: int, first: int, end: int, block_n: int
                     ) -> tuple[int, int]:
        """The key blocks ``[start, stop)`` of ``[first, end)`` that are inside the band for
        every row of ``[q0, q0 + block_m)`` (``start`` and ``stop`` multiples of ``block_n``,
        ``first <= start <= stop <= end`` up to the last block)."""
        start = first if self.low is None else max(first, q0 + block_m - 1 + self.low)
        start = -(-start // block_n) * block_n
        stop = end if self.high is None else max(q0 + self.high + 1, 0) // block_n * block_n
        return start, max(start, min(stop, -(-end // block_n) * block_n))

    def visited_fraction(self, queries: int, keys: int, block_m: int, block_n: int) -> float:
        """The mean fraction of key blocks a program of ``block_m`` query rows visits."""
        total = -(-keys // block_n)
        visited = []
        for q0 in range(0, queries, block_m):
            first, end = self.key_range(q0, block_m, keys)
            visited.append(max(0, -(-end // block_n) - first // block_n) / total)
        return sum(visited) / len(visited)


def key_band(module: HloModule, comp: HloComputation, pattern: AttentionPattern,
             max_reduce: str) -> KeyBand | None:
    """The band of keys the mask lets each query see, read from the max reduction's operand
    (the masked scores); None when no key block can be skipped.  See the module docstring."""
    return _key_band(ByIdentity(module), comp, pattern, max_reduce)


# Probed at every (query, key) point (up to ``MAX_POINTS``): the kernel's compile and its
# report ask for the same band.
@lru_cache(maxsize=64)
def _key_band(same_module: ByIdentity, comp: HloComputation, pattern: AttentionPattern,
              max_reduce: str) -> KeyBand | None:
    module = same_module.obj
    if pattern.queries * pattern.keys > MAX_POINTS:
        return None
    probe = _masked_scores(module, comp, pattern, comp.instruction(max_reduce).operands[0])
    if probe is None:
        return None
    hidden = _hidden(probe, pattern)
    if hidden is None or hidden.all(axis=1).any():
        return None
    band = _band(~hidden)
    if band is None:
        return None
    return KeyBand(band.low, band.high, _unmasked_point(probe, pattern, band, ~hidden))


def iota_roles(comp: HloComputation, pattern: AttentionPattern) -> dict[str, object] | None:
    """The role (``"q"``, ``"k"`` or None for a unit dim) of the dim each iota counts along;
    None when one counts along a batch dim (a mask that differs per batch element)."""
    roles = {}
    for instr in comp.instructions:
        if instr.opcode == "iota" and instr.name in pattern.roles:
            role = pattern.roles[instr.name][instr.attr("iota_dimension")]
            if role not in ("q", "k", None):
                return None
            roles[instr.name] = role
    return roles


def _masked_scores(module, comp, pattern, scores: str):
    roles = iota_roles(comp, pattern)
    if roles is None:
        return None
    try:
        return pointwise(module, comp, scores, (pattern.dot1,), roles, parameters_as_inputs=True)
    except NotPointwise:
        return None


def _at(probe, pattern: AttentionPattern, q: np.ndarray, k: np.ndarray,
        score: np.ndarray | float) -> np.ndarray:
    """The masked scores at the points ``(q, k)`` for ``score`` (every other load too)."""
    out = []
    for start in range(0, q.size, _CHUNK):
        at = {"q": q[start:start + _CHUNK], "k": k[start:start + _CHUNK]}
        at[None] = np.zeros_like(at["q"])
        s = score if np.ndim(score) == 0 else score[start:start + _CHUNK]
        value = probe({pattern.dot1: np.float32(s), None: np.float32(s)}, at)
        out.append(np.broadcast_to(np.asarray(value, np.float64), at["q"].shape))
    return np.concatenate(out) if out else np.zeros(0)


def _hidden(probe, pattern: AttentionPattern) -> np.ndarray | None:
    """``[queries, keys]``: True where the masked scores are the same huge fill for two
    different score values."""
    q, k = np.divmod(np.arange(pattern.queries * pattern.keys, dtype=np.int64), pattern.keys)
    try:
        one, two = _at(probe, pattern, q, k, 1.0), _at(probe, pattern, q, k, 2.0)
    except NotPointwise:
        return None
    return ((one == two) & (one <= FILL_LIMIT)).reshape(pattern.queries, pattern.keys)


def _unmasked_point(probe, pattern: AttentionPattern, band: KeyBand,
                    visible: np.ndarray) -> tuple[int, int] | None:
    """A point whose masked score every point inside the band shares, for several scores;
    None when a key inside the band is hidden or computes its score differently."""
    q, k = np.nonzero(_inside(band, *visible.shape))
    if q.size == 0 or not visible[q, k].all():
        return None
    point = (int(q[0]), int(k[0]))
    one_q, one_k = np.full(1, point[0]), np.full(1, point[1])
    scores = np.float32([0.5, -3.25, 1e4])
    try:
        for s in scores:
            there = _at(probe, pattern, one_q, one_k, s)[0]
            if not np.array_equal(_at(probe, pattern, q, k, s), np.full(q.size, there),
                                  equal_nan=True):
                return None
    except NotPointwise:
        return None
    return point


def _inside(band: KeyBand, queries: int, keys: int) -> np.ndarray:
    rows, cols = np.arange(queries)[:, None], np.arange(keys)[None, :]
    low = -keys if band.low is None else band.low
    high = keys if band.high is None else band.high
    return (cols >= rows + low) & (cols <= rows + high)


def visible_band(visible: np.ndarray) -> KeyBand | None:
    """The band ``[q + low, q + high]`` holding the ``True`` points of ``visible``
    (``[queries, keys]``) when it follows the diagonal; None when no key block can be skipped.

    >>> visible_band(np.tril(np.ones((4, 4), bool)))
    KeyBand(low=None, high=0, unmasked_at=None)
    """
    return _band(visible)


def _band(visible: np.ndarray) -> KeyBand | None:
    """The band ``[q + low, q + high]`` that holds every visible key of each row, when the
    rows' first and last visible keys follow the diagonal (None: no key block to skip)."""
    queries, keys = visible.shape
    rows = np.arange(queries)
    first = visible.argmax(axis=1)
    last = keys - 1 - visible[:, ::-1].argmax(axis=1)
    low = _offset(first - rows, first > 0, rows, lambda q, c: q + c <= 0)
    high = _offset(last - rows, last < keys - 1, rows, lambda q, c: q + c >= keys - 1)
    if low is False or high is False or (low is None and high is None):
        return None
    return KeyBand(low, high)


def _offset(offsets: np.ndarray, bounded: np.ndarray, rows: np.ndarray, holds):
    """The one offset of the bounded rows (None: no row is bounded; False: no one offset, or
    an unbounded row the offset would cut)."""
    if not bounded.any():
        return None
    values = np.unique(offsets[bounded])
    if values.size != 1:
        return False
    c = int(values[0])
    return c if bool(np.all(holds(rows[~bounded], c))) else False


__all__ = ["FILL_LIMIT", "KeyBand", "key_band", "visible_band"]
