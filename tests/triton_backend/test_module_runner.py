"""``compile_hlo`` end to end on the corpus, in the Triton interpreter, against independent truths.

The corpus programs (``tests/data/hlo``) were produced by JAX: ``*.before.hlo`` unfused,
``*.after.hlo`` fused by XLA.  Each is compiled and run on the evaluator's deterministic random
inputs, and every output is compared with the NumPy reference evaluator under the element
type's tolerance.  Programs with ops the backend does not emit must be rejected up front with a
located ``UnsupportedOpError``: never a wrong answer, never a raw traceback.  One program is
also checked against JAX itself.
"""
from __future__ import annotations

import pathlib

import numpy as np
import pytest
import torch

from fusion.ir.element_types import element_type_of_numpy
from fusion.errors import UnsupportedOpError
from fusion.evaluator import evaluate
from fusion.evaluator.npz_io import random_inputs
from fusion.text.parser import parse_hlo
from triton_backend import compile_hlo
from triton_backend.host.input_validation import tensor_from_numpy, tensor_to_numpy
from triton_backend.host.output_check import compare_output

HLO = pathlib.Path(__file__).parents[1] / "data" / "hlo"

#: Programs whose every op the backend emits (fused by XLA, or run op by op).
RUNS = [
    "bf16_gelu", "bf16_softmax", "bitcast_convert", "broadcast_reshape", "compare_select",
    "concatenate", "cond", "dynamic_slice", "dynamic_update_slice", "erf_atan2", "f64_constants",
    "fori_loop", "gather", "gelu", "integer_ops", "iota_convert", "layernorm", "pad",
    "reductions", "reverse", "rmsnorm", "slices", "softmax", "transpose",
]
#: Programs holding an op the emitters may not handle (dot, reduce-window, scatter, sort).
MAYBE_UNSUPPORTED = ["batched_einsum", "cumsum", "matmul", "max_pool", "scatter", "sort", "swiglu"]


def run_and_compare(text: str, **options) -> None:
    module = parse_hlo(text)
    inputs = random_inputs(module, seed=1)
    compiled = compile_hlo(text, **options)
    tensors = [tensor_from_numpy(a, p.shape.dtype) for a, p in zip(inputs, module.entry.parameters)]
    outputs = compiled(*tensors)
    references = evaluate(module, *inputs)
    assert len(outputs) == len(references)
    for n, (ref, out) in enumerate(zip(references, outputs)):
        assert isinstance(out, torch.Tensor) and out.is_contiguous()
        actual = tensor_to_numpy(out)
        assert actual.shape == ref.shape and actual.dtype == ref.dtype, f"o{n}"
        dtype = element_type_of_numpy(ref.dtype).name
        comparison = compare_output(f"o{n}", ref, actual, dtype)
        assert comparison.passed, comparison.describe()


def _corpus_cases():
    for name in RUNS:
        for stage in ("after", "before"):
            yield pytest.param(name, stage, id=f"{name}-{stage}")


@pytest.mark.parametrize(("name", "stage"), list(_corpus_cases()))
def test_corpus_program_matches_the_evaluator(name, stage):
    run_and_compare((HLO / f"{name}.{stage}.hlo").read_text())


@pytest.mark.parametrize("name", ["compare_select", "cond", "fori_loop", "integer_ops", "layernorm",
                                  "softmax"])
def test_unfused_program_runs_op_by_op(name):
    run_and_compare((HLO / f"{name}.before.hlo").read_text(), fuse=False)


@pytest.mark.parametrize("stage", ["after", "before"])
@pytest.mark.parametrize("name", MAYBE_UNSUPPORTED)
def test_corpus_program_runs_correctly_or_is_rejected_with_a_location(name, stage):
    text = (HLO / f"{name}.{stage}.hlo").read_text()
    try:
        run_and_compare(text)
    except UnsupportedOpError as err:
        assert err.line is not None and err.column is not None, str(err)
        line = text.splitlines()[err.line - 1]
        assert "=" in line, f"{err.line} does not point at an instruction: {line!r}"


def test_one_kernel_per_launched_fusion_compiled_once():
    compiled = compile_hlo((HLO / "softmax.after.hlo").read_text())
    entry_fusions = [i.name for i in compiled.module.entry.instructions if i.opcode == "fusion"]
    assert sorted(compiled.fusions) == sorted(entry_fusions)
    paths = {f.kernel_path for f in compiled.fusions.values()}
    assert all(p.is_file() for p in paths)
    x = torch.randn(4, 8)
    first, second = compiled(x)[0], compiled(x)[0]
    assert torch.equal(first, second)
    assert {f.kernel_path for f in compiled.fusions.values()} == paths


def test_matches_jax_on_a_jax_lowered_program():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy

    def f(x, w):
        y = jnp.tanh(x * 0.5) + w
        return y / jnp.sum(jnp.exp(y), axis=-1, keepdims=True), jnp.max(x, axis=0)

    x = np.linspace(-2, 2, 24, dtype=np.float32).reshape(3, 8)
    w = np.arange(8, dtype=np.float32) / 8
    text = jax.jit(f).lower(x, w).as_text(dialect="hlo")
    expected = [np.asarray(v) for v in jax.jit(f)(x, w)]
    outputs = compile_hlo(text)(torch.from_numpy(x), torch.from_numpy(w))
    for got, want in zip(outputs, expected):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)


def test_tiling_sets_the_tile_sizes_of_the_named_fusion():
    text = (HLO / "gelu.after.hlo").read_text()
    name = [i.name for i in parse_hlo(text).entry.instructions if i.opcode == "fusion"][0]
    default = compile_hlo(text)
    tiled = compile_hlo(text, tiling={name: (2, 4)})
    assert tiled.fusions[name].tile_sizes == (2, 4)
    assert tiled.fusions[name].grid != default.fusions[name].grid
    x = torch.randn(4, 8)
    torch.testing.assert_close(tiled(x)[0], default(x)[0], rtol=0, atol=0)
