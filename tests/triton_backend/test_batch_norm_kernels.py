"""The batch-norm ops compiled: written as reductions and elementwise ops
(``fusion.transforms.batch_norm_expansion``), fused as a normalization, run under the
interpreter and judged as ``run --check`` judges (the evaluator, then f64)."""
from __future__ import annotations

import pytest

from fusion.evaluator.npz_io import random_inputs
from fusion.ir.shape import flatten_shape
from tests.fusion.test_batch_norm import module_text, training_text
from tests.triton_backend.xla_three_way import run_compiled
from triton_backend import compile_hlo
from triton_backend.host.output_check import compare_with_evaluator


def _run(text: str):
    compiled = compile_hlo(text, cache=False)
    module = compiled.module
    arrays = random_inputs(module, seed=0)
    outputs = run_compiled(text, *arrays, compiled=compiled)
    types = [s.dtype for s in flatten_shape(module.entry.root.shape)]
    return compiled, compare_with_evaluator(module, arrays, outputs, types)


@pytest.mark.parametrize("dims, feature, dtype", [
    ((4, 6, 6, 8), 3, "f32"),   # NHWC, as Keras writes it
    ((4, 8, 6, 6), 1, "f32"),   # NCHW
    ((4, 8, 5, 3), 1, "bf16"),
])
def test_training_inference_and_grad_compile_and_match(dims, feature, dtype):
    _, verdicts = _run(module_text(dims, feature, dtype))
    assert all(v.passed for v in verdicts), [str(v) for v in verdicts]


def test_a_training_batch_norm_is_a_few_kernels_not_one_per_op():
    text = training_text((8, 6, 6, 16), 3)
    compiled, verdicts = _run(text)
    assert all(v.passed for v in verdicts), [str(v) for v in verdicts]
    # The expansion's 20-odd ops: its two sums (each split among programs; side by side
    # they could not be) and the normalized output, never a kernel per op.
    assert len(compiled.fusions) <= 3
