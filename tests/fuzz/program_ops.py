"""What each step of a random program (``random_programs``) computes, in JAX: one rule per op,
alphabetical, each ``rule(args, params)`` on the step's argument values and static params.

>>> import jax.numpy as jnp
>>> apply_step("safe_divide", [jnp.float32(3), jnp.float32(-2)], ()).item()
1.0
"""
from __future__ import annotations

from collections.abc import Callable


def _jax():
    import jax  # noqa: PLC0415
    import jax.numpy as jnp  # noqa: PLC0415
    from jax import lax  # noqa: PLC0415

    return jax, jnp, lax


def _unary(name: str) -> Callable:
    def apply(args, params):
        jax, jnp, lax = _jax()
        return {
            "abs": jnp.abs, "bf16_round": lambda v: v.astype(jnp.bfloat16).astype(v.dtype),
            "clamp": lambda v: jnp.clip(v, -0.5, 0.75), "erf": jax.scipy.special.erf,
            "exp_tanh": lambda v: jnp.exp(jnp.tanh(v)),
            "expm1_tanh": lambda v: jnp.expm1(jnp.tanh(v)),
            "finite_or_zero": lambda v: jnp.where(jnp.isfinite(v / (v - v.mean())), v, 0),
            "floor": jnp.floor,
            "fori": lambda v: lax.fori_loop(0, 3, lambda i, a: a * 0.5 + i, v),
            "int_mix": lambda v: (((((v * 8).astype(jnp.int32) * 3) >> 1) ^ 5) % 7).astype(v.dtype),
            "log1p_abs": lambda v: jnp.log1p(jnp.abs(v)), "logistic": jax.nn.sigmoid,
            "negative": jnp.negative, "round": jnp.round, "rsqrt": lambda v: lax.rsqrt(1 + v * v),
            "sign": jnp.sign, "sin": jnp.sin, "sqrt_abs": lambda v: jnp.sqrt(jnp.abs(v)),
            "square": jnp.square, "tanh": jnp.tanh,
        }[name](args[0])
    return apply


UNARY = ("abs", "bf16_round", "clamp", "erf", "exp_tanh", "expm1_tanh", "finite_or_zero",
         "floor", "fori", "int_mix", "log1p_abs", "logistic", "negative", "round", "rsqrt",
         "sign", "sin", "sqrt_abs", "square", "tanh")


def _binary(name: str) -> Callable:
    def apply(args, params):
        _, jnp, _ = _jax()
        a, b = args
        return {
            "add": lambda: a + b, "atan2": lambda: jnp.arctan2(a, b),
            "maximum": lambda: jnp.maximum(a, b), "minimum": lambda: jnp.minimum(a, b),
            "multiply": lambda: a * b, "safe_divide": lambda: a / (1 + jnp.abs(b)),
            "safe_power": lambda: jnp.power(1 + jnp.abs(a), jnp.tanh(b)),
            "safe_remainder": lambda: jnp.remainder(a, 1 + jnp.abs(b)),
            "select_greater": lambda: jnp.where(a > b, a, b * 2), "subtract": lambda: a - b,
        }[name]()
    return apply


BINARY = ("add", "atan2", "maximum", "minimum", "multiply", "safe_divide", "safe_power",
          "safe_remainder", "select_greater", "subtract")


def _reducer(name: str) -> Callable:
    def apply(args, params):
        _, jnp, _ = _jax()
        axes, keep = params
        return {"max": jnp.max, "mean": jnp.mean, "min": jnp.min, "sum": jnp.sum}[name](
            args[0], axis=axes, keepdims=keep)
    return apply


REDUCERS = ("max", "mean", "min", "sum")


def argmax(args, params):
    _, jnp, _ = _jax()
    return jnp.argmax(args[0], axis=params[0]).astype(args[0].dtype)


def argmax_slice(args, params):
    """A slice along dim 0 from the row of the largest sum: a data-dependent start."""
    _, _, lax = _jax()
    x = args[0]
    start = x.reshape(x.shape[0], -1).sum(axis=1).argmax()
    return lax.dynamic_slice_in_dim(x, start, params[0], axis=0)


def avg_pool(args, params):
    """A 3-wide sum window over the last dim (padded 1 each side), divided by 3."""
    _, _, lax = _jax()
    x = args[0]
    ones = (1,) * (x.ndim - 1)
    pads = ((0, 0),) * (x.ndim - 1) + ((1, 1),)
    return lax.reduce_window(x, 0.0, lax.add, ones + (3,), ones + (params[0],), pads) / 3


def broadcast(args, params):
    _, jnp, _ = _jax()
    x, (at, new) = args[0], params
    return jnp.broadcast_to(jnp.expand_dims(x, at), x.shape[:at] + (new,) + x.shape[at:])


def concatenate(args, params):
    _, jnp, _ = _jax()
    return jnp.concatenate([args[0], jnp.tanh(args[1])], axis=params[0])


def conv(args, params):
    """A 1-D convolution of ``[N, W, C]`` by a ``[K, C, O]`` kernel, stride and padding
    ``params``."""
    _, _, lax = _jax()
    stride, padding = params
    return lax.conv_general_dilated(args[0], args[1], (stride,), padding,
                                    dimension_numbers=("NWC", "WIO", "NWC"),
                                    precision=lax.Precision.HIGHEST)


def cumsum(args, params):
    _, jnp, _ = _jax()
    return jnp.cumsum(args[0], axis=params[0])


def dot(args, params):
    _, jnp, lax = _jax()
    return jnp.matmul(args[0], args[1], precision=lax.Precision.HIGHEST)


def dropout(args, params):
    """Dropout by JAX's ``rbg`` keys (an ``rng-bit-generator``), keyed by ``params[0]`` and
    by how many elements are positive: a key the data decides, exactly in any order."""
    jax, jnp, _ = _jax()
    x = args[0]
    key = jax.random.fold_in(jax.random.key(params[0], impl="rbg"), (x > 0).sum())
    keep = jax.random.bernoulli(key, 0.75, x.shape)
    return jnp.where(keep, x / 0.75, jnp.zeros((), x.dtype))


def dynamic_update(args, params):
    """``x`` with rows written from ``tanh(y)`` at a data-dependent row."""
    _, jnp, lax = _jax()
    x, y = args
    start = (jnp.abs(y.sum()) * 7).astype(jnp.int32) % x.shape[0]
    return lax.dynamic_update_slice_in_dim(x, jnp.tanh(y), start, axis=0)


def mask(args, params):
    _, jnp, _ = _jax()
    x = args[0]
    rows, cols = x.shape[-2:]
    keep = jnp.arange(rows)[:, None] >= jnp.arange(cols)[None, :]
    return jnp.where(keep, x, jnp.array(-1e4 if params[0] else 0, x.dtype))


def max_pool(args, params):
    _, jnp, lax = _jax()
    x = args[0]
    ones = (1,) * (x.ndim - 1)
    return lax.reduce_window(x, -jnp.inf, lax.max, ones + (2,), ones + (params[0],), "VALID")


def pad(args, params):
    _, jnp, lax = _jax()
    return lax.pad(args[0], jnp.array(0.5, args[0].dtype), params[0])


def reshape(args, params):
    _, jnp, _ = _jax()
    return jnp.reshape(args[0], params[0])


def reverse(args, params):
    _, jnp, _ = _jax()
    return jnp.flip(args[0], axis=params[0])


def scatter_add(args, params):
    _, jnp, _ = _jax()
    x = args[0]
    return x.at[jnp.array(params[0])].add(jnp.ones(x.shape[1:], x.dtype))


def slice_(args, params):
    axis, start, stop, stride = params
    index = [slice(None)] * args[0].ndim
    index[axis] = slice(start, stop, stride)
    return args[0][tuple(index)]


def softmax(args, params):
    jax, _, _ = _jax()
    return jax.nn.softmax(args[0], axis=params[0])


def sort(args, params):
    """``jnp.sort``, or with two keys ``lax.sort`` of (rounded x, -x, x): ties of the rounded
    values ordered by x descending, the comparator reading both keys."""
    _, jnp, lax = _jax()
    x = args[0]
    if len(params) < 2 or params[1] == 1:
        return jnp.sort(x, axis=params[0])
    return lax.sort((jnp.round(x), -x, x), dimension=params[0], num_keys=2)[2]


def take(args, params):
    _, jnp, _ = _jax()
    axis, indices = params
    return jnp.take(args[0], jnp.array(indices), axis=axis)


def transpose(args, params):
    _, jnp, _ = _jax()
    return jnp.transpose(args[0], params[0])


def while_loop(args, params):
    """Halve ``x`` until its largest magnitude is below 1 (a data-dependent trip count, at
    most ``params[0]`` times)."""
    _, jnp, lax = _jax()

    def cond(carry):
        i, v = carry
        return (i < params[0]) & (jnp.max(jnp.abs(v)) >= 1)
    return lax.while_loop(cond, lambda c: (c[0] + 1, c[1] * 0.5), (0, args[0]))[1]


OPS: dict[str, Callable] = {
    "argmax": argmax, "argmax_slice": argmax_slice, "avg_pool": avg_pool,
    "broadcast": broadcast, "concatenate": concatenate, "conv": conv, "cumsum": cumsum,
    "dot": dot, "dropout": dropout, "dynamic_update": dynamic_update, "mask": mask, "max_pool": max_pool,
    "pad": pad, "reshape": reshape, "reverse": reverse, "scatter_add": scatter_add,
    "slice": slice_, "softmax": softmax, "sort": sort, "take": take, "transpose": transpose,
    "while_loop": while_loop,
    **{name: _unary(name) for name in UNARY}, **{name: _binary(name) for name in BINARY},
    **{name: _reducer(name) for name in REDUCERS},
}


def apply_step(op: str, args, params):
    """The value of step ``op`` on ``args`` (JAX arrays) with its static ``params``."""
    return OPS[op](args, params)


__all__ = ["BINARY", "OPS", "REDUCERS", "UNARY", "apply_step"]
