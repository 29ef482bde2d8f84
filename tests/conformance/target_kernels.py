"""What the compile-for-GPU checks share (``test_corpus_kernels_compile``,
``test_bench_kernels_compile``; the fixture ``target_compiles`` is in this folder's conftest).

Compiling a program's kernels for a target (``compile_hlo(..., target="sm_90")``) is done once
per program and target in a test session, whichever xdist worker asks first, and reused by
every test that needs it: the shards of a check and the bench's kernel-count check.  What is remembered is the outcome (the fusion
mode, the fallbacks and the written kernel files), never a compiled module: every test still
starts with the empty module cache the top-level conftest gives it.

The kernel files of a target are compiled in child processes (Triton's compiler and
``ptxas``: a tenth of a second to a second of CPU per kernel file, hundreds of files), so each
check runs as a few shards that xdist can spread over its workers.  A kernel file is compiled
once per target however many programs produce it: files with the same bytes give the same
PTX.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TargetKernels:
    """One program compiled with ``target=sm_<arch>``: its launched fusions' kernel files."""

    fusion_mode: str
    fusion_fallbacks: tuple[str, ...]
    files: tuple[Path, ...]


class TargetCompiles:
    """``compile_hlo`` + ``build_report`` + ``write_kernels`` per (program file, arch), once.

    ``root`` may be shared by the xdist workers of one session: the first worker to ask for a
    program compiles it under a lock and records the outcome (``target.json``) beside its
    kernel files; the others read the record.
    """

    def __init__(self, root: Path):
        self._root = root
        self._done: dict[tuple[Path, int], TargetKernels] = {}

    def program(self, path: Path, arch: int) -> TargetKernels:
        key = (path.resolve(), arch)
        if key not in self._done:
            # One folder per source folder, program and target: the kernel files keep the
            # names write_kernels gives them, so a failure names the program and the fusion.
            directory = self._root / f"sm{arch}" / path.parent.name / path.stem.replace(".", "_")
            directory.mkdir(parents=True, exist_ok=True)
            record = directory / "target.json"
            with _locked(directory / ".lock"):
                if not record.exists():
                    _compile_program(path, arch, directory, record)
                done = json.loads(record.read_text())
            self._done[key] = TargetKernels(done["fusion_mode"], tuple(done["fusion_fallbacks"]),
                                            tuple(directory / f for f in done["kernel_files"]))
        return self._done[key]

    def programs(self, paths: Iterable[Path], arch: int) -> dict[str, TargetKernels]:
        """Program stem -> its kernels, for every path (compiled when first asked for)."""
        return {path.stem: self.program(path, arch) for path in paths}


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _compile_program(path: Path, arch: int, directory: Path, record: Path) -> None:
    from triton_backend import compile_hlo
    from triton_backend.reports.compile_report import build_report, write_kernels

    module = compile_hlo(path.read_text(), target=f"sm_{arch}")
    report = build_report(module)
    write_kernels(module, report, directory)
    done = {"fusion_mode": report.fusion_mode, "fusion_fallbacks": list(report.fusion_fallbacks),
            "kernel_files": [f.kernel_file for f in report.fusions]}
    partial = record.with_suffix(".partial")
    partial.write_text(json.dumps(done))
    partial.replace(record)  # whole or absent: a worker that died mid-write leaves no record


def distinct_kernel_files(files: Iterable[Path]) -> dict[str, list[Path]]:
    """SHA-256 of a kernel file's bytes -> every file with those bytes (first one first)."""
    out: dict[str, list[Path]] = {}
    for path in files:
        out.setdefault(hashlib.sha256(path.read_bytes()).hexdigest(), []).append(path)
    return out


def shard(distinct: dict[str, list[Path]], index: int, count: int) -> list[list[Path]]:
    """The groups of identical files whose digest falls in shard ``index`` of ``count``: a
    partition of ``distinct`` (every digest in exactly one shard), stable across processes."""
    return [paths for digest, paths in sorted(distinct.items())
            if int(digest[:8], 16) % count == index]


def names(paths: Sequence[Path]) -> list[str]:
    """``program/kernel file`` of each identical file, for failure messages."""
    return [f"{p.parent.name}/{p.name}" for p in paths]
