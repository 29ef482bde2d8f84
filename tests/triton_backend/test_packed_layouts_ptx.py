"""Packed-layout kernels compile for sm_90 (no inline assembly, no spills).

The kernels are generated here and compiled in a child process without ``TRITON_INTERPRET``
(interpreted kernels are not compilable), as ``test_ptx_report`` does.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from fusion.text.parser import parse_hlo
from tests.triton_backend.fusion_check import single_fusion_module as fm
from triton_backend.driver.compiled_fusion import compile_fusion
from triton_backend.reports.ptx_report import find_ptxas

CHILD = r'''
import importlib.util, json, sys
from triton_backend.reports.compile_report import kernel_signature
from triton_backend.reports.ptx_report import compile_for_target
out = []
for n, path in enumerate(json.loads(sys.argv[1])):
    spec = importlib.util.spec_from_file_location(f"packed_kernel_{n}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    signature = kernel_signature(module)
    r = compile_for_target(module.KERNEL, signature, {}, aligned=list(signature), arch=90)
    out.append({"signature": signature, "spills": r.spill_store_bytes + r.spill_load_bytes,
                "registers": r.registers,
                "target": [l for l in r.ptx.splitlines() if l.startswith(".target")]})
print("REPORT" + json.dumps(out))
'''

B16, B1 = "{1,0:T(8,128)(2,1)}", "{1,0:T(32,128)(32,1)}"
KERNELS = [
    fm([f"bf16[37,300]{B16}", "bf16[37,300]"], f"  ROOT r = bf16[37,300]{B16} add(p0, p1)",
       f"bf16[37,300]{B16}"),
    fm([f"pred[40,130]{B1}"], f"  ROOT r = pred[130,40]{B1} transpose(p0), dimensions={{1,0}}",
       f"pred[130,40]{B1}"),
]

requires_ptxas = pytest.mark.skipif(find_ptxas(90) is None, reason="ptxas not found in the Triton wheel")


@requires_ptxas
def test_packed_kernels_compile_for_sm90_without_spills():
    compiled = [compile_fusion(parse_hlo(text), "fusion") for text in KERNELS]
    assert not any("inline_asm" in c.source for c in compiled)  # shifts, masks and bitcasts only
    paths = [str(c.kernel_path) for c in compiled]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "0"
    result = subprocess.run([sys.executable, "-c", CHILD, json.dumps(paths)], capture_output=True,
                            text=True, env=env, timeout=600, check=False)
    assert result.returncode == 0, result.stderr[-4000:]
    reports = json.loads(next(x for x in result.stdout.splitlines() if x.startswith("REPORT"))[6:])
    assert len(reports) == 2
    for report in reports:
        assert report["target"] == [".target sm_90a"]
        assert report["spills"] == 0 and 0 < report["registers"] <= 255
    assert list(reports[0]["signature"].values()) == ["*u32", "*bf16", "*u32"]
    assert list(reports[1]["signature"].values()) == ["*u32", "*u32"]
