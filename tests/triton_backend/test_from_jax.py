"""``triton_backend.from_jax``: a JAX function as a torch op, checked against JAX itself.

Forward values against ``jax.jit(fn)``, gradients (JAX's VJP lowered to HLO, and
``fusion.autodiff``'s) against ``jax.grad``; pytrees of arguments and results keep their
structure; torch, NumPy and JAX inputs; one op per signature, cached, a warning past the limit.
"""
from __future__ import annotations

import sys
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import triton_backend
from fusion.errors import BadArgumentError
from triton_backend.integrations import from_jax as from_jax_module
from triton_backend.integrations.from_jax import CustomGradientWarning, RetraceWarning, from_jax

ROWS, FEATURES, HIDDEN = 3, 5, 7


def block(params, x):
    """RMSNorm then a small MLP, with a residual; params is a dict (a pytree)."""
    normed = x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * params["g"]
    hidden = jnp.tanh(normed @ params["w1"] + params["b1"])
    return {"y": x + hidden @ params["w2"], "norm": normed}


def _params(seed=0):
    rng = np.random.default_rng(seed)
    return {"g": rng.uniform(0.5, 1.5, FEATURES).astype(np.float32),
            "w1": (0.4 * rng.standard_normal((FEATURES, HIDDEN))).astype(np.float32),
            "b1": (0.1 * rng.standard_normal(HIDDEN)).astype(np.float32),
            "w2": (0.4 * rng.standard_normal((HIDDEN, FEATURES))).astype(np.float32)}


def _x(seed=1, rows=ROWS):
    return np.random.default_rng(seed).standard_normal((rows, FEATURES)).astype(np.float32)


def _torch(tree, requires_grad=False):
    return jax.tree_util.tree_map(
        lambda a: torch.tensor(np.asarray(a)).requires_grad_(requires_grad), tree)


@pytest.fixture(scope="module")
def fns():
    example = (_torch(_params()), torch.from_numpy(_x()))
    return {grad: from_jax(block, *example, name=f"from_jax_block_{grad}", grad=grad)
            for grad in ("jax", "hlo")}


def test_exported_from_the_package():
    assert triton_backend.from_jax is from_jax


def test_forward_keeps_the_pytree_and_matches_jax(fns):
    params, x = _params(), _x()
    expected = jax.jit(block)(params, x)
    for fn in fns.values():
        out = fn(_torch(params), torch.from_numpy(x))
        assert isinstance(out, dict) and sorted(out) == ["norm", "y"]
        for key in out:
            assert isinstance(out[key], torch.Tensor)
            np.testing.assert_allclose(out[key].numpy(), expected[key], rtol=1e-5, atol=1e-5)


def test_gradients_from_jax_and_from_hlo_autodiff_match_jax_grad(fns):
    params, x = _params(), _x()
    weights = np.linspace(-1, 1, FEATURES, dtype=np.float32)

    def loss(p, x):
        out = block(p, x)
        return jnp.sum(out["y"] ** 2) + jnp.sum(out["norm"] * weights)

    expected_p, expected_x = jax.grad(loss, argnums=(0, 1))(params, x)
    for grad, fn in fns.items():
        p, xt = _torch(params, requires_grad=True), torch.from_numpy(x).requires_grad_()
        out = fn(p, xt)
        ((out["y"] ** 2).sum() + (out["norm"] * torch.from_numpy(weights)).sum()).backward()
        np.testing.assert_allclose(xt.grad.numpy(), expected_x, rtol=1e-4, atol=1e-5,
                                   err_msg=grad)
        for key in params:
            np.testing.assert_allclose(p[key].grad.numpy(), expected_p[key], rtol=1e-4,
                                       atol=1e-5, err_msg=f"{grad}: {key}")


def test_the_jax_backward_is_jaxs_own_vjp(fns):
    # grad="jax": the backward module comes from JAX (jit names), not from fusion.autodiff.
    assert fns["jax"].op.backward.plan.module.name.startswith("jit_")
    assert fns["hlo"].op.backward.plan.module.name.endswith("_vjp")


def test_numpy_jax_and_torch_inputs_give_the_same_results(fns):
    fn = fns["jax"]
    params, x = _params(), _x()
    read_only = x.copy()
    read_only.flags.writeable = False
    reference = fn(_torch(params), torch.from_numpy(x))["y"]
    for p, xs in ((params, read_only),
                  (jax.tree_util.tree_map(jnp.asarray, params), jnp.asarray(x)),
                  (params, x.T.copy().T)):   # column-major NumPy
        torch.testing.assert_close(fn(p, xs)["y"], reference)


def test_numpy_and_jax_arrays_are_not_copied():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert from_jax_module._as_tensor(x, "x").data_ptr() == x.ctypes.data
    j = jnp.arange(6, dtype=jnp.float32)
    assert from_jax_module._as_tensor(j, "j").data_ptr() == j.unsafe_buffer_pointer()


def test_each_signature_is_lowered_once_then_cached(fns, monkeypatch):
    fn = from_jax(lambda x: jnp.cos(x) * 2, torch.zeros(4), name="from_jax_cos")
    op = fn.op
    assert fn.op_for(torch.ones(4)) is op and fn.signatures == 1
    torch.testing.assert_close(fn(torch.zeros(6)), torch.full((6,), 2.0))
    assert fn.signatures == 2 and fn.op_for(torch.zeros(6)) is not op
    torch.testing.assert_close(fn(np.zeros(4, np.float64)), torch.full((4,), 2.0,
                                                                       dtype=torch.float64))
    assert fn.signatures == 3  # a new dtype is a new signature (lowered in x64 mode)
    monkeypatch.setattr(from_jax_module, "RETRACE_WARNING", 3)
    with pytest.warns(RetraceWarning, match=r"signature 4 \(float32\[7\]\)"):
        fn(torch.zeros(7))


def test_integer_inputs_and_outputs():
    def f(x, n):
        return jnp.sin(x) * n, n * 2

    fn = from_jax(f, torch.zeros(4), torch.zeros(4, dtype=torch.int32), name="from_jax_mixed")
    x = torch.linspace(-1, 1, 4, requires_grad=True)
    n = torch.tensor([1, 2, -3, 4], dtype=torch.int32)
    y, twice = fn(x, n)
    assert twice.dtype == torch.int32 and twice.tolist() == [2, 4, -6, 8]
    y.sum().backward()
    expected = jax.grad(lambda x: jnp.sum(f(x, n.numpy())[0]))(x.detach().numpy())
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-6)


def test_python_numbers_are_jax_default_scalars():
    fn = from_jax(lambda x, s: x * s, torch.ones(3), 2.0, name="from_jax_scale")
    torch.testing.assert_close(fn(torch.ones(3), 3.0), torch.full((3,), 3.0))


def test_gradcheck_f64():
    # (tl.dot has no f64: elementwise and a reduction)
    fn = from_jax(lambda x, w: jnp.tanh(x * w).sum(axis=0), torch.zeros(2, 3, dtype=torch.float64),
                  torch.zeros(3, dtype=torch.float64), name="from_jax_tanh_f64")
    x = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    w = torch.randn(3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(fn, (x, w))


@pytest.mark.parametrize("grad", ["jax", "hlo"])
def test_complex_inputs_and_outputs_get_torchs_gradients(grad):
    """Both backwards (JAX's VJP and fusion.autodiff's) take and give complex cotangents in
    JAX's convention; the op converts to torch's, the conjugate: a complex input's gradient
    is conj(jax.grad), and a complex output's gradient arrives conjugated."""
    def fn(z, x):
        return jnp.exp(z * x) * jnp.conj(z), jnp.abs(z) * x

    def loss(z, x, c):  # real: torch's backward starts from it as JAX's grad does
        out, mag = fn(z, x)
        return jnp.sum(jnp.real(out * c)) + jnp.sum(mag)

    rng = np.random.default_rng(8)
    z = (rng.standard_normal(3) + 1j * rng.standard_normal(3)).astype(np.complex64)
    x = rng.standard_normal(3).astype(np.float32)
    c = np.complex64([1 - 2j, 0.5j, 2])
    op = from_jax(fn, torch.from_numpy(z), torch.from_numpy(x), name=f"from_jax_complex_{grad}",
                  grad=grad)
    tz, tx = torch.from_numpy(z).requires_grad_(True), torch.from_numpy(x).requires_grad_(True)
    out, mag = op(tz, tx)
    (torch.sum(torch.real(out * torch.from_numpy(c))) + torch.sum(mag)).backward()
    want_z, want_x = jax.grad(loss, argnums=(0, 1))(z, x, c)
    np.testing.assert_allclose(tz.grad.numpy(), np.conj(want_z), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(tx.grad.numpy(), want_x, rtol=1e-5, atol=1e-5)


def test_a_custom_vjp_rule_warns_that_hlo_gradients_ignore_it():
    @jax.custom_vjp
    def clipped(x):
        return x

    clipped.defvjp(lambda x: (x, None), lambda _, g: (jnp.clip(g, -0.1, 0.1),))
    x = torch.ones(3)
    with pytest.warns(CustomGradientWarning, match="clipped"):
        from_jax(lambda v: jnp.sum(clipped(v) * 3.0), x, name="from_jax_custom_vjp_hlo",
                 grad="hlo")
    with warnings.catch_warnings():
        warnings.simplefilter("error", CustomGradientWarning)
        fn = from_jax(lambda v: jnp.sum(clipped(v) * 3.0), x, name="from_jax_custom_vjp_jax")
        from_jax(lambda v: jnp.sum(jax.nn.relu(v)), x, name="from_jax_relu_hlo", grad="hlo")
    xs = x.clone().requires_grad_(True)
    fn(xs).backward()   # JAX's VJP: the rule's clipped gradient
    np.testing.assert_allclose(xs.grad.numpy(), np.full(3, 0.1, np.float32))


@pytest.mark.slow
def test_trains_under_torch_compile(fns, inductor_without_vec_isa_probe):
    fn = fns["jax"]

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.params = torch.nn.ParameterDict(
                {k: torch.nn.Parameter(torch.from_numpy(v)) for k, v in _params().items()})

        def forward(self, x):
            return fn({key: self.params[key] for key in self.params}, x)["y"]

    model = Model()
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True)
    x = torch.from_numpy(_x())
    loss = compiled(x).pow(2).mean()
    loss.backward()
    expected = jax.grad(lambda p: jnp.mean(block(p, _x())["y"] ** 2))(_params())
    for key, param in model.params.items():
        np.testing.assert_allclose(param.grad.numpy(), expected[key], rtol=1e-4, atol=1e-5)


def test_bad_arguments_are_clear_errors(monkeypatch):
    with pytest.raises(BadArgumentError, match=r"grad='numeric' is not one of"):
        from_jax(jnp.sin, torch.zeros(3), grad="numeric")
    with pytest.raises(BadArgumentError, match=r"argument leaf args\[0\] is a str"):
        from_jax(jnp.sin, "x")
    monkeypatch.setitem(sys.modules, "jax", None)  # as if JAX were not installed
    with pytest.raises(BadArgumentError, match=r"pip install 'hlo-triton-fusion\[jax\]'"):
        from_jax(jnp.sin, torch.zeros(3))
