"""Compiling for sm_80/sm_90 without a GPU: registers, spills, vector accesses.

The test process runs under ``TRITON_INTERPRET=1`` (kernels there are not compilable), so the
compiles happen in a child process without it; the kernels live in kernel-cache files.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from triton_backend.reports.compile_child import child_environment
from triton_backend.runtime.kernel_cache import KernelCache
from triton_backend.reports.ptx_report import count_vector_accesses, find_ptxas, parse_ptxas_log

COPY_KERNELS = '''
import triton
import triton.language as tl


@triton.jit
def copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def strided_copy(x_ptr, y_ptr, stride, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets * stride))
'''

CHILD = r'''
import json, sys
from triton_backend.runtime.kernel_cache import KernelCache
from triton_backend.reports.ptx_report import compile_for_target
module = KernelCache().load(sys.argv[1])
out = []
for fn_name, arch, aligned in json.loads(sys.argv[2]):
    fn = getattr(module, fn_name)
    sig = {"x_ptr": "*fp32", "y_ptr": "*fp32", ("n" if fn_name == "copy" else "stride"): "i32",
           "BLOCK": "constexpr"}
    r = compile_for_target(fn, sig, {"BLOCK": 1024}, aligned=aligned, arch=arch, num_warps=4)
    out.append({"name": r.name, "arch": r.arch, "registers": r.registers, "spills": r.spills,
                "shared": r.shared_bytes, "vec": r.vectorized_global_accesses,
                "cubin_elf": r.cubin[:4] == b"\x7fELF", "target": [l for l in r.ptx.splitlines()
                                                                  if l.startswith(".target")]})
print("REPORT" + json.dumps(out))
'''

requires_ptxas = pytest.mark.skipif(find_ptxas(80) is None or find_ptxas(90) is None, reason="ptxas not found in the Triton wheel")


def compile_in_child(requests):
    env = child_environment()
    result = subprocess.run([sys.executable, "-c", CHILD, COPY_KERNELS, json.dumps(requests)],
                            capture_output=True, text=True, env=env, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-4000:]
    line = next(l for l in result.stdout.splitlines() if l.startswith("REPORT"))
    return json.loads(line[len("REPORT"):])


@pytest.fixture(scope="module")
def reports():
    KernelCache().write(COPY_KERNELS)  # the child loads the same entry
    requests = [["copy", 80, ["x_ptr", "y_ptr", "n"]], ["copy", 90, ["x_ptr", "y_ptr", "n"]],
                ["copy", 90, []], ["strided_copy", 90, ["x_ptr", "y_ptr"]]]
    return compile_in_child(requests)


@requires_ptxas
def test_aligned_copy_compiles_for_sm80_and_sm90_with_v4_accesses(reports):
    for report, target in zip(reports[:2], ([".target sm_80"], [".target sm_90a"])):
        assert report["name"] == "copy" and report["target"] == target
        assert report["cubin_elf"]
        assert report["spills"] == 0 and 0 < report["registers"] <= 255
        assert report["shared"] == 0
        assert report["vec"].get("ld.global.v4", 0) >= 1 and report["vec"].get("st.global.v4", 0) >= 1


@requires_ptxas
def test_no_alignment_promise_no_v4(reports):
    assert "ld.global.v4" not in reports[2]["vec"]
    assert "ld.global.v4" not in reports[3]["vec"]  # a runtime stride is never contiguous


def test_count_vector_accesses_ignores_scalar_and_shared():
    ptx = ("ld.global.v4.u32 {%r1, %r2, %r3, %r4}, [%rd1];\n"
           "@%p ld.global.nc.v2.f32 {%f1, %f2}, [%rd2];\n"
           "ld.shared.v4.b32 {%r1, %r2, %r3, %r4}, [%r5];\n"
           "st.global.b32 [%rd1], %r1;\nst.global.v4.b32 [%rd3], {%r1, %r2, %r3, %r4};\n")
    assert count_vector_accesses(ptx) == {"ld.global.v2": 1, "ld.global.v4": 1, "st.global.v4": 1}


def test_parse_ptxas_log_picks_the_named_entry_and_rejects_others():
    log = ("ptxas info    : Compiling entry function 'a' for 'sm_80'\n"
           "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
           "ptxas info    : Used 12 registers, 384 bytes cmem[0]\n"
           "ptxas info    : Compiling entry function 'b' for 'sm_80'\n"
           "    16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
           "ptxas info    : Used 255 registers, used 1 barriers, 4096 bytes smem, 384 bytes cmem[0]\n")
    a, b = parse_ptxas_log(log, "a"), parse_ptxas_log(log, "b")
    assert (a.registers, a.spill_store_bytes, a.shared_bytes) == (12, 0, 0)
    assert (b.registers, b.spill_store_bytes, b.spill_load_bytes, b.shared_bytes) == (255, 8, 12, 4096)
    with pytest.raises(ValueError, match="no entry function 'c'"):
        parse_ptxas_log(log, "c")


def test_interpreted_kernel_is_refused_with_a_clear_error():
    import triton
    import triton.language as tl  # noqa: F401

    from triton_backend.reports.ptx_report import compile_for_target

    module = KernelCache().load(COPY_KERNELS)
    if isinstance(module.copy, triton.runtime.jit.JITFunction):
        pytest.skip("this process does not run the interpreter")
    with pytest.raises(TypeError, match="TRITON_INTERPRET"):
        compile_for_target(module.copy, {"x_ptr": "*fp32"})
