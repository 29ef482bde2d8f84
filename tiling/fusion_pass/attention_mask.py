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
KeyBand(low=None, high=0)
>>> band.key_range(32, 16, 64), band.visited_fraction(64, 64, 16, 16)
((0, 48), 0.625)
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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
    """The keys each query row ``q`` sees: ``q + low <= k <= q + high`` (None: unbounded)."""

    low: int | None
    high: int | None

    def key_range(self, q0: int, block_m: int, keys: int) -> tuple[int, int]:
        """The keys ``[first, end)`` any of the rows ``[q0, q0 + block_m)`` may see."""
        first = 0 if self.low is None else min(max(q0 + self.low, 0), keys)
        end = keys if self.high is None else min(max(q0 + block_m + self.high, 0), keys)
        return first, max(first, end)

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
    if pattern.queries * pattern.keys > MAX_POINTS:
        return None
    hidden = _hidden(module, comp, pattern, comp.instruction(max_reduce).operands[0])
    if hidden is None or hidden.all(axis=1).any():
        return None
    return _band(~hidden)


def _hidden(module: HloModule, comp: HloComputation, pattern: AttentionPattern,
            scores: str) -> np.ndarray | None:
    """``[queries, keys]``: True where the masked scores are the same huge fill for two
    different score values."""
    roles = {}
    for instr in comp.instructions:
        if instr.opcode == "iota" and instr.name in pattern.roles:
            role = pattern.roles[instr.name][instr.attr("iota_dimension")]
            if role not in ("q", "k", None):
                return None  # a mask that differs per batch element
            roles[instr.name] = role
    try:
        masked = pointwise(module, comp, scores, (pattern.dot1,), roles,
                           parameters_as_inputs=True)
    except NotPointwise:
        return None
    q, k = np.divmod(np.arange(pattern.queries * pattern.keys, dtype=np.int64), pattern.keys)
    hidden = np.empty(q.shape, bool)
    try:
        for start in range(0, q.size, _CHUNK):
            at = {"q": q[start:start + _CHUNK], "k": k[start:start + _CHUNK]}
            at[None] = np.zeros_like(at["q"])
            one = masked({pattern.dot1: np.float32(1.0), None: np.float32(1.0)}, at)
            two = masked({pattern.dot1: np.float32(2.0), None: np.float32(2.0)}, at)
            one, two = (np.broadcast_to(x, at["q"].shape) for x in (one, two))
            hidden[start:start + _CHUNK] = (one == two) & (one <= FILL_LIMIT)
    except NotPointwise:
        return None
    return hidden.reshape(pattern.queries, pattern.keys)


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


__all__ = ["FILL_LIMIT", "KeyBand", "key_band"]
