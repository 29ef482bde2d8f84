"""Reference rules of ``rng`` and ``rng-get-and-update-state``: the values XLA's ``RngExpander``
computes, from XLA's ``prng.cc`` (``fusion.analysis.rng_streams`` says whose key and state).

The bits are Philox4x32's of ``(key, state)`` (``random_ops.rng_bits`` with the state
``[key, low, high]``), and the distributions are:

* ``rng_uniform``, floats: the top mantissa-width bits as an integer, times
  ``2**-mantissa`` (a value in ``[0, 1)``), times ``b - a``, plus ``a``;
* ``rng_uniform``, integers: ``d = bits % (b - a)`` in the unsigned type (``bits`` where
  ``a == b``: XLA's remainder by zero), then ``a + (d >> 1) + (d - (d >> 1))``, wrapping;
* ``rng_normal``: Box-Muller on uniform ``[0, 1)`` pairs: the draw is split in halves along
  one dim (``random_ops.halving_dim``) with a new dim of 2 after it, ``u1 = max(x0, 1e-7)``,
  ``v = 2 pi x1``, ``r = sqrt(-2 log u1)``, the pair ``(r sin v, r cos v)`` fills index ``2c``
  and ``2c + 1`` of that dim; the value is ``a + b * normal``.

Each op's state lives in the evaluator (``Evaluator.advance_generator``): one counter per
instruction, fresh in every ``evaluate``, so an evaluation is the first run of a compiled
module.

>>> import numpy as np
>>> from fusion.text.parser import parse_hlo
>>> from fusion.evaluator import evaluate
>>> m = parse_hlo('''HloModule m
... ENTRY e {
...   a = f32[] constant(-1)
...   b = f32[] constant(1)
...   ROOT r = f32[1000] rng(a, b), distribution=rng_uniform
... }''')
>>> (x,) = evaluate(m)
>>> bool(x.min() >= -1 and x.max() < 1), bool(abs(x.mean()) < 0.1)
(True, True)
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from fusion.analysis.rng_streams import computed_type, rng_key, state_delta
from fusion.evaluator.numerics import numpy_dtype
from fusion.evaluator.random_ops import halving_dim, rng_bits
from fusion.ir.hlo_module import HloInstruction
from fusion.ir.shape import ArrayShape

Dims = tuple[int, ...]

#: XLA's ``1.0e-7f``: the least ``u1`` whose log Box-Muller takes (an f32 in every type).
LEAST_U1 = float(np.float32(1e-7))


def normal_halves(dims: Dims) -> tuple[int, Dims]:
    """``(the dim holding each pair, the dims of the uniform draw)``: XLA's
    ``SplitShapeIntoHalves`` (a scalar draws ``[2]`` and keeps the first)."""
    if not dims:
        return 0, (2,)
    split = halving_dim(dims)
    return split + 1, dims[:split] + (-(-dims[split] // 2), 2) + dims[split + 1:]


def uniform_floats(bits: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``[a, b)`` values of ``a``'s float type from bits of its width."""
    mantissa = np.finfo(a.dtype).nmant
    values = (bits >> np.array(bits.dtype.itemsize * 8 - mantissa, bits.dtype)).astype(a.dtype)
    return values * a.dtype.type(2.0 ** -mantissa) * (b - a) + a


def uniform_ints(bits: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``[a, b)`` values of ``a``'s integer type from unsigned bits of its width."""
    with np.errstate(over="ignore"):
        span = b.view(bits.dtype) - a.view(bits.dtype)
        dist = bits % span if span else bits
        half = dist >> np.array(1, bits.dtype)
        return (a + half.view(a.dtype)) + (dist - half).view(a.dtype)


def normal_floats(uniform: np.ndarray, dims: Dims, pair_dim: int) -> np.ndarray:
    """Standard normal values of ``dims`` from the uniform ``[0, 1)`` draw of
    ``normal_halves(dims)``."""
    t = uniform.dtype.type
    x0, x1 = np.take(uniform, 0, axis=pair_dim), np.take(uniform, 1, axis=pair_dim)
    radius = np.sqrt(t(-2.0) * np.log(np.maximum(x0, t(LEAST_U1))))
    angle = t(2 * math.pi) * x1
    pairs = np.stack([np.sin(angle) * radius, np.cos(angle) * radius], axis=pair_dim)
    if not dims:
        return pairs[0]
    split = pair_dim - 1
    whole = pairs.reshape(dims[:split] + (2 * pairs.shape[split],) + dims[split + 1:])
    return whole[tuple(slice(0, extent) for extent in dims)]


def draw(instr: HloInstruction, state: tuple[int, int], a: Any, b: Any,
         key: int | None = None) -> np.ndarray:
    """The value of ``rng`` op ``instr`` drawn at generator ``state`` with Philox ``key``
    (``rng_streams.rng_key`` of its name by default; module docstring)."""
    assert isinstance(instr.shape, ArrayShape)
    computed = np.dtype(numpy_dtype(ArrayShape(computed_type(instr.shape.dtype), ())))
    a, b = np.asarray(a).astype(computed), np.asarray(b).astype(computed)
    unsigned = np.dtype(f"u{computed.itemsize}")
    counter = np.array([rng_key(instr.name) if key is None else key, *state], np.uint64)
    dims = instr.shape.dims
    if instr.attr("distribution", None) == "rng_normal":
        pair_dim, drawn = normal_halves(dims)
        uniform = uniform_floats(rng_bits(counter, "rng_philox", drawn, unsigned)[1],
                                 np.zeros((), computed), np.ones((), computed))
        return a + b * normal_floats(uniform, dims, pair_dim)
    bits = rng_bits(counter, "rng_philox", dims, unsigned)[1]
    return uniform_floats(bits, a, b) if computed.kind == "f" else uniform_ints(bits, a, b)


def eval_rng(ev: Any, instr: HloInstruction, args: list) -> np.ndarray:
    assert isinstance(instr.shape, ArrayShape)
    return draw(instr, ev.advance_generator(instr, state_delta(instr.shape)), *args)


def eval_rng_get_and_update_state(ev: Any, instr: HloInstruction, args: list) -> np.ndarray:
    return np.array(ev.advance_generator(instr, instr.attr("delta", 0)), np.uint64)


RNG_RULES = {"rng": eval_rng, "rng-get-and-update-state": eval_rng_get_and_update_state}

__all__ = ["LEAST_U1", "RNG_RULES", "draw", "eval_rng", "eval_rng_get_and_update_state", "normal_floats",
           "normal_halves", "uniform_floats", "uniform_ints"]
