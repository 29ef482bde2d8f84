"""Random JAX programs for differential testing against XLA: valid by construction, so every
difference between our compiled module, the reference evaluator and XLA is a defect.

A program is a list of steps over values (the inputs first: f32, or bf16 or f16 for a
third of the programs), each step one JAX operation (``program_ops``) on earlier values whose
shapes make it valid, drawn by one rule per kind (``DRAWS``): element-wise maps and binary
ops (with broadcasting), reductions (sum, max, min, argmax), broadcasts, transposes,
reshapes, strided slices, concatenation, reversal, padding (interior too), dots and batched
dots, 1-D convolutions, softmax, cumulative sums, masks from iotas, bf16 round trips, sorts,
gathers, scatter-adds, max and average pools, slices and updates at data-dependent starts,
integer arithmetic, ``fori_loop`` and ``while_loop``.  About a third of the f32 programs are
differentiated instead (``jax.grad``: transposed dots, scatters of gathers, select-and-scatter
of max pools, dynamic-update-slices).  The function returns the last value and sometimes an
earlier one (a multi-output module).  Everything is drawn from one
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
        """Normal values (inputs are f32, bf16 or f16), drawn from the program's seed."""
        import ml_dtypes  # noqa: PLC0415

        rng = np.random.default_rng(self.seed + 7919)
        types = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16}
        return [rng.standard_normal(shape).astype(np.float32).astype(types[dtype])
                for shape, dtype in self.inputs]


def random_program(seed: int, max_steps: int = 8) -> RandomProgram:
    """A valid random program drawn from ``seed`` (module docstring)."""
    rng = np.random.default_rng(seed)
    draw = rng.random()
    dtype = "bfloat16" if draw < 0.2 else "float16" if draw < 0.3 else "float32"
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
    grad = dtype == "float32" and np.random.default_rng([seed, 1]).random() < 0.3 \
        and not any(step.op == "while_loop" for step in steps)  # JAX cannot differentiate one
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
    """One step on earlier values: its kind drawn (element-wise ops twice as likely), then
    its operands and params by the kind's rule, or an element-wise op where they do not fit."""
    kind = str(rng.choice(_KINDS))
    x = _pick(rng, shapes)
    if not shapes[x] and kind not in _ON_SCALARS:
        kind = "unary"
    made = DRAWS[kind](rng, x, shapes[x], shapes, new_input)
    return made if made is not None else (Step(str(rng.choice(UNARY)), (x,)), shapes[x])


def _fits(shape) -> bool:
    return math.prod(shape) <= MAX_ELEMENTS


def draw_argmax_slice(rng, x, s, shapes, new_input):
    size = int(rng.integers(1, s[0] + 1))
    return Step("argmax_slice", (x,), (size,)), (size,) + s[1:]


def draw_avg_pool(rng, x, s, shapes, new_input):
    stride = int(rng.integers(1, 3))
    return Step("avg_pool", (x,), (stride,)), s[:-1] + ((s[-1] - 1) // stride + 1,)


def draw_binary(rng, x, s, shapes, new_input):
    y = _pick(rng, shapes, s)
    if rng.random() < 0.4:  # broadcast a trailing part of the shape (or a scalar-like 1)
        k = int(rng.integers(0, len(s) + 1))
        tail = tuple(1 if rng.random() < 0.3 else d for d in s[k:])
        y = _pick(rng, shapes, tail)
        if y is None:
            y = new_input(tail)
    return Step(str(rng.choice(BINARY)), (x, y)), s


def draw_broadcast(rng, x, s, shapes, new_input):
    at = int(rng.integers(0, len(s) + 1))
    new = int(rng.choice(EXTENTS[:9]))
    out = s[:at] + (new,) + s[at:]
    return (Step("broadcast", (x,), (at, new)), out) if len(s) < 4 and _fits(out) else None


def draw_concatenate(rng, x, s, shapes, new_input):
    axis = int(rng.integers(0, len(s)))
    out = s[:axis] + (2 * s[axis],) + s[axis + 1:]
    y = _pick(rng, shapes, s)
    return (Step("concatenate", (x, y), (axis,)), out) if _fits(out) else None


def draw_conv(rng, x, s, shapes, new_input):
    if len(s) != 3:
        return None
    width = int(rng.integers(1, 4))
    kernel = (width, s[2], int(rng.choice(EXTENTS[:8])))
    stride = int(rng.integers(1, 3))
    padding = str(rng.choice(("SAME", "VALID")))
    out_w = -(-s[1] // stride) if padding == "SAME" else (s[1] - width) // stride + 1
    out = (s[0], out_w, kernel[2])
    if out_w < 1 or not _fits(out):
        return None
    w = _pick(rng, shapes, kernel)
    return Step("conv", (x, new_input(kernel) if w is None else w), (stride, padding)), out


def draw_dot(rng, x, s, shapes, new_input):
    if not 2 <= len(s) <= 3:
        return None
    n = int(rng.choice(EXTENTS[:10]))
    other = s[:-2] + (s[-1], n)
    out = s[:-1] + (n,)
    if not _fits(out):
        return None
    y = _pick(rng, shapes, other)
    return Step("dot", (x, new_input(other) if y is None else y)), out


def draw_dynamic_update(rng, x, s, shapes, new_input):
    rows = int(rng.integers(1, s[0] + 1))
    update = (rows,) + s[1:]
    y = _pick(rng, shapes, update)
    return Step("dynamic_update", (x, new_input(update) if y is None else y)), s


def draw_max_pool(rng, x, s, shapes, new_input):  # a 2-wide window, stride 1 or 2
    if s[-1] < 2:
        return None
    stride = int(rng.integers(1, 3))
    return Step("max_pool", (x,), (stride,)), s[:-1] + ((s[-1] - 2) // stride + 1,)


def draw_pad(rng, x, s, shapes, new_input):
    config = tuple((int(rng.integers(-1, 3)), int(rng.integers(-1, 3)),
                    int(rng.integers(0, 2))) for _ in s)
    out = tuple(lo + hi + d + max(d - 1, 0) * i for d, (lo, hi, i) in zip(s, config))
    return (Step("pad", (x,), (config,)), out) if min(out) >= 1 and _fits(out) else None


def draw_reduce(rng, x, s, shapes, new_input):
    reducer = str(rng.choice(REDUCERS + ("argmax",)))
    if reducer == "argmax":
        axis = int(rng.integers(0, len(s)))
        return Step("argmax", (x,), (axis,)), s[:axis] + s[axis + 1:]
    axes = tuple(sorted({int(a) for a in rng.choice(len(s), size=int(rng.integers(1, len(s) + 1)))}))
    keep = bool(rng.random() < 0.3)
    out = tuple(1 if i in axes else d for i, d in enumerate(s)) if keep else \
        tuple(d for i, d in enumerate(s) if i not in axes)
    return Step(reducer, (x,), (axes, keep)), out


def draw_reshape(rng, x, s, shapes, new_input):
    n = math.prod(s)
    divisors = [d for d in range(2, n) if n % d == 0]
    if divisors and rng.random() < 0.7:
        d = int(rng.choice(divisors))
        return Step("reshape", (x,), ((d, n // d),)), (d, n // d)
    return Step("reshape", (x,), ((n,),)), (n,)


def draw_scatter_add(rng, x, s, shapes, new_input):
    indices = tuple(int(i) for i in rng.integers(0, s[0], size=int(rng.integers(1, 5))))
    return Step("scatter_add", (x,), (indices,)), s


def draw_slice(rng, x, s, shapes, new_input):
    axis = int(rng.integers(0, len(s)))
    start = int(rng.integers(0, s[axis]))
    stop = int(rng.integers(start + 1, s[axis] + 1))
    stride = int(rng.integers(1, 4))
    return (Step("slice", (x,), (axis, start, stop, stride)),
            s[:axis] + (len(range(start, stop, stride)),) + s[axis + 1:])


def draw_take(rng, x, s, shapes, new_input):  # a gather of constant indices, some repeated
    axis = int(rng.integers(0, len(s)))
    indices = tuple(int(i) for i in rng.integers(0, s[axis], size=int(rng.integers(1, 6))))
    return Step("take", (x,), (axis, indices)), s[:axis] + (len(indices),) + s[axis + 1:]


def draw_transpose(rng, x, s, shapes, new_input):
    perm = tuple(int(p) for p in rng.permutation(len(s)))
    return (Step("transpose", (x,), (perm,)), tuple(s[p] for p in perm)) if len(s) >= 2 else None


def _along_an_axis(op: str):
    def draw(rng, x, s, shapes, new_input):
        return Step(op, (x,), (int(rng.integers(0, len(s))),)), s
    return draw


def _same_shape(op: str, params, least_rank: int = 1):
    def draw(rng, x, s, shapes, new_input):
        if len(s) < least_rank:
            return None
        return Step(op, (x,), params(rng)), s
    return draw


#: How each kind of step is drawn (alphabetical): ``draw(rng, x, shape of x, shapes,
#: new_input) -> (step, its shape)``, or None where ``x`` does not fit the kind.
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
    "sort": _along_an_axis("sort"),
    "take": draw_take,
    "transpose": draw_transpose,
    "unary": lambda rng, x, s, shapes, new_input: (Step(str(rng.choice(UNARY)), (x,)), s),
    "while_loop": _same_shape("while_loop", lambda rng: (int(rng.integers(1, 6)),)),
}


#: The kinds a rank-0 value can take.
_ON_SCALARS = frozenset({"binary", "broadcast", "reshape", "unary", "while_loop"})
#: Element-wise steps are twice as likely as the others.
_KINDS = tuple(DRAWS) + ("unary", "binary")

__all__ = ["RandomProgram", "Step", "random_program"]
