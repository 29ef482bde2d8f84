"""Training through a ``torch_op``: its autograd formula runs the compiled VJP module.

Truth is PyTorch itself: the same model written with torch ops (training under
``torch.compile``, gradients in eager mode and under ``torch.func.grad``), finite differences
in f64 (``gradcheck``), and ``torch.library.opcheck``'s own autograd checks.  Shapes are small
and not powers of two: every kernel runs in the Triton interpreter.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from fusion.errors import BadArgumentError, EvaluationError, UnsupportedOpError
from fusion.text.parser import parse_hlo
from triton_backend.integrations.backward_plan import NoBackward, backward_plan
from triton_backend.integrations.torch_op import torch_op

ROWS, FEATURES, HIDDEN = 6, 12, 20


def rmsnorm_hlo(dtype: str, rows: int, features: int) -> str:
    return f"""HloModule rmsnorm_{dtype}_{rows}x{features}
add {{
  a = {dtype}[] parameter(0)
  b = {dtype}[] parameter(1)
  ROOT s = {dtype}[] add(a, b)
}}
ENTRY main {{
  x = {dtype}[{rows},{features}] parameter(0)
  g = {dtype}[{features}] parameter(1)
  sq = {dtype}[{rows},{features}] multiply(x, x)
  zero = {dtype}[] constant(0)
  sum = {dtype}[{rows}] reduce(sq, zero), dimensions={{1}}, to_apply=add
  n = {dtype}[] constant({features})
  nb = {dtype}[{rows}] broadcast(n), dimensions={{}}
  mean = {dtype}[{rows}] divide(sum, nb)
  eps = {dtype}[] constant(1e-06)
  eb = {dtype}[{rows}] broadcast(eps), dimensions={{}}
  me = {dtype}[{rows}] add(mean, eb)
  r = {dtype}[{rows}] rsqrt(me)
  rb = {dtype}[{rows},{features}] broadcast(r), dimensions={{0}}
  gb = {dtype}[{rows},{features}] broadcast(g), dimensions={{1}}
  xr = {dtype}[{rows},{features}] multiply(x, rb)
  ROOT y = {dtype}[{rows},{features}] multiply(xr, gb)
}}"""


MLP = f"""HloModule mlp_block
ENTRY main {{
  h = f32[{ROWS},{FEATURES}] parameter(0)
  w1 = f32[{FEATURES},{HIDDEN}] parameter(1)
  b1 = f32[{HIDDEN}] parameter(2)
  w2 = f32[{HIDDEN},{FEATURES}] parameter(3)
  a = f32[{ROWS},{HIDDEN}] dot(h, w1), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  bb = f32[{ROWS},{HIDDEN}] broadcast(b1), dimensions={{1}}
  z = f32[{ROWS},{HIDDEN}] add(a, bb)
  act = f32[{ROWS},{HIDDEN}] tanh(z)
  ROOT o = f32[{ROWS},{FEATURES}] dot(act, w2), lhs_contracting_dims={{1}},
      rhs_contracting_dims={{0}}
}}"""

# Two outputs, an integer input (no gradient) and an input only the forward reads.
MIXED_F64 = """HloModule mixed_f64
ENTRY main {
  x = f64[2,3] parameter(0)
  n = s32[3] parameter(1)
  w = f64[3] parameter(2)
  c = f64[3] convert(n)
  cb = f64[2,3] broadcast(c), dimensions={1}
  wb = f64[2,3] broadcast(w), dimensions={1}
  s = f64[2,3] sine(x)
  p = f64[2,3] multiply(s, wb)
  q = f64[2,3] multiply(x, cb)
  ROOT t = (f64[2,3], f64[2,3]) tuple(p, q)
}"""

SCALE = """HloModule scale_by_three
ENTRY main {
  x = f32[5] parameter(0)
  three = f32[] constant(3)
  tb = f32[5] broadcast(three), dimensions={}
  ROOT y = f32[5] multiply(x, tb)
}"""

SINE_TIMES = """HloModule sine_times
ENTRY main {
  x = f32[5] parameter(0)
  w = f32[5] parameter(1)
  s = f32[5] sine(x)
  ROOT y = f32[5] multiply(s, w)
}"""

# d/dx = ct * cos(x) * w, d/dw = ct * sin(x), written by hand.
SINE_TIMES_BACKWARD = """HloModule sine_times_backward
ENTRY main {
  x = f32[5] parameter(0)
  w = f32[5] parameter(1)
  ct = f32[5] parameter(2)
  c = f32[5] cosine(x)
  cw = f32[5] multiply(c, w)
  dx = f32[5] multiply(ct, cw)
  s = f32[5] sine(x)
  dw = f32[5] multiply(ct, s)
  ROOT grads = (f32[5], f32[5]) tuple(dx, dw)
}"""


@pytest.fixture(scope="module")
def rmsnorm():
    return torch_op(rmsnorm_hlo("f32", ROWS, FEATURES), name="autograd_rmsnorm")


@pytest.fixture(scope="module")
def mlp():
    return torch_op(MLP, name="autograd_mlp")


@pytest.fixture(scope="module")
def mixed():
    return torch_op(MIXED_F64, name="autograd_mixed_f64")


def torch_rmsnorm(x, g):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * g


def torch_mlp(h, w1, b1, w2):
    return torch.tanh(h @ w1 + b1) @ w2


class Block(torch.nn.Module):
    """x + mlp(rmsnorm(x)), with trainable weights; the two ops are HLO ops or torch code."""

    def __init__(self, rmsnorm, mlp) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        self.rmsnorm, self.mlp = rmsnorm, mlp
        self.g = torch.nn.Parameter(torch.linspace(0.5, 1.5, FEATURES))
        self.w1 = torch.nn.Parameter(0.3 * torch.randn(FEATURES, HIDDEN, generator=gen))
        self.b1 = torch.nn.Parameter(0.1 * torch.randn(HIDDEN, generator=gen))
        self.w2 = torch.nn.Parameter(0.3 * torch.randn(HIDDEN, FEATURES, generator=gen))

    def forward(self, x):
        return x + self.mlp(self.rmsnorm(x, self.g), self.w1, self.b1, self.w2)


def _train(model, steps, xs, targets):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for step in range(steps):
        optimizer.zero_grad()
        loss = (model(xs[step % len(xs)]) - targets[step % len(xs)]).pow(2).mean()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


@pytest.mark.slow
def test_training_under_torch_compile_matches_plain_pytorch(rmsnorm, mlp,
                                                          inductor_without_vec_isa_probe):
    gen = torch.Generator().manual_seed(1)
    xs = [torch.randn(ROWS, FEATURES, generator=gen) for _ in range(3)]
    targets = [torch.randn(ROWS, FEATURES, generator=gen) for _ in range(3)]
    ours = Block(rmsnorm, mlp)
    plain = Block(torch_rmsnorm, torch_mlp)
    torch._dynamo.reset()
    compiled = torch.compile(ours, fullgraph=True)   # default backend: Inductor
    # 10 steps: each batch three times or more while the weights move (the loss falls by a
    # third); every step after the first runs the same compiled graphs and our kernels in the
    # interpreter (~0.15 s a step), so more steps would repeat what these check.
    ours_losses = _train(compiled, 10, xs, targets)
    plain_losses = _train(plain, 10, xs, targets)
    np.testing.assert_allclose(ours_losses, plain_losses, rtol=2e-4, atol=1e-6)
    assert plain_losses[-1] < 0.8 * plain_losses[0]  # it did train
    for (name, p), q in zip(ours.named_parameters(), plain.parameters()):
        torch.testing.assert_close(p, q, rtol=2e-4, atol=2e-5, msg=name)


def test_eager_gradients_match_pytorch(rmsnorm, mlp):
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(ROWS, FEATURES, generator=gen)
    weights = [torch.randn(FEATURES, HIDDEN, generator=gen), torch.randn(HIDDEN, generator=gen),
               torch.randn(HIDDEN, FEATURES, generator=gen)]
    ct = torch.randn(ROWS, FEATURES, generator=gen)
    for op, reference, args in ((rmsnorm, torch_rmsnorm, [x, torch.randn(FEATURES)]),
                                (mlp, torch_mlp, [x, *weights])):
        ours = [a.clone().requires_grad_() for a in args]
        theirs = [a.clone().requires_grad_() for a in args]
        torch.autograd.backward(op(*ours), ct)
        torch.autograd.backward(reference(*theirs), ct)
        for a, b in zip(ours, theirs):
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5)


def test_torch_func_grad(rmsnorm):
    x, g = torch.randn(ROWS, FEATURES), torch.randn(FEATURES)
    weights = torch.arange(FEATURES, dtype=torch.float32)
    ours = torch.func.grad(lambda a, b: (rmsnorm(a, b) * weights).sum(), argnums=(0, 1))(x, g)
    theirs = torch.func.grad(lambda a, b: (torch_rmsnorm(a, b) * weights).sum(),
                             argnums=(0, 1))(x, g)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_gradcheck_f64():
    op = torch_op(rmsnorm_hlo("f64", 3, 5), name="autograd_rmsnorm_f64")
    x = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    g = torch.randn(5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(op, (x, g))


def test_gradcheck_complex_inputs_outputs_and_intermediates():
    """A complex output's cotangent arrives, and a complex input's gradient leaves, in torch's
    convention, the conjugate of the backward module's (JAX's); gradcheck's finite
    differences see both parts of each."""
    op = torch_op("""HloModule complex_out
ENTRY e {
  x = f64[2] parameter(0)
  y = f64[2] parameter(1)
  w = c128[2] parameter(2)
  z = c128[2] complex(x, y)
  m = c128[2] multiply(z, w)
  s = c128[2] sine(m)
  f = c128[2] fft(s), fft_type=FFT, fft_length={2}
  a = f64[2] abs(z)
  ROOT t = (c128[2], f64[2]) tuple(f, a)
}""", name="autograd_complex_output")
    x = torch.randn(2, dtype=torch.float64, requires_grad=True)
    y = torch.randn(2, dtype=torch.float64, requires_grad=True)
    w = torch.randn(2, dtype=torch.complex128, requires_grad=True)
    assert torch.autograd.gradcheck(op, (x, y, w))


def test_gradcheck_two_outputs_integer_input(mixed):
    x = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    n = torch.tensor([1, -2, 3], dtype=torch.int32)
    w = torch.randn(3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(mixed, (x, n, w))
    p, q = mixed(x, n, w)
    (p.sum() + q.sum()).backward()
    torch.testing.assert_close(x.grad, torch.cos(x.detach()) * w.detach() + n.double())
    torch.testing.assert_close(w.grad, torch.sin(x.detach()).sum(0))


def test_opcheck_with_autograd(rmsnorm, mlp, mixed):
    def grads(*tensors):
        return tuple(t.clone().requires_grad_(t.is_floating_point()) for t in tensors)

    torch.library.opcheck(rmsnorm.op, grads(torch.randn(ROWS, FEATURES), torch.randn(FEATURES)))
    torch.library.opcheck(mlp.op, grads(torch.randn(ROWS, FEATURES),
                                        torch.randn(FEATURES, HIDDEN), torch.randn(HIDDEN),
                                        torch.randn(HIDDEN, FEATURES)))
    torch.library.opcheck(mixed.op, grads(torch.randn(2, 3, dtype=torch.float64),
                                          torch.tensor([1, 2, 3], dtype=torch.int32),
                                          torch.randn(3, dtype=torch.float64)))
    # The backward op too (its inputs: the saved x and g, then the cotangent).
    torch.library.opcheck(rmsnorm.backward.op, (torch.randn(ROWS, FEATURES),
                                                torch.randn(FEATURES),
                                                torch.randn(ROWS, FEATURES)))


def test_saves_only_the_inputs_the_backward_reads(mixed):
    scale = torch_op(SCALE, name="autograd_scale")
    assert scale.backward.plan.saved == ()  # linear: the backward reads only the cotangent
    x = torch.randn(5, requires_grad=True)
    y = scale(x)
    assert len(y.grad_fn.saved_tensors) == 0
    y.backward(torch.ones(5))
    torch.testing.assert_close(x.grad, torch.full((5,), 3.0))
    # mixed: d/dx reads x, n (through c) and w; d/dw reads x; both outputs' cotangents.
    plan = mixed.backward.plan
    assert plan.saved == (0, 1, 2) and plan.cotangents == (0, 1) and plan.wrt == (0, 2)


def test_a_one_element_tuple_result():
    # A schema "-> (Tensor)" is one tensor: the op returns a tuple of one all the same.
    op = torch_op(SINE_TIMES.replace("ROOT y = f32[5] multiply(s, w)",
                                     "y = f32[5] multiply(s, w)\n  ROOT t = (f32[5]) tuple(y)"),
                  name="autograd_one_tuple")
    x, w = torch.randn(5, requires_grad=True), torch.randn(5)
    (y,) = op(x, w)
    torch.testing.assert_close(y, torch.sin(x.detach()) * w)
    y.backward(torch.ones(5))
    torch.testing.assert_close(x.grad, torch.cos(x.detach()) * w)


def test_explicit_backward_text():
    op = torch_op(SINE_TIMES, name="autograd_sine_times_explicit", backward=SINE_TIMES_BACKWARD)
    x = torch.randn(5, requires_grad=True)
    w = torch.randn(5, requires_grad=True)
    ct = torch.randn(5)
    op(x, w).backward(ct)
    torch.testing.assert_close(x.grad, ct * torch.cos(x.detach()) * w.detach())
    torch.testing.assert_close(w.grad, ct * torch.sin(x.detach()))
    auto = torch_op(SINE_TIMES, name="autograd_sine_times_auto")
    xa, wa = x.detach().requires_grad_(), w.detach().requires_grad_()
    auto(xa, wa).backward(ct)
    torch.testing.assert_close(xa.grad, x.grad)
    torch.testing.assert_close(wa.grad, w.grad)


@pytest.mark.parametrize("bad, message", [
    (SINE_TIMES_BACKWARD.replace("  ct = f32[5] parameter(2)\n",
                                 "  ct = f32[5] constant({0,0,0,0,0})\n"),
     r"has 2 parameter\(s\); the forward's 2 parameter\(s\) and 1 output\(s\) need 3"),
    (SINE_TIMES_BACKWARD.replace("ct = f32[5] parameter(2)", "ct = f32[4] parameter(2)")
     .replace("f32[5]", "f32[4]"), r"backward parameter 0 \(%x\) is f32\[4\]"),
    (SINE_TIMES_BACKWARD.replace("ROOT grads = (f32[5], f32[5]) tuple(dx, dw)",
                                 "ROOT grads = (f32[5]) tuple(dx)"),
     r"returns \(f32\[5\]\), expected \(f32\[5\], f32\[5\]\)"),
])
def test_explicit_backward_breaking_the_convention_is_refused(bad, message):
    with pytest.raises(BadArgumentError, match=message):
        torch_op(SINE_TIMES, name="autograd_sine_times_bad", backward=bad)


def test_inference_only_op_raises_a_clear_error_at_backward():
    op = torch_op(SINE_TIMES, name="autograd_sine_times_inference", backward=None)
    x = torch.randn(5, requires_grad=True)
    y = op(x, torch.ones(5))
    torch.testing.assert_close(y, torch.sin(x.detach()))  # the forward works
    with pytest.raises(BadArgumentError, match=r"backward=None \(inference only\)"):
        y.sum().backward()
    with torch.no_grad():
        torch.testing.assert_close(op(x, torch.ones(5)), torch.sin(x))


def test_auto_without_a_rule_keeps_the_error_for_backward():
    module = parse_hlo("""HloModule no_rule
ENTRY e {
  x = f32[5] parameter(0)
  c = f32[5] custom-call(x), custom_call_target="foo"
  ROOT y = f32[5] multiply(c, x)
}""")
    plan = backward_plan(module, "auto")
    assert isinstance(plan, NoBackward) and isinstance(plan.error, UnsupportedOpError)
    assert "custom-call (%c)" in str(plan.error)


def test_same_name_different_backward_is_refused():
    torch_op(SINE_TIMES, name="autograd_sine_times_twice")
    assert torch_op(SINE_TIMES, name="autograd_sine_times_twice").backward.plan.wrt == (0, 1)
    with pytest.raises(EvaluationError, match="different HLO module or backward"):
        torch_op(SINE_TIMES, name="autograd_sine_times_twice", backward=None)


# --- Names (issue 18, item 9) -------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, message", [
    ({"name": "rms_norm_é"}, r"'rms_norm_é' is not an ASCII identifier \(it has 'é'\)"),
    ({"name": "two words"}, r"is not an ASCII identifier \(it has ' '\)"),
    ({"name": "a.b"}, r"is not an ASCII identifier \(it has '\.'\)"),
    ({"name": "3d"}, r"'3d' is not an ASCII identifier"),
    ({"name": ""}, r"'' is not an ASCII identifier"),
    ({"name": "def"}, r"is a Python keyword"),
    ({"namespace": "ns::x"}, r"namespace 'ns::x' is not an ASCII identifier"),
    ({"namespace": "espaço"}, r"namespace 'espaço' is not an ASCII identifier"),
    ({"namespace": "aten", "name": "add"}, r"namespace 'aten' belongs to PyTorch"),
    ({"namespace": "prims"}, r"namespace 'prims' belongs to PyTorch"),
    ({"namespace": "torch"}, r"namespace 'torch' belongs to PyTorch"),
    ({"namespace": "_c10d_functional"}, r"namespace '_c10d_functional' belongs to PyTorch"),
])
def test_bad_names_are_clear_errors(kwargs, message):
    with pytest.raises(BadArgumentError, match=message):
        torch_op(SCALE, **{"name": "autograd_names", **kwargs})


def test_an_op_registered_outside_torch_op_is_not_rebound():
    torch.library.custom_op("autograd_outside::taken", lambda x: x.clone(), mutates_args=(),
                            schema="(Tensor x) -> Tensor")
    with pytest.raises(BadArgumentError,
                       match=r"autograd_outside::taken already exists: registered outside"):
        torch_op(SCALE, name="taken", namespace="autograd_outside")


def test_the_backward_op_name_is_taken_too():
    torch_op(SCALE, name="autograd_taken_by_backward")
    with pytest.raises(BadArgumentError, match=r"autograd_taken_by_backward_backward already "):
        torch_op(SINE_TIMES, name="autograd_taken_by_backward_backward")


def test_a_name_derived_from_the_module_is_made_an_identifier():
    op = torch_op(SCALE.replace("HloModule scale_by_three", "HloModule scale.by-3"))
    assert op.qualname == "fusion::scale_by_3"


def test_the_training_example_runs(capsys):
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[2] / "examples" / "train_rmsnorm.py"
    spec = importlib.util.spec_from_file_location("train_rmsnorm_example", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    torch._dynamo.reset()
    assert example.main(["--steps", "3", "--backend", "aot_eager"]) == 0
    out = capsys.readouterr().out
    assert "OK" in out and "MISMATCH" not in out
