"""bench/gpu_runtime's eager PyTorch forms of the attention and scan bench programs compute
what the programs' JAX functions (bench/programs/generate.py) compute: causal or not, the
grouped sliding window, JAX's own attention and its gradient, the cumulative sum and top-p's
mask, and the mixture of experts, at small sizes in f32 (the GPU timings compare against
these)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax")
torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]


def _load(path: Path, name: str):
    sys.path.insert(0, str(path.parent))
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(path.parent))


# Tokens past the 512-key window, so the sliding window hides keys a causal mask shows.
SHAPES = {"attention_bf16_4x16x2048x128": [(1, 2, 64, 16)] * 3,
          "attention_causal_bf16_4x16x2048x128": [(1, 2, 64, 16)] * 3,
          "attention_gqa_sliding_window_bf16_4x16x2048x128_kv4_w512":
              [(1, 4, 600, 16), (1, 2, 600, 16), (1, 2, 600, 16)],
          "cumsum_f32_4096x4096": [(4, 300)], "top_p_mask_bf16_64x32000": [(4, 300)],
          "jax_attention_causal_gqa_bf16_4x2048x16x128_kv4": [(1, 40, 4, 16), (1, 40, 2, 16),
                                                             (1, 40, 2, 16)],
          "jax_attention_grad_causal_gqa_bf16_4x2048x16x128_kv4": [
              (1, 40, 4, 16), (1, 40, 2, 16), (1, 40, 2, 16), (1, 40, 4, 16)]}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_eager_form_matches_the_jax_program(name):
    jax.config.update("jax_enable_x64", False)
    generate = _load(ROOT / "bench" / "programs" / "generate.py", "bench_generate")
    runtime = _load(ROOT / "bench" / "gpu_runtime.py", "bench_gpu_runtime")
    function, _ = generate.programs()[name]
    rng = np.random.default_rng(0)
    inputs = [rng.normal(size=shape).astype(np.float32) for shape in SHAPES[name]]
    want = function(*inputs)
    got = runtime.torch_program(name)(*map(torch.from_numpy, inputs))
    # a gradient program gives one array per argument
    pairs = zip(got, want) if isinstance(want, tuple) else [(got, want)]
    for g, w in pairs:
        np.testing.assert_allclose(g.detach().numpy(), np.asarray(w), rtol=2e-5, atol=2e-5)


def test_eager_mixture_of_experts_matches_the_jax_program():
    # One matmul per expert's rows in PyTorch; rows past every group are zero in both.
    generate = _load(ROOT / "bench" / "programs" / "generate.py", "bench_generate")
    runtime = _load(ROOT / "bench" / "gpu_runtime.py", "bench_gpu_runtime")
    name = "moe_bf16_t2048_d1024_f2816_e8"
    function, _ = generate.programs()[name]
    rng = np.random.default_rng(1)
    x, w = rng.normal(size=(40, 16)).astype(np.float32), rng.normal(size=(3, 16, 24)).astype(np.float32)
    sizes = np.int32([10, 0, 25])
    want = np.asarray(function(x, w, sizes))
    got = runtime.torch_program(name)(*map(torch.from_numpy, (x, w, sizes)))
    np.testing.assert_allclose(got.numpy(), want, rtol=2e-5, atol=2e-5)
