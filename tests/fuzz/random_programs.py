"""Random JAX programs for differential testing against XLA: valid by construction, so every
difference between our compiled module, the reference evaluator and XLA is a defect.

A program is a list of steps over values (the inputs first), each step one JAX operation on
earlier values whose shapes make it valid: element-wise maps and binary ops (with
broadcasting), reductions (sum, max, min, argmax), broadcasts, transposes, reshapes, strided
slices, concatenation, reversal, padding (interior too), dots and batched dots, softmax,
cumulative sums, masks from iotas, bf16 round trips, sorts, gathers, scatter-adds, max pools,
slices at data-dependent starts, integer arithmetic and a short ``fori_loop``.  About a third
of the f32 programs are differentiated instead (``jax.grad``: transposed dots, scatters of
gathers, select-and-scatter of max pools, dynamic-update-slices).  The function returns the last
value and sometimes an earlier one (a multi-output module).  Everything is drawn from one
``numpy`` generator, so a program is reproducible from its seed.

>>> program = random_program(3)
>>> program == random_program(3), len(program.inputs) >= 1
(True, True)
>>> text = program.hlo_text()
>>> text.startswith("HloModule")
True
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

#: Extents a dim is drawn from (small, odd, powers of two and one past them).
EXTENTS = (1, 2, 3, 4, 5, 7, 8, 16, 17, 32, 33, 64)
#: The most elements a value may have (the interpreter runs every kernel on the CPU).
MAX_ELEMENTS = 1 << 14

_UNARY = ("negative", "exp_tanh", "tanh", "abs", "sqrt_abs", "log1p_abs", "sin", "floor",
          "logistic", "square", "rsqrt", "bf16_round", "erf", "expm1_tanh", "round", "sign",
          "clamp", "int_mix", "finite_or_zero", "fori")
_BINARY = ("add", "subtract", "multiply", "maximum", "minimum", "safe_divide", "select_greater",
           "atan2", "safe_remainder", "safe_power")
_REDUCERS = ("sum", "max", "min", "argmax", "mean")


@dataclass(frozen=True)
class Step:
    """One operation: ``op`` on the values numbered ``args``, with its static ``params``
    (``input``: the function's argument ``params[0]``, a value like any other)."""

    op: str
    args: tuple[int, ...]
    params: tuple = ()


@dataclass(frozen=True)
class RandomProgram:
    """Input shapes and dtypes, the steps, and the values returned."""

    seed: int
    inputs: tuple[tuple[tuple[int, ...], str], ...]
    steps: tuple[Step, ...]
    outputs: tuple[int, ...]
    #: The program is the gradient of ``sum(sin(outputs))`` with respect to every input.
    grad: bool = False

    def function(self) -> Callable:
        """The JAX function of the program."""
        def f(*args):
            values = []
            for step in self.steps:
                values.append(args[step.params[0]] if step.op == "input" else
                              _apply(step, [values[a] for a in step.args]))
            out = tuple(values[o] for o in self.outputs)
            return out if len(out) > 1 else out[0]
        if not self.grad:
            return f
        import jax  # noqa: PLC0415
        import jax.numpy as jnp  # noqa: PLC0415

        def loss(*args):
            out = f(*args)
            return sum(jnp.sum(jnp.sin(v)) for v in (out if isinstance(out, tuple) else (out,)))
        return jax.grad(loss, argnums=tuple(range(len(self.inputs))))

    def specs(self):
        import jax  # noqa: PLC0415
        import jax.numpy as jnp  # noqa: PLC0415

        return [jax.ShapeDtypeStruct(shape, jnp.dtype(dtype)) for shape, dtype in self.inputs]

    def hlo_text(self) -> str:
        """The module as JAX lowers it (before XLA's optimizations)."""
        import jax  # noqa: PLC0415

        return jax.jit(self.function(), keep_unused=True).lower(*self.specs()).as_text(dialect="hlo")

    def optimized_hlo_text(self) -> str:
        """The module as XLA's CPU pipeline optimized it (fusions, layouts, bitcasts)."""
        import jax  # noqa: PLC0415

        return jax.jit(self.function(), keep_unused=True).lower(*self.specs()).compile().as_text()

    def example_inputs(self) -> list[np.ndarray]:
        """Normal values (inputs are f32 or bf16), drawn from the program's seed."""
        import ml_dtypes  # noqa: PLC0415

        rng = np.random.default_rng(self.seed + 7919)
        types = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16}
        return [rng.standard_normal(shape).astype(np.float32).astype(types[dtype])
                for shape, dtype in self.inputs]


def random_program(seed: int, max_steps: int = 8) -> RandomProgram:
    """A valid random program drawn from ``seed`` (module docstring)."""
    rng = np.random.default_rng(seed)
    dtype = "bfloat16" if rng.random() < 0.2 else "float32"
    inputs: list[tuple[tuple[int, ...], str]] = []
    steps: list[Step] = []
    shapes: list[tuple[int, ...]] = []  # of every value, in the steps' order
    for _ in range(int(rng.integers(1, 4))):
        _add_input(_shape(rng), dtype, inputs, steps, shapes)
    for _ in range(int(rng.integers(2, max_steps + 1))):
        made = _step(rng, shapes, lambda shape: _add_input(shape, dtype, inputs, steps, shapes))
        if made is not None:
            steps.append(made[0])
            shapes.append(made[1])
    if all(step.op == "input" for step in steps):
        steps.append(Step("negative", (0,)))
        shapes.append(shapes[0])
    computed = [i for i, step in enumerate(steps) if step.op != "input"]
    outputs = (computed[-1],)
    if rng.random() < 0.3 and len(computed) > 1:
        outputs = (computed[-1], int(rng.choice(computed[:-1])))
    # Drawn apart, so that a seed's forward program stays what it was without gradients.
    grad = dtype == "float32" and np.random.default_rng([seed, 1]).random() < 0.3
    return RandomProgram(seed, tuple(inputs), tuple(steps), outputs, grad)


def _add_input(shape, dtype, inputs, steps, shapes) -> int:
    """A new function argument of ``shape``: its value's number."""
    steps.append(Step("input", (), (len(inputs),)))
    inputs.append((shape, dtype))
    shapes.append(shape)
    return len(shapes) - 1


def _shape(rng, rank: int | None = None) -> tuple[int, ...]:
    for _ in range(20):
        r = int(rng.integers(1, 4)) if rank is None else rank
        shape = tuple(int(rng.choice(EXTENTS)) for _ in range(r))
        if math.prod(shape) <= MAX_ELEMENTS:
            return shape
    return (4,) * (rank or 1)


def _pick(rng, shapes, want=None) -> int | None:
    """A value's number (of shape ``want``, if given), later values more likely."""
    found = [i for i, s in enumerate(shapes) if want is None or s == want]
    if not found:
        return None
    weights = np.arange(1, len(found) + 1, dtype=float)
    return int(rng.choice(found, p=weights / weights.sum()))


def _step(rng, shapes, new_input) -> tuple[Step, tuple[int, ...]] | None:
    kind = rng.choice(("unary", "unary", "binary", "binary", "reduce", "broadcast", "transpose",
                       "reshape", "slice", "concatenate", "reverse", "pad", "dot", "softmax",
                       "cumsum", "mask", "sort", "take", "scatter_add", "max_pool",
                       "argmax_slice"))
    x = _pick(rng, shapes)
    s = shapes[x]
    r = len(s)
    if kind == "unary":
        return Step(str(rng.choice(_UNARY)), (x,)), s
    if kind == "binary":
        y = _pick(rng, shapes, s)
        if rng.random() < 0.4:  # broadcast a trailing part of the shape (or a scalar-like 1)
            k = int(rng.integers(0, r + 1))
            tail = tuple(1 if rng.random() < 0.3 else d for d in s[k:])
            y = _pick(rng, shapes, tail)
            if y is None:
                y = new_input(tail)
        return Step(str(rng.choice(_BINARY)), (x, y)), s
    if kind == "reduce" and r >= 1:
        reducer = str(rng.choice(_REDUCERS))
        if reducer == "argmax":
            axis = int(rng.integers(0, r))
            return Step("argmax", (x,), (axis,)), s[:axis] + s[axis + 1:]
        axes = tuple(sorted(set(int(a) for a in rng.choice(r, size=int(rng.integers(1, r + 1))))))
        keep = bool(rng.random() < 0.3)
        out = tuple(1 if i in axes else d for i, d in enumerate(s)) if keep else \
            tuple(d for i, d in enumerate(s) if i not in axes)
        return Step(reducer, (x,), (axes, keep)), out
    if kind == "broadcast" and r < 4:
        at = int(rng.integers(0, r + 1))
        new = int(rng.choice(EXTENTS[:9]))
        out = s[:at] + (new,) + s[at:]
        if math.prod(out) <= MAX_ELEMENTS:
            return Step("broadcast", (x,), (at, new)), out
    if kind == "transpose" and r >= 2:
        perm = tuple(int(p) for p in rng.permutation(r))
        return Step("transpose", (x,), (perm,)), tuple(s[p] for p in perm)
    if kind == "reshape":
        n = math.prod(s)
        divisors = [d for d in range(2, n) if n % d == 0]
        if divisors and rng.random() < 0.7:
            d = int(rng.choice(divisors))
            return Step("reshape", (x,), ((d, n // d),)), (d, n // d)
        return Step("reshape", (x,), ((n,),)), (n,)
    if kind == "slice" and r >= 1:
        axis = int(rng.integers(0, r))
        d = s[axis]
        start = int(rng.integers(0, d))
        stop = int(rng.integers(start + 1, d + 1))
        step = int(rng.integers(1, 4))
        out = s[:axis] + (len(range(start, stop, step)),) + s[axis + 1:]
        return Step("slice", (x,), (axis, start, stop, step)), out
    if kind == "concatenate" and r >= 1:
        axis = int(rng.integers(0, r))
        y = _pick(rng, shapes, s)
        out = s[:axis] + (2 * s[axis],) + s[axis + 1:]
        if math.prod(out) <= MAX_ELEMENTS:
            return Step("concatenate", (x, y), (axis,)), out
    if kind == "reverse" and r >= 1:
        return Step("reverse", (x,), (int(rng.integers(0, r)),)), s
    if kind == "pad" and r >= 1:
        config = tuple((int(rng.integers(-1, 3)), int(rng.integers(-1, 3)),
                        int(rng.integers(0, 2))) for _ in range(r))
        out = tuple(lo + hi + d + max(d - 1, 0) * i for d, (lo, hi, i) in zip(s, config))
        if all(o >= 1 for o in out) and math.prod(out) <= MAX_ELEMENTS:
            return Step("pad", (x,), (config,)), out
    if kind == "dot" and 2 <= r <= 3:
        n = int(rng.choice(EXTENTS[:10]))
        other = s[:-2] + (s[-1], n)
        y = _pick(rng, shapes, other)
        if y is None:
            y = new_input(other)
        out = s[:-1] + (n,)
        if math.prod(out) <= MAX_ELEMENTS:
            return Step("dot", (x, y)), out
    if kind == "softmax" and r >= 1:
        return Step("softmax", (x,), (int(rng.integers(0, r)),)), s
    if kind == "cumsum" and r >= 1:
        return Step("cumsum", (x,), (int(rng.integers(0, r)),)), s
    if kind == "mask" and r >= 2:
        return Step("mask", (x,), (bool(rng.random() < 0.5),)), s
    if kind == "sort" and r >= 1:
        return Step("sort", (x,), (int(rng.integers(0, r)),)), s
    if kind == "take" and r >= 1:  # a gather of constant indices, some repeated
        axis = int(rng.integers(0, r))
        indices = tuple(int(i) for i in rng.integers(0, s[axis], size=int(rng.integers(1, 6))))
        return Step("take", (x,), (axis, indices)), s[:axis] + (len(indices),) + s[axis + 1:]
    if kind == "scatter_add" and r >= 1:  # x.at[indices].add(...) on the first dim
        indices = tuple(int(i) for i in rng.integers(0, s[0], size=int(rng.integers(1, 5))))
        return Step("scatter_add", (x,), (indices,)), s
    if kind == "max_pool" and r >= 1 and s[-1] >= 2:  # a 2-wide window, stride 2 or 1
        stride = int(rng.integers(1, 3))
        return Step("max_pool", (x,), (stride,)), s[:-1] + ((s[-1] - 2) // stride + 1,)
    if kind == "argmax_slice" and r >= 1:  # a slice starting at a data-dependent index
        size = int(rng.integers(1, s[0] + 1))
        return Step("argmax_slice", (x,), (size,)), (size,) + s[1:]
    return Step(str(rng.choice(_UNARY)), (x,)), s


def _apply(step: Step, args):
    import jax  # noqa: PLC0415
    import jax.numpy as jnp  # noqa: PLC0415
    from jax import lax  # noqa: PLC0415

    x = args[0]
    op, p = step.op, step.params
    unary = {
        "negative": jnp.negative, "exp_tanh": lambda v: jnp.exp(jnp.tanh(v)),
        "tanh": jnp.tanh, "abs": jnp.abs, "sqrt_abs": lambda v: jnp.sqrt(jnp.abs(v)),
        "log1p_abs": lambda v: jnp.log1p(jnp.abs(v)), "sin": jnp.sin, "floor": jnp.floor,
        "logistic": jax.nn.sigmoid, "square": jnp.square,
        "rsqrt": lambda v: lax.rsqrt(1 + v * v),
        "bf16_round": lambda v: v.astype(jnp.bfloat16).astype(v.dtype),
        "erf": jax.scipy.special.erf, "expm1_tanh": lambda v: jnp.expm1(jnp.tanh(v)),
        "round": jnp.round, "sign": jnp.sign, "clamp": lambda v: jnp.clip(v, -0.5, 0.75),
        "int_mix": lambda v: (((((v * 8).astype(jnp.int32) * 3) >> 1) ^ 5) % 7).astype(v.dtype),
        "finite_or_zero": lambda v: jnp.where(jnp.isfinite(v / (v - v.mean())), v, 0),
        "fori": lambda v: lax.fori_loop(0, 3, lambda i, a: a * 0.5 + i, v),
    }
    if op in unary:
        return unary[op](x)
    if op in _BINARY:
        y = args[1]
        return {"add": jnp.add, "subtract": jnp.subtract, "multiply": jnp.multiply,
                "maximum": jnp.maximum, "minimum": jnp.minimum,
                "safe_divide": lambda a, b: a / (1 + jnp.abs(b)),
                "select_greater": lambda a, b: jnp.where(a > b, a, b * 2),
                "atan2": jnp.arctan2,
                "safe_remainder": lambda a, b: jnp.remainder(a, 1 + jnp.abs(b)),
                "safe_power": lambda a, b: jnp.power(1 + jnp.abs(a), jnp.tanh(b))}[op](x, y)
    if op == "argmax":
        return jnp.argmax(x, axis=p[0]).astype(x.dtype)
    if op in _REDUCERS:
        axes, keep = p
        return {"sum": jnp.sum, "max": jnp.max, "min": jnp.min, "mean": jnp.mean}[op](
            x, axis=axes, keepdims=keep)
    if op == "broadcast":
        at, new = p
        expanded = jnp.expand_dims(x, at)
        return jnp.broadcast_to(expanded, x.shape[:at] + (new,) + x.shape[at:])
    if op == "transpose":
        return jnp.transpose(x, p[0])
    if op == "reshape":
        return jnp.reshape(x, p[0])
    if op == "slice":
        axis, start, stop, stride = p
        index = [slice(None)] * x.ndim
        index[axis] = slice(start, stop, stride)
        return x[tuple(index)]
    if op == "concatenate":
        return jnp.concatenate([x, jnp.tanh(args[1])], axis=p[0])
    if op == "reverse":
        return jnp.flip(x, axis=p[0])
    if op == "pad":
        return lax.pad(x, jnp.array(0.5, x.dtype), p[0])
    if op == "dot":
        return jnp.matmul(x, args[1], precision=lax.Precision.HIGHEST)
    if op == "softmax":
        return jax.nn.softmax(x, axis=p[0])
    if op == "cumsum":
        return jnp.cumsum(x, axis=p[0])
    if op == "mask":
        rows, cols = x.shape[-2:]
        keep = jnp.arange(rows)[:, None] >= jnp.arange(cols)[None, :]
        fill = jnp.array(-1e4 if p[0] else 0, x.dtype)
        return jnp.where(keep, x, fill)
    if op == "sort":
        return jnp.sort(x, axis=p[0])
    if op == "take":
        return jnp.take(x, jnp.array(p[1]), axis=p[0])
    if op == "scatter_add":
        return x.at[jnp.array(p[0])].add(jnp.ones(x.shape[1:], x.dtype))
    if op == "max_pool":
        stride = p[0]
        dims, strides = (1,) * (x.ndim - 1) + (2,), (1,) * (x.ndim - 1) + (stride,)
        return lax.reduce_window(x, -jnp.inf, lax.max, dims, strides, "VALID")
    if op == "argmax_slice":
        start = jnp.argmax(x.reshape(x.shape[0], -1).sum(axis=1))
        return lax.dynamic_slice_in_dim(x, start, p[0], axis=0)
    raise ValueError(op)


__all__ = ["RandomProgram", "Step", "random_program"]
