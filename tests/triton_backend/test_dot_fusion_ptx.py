"""Dot kernels compile for sm_80 and sm_90 and use the tensor cores (no GPU needed).

The kernels are generated here (under the interpreter) and compiled by the process's compile
child, without ``TRITON_INTERPRET`` (``target_compiles``).
"""
from __future__ import annotations

import pytest

from tests.triton_backend.target_compiles import compile_on_targets
from tests.triton_backend.test_dot_fusion import plain_dot
from triton_backend.templates.dot.driver import compile_dot_fusion
from triton_backend.reports.ptx_report import find_ptxas

requires_ptxas = pytest.mark.skipif(find_ptxas(80) is None or find_ptxas(90) is None,
                                    reason="ptxas not found in the Triton wheel")

CASES = [("f32", "f32"), ("bf16", "bf16"), ("f16", "f32"), ("f64", "f64"), ("s8", "s32")]


def ptx_counts(requests):
    """Per ``(kernel file, arch)``: its tensor-core multiplies, spills, shared memory,
    release/acquire atomics and asynchronous copies, counted in the PTX."""
    return [{"mma": r["ptx"].count("mma."), "wgmma": r["ptx"].count("wgmma."),
             "spills": r["spills"], "shared": r["shared_bytes"],
             "acq_rel_atomics": r["ptx"].count("atom.global.gpu.acq_rel"),
             "cp_async": r["ptx"].count("cp.async")} for r in compile_on_targets(requests)]


@requires_ptxas
def test_split_k_kernel_of_the_llama_shape_keeps_tensor_cores_without_spills():
    # 512x1024 bf16 (the Llama block's dots): 32 tiles of 128x128 leave SMs idle, so the
    # GPU default splits K: 3 slices on sm_80's 108 SMs; sm_90 first halves BLOCK_M (64
    # tiles of 64x128), then splits in 2.
    module = plain_dot("bf16", "bf16", lhs="512,1024", rhs="1024,1024", out_dims="512,1024")
    requests = []
    for arch, sizes in ((80, (128, 128, 64, 3)), (90, (64, 128, 64, 2))):
        compiled = compile_dot_fusion(module, "r", target=f"sm_{arch}")
        assert compiled.tile_sizes == sizes
        requests.append([str(compiled.kernel_path), arch])
    sm80, sm90 = ptx_counts(requests)
    assert sm90["wgmma"] > 0 and sm90["cp_async"] > 0 and sm80["mma"] > 0, (sm80, sm90)
    assert sm80["spills"] == 0 and sm90["spills"] == 0, (sm80, sm90)
    # One arrival per program, ordered after its partial tile's stores.
    assert sm80["acq_rel_atomics"] == 1 and sm90["acq_rel_atomics"] == 1, (sm80, sm90)


@requires_ptxas
def test_dot_kernels_use_tensor_cores_on_sm80_and_sm90():
    requests = []
    for dtype, out in CASES:
        module = plain_dot(dtype, out, lhs="64,128", rhs="128,64", out_dims="64,64")
        path = str(compile_dot_fusion(module, "r", tile_sizes=(64, 64, 32)).kernel_path)
        requests += [[path, 80], [path, 90]]
    reports = ptx_counts(requests)
    for (dtype, _), sm80, sm90 in zip(CASES, reports[0::2], reports[1::2]):
        # f32 dots are exact ("ieee"): no tensor cores, by design; the others must use them.
        if dtype == "f32":
            assert sm80["mma"] == 0 and sm90["wgmma"] == 0
            continue
        assert sm80["mma"] > 0, (dtype, sm80)
        assert sm90["wgmma"] + sm90["mma"] > 0, (dtype, sm90)
        assert sm80["spills"] == 0 and sm90["spills"] == 0, (dtype, sm80, sm90)
