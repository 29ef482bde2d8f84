"""VJP rules against ``jax.vjp`` of the same JAX functions, lowered by JAX to HLO in f64 on
non-power-of-two shapes: the backward module in the reference evaluator against JAX.  Complex
intermediates and outputs included: their cotangents must follow JAX's convention."""
from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy
lax = jax.lax

from fusion.autodiff import vjp  # noqa: E402
from fusion.evaluator import evaluate  # noqa: E402
from fusion.text.parser import parse_hlo  # noqa: E402

RNG = np.random.default_rng(3)


def normal(*shape):
    return RNG.standard_normal(shape)


def positive(*shape):
    return np.abs(RNG.standard_normal(shape)) + 0.5


def _max_pool(x):
    return lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 2), (1, 2, 1), ((0, 0), (1, 1), (0, 1)))


def _avg_pool(x):
    return lax.reduce_window(x, 0.0, lax.add, (2, 3), (1, 2), "SAME")


def _conv(x, w):
    return lax.conv_general_dilated(x, w, (2, 1), ((1, 2), (0, 1)), rhs_dilation=(1, 2),
                                    dimension_numbers=("NHWC", "HWIO", "NHWC"))


def _conv_grouped(x, w):
    return lax.conv_general_dilated(x, w, (1, 1), ((1, 1), (0, 2)), lhs_dilation=(2, 1),
                                    dimension_numbers=("NCHW", "OIHW", "NCHW"),
                                    feature_group_count=2)


def _loop(x):
    return lax.fori_loop(0, 4, lambda i, v: jnp.sin(v) * (i + 1.5), x)


def _scan(x):
    return lax.scan(lambda c, v: (c * v + 1.0, c * v), jnp.float64(1.0), x)


def _spd(*batch, n=4):
    a = normal(*batch, n, n)
    return a @ np.swapaxes(a, -1, -2) + n * np.eye(n)


def _solves(a, b):
    x = lax.linalg.triangular_solve(a, b, left_side=True, lower=True)
    y = lax.linalg.triangular_solve(a, x.T, left_side=False, lower=False, transpose_a=True,
                                    unit_diagonal=True)
    return lax.linalg.triangular_solve(a, y.T, left_side=True, lower=False, transpose_a=True)


def _cholesky_upper(a):
    # LAPACK reads one triangle; JAX's rule assumes a symmetric perturbation.  Both give the
    # same gradient through a symmetric input, which is how a program reaches a Cholesky.
    return jax.scipy.linalg.cholesky((a + a.T) / 2, lower=False)


def _eigh(a):
    # Eigenvectors only up to sign: the outputs are sign-invariant functions of them.
    w, v = jnp.linalg.eigh(a)
    return w, (v * jnp.arange(1.0, 5.0)) @ v.T, v * v


def _svd(a):
    # Singular vectors only up to a common sign per pair: sign-invariant outputs.
    u, s, vt = jnp.linalg.svd(a, full_matrices=False)
    weights = jnp.arange(1.0, s.shape[-1] + 1.0)
    return s, (u * weights) @ vt, u * u, vt * vt


def _long_scan(w, xs, h):
    # 40 trips: past flatten's unrolling, differentiated as a loop (rules_control.vjp_while).
    def cell(carry, x):
        h, total = carry
        h = jnp.tanh(h @ w + x)
        return (h, total + jnp.sum(h * h)), h * x
    return lax.scan(cell, (h, 0.0), xs)


def _switch(i, x):
    return lax.switch(i, [jnp.sin, jnp.cos, lambda v: v * v], x)


# name -> (function, example args); integer args are held fixed.
FUNCTIONS = {
    "abs": (jnp.abs, (normal(3, 5),)),
    "argmax_value": (lambda x: jnp.take_along_axis(x, jnp.argmax(x, 1)[:, None], 1),
                     (normal(3, 5),)),
    "atan2": (jnp.arctan2, (normal(7), normal(7))),
    "avg_pool": (_avg_pool, (normal(5, 7),)),
    "batched_matmul": (lambda a, b: jnp.einsum("bij,bjk->bik", a, b),
                       (normal(3, 2, 5), normal(3, 5, 7))),
    "broadcast": (lambda x: jnp.broadcast_to(x[:, None, :], (3, 4, 5)) * 2.0, (normal(3, 5),)),
    "cbrt": (jnp.cbrt, (positive(7),)),
    "cholesky": (jnp.linalg.cholesky, (_spd(2),)),
    "cholesky_upper": (_cholesky_upper, (_spd(n=3) + 0.3 * normal(3, 3),)),
    "clip": (lambda x: jnp.clip(x, -0.5, 0.7), (normal(3, 5),)),
    "complex_values": (lambda x, y: (jnp.abs(lax.complex(x, y) ** 3) + jnp.angle(lax.complex(y, x)),
                                     jnp.tanh(lax.complex(x, y)) * (2 - 1j)
                                     / jnp.sqrt(lax.complex(y, jnp.abs(x) + 0.5)),
                                     jnp.sum(lax.complex(x, y)[:, None] * lax.complex(y, x))),
                       (normal(7), normal(7))),
    "concatenate": (lambda a, b: jnp.concatenate([a, b, a], 1), (normal(3, 2), normal(3, 5))),
    "cond": (lambda p, x: lax.cond(p > 0, jnp.sin, jnp.cos, x), (np.int32(1), normal(5))),
    "conv": (_conv, (normal(2, 7, 5, 3), normal(3, 2, 3, 4))),
    "conv_grouped_dilated": (_conv_grouped, (normal(2, 4, 5, 3), normal(6, 2, 3, 2))),
    "cumprod_with_zeros": (lambda x: jnp.cumprod(x, axis=1),
                           (np.where(RNG.random((3, 6)) < 0.25, 0.0, normal(3, 6)),)),
    "cumsum": (lambda x: jnp.cumsum(x, axis=1), (normal(3, 6),)),
    "det_slogdet_inverse_solve": (lambda a, b: (jnp.linalg.det(a), jnp.linalg.slogdet(a)[1],
                                                jnp.linalg.inv(a), jnp.linalg.solve(a, b)),
                                  (_spd(2), normal(2, 4, 3))),
    "divide": (lambda a, b: a / b, (normal(7), positive(7))),
    "dynamic_slice": (lambda x, i: lax.dynamic_slice(x, (i, np.int32(1)), (2, 3)),
                      (normal(5, 6), np.int32(2))),
    "dynamic_update_slice": (lambda x, u, i: lax.dynamic_update_slice(x, u, (i, np.int32(0))),
                             (normal(5, 3), normal(2, 3), np.int32(1))),
    "eigh": (_eigh, (_spd(n=4) + 0.3 * normal(4, 4),)),
    "einsum_contract_two": (lambda a, b: jnp.einsum("ijk,kjl->il", a, b),
                            (normal(3, 5, 2), normal(2, 5, 7))),
    "erf": (jax.scipy.special.erf, (normal(7),)),
    "exp_log": (lambda x: jnp.log(jnp.exp(x) + 1.0), (normal(7),)),
    "expm1_log1p": (lambda x: jnp.expm1(x) * jnp.log1p(x), (positive(7),)),
    "fft_rfft_irfft": (lambda x: jnp.fft.irfft(jnp.fft.rfft2(x) ** 2, n=5),
                       (normal(3, 5),)),
    "fft_complex": (lambda x, y: jnp.fft.ifft(jnp.fft.fft2(lax.complex(x, y)) * x),
                    (normal(4, 3), normal(4, 3))),
    "gather": (lambda x, i: x[i], (normal(6, 3), np.array([4, 0, 5, 4], np.int32))),
    "gather_batched": (jax.vmap(lambda x, i: x[i]),
                       (normal(3, 6, 2), np.array([[4, 0], [5, 5], [1, 2]], np.int32))),
    "gelu": (lambda x: jax.nn.gelu(x, approximate=False), (normal(3, 5),)),
    "layernorm": (lambda x, g: (x - x.mean(-1, keepdims=True))
                  * lax.rsqrt(x.var(-1, keepdims=True) + 1e-5) * g, (normal(3, 5), normal(5))),
    "logsumexp": (lambda x: jax.nn.logsumexp(x, axis=1), (normal(3, 5),)),
    "loop": (_loop, (normal(5),)),
    "matmul": (lambda a, b: a @ b, (normal(3, 5), normal(5, 7))),
    "max_min": (lambda a, b: jnp.maximum(a, b) - jnp.minimum(a, 2 * b), (normal(7), normal(7))),
    "max_pool": (_max_pool, (normal(2, 5, 7),)),
    "pad": (lambda x: lax.pad(x, 0.0, ((1, 2, 0), (-1, 1, 2))), (normal(3, 4),)),
    "power": (lambda a, b: a ** b, (positive(7), normal(7))),
    "prod": (lambda x: jnp.prod(x, axis=0), (normal(3, 5),)),
    "reduce_max_min": (lambda x: jnp.max(x, 1) + jnp.min(x, 0).sum(), (normal(3, 5),)),
    "qr_tall_batched": (jnp.linalg.qr, (normal(2, 5, 3),)),
    "relu": (jax.nn.relu, (normal(3, 5),)),
    "remainder": (lambda a, b: lax.rem(a, b), (normal(7) * 4, positive(7))),
    "reshape_transpose": (lambda x: jnp.transpose(x.reshape(5, 2, 3), (2, 0, 1)), (normal(3, 10),)),
    "reverse": (lambda x: jnp.flip(x, (0, 1)), (normal(3, 5),)),
    "rsqrt_sqrt": (lambda x: lax.rsqrt(x) + jnp.sqrt(x), (positive(7),)),
    "long_scan": (_long_scan, (normal(3, 3) * 0.5, normal(40, 3), normal(3))),
    "scan": (_scan, (normal(5),)),
    "scatter_add": (lambda x, i, u: x.at[i].add(u),
                    (normal(6, 3), np.array([1, 1, 4], np.int32), normal(3, 3))),
    "scatter_add_batched": (jax.vmap(lambda x, i, u: x.at[i].add(u)),
                            (normal(2, 6, 3), np.array([[1, 1], [0, 4]], np.int32),
                             normal(2, 2, 3))),
    "scatter_max_ties": (lambda x, u: x.at[np.array([1, 1, 0, 3, 3])].max(u),
                         (np.array([1.0, 5.0, 2.0, -1.0]),
                          np.array([5.0, 3.0, 1.0, 0.5, 0.5]))),
    "scatter_min_2d": (lambda x, i, u: x.at[i, 1:].min(u),
                       (normal(5, 3), np.array([0, 4, 0], np.int32), normal(3, 2))),
    "scatter_set": (lambda x, i, u: x.at[i].set(u),
                    (normal(6, 3), np.array([1, 5, 4], np.int32), normal(3, 3))),
    "sigmoid_tanh": (lambda x: jax.nn.sigmoid(x) * jnp.tanh(x), (normal(7),)),
    "sign": (lambda x: jnp.sign(x) * x, (normal(7),)),
    "sin_cos_tan": (lambda x: jnp.sin(x) * jnp.cos(x) + jnp.tan(x * 0.5), (normal(7),)),
    "slices": (lambda x: x[1:3, ::2] + x[0:2, 1:6:2], (normal(4, 6),)),
    "softmax": (lambda x: jax.nn.softmax(x, axis=-1), (normal(3, 5),)),
    "sort": (lambda x: jnp.sort(x, axis=-1), (normal(3, 5),)),
    "sort_key_value": (lambda k, v: lax.sort((k, v), num_keys=1)[1] * 2.0, (normal(7), normal(7))),
    "svd_tall_batched": (_svd, (normal(2, 5, 3),)),
    "svd_values_only": (lambda a: jnp.linalg.svd(a, compute_uv=False), (normal(2, 3, 5),)),
    "switch": (_switch, (np.int32(2), normal(5))),
    "tridiagonal_solve": (lambda dl, d, du, b: lax.linalg.tridiagonal_solve(dl, d, du, b) ** 2,
                          (np.concatenate([[0.0], normal(5)]), normal(6) + 4.0,
                           np.concatenate([normal(5), [0.0]]), normal(6, 3))),
    "triangular_solves": (_solves, (normal(3, 3) + 3 * np.eye(3), normal(3, 2))),
    "where": (lambda x: jnp.where(x > 0, jnp.log(jnp.abs(x) + 1.0), x * x), (normal(3, 5),)),
}


def _cotangent(leaf):
    """A random cotangent of an output; a complex one in JAX's (unconjugated) convention."""
    ct = RNG.standard_normal(leaf.shape)
    return ct + 1j * RNG.standard_normal(leaf.shape) if jnp.iscomplexobj(leaf) else ct


def _is_float(a) -> bool:
    return np.asarray(a).dtype.kind == "f"


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_vjp_matches_jax(name: str) -> None:
    fn, args = FUNCTIONS[name]
    positions = [k for k, a in enumerate(args) if _is_float(a)]

    def of_floats(*floats):
        full = list(args)
        for k, v in zip(positions, floats):
            full[k] = v
        return fn(*full)

    def gradients(floats, cts):
        out, pullback = jax.vjp(of_floats, *floats)
        return pullback(jax.tree.unflatten(jax.tree.structure(out), cts))

    with jax.enable_x64(True):
        lowered = jax.jit(fn).lower(*args)
        text = lowered.as_text(dialect="hlo")
        cts = [_cotangent(leaf) for leaf in jax.tree.leaves(lowered.out_info)]
        # jax.vjp under jax.jit: one XLA compile, not one per primitive.
        want = [np.asarray(g) for g in jax.jit(gradients)([args[k] for k in positions], cts)]
    module = parse_hlo(text)
    got = evaluate(vjp(module, positions), *[np.asarray(a) for a in args], *cts)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-10)
