"""Test helpers for fusions whose operands/results are in tiled (and word-packed) layouts.

Inputs are random logical arrays packed on the host (``host_packing.pack_tensor``) with a
sentinel in the layout padding (NaN for floats, 0x55 for integers, true for PRED), so a kernel
reading padding is caught.  Outputs are compared BIT-EXACTLY with the reference evaluator run
on the logical arrays: the unpacked logical values, and the whole physical buffer against
``pack_tensor(evaluator result, fill=0)`` (padding included).
"""
from __future__ import annotations

import numpy as np
import torch

from fusion.evaluator import evaluate
from fusion.text.parser import parse_hlo
from fusion.ir.shape import ArrayShape, TupleShape
from tests.triton_backend.fusion_check import fusion_module, random_array, to_torch
from triton_backend.lowering.emitter.addressing import is_physical_layout
from triton_backend.driver.compiled_fusion import compile_fusion
from triton_backend.host.host_packing import pack_tensor, unpack_tensor

PADDING_FILL = {"bf16": float("nan"), "f16": float("nan"), "f32": float("nan"), "s8": 0x55,
                "u8": 0x55, "s16": 0x5555, "s32": 0x55555555, "pred": True}


def bits(t: torch.Tensor) -> np.ndarray:
    """The raw bits of a tensor as a NumPy integer array (bool as uint8)."""
    t = t.contiguous()
    if t.dtype == torch.bool:
        return t.to(torch.uint8).numpy()
    carrier = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return t.view(carrier).numpy()


def physical_input(array: np.ndarray, shape: ArrayShape) -> torch.Tensor:
    """What ``compile_fusion``'s callable takes for an operand of ``shape``."""
    t = to_torch(array, shape.dtype)
    if is_physical_layout(shape):
        return pack_tensor(t, shape.layout, shape.dtype, fill=PADDING_FILL[shape.dtype])
    return t


def check_output(got: torch.Tensor, want: np.ndarray, shape: ArrayShape) -> None:
    """Bit-exact comparison of one kernel output with the evaluator's logical result."""
    want_t = to_torch(np.asarray(want), shape.dtype)
    if not is_physical_layout(shape):
        np.testing.assert_array_equal(bits(got), bits(want_t))
        return
    logical = unpack_tensor(got, shape.dims, shape.layout, shape.dtype)
    np.testing.assert_array_equal(bits(logical), bits(want_t))
    expected = pack_tensor(want_t, shape.layout, shape.dtype, fill=0)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_array_equal(bits(got), bits(expected))  # padding included: zero


def output_shapes(fusion) -> tuple[ArrayShape, ...]:
    return tuple(fusion.shape.elements) if isinstance(fusion.shape, TupleShape) else (fusion.shape,)


def run_packed(text: str, *, seed: int = 0, tile_sizes=None):
    """Compile the fusion named ``fusion`` of ``text``, run it on packed random inputs and
    compare every output bit-exactly; returns ``(compiled, inputs, outputs, want)``."""
    module = parse_hlo(text)
    compiled = compile_fusion(module, "fusion", tile_sizes=tile_sizes)
    fusion = next(i for _, i in module.fusions() if i.name == "fusion")
    params = module.computation(fusion.attr("calls")).parameters
    rng = np.random.default_rng(seed)
    arrays = [random_array(p.shape, rng) for p in params]
    want = evaluate(fusion_module(module, "fusion"), *arrays)
    inputs = [physical_input(a, p.shape) for a, p in zip(arrays, params)]
    got = compiled(*inputs)
    outs = output_shapes(fusion)
    assert len(got) == len(want) == len(outs)
    for g, w, s in zip(got, want, outs):
        check_output(g, w, s)
    return compiled, inputs, got, want
