"""The attention backward (``fusion.autodiff.vjp`` of attention as JAX lowers it) compiles to
at most three kernels (the row statistics, dQ, dK with dV: ``tiling.fusion_pass.
attention_backward``) that match the reference evaluator under the interpreter; a backward the
kernels do not fit keeps today's fusion and the decision says why.  The bench-sized bf16 and
f32 backward (``bench/programs/vjp_attention_*``) are compiled for sm_80 and sm_90 by
``tests/conformance/test_bench_kernels_compile.py``: no spills, bf16 on ``wgmma``.  Grouped-query
and multi-query attention's backward: ``test_attention_backward_gqa``."""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import fusion
from fusion.autodiff.vjp_module import vjp
from fusion.ir.shape import flatten_shape
from fusion.text.printer import print_hlo
from tests.triton_backend.test_attention_fusion import S, attention, hlo, random_inputs
from tests.triton_backend.test_attention_one_pass import masked_attention
from tiling.fusion_pass.attention_mask import KeyBand
from tiling.fusion_pass.priority_fusion import fuse_module
from tiling.fusion_pass.score_band import output_band, reduction_band
from triton_backend.driver.module_compiler import compile_hlo
from triton_backend.host.output_check import compare_output
from triton_backend.runtime.kernel_loading import TemplateKind
from triton_backend.templates.attention.backward_driver import score_space, visited_fraction


def backward(f, shape, dtype) -> str:
    """The vjp module of ``f(q, k, v)`` at ``shape`` (all three alike)."""
    return print_hlo(vjp(fusion.parse_hlo(hlo(f, *[S(shape, dtype)] * 3))))


CASES = {
    # name: (forward, [batch, heads, tokens, head], dtype, tiles or None for the default).
    # 24 tokens in (16, 32) tiles pad the last query block and the one key block; the window
    # takes 48 tokens so that blocks of 16 skip keys below it as well as above the diagonal.
    "causal_f32": (attention(True), (1, 2, 64, 32), jnp.float32, None),
    "causal_bf16_several_blocks": (attention(True), (1, 1, 32, 16), jnp.bfloat16, (16, 16)),
    "unmasked_f32_padded": (attention(False), (1, 1, 24, 8), jnp.float32, (16, 32)),
    "sliding_window_f32": (masked_attention(lambda q, k: (k <= q) & (k > q - 8)),
                           (1, 1, 48, 8), jnp.float32, (16, 16)),
    # Rows 0-2 see no key: their max is -inf, their sum NaN, in the rows kernel's one-pass
    # max and sum as in the evaluator's two passes.
    "rows_without_keys_f32": (masked_attention(lambda q, k: k < q - 2),
                              (1, 1, 32, 8), jnp.float32, (16, 16)),
}

#: The (query, key) band of each case whose blocks the kernels visit (None: every block).
BANDS = {"causal_f32": KeyBand(None, 0), "causal_bf16_several_blocks": KeyBand(None, 0),
         "unmasked_f32_padded": None, "sliding_window_f32": KeyBand(-7, 0),
         # a row seeing no key sums to NaN over the blocks the mask hides, to 0 without them
         "rows_without_keys_f32": None}


@pytest.fixture(scope="module")
def compiled_case():
    """``(text, fused module, compiled module)`` of a case's backward, compiled (with the
    case's tiles) once for the tests that run it."""
    made = {}

    def get(case):
        if case not in made:
            forward, shape, dtype, tiles = CASES[case]
            text = backward(forward, shape, dtype)
            fused = fuse_module(fusion.parse_hlo(text)).module
            fusions = [i.name for i in fused.entry.instructions if i.opcode == "fusion"]
            tiling = None if tiles is None else dict.fromkeys(fusions, tiles)
            made[case] = text, fused, compile_hlo(fusion.parse_hlo(text), tiling=tiling)
        return made[case]

    return get


def _matches_the_evaluator(text: str, compiled) -> None:
    """``run_and_check``'s comparison for a module compiled already: run under the
    interpreter, every output at ``run --check``'s tolerances."""
    module = fusion.parse_hlo(text)
    arrays = random_inputs(module)
    got = compiled(*[torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)
                     if a.dtype.name == "bfloat16" else torch.from_numpy(a) for a in arrays])
    want = fusion.evaluate(module, *arrays)
    leaves = flatten_shape(module.entry.root.shape)
    assert len(got) == len(want) == len(leaves)
    for i, (g, w, leaf) in enumerate(zip(got, want, leaves)):
        result = compare_output(f"o{i}", np.asarray(w), g.float().numpy(), leaf.dtype)
        assert result.passed, result.describe()


@pytest.mark.parametrize("case", sorted(CASES))
def test_attention_backward_is_three_kernels_and_matches(case, compiled_case):
    tiles = CASES[case][3]
    text, fused, compiled = compiled_case(case)
    fusions = [i.name for i in fused.entry.instructions if i.opcode == "fusion"]
    _matches_the_evaluator(text, compiled)
    kinds = [f.kind for f in compiled.fusions.values()]
    assert kinds == [TemplateKind.ATTENTION_BACKWARD] * 3, kinds
    for name in fusions:  # the blocks skipped are those the mask hides
        space = score_space(fused, name)
        comp = fused.computation(fused.entry.instruction(name).attr("calls"))
        band = output_band(fused, comp, space)
        assert band == (None if space.kind == "rows" else BANDS[case]), (name, band)
        # The row statistics (max, sum, sum(p * dp)) skip them too: the rows kernel's loops.
        statistics = reduction_band(fused, comp, space)
        assert statistics == (BANDS[case] if space.kind == "rows" else None), (name, statistics)
        source = compiled.fusions[name].source
        assert (statistics is None) == ("blocks the mask hides" not in source
                                        or space.kind != "rows"), name
        fraction = visited_fraction(fused, name, tuple(compiled.fusions[name].tile_sizes[:2]))
        assert (fraction < 1.0) == (BANDS[case] is not None and tiles is not None), (name, fraction)
        if space.kind == "rows":  # one loop over the keys per dependency level, not per
            # reduce; the softmax's max and sum (an online sum, rescaled) share a level
            assert "_rescale = tl.exp" in source, name
            assert source.count("for r_") == _longest_reduce_chain(comp, space.reduces) - 1, name


def _longest_reduce_chain(comp, reduces) -> int:
    """The most of ``reduces`` on one path of ``comp``'s data flow (brute force)."""
    @functools.cache
    def chain(name):
        here = 1 if name in reduces else 0
        return here + max((chain(o) for o in comp.instruction(name).operands), default=0)

    return max(chain(r) for r in reduces)


def test_transformer_block_backward_holds_the_three_kernels_and_matches():
    """A training step's backward: q, k, v sliced from one projection dot, the forward's
    ``P @ V`` (which the backward's ``dP`` depends on) left to the other stages, its row max
    and sum read by the backward kernels rather than computed again.  The other kernels
    (projection dots) sum in another order than the evaluator: compared at 2e-5 of the
    largest gradient, as they are on main."""
    def block(x, w_qkv, w_o):
        b, t, d = x.shape
        q, k, v = jnp.split(x @ w_qkv, 3, axis=-1)

        def split(a):
            return a.reshape(b, t, 2, d // 2).transpose(0, 2, 1, 3)

        s = jnp.einsum("bhqd,bhkd->bhqk", split(q), split(k)) / 4.0
        s = jnp.where(jnp.tril(jnp.ones((t, t), dtype=bool)), s, -1e30)
        a = jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), split(v))
        return x + jnp.tanh(a.transpose(0, 2, 1, 3).reshape(b, t, d) @ w_o)

    shapes = S((1, 32, 32), jnp.float32), S((32, 96), jnp.float32), S((32, 32), jnp.float32)
    module = vjp(fusion.parse_hlo(hlo(block, *shapes)))
    compiled = compile_hlo(print_hlo(module))
    kinds = [f.kind for f in compiled.fusions.values()]
    assert kinds.count(TemplateKind.ATTENTION_BACKWARD) == 3, kinds
    arrays = random_inputs(module)
    got = compiled(*[torch.from_numpy(a) for a in arrays])
    for g, w in zip(got, fusion.evaluate(module, *arrays)):
        w = np.asarray(w)
        assert np.abs(g.numpy() - w).max() <= 2e-5 * np.abs(w).max()


@pytest.mark.parametrize("case", ["causal_f32", "rows_without_keys_f32"])
def test_row_statistics_kernel_matches_the_evaluator_on_its_own_outputs(case, compiled_case):
    """The rows kernel's outputs (max, its online sum, the softmax backward's row sums), which
    the module's gradients only read: compared with the evaluator's run of the fusion's own
    computation.  A row whose keys are all hidden has max -inf and sum NaN, in one pass as in
    two (over two key blocks where the case's tiles are blocks of 16)."""
    from fusion.evaluator.interpreter import Evaluator

    shape = CASES[case][1]
    _, fused, compiled = compiled_case(case)
    (rows,) = [n for n, f in compiled.fusions.items()
               if f.kind == TemplateKind.ATTENTION_BACKWARD and score_space(fused, n).kind == "rows"]
    comp = fused.computation(fused.entry.instruction(rows).attr("calls"))
    rng = np.random.default_rng(1)
    args = [rng.standard_normal(p.shape.dims).astype(np.float32)
            .astype(p.shape.element_type.numpy_name) for p in comp.parameters]
    want = Evaluator(fused).call(comp.name, args)
    got = compiled.fusions[rows](*[torch.from_numpy(np.asarray(a, np.float32)) for a in args])
    for w, g, r in zip(want, got, comp.root.operands):
        w, g = np.asarray(w, np.float64), g.float().numpy().astype(np.float64)
        np.testing.assert_array_equal(np.isnan(w), np.isnan(g), err_msg=r)
        assert compare_output(r, w, g, "f32", summation_length=shape[2]).passed, r
    if case == "rows_without_keys_f32":
        sums = np.asarray(want[1])
        assert np.isnan(sums[..., :3]).all() and not np.isnan(sums[..., 3:]).any()
