"""The compiled-module cache: ``compile_hlo`` of a module it compiled before loads its plan
instead of fusing, tiling and generating code again.

A **plan** is plain data (JSON, never pickle: the cache directory must not become a way to run
code): the fused module's HLO text and its source locations, each launched fusion's kernel file
(its name in the kernel cache and the SHA-256 of its body), grid, tile sizes, tiling reason and
reduction chunk, and how the module was fused (mode, fallbacks, decisions).  Loading a plan
parses the fused module and checks each kernel file's body against the recorded hash
(``cache_files.read_entry``): a kernel file that is missing, truncated or edited is never
run, the plan is unusable and the module is compiled again.  The checked text is imported at
the kernel's first launch (``CheckedKernel``).  The host
programs are rebuilt from the module by ``module_runner.host_program`` (cheap: no analysis).

* **Key**: named components, each a string: the SHA-256 of the module text, the compile
  options (``module_compiler`` names them), the versions of Triton, torch and this package, the
  SHA-256 of this package's own source files (so an edit of the compiler invalidates every
  plan), the kernel template version and the plan format.  A plan stores its components; a
  miss is explained (``FUSION_LOG=debug``) by those that differ from the newest plan of the
  same text.
* **Directory**: ``$FUSION_MODULE_CACHE_DIR``, else ``modules`` inside the kernel cache
  directory, whose kernel files the plans name; a plan is ``<text hash>/<key hash>.json``.
* **Files** are written atomically with the kernel cache's ``# content-sha256:`` header; a plan
  that fails that check, does not decode or does not fit its module is ignored (logged), and
  the compile that follows rewrites it.
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
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from types import ModuleType
from typing import Any

from fusion.errors import CacheError
from fusion.ir.hlo_module import HloModule, SourceLocation
from fusion.logs import get_logger
from fusion.text.parser import parse_hlo
from fusion.text.printer import print_hlo
from tiling.fusion_pass.decisions import FusionDecision
from triton_backend.runtime.complex_fusion import ComplexPairFusion
from triton_backend.runtime import source_stamp
from triton_backend.runtime.version import DISTRIBUTION, __version__
from triton_backend.runtime.kernel_loading import CompiledFusion
from triton_backend.runtime import cache_files, kernel_cache
from triton_backend.runtime.cache_files import SHA256_HEX, content_hash

#: ``FUSION_MODULE_CACHE=0`` (or off/false/no) turns the cache off.
CACHE_ENV = "FUSION_MODULE_CACHE"
#: Moves the plans (default: ``modules`` in the kernel cache directory).
CACHE_DIR_ENV = "FUSION_MODULE_CACHE_DIR"
#: Bump when the plan's data or its meaning changes.
PLAN_FORMAT = "2"
#: Compiled modules kept in memory per process.
MEMORY_ENTRIES = 64

_KERNEL_FILE = re.compile(r"kernel_[0-9a-f]{40}\.py")
_OFF = ("0", "off", "false", "no")

_log = get_logger("triton_backend.module_cache")


class PlanError(ValueError):
    """A stored plan that does not decode, or does not fit the module it is for."""


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
    explicit = os.environ.get(CACHE_DIR_ENV)
    if explicit:
        return Path(explicit).expanduser()
    return cache_files.default_cache_dir() / "modules"


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
    hashed by its ``RECORD`` instead (the SHA-256 of every installed file, one read).

    >>> len(source_hash())
    64
    """
    return source_stamp.source_hash(source_stamp.project_root(), default_cache_dir(),
                                    __version__)


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


@dataclass(frozen=True)
class FusionPlan:
    """A ``CompiledFusion`` as data: its kernel file by name and body hash, and the rest."""

    name: str
    kind: str
    kernel_file: str
    kernel_sha256: str
    grid: tuple[int, ...]
    tile_sizes: tuple[int, ...]
    tiling_reason: str
    reduction_chunk: int | None
    #: A complex fusion run as pairs of floats (``ComplexPairFusion``): per operand and per
    #: output, whether it is complex; None for a plain fusion.
    complex_parts: tuple[tuple[bool, ...], tuple[bool, ...]] | None = None

    @classmethod
    def of(cls, compiled: Any) -> FusionPlan | None:
        """The plan of ``compiled``; None when it is not a ``CompiledFusion`` (or a
        ``ComplexPairFusion``) this plan format can hold (a new field would be lost)."""
        if _fusion_fields() != _PLANNED_FIELDS:
            return None
        if type(compiled) is ComplexPairFusion:
            if _complex_fields() != _PLANNED_COMPLEX_FIELDS:
                return None
            parts = (tuple(compiled.operand_parts), tuple(compiled.output_parts))
        elif type(compiled) is CompiledFusion:
            parts = None
        else:
            return None
        return cls(compiled.fusion_name, compiled.kind, compiled.kernel_path.name,
                   content_hash(cache_files.canonical_source(compiled.source)),
                   tuple(compiled.grid), tuple(compiled.tile_sizes), compiled.tiling_reason,
                   compiled.reduction_chunk, parts)

    def load(self, kernel_dir: Path) -> CompiledFusion | None:
        """The compiled fusion, its kernel file checked against the plan now and imported,
        from the checked text, when first used (``CheckedKernel``); None (nothing run) when
        the file is missing, truncated or edited."""
        path = kernel_dir / self.kernel_file
        text = cache_files.read_entry(path, self.kernel_sha256)
        if text is None:
            _log.info("module cache: kernel file %s of fusion %s is missing or does not match "
                      "the plan; compiling again", path, self.name)
            return None
        compiled = CompiledFusion(self.name, self.kind, path, text.partition("\n")[2],
                                  self.grid, self.tile_sizes, CheckedKernel(path, text),
                                  self.tiling_reason, self.reduction_chunk)
        if self.complex_parts is None:
            return compiled
        return ComplexPairFusion.of(compiled, *self.complex_parts)

    def to_data(self) -> dict[str, Any]:
        data = {"name": self.name, "kind": self.kind, "kernel_file": self.kernel_file,
                "kernel_sha256": self.kernel_sha256, "grid": list(self.grid),
                "tile_sizes": list(self.tile_sizes), "tiling_reason": self.tiling_reason,
                "reduction_chunk": self.reduction_chunk}
        if self.complex_parts is not None:
            data["complex_parts"] = [list(p) for p in self.complex_parts]
        return data

    @classmethod
    def from_data(cls, data: Any) -> FusionPlan:
        data = _mapping(data, "fusion")
        kernel_file = _text(data.get("kernel_file"), "kernel_file")
        digest = _text(data.get("kernel_sha256"), "kernel_sha256")
        # Only a file name of the kernel cache's own form: never a path out of its directory.
        if not _KERNEL_FILE.fullmatch(kernel_file) or not SHA256_HEX.fullmatch(digest):
            raise PlanError(f"kernel file {kernel_file!r} or hash {digest!r} is malformed")
        chunk = data.get("reduction_chunk")
        parts = data.get("complex_parts")
        if parts is not None:
            parts = _list(parts, "complex_parts")
            if len(parts) != 2:
                raise PlanError("complex_parts is not [operand parts, output parts]")
            parts = tuple(_bools(p, "complex_parts") for p in parts)
        return cls(_text(data.get("name"), "name"), _text(data.get("kind"), "kind"), kernel_file,
                   digest, _ints(data.get("grid"), "grid"),
                   _ints(data.get("tile_sizes"), "tile_sizes"),
                   _text(data.get("tiling_reason"), "tiling_reason"),
                   None if chunk is None else _int(chunk, "reduction_chunk"), parts)


class CheckedKernel(ModuleType):
    """A kernel file's module, imported when first used from the text checked against the
    plan: what runs is that text, whatever the file holds by then.

    Importing a kernel (under the Triton interpreter: also rewriting it) costs about as much
    as generating it, so a warm compile leaves it to the first launch; every attribute the
    proxy lacks is the imported module's.

    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "kernel_demo.py"
    >>> kernel = CheckedKernel(path, "VALUE = 6 * 7\\n")
    >>> kernel.VALUE, path.exists()
    (42, False)
    """

    def __init__(self, path: Path, text: str) -> None:
        super().__init__(f"_fusion_kernel_{path.stem}")
        self.__file__ = str(path)
        self._checked = (path, text)
        self._imported: ModuleType | None = None
        self._import_lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)  # protocol probes (copy, pickle) import nothing
        return getattr(self.imported(), name)

    def imported(self) -> ModuleType:
        """The module, imported on the first call."""
        with self._import_lock:
            if self._imported is None:
                path, text = self._checked
                self._imported = kernel_cache.import_checked_text(path, text, self.__name__)
            return self._imported


_PLANNED_FIELDS = ("fusion_name", "kind", "kernel_path", "source", "grid", "tile_sizes",
                   "module", "tiling_reason", "reduction_chunk")


_PLANNED_COMPLEX_FIELDS = _PLANNED_FIELDS + ("operand_parts", "output_parts")


def _fusion_fields() -> tuple[str, ...]:
    return tuple(f.name for f in fields(CompiledFusion))


def _complex_fields() -> tuple[str, ...]:
    return tuple(f.name for f in fields(ComplexPairFusion))


@dataclass(frozen=True)
class ModulePlan:
    """What ``compile_hlo`` decided for a module, as data.

    ``module_text`` is the fused module (None: the module given runs as it is);
    ``locations`` the source locations of its computations and instructions
    (``(computation, instruction or None, line, column)``), which its printed text loses.
    """

    module_text: str | None
    locations: tuple[tuple[str, str | None, int, int], ...]
    fusions: tuple[FusionPlan, ...]
    fusion_mode: str
    fusion_fallbacks: tuple[str, ...]
    decisions: tuple[FusionDecision, ...]

    @classmethod
    def of(cls, module: HloModule, source: HloModule, fusions: Mapping[str, Any],
           fusion_mode: str, fusion_fallbacks: Iterable[str],
           decisions: Iterable[Any]) -> ModulePlan | None:
        """The plan of a compile; None when part of it cannot be stored as data."""
        planned = tuple(FusionPlan.of(f) for f in fusions.values())
        decisions = tuple(decisions)
        if any(p is None for p in planned) \
                or any(type(d) is not FusionDecision for d in decisions):
            return None
        if _same_module(module, source):
            text, locations = None, ()
        else:
            text, locations = print_hlo(module), _locations_of(module)
        return cls(text, locations, planned, fusion_mode, tuple(fusion_fallbacks), decisions)

    def module(self, source: HloModule) -> HloModule:
        """The module that runs: ``source``, or the fused text parsed, its locations restored."""
        if self.module_text is None:
            return source
        return _with_locations(parse_hlo(self.module_text), self.locations)

    def load_fusions(self, kernel_dir: Path) -> dict[str, CompiledFusion] | None:
        """Every fusion, its kernel file checked; None if one is unusable."""
        out: dict[str, CompiledFusion] = {}
        for plan in self.fusions:
            compiled = plan.load(kernel_dir)
            if compiled is None:
                return None
            out[plan.name] = compiled
        return out

    def to_data(self) -> dict[str, Any]:
        return {"module_text": self.module_text,
                "locations": [list(loc) for loc in self.locations],
                "fusions": [f.to_data() for f in self.fusions],
                "fusion_mode": self.fusion_mode,
                "fusion_fallbacks": list(self.fusion_fallbacks),
                "decisions": [[d.computation, d.producer, list(d.consumers), d.fused, d.reason,
                               d.bytes_saved, d.kind] for d in self.decisions]}

    @classmethod
    def from_data(cls, data: Any) -> ModulePlan:
        """The plan in ``data`` (decoded JSON); ``PlanError`` when anything is off."""
        data = _mapping(data, "plan")
        text = data.get("module_text")
        return cls(None if text is None else _text(text, "module_text"),
                   tuple(_location(v) for v in _list(data.get("locations"), "locations")),
                   tuple(FusionPlan.from_data(v) for v in _list(data.get("fusions"), "fusions")),
                   _text(data.get("fusion_mode"), "fusion_mode"),
                   tuple(_text(v, "fallback") for v in _list(data.get("fusion_fallbacks"),
                                                              "fusion_fallbacks")),
                   tuple(_decision(v) for v in _list(data.get("decisions"), "decisions")))


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
            data = _mapping(json.loads(text.partition("\n")[2]), "plan file")
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
                return _key_of(_mapping(json.loads(text.partition("\n")[2]), "plan file"))
            except (ValueError, RecursionError):
                continue
        return None


def log_unusable_plan(plan: ModulePlan, error: BaseException) -> None:
    """Say why a plan that decoded could not be rebuilt (the module is compiled again)."""
    _log.info("module cache: ignoring a plan (%d kernels) that does not rebuild: %s: %s",
              len(plan.fusions), type(error).__name__, error)


_MEMORY: OrderedDict[str, Any] = OrderedDict()
_MEMORY_LOCK = threading.Lock()


def remembered(key: ModuleKey) -> Any | None:
    """The compiled module kept in memory for ``key``, or None."""
    with _MEMORY_LOCK:
        compiled = _MEMORY.get(key.digest)
        if compiled is not None:
            _MEMORY.move_to_end(key.digest)
    if compiled is not None:
        _log.info("module cache: hit in memory (%s)", key.parts()["text"][:16])
    return compiled


def remember(key: ModuleKey, compiled: Any) -> None:
    """Keep ``compiled`` for ``key`` (the least recently used beyond ``MEMORY_ENTRIES`` go)."""
    with _MEMORY_LOCK:
        _MEMORY[key.digest] = compiled
        _MEMORY.move_to_end(key.digest)
        while len(_MEMORY) > MEMORY_ENTRIES:
            _MEMORY.popitem(last=False)


def forget_remembered() -> None:
    """Drop every compiled module kept in memory (tests start each from an empty cache)."""
    with _MEMORY_LOCK:
        _MEMORY.clear()


def _same_module(module: HloModule, source: HloModule) -> bool:
    """``module`` is ``source`` computation for computation (so also in its locations)."""
    return module is source or (
        len(module.computations) == len(source.computations)
        and all(a is b for a, b in zip(module.computations, source.computations))
        and (module.name, module.entry_name, module.attributes, module.stack_frames)
        == (source.name, source.entry_name, source.attributes, source.stack_frames))


def _locations_of(module: HloModule) -> tuple[tuple[str, str | None, int, int], ...]:
    out: list[tuple[str, str | None, int, int]] = []
    for comp in module.computations:
        if comp.location is not None:
            out.append((comp.name, None, comp.location.line, comp.location.column))
        out.extend((comp.name, i.name, i.location.line, i.location.column)
                   for i in comp.instructions if i.location is not None)
    return tuple(out)


def _with_locations(module: HloModule,
                    locations: Iterable[tuple[str, str | None, int, int]]) -> HloModule:
    """``module`` (parsed from printed text) with the original source locations."""
    by_comp: dict[str, dict[str | None, SourceLocation]] = {}
    for comp, instr, line, column in locations:
        by_comp.setdefault(comp, {})[instr] = SourceLocation(line, column)
    comps = []
    for comp in module.computations:
        where = by_comp.get(comp.name, {})
        comps.append(replace(comp, location=where.get(None), instructions=tuple(
            i.replace(location=where.get(i.name)) for i in comp.instructions)))
    return replace(module, computations=tuple(comps))


def _key_of(data: Mapping[str, Any]) -> dict[str, str]:
    key = _mapping(data.get("key"), "key")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in key.items()):
        raise PlanError("its key components are not strings")
    return dict(key)


def _short(value: str | None, limit: int = 120) -> str:
    if value is None:
        return "absent"
    return repr(value) if len(value) <= limit else repr(value[:limit]) + "..."


def _mapping(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise PlanError(f"{what} is not an object")
    return value


def _list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise PlanError(f"{what} is not a list")
    return value


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise PlanError(f"{what} is not a string")
    return value


def _int(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise PlanError(f"{what} is not an integer")
    return value


def _ints(value: Any, what: str) -> tuple[int, ...]:
    return tuple(_int(v, what) for v in _list(value, what))


def _bools(value: Any, what: str) -> tuple[bool, ...]:
    items = _list(value, what)
    if not all(isinstance(v, bool) for v in items):
        raise PlanError(f"{what} is not a list of booleans")
    return tuple(items)


def _location(value: Any) -> tuple[str, str | None, int, int]:
    items = _list(value, "location")
    if len(items) != 4:
        raise PlanError("a location is not [computation, instruction, line, column]")
    comp, instr, line, column = items
    return (_text(comp, "location"), None if instr is None else _text(instr, "location"),
            _int(line, "location"), _int(column, "location"))


def _decision(value: Any) -> FusionDecision:
    items = _list(value, "decision")
    if len(items) != 7 or not isinstance(items[3], bool):
        raise PlanError("a fusion decision is not [computation, producer, consumers, fused, "
                        "reason, bytes_saved, kind]")
    computation, producer, consumers, fused, reason, saved, kind = items
    return FusionDecision(_text(computation, "decision"), _text(producer, "decision"),
                          tuple(_text(c, "decision") for c in _list(consumers, "decision")),
                          fused, _text(reason, "decision"), _int(saved, "decision"),
                          _text(kind, "decision"))


__all__ = ["CACHE_DIR_ENV", "CACHE_ENV", "CheckedKernel", "FusionPlan", "ModuleCache", "ModuleKey", "ModulePlan",
           "PlanError", "default_cache_dir", "enabled", "forget_remembered", "log_unusable_plan",
           "remember",
           "remembered", "source_hash", "tuning_db_stamp"]
