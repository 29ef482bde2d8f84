"""8-bit float reductions round after every combine, in XLA:CPU's order: the reference
evaluator and the kernels against XLA running the same text, bit for bit (issue 29).

The evidence for the order (``fusion.analysis.xla_reduction_order``) is XLA itself: every case
here, multi-dim windows and layouts included, is compared as bytes.  bf16 is pinned as it is
(f32 accumulation in kernels, closer to the exact sum than XLA:CPU's per-add rounding): JAX
lowers a bf16 sum as an f32 reduce, while an fp8 sum stays an fp8 reduce.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from fusion.evaluator import evaluate
from fusion.text.parser import parse_hlo

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

from tests.conformance.xla_oracle import run_xla  # noqa: E402
from tests.triton_backend.xla_three_way import run_compiled  # noqa: E402

F8 = {"f8e4m3fn": ml_dtypes.float8_e4m3fn, "f8e5m2": ml_dtypes.float8_e5m2,
      "f8e4m3fnuz": ml_dtypes.float8_e4m3fnuz, "f8e5m2fnuz": ml_dtypes.float8_e5m2fnuz}


def _reduce_text(t: str, shape, reduced, layout=None) -> str:
    kept = [n for k, n in enumerate(shape) if k not in reduced]
    order = "{" + ",".join(map(str, layout or reversed(range(len(shape))))) + "}"
    return (f"HloModule m\nadd {{\n  a = {t}[] parameter(0)\n  b = {t}[] parameter(1)\n"
            f"  ROOT s = {t}[] add(a, b)\n}}\nENTRY e {{\n"
            f"  x = {t}[{','.join(map(str, shape))}]{order} parameter(0)\n  z = {t}[] constant(0)\n"
            f"  ROOT r = {t}[{','.join(map(str, kept))}] reduce(x, z), "
            f"dimensions={{{','.join(map(str, reduced))}}}, to_apply=add\n}}\n")


def _inputs(t: str, shape, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal(shape) * 3
    return x.astype(F8[t])


def _same_bits(a, b) -> bool:
    """Equal bytes, -0 included; a NaN equals any NaN (XLA:CPU's fp8 sums give 0x7f whatever
    NaN they met, where ours keep the first NaN's sign and payload)."""
    a, b = np.asarray(a), np.asarray(b)
    nan = np.isnan(a.astype(np.float32))
    return np.array_equal(nan, np.isnan(b.astype(np.float32))) and \
        np.array_equal(a.view(np.uint8)[~nan], b.view(np.uint8)[~nan])


@pytest.mark.parametrize("t, shape, reduced, layout", [
    ("f8e4m3fn", (5, 7), (1,), None),            # <= 32: one sequential fold
    ("f8e5m2", (3, 1100), (1,), (0, 1)),         # two window levels, column-major
    ("f8e4m3fnuz", (40, 3, 50), (0, 2), None),   # windows of 32 x 32
    ("f8e5m2fnuz", (70, 3, 6), (0, 2), None),    # the short dim is windowed (padded) too
    ("f8e4m3fn", (4, 0), (1,), None),            # empty: the init value
])
def test_evaluator_matches_xla_bit_for_bit(t, shape, reduced, layout):
    text = _reduce_text(t, shape, reduced, layout)
    x = _inputs(t, shape)
    (want,) = run_xla(text, x)
    (got,) = evaluate(parse_hlo(text), x)
    assert _same_bits(got, want)


@pytest.mark.parametrize("t, shape, reduced", [
    ("f8e4m3fn", (6, 20), (1,)), ("f8e5m2", (3, 100), (1,)), ("f8e4m3fn", (4, 5, 6), (1, 2)),
    ("f8e5m2", (9, 4), (0,)),
])
def test_kernel_matches_xla_bit_for_bit(t, shape, reduced):
    text = _reduce_text(t, shape, reduced)
    x = _inputs(t, shape, seed=1)
    (want,) = run_xla(text, x)
    (got,) = run_compiled(text, x)
    assert _same_bits(got, want)


def test_special_values_sum_as_xla_does():
    # inf + -inf, NaN, -0 and overflow (e5m2 overflows to inf) in one row each.
    rows = np.float32([[np.inf, 1, -np.inf, 2], [np.nan, 1, 2, 3], [-0.0, -0.0, -0.0, -0.0],
                       [57344, 57344, -1, 0]]).astype(ml_dtypes.float8_e5m2)
    text = _reduce_text("f8e5m2", (4, 4), (1,))
    (want,) = run_xla(text, rows)
    (evaluated,) = evaluate(parse_hlo(text), rows)
    (got,) = run_compiled(text, rows)
    assert _same_bits(evaluated, want) and _same_bits(got, want)


def test_reduce_window_folds_in_order():
    text = ("HloModule m\nadd {\n  a = f8e4m3fn[] parameter(0)\n  b = f8e4m3fn[] parameter(1)\n"
            "  ROOT s = f8e4m3fn[] add(a, b)\n}\nENTRY e {\n  x = f8e4m3fn[4,40] parameter(0)\n"
            "  z = f8e4m3fn[] constant(0)\n  ROOT r = f8e4m3fn[4,20] reduce-window(x, z), "
            "window={size=1x7 stride=1x2 pad=0_0x3_3}, to_apply=add\n}\n")
    x = _inputs("f8e4m3fn", (4, 40), seed=2)
    (want,) = run_xla(text, x)
    (evaluated,) = evaluate(parse_hlo(text), x)
    (got,) = run_compiled(text, x)
    assert _same_bits(evaluated, want) and _same_bits(got, want)


def test_jax_fp8_sum_of_products_fuses_and_matches_xla():
    # JAX keeps an fp8 sum in fp8 (a bf16 one it lowers as an f32 reduce).
    f = jax.jit(lambda a, b: jnp.sum(a * b, axis=1))
    spec = jax.ShapeDtypeStruct((8, 70), jnp.float8_e4m3fn)
    text = f.lower(spec, spec).as_text(dialect="hlo")
    assert "f8e4m3fn[8]{0} reduce(" in text.replace("reduce_sum", "")
    a, b = _inputs("f8e4m3fn", (8, 70), seed=3), _inputs("f8e4m3fn", (8, 70), seed=4)
    (want,) = run_xla(text, a, b)
    (got,) = run_compiled(text, a, b)
    assert _same_bits(got, want)
    bf16 = jax.ShapeDtypeStruct((8, 70), jnp.bfloat16)
    assert "f32[8]{0} reduce(" in f.lower(bf16, bf16).as_text(dialect="hlo").replace("reduce_sum", "")
