"""Packed-layout kernels compile for sm_90 (no inline assembly, no spills).

The kernels are generated here and compiled by the process's compile child, without
``TRITON_INTERPRET`` (interpreted kernels are not compilable; ``target_compiles``).
"""
from __future__ import annotations

import pytest

from fusion.text.parser import parse_hlo
from tests.triton_backend.fusion_check import single_fusion_module as fm
from tests.triton_backend.target_compiles import compile_on_targets
from triton_backend.driver.compiled_fusion import compile_fusion
from triton_backend.reports.compile_report import kernel_signature
from triton_backend.reports.ptx_report import find_ptxas

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
    reports = compile_on_targets([(c.kernel_path, 90) for c in compiled])
    assert len(reports) == 2
    for report in reports:
        targets = [line for line in report["ptx"].splitlines() if line.startswith(".target")]
        assert targets == [".target sm_90a"]
        assert report["spills"] == 0 and 0 < report["registers"] <= 255
    signatures = [list(kernel_signature(c.module).values()) for c in compiled]
    assert signatures == [["*u32", "*bf16", "*u32"], ["*u32", "*u32"]]
