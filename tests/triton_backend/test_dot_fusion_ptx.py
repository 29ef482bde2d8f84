"""Dot kernels compile for sm_80 and sm_90 and use the tensor cores (no GPU needed).

The kernels are generated here (under the interpreter) and compiled in a child process
without ``TRITON_INTERPRET``, which imports the generated kernel files directly.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.triton_backend.test_dot_fusion import plain_dot
from triton_backend.templates.dot.driver import compile_dot_fusion
from triton_backend.reports.ptx_report import find_ptxas

CHILD = r'''
import importlib.util, json, sys
import torch
from triton_backend.reports.ptx_report import compile_for_target
TYPES = {torch.float32: "*fp32", torch.bfloat16: "*bf16", torch.float16: "*fp16",
         torch.int8: "*i8", torch.int32: "*i32"}
out = []
for path, arch in json.loads(sys.argv[1]):
    spec = importlib.util.spec_from_file_location("k%d" % len(out), path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    names = module.KERNEL.arg_names
    specs = list(module.INPUT_SPECS) + list(module.CONSTANT_SPECS) + list(module.OUTPUT_SPECS)
    specs += list(getattr(module, "SCRATCH_SPECS", ()))  # split-K workspace, counters
    signature = {name: TYPES[s[1]] for name, s in zip(names, specs)}
    r = compile_for_target(module.KERNEL, signature, {}, aligned=list(names), arch=arch,
                           num_warps=module.NUM_WARPS, num_stages=module.NUM_STAGES)
    out.append({"mma": r.ptx.count("mma."), "wgmma": r.ptx.count("wgmma."),
                "spills": r.spills, "shared": r.shared_bytes,
                "acq_rel_atomics": r.ptx.count("atom.global.gpu.acq_rel"),
                "cp_async": r.ptx.count("cp.async")})
print("REPORT" + json.dumps(out))
'''

requires_ptxas = pytest.mark.skipif(find_ptxas(80) is None or find_ptxas(90) is None,
                                    reason="ptxas not found in the Triton wheel")

CASES = [("f32", "f32"), ("bf16", "bf16"), ("f16", "f32"), ("s8", "s32")]


def _compile_in_child(requests):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "0"
    result = subprocess.run([sys.executable, "-c", CHILD, json.dumps(requests)], capture_output=True,
                            text=True, env=env, timeout=600, check=False)
    assert result.returncode == 0, result.stderr[-4000:]
    line = next(x for x in result.stdout.splitlines() if x.startswith("REPORT"))
    return json.loads(line[len("REPORT"):])


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
    sm80, sm90 = _compile_in_child(requests)
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
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "0"
    result = subprocess.run([sys.executable, "-c", CHILD, json.dumps(requests)], capture_output=True,
                            text=True, env=env, timeout=600, check=False)
    assert result.returncode == 0, result.stderr[-4000:]
    line = next(x for x in result.stdout.splitlines() if x.startswith("REPORT"))
    reports = json.loads(line[len("REPORT"):])
    for (dtype, _), sm80, sm90 in zip(CASES, reports[0::2], reports[1::2]):
        # f32 dots are exact ("ieee"): no tensor cores, by design; the others must use them.
        if dtype == "f32":
            assert sm80["mma"] == 0 and sm90["wgmma"] == 0
            continue
        assert sm80["mma"] > 0, (dtype, sm80)
        assert sm90["wgmma"] + sm90["mma"] > 0, (dtype, sm90)
        assert sm80["spills"] == 0 and sm90["spills"] == 0, (dtype, sm80, sm90)
