"""The compiled-module cache: ``compile_hlo`` of a module it compiled before loads its plan
instead of fusing, tiling and generating code again.

What a plan holds, and how it is checked and turned back into compiled fusions, is
``module_plan``'s; the host programs are rebuilt from the module by
``module_runner.host_program`` (cheap: no analysis).  This module keys, stores, finds and
remembers plans:

* **Key**: named components, each a string: the SHA-256 of the module text, the compile
  options (``module_compiler`` names them), the versions of Triton, torch and this package, the
  SHA-256 of this package's own source files (so an edit of the compiler invalidates every
  plan), the kernel template version and the plan format.  A plan stores its components; a
  miss is explained (``FUSION_LOG=debug``) by those that differ from the newest plan of the
  same text.
* **Directory**: ``$FUSION_MODULE_CACHE_DIR``, else ``modules`` inside the kernel cache
  directory, whose kernel files the plans name; a plan is ``<text hash>/<key hash>.json``.
* **Files** are written atomically with the kernel cache's ``# content-sha256:`` header
  (``cache_files``); a plan that fails that check, does not decode or does not fit its module
  is ignored (logged), and the compile that follows rewrites it.
* **In one process** the compiled module itself is kept (the last ``MEMORY_ENTRIES``): a
  repeated ``compile_hlo`` is a dictionary look-up.  Like the kernel cache's dict of loaded
  modules this is pure memoisation: a key names one compiled module.
* **Off**: ``compile_hlo(..., cache=False)``, or ``FUSION_MODULE_CACHE=0`` in the environment.

>>> key = ModuleKey.of("HloModule m", {"target": "cuda:90"})
>>> key.parts()["text"] == content_hash("HloModule m"), key.parts()["target"]
(True, 'cuda:90')
>>> key.differences(ModuleKey.of("HloModule m", {"target": "cuda:80"}))
['target']
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fusion.errors import CacheError
from fusion.logs import get_logger
from triton_backend.runtime import cache_files, kernel_cache, source_stamp
from triton_backend.runtime.cache_files import content_hash
from triton_backend.runtime.module_plan import PLAN_FORMAT, ModulePlan, PlanError, expect_object
from triton_backend.runtime.version import DISTRIBUTION, __version__

#: ``FUSION_MODULE_CACHE=0`` (or off/false/no) turns the cache off.
CACHE_ENV = "FUSION_MODULE_CACHE"
#: Moves the plans (default: ``modules`` in the kernel cache directory).
CACHE_DIR_ENV = cache_files.PLAN_DIR_ENV
#: Compiled modules kept in memory per process.
MEMORY_ENTRIES = 64

_OFF = ("0", "off", "false", "no")

_log = get_logger("triton_backend.module_cache")


def enabled(requested: bool | None = None) -> bool:
    """Whether ``compile_hlo`` uses the cache: ``requested`` when given, else unless
    ``FUSION_MODULE_CACHE`` is ``0``/``off``/``false``/``no``.

    >>> enabled(False), enabled(True)
    (False, True)
    """
    if requested is not None:
        return bool(requested)
    return os.environ.get(CACHE_ENV, "").strip().lower() not in _OFF


def default_cache_dir() -> Path:
    """``$FUSION_MODULE_CACHE_DIR``, else ``modules`` in the kernel cache directory.

    >>> import os
    >>> bool(os.environ.get(CACHE_DIR_ENV)) or default_cache_dir().name == "modules"
    True
    """
    return cache_files.plan_directory()


@functools.cache
def source_hash() -> str:
    """SHA-256 over the paths and bytes of this project's ``.py`` files (``fusion``,
    ``tiling``, ``triton_backend``): any edit of the compiler changes it.

    Hashing every file costs milliseconds, a warm compile's budget: the hash is computed
    once per process (the code that runs is what was imported), and remembered across
    processes in the cache directory (``sources/``) with every file's size and modification
    time (what Python's own bytecode cache trusts) and every folder's modification time (a
    file added, removed or renamed changes its folder's).  Checking that stamp is a stat of
    each path it names, not a walk of the tree; when any differs, the tree is walked and the
    files hashed again (``FUSION_LOG=debug`` names what changed).  An installed wheel is
    hashed by its ``RECORD`` instead (the SHA-256 of every installed file, one read).  The
    first call takes the result of that check from a background thread started when this
    module was imported (``source_stamp.StampCheck``), when it found the stamp holding.

    >>> len(source_hash())
    64
    """
    root, directory = source_stamp.project_root(), default_cache_dir()
    return _PRECHECK.take(root, directory) or source_stamp.source_hash(root, directory,
                                                                      __version__)


# Started on import: the stats run while the rest of the compiler is imported.
_PRECHECK = source_stamp.StampCheck(source_stamp.project_root(), default_cache_dir(), __version__)


@functools.cache
def _versions() -> tuple[tuple[str, str], ...]:
    """Triton's, torch's and this package's versions (read from the imported modules:
    ``importlib.metadata`` costs a millisecond or more per package)."""
    import torch  # torch is loaded by the driver; triton by any kernel, cold or warm
    import triton

    return ((DISTRIBUTION, __version__), ("torch", str(torch.__version__)),
            ("triton", triton.__version__))


def tuning_db_stamp(db: Any) -> str | None:
    """What a tuning database contributes to a key: its path and the SHA-256 of its files
    (``absent`` when there is none); None for an object without a ``path`` (not cacheable)."""
    path = getattr(db, "path", None)
    if path is None:
        return None
    digest = hashlib.sha256()
    present = False
    for suffix in ("", "-wal", "-journal"):
        try:
            digest.update(Path(f"{path}{suffix}").read_bytes())
            present = True
        except OSError:
            digest.update(b"-")
    return f"{path}: {digest.hexdigest() if present else 'absent'}"


@dataclass(frozen=True)
class ModuleKey:
    """The key of a compiled module: named string components; ``digest`` hashes them all."""

    components: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, text: str, options: Mapping[str, str]) -> ModuleKey:
        """The key of module ``text`` compiled with ``options`` in this process's
        environment (versions, source hash, template version, plan format)."""
        parts = {"text": content_hash(text), **options}
        parts.update(_versions())
        parts.update({"source": source_hash(), "template_version": kernel_cache.TEMPLATE_VERSION,
                      "plan_format": PLAN_FORMAT})
        return cls(tuple(sorted(parts.items())))

    def parts(self) -> dict[str, str]:
        return dict(self.components)

    @functools.cached_property
    def digest(self) -> str:
        return content_hash(json.dumps(self.components, ensure_ascii=True))

    def differences(self, other: ModuleKey | Mapping[str, str]) -> list[str]:
        """The component names whose values differ from ``other``'s (or a stored mapping)."""
        mine, theirs = self.parts(), other.parts() if isinstance(other, ModuleKey) else other
        return sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))


class ModuleCache:
    """Plans on disk under ``directory`` (default: ``default_cache_dir()``)."""

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_cache_dir()

    def path_for(self, key: ModuleKey) -> Path:
        return self.directory / key.parts()["text"][:24] / f"{key.digest[:40]}.json"

    def load(self, key: ModuleKey) -> ModulePlan | None:
        """The stored plan for ``key``; None on a miss (logged, and explained at DEBUG) or
        when the stored file is unusable (logged)."""
        path = self.path_for(key)
        text = cache_files.read_entry(path)
        if text is None:
            if os.path.lexists(path):
                _log.info("module cache: ignoring %s: truncated, edited or not a regular file",
                          path)
            else:
                self._explain_miss(key, path)
            return None
        try:
            data = expect_object(json.loads(text.partition("\n")[2]), "plan file")
            stored = _key_of(data)
            if stored != key.parts():
                raise PlanError(f"it is for another key (differs in "
                                f"{', '.join(key.differences(stored))})")
            plan = ModulePlan.from_data(data.get("plan"))
        except (ValueError, RecursionError) as err:  # PlanError and json's errors
            _log.info("module cache: ignoring %s: %s", path, err)
            return None
        _log.info("module cache: hit, plan %s (%d kernels)", path, len(plan.fusions))
        return plan

    def store(self, key: ModuleKey, plan: ModulePlan) -> Path | None:
        """Write the plan atomically; a cache directory that cannot take it is logged, never
        an error of the compile."""
        path = self.path_for(key)
        body = json.dumps({"key": key.parts(), "plan": plan.to_data()}, ensure_ascii=True,
                          separators=(",", ":"))
        try:
            cache_files.write_entry(path, body)
        except (CacheError, OSError) as err:
            _log.warning("module cache: cannot store the plan %s: %s", path, err)
            return None
        _log.debug("module cache: stored %s", path)
        return path

    def _explain_miss(self, key: ModuleKey, path: Path) -> None:
        stored = self._newest_key(path.parent)
        if stored is None:
            _log.info("module cache: miss, no plan of this module text (%s)",
                      key.parts()["text"][:16])
            return
        differing = key.differences(stored)
        _log.info("module cache: miss, a plan of this module text differs in %s",
                  ", ".join(differing))
        for name in differing:
            _log.debug("module cache: key component %r was %s, is %s", name,
                       _short(stored.get(name)), _short(key.parts().get(name)))

    def _newest_key(self, directory: Path) -> dict[str, str] | None:
        try:
            candidates = sorted(directory.glob("*.json"), key=lambda p: p.stat().st_mtime_ns,
                                reverse=True)
        except OSError:
            return None
        for candidate in candidates[:4]:
            text = cache_files.read_entry(candidate)
            if text is None:
                continue
            try:
                return _key_of(expect_object(json.loads(text.partition("\n")[2]), "plan file"))
            except (ValueError, RecursionError):
                continue
        return None


def log_unusable_plan(plan: ModulePlan, error: BaseException) -> None:
    """Say why a plan that decoded could not be rebuilt (the module is compiled again)."""
    _log.info("module cache: ignoring a plan (%d kernels) that does not rebuild: %s: %s",
              len(plan.fusions), type(error).__name__, error)


_MEMORY: OrderedDict[str, Any] = OrderedDict()
_MEMORY_LOCK = threading.Lock()


def _recall(table: OrderedDict, key: Any) -> Any | None:
    """``table[key]`` (now the most recently used), or None."""
    with _MEMORY_LOCK:
        value = table.get(key)
        if value is not None:
            table.move_to_end(key)
    return value


def _keep(table: OrderedDict, key: Any, value: Any) -> None:
    """``table[key] = value``; the least recently used beyond ``MEMORY_ENTRIES`` go."""
    with _MEMORY_LOCK:
        table[key] = value
        table.move_to_end(key)
        while len(table) > MEMORY_ENTRIES:
            table.popitem(last=False)


def remembered(key: ModuleKey) -> Any | None:
    """The compiled module kept in memory for ``key``, or None."""
    compiled = _recall(_MEMORY, key.digest)
    if compiled is not None:
        _log.info("module cache: hit in memory (%s)", key.parts()["text"][:16])
    return compiled


def remember(key: ModuleKey, compiled: Any) -> None:
    """Keep ``compiled`` for ``key`` (the least recently used beyond ``MEMORY_ENTRIES`` go)."""
    _keep(_MEMORY, key.digest, compiled)


#: Fused modules by (module text hash, fusion mode): what the fusion pass made of a text
#: depends on nothing else, so compiles that differ only in target, tiling or tuning (a sweep,
#: the same program for sm_80 and sm_90) fuse it once.
_FUSED: OrderedDict[tuple[str, str], Any] = OrderedDict()


def remembered_fusion(text_hash: str, mode: str) -> Any | None:
    """The fusion pass's result kept for the module text hashed ``text_hash`` in ``mode``."""
    return _recall(_FUSED, (text_hash, mode))


def remember_fusion(text_hash: str, mode: str, fused: Any) -> None:
    """Keep the fusion pass's result (the least recently used beyond ``MEMORY_ENTRIES`` go)."""
    _keep(_FUSED, (text_hash, mode), fused)


def forget_remembered() -> None:
    """Drop every compiled module and fused module kept in memory (tests start each from an
    empty cache)."""
    with _MEMORY_LOCK:
        _MEMORY.clear()
        _FUSED.clear()


def _key_of(data: Mapping[str, Any]) -> dict[str, str]:
    key = expect_object(data.get("key"), "key")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in key.items()):
        raise PlanError("its key components are not strings")
    return dict(key)


def _short(value: str | None, limit: int = 120) -> str:
    if value is None:
        return "absent"
    return repr(value) if len(value) <= limit else repr(value[:limit]) + "..."


__all__ = ["CACHE_DIR_ENV", "CACHE_ENV", "ModuleCache", "ModuleKey", "default_cache_dir", "enabled",
           "forget_remembered", "log_unusable_plan", "remember", "remembered", "source_hash",
           "tuning_db_stamp"]
