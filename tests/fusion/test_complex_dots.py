"""Complex dots as real ones (``fusion.transforms.complex_dots``): the rewrite keeps the value
(the evaluator's complex product, NumPy's), and a compiled module matches XLA (JAX)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import fusion
from fusion.text.parser import parse_hlo
from fusion.transforms.complex_dots import expand_complex_dots
from triton_backend import compile_hlo

TYPES = {"c64": np.complex64, "c128": np.complex128, "f32": np.float32, "f64": np.float64}


def module(lhs: str, rhs: str, out: str):
    return parse_hlo(f"""HloModule m
ENTRY e {{
  a = {lhs}[2,5,3] parameter(0)
  b = {rhs}[2,3,4] parameter(1)
  ROOT d = {out}[2,5,4] dot(a, b), lhs_batch_dims={{0}}, lhs_contracting_dims={{2}}, rhs_batch_dims={{0}}, rhs_contracting_dims={{1}}, operand_precision={{highest,highest}}
}}""")


def _value(shape, dtype, rng):
    x = rng.standard_normal(shape)
    if np.issubdtype(dtype, np.complexfloating):
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


@pytest.mark.parametrize("lhs,rhs,out,dots", [("c64", "c64", "c64", 4), ("c128", "c128", "c128", 4),
                                              ("c64", "f32", "c64", 2), ("f32", "c64", "c64", 2)])
def test_the_rewrite_keeps_the_complex_product(lhs, rhs, out, dots):
    m = module(lhs, rhs, out)
    rewritten = expand_complex_dots(m)
    real_dots = [i for i in rewritten.entry if i.opcode == "dot"]
    assert len(real_dots) == dots
    assert all(i.shape.dtype == {"c64": "f32", "c128": "f64"}[out] for i in real_dots)
    # each keeps the dimension numbers and precision; the result keeps the dot's name
    assert all(i.attributes == m.entry.root.attributes for i in real_dots)
    assert rewritten.entry.root.name == "d" and rewritten.entry.root.opcode == "complex"
    rng = np.random.default_rng(0)
    a, b = _value((2, 5, 3), TYPES[lhs], rng), _value((2, 3, 4), TYPES[rhs], rng)
    want = np.matmul(a.astype(np.complex128), b.astype(np.complex128))
    tol = 1e-5 if out == "c64" else 1e-12
    for mod in (m, rewritten):
        np.testing.assert_allclose(np.asarray(fusion.evaluate(mod, a, b)[0]), want, rtol=tol,
                                   atol=tol)
    assert expand_complex_dots(rewritten) is rewritten


def test_jax_s_complex_einsum_compiles_and_matches_xla():
    def f(x, y):
        return jnp.einsum("bij,bjk->bik", x, y) * (1 - 2j)
    sx = jax.ShapeDtypeStruct((2, 12, 20), jnp.complex64)
    sy = jax.ShapeDtypeStruct((2, 20, 16), jnp.complex64)
    text = jax.jit(f).lower(sx, sy).as_text(dialect="hlo")
    rng = np.random.default_rng(1)
    x, y = _value((2, 12, 20), np.complex64, rng), _value((2, 20, 16), np.complex64, rng)
    got = compile_hlo(text, cache=False)(torch.from_numpy(x), torch.from_numpy(y))[0].numpy()
    want = np.asarray(jax.jit(f)(x, y))
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
