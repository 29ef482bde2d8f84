"""A backward module is plain HLO: ``compile_hlo`` fuses it and runs its kernels (the Triton
interpreter on the CPU) to the reference evaluator's gradients."""
from __future__ import annotations

import pathlib

import numpy as np
import pytest

from fusion.autodiff import vjp
from fusion.ir.element_types import element_type_of_numpy
from fusion.evaluator import evaluate
from fusion.evaluator.npz_io import random_inputs
from fusion.text.parser import parse_hlo
from fusion.text.printer import print_hlo
from triton_backend import compile_hlo
from triton_backend.host.input_validation import tensor_from_numpy, tensor_to_numpy
from triton_backend.host.output_check import compare_output

HLO = pathlib.Path(__file__).parents[2] / "data" / "hlo"


@pytest.mark.parametrize("name", ["gather", "matmul", "max_pool", "rmsnorm"])
def test_backward_module_compiles_and_matches_the_evaluator(name: str) -> None:
    backward = vjp(parse_hlo((HLO / f"{name}.before.hlo").read_text()))
    text = print_hlo(backward)
    inputs = random_inputs(backward, seed=3)
    references = evaluate(backward, *inputs)
    compiled = compile_hlo(text, cache=False)
    tensors = [tensor_from_numpy(a, p.shape.dtype)
               for a, p in zip(inputs, backward.entry.parameters)]
    outputs = compiled(*tensors)
    assert len(outputs) == len(references)
    for n, (ref, out) in enumerate(zip(references, outputs)):
        actual = tensor_to_numpy(out)
        dtype = element_type_of_numpy(ref.dtype).name
        comparison = compare_output(f"gradient {n}", ref, actual, dtype)
        assert comparison.passed, comparison.describe()
        assert np.isfinite(ref).all()
