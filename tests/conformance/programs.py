"""The conformance programs: the HLO corpus plus JAX programs it lacks, as HLO text.

Every program comes in two variants, as in ``tests/data/hlo``: ``before`` (what
``jax.jit(f).lower(*args).as_text(dialect="hlo")`` prints, unfused) and ``after`` (what
``.compile().as_text()`` prints: optimized by XLA's CPU pipeline, with its fusions).  The corpus
variants are read from the committed files; the extra programs here are lowered with jax when
first asked for (memoized), so no file is written.  Shapes stay small: the Triton interpreter
runs every kernel on the CPU.

:data:`KERNEL_QUALITY_PROGRAMS` are the reference fusions for the compile-for-GPU checks:
the same math at shapes whose minor dimension is a multiple of 16 elements, so a contiguous
row is 128-bit aligned and vector loads/stores are possible.

>>> sorted(EXTRA_PROGRAMS)[:3]
['attention', 'bf16_attention', 'bf16_layernorm']
>>> "ENTRY" in program_text("gelu", "before")
True
"""
from __future__ import annotations

import functools
import pathlib
from collections.abc import Callable

import numpy as np

CORPUS_DIR = pathlib.Path(__file__).resolve().parent.parent / "data" / "hlo"
VARIANTS = ("before", "after")


def corpus_programs() -> tuple[str, ...]:
    """Names of the programs in ``tests/data/hlo`` (``NAME.before.hlo``/``NAME.after.hlo``)."""
    return tuple(sorted(p.name[: -len(".before.hlo")] for p in CORPUS_DIR.glob("*.before.hlo")))


# --- extra programs (built lazily: importing this module must not import jax) -------------

def _f32(*shape: int, scale: float = 7.0) -> np.ndarray:
    # Distinct, non-trivial values; the tests feed random inputs of these shapes anyway.
    return (np.arange(np.prod(shape), dtype=np.float32).reshape(shape) / scale).astype(np.float32)


def _attention(q, k, v):
    import jax
    import jax.numpy as jnp

    scores = (q @ k.T) / jnp.sqrt(jnp.float32(q.shape[-1])).astype(q.dtype)
    return jax.nn.softmax(scores, axis=-1) @ v


def _layernorm(x, g, b):
    import jax.numpy as jnp
    from jax import lax

    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean((x - mean) ** 2, axis=-1, keepdims=True)
    return (x - mean) * lax.rsqrt(var + 1e-5) * g + b


def _rmsnorm(x, g):
    import jax.numpy as jnp
    from jax import lax

    return x * lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * g


def _swiglu(x, w1, w2):
    import jax

    return jax.nn.silu(x @ w1) * (x @ w2)


def _gelu(x):
    import jax

    return jax.nn.gelu(x, approximate=True)


def _softmax(x):
    import jax

    return jax.nn.softmax(x, axis=-1)


def _remat_mlp_grad(w1, w2, x):
    # jax.checkpoint recomputes each layer in the backward pass; the recomputation reads its
    # inputs through an opt-barrier, which keeps XLA (and us) from merging it with the forward.
    import jax
    import jax.numpy as jnp

    @jax.checkpoint
    def layer(w, h):
        return jnp.tanh(h @ w)

    def loss(w1, w2):
        return jnp.sum(layer(w2, layer(w1, x)) ** 2)

    return jax.grad(loss, argnums=(0, 1))(w1, w2)


def _while_loop(x):
    # A data-dependent trip count (unlike fori_loop's known one): double until the sum exceeds 50.
    import jax.numpy as jnp
    from jax import lax

    return lax.while_loop(lambda v: jnp.sum(jnp.abs(v)) < 50.0, lambda v: v * 2.0 + 0.25, x)


def _transpose_2d(x):
    return x.T * 2.0


def _row_sum(x):
    import jax.numpy as jnp

    return jnp.sum(x, axis=-1)


# name -> (function, example argument shapes, element type of the floating arguments)
EXTRA_PROGRAMS: dict[str, tuple[Callable, tuple[tuple[int, ...], ...], str]] = {
    "attention": (_attention, ((4, 8), (6, 8), (6, 8)), "float32"),
    "bf16_attention": (_attention, ((4, 8), (6, 8), (6, 8)), "bfloat16"),
    "bf16_layernorm": (_layernorm, ((4, 8), (8,), (8,)), "bfloat16"),
    "bf16_rmsnorm": (_rmsnorm, ((4, 8), (8,)), "bfloat16"),
    "bf16_swiglu": (_swiglu, ((2, 4), (4, 6), (4, 6)), "bfloat16"),
    "remat_mlp_grad": (_remat_mlp_grad, ((8, 6), (6, 5), (4, 8)), "float32"),
    "transpose_2d": (_transpose_2d, ((3, 5),), "float32"),
    "while_loop": (_while_loop, ((4,),), "float32"),
}

#: Reference fusions for the kernel-quality checks: aligned shapes (minor dim % 16 == 0).
KERNEL_QUALITY_PROGRAMS: dict[str, tuple[Callable, tuple[tuple[int, ...], ...], str]] = {
    "gelu": (_gelu, ((64, 256),), "float32"),
    "bf16_gelu": (_gelu, ((64, 256),), "bfloat16"),
    "softmax": (_softmax, ((64, 256),), "float32"),
    "layernorm": (_layernorm, ((64, 256), (256,), (256,)), "float32"),
    "rmsnorm": (_rmsnorm, ((64, 256), (256,)), "float32"),
    "transpose": (_transpose_2d, ((128, 64),), "float32"),
    "row_sum": (_row_sum, ((64, 256),), "float32"),
}


@functools.cache
def lower_program(name: str, table: str = "extra") -> tuple[str, str]:
    """``(before, after)`` HLO text of an extra (or, ``table="quality"``, kernel-quality) program."""
    import jax
    import ml_dtypes

    fn, shapes, dtype = (EXTRA_PROGRAMS if table == "extra" else KERNEL_QUALITY_PROGRAMS)[name]
    np_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    args = [_f32(*s).astype(np_dtype) for s in shapes]
    lowered = jax.jit(fn).lower(*args)
    return lowered.as_text(dialect="hlo"), lowered.compile().as_text()


def program_text(name: str, variant: str) -> str:
    """The HLO text of program ``name`` (corpus or extra) in ``variant`` ``before``/``after``."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    if name in EXTRA_PROGRAMS:
        return lower_program(name)[VARIANTS.index(variant)]
    path = CORPUS_DIR / f"{name}.{variant}.hlo"
    if not path.is_file():
        raise ValueError(f"no program {name!r}: not in {CORPUS_DIR} nor in EXTRA_PROGRAMS")
    return path.read_text()


def all_programs() -> tuple[str, ...]:
    """Every conformance program: the corpus, then the extra programs."""
    return corpus_programs() + tuple(sorted(EXTRA_PROGRAMS))


__all__ = ["CORPUS_DIR", "EXTRA_PROGRAMS", "KERNEL_QUALITY_PROGRAMS", "VARIANTS", "all_programs",
           "corpus_programs", "lower_program", "program_text"]
