"""Every kernel the corpus compiles to also compiles for a GPU: sm_90 and sm_80, no spills.

The tests run kernels in the Triton interpreter; this checks the same kernel files go through
Triton's real compiler and ``ptxas`` for an H100 and an A100, without a GPU.  One child process
per architecture compiles all of them (a child: kernels decorated under ``TRITON_INTERPRET``
cannot be compiled).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from triton_backend import compile_hlo
from triton_backend.reports.compile_report import _CHILD_MARKER, build_report, write_kernels

CORPUS = Path(__file__).parents[1] / "data" / "hlo"


@pytest.fixture(scope="module")
def kernel_files(tmp_path_factory) -> dict[int, list[Path]]:
    """Per architecture, the kernel files of every corpus program (before and after XLA's
    passes, fused by us) compiled for that target: the tiling a GPU gets, never the
    interpreter's."""
    out: dict[int, list[Path]] = {}
    for arch in (90, 80):
        out[arch] = []
        for path in sorted(CORPUS.glob("*.hlo")):
            compiled = compile_hlo(path.read_text(), target=f"sm_{arch}")
            report = build_report(compiled)
            directory = tmp_path_factory.mktemp(f"{path.stem.replace('.', '_')}_sm{arch}")
            write_kernels(compiled, report, directory)
            out[arch] += [directory / f.kernel_file for f in report.fusions]
    return out


def _compile_all(paths: list[Path], arch: int) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "0"
    request = json.dumps({"arch": arch, "kernels": [str(p) for p in paths]})
    result = subprocess.run([sys.executable, "-m", "triton_backend.reports.compile_report", request],
                            capture_output=True, text=True, env=env, check=False, timeout=900)
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith(_CHILD_MARKER)]
    assert result.returncode == 0 and lines, result.stderr[-4000:]
    return json.loads(lines[-1][len(_CHILD_MARKER):])


@pytest.mark.parametrize("arch", [90, 80])
def test_every_corpus_kernel_compiles_without_spills(kernel_files, arch):
    paths = kernel_files[arch]
    assert len(paths) > 60  # the whole corpus, not a vacuous pass
    results = _compile_all(paths, arch)
    assert len(results) == len(paths)
    for path, r in zip(paths, results):
        assert r["registers"] > 0, path.name
        assert r["spill_store_bytes"] == 0 and r["spill_load_bytes"] == 0, (path.name, r)
        assert (path.parent / r["cubin_file"]).stat().st_size > 0
