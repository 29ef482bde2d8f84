"""XLA as the oracle: HLO that JAX prints (before and after optimization) must verify."""
from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from fusion.text.parser import parse_hlo  # noqa: E402
from fusion.shapes.verifier import verify_module  # noqa: E402

X = np.linspace(-1, 1, 24, dtype=np.float32).reshape(4, 6)
I32 = X.astype(np.int32)


def _max_pool_grad(a):
    return jax.grad(lambda v: lax.reduce_window(v, -np.inf, lax.max, (2, 2), (2, 2), "VALID").sum())(a)


CASES = {
    "pad_negative_interior": (lambda a: lax.pad(a, np.float32(0), [(-1, 2, 1), (3, -2, 0)]), (X,)),
    "reduce_window_dilated": (lambda a: lax.reduce_window(
        a, np.float32(0), lax.add, (2, 3), (1, 2), [(1, 0), (2, 1)], base_dilation=(2, 1),
        window_dilation=(1, 2)), (X,)),
    "select_and_scatter": (_max_pool_grad, (X,)),
    "sort_two_operands": (lambda a, b: lax.sort((a, b), dimension=0, num_keys=1), (X, I32)),
    "while_tuple": (lambda a: lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * 2),
                                             (0, a)), (X,)),
    "switch_three_branches": (lambda i, a: lax.switch(i, [jnp.sin, jnp.cos, jnp.tan], a),
                              (np.int32(1), X)),
    "complex_parts": (lambda a: jnp.real(lax.complex(a, a) * 2) + jnp.imag(lax.complex(a, a)),
                      (X,)),
    "reduce_precision": (lambda a: lax.reduce_precision(a, 5, 10), (X,)),
    "clz_popcnt": (lambda a: lax.clz(a) + lax.population_count(a), (I32,)),
    "is_finite_cbrt_tan": (lambda a: jnp.isfinite(a) & (lax.cbrt(a) > lax.tan(a)), (X,)),
    "gather_slices": (lambda a, i: a[i[:, 0], 1:4], (X, np.zeros((3, 2), np.int32))),
    "scatter_max": (lambda a, i, u: a.at[i].max(u),
                    (X, np.zeros((3,), np.int32), np.ones((3, 6), np.float32))),
    "bitcast_convert_narrow": (lambda a: lax.bitcast_convert_type(a, jnp.uint8), (X,)),
    "bitcast_convert_wide": (lambda a: lax.bitcast_convert_type(a, jnp.float32),
                             (np.ones((3, 4), np.uint8),)),
    "reverse_dot": (lambda a: lax.rev(a, (0, 1)).T @ a, (X,)),
    "argmax_variadic_reduce": (lambda a: jnp.argmax(a, axis=1), (X,)),
    "float_unaries": (lambda a: lax.round(a) + lax.round(a, lax.RoundingMethod.TO_NEAREST_EVEN)
                      + lax.expm1(a) + lax.log1p(a) + lax.atan2(a, a) + a ** a + lax.erf(a)
                      + jax.nn.sigmoid(a) + lax.sign(a) + jnp.floor(a) + jnp.ceil(a)
                      + lax.rem(a, a), (X,)),
    "u8_bit_ops": (lambda a: (a << 2) >> 1 | ~a ^ a & a, (X.astype(np.uint8),)),
    "clamp": (lambda a: lax.clamp(np.float32(0), a, np.float32(1)) + lax.clamp(a, a, a), (X,)),
    "dynamic_update_slice": (lambda a, b: lax.dynamic_update_slice(a, b, (1, 2)),
                             (X, np.ones((2, 2), np.float32))),
    "bf16_batched_dot_f32": (lambda a, b: jnp.einsum("bij,bjk->bik", a, b,
                                                     preferred_element_type=jnp.float32),
                             (jnp.ones((2, 3, 4), jnp.bfloat16), jnp.ones((2, 4, 5), jnp.bfloat16))),
    "cumulative": (lambda a: jnp.cumsum(a, axis=1) + lax.cummax(a, axis=0), (X,)),
    "f8_round_trip": (lambda a: a.astype(jnp.bfloat16).astype(jnp.float8_e4m3fn)
                      .astype(jnp.float32), (X,)),
    "s64_x64": (lambda a: a.astype(jnp.int64) * 3 // 2, (I32,)),
}


@pytest.fixture(scope="module", autouse=True)
def _x64():
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", False)


@pytest.mark.parametrize("name", sorted(CASES))
def test_jax_hlo_verifies(name):
    f, args = CASES[name]
    lowered = jax.jit(f).lower(*args)
    verify_module(parse_hlo(lowered.as_text(dialect="hlo")))
    verify_module(parse_hlo(lowered.compile().as_text()))
