"""``ragged-dot`` (``jax.lax.ragged_dot`` lowered for a GPU: a mixture of experts' grouped
matmuls, and in its gradient the ragged-contracting form): the evaluator against NumPy by
brute force and against JAX computing the same program, the compiled module against the
evaluator, the VJP against finite differences, and the verifier's located errors."""
from __future__ import annotations

import functools

import numpy as np
import pytest

from fusion.errors import FusionCompilerError
from fusion.evaluator import evaluate
from fusion.shapes.verifier import verify_module
from fusion.text.parser import parse_hlo

SIZES = np.int32([4, 0, 5, 2])  # an empty group, and a last row in no group (sum 11 of 12)


def grouped(lhs: np.ndarray, rhs: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Brute force: each row times its group's matrix; a row in no group is zero."""
    out = np.zeros((lhs.shape[0], rhs.shape[2]))
    row = 0
    for j, n in enumerate(sizes):
        out[row:row + n] = lhs[row:row + n].astype(np.float64) @ rhs[j].astype(np.float64)
        row += n
    return out


def per_group(lhs: np.ndarray, rhs: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Brute force of the ragged contracting form: ``[g, m, n]``, group j sums its own k."""
    out = np.zeros((len(sizes), lhs.shape[1], rhs.shape[1]))
    start = 0
    for j, n in enumerate(sizes):
        out[j] = lhs[start:start + n].T.astype(np.float64) @ rhs[start:start + n]
        start += n
    return out


def module(mode: str, t: str = "f32") -> str:
    if mode in ("rows", "rows_t"):  # rows_t: the experts' matrices [g, n, k]
        shapes, out = (f"{t}[12,8]", f"{t}[4,8,5]" if mode == "rows" else f"{t}[4,5,8]"), "[12,5]"
        dims = f"lhs_contracting_dims={{1}}, rhs_contracting_dims={{{1 if mode == 'rows' else 2}}}, " \
               "lhs_ragged_dims={0}, rhs_group_dims={0}"
    else:
        shapes, out = (f"{t}[12,8]", f"{t}[12,5]"), "[4,8,5]"
        dims = "lhs_contracting_dims={0}, rhs_contracting_dims={0}, lhs_ragged_dims={0}"
    return f"""HloModule ragged
ENTRY e {{
  a = {shapes[0]} parameter(0)
  b = {shapes[1]} parameter(1)
  g = s32[4] parameter(2)
  ROOT r = {t}{out} ragged-dot(a, b, g), {dims}
}}
"""


def operands(mode: str, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    rhs = {"rows": (4, 8, 5), "rows_t": (4, 5, 8)}.get(mode, (12, 5))
    return [rng.standard_normal((12, 8)).astype(np.float32),
            rng.standard_normal(rhs).astype(np.float32), SIZES]


@pytest.mark.parametrize("mode, brute", [("rows", grouped), ("contracting", per_group)])
def test_the_evaluator_is_the_grouped_product(mode, brute):
    args = operands(mode)
    (got,) = evaluate(parse_hlo(module(mode)), *args)
    np.testing.assert_allclose(got, brute(*args), rtol=1e-5, atol=1e-5)


BATCHED = """HloModule batched_experts
ENTRY e {
  a = f32[2,6,4] parameter(0)
  b = f32[2,4,4,5] parameter(1)
  g = s32[4] parameter(2)
  ROOT r = f32[2,6,5] ragged-dot(a, b, g), lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={2}, lhs_ragged_dims={1}, rhs_group_dims={1}
}
"""


def _compiled(text: str, args: list[np.ndarray]):
    from tests.triton_backend.xla_three_way import run_compiled
    from triton_backend import compile_hlo

    compiled = compile_hlo(text, cache=False)
    (got,) = run_compiled(text, *args, compiled=compiled)
    return compiled, got


@pytest.mark.parametrize("mode", ["rows", "contracting"])
def test_compiled_by_the_grouped_gemm_template(mode):
    from triton_backend.runtime.kernel_loading import TemplateKind

    text = module(mode)
    args = operands(mode, seed=1)
    compiled, got = _compiled(text, args)
    (want,) = evaluate(parse_hlo(text), *args)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert [f.kind for f in compiled.fusions.values()] == [TemplateKind.RAGGED_DOT]


def test_other_forms_compile_as_a_dense_dot_of_masked_operands():
    rng = np.random.default_rng(4)
    a = rng.standard_normal((2, 6, 4)).astype(np.float32)
    b = rng.standard_normal((2, 4, 4, 5)).astype(np.float32)
    sizes = np.int32([2, 0, 3, 0])
    compiled, got = _compiled(BATCHED, [a, b, sizes])
    want = np.stack([grouped(a[k], b[k], sizes) for k in range(2)])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert not any(i.opcode == "ragged-dot" for c in compiled.module.computations for i in c)


@pytest.mark.parametrize("mode", ["rows", "rows_t", "contracting"])
def test_the_vjp_matches_finite_differences(mode):
    from tests.fusion.autodiff.finite_differences import check_directional_derivatives

    args = [a.astype(np.float64) for a in operands(mode, seed=2)[:2]] + [SIZES]
    check_directional_derivatives(parse_hlo(module(mode, "f64")), args, wrt=[0, 1])


def test_the_vjp_of_a_matmul_form_is_ragged_dots_again():
    # So the backward runs on the grouped GEMM kernel too, not on g-times-dense dots.
    from fusion.autodiff import vjp

    for mode in ("rows", "contracting"):
        backward = vjp(parse_hlo(module(mode)), wrt=[0, 1])
        opcodes = [i.opcode for c in backward.computations for i in c]
        assert opcodes.count("ragged-dot") == 2 and "dot" not in opcodes, (mode, opcodes)


def test_the_vjp_of_other_forms_matches_finite_differences():
    from tests.fusion.autodiff.finite_differences import check_directional_derivatives

    rng = np.random.default_rng(6)
    args = [rng.standard_normal((2, 6, 4)), rng.standard_normal((2, 4, 4, 5)),
            np.int32([2, 0, 3, 0])]
    check_directional_derivatives(parse_hlo(BATCHED.replace("f32", "f64")), args, wrt=[0, 1])


#: Group sizes per batch element ([b, g]): an empty group, a short sum, a full one.
BATCH_SIZES = np.int32([[2, 0, 3, 0], [0, 6, 0, 0]])
PER_BATCH = BATCHED.replace("g = s32[4] parameter(2)", "g = s32[2,4] parameter(2)")
PER_BATCH_CONTRACTING = """HloModule per_batch_contracting
ENTRY e {
  a = f32[2,6,3] parameter(0)
  b = f32[2,6,5] parameter(1)
  g = s32[2,4] parameter(2)
  ROOT r = f32[4,2,3,5] ragged-dot(a, b, g), lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={1}, rhs_contracting_dims={1}, lhs_ragged_dims={1}
}
"""


def test_group_sizes_per_batch_element_are_each_batchs_grouped_product():
    """XLA's ``[b..., g]`` group sizes (what JAX's GPU lowering writes for a batched
    ``ragged_dot_general``): batch ``k`` splits its rows by its own list, in both forms;
    the evaluator and the compiled dense form against brute force."""
    rng = np.random.default_rng(8)
    a, b = rng.standard_normal((2, 6, 4)).astype(np.float32), \
        rng.standard_normal((2, 4, 4, 5)).astype(np.float32)
    want = np.stack([grouped(a[k], b[k], BATCH_SIZES[k]) for k in range(2)])
    (got,) = evaluate(parse_hlo(PER_BATCH), a, b, BATCH_SIZES)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(_compiled(PER_BATCH, [a, b, BATCH_SIZES])[1], want,
                               rtol=1e-5, atol=1e-5)
    a, b = rng.standard_normal((2, 6, 3)).astype(np.float32), \
        rng.standard_normal((2, 6, 5)).astype(np.float32)
    want = np.stack([per_group(a[k], b[k], BATCH_SIZES[k]) for k in range(2)], axis=1)
    (got,) = evaluate(parse_hlo(PER_BATCH_CONTRACTING), a, b, BATCH_SIZES)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(_compiled(PER_BATCH_CONTRACTING, [a, b, BATCH_SIZES])[1], want,
                               rtol=1e-5, atol=1e-5)


def test_the_vjp_with_group_sizes_per_batch_element_matches_finite_differences():
    from tests.fusion.autodiff.finite_differences import check_directional_derivatives

    rng = np.random.default_rng(9)
    args = [rng.standard_normal((2, 6, 4)), rng.standard_normal((2, 4, 4, 5)), BATCH_SIZES]
    check_directional_derivatives(parse_hlo(PER_BATCH.replace("f32", "f64")), args, wrt=[0, 1])


@functools.cache
def _jax_program(dtype: str) -> str:
    """A mixture-of-experts layer and its gradient as JAX lowers them for a GPU (no GPU
    needed: ``jax.export`` lowers for another platform)."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    from jax import export
    from jax._src.lib import _jax

    t = jnp.dtype(dtype)

    def loss(x, w, sizes):
        return jnp.sum(jnp.tanh(jax.lax.ragged_dot(x, w, sizes,
                                                   preferred_element_type=jnp.float32)))

    shapes = (jax.ShapeDtypeStruct((12, 8), t), jax.ShapeDtypeStruct((4, 8, 5), t),
              jax.ShapeDtypeStruct((4,), jnp.int32))
    f = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
    mlir = export.export(f, platforms=["cuda"])(*shapes).mlir_module()
    return _jax.mlir.mlir_module_to_xla_computation(mlir, use_tuple_args=False,
                                                    return_tuple=False).as_hlo_text()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_jax_moe_layer_and_gradient_match_jax(dtype):
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    import ml_dtypes

    text = _jax_program(dtype)
    assert "ragged-dot" in text and "rhs_group_dims" in text
    np_t = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.float32
    x, w, sizes = operands("rows", seed=3)
    x, w = x.astype(np_t), w.astype(np_t)

    def loss(x, w, sizes):
        return jnp.sum(jnp.tanh(jax.lax.ragged_dot(x, w, sizes,
                                                   preferred_element_type=jnp.float32)))

    value, (gx, gw) = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))(x, w, sizes)
    from tests.triton_backend.xla_three_way import run_compiled
    from triton_backend import compile_hlo

    ran = run_compiled(text, x, w, sizes, compiled=compile_hlo(text, cache=False))
    tol = 1e-5 if dtype == "float32" else 2e-2
    for who, got in (("evaluator", evaluate(parse_hlo(text), x, w, sizes)), ("kernels", ran)):
        for g, want in zip(got, (value, gx, gw)):
            want = np.asarray(want, np.float32)
            error = np.abs(np.asarray(g, np.float32) - want).max()
            assert error <= tol * max(1.0, np.abs(want).max()), (who, error)


@pytest.mark.parametrize("line, message", [
    ("ragged-dot(a, b, g), lhs_contracting_dims={1}, rhs_contracting_dims={1}, "
     "lhs_ragged_dims={0,1}, rhs_group_dims={0}", "one lhs ragged dim"),
    ("ragged-dot(a, b, g), lhs_contracting_dims={1}, rhs_contracting_dims={1}, "
     "lhs_ragged_dims={0}", "one rhs group dim"),
    ("ragged-dot(a, b, f), lhs_contracting_dims={1}, rhs_contracting_dims={1}, "
     "lhs_ragged_dims={0}, rhs_group_dims={0}", "group sizes are f32[4]"),
    ("ragged-dot(a, b, h), lhs_contracting_dims={1}, rhs_contracting_dims={1}, "
     "lhs_ragged_dims={0}, rhs_group_dims={0}", "4 groups, and its group sizes are s32[3]"),
    ("ragged-dot(a, b, p), lhs_contracting_dims={1}, rhs_contracting_dims={1}, "
     "lhs_ragged_dims={0}, rhs_group_dims={0}", "group sizes are s32[2,4]"),
])
def test_a_wrong_ragged_dot_is_a_located_error(line, message):
    text = f"""HloModule m
ENTRY e {{
  a = f32[12,8] parameter(0)
  b = f32[4,8,5] parameter(1)
  g = s32[4] parameter(2)
  f = f32[4] parameter(3)
  h = s32[3] parameter(4)
  p = s32[2,4] parameter(5)
  ROOT r = f32[12,5] {line}
}}
"""
    with pytest.raises(FusionCompilerError) as error:
        verify_module(parse_hlo(text))
    assert message in str(error.value) and str(error.value).startswith("9:3:")
