"""Random JAX programs for differential testing against XLA: valid by construction, so every
difference between our compiled module, the reference evaluator and XLA is a defect.

A program is a list of steps over values (the inputs first: f32, or bf16 or f16 for a
third of the programs), each step one JAX operation (``program_ops``) on earlier values whose
shapes make it valid, drawn by one rule per kind (``DRAWS``): element-wise maps and binary
ops (with broadcasting), reductions (sum, max, min, argmax), broadcasts, transposes,
reshapes, strided slices, concatenation, reversal, padding (interior too), dots and batched
dots, 1-D convolutions, softmax, cumulative sums, masks from iotas, bf16 round trips, sorts,
gathers, scatter-adds, max and average pools, slices and updates at data-dependent starts,
integer arithmetic, ``fori_loop`` and ``while_loop``, and dropout by JAX's ``rbg`` keys.
About a third of the f32 programs are differentiated instead (``jax.grad``: transposed dots,
scatters of gathers, select-and-scatter of max pools, dynamic-update-slices), half of those
through ``jax.checkpoint`` (the recomputed forward behind an ``opt-barrier``).  The function
returns the last value and sometimes an earlier one (a multi-output module).  Everything is
drawn from one ``numpy`` generator, so a program is reproducible from its seed.

>>> program = random_program(3)
>>> program == random_program(3), len(program.inputs) >= 1
(True, True)
>>> text = program.hlo_text()
>>> text.startswith("HloModule")
True
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tests.fuzz.program_ops import BINARY, REDUCERS, UNARY, apply_step

#: Extents a dim is drawn from (small, odd, powers of two and one past them).
EXTENTS = (1, 2, 3, 4, 5, 7, 8, 16, 17, 32, 33, 64)
#: The most elements a value may have (the interpreter runs every kernel on the CPU).
MAX_ELEMENTS = 1 << 14

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
    #: The gradient recomputes the forward pass (``jax.checkpoint``: an ``opt-barrier``).
    remat: bool = False

    def function(self) -> Callable:
        """The JAX function of the program."""
        def f(*args):
            values = []
            for step in self.steps:
                values.append(args[step.params[0]] if step.op == "input" else
                              apply_step(step.op, [values[a] for a in step.args], step.params))
            out = tuple(values[o] for o in self.outputs)
            return out if len(out) > 1 else out[0]
        if not self.grad:
            return f
        import jax  # noqa: PLC0415
        import jax.numpy as jnp  # noqa: PLC0415

        forward = jax.checkpoint(f) if self.remat else f

        def loss(*args):
            out = forward(*args)
            return sum(jnp.sum(jnp.sin(v)) for v in (out if isinstance(out, tuple) else (out,)))
        return jax.grad(loss, argnums=tuple(range(len(self.inputs))))

    def specs(self):
        import jax  # noqa: PLC0415
        import jax.numpy as jnp  # noqa: PLC0415

        return [jax.ShapeDtypeStruct(shape, jnp.dtype(dtype)) for shape, dtype in self.inputs]

    @functools.cached_property
    def _lowered(self):
        """The program lowered once (every input kept, used or not), for both texts and XLA's
        run."""
        import jax  # noqa: PLC0415

        return jax.jit(self.function(), keep_unused=True).lower(*self.specs())

    @functools.cached_property
    def _compiled(self):
        return self._lowered.compile()

    def hlo_text(self) -> str:
        """The module as JAX lowers it (before XLA's optimizations)."""
        return self._lowered.as_text(dialect="hlo")

    def optimized_hlo_text(self) -> str:
        """The module as XLA's CPU pipeline optimized it (fusions, layouts, bitcasts)."""
        return self._compiled.as_text()

    def run_xla(self, inputs) -> list[np.ndarray]:
        """XLA's outputs (the leaves of the result) on ``inputs``, by the compiled program."""
        out = self._compiled(*inputs)
        return [np.asarray(leaf) for leaf in (out if isinstance(out, tuple) else (out,))]

    def example_inputs(self) -> list[np.ndarray]:
        """Normal values (inputs are f32, bf16 or f16), drawn from the program's seed."""
        import ml_dtypes  # noqa: PLC0415

        rng = np.random.default_rng(self.seed + 7919)
        types = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16}
        return [rng.standard_normal(shape).astype(np.float32).astype(types[dtype])
                for shape, dtype in self.inputs]


def random_program(seed: int, max_steps: int = 8, sizes: Sizes | None = None) -> RandomProgram:
    """A valid random program drawn from ``seed`` (module docstring), its dims from ``sizes``
    (:data:`LARGE` for longer rows)."""
    sizes = sizes or Sizes()
    rng = np.random.default_rng(seed)
    draw = rng.random()
    dtype = "bfloat16" if draw < 0.2 else "float16" if draw < 0.3 else "float32"
    inputs: list[tuple[tuple[int, ...], str]] = []
    steps: list[Step] = []
    shapes: list[tuple[int, ...]] = []  # of every value, in the steps' order
    for _ in range(int(rng.integers(1, 4))):
        _add_input(_shape(rng, sizes), dtype, inputs, steps, shapes)
    drawing = _Drawing(rng, shapes, lambda shape: _add_input(shape, dtype, inputs, steps, shapes),
                       sizes)
    for _ in range(int(rng.integers(2, max_steps + 1))):
        made = _step(drawing)
        if made is not None:
            steps.append(made[0])
            shapes.append(made[1])
    if all(step.op == "input" for step in steps):
        steps.append(Step("negative", (0,)))
        shapes.append(shapes[0])
    # Drawn apart, so that a seed's other steps stay what they were: a dropout by JAX's rbg
    # keys (an rng-bit-generator) of one value, the last step.
    apart = np.random.default_rng([seed, 2])
    if apart.random() < 0.15:
        x = _pick(apart, shapes)
        steps.append(Step("dropout", (x,), (int(apart.integers(0, 1 << 31)),)))
        shapes.append(shapes[x])
    computed = [i for i, step in enumerate(steps) if step.op != "input"]
    outputs = (computed[-1],)
    if rng.random() < 0.3 and len(computed) > 1:
        outputs = (computed[-1], int(rng.choice(computed[:-1])))
    # Drawn apart, so that a seed's forward program stays what it was without gradients.
    grad = dtype == "float32" and np.random.default_rng([seed, 1]).random() < 0.3 \
        and not any(step.op == "while_loop" for step in steps)  # JAX cannot differentiate one
    remat = grad and np.random.default_rng([seed, 3]).random() < 0.5
    return RandomProgram(seed, tuple(inputs), tuple(steps), outputs, grad, remat)


def _add_input(shape, dtype, inputs, steps, shapes) -> int:
    """A new function argument of ``shape``: its value's number."""
    steps.append(Step("input", (), (len(inputs),)))
    inputs.append((shape, dtype))
    shapes.append(shape)
    return len(shapes) - 1


def _shape(rng, sizes: "Sizes") -> tuple[int, ...]:
    for _ in range(20):
        shape = tuple(int(rng.choice(sizes.extents)) for _ in range(int(rng.integers(1, 4))))
        if math.prod(shape) <= sizes.max_elements:
            return shape
    return (4,)


def _pick(rng, shapes, want=None) -> int | None:
    """A value's number (of shape ``want``, if given), later values more likely."""
    found = [i for i, s in enumerate(shapes) if want is None or s == want]
    if not found:
        return None
    weights = np.arange(1, len(found) + 1, dtype=float)
    return int(rng.choice(found, p=weights / weights.sum()))


@dataclass(frozen=True)
class Sizes:
    """The extents a dim is drawn from and the most elements a value may have."""

    extents: tuple[int, ...] = EXTENTS
    max_elements: int = MAX_ELEMENTS


#: Longer rows and more elements: looped and split reductions, many tiles per kernel.
LARGE = Sizes(EXTENTS + (130, 257, 520, 1030, 2050), 1 << 16)


@dataclass
class _Drawing:
    """What a step's rule draws from: the generator, every value's shape, a way to add an
    input of a given shape (its value's number), and the sizes allowed."""

    rng: np.random.Generator
    shapes: list
    new_input: Callable[[tuple[int, ...]], int]
    sizes: Sizes

    def pick(self, want=None) -> int | None:
        return _pick(self.rng, self.shapes, want)

    def fits(self, shape) -> bool:
        return math.prod(shape) <= self.sizes.max_elements


def _step(ctx: _Drawing) -> tuple[Step, tuple[int, ...]] | None:
    """One step on earlier values: its kind drawn (element-wise ops twice as likely), then
    its operands and params by the kind's rule, or an element-wise op where they do not fit."""
    kind = str(ctx.rng.choice(_KINDS))
    x = ctx.pick()
    if not ctx.shapes[x] and kind not in _ON_SCALARS:
        kind = "unary"
    made = DRAWS[kind](ctx, x, ctx.shapes[x])
    return made if made is not None else (Step(str(ctx.rng.choice(UNARY)), (x,)), ctx.shapes[x])


def draw_argmax_slice(ctx, x, s):
    size = int(ctx.rng.integers(1, s[0] + 1))
    return Step("argmax_slice", (x,), (size,)), (size,) + s[1:]


def draw_avg_pool(ctx, x, s):
    stride = int(ctx.rng.integers(1, 3))
    return Step("avg_pool", (x,), (stride,)), s[:-1] + ((s[-1] - 1) // stride + 1,)


def draw_binary(ctx, x, s):
    y = ctx.pick(s)
    if ctx.rng.random() < 0.4:  # broadcast a trailing part of the shape (or a scalar-like 1)
        k = int(ctx.rng.integers(0, len(s) + 1))
        tail = tuple(1 if ctx.rng.random() < 0.3 else d for d in s[k:])
        y = ctx.pick(tail)
        if y is None:
            y = ctx.new_input(tail)
    return Step(str(ctx.rng.choice(BINARY)), (x, y)), s


def draw_broadcast(ctx, x, s):
    at = int(ctx.rng.integers(0, len(s) + 1))
    new = int(ctx.rng.choice(ctx.sizes.extents[:9]))
    out = s[:at] + (new,) + s[at:]
    return (Step("broadcast", (x,), (at, new)), out) if len(s) < 4 and ctx.fits(out) else None


def draw_concatenate(ctx, x, s):
    axis = int(ctx.rng.integers(0, len(s)))
    out = s[:axis] + (2 * s[axis],) + s[axis + 1:]
    y = ctx.pick(s)
    return (Step("concatenate", (x, y), (axis,)), out) if ctx.fits(out) else None


def draw_conv(ctx, x, s):
    if len(s) != 3:
        return None
    width = int(ctx.rng.integers(1, 4))
    kernel = (width, s[2], int(ctx.rng.choice(ctx.sizes.extents[:8])))
    stride = int(ctx.rng.integers(1, 3))
    padding = str(ctx.rng.choice(("SAME", "VALID")))
    out_w = -(-s[1] // stride) if padding == "SAME" else (s[1] - width) // stride + 1
    out = (s[0], out_w, kernel[2])
    if out_w < 1 or not ctx.fits(out):
        return None
    w = ctx.pick(kernel)
    return Step("conv", (x, ctx.new_input(kernel) if w is None else w), (stride, padding)), out


def draw_dot(ctx, x, s):
    if not 2 <= len(s) <= 3:
        return None
    n = int(ctx.rng.choice(ctx.sizes.extents[:10]))
    other = s[:-2] + (s[-1], n)
    out = s[:-1] + (n,)
    if not ctx.fits(out):
        return None
    y = ctx.pick(other)
    return Step("dot", (x, ctx.new_input(other) if y is None else y)), out


def draw_dynamic_update(ctx, x, s):
    rows = int(ctx.rng.integers(1, s[0] + 1))
    update = (rows,) + s[1:]
    y = ctx.pick(update)
    return Step("dynamic_update", (x, ctx.new_input(update) if y is None else y)), s


def draw_max_pool(ctx, x, s):  # a 2-wide window, stride 1 or 2
    if s[-1] < 2:
        return None
    stride = int(ctx.rng.integers(1, 3))
    return Step("max_pool", (x,), (stride,)), s[:-1] + ((s[-1] - 2) // stride + 1,)


def draw_pad(ctx, x, s):
    config = tuple((int(ctx.rng.integers(-1, 3)), int(ctx.rng.integers(-1, 3)),
                    int(ctx.rng.integers(0, 2))) for _ in s)
    out = tuple(lo + hi + d + max(d - 1, 0) * i for d, (lo, hi, i) in zip(s, config))
    return (Step("pad", (x,), (config,)), out) if min(out) >= 1 and ctx.fits(out) else None


def draw_reduce(ctx, x, s):
    reducer = str(ctx.rng.choice(REDUCERS + ("argmax",)))
    if reducer == "argmax":
        axis = int(ctx.rng.integers(0, len(s)))
        return Step("argmax", (x,), (axis,)), s[:axis] + s[axis + 1:]
    axes = tuple(sorted({int(a) for a in ctx.rng.choice(len(s), size=int(ctx.rng.integers(1, len(s) + 1)))}))
    keep = bool(ctx.rng.random() < 0.3)
    out = tuple(1 if i in axes else d for i, d in enumerate(s)) if keep else \
        tuple(d for i, d in enumerate(s) if i not in axes)
    return Step(reducer, (x,), (axes, keep)), out


def draw_reshape(ctx, x, s):
    n = math.prod(s)
    divisors = [d for d in range(2, n) if n % d == 0]
    if divisors and ctx.rng.random() < 0.7:
        d = int(ctx.rng.choice(divisors))
        return Step("reshape", (x,), ((d, n // d),)), (d, n // d)
    return Step("reshape", (x,), ((n,),)), (n,)


def draw_scatter_add(ctx, x, s):
    indices = tuple(int(i) for i in ctx.rng.integers(0, s[0], size=int(ctx.rng.integers(1, 5))))
    return Step("scatter_add", (x,), (indices,)), s


def draw_slice(ctx, x, s):
    axis = int(ctx.rng.integers(0, len(s)))
    start = int(ctx.rng.integers(0, s[axis]))
    stop = int(ctx.rng.integers(start + 1, s[axis] + 1))
    stride = int(ctx.rng.integers(1, 4))
    return (Step("slice", (x,), (axis, start, stop, stride)),
            s[:axis] + (len(range(start, stop, stride)),) + s[axis + 1:])


def draw_take(ctx, x, s):  # a gather of constant indices, some repeated
    axis = int(ctx.rng.integers(0, len(s)))
    indices = tuple(int(i) for i in ctx.rng.integers(0, s[axis], size=int(ctx.rng.integers(1, 6))))
    return Step("take", (x,), (axis, indices)), s[:axis] + (len(indices),) + s[axis + 1:]


def draw_sort(ctx, x, s):  # one key, or two (a lexicographic sort: the comparator network)
    return Step("sort", (x,), (int(ctx.rng.integers(0, len(s))), int(ctx.rng.integers(1, 3)))), s


def draw_transpose(ctx, x, s):
    perm = tuple(int(p) for p in ctx.rng.permutation(len(s)))
    return (Step("transpose", (x,), (perm,)), tuple(s[p] for p in perm)) if len(s) >= 2 else None


def _along_an_axis(op: str):
    def draw(ctx, x, s):
        return Step(op, (x,), (int(ctx.rng.integers(0, len(s))),)), s
    return draw


def _same_shape(op: str, params, least_rank: int = 1):
    def draw(ctx, x, s):
        if len(s) < least_rank:
            return None
        return Step(op, (x,), params(ctx.rng)), s
    return draw


#: How each kind of step is drawn (alphabetical): ``draw(ctx, x, shape of x) -> (step, its
#: shape)``, or None where ``x`` does not fit the kind.
DRAWS = {
    "argmax_slice": draw_argmax_slice,
    "avg_pool": draw_avg_pool,
    "binary": draw_binary,
    "broadcast": draw_broadcast,
    "concatenate": draw_concatenate,
    "conv": draw_conv,
    "cumsum": _along_an_axis("cumsum"),
    "dot": draw_dot,
    "dynamic_update": draw_dynamic_update,
    "mask": _same_shape("mask", lambda rng: (bool(rng.random() < 0.5),), least_rank=2),
    "max_pool": draw_max_pool,
    "pad": draw_pad,
    "reduce": draw_reduce,
    "reshape": draw_reshape,
    "reverse": _along_an_axis("reverse"),
    "scatter_add": draw_scatter_add,
    "slice": draw_slice,
    "softmax": _along_an_axis("softmax"),
    "sort": draw_sort,
    "take": draw_take,
    "transpose": draw_transpose,
    "unary": lambda ctx, x, s: (Step(str(ctx.rng.choice(UNARY)), (x,)), s),
    "while_loop": _same_shape("while_loop", lambda rng: (int(rng.integers(1, 6)),)),
}


#: The kinds a rank-0 value can take.
_ON_SCALARS = frozenset({"binary", "broadcast", "reshape", "unary", "while_loop"})
#: Element-wise steps are twice as likely as the others.
_KINDS = tuple(DRAWS) + ("unary", "binary")

__all__ = ["LARGE", "RandomProgram", "Sizes", "Step", "random_program"]
