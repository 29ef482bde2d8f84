"""VJP rules of the elementwise ops: ``vjp_<op>(ctx, instr, ct)`` returns one cotangent per
operand.  Formulas follow JAX's JVP rules (``jax._src.lax.lax``), ties of ``maximum`` and
``minimum`` included (split evenly), so that gradients match ``jax.vjp`` everywhere; on
complex values too, whose cotangents follow JAX's convention (``cotangents``): a
holomorphic op's rule is the same product, ``abs`` and the part ops have their own.

>>> sorted(ELEMENTWISE_VJP_RULES)[:3]
['abs', 'add', 'atan2']
"""
from __future__ import annotations

import math
from typing import Sequence

from fusion.autodiff.cotangents import Cotangent
from fusion.autodiff.reverse_pass import Rule, VjpContext
from fusion.ir.element_types import element_type
from fusion.ir.hlo_module import HloInstruction

Cts = Sequence[Cotangent]


def _x(ctx: VjpContext, instr: HloInstruction, k: int = 0) -> str:
    return ctx.operand(instr, k)


def _chain(ctx: VjpContext, ct: str, derivative: str, divide: bool = False) -> str:
    """``ct * derivative`` (or ``ct / derivative``), exactly zero where ``ct`` is zero.

    A zero cotangent contributes nothing, yet ``0 * inf`` is NaN: HLO that picks between
    branches with ``select`` (JAX's erf/erfc expansions, ``where(x > 0, log(x), 0)``) would
    otherwise turn the branch it did not take, overflowing at that input, into a NaN gradient.
    """
    b = ctx.b
    zero = b.full_like(0, ct)
    product = b.divide(ct, derivative) if divide else b.multiply(ct, derivative)
    return b.select(b.compare(ct, zero, "EQ"), zero, product)


def _complex_of(ctx: VjpContext, re: str, im: str) -> str:
    return ctx.b.emit("complex", (re, im))


def vjp_abs(ctx: VjpContext, instr: HloInstruction, ct: str) -> Cts:
    b = ctx.b
    x = _x(ctx, instr)
    if not b.array_shape(x).element_type.is_complex:
        return (b.multiply(ct, b.unary("sign", x)),)
    # JAX: real(ct * conj(x) / |x|), |x| read as 1 where x is 0 (the gradient is 0 there).
    size = ctx.out(instr)
    safe = b.select(b.compare(size, b.full_like(0, size), "EQ"), b.full_like(1, size), size)
    share = b.divide(ct, safe)
    return (_complex_of(ctx, b.multiply(share, b.unary("real", x)),
                        b.negate(b.multiply(share, b.unary("imag", x)))),)


def vjp_add(ctx: VjpContext, instr: HloInstruction, ct: str) -> Cts:
    return (ct, ct)


def vjp_atan2(ctx: VjpContext, instr: HloInstruction, ct: str) -> Cts:
    b = ctx.b
    y, x = _x(ctx, instr, 0), _x(ctx, instr, 1)
    denominator = b.add(b.multiply(x, x), b.multiply(y, y))
    return (_chain(ctx, ct, b.divide(x, denominator)),
            b.negate(_chain(ctx, ct, b.divide(y, denominator))))


def vjp_cbrt(ctx: VjpContext, instr: HloInstruction, ct: str) -> Cts:
    b = ctx.b
    y = ctx.out(instr)
    return (_chain(ctx, ct, b.scale(b.multiply(y, y), 3.0), divide=True),)


def vjp_clamp(ctx: VjpContext, instr: HloInstruction, ct: str) -> Cts:
    # clamp(lo, x, hi); lo and hi may be scalars applied to every element.
    b = ctx.b
    lo, x, hi = (_x(ctx, instr, k) for k in range(3))
    dims = b.array_shape(x).dims
    lo_b = lo if b.array_shape(lo).dims == dims else b.broadcast(lo, dims, ())
    hi_b = hi if b.array_shape(hi).dims == dims else b.broadcast(hi, dims, ())
    zero = b.full_like(0, ct)
    take_lo = b.emit("and", (b.compare(lo_b, x, "GT"), b.compare(lo_b, hi_b, "LT")))
    take_x = b.emit("and", (b.compare(x, lo_b, "GT"), b.compare(x, hi_b, "LT")))
    take_hi = b.compare(hi_b, x, "LT")
    return (b.sum_to(b.select(take_lo, ct, zero), b.array_shape(lo).dims),
            b.select(take_x, ct, zero),
            b.sum_to(b.select(take_hi, ct, zero), b.array_shape(hi).dims))


def vjp_complex(ctx: VjpContext, instr: HloInstruction, ct: str) -> Cts:
    b = ctx.b
    return (b.unary("real", ct), b.negate(b.unary("imag", ct)))


def vjp_compare(ctx: VjpContext, instr: HloInstruction, ct: Cotangent) -> Cts:
    return (None, None)


def vjp_convert(ctx: VjpContext, instr: HloInstruction, ct: str) -> Cts:
    b = ctx.b
    dtype = ctx.operand_shape(instr, 0).dtype
    if b.array_shape(ct).element_type.is_complex and not element_type(dtype).is_complex:
        ct = b.unary("real", ct)  # a real value converted to complex: real's transpose
    return (b.convert(ct, dtype),)


def vjp_copy(ctx: VjpContext, instr: HloInstruction, ct: str) -> Cts:
    return (ct,)


def vjp_cosine(ctx: VjpContext, instr: HloInstruction, ct: str) -> Cts:
    b = ctx.b
    return (b.negate(b.multiply(ct, b.unary("sine", _x(ctx, instr)))),)


def vjp_divide(ctx: VjpContext, instr: HloInstruction, ct: str) -> Cts:
    grad_x = _chain(ctx, ct, _x(ctx, instr, 1), divide=True)
    return (grad_x, ctx.b.negate(_chain(ctx, grad_x, ctx.out(instr))))


def vjp_erf(ctx: VjpContext, instr: HloInstruction, ct: str) -> Cts:
    b = ctx.b
    x = _x(ctx, instr)
    gaussian = b.unary("exponential", b.negate(b.multiply(x, x)))
    return (b.multiply(ct, b.scale(gaussian, 2.0 / math.sqrt(math.pi))),)


def vjp_exponential(ctx: VjpContext, instr: HloInstruction, ct: str) -> Cts:
    return (_chain(ctx, ct, ctx.out(instr)),)


def vjp_exponential_minus_one(ctx: VjpContext, instr: HloInstruction, ct: str) -> Cts:
    b = ctx.b
    y = ctx.out(instr)
    return (_chain(ctx, ct, b.add(y, b.full_like(1, y))),)


def _no_gradient(ctx: VjpContext, instr: HloInstruction, ct: Cotangent) -> Cts:
    """Piecewise-constant ops (floor, sign, rounding): zero almost everywhere."""
    return (None,) * len(instr.operands)


def vjp_imag(ctx: VjpContext, instr: HloInstruction, ct: str) -> Cts:
    b = ctx.b
    return (_complex_of(ctx, b.full_like(0, ct), b.negate(ct)),)


def vjp_log(ctx: VjpContext, instr: HloInstruction, ct: str) -> Cts:
    return (_chain(ctx, ct, _x(ctx, instr), divide=True),)


def vjp_log_plus_one(ctx: VjpContext, instr: HloInstruction, ct: str) -> Cts:
    b = ctx.b
    x = _x(ctx, instr)
    return (_chain(ctx, ct, b.add(x, b.full_like(1, x)), divide=True),)


def vjp_logistic(ctx: VjpContext, instr: HloInstruction, ct: str) -> Cts:
    b = ctx.b
    y = ctx.out(instr)
    return (b.multiply(ct, b.multiply(y, b.subtract(b.full_like(1, y), y))),)


def _balanced_choice(ctx: VjpContext, chosen: str, other: str, out: str, ct: str) -> str:
    """JAX's ``_balanced_eq``: the cotangent goes where the operand equals the result, halved
    where both operands do."""
    b = ctx.b
    one, zero, two = b.full_like(1, out), b.full_like(0, out), b.full_like(2, out)
    share = b.divide(b.select(b.compare(chosen, out, "EQ"), one, zero),
                     b.select(b.compare(other, out, "EQ"), two, one))
    return b.multiply(ct, share)


def vjp_maximum(ctx: VjpContext, instr: HloInstruction, ct: str) -> Cts:
    x, y, out = _x(ctx, instr, 0), _x(ctx, instr, 1), ctx.out(instr)
    return (_balanced_choice(ctx, x, y, out, ct), _balanced_choice(ctx, y, x, out, ct))


vjp_minimum = vjp_maximum  # the same rule: the cotangent follows the operand that was chosen


def vjp_multiply(ctx: VjpContext, instr: HloInstruction, ct: str) -> Cts:
    return (_chain(ctx, ct, _x(ctx, instr, 1)), _chain(ctx, ct, _x(ctx, instr, 0)))


def vjp_negate(ctx: VjpContext, instr: HloInstruction, ct: str) -> Cts:
    return (ctx.b.negate(ct),)


def vjp_power(ctx: VjpContext, instr: HloInstruction, ct: str) -> Cts:
    # JAX: d/dx = y * x^(y-1), zero where y == 0; d/dy = log(x) * x^y with log(0) read as 0.
    b = ctx.b
    x, y, out = _x(ctx, instr, 0), _x(ctx, instr, 1), ctx.out(instr)
    zero, one = b.full_like(0, x), b.full_like(1, x)
    d_x = b.multiply(y, b.emit("power", (x, b.subtract(y, one))))
    d_x = b.select(b.compare(y, zero, "EQ"), zero, d_x)
    safe_x = b.select(b.compare(x, zero, "EQ"), one, x)
    d_y = b.multiply(b.unary("log", safe_x), out)
    return (_chain(ctx, ct, d_x), _chain(ctx, ct, d_y))


def vjp_real(ctx: VjpContext, instr: HloInstruction, ct: str) -> Cts:
    return (_complex_of(ctx, ct, ctx.b.full_like(0, ct)),)


def vjp_reduce_precision(ctx: VjpContext, instr: HloInstruction, ct: str) -> Cts:
    # JAX rounds the cotangent the same way (reduce_precision is linear in its JVP).
    return (ctx.b.emit("reduce-precision", (ct,), instr.attributes),)


def vjp_remainder(ctx: VjpContext, instr: HloInstruction, ct: str) -> Cts:
    # x - y * trunc(x / y): d/dy = -trunc(x / y), as JAX writes it.
    b = ctx.b
    x, y = _x(ctx, instr, 0), _x(ctx, instr, 1)
    ratio = b.divide(x, y)
    quotient = b.multiply(b.unary("sign", ratio), b.unary("floor", b.unary("abs", ratio)))
    return (ct, b.negate(_chain(ctx, ct, quotient)))


def vjp_rsqrt(ctx: VjpContext, instr: HloInstruction, ct: str) -> Cts:
    b = ctx.b
    return (_chain(ctx, ct, b.scale(b.divide(ctx.out(instr), _x(ctx, instr)), -0.5)),)


def vjp_select(ctx: VjpContext, instr: HloInstruction, ct: str) -> Cts:
    b = ctx.b
    predicate = _x(ctx, instr, 0)
    zero = b.full_like(0, ct)
    return (None, b.select(predicate, ct, zero), b.select(predicate, zero, ct))


def vjp_sine(ctx: VjpContext, instr: HloInstruction, ct: str) -> Cts:
    b = ctx.b
    return (b.multiply(ct, b.unary("cosine", _x(ctx, instr))),)


def vjp_sqrt(ctx: VjpContext, instr: HloInstruction, ct: str) -> Cts:
    b = ctx.b
    return (_chain(ctx, ct, b.scale(ctx.out(instr), 2.0), divide=True),)


def vjp_subtract(ctx: VjpContext, instr: HloInstruction, ct: str) -> Cts:
    return (ct, ctx.b.negate(ct))


def vjp_tan(ctx: VjpContext, instr: HloInstruction, ct: str) -> Cts:
    b = ctx.b
    y = ctx.out(instr)
    return (_chain(ctx, ct, b.add(b.full_like(1, y), b.multiply(y, y))),)


def vjp_tanh(ctx: VjpContext, instr: HloInstruction, ct: str) -> Cts:
    b = ctx.b
    y = ctx.out(instr)
    return (b.multiply(ct, b.subtract(b.full_like(1, y), b.multiply(y, y))),)


ELEMENTWISE_VJP_RULES: dict[str, Rule] = {
    "abs": vjp_abs,
    "add": vjp_add,
    "atan2": vjp_atan2,
    "bitcast-convert": _no_gradient,
    "cbrt": vjp_cbrt,
    "ceil": _no_gradient,
    "clamp": vjp_clamp,
    "compare": vjp_compare,
    "complex": vjp_complex,
    "convert": vjp_convert,
    "copy": vjp_copy,
    "cosine": vjp_cosine,
    "divide": vjp_divide,
    "erf": vjp_erf,
    "exponential": vjp_exponential,
    "exponential-minus-one": vjp_exponential_minus_one,
    "floor": _no_gradient,
    "imag": vjp_imag,
    "is-finite": _no_gradient,
    "log": vjp_log,
    "log-plus-one": vjp_log_plus_one,
    "logistic": vjp_logistic,
    "maximum": vjp_maximum,
    "minimum": vjp_minimum,
    "multiply": vjp_multiply,
    "negate": vjp_negate,
    "power": vjp_power,
    "real": vjp_real,
    "reduce-precision": vjp_reduce_precision,
    "remainder": vjp_remainder,
    "round-nearest-afz": _no_gradient,
    "round-nearest-even": _no_gradient,
    "rsqrt": vjp_rsqrt,
    "select": vjp_select,
    "sign": _no_gradient,
    "sine": vjp_sine,
    "sqrt": vjp_sqrt,
    "subtract": vjp_subtract,
    "tan": vjp_tan,
    "tanh": vjp_tanh,
}
