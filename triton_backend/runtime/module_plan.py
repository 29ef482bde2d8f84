"""A compile's decisions as plain data: the plans the module cache stores and loads.

A **plan** (:class:`ModulePlan`) is plain data (JSON, never plain pickle: the cache directory
must not become a way to run code): the fused module's HLO text and either its source
locations or its snapshot (``ir_snapshot``: the module as bytes that name only IR classes,
loaded several times faster than the text parses; also kept for a module run as given), each
launched fusion's kernel file (:class:`FusionPlan`: its name in the kernel cache and the
SHA-256 of its body), grid, tile sizes, tiling reason and reduction chunk, or the library call
it runs as (:class:`LibraryPlan`), and how the module was fused (mode, fallbacks, decisions).
Loading a plan decodes (else parses) the fused module and checks each kernel file's body
against the recorded hash (``cache_files.read_entry``): a kernel file that is missing,
truncated or edited is never run, the plan is unusable and the module is compiled again.  The checked text is imported at the kernel's first launch
(:class:`CheckedKernel`).  Decoding trusts nothing: a value of the wrong type or form is a
:class:`PlanError`.

Apart from ``module_cache``, which keys, stores, finds and remembers plans: this module is
what a plan holds and how it turns back into compiled fusions.

>>> plan = FusionPlan.from_data({"name": "f", "kind": "loop", "kernel_file": "kernel_" + "0" * 40
...                              + ".py", "kernel_sha256": "0" * 64, "grid": [4],
...                              "tile_sizes": [256], "tiling_reason": "default",
...                              "reduction_chunk": None})
>>> plan.grid, FusionPlan.from_data(plan.to_data()) == plan
((4,), True)
"""
from __future__ import annotations

import base64
import binascii
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from types import ModuleType
from typing import Any

from fusion.ir.hlo_module import HloModule, SourceLocation
from fusion.logs import get_logger
from fusion.text.parser import parse_hlo
from fusion.text.printer import print_hlo
from tiling.fusion_pass.decisions import FusionDecision
from triton_backend.runtime import cache_files, ir_snapshot, kernel_cache
from triton_backend.runtime.cache_files import SHA256_HEX, content_hash
from triton_backend.runtime.complex_fusion import ComplexPairFusion
from triton_backend.runtime.kernel_loading import CompiledFusion, LibraryCall, kernel_kind

#: Bump when the plan's data or its meaning changes.
PLAN_FORMAT = "4"

_KERNEL_FILE = re.compile(r"kernel_[0-9a-f]{40}\.py")

_log = get_logger("triton_backend.module_cache")


class PlanError(ValueError):
    """A stored plan that does not decode, or does not fit the module it is for."""


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
        return cls(compiled.fusion_name, compiled.kind.value, compiled.kernel_path.name,
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
        compiled = CompiledFusion(self.name, kernel_kind(self.kind), path, text.partition("\n")[2],
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
        data = expect_object(data, "fusion")
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


@dataclass(frozen=True)
class LibraryPlan:
    """A fusion run as a library call (``LibraryCall``) as data: its name, kind, why the
    library runs it and what else it was decided from (``LibraryCall.plan_decisions``: JSON
    scalars by name).  Loading makes the call again from the module (``ModulePlan.
    load_fusions``'s ``library``): a few reads of one op, no analysis and no code generation.

    >>> plan = LibraryPlan("f", "sort", "rows of 5000 elements", (("descending", True),))
    >>> LibraryPlan.from_data(plan.to_data()) == plan
    True
    """

    name: str
    kind: str
    reason: str
    decisions: tuple[tuple[str, str | bool | int | None], ...] = ()

    @classmethod
    def of(cls, compiled: Any) -> LibraryPlan:
        return cls(compiled.fusion_name, compiled.kind.value, compiled.reason,
                   tuple(sorted(compiled.plan_decisions().items())))

    def to_data(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "library_reason": self.reason,
                "decisions": dict(self.decisions)}

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> LibraryPlan:
        decisions = expect_object(data.get("decisions", {}), "decisions")
        if not all(v is None or isinstance(v, (str, bool, int)) for v in decisions.values()):
            raise PlanError("a library call's decisions are not JSON scalars")
        return cls(_text(data.get("name"), "name"), _text(data.get("kind"), "kind"),
                   _text(data.get("library_reason"), "library_reason"),
                   tuple(sorted(decisions.items())))


#: Makes a library call again: ``(module, plan) -> LibraryCall``, ``PlanError`` when the
#: module's fusion is not the call the plan names.
LibraryMaker = Callable[[HloModule, LibraryPlan], LibraryCall]


def _fusion_plan(compiled: Any) -> FusionPlan | LibraryPlan | None:
    """The plan of one compiled fusion; None when the plan format cannot hold it."""
    if isinstance(compiled, LibraryCall):
        return LibraryPlan.of(compiled)
    return FusionPlan.of(compiled)


def _fusion_plan_from_data(data: Any) -> FusionPlan | LibraryPlan:
    data = expect_object(data, "fusion")
    if "library_reason" in data:
        return LibraryPlan.from_data(data)
    return FusionPlan.from_data(data)


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
    (``(computation, instruction or None, line, column)``), which its printed text loses;
    ``snapshot`` the module that runs (fused or given) as ``ir_snapshot`` bytes, locations
    included (then ``locations`` is empty), or None when it holds a value the snapshot cannot.
    """

    module_text: str | None
    locations: tuple[tuple[str, str | None, int, int], ...]
    fusions: tuple[FusionPlan | LibraryPlan, ...]
    fusion_mode: str
    fusion_fallbacks: tuple[str, ...]
    decisions: tuple[FusionDecision, ...]
    snapshot: bytes | None = None

    @classmethod
    def of(cls, module: HloModule, source: HloModule, fusions: Mapping[str, Any],
           fusion_mode: str, fusion_fallbacks: Iterable[str],
           decisions: Iterable[Any]) -> ModulePlan | None:
        """The plan of a compile; None when part of it cannot be stored as data."""
        planned = tuple(_fusion_plan(f) for f in fusions.values())
        decisions = tuple(decisions)
        if any(p is None for p in planned) \
                or any(type(d) is not FusionDecision for d in decisions):
            return None
        if _same_module(module, source):
            text, locations = None, ()
        else:
            text, locations = print_hlo(module), _locations_of(module)
        snapshot = ir_snapshot.encode(module)
        if snapshot is not None:
            locations = ()
        return cls(text, locations, planned, fusion_mode, tuple(fusion_fallbacks), decisions,
                   snapshot)

    def module(self, source: HloModule) -> HloModule:
        """The module that runs: ``source``, or the fused module (its snapshot decoded, else
        its text parsed and its locations restored)."""
        if self.module_text is None:
            return source
        if self.snapshot is not None:
            return self.snapshot_module()
        return _with_locations(parse_hlo(self.module_text), self.locations)

    def snapshot_module(self) -> HloModule:
        """The module the snapshot holds (the given one when ``module_text`` is None);
        ``PlanError`` without one, or when it does not decode."""
        if self.snapshot is None:
            raise PlanError("it holds no module snapshot")
        try:
            return ir_snapshot.decode(self.snapshot)
        except ir_snapshot.SnapshotError as err:
            raise PlanError(str(err)) from None

    def load_fusions(self, kernel_dir: Path, module: HloModule,
                     library: LibraryMaker) -> dict[str, CompiledFusion | LibraryCall] | None:
        """Every fusion of ``module`` (the one that runs): its kernel file checked, or its
        library call made again by ``library``; None if a kernel file is unusable."""
        out: dict[str, CompiledFusion | LibraryCall] = {}
        for plan in self.fusions:
            compiled = library(module, plan) if isinstance(plan, LibraryPlan) \
                else plan.load(kernel_dir)
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
                               d.bytes_saved, d.kind] for d in self.decisions],
                "snapshot": None if self.snapshot is None
                else base64.b64encode(self.snapshot).decode("ascii")}

    @classmethod
    def from_data(cls, data: Any) -> ModulePlan:
        """The plan in ``data`` (decoded JSON); ``PlanError`` when anything is off."""
        data = expect_object(data, "plan")
        text, snapshot = data.get("module_text"), data.get("snapshot")
        if snapshot is not None:
            try:
                snapshot = base64.b64decode(_text(snapshot, "snapshot"), validate=True)
            except binascii.Error as err:
                raise PlanError(f"snapshot is not base64: {err}") from None
        return cls(None if text is None else _text(text, "module_text"),
                   tuple(_location(v) for v in _list(data.get("locations"), "locations")),
                   tuple(_fusion_plan_from_data(v) for v in _list(data.get("fusions"), "fusions")),
                   _text(data.get("fusion_mode"), "fusion_mode"),
                   tuple(_text(v, "fallback") for v in _list(data.get("fusion_fallbacks"),
                                                              "fusion_fallbacks")),
                   tuple(_decision(v) for v in _list(data.get("decisions"), "decisions")),
                   snapshot)


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


def expect_object(value: Any, what: str) -> Mapping[str, Any]:
    """``value`` when it is a JSON object, else a ``PlanError`` naming ``what``."""
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


__all__ = ["PLAN_FORMAT", "CheckedKernel", "FusionPlan", "LibraryMaker", "LibraryPlan",
           "ModulePlan", "PlanError", "expect_object"]
