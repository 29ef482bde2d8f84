"""Test helpers: run a compiled fusion and the reference evaluator on the same inputs."""
from __future__ import annotations

import math

import numpy as np
import torch

from fusion.evaluator import evaluate
from fusion.evaluator.constant_ops import constant_value
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.ir.shape import ArrayShape

TORCH = {"pred": torch.bool, "s8": torch.int8, "s16": torch.int16, "s32": torch.int32,
         "s64": torch.int64, "u8": torch.uint8, "u16": torch.uint16, "u32": torch.uint32,
         "f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32, "f64": torch.float64,
         "c64": torch.complex64, "c128": torch.complex128}

#: Relative/absolute tolerance per dtype for arithmetic (data movement is compared bit-exactly).
TOLERANCE = {"f32": 2e-6, "f64": 1e-13, "bf16": 1e-2, "f16": 2e-3, "c64": 2e-6, "c128": 1e-13}


# The (value, index) argmax reducer JAX emits: the larger value wins, ties go to the lower index.
ARGMAX = """argmax { a = f32[] parameter(0)
  ai = s32[] parameter(1)
  b = f32[] parameter(2)
  bi = s32[] parameter(3)
  gt = pred[] compare(a, b), direction=GT
  eq = pred[] compare(a, b), direction=EQ
  lt = pred[] compare(ai, bi), direction=LT
  tie = pred[] and(eq, lt)
  pick = pred[] or(gt, tie)
  v = f32[] select(pick, a, b)
  i = s32[] select(pick, ai, bi)
  ROOT r = (f32[], s32[]) tuple(v, i) }"""

# A loop fusion whose [256] operand every block re-reads through a broadcast.
BROADCAST_ADD = """HloModule m
f {
  p0 = f32[256] parameter(0)
  p1 = f32[64,256] parameter(1)
  b = f32[64,256] broadcast(p0), dimensions={1}
  ROOT a = f32[64,256] add(b, p1)
}
ENTRY e {
  x = f32[256] parameter(0)
  y = f32[64,256] parameter(1)
  ROOT r = f32[64,256] fusion(x, y), kind=kLoop, calls=f
}"""


def fusion_module(module: HloModule, fusion_name: str) -> HloModule:
    """A module whose ENTRY is the fused computation (for the reference evaluator)."""
    fusion = next(i for _, i in module.fusions() if i.name == fusion_name)
    return HloModule(module.name, module.computations, fusion.attr("calls"))


def random_array(shape: ArrayShape, rng: np.random.Generator) -> np.ndarray:
    t = shape.element_type
    if t.is_pred:
        return rng.integers(0, 2, shape.dims).astype(bool)
    if t.is_integer:
        low = 0 if t.kind == "unsigned" else -6
        return rng.integers(low, 7, shape.dims).astype(t.numpy_name)
    if t.is_complex:
        parts = rng.standard_normal((2, *shape.dims))
        return (parts[0] + 1j * parts[1]).astype(t.numpy_name)
    import ml_dtypes  # noqa: F401
    return rng.standard_normal(shape.dims).astype(np.float32).astype(t.numpy_name)


def call_site_arrays(caller: HloComputation, fusion: HloInstruction, params,
                     rng: np.random.Generator) -> list[np.ndarray]:
    """Inputs for ``fusion``'s parameters ``params``: the constants its call site in
    ``caller`` passes (the kernel may rely on them: a scan's init), else random arrays."""
    arrays = []
    for operand, p in zip(fusion.operands, params):
        given = caller.instruction(operand)
        if given.has_attr("literal") and isinstance(given.shape, ArrayShape):
            arrays.append(constant_value(given))
        else:
            arrays.append(random_array(p.shape, rng))
    return arrays


def to_torch(a: np.ndarray, dtype: str) -> torch.Tensor:
    if dtype == "bf16":
        return torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)
    return torch.from_numpy(np.array(a, order="C")).to(TORCH[dtype])


def to_numpy(t: torch.Tensor, dtype: str) -> np.ndarray:
    if dtype == "bf16":
        return t.float().numpy()
    return t.contiguous().numpy()


def assert_matches(got: np.ndarray, want: np.ndarray, dtype: str, *, exact: bool,
                   reduction_length: int = 1) -> None:
    want = np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    if exact or dtype not in TOLERANCE:
        np.testing.assert_array_equal(got.view(np.uint8) if dtype == "pred" else got,
                                      want.astype(got.dtype) if dtype != "bf16" else want.astype(np.float32))
        return
    tol = TOLERANCE[dtype] * max(1, math.sqrt(reduction_length)) * 4
    wide = np.complex128 if dtype in ("c64", "c128") else np.float64
    np.testing.assert_allclose(got.astype(wide), want.astype(wide), rtol=tol, atol=tol)


def single_fusion_module(params: list[str], body: str, root_shape: str, extra: str = "") -> str:
    """HLO text: a fusion ``f`` of ``body`` (lines; ROOT included) over ``params`` shapes."""
    fused = "\n".join(f"  p{i} = {s} parameter({i})" for i, s in enumerate(params))
    entry = "\n".join(f"  x{i} = {s} parameter({i})" for i, s in enumerate(params))
    args = ", ".join(f"x{i}" for i in range(len(params)))
    return (f"HloModule m\n{extra}\nf {{\n{fused}\n{body}\n}}\n\nENTRY e {{\n{entry}\n"
            f"  ROOT fusion = {root_shape} fusion({args}), kind=kLoop, calls=f\n}}\n")


def run_and_compare(text: str, *, exact: bool, seed: int = 0, tile_sizes=None,
                    reduction_length: int = 1, arrays=None, reduction_chunk=None, target=None):
    """Compile the module's fusion named ``fusion``, run it and the evaluator; compare.

    ``target`` (``"cuda:90"``) renders the kernel as for that GPU (``tl.reduce``, GPU launch
    options) while it still runs here, under the interpreter.
    """
    from fusion.text.parser import parse_hlo
    from fusion.ir.shape import TupleShape
    from triton_backend.driver.compiled_fusion import compile_fusion

    module = parse_hlo(text)
    compiled = compile_fusion(module, "fusion", tile_sizes=tile_sizes, target=target,
                              **({} if reduction_chunk is None else {"reduction_chunk": reduction_chunk}))
    fusion = next(i for _, i in module.fusions() if i.name == "fusion")
    params = module.computation(fusion.attr("calls")).parameters
    rng = np.random.default_rng(seed)
    if arrays is None:
        arrays = [random_array(p.shape, rng) for p in params]
    want = evaluate(fusion_module(module, "fusion"), *arrays)
    got = compiled(*[to_torch(a, p.shape.dtype) for a, p in zip(arrays, params)])
    outs = fusion.shape.elements if isinstance(fusion.shape, TupleShape) else (fusion.shape,)
    assert len(got) == len(want) == len(outs)
    for g, w, s in zip(got, want, outs):
        assert_matches(to_numpy(g, s.dtype), w, s.dtype, exact=exact, reduction_length=reduction_length)
    return compiled
