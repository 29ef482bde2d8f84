"""The stamp that says whether this project's sources changed since they were hashed.

``module_cache.source_hash`` keys every plan by a SHA-256 over the compiler's ``.py`` files
(for an installed wheel, over its ``RECORD``, which lists each file's SHA-256).
Hashing them costs milliseconds, a warm compile's budget, so the hash is remembered in the
cache directory (``sources/``) with every file's size and modification time (what Python's
own bytecode cache trusts) and every folder's modification time (a file added, removed or
renamed changes its folder's).  Checking the stamp is a stat of each path it names, not a
walk of the tree; when any differs, the tree is walked and the files hashed again
(``FUSION_LOG=debug`` names what changed).

A stat per file is what noticing an edit made in place takes (a folder's time changes only
when an entry is added, removed or renamed), and about 300 of them cost a fresh process's
warm compile a quarter of its budget.  So :class:`StampCheck` runs the check (read-only: the
stamp and its stats, or the ``RECORD``) in a background thread from the moment the module
cache is imported, while the rest of the compiler is still being imported; the first compile
takes its result, and anything short of a stamp that holds is decided again on the spot.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fusion.errors import CacheError
from fusion.logs import get_logger
from triton_backend.runtime import cache_files
from triton_backend.runtime.cache_files import SHA256_HEX, content_hash

#: The packages whose sources the hash covers.
PACKAGES = ("fusion", "tiling", "triton_backend")
#: The distribution's name as its ``.dist-info`` folder spells it (PEP 427: ``-`` as ``_``).
DIST_INFO_NAME = "hlo_triton_fusion"
# The module cache's logger: a stale stamp explains a plan's miss.
_log = get_logger("triton_backend.module_cache")

#: A stamp is not stored while a source was modified this recently (nanoseconds): a file
#: edited again within its file system's timestamp granularity would keep its stamped
#: size and time.  Git guards its index against the same race.
_RACY_NS = 2_000_000_000
#: Bump when the stamp's data or its meaning changes.
_STAMP_FORMAT = 1
#: ``(path relative to the project, size, mtime_ns)`` of each source file, sorted by path.
_Files = list[tuple[str, int, int]]


def project_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def source_hash(root: str, directory: Path, version: str | None = None) -> str:
    """The hash of the compiler's sources under ``root``, remembered in ``directory``.

    An installed (not editable) distribution is hashed by its ``RECORD`` (``version`` names
    its ``.dist-info``): pip writes there the SHA-256 of every file it installed and rewrites
    it on every install, so one small read replaces a stat of each source file.
    """
    held = _cheap_hash(root, directory, version)
    if held is not None:
        return held
    stamp = _stamp_path(root, directory)
    recorded = _read_stamp(stamp, root)
    started = time.time_ns()
    folders, files = _walk_sources(root)
    stamped = _stamped_files(recorded)
    if stamped == files:
        value = recorded["hash"]  # a folder changed (an editor's swap file), no source did
    else:
        if stamped is not None:
            _log.debug("module cache: compiler sources changed since they were stamped: %s",
                       _source_changes(stamped, files))
        value = _hash_files(root, files)
    newest = max([m for _, m in folders] + [m for _, _, m in files])
    if newest > started - _RACY_NS:
        _log.debug("module cache: a compiler source was modified within %d s; its hash is "
                   "not stamped", _RACY_NS // 10**9)
        return value
    body = json.dumps({"format": _STAMP_FORMAT, "root": root, "hash": value,
                       "folders": folders, "files": files}, separators=(",", ":"))
    try:
        cache_files.write_entry(stamp, body)
    except (CacheError, OSError) as err:
        _log.debug("module cache: cannot store the source hash in %s: %s", stamp, err)
    return value


def _cheap_hash(root: str, directory: Path, version: str | None) -> str | None:
    """The hash when the ``RECORD`` gives it, or the stamp holds (read-only); else None."""
    record = _installed_record(root, version)
    if record is not None:
        return hashlib.sha256(b"RECORD\0" + record).hexdigest()
    recorded = _read_stamp(_stamp_path(root, directory), root)
    if recorded is not None and _stamp_holds(root, recorded):
        return recorded["hash"]
    return None


def _stamp_path(root: str, directory: Path) -> Path:
    # One stamp per checkout: a cache directory may be shared by several.
    return directory / "sources" / f"{content_hash(root)[:40]}.txt"


class StampCheck:
    """``source_hash``'s cheap part (the ``RECORD``, or the stamp and a stat of each path it
    names), started now in a background thread; :meth:`take` gives its hash once.

    Only a hash that the ``RECORD`` or a holding stamp gives comes back; anything else (no
    stamp, a changed source, a failure) is None and left to ``source_hash``, which decides it
    again.  A process forked meanwhile gets None: the thread ran in its parent.

    >>> import tempfile
    >>> check = StampCheck(tempfile.mkdtemp(), Path(tempfile.mkdtemp()))
    >>> check.take(), check.take()  # nothing stamped there
    (None, None)
    """

    def __init__(self, root: str, directory: Path, version: str | None = None) -> None:
        self.root, self.directory, self.version = root, directory, version
        self._pid = os.getpid()
        self._done = threading.Event()
        self._hash: str | None = None
        self._taken = False
        threading.Thread(target=self._run, name="fusion-source-stamp", daemon=True).start()

    def _run(self) -> None:
        try:
            self._hash = _cheap_hash(self.root, self.directory, self.version)
        except Exception as err:  # noqa: BLE001 - any failure: the caller checks on the spot
            _log.debug("module cache: the background source-stamp check failed: %s", err)
        finally:
            self._done.set()

    def take(self, root: str | None = None, directory: Path | None = None) -> str | None:
        """The hash the check found (waiting for it), the first time only, and only for the
        same ``root`` and ``directory`` (when given); else None."""
        if self._taken or os.getpid() != self._pid \
                or (root, directory) not in ((None, None), (self.root, self.directory)):
            return None
        self._taken = True
        self._done.wait()
        return self._hash


def _installed_record(root: str, version: str | None) -> bytes | None:
    """The ``RECORD`` of this project's installed distribution at ``root`` (a site-packages
    folder), when there is one that lists the compiler's packages; None for a checkout."""
    if not version:
        return None
    path = f"{root}/{DIST_INFO_NAME}-{version}.dist-info/RECORD"
    try:
        with open(path, "rb") as handle:
            record = handle.read()
    except OSError:  # a checkout, editable or not installed
        return None
    # An editable install's RECORD lists a path hook, not the sources: it says nothing.
    listed = all(f"\n{package}/__init__.py,".encode() in b"\n" + record for package in PACKAGES)
    return record if listed else None


def _read_stamp(stamp: Path, root: str) -> dict[str, Any] | None:
    """The stamp's data when it is intact and well-formed for ``root``, else None."""
    text = cache_files.read_entry(stamp)
    if text is None:
        return None
    try:
        data = json.loads(text.partition("\n")[2])
        # Entries are checked as they are used (``_stamp_holds``): a malformed one is stale.
        ok = (isinstance(data, dict) and data.get("format") == _STAMP_FORMAT
              and data.get("root") == root and isinstance(data.get("hash"), str)
              and SHA256_HEX.fullmatch(data["hash"]) is not None
              and isinstance(data.get("folders"), list) and isinstance(data.get("files"), list)
              # Every package folder is stamped: its time covers the files and folders in it.
              and {f[0] for f in data["folders"] if "/" not in f[0]} == set(PACKAGES))
    except (ValueError, TypeError, KeyError, IndexError, RecursionError):
        ok = False
    return data if ok else None


def _stamped_files(recorded: Mapping[str, Any] | None) -> _Files | None:
    """The stamp's ``(path, size, mtime_ns)`` list; None without a stamp or when malformed."""
    if recorded is None:
        return None
    files = [tuple(f) for f in recorded["files"] if isinstance(f, list)]
    if len(files) != len(recorded["files"]) or not all(
            len(f) == 3 and type(f[0]) is str and type(f[1]) is int and type(f[2]) is int
            for f in files):
        return None
    return files


def _stamp_holds(root: str, recorded: Mapping[str, Any]) -> bool:
    """Whether every stamped folder and file still has its stamped time (and size)."""
    stat = os.stat
    try:
        for name, mtime in recorded["folders"]:
            if stat(f"{root}/{name}").st_mtime_ns != mtime:
                return False
        for name, size, mtime in recorded["files"]:
            info = stat(f"{root}/{name}")
            if info.st_mtime_ns != mtime or info.st_size != size:
                return False
    except (OSError, TypeError, ValueError):  # removed; or a malformed entry
        return False
    return True


def _walk_sources(root: str) -> tuple[list[tuple[str, int]], _Files]:
    """``(folder, mtime_ns)`` of every package folder and ``(path, size, mtime_ns)`` of every
    ``.py`` file in them, paths relative to ``root``, sorted."""
    folders: list[tuple[str, int]] = []
    files: _Files = []
    pending = list(PACKAGES)
    while pending:
        relative = pending.pop()
        path = f"{root}/{relative}"
        # The folder's time before its listing: an entry added meanwhile changes it after.
        folders.append((relative, os.stat(path).st_mtime_ns))
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    if entry.name != "__pycache__":
                        pending.append(f"{relative}/{entry.name}")
                elif entry.name.endswith(".py"):
                    info = entry.stat()
                    files.append((f"{relative}/{entry.name}", info.st_size, info.st_mtime_ns))
    return sorted(folders), sorted(files)


def _hash_files(root: str, files: _Files) -> str:
    digest = hashlib.sha256()
    for name, _, _ in files:
        digest.update(name.encode("utf-8") + b"\0")
        with open(f"{root}/{name}", "rb") as handle:
            digest.update(handle.read() + b"\0")
    return digest.hexdigest()


def _source_changes(before: _Files, after: _Files, limit: int = 8) -> str:
    """What differs between two stamped file lists, e.g. ``edited tiling/x.py, added y.py``."""
    old = {name: rest for name, *rest in before}
    new = {name: rest for name, *rest in after}
    changes = [f"edited {n}" for n in sorted(old.keys() & new.keys()) if old[n] != new[n]]
    changes += [f"added {n}" for n in sorted(new.keys() - old.keys())]
    changes += [f"removed {n}" for n in sorted(old.keys() - new.keys())]
    more = f" and {len(changes) - limit} more" if len(changes) > limit else ""
    return ", ".join(changes[:limit]) + more


__all__ = ["PACKAGES", "StampCheck", "project_root", "source_hash"]
