"""Shared helpers of the dot-fusion tests: build fusions from HLO text, run them, compare."""
from __future__ import annotations

import math

import ml_dtypes  # noqa: F401 - registers bfloat16 with numpy
import numpy as np
import torch

import fusion
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule

TORCH = {"s8": torch.int8, "s32": torch.int32, "f16": torch.float16, "bf16": torch.bfloat16,
         "f32": torch.float32}


def fused_module(body: str, params: list[tuple[str, str]], root_shape: str,
                 kind: str = "kCustom", backend_config: str | None =
                 '{"fusion_backend_config":{"kind":"__triton_gemm"}}', extra: str = "") -> HloModule:
    """A module whose ENTRY calls one fusion ``fused`` with ``body`` as its computation.

    ``params``: (name, shape text) of the ENTRY parameters, passed in order.
    """
    entry_params = "\n".join(f"  x{i} = {shape} parameter({i})" for i, (_, shape) in enumerate(params))
    operands = ", ".join(f"x{i}" for i in range(len(params)))
    config = f", backend_config={backend_config}" if backend_config else ""
    text = (f"HloModule m\n{extra}\nfused {{\n{body}\n}}\n\nENTRY e {{\n{entry_params}\n"
            f"  ROOT r = {root_shape} fusion({operands}), kind={kind}, calls=fused{config}\n}}\n")
    return fusion.parse_hlo(text)


def entry_as_fusion(module: HloModule, kind: str = "kLoop") -> HloModule:
    """``module`` with its ENTRY computation turned into a fusion called from a new ENTRY."""
    entry = module.entry
    fused = HloComputation("fused_entry", entry.instructions, entry.root_name)
    params = tuple(HloInstruction(f"arg{i}", "parameter", p.shape, (), (("parameter_number", i),))
                   for i, p in enumerate(entry.parameters))
    call = HloInstruction("r", "fusion", entry.root.shape, tuple(p.name for p in params),
                          (("kind", kind), ("calls", "fused_entry")))
    new_entry = HloComputation("main_entry", (*params, call), "r", is_entry=True)
    others = tuple(c for c in module.computations if c.name != entry.name)
    return HloModule(module.name, (*others, fused, new_entry), "main_entry")


def random_inputs(module: HloModule, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = []
    for p in module.entry.parameters:
        t = p.shape.element_type
        if t.is_integer:
            arrays.append(rng.integers(-128, 128, p.shape.dims).astype(t.numpy_name))
        else:
            arrays.append(rng.standard_normal(p.shape.dims).astype(np.float32).astype(t.numpy_name))
    return arrays


def to_torch(a: np.ndarray) -> torch.Tensor:
    if a.dtype == np.dtype("bfloat16"):
        return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(a))


def to_numpy(t: torch.Tensor) -> np.ndarray:
    if t.dtype == torch.bfloat16:
        return t.contiguous().view(torch.int16).numpy().view("bfloat16")
    return t.contiguous().numpy()


def reference(module: HloModule, arrays) -> tuple[np.ndarray, ...]:
    """The reference evaluator's result of the module's (only) fusion on ``arrays``."""
    return fusion.evaluate(module, *arrays)


def assert_close(got: np.ndarray, want: np.ndarray, k: int) -> None:
    """Exact for integers; for floats within accumulation-order error of a K-long sum.

    16-bit results may differ by one rounding of their type; the bound scales with sqrt(K)
    times the magnitude of the values (sums of products of unit normals).
    """
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    if np.issubdtype(got.dtype, np.integer):
        np.testing.assert_array_equal(got, want)
        return
    eps = {np.dtype("float64"): 2.0 ** -52, np.dtype("float32"): 2.0 ** -23,
           np.dtype("float16"): 2.0 ** -10,
           np.dtype("bfloat16"): 2.0 ** -7}[got.dtype]
    g, w = got.astype(np.float64), want.astype(np.float64)
    scale = max(1.0, math.sqrt(k))
    # the accumulator is f32 but for f64 dots
    tol = 2 * eps * np.maximum(np.abs(w), scale) + min(eps, 2.0 ** -23) * 8 * scale * scale
    assert np.all(np.abs(g - w) <= tol), f"max error {np.max(np.abs(g - w))}"
