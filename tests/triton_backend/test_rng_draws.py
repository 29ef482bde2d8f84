"""``rng`` compiled: one kernel draws it where it is read, its generator state advances on the
host from call to call as an XLA executable's does, and a CUDA graph is refused."""
from __future__ import annotations

import numpy as np
import pytest

from fusion.evaluator import evaluate
from fusion.text.parser import parse_hlo
from tests.conformance.xla_oracle import compile_with_xla
from tests.fusion.test_rng import CASES, rng_module
from tests.triton_backend.xla_three_way import run_compiled
from triton_backend import compile_hlo
from triton_backend.driver.cuda_graphs import graph_refusal
from triton_backend.driver.module_runner import host_computations

jax = pytest.importorskip("jax")


@pytest.mark.parametrize("shape,distribution,a,b", [CASES[k] for k in (0, 6, 8, 12, 14)])
def test_one_kernel_draws_the_evaluators_values_and_the_next_call_draws_anew(
        shape, distribution, a, b):
    text = rng_module(shape, distribution, a, b,
                      root=f"  ROOT o = {shape} multiply(r, r)\n")
    (want,) = evaluate(parse_hlo(text))
    compiled = compile_hlo(text, cache=False)
    (first,), (second,) = run_compiled(text, compiled=compiled), run_compiled(text,
                                                                              compiled=compiled)
    assert len(compiled.fusions) == 1  # the draw is computed where it is read
    assert first.dtype == want.dtype
    if distribution == "rng_normal":  # log, sine and cosine of the interpreter and NumPy
        np.testing.assert_allclose(first.astype(np.float64), want.astype(np.float64),
                                   rtol=2e-6 if shape[:3] in ("f32", "f64") else 1e-2)
    else:
        np.testing.assert_array_equal(first, want)
    assert first.size <= 1 or not np.array_equal(first, second)


def test_xlas_optimized_draws_match_xlas_executable_call_after_call():
    """XLA's optimized module (its expansion, its key folded into the kernels) runs as XLA's
    executable runs it: the same values on each of three calls."""
    def draws():
        return (jax.lax.rng_uniform(np.float32(-1), np.float32(4), (7, 3)),
                jax.lax.rng_uniform(np.int32(0), np.int32(1000), (5,)))

    text = jax.jit(draws).lower().compile().as_text()
    xla = compile_with_xla(text)
    compiled = compile_hlo(text, cache=False)
    for _ in range(3):
        want, got = xla(), run_compiled(text, compiled=compiled)
        np.testing.assert_allclose(got[0], want[0], rtol=0, atol=5 * 2.0 ** -23)  # FMA
        np.testing.assert_array_equal(got[1], want[1])


def test_jaxs_rng_uniform_draws_in_range_and_a_cuda_graph_is_refused():
    text = jax.jit(lambda: jax.lax.rng_uniform(np.float32(2), np.float32(3), (64,))).lower() \
        .as_text(dialect="hlo")
    compiled = compile_hlo(text, cache=False)
    (x,) = run_compiled(text, compiled=compiled)
    assert x.min() >= 2 and x.max() < 3 and len(np.unique(x)) == 64
    instr, why = graph_refusal(compiled.module, host_computations(compiled.module), None)
    assert instr.opcode == "rng-get-and-update-state" and "state" in why


def test_a_drawing_module_is_a_random_torch_op():
    """Registered as torch's random ops are (``nondeterministic_seeded``: impure to
    torch.compile, which then neither merges two calls on the same input nor drops one);
    each call draws anew."""
    import torch

    from triton_backend.integrations.torch_op import torch_op

    text = rng_module("f32[16]", "rng_uniform", 0, 1, root="  ROOT o = f32[16] add(r, r)\n")
    op = torch_op(text, name="rng_draws_test_op")
    assert torch.Tag.nondeterministic_seeded in op.op.tags
    assert not torch.equal(op(), op())
    plain = torch_op("HloModule p\nENTRY e {\n  x = f32[4] parameter(0)\n  ROOT y = f32[4] "
                     "negate(x)\n}\n", name="rng_draws_test_plain")
    assert torch.Tag.nondeterministic_seeded not in plain.op.tags
