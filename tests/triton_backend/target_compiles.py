"""Generated kernel files compiled for sm_80/sm_90 by the process's shared compile child
(``compile_report.compile_kernel_files``), for tests that judge the PTX without a GPU.

Each test used to start its own child (Python, torch and Triton imported: about 2 s); the
shared one serves every test of a worker, and compiles just as ``fusion-compile compile
--target`` does (the file's own ``NUM_WARPS``/``NUM_STAGES``, every pointer aligned).
"""
from __future__ import annotations

from pathlib import Path

from triton_backend.reports.compile_report import compile_kernel_files


def compile_on_targets(requests) -> list[dict]:
    """Each ``(kernel file, arch)`` of ``requests`` compiled for ``sm_<arch>``, in their order:
    ``compile_kernel_files``' fields, plus ``spills`` (bytes stored and loaded) and ``ptx``
    (the PTX text, read from the file written beside the kernel)."""
    requests = [(str(path), int(arch)) for path, arch in requests]
    found: dict[tuple[str, int], dict] = {}
    for arch in dict.fromkeys(a for _, a in requests):
        paths = list(dict.fromkeys(p for p, a in requests if a == arch))
        for path, result in zip(paths, compile_kernel_files(paths, arch, loops=False)):
            ptx = (Path(path).parent / result["ptx_file"]).read_text()
            spills = result["spill_store_bytes"] + result["spill_load_bytes"]
            found[path, arch] = {**result, "spills": spills, "ptx": ptx}
    return [found[request] for request in requests]
