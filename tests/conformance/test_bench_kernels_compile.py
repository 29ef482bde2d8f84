"""Every kernel of every bench program (``bench/programs``: realistic sizes, unfused, as JAX
lowers them) compiles for sm_90 and sm_80 at its default tiling for that target with no
register spills, and the normalizations, the matmul with its epilogue and attention are one
kernel each.

The tiling is the one ``compile_hlo(..., target=...)`` chooses for a GPU: interpreter-sized
blocks never reach PTX.  One child process per architecture compiles every kernel (Triton's
compiler and the wheel's ``ptxas``, no GPU needed).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from triton_backend import compile_hlo
from triton_backend.reports.compile_report import build_report, compile_kernel_files, write_kernels
from triton_backend.reports.ptx_report import find_ptxas

PROGRAMS = Path(__file__).resolve().parents[2] / "bench" / "programs"
ARCHS = (90, 80)
#: Families that must be one kernel (rows of 1,024 to 8,192, f32 and bf16).
ONE_KERNEL = ("softmax", "log_softmax", "layernorm", "rmsnorm", "matmul_bias_gelu",
              "attention_causal", "gelu", "swiglu")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> dict[int, dict[str, list[Path]]]:
    """arch -> program -> its kernel files, compiled with ``target=sm_<arch>``."""
    if not all(find_ptxas(a) for a in ARCHS):
        pytest.skip("ptxas is not in the Triton wheel")
    out: dict[int, dict[str, list[Path]]] = {}
    for arch in ARCHS:
        out[arch] = {}
        for path in sorted(PROGRAMS.glob("*.hlo")):
            module = compile_hlo(path.read_text(), target=f"sm_{arch}")
            report = build_report(module)
            # The fusion pass's result compiles as made: no fallback to a less fused module.
            assert report.fusion_mode == "fused", (path.stem, report.fusion_fallbacks)
            directory = tmp_path_factory.mktemp(f"{path.stem}_sm{arch}")
            write_kernels(module, report, directory)
            out[arch][path.stem] = [directory / f.kernel_file for f in report.fusions]
    return out


@pytest.mark.parametrize("arch", ARCHS)
def test_every_bench_kernel_compiles_without_spills(compiled, arch):
    programs = compiled[arch]
    assert len(programs) >= 20  # every bench program, not a vacuous pass
    paths = [p for files in programs.values() for p in files]
    results = compile_kernel_files(paths, arch)
    assert len(results) == len(paths)
    spilled = [(p.parent.name, p.name, r["registers"], r["spill_store_bytes"], r["spill_load_bytes"])
               for p, r in zip(paths, results)
               if r["spill_store_bytes"] or r["spill_load_bytes"]]
    assert not spilled, spilled
    assert all(r["registers"] > 0 for r in results)


def test_normalizations_matmul_epilogue_and_attention_are_one_kernel(compiled):
    for name, files in compiled[90].items():
        if name.startswith(ONE_KERNEL):
            assert len(files) == 1, (name, [f.name for f in files])
    gpt2 = [files for name, files in compiled[90].items() if name.startswith("gpt2_block")]
    assert gpt2 and all(len(files) <= 10 for files in gpt2)
