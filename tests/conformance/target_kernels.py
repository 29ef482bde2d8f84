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
    program compiles it for every one of ``archs`` under a lock (one after the other, so
    ``compile_hlo`` fuses the text once: the fusion pass does not depend on the target) and
    records each outcome (``target.json``) beside its kernel files; the others read the
    records.
    """

    def __init__(self, root: Path, archs: Sequence[int] = (90, 80)):
        self._root = root
        self._archs = tuple(archs)
        self._done: dict[tuple[Path, int], TargetKernels] = {}

    def _directory(self, path: Path, arch: int) -> Path:
        # One folder per source folder, program and target: the kernel files keep the names
        # write_kernels gives them, so a failure names the program and the fusion.
        return self._root / f"sm{arch}" / path.parent.name / path.stem.replace(".", "_")

    def program(self, path: Path, arch: int, *, wait: bool = True) -> TargetKernels | None:
        """``path`` compiled for ``sm_<arch>``; without ``wait``, None when another worker
        is compiling it now."""
        key = (path.resolve(), arch)
        if key not in self._done:
            locks = self._root / "locks"
            locks.mkdir(parents=True, exist_ok=True)
            with _locked(locks / f"{path.parent.name}.{path.stem}.lock", wait) as held:
                if not held:
                    return None
                for each in dict.fromkeys((arch, *self._archs)):
                    directory = self._directory(path, each)
                    directory.mkdir(parents=True, exist_ok=True)
                    if not (directory / "target.json").exists():
                        _compile_program(path, each, directory, directory / "target.json")
            directory = self._directory(path, arch)
            done = json.loads((directory / "target.json").read_text())
            self._done[key] = TargetKernels(done["fusion_mode"], tuple(done["fusion_fallbacks"]),
                                            tuple(directory / f for f in done["kernel_files"]))
        return self._done[key]

    def programs(self, paths: Iterable[Path], arch: int) -> dict[str, TargetKernels]:
        """Program stem -> its kernels, for every path (compiled when first asked for).
        Programs another worker is compiling are waited for last: meanwhile this one
        compiles the others."""
        paths = list(paths)
        found = {path: self.program(path, arch, wait=False) for path in paths}
        return {path.stem: found[path] or self.program(path, arch) for path in paths}


@contextlib.contextmanager
def _locked(path: Path, wait: bool = True) -> Iterator[bool]:
    """Hold an exclusive lock on ``path``: yields True, or False (holding nothing) when
    another process holds it and ``wait`` is off."""
    with path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
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
