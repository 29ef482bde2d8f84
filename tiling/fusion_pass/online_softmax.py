"""Whether an attention fusion's normalization is a softmax, which one pass over the keys computes.

The attention template's general form computes the normalization's reductions one loop over
the keys each, then the output in a last loop: ``q @ k`` once per reduction and once more.
FlashAttention's *online softmax* needs one loop: a running maximum ``m``, a running sum ``l``
and an accumulator rescaled by ``exp(m_old - m_new)`` whenever the maximum grows.  That is
exact algebra only for one normalization, so it is used only when the fusion's computation
behaves as it (the pattern's reductions are ``max`` then ``add``, and the values between them
compute ``exp(a - max)`` and ``exp(a - max) / sum``), whatever ops spell it.

It is recognised by behaviour, never by op names:

* the reducers are recognised by evaluating them (``combiner_kind``): the first reduction is a
  maximum, the second a sum with init 0, both in f32;
* the values between the reductions are element-wise in the key dim, so each is a scalar
  function of the max's operand ``a``, the max ``m`` and the sum ``s`` at one (query, key)
  point (``pointwise_probe``): the sum's operand ``e`` and the second dot's lhs ``p`` run in
  the reference evaluator on sample points; ``e`` must equal ``exp(a - m)`` and ``p`` must
  equal ``exp(a - m) / s`` (to the precision of ``p``'s type).

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
...   q = f32[16,8] parameter(0)
...   k = f32[16,8] parameter(1)
...   v = f32[16,8] parameter(2)
...   s = f32[16,16] dot(q, k), lhs_contracting_dims={1}, rhs_contracting_dims={1}
...   ninf = f32[] constant(-inf)
...   mx = f32[16] reduce(s, ninf), dimensions={1}, to_apply=mx
...   mb = f32[16,16] broadcast(mx), dimensions={0}
...   d = f32[16,16] subtract(s, mb)
...   x = f32[16,16] exponential(d)
...   z = f32[] constant(0)
...   l = f32[16] reduce(x, z), dimensions={1}, to_apply=ad
...   lb = f32[16,16] broadcast(l), dimensions={0}
...   p = f32[16,16] divide(x, lb)
...   ROOT o = f32[16,8] dot(p, v), lhs_contracting_dims={1}, rhs_contracting_dims={0}
... }''')
>>> online_softmax(m, m.entry, analyze_attention(m.entry))
OnlineSoftmax(max_reduce='mx', sum_reduce='l')
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fusion.autodiff.combiner_kind import CombinerKind, combiner_kind
from fusion.ir.hlo_module import HloComputation, HloModule
from fusion.ir.shape import ArrayShape
from tiling.fusion_pass.attention_pattern import AttentionPattern
from tiling.fusion_pass.pointwise_probe import NotPointwise, pointwise


@dataclass(frozen=True)
class OnlineSoftmax:
    """The two reductions of a softmax normalization: the running max and the running sum."""

    max_reduce: str
    sum_reduce: str


class NotOnlineSoftmax(Exception):
    """Why a normalization keeps the multi-pass form (the message says)."""


#: (a, m) sample points: scores at or below their row's max, a tie, an underflowing
#: difference; exactly representable in f32.  Each is tried with every sum in ``_SUMS``.
_POINTS = ((-3.0, 2.0), (-1.5, 2.5), (0.0, 0.0), (0.5, 3.0), (2.0, 2.0), (-90.0, 0.25))
_SUMS = (1.0, 2.5, 7.0)

#: Relative precision of a float type: half its last place (a margin for f32).
_PRECISION = {"f32": 2.0 ** -20, "bf16": 2.0 ** -8, "f16": 2.0 ** -11}


def online_softmax(module: HloModule, comp: HloComputation,
                   pattern: AttentionPattern) -> OnlineSoftmax | None:
    """The softmax reductions of ``pattern`` when one pass computes its normalization, else
    None (``why_not_online`` says why).  See the module docstring."""
    try:
        return _recognize(module, comp, pattern)
    except NotOnlineSoftmax:
        return None


def why_not_online(module: HloModule, comp: HloComputation, pattern: AttentionPattern) -> str:
    """Why ``online_softmax`` is None for ``pattern`` ("" when it is not)."""
    try:
        _recognize(module, comp, pattern)
    except NotOnlineSoftmax as why:
        return str(why)
    return ""


def _recognize(module: HloModule, comp: HloComputation, pattern: AttentionPattern) -> OnlineSoftmax:
    if len(pattern.reduces) != 2:
        raise NotOnlineSoftmax(f"the normalization has {len(pattern.reduces)} reductions, "
                               "a softmax has two (max, then sum)")
    top, total = (comp.instruction(r) for r in pattern.reduces)
    _check_reducers(module, top, total)
    score, maximum = top.operands[0], top.name
    inputs = (score, maximum, total.name)
    dot2 = comp.instruction(pattern.dot2)
    a, m, s = _samples()
    values = {score: a, maximum: m, total.name: s}
    _check_numerator(module, comp, top, total)
    try:
        probability_of = pointwise(module, comp, dot2.operands[0], inputs)
        probability = probability_of(values, {})
    except NotPointwise as why:
        raise NotOnlineSoftmax(str(why)) from None
    want = np.exp(a.astype(np.float64) - m)
    _expect(probability, want / s, _precision(probability_of),
            f"{dot2.operands[0]} is not exp({score} - {maximum}) / {total.name}")
    return OnlineSoftmax(top.name, total.name)


def online_sum(module: HloModule, comp: HloComputation, top: str, total: str) -> bool:
    """Whether reduce ``total`` sums ``exp(a - top)`` over the dims over which reduce ``top``
    takes the maximum of ``a``, so that one pass computes both: a running maximum and a
    running sum rescaled by ``exp(m_before - m)`` as the maximum grows (an attention
    backward's row statistics).  Checked as :func:`online_softmax` checks a forward's; the
    sum's operand must also give NaN where ``a`` and the maximum are both ``-inf`` (a row of
    ``-inf`` scores then sums to NaN in both forms).

    >>> from fusion.text.parser import parse_hlo
    >>> m = parse_hlo('''HloModule m
    ... mx { a = f32[] parameter(0)
    ...   b = f32[] parameter(1)
    ...   ROOT m = f32[] maximum(a, b) }
    ... ad { a = f32[] parameter(0)
    ...   b = f32[] parameter(1)
    ...   ROOT s = f32[] add(a, b) }
    ... ENTRY e {
    ...   s = f32[16,16] parameter(0)
    ...   ninf = f32[] constant(-inf)
    ...   mx = f32[16] reduce(s, ninf), dimensions={1}, to_apply=mx
    ...   mb = f32[16,16] broadcast(mx), dimensions={0}
    ...   d = f32[16,16] subtract(s, mb)
    ...   x = f32[16,16] exponential(d)
    ...   z = f32[] constant(0)
    ...   l = f32[16] reduce(x, z), dimensions={1}, to_apply=ad
    ...   ROOT t = (f32[16], f32[16]) tuple(mx, l)
    ... }''')
    >>> online_sum(m, m.entry, "mx", "l"), online_sum(m, m.entry, "l", "mx")
    (True, False)
    """
    top_instr, total_instr = comp.instruction(top), comp.instruction(total)
    if top_instr.opcode != "reduce" or total_instr.opcode != "reduce" \
            or top_instr.attr("dimensions") != total_instr.attr("dimensions"):
        return False
    try:
        _check_reducers(module, top_instr, total_instr)
        _check_numerator(module, comp, top_instr, total_instr, all_minus_infinity=True)
    except NotOnlineSoftmax:
        return False
    return True


def _check_reducers(module: HloModule, top, total) -> None:
    # A maximum is exact in any float type; the running sum is kept in f32, so the sum must be.
    for reduce, kind, types in ((top, CombinerKind.MAX, _PRECISION), (total, CombinerKind.ADD, ("f32",))):
        if len(reduce.operands) != 2 or not isinstance(reduce.shape, ArrayShape) \
                or reduce.shape.dtype not in types:
            raise NotOnlineSoftmax(f"{reduce.name} is not one reduction of {'/'.join(types)}")
        if combiner_kind(module, reduce.attr("to_apply")) is not kind:
            raise NotOnlineSoftmax(f"{reduce.name} does not reduce by {kind.value}")


def _samples() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The (a, m, s) sample points: every (a, m) of ``_POINTS`` with every sum of ``_SUMS``."""
    a, m = (np.float32([point[k] for point in _POINTS for _ in _SUMS]) for k in (0, 1))
    s = np.float32([total for _ in _POINTS for total in _SUMS])
    return a, m, s


def _precision(function) -> float:
    """Two roundings in the least precise float type ``function`` computes in."""
    return 2 * max((_PRECISION.get(t, 0.0) for t in function.types), default=0.0)


def _check_numerator(module: HloModule, comp: HloComputation, top, total,
                     all_minus_infinity: bool = False) -> None:
    """``total``'s operand must be ``exp(a - top)`` (``a``: ``top``'s operand) and its init 0;
    with ``all_minus_infinity``, NaN at ``a = top = -inf`` too."""
    score, maximum = top.operands[0], top.name
    a, m, _ = _samples()
    try:
        init = pointwise(module, comp, total.operands[1], ())({}, {})
        numerator_of = pointwise(module, comp, total.operands[0], (score, maximum))
        numerator = numerator_of({score: a, maximum: m}, {})
        infinity = np.float32([-np.inf])
        with np.errstate(invalid="ignore"):
            at_infinity = numerator_of({score: infinity, maximum: infinity}, {})
    except NotPointwise as why:
        raise NotOnlineSoftmax(str(why)) from None
    if float(init) != 0.0:
        raise NotOnlineSoftmax(f"the sum {total.name} does not start at 0")
    _expect(numerator, np.exp(a.astype(np.float64) - m), _precision(numerator_of),
            f"{total.operands[0]} is not exp({score} - {maximum})")
    if all_minus_infinity and not np.isnan(np.asarray(at_infinity, np.float64)).all():
        raise NotOnlineSoftmax(f"{total.operands[0]} is not NaN where {score} and {maximum} "
                               "are -inf")


def _expect(got: np.ndarray, want: np.ndarray, precision: float, why: str) -> None:
    got = np.broadcast_to(np.asarray(got, np.float64), want.shape)
    bad = ~(np.abs(got - want) <= precision * np.abs(want) + 1e-30)
    if bad.any():
        k = int(np.argmax(bad))
        raise NotOnlineSoftmax(f"{why} (a sample gives {got[k]!r}, expected {want[k]!r})")


__all__ = ["NotOnlineSoftmax", "OnlineSoftmax", "online_softmax", "online_sum", "why_not_online"]
