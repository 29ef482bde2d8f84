"""The caches' size limit: the kernel files and the module cache's plans that name them,
their files and bytes, clearing them, pruning them to the limit (``fusion-compile cache``), and
the check every so many writes that keeps them there.

Apart from ``kernel_cache``, which writes entries and loads them as modules, and
``module_cache``, which writes and reads plans: this side only lists, measures and removes
files, the project's own (``kernel_*.py`` entries, ``*.json`` plans, temporary files of
interrupted writes), least recently used first, kernel files and plans alike.

Plans and kernel files go together: a plan is only usable while every kernel file it names is
there (``module_plan`` checks each one at load, and a plan that names a missing file is a
miss that compiles again).  So ``clear`` removes the plans before the kernel files (a reader
meanwhile finds no plan, or a plan whose kernel check fails: a miss either way), and
``prune``, after its least-recently-used pass, removes every plan that names a kernel file no
longer there (:func:`orphaned_plans`).

>>> parse_size("512M") == 512 * 2**20
True
"""
from __future__ import annotations

import json
import os
import re
import stat
import threading
from dataclasses import dataclass
from pathlib import Path

from fusion.errors import CacheError
from fusion.logs import get_logger
from triton_backend.runtime.cache_files import (
    cache_error, default_cache_dir, plan_directory, read_entry,
)

#: The cache's size limit in bytes (``512M``, ``2G`` and plain numbers are accepted).
MAX_BYTES_ENV = "FUSION_KERNEL_CACHE_MAX_BYTES"
#: Default limit: a few hundred MB holds thousands of kernels (a kernel file is ~5-20 kB).
DEFAULT_MAX_BYTES = 512 * 2**20
#: Entries a process writes between two checks of the cache's size against the limit.
PRUNE_EVERY_WRITES = 64

# Files this project writes under the cache directories, and only those are ever removed: a
# directory set by mistake to $HOME loses nothing else.  Kernel entries, the module cache's
# plans (``<text hash>/<key hash>.json``) and temporary files of interrupted writes.
_KINDS = (("kernel", re.compile(r"kernel_[0-9a-f]{40}\.py")),
          ("plan", re.compile(r"[0-9a-f]{40}\.json")),
          ("temporary", re.compile(r"\..+\.tmp")))
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*", re.IGNORECASE)
_writes_since_check = 0
_prune_log = get_logger("triton_backend.kernel_cache")
_prune_lock = threading.Lock()


def parse_size(text: str) -> int:
    """Bytes of a size such as ``"512M"``, ``"2GiB"``, ``"1.5g"`` or ``"1000"`` (powers of 1024).

    >>> parse_size("512M"), parse_size("2GiB"), parse_size("1000")
    (536870912, 2147483648, 1000)
    >>> parse_size("lots")
    Traceback (most recent call last):
    ...
    ValueError: size 'lots': expected a number of bytes with an optional K, M, G or T suffix
    """
    match = _SIZE.fullmatch(str(text))
    if match is None:
        raise ValueError(f"size {text!r}: expected a number of bytes with an optional K, M, G "
                         "or T suffix")
    number, unit = float(match.group(1)), match.group(2).lower()
    return int(number * 1024 ** " kmgt".index(unit or " "))


def max_cache_bytes() -> int:
    """``$FUSION_KERNEL_CACHE_MAX_BYTES`` when set (``parse_size``), else ``DEFAULT_MAX_BYTES``;
    a malformed value is a ``CacheError`` naming the variable."""
    text = os.environ.get(MAX_BYTES_ENV, "").strip()
    if not text:
        return DEFAULT_MAX_BYTES
    try:
        return parse_size(text)
    except ValueError as err:
        raise CacheError(str(err), where=MAX_BYTES_ENV) from None


@dataclass(frozen=True)
class CacheEntry:
    """One file of the caches: path, size in bytes, last use (seconds since the epoch), and
    what it is: ``kernel``, ``plan`` or ``temporary``."""

    path: Path
    size: int
    last_used: float
    kind: str = "kernel"


@dataclass(frozen=True)
class CacheInfo:
    """The kernel and plan directories, their files and bytes, and the limit on the whole."""

    directory: Path
    plan_directory: Path
    kernel_files: int
    kernel_bytes: int
    plans: int
    plan_bytes: int
    temporary_files: int
    temporary_bytes: int
    max_bytes: int

    @property
    def files(self) -> int:
        return self.kernel_files + self.plans + self.temporary_files

    @property
    def bytes(self) -> int:
        return self.kernel_bytes + self.plan_bytes + self.temporary_bytes

    def to_json(self) -> dict:
        return {"directory": str(self.directory), "plan_directory": str(self.plan_directory),
                "files": self.files, "bytes": self.bytes, "kernel_files": self.kernel_files,
                "kernel_bytes": self.kernel_bytes, "plans": self.plans,
                "plan_bytes": self.plan_bytes, "max_bytes": self.max_bytes}


def _roots(directory: str | os.PathLike[str] | None,
           plans: str | os.PathLike[str] | None) -> tuple[Path, Path]:
    """The kernel directory and the plan directory paired with it (``plan_directory``)."""
    root = Path(directory) if directory is not None else default_cache_dir()
    return root, Path(plans) if plans is not None else plan_directory(root)


def _kind(name: str) -> str | None:
    return next((kind for kind, pattern in _KINDS if pattern.fullmatch(name)), None)


def _walk(root: Path, seen: set[Path], entries: list[CacheEntry]) -> None:
    for folder, _, names in os.walk(root):  # os.walk does not follow links to directories
        for name in names:
            kind = _kind(name)
            path = Path(folder) / name
            if kind is None or path in seen:
                continue
            try:
                info = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                seen.add(path)
                entries.append(CacheEntry(path, info.st_size,
                                          max(info.st_atime, info.st_mtime), kind))


def cache_entries(directory: str | os.PathLike[str] | None = None,
                  plans: str | os.PathLike[str] | None = None) -> list[CacheEntry]:
    """The project's files under the kernel directory and its plan directory (``plans``,
    default ``cache_files.plan_directory``), least recently used first.

    Last use is the later of access and modification time: a file system mounted with
    ``relatime`` still records a read once a day, one with ``noatime`` falls back to the
    write.  Symbolic links and anything but regular files are never listed (or removed).
    """
    entries: list[CacheEntry] = []
    seen: set[Path] = set()
    for root in _roots(directory, plans):  # either may hold the other: each file once
        _walk(root, seen, entries)
    entries.sort(key=lambda e: (e.last_used, str(e.path)))
    return entries


def cache_info(directory: str | os.PathLike[str] | None = None,
               max_bytes: int | None = None,
               plans: str | os.PathLike[str] | None = None) -> CacheInfo:
    """Files and bytes of the kernel and plan directories, with the limit in force.

    >>> import tempfile
    >>> from triton_backend.runtime.kernel_cache import KernelCache
    >>> d = tempfile.mkdtemp()
    >>> _ = KernelCache(d).write("x = 1\\n")
    >>> info = cache_info(d, max_bytes=10**6)
    >>> info.kernel_files, info.plans, info.bytes > 0, info.plan_directory.name
    (1, 0, True, 'modules')
    """
    kernel_dir, plan_dir = _roots(directory, plans)
    entries = cache_entries(kernel_dir, plan_dir)
    counts = {kind: (sum(1 for e in entries if e.kind == kind),
                     sum(e.size for e in entries if e.kind == kind)) for kind, _ in _KINDS}
    return CacheInfo(kernel_dir, plan_dir, *counts["kernel"], *counts["plan"],
                     *counts["temporary"],
                     max_cache_bytes() if max_bytes is None else max_bytes)


def kernel_files_named(plan_text: str) -> frozenset[str] | None:
    """The kernel file names a plan file (as ``cache_files.read_entry`` returns it) names;
    None when it does not decode as a plan (``module_plan`` owns the format; this reads only
    ``plan.fusions[].kernel_file``, so the CLI needs neither the parser nor torch); a library
    call (``library_reason``) names none.

    >>> kernel_files_named('# h\\n{"plan": {"fusions": [{"kernel_file": "kernel_1.py"}, '
    ...                    '{"name": "s", "library_reason": "long rows"}]}}')
    frozenset({'kernel_1.py'})
    >>> kernel_files_named("# h\\nnot json") is None
    True
    """
    try:
        fusions = json.loads(plan_text.partition("\n")[2])["plan"]["fusions"]
        names = frozenset(f["kernel_file"] for f in fusions if "library_reason" not in f)
    except (ValueError, KeyError, TypeError, RecursionError):
        return None
    return names if all(isinstance(n, str) for n in names) else None


def orphaned_plans(entries: list[CacheEntry], kernel_dir: Path,
                   removing: frozenset[str] = frozenset()) -> list[CacheEntry]:
    """The plans among ``entries`` that name a kernel file missing from ``kernel_dir`` or
    about to be removed (``removing``: file names): never usable again (their load is a
    miss), so pruning removes them with the kernel files.  A kernel file missing from
    ``entries`` is looked for again (a compile may have written it since they were listed).
    A plan that does not decode is left to the least-recently-used order."""
    listed = {e.path.name for e in entries if e.kind == "kernel" and e.path.parent == kernel_dir}
    present = listed - removing
    orphans = []
    for entry in entries:
        if entry.kind != "plan":
            continue
        text = read_entry(entry.path)
        named = kernel_files_named(text) if text is not None else None
        if named is None:
            continue
        if any(n in removing or (n not in present and not os.path.lexists(kernel_dir / n))
               for n in named):
            orphans.append(entry)
    return orphans


def _remove(entries: list[CacheEntry]) -> tuple[int, int]:
    files = freed = 0
    for entry in entries:
        try:
            entry.path.unlink()
        except FileNotFoundError:  # another process pruned it first
            continue
        except OSError as err:
            raise cache_error(f"cannot remove the cache entry {entry.path}", err,
                              entry.path) from None
        files, freed = files + 1, freed + entry.size
    return files, freed


def _remove_empty_folders(root: Path) -> None:
    for folder, _, _ in sorted(os.walk(root), key=lambda w: -len(w[0])):
        if Path(folder) != root:
            try:
                os.rmdir(folder)  # only succeeds when empty
            except OSError:
                pass


def clear_cache(directory: str | os.PathLike[str] | None = None,
                plans: str | os.PathLike[str] | None = None) -> tuple[int, int]:
    """Remove every file of the project from the kernel and plan directories: ``(files,
    bytes)``.  Plans go first: no plan is ever left naming a removed kernel file, and a
    process compiling meanwhile finds either no plan or one whose kernel check fails."""
    kernel_dir, plan_dir = _roots(directory, plans)
    entries = cache_entries(kernel_dir, plan_dir)
    first = _remove([e for e in entries if e.kind == "plan"])
    then = _remove([e for e in entries if e.kind != "plan"])
    removed = (first[0] + then[0], first[1] + then[1])
    for root in (plan_dir, kernel_dir):
        _remove_empty_folders(root)
    _prune_log.info("caches %s and %s cleared: %d files, %d bytes", kernel_dir, plan_dir,
                    *removed)
    return removed


def prune_cache(directory: str | os.PathLike[str] | None = None,
                max_bytes: int | None = None,
                plans: str | os.PathLike[str] | None = None) -> tuple[int, int]:
    """Remove least recently used files, kernel files and plans alike, until both directories
    hold at most ``max_bytes`` together (default ``max_cache_bytes()``), then every plan that
    names a kernel file no longer there: ``(files, bytes)`` removed.

    >>> import tempfile
    >>> from triton_backend.runtime.kernel_cache import KernelCache
    >>> d = tempfile.mkdtemp()
    >>> for n in range(3):
    ...     _ = KernelCache(d).write(f"x = {n}\\n")
    >>> prune_cache(d, max_bytes=0)[0], cache_info(d, max_bytes=0).files
    (3, 0)
    """
    kernel_dir, plan_dir = _roots(directory, plans)
    limit = max_cache_bytes() if max_bytes is None else max_bytes
    entries = cache_entries(kernel_dir, plan_dir)
    excess = sum(e.size for e in entries) - limit
    victims = []
    for entry in entries:
        if excess <= 0:
            break
        victims.append(entry)
        excess -= entry.size
    gone = {e.path for e in victims}
    orphans = orphaned_plans([e for e in entries if e.path not in gone], kernel_dir,
                             frozenset(e.path.name for e in victims if e.kind == "kernel"))
    # Plans first, as in clear: no moment where a plan names a kernel file already removed.
    plans_first = sorted(victims + orphans, key=lambda e: e.kind != "plan")
    removed = _remove(plans_first)
    if removed[0]:
        for root in (plan_dir, kernel_dir):
            _remove_empty_folders(root)
        _prune_log.info("caches %s and %s pruned to %d bytes: removed %d files (%d plans "
                        "naming removed kernel files), %d bytes", kernel_dir, plan_dir, limit,
                        removed[0], len(orphans), removed[1])
    return removed


def note_write(directory: Path) -> None:
    """Count a written entry; every ``PRUNE_EVERY_WRITES`` writes (and at the first) check the
    size of ``directory`` and prune it to the limit.  A failure to prune is logged, never
    raised: the entry just written is what the caller needs."""
    global _writes_since_check
    with _prune_lock:
        due = _writes_since_check % PRUNE_EVERY_WRITES == 0
        _writes_since_check += 1
    if not due:
        return
    try:
        prune_cache(directory)
    except CacheError as err:
        _prune_log.warning("kernel cache %s not pruned: %s", directory, err.message)


__all__ = ["DEFAULT_MAX_BYTES", "MAX_BYTES_ENV", "PRUNE_EVERY_WRITES", "CacheEntry", "CacheInfo",
           "cache_entries", "cache_info", "clear_cache", "kernel_files_named", "max_cache_bytes",
           "note_write", "orphaned_plans", "parse_size", "prune_cache"]
