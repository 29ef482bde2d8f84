"""Autotuning results that persist: a small SQLite database keyed by fusion fingerprint + device.

The key of a fusion is its **fingerprint**: the fused computation (and the computations it
calls) printed with positional names and without metadata, so two dumps of the same program
with different instruction names or source locations hit the same entry, plus the operand
and output shapes with layouts (what the tiling depends on).  The device and the Triton
version complete the key.  A miss can be explained: the nearest stored entry (same
computation, else same shapes, else anything) and which key parts differ.

* Location: ``$FUSION_TUNING_DB`` if set, else ``$XDG_CACHE_HOME/hlo-triton-fusion/tuning.sqlite``
  (``~/.cache`` without XDG).
* SQLite gives atomic writes and safe concurrent readers; each call opens its own connection,
  so a ``TuningDb`` can be shared by threads.

>>> import tempfile, os
>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... f {
...   p = f32[8] parameter(0)
...   ROOT n = f32[8] negate(p)
... }
... ENTRY e {
...   x = f32[8] parameter(0)
...   ROOT r = f32[8] fusion(x), kind=kLoop, calls=f
... }''')
>>> db = TuningDb(os.path.join(tempfile.mkdtemp(), "t.sqlite"))
>>> key = fusion_key(m, "r", "h100")
>>> db.get(key) is None
True
>>> db.put(key, {"tile_sizes": [8], "num_warps": 1})
>>> db.get(key)["tile_sizes"]
[8]
"""
from __future__ import annotations

import difflib
import hashlib
import importlib.metadata
import json
import os
import re
import sqlite3
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from fusion.ir.call_graph import reachable_computations
from fusion.ir.hlo_module import CALLED_COMPUTATION_KEYS, HloComputation, HloInstruction, HloModule
from fusion.text.printer import print_computation, print_shape
from fusion.ir.shape import ArrayShape, TupleShape
from triton_backend.runtime.cache_files import make_cache_directory, user_cache_path
from fusion.errors import BadArgumentError, CacheError

DB_ENV = "FUSION_TUNING_DB"
_DROPPED_ATTRIBUTES = frozenset({"metadata", "frontend_attributes", "statistics"})
_PARTS = ("computation", "shapes", "device", "triton")
#: ``TuningDb.export_json``'s format name and version (``fusion-compile tuning export``).
EXPORT_FORMAT = "hlo-triton-fusion tuning database"
EXPORT_VERSION = 1


@dataclass(frozen=True)
class FusionKey:
    """The parts of a tuning-database key; ``fingerprint`` hashes computation and shapes."""

    computation: str
    shapes: str
    device: str
    triton: str

    @property
    def fingerprint(self) -> str:
        text = json.dumps([self.computation, self.shapes], ensure_ascii=True)
        return hashlib.sha256(text.encode()).hexdigest()

    def parts(self) -> dict[str, str]:
        return {name: getattr(self, name) for name in _PARTS}


def default_db_path() -> Path:
    return user_cache_path(DB_ENV, "tuning.sqlite")


def find_fusion(module: HloModule, fusion: HloInstruction | str) -> HloInstruction:
    """The fusion instruction named ``fusion`` (or ``fusion`` itself); a located error if absent."""
    if isinstance(fusion, HloInstruction):
        return fusion
    names = []
    for _, instr in module.fusions():
        if instr.name == fusion:
            return instr
        names.append(instr.name)
    close = difflib.get_close_matches(str(fusion), names, n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise BadArgumentError(f"module {module.name} has no fusion named {fusion!r}{hint}; "
                           f"fusions: {', '.join(names) or 'none'}", where=str(fusion))


def canonical_fusion_text(module: HloModule, fusion_instr: HloInstruction) -> str:
    """The fused computation and its callees, renamed positionally, without metadata.

    >>> from fusion.text.parser import parse_hlo
    >>> m = parse_hlo('''HloModule m
    ... fused_abc {
    ...   param_0.7 = f32[8] parameter(0), metadata={op_name="x"}
    ...   ROOT neg.3 = f32[8] negate(param_0.7)
    ... }
    ... ENTRY e {
    ...   x = f32[8] parameter(0)
    ...   ROOT r = f32[8] fusion(x), kind=kLoop, calls=fused_abc
    ... }''')
    >>> print(canonical_fusion_text(m, m.entry.root))
    c0 {
      v0 = f32[8] parameter(0)
      ROOT v1 = f32[8] negate(v0)
    }
    """
    # Callees stacked in reverse so that they are visited, and numbered, in call order.
    names = reachable_computations(module, fusion_instr.attr("calls"),
                                   lambda instr: reversed(instr.called_computations()))
    comp_names = {name: f"c{i}" for i, name in enumerate(names)}
    texts = []
    for name in names:
        comp = module.computation(name)
        texts.append(print_computation(_renamed(comp, comp_names), is_entry=False))
    return "\n".join(texts)


def _renamed(comp: HloComputation, comp_names: Mapping[str, str]) -> HloComputation:
    values = {instr.name: f"v{i}" for i, instr in enumerate(comp.instructions)}
    instructions = []
    for instr in comp.instructions:
        attributes = []
        for key, value in instr.attributes:
            if key in _DROPPED_ATTRIBUTES:
                continue
            if key in CALLED_COMPUTATION_KEYS:
                value = (tuple(comp_names.get(v, v) for v in value) if isinstance(value, tuple)
                         else comp_names.get(value, value))
            attributes.append((key, value))
        instructions.append(instr.replace(
            name=values[instr.name], operands=tuple(values.get(o, o) for o in instr.operands),
            attributes=tuple(attributes), location=None))
    return HloComputation(comp_names[comp.name], tuple(instructions), values[comp.root_name])


def fusion_key(module: HloModule, fusion: HloInstruction | str, device: str) -> FusionKey:
    """The database key of ``fusion`` (an instruction of ``module`` or its name) on ``device``."""
    instr = find_fusion(module, fusion)
    comp = module.computation(instr.attr("calls"))
    shapes = ", ".join(_shape_text(p.shape) for p in comp.parameters)
    shapes = f"({shapes}) -> {_shape_text(instr.shape)}"
    try:
        triton_version = importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        triton_version = "not-installed"
    return FusionKey(canonical_fusion_text(module, instr), shapes, device, triton_version)


def _shape_text(shape) -> str:
    # ``f32[8]`` and ``f32[8]{0}`` are the same buffer: print the effective layout always.
    if isinstance(shape, ArrayShape):
        return print_shape(shape.with_layout(shape.effective_layout))
    if isinstance(shape, TupleShape):
        return "(" + ", ".join(_shape_text(e) for e in shape.elements) + ")"
    return print_shape(shape)


_SCHEMA = """CREATE TABLE IF NOT EXISTS tuning (
    fingerprint TEXT NOT NULL, device TEXT NOT NULL, triton TEXT NOT NULL,
    computation TEXT NOT NULL, shapes TEXT NOT NULL, result TEXT NOT NULL, created REAL NOT NULL,
    PRIMARY KEY (fingerprint, device, triton))"""


class TuningDb:
    """The database file; ``get``/``put`` by :class:`FusionKey`, ``explain_miss`` on a miss."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path) if path is not None else default_db_path()

    def _connect(self) -> sqlite3.Connection:
        """A connection with the table made; a ``CacheError`` naming the file when it cannot
        be used (a file where its directory should be, not a database, read-only, full)."""
        make_cache_directory(self.path.parent, DB_ENV, "tuning database's directory")
        try:
            if self.path.exists() and not stat.S_ISREG(self.path.stat().st_mode):
                # sqlite would open a FIFO and block, or fail obscurely on anything else.
                raise CacheError(f"the tuning database is not a regular file; remove it or set "
                                 f"{DB_ENV}", where=str(self.path))
            connection = sqlite3.connect(self.path, timeout=30)
        except (OSError, sqlite3.Error) as err:
            raise self._error("cannot open", err) from None
        try:
            with connection:
                connection.execute(_SCHEMA)
        except sqlite3.Error as err:
            connection.close()
            raise self._error("cannot use", err) from None
        return connection

    def _error(self, what: str, err: Exception) -> CacheError:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        return CacheError(f"{what} the tuning database: {reason}; set {DB_ENV} to a writable "
                          "file", where=str(self.path))

    def get(self, key: FusionKey) -> dict[str, Any] | None:
        """The stored result for ``key``, or None."""
        with self._connect() as connection:
            row = connection.execute(
                "SELECT result FROM tuning WHERE fingerprint=? AND device=? AND triton=?",
                (key.fingerprint, key.device, key.triton)).fetchone()
        return json.loads(row[0]) if row else None

    def put(self, key: FusionKey, result: Mapping[str, Any]) -> None:
        """Store (or replace) the result for ``key``; ``result`` must be JSON-serialisable."""
        payload = json.dumps(dict(result), sort_keys=True)
        connection = self._connect()
        try:
            # One transaction: committed whole, or rolled back (SQLite's journal keeps the file
            # consistent through a crash or a full disk).
            with connection:
                connection.execute(
                    "INSERT OR REPLACE INTO tuning VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (key.fingerprint, key.device, key.triton, key.computation, key.shapes,
                     payload, time.time()))
        except sqlite3.Error as err:
            raise self._error("cannot write to", err) from None
        finally:
            connection.close()

    def entries(self) -> list[tuple[FusionKey, dict[str, Any]]]:
        with self._connect() as connection:
            rows = connection.execute(
                "SELECT computation, shapes, device, triton, result FROM tuning "
                "ORDER BY created DESC").fetchall()
        return [(FusionKey(c, s, d, t), json.loads(r)) for c, s, d, t, r in rows]

    def rows(self) -> list[dict[str, Any]]:
        """Every entry as plain data (newest first): the key parts, its fingerprint, the
        stored result and when it was stored (seconds since the epoch)."""
        if not self.path.exists():
            return []
        with self._connect() as connection:
            rows = connection.execute(
                "SELECT computation, shapes, device, triton, result, created FROM tuning "
                "ORDER BY created DESC").fetchall()
        return [{"fingerprint": FusionKey(c, s, d, t).fingerprint, "device": d, "triton": t,
                 "shapes": s, "computation": c, "result": json.loads(r), "created": created}
                for c, s, d, t, r, created in rows]

    def export_json(self) -> dict[str, Any]:
        """The whole database as a JSON object that ``import_json`` reads on another machine."""
        return {"format": EXPORT_FORMAT, "schema_version": EXPORT_VERSION,
                "entries": [{k: row[k] for k in (*_PARTS, "result", "created")}
                            for row in self.rows()]}

    def import_json(self, data: Mapping[str, Any], where: str = "import") -> int:
        """Store the entries of an ``export_json`` object (a newer stored entry of the same
        key is kept); returns how many were written.  A malformed object is a ``CacheError``."""
        if not isinstance(data, Mapping) or data.get("format") != EXPORT_FORMAT:
            raise CacheError(f"not a tuning-database export (expected \"format\": "
                             f"\"{EXPORT_FORMAT}\")", where=where)
        if data.get("schema_version") != EXPORT_VERSION:
            raise CacheError(f"unsupported export schema_version {data.get('schema_version')!r}"
                             f" (this version reads {EXPORT_VERSION})", where=where)
        entries = data.get("entries")
        if not isinstance(entries, list):
            raise CacheError("an export needs a list of \"entries\"", where=where)
        rows = []
        for n, entry in enumerate(entries):
            if not isinstance(entry, Mapping) or not all(isinstance(entry.get(p), str)
                                                         for p in _PARTS) \
                    or not isinstance(entry.get("result"), Mapping):
                raise CacheError(f"entry {n} needs string {', '.join(_PARTS)} and an object "
                                 "result", where=where)
            key = FusionKey(*(entry[p] for p in _PARTS))
            created = entry.get("created")
            created = float(created) if isinstance(created, (int, float)) else time.time()
            rows.append((key.fingerprint, key.device, key.triton, key.computation, key.shapes,
                         json.dumps(dict(entry["result"]), sort_keys=True), created))
        connection = self._connect()
        try:
            with connection:
                before = connection.total_changes
                connection.executemany(
                    "INSERT INTO tuning VALUES (?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT (fingerprint, device, triton) DO UPDATE SET "
                    "result=excluded.result, created=excluded.created "
                    "WHERE excluded.created >= tuning.created", rows)
                written = connection.total_changes - before
        except sqlite3.Error as err:
            raise self._error("cannot write to", err) from None
        finally:
            connection.close()
        return written

    def clear(self) -> int:
        """Remove every entry; returns how many there were."""
        if not self.path.exists():
            return 0
        connection = self._connect()
        try:
            with connection:
                removed = connection.execute("DELETE FROM tuning").rowcount
        except sqlite3.Error as err:
            raise self._error("cannot write to", err) from None
        finally:
            connection.close()
        return removed

    def explain_miss(self, key: FusionKey) -> str:
        """Why ``key`` is not in the database: the nearest entry and the parts that differ.

        Nearest = fewest differing key parts (the most recent on ties).  Returns a hit
        message when the key is present.
        """
        entries = self.entries()
        if not entries:
            return f"miss: the tuning database {self.path} is empty"
        best, best_diff = None, None
        for stored, _ in entries:
            diff = _differing_parts(stored, key)
            if best_diff is None or len(diff) < len(best_diff):
                best, best_diff = stored, diff
        if not best_diff:
            return "hit: an entry with this exact key exists"
        lines = [f"miss: the nearest of {len(entries)} entries differs in "
                 f"{', '.join(best_diff)}"]
        for part in best_diff:
            if part == "computation":
                lines.append(f"  computation: {_difference(best.computation, key.computation)}")
            else:
                lines.append(f"  {part}: {_difference(best.parts()[part], key.parts()[part])}")
        return "\n".join(lines)


_SHAPE_TEXT = re.compile(r"\[[\d,]*\](\{[^}]*\})?")


def _differing_parts(stored: FusionKey, key: FusionKey) -> list[str]:
    """The key parts that differ; a computation that differs only in its shapes counts as a
    change of ``shapes``, not of the computation."""
    diff = [p for p in ("device", "triton") if getattr(stored, p) != getattr(key, p)]
    if _SHAPE_TEXT.sub("[]", stored.computation) != _SHAPE_TEXT.sub("[]", key.computation):
        diff.insert(0, "computation")
    if stored.shapes != key.shapes or (stored.computation != key.computation
                                       and "computation" not in diff):
        diff.insert(len(diff) - sum(p in diff for p in ("device", "triton")), "shapes")
    return diff


def _difference(old: str, new: str) -> str:
    if "\n" not in old and "\n" not in new:
        return f"stored {old!r}, now {new!r}"
    diff = [line for line in difflib.unified_diff(old.splitlines(), new.splitlines(),
                                                   "stored", "now", lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("---", "+++"))]
    return "first differing lines: " + " | ".join(diff[:4])


def tuned_configs(module: HloModule, device: str | None,
                  db: "TuningDb | None" = None) -> dict[str, dict[str, Any]]:
    """The stored entry (``tile_sizes``, ``reduction_chunk``, ``num_warps``, ...) per fusion
    name of ``module`` on ``device``, for fusions whose entry has tile sizes; empty without a
    device or a database file.

    >>> from fusion.text.parser import parse_hlo
    >>> tuned_configs(parse_hlo("HloModule m\\nENTRY e {\\n  ROOT x = f32[] parameter(0)\\n}"), None)
    {}
    """
    if device is None:
        return {}
    db = db if db is not None else TuningDb()
    if not db.path.exists():
        return {}
    configs = {}
    for _, instr in module.fusions():
        stored = db.get(fusion_key(module, instr, device))
        if stored and stored.get("tile_sizes") is not None:
            configs[instr.name] = stored
    return configs


def tuned_tilings(module: HloModule, device: str | None,
                  db: "TuningDb | None" = None) -> dict[str, tuple[int, ...]]:
    """Stored tile sizes per fusion name of ``module`` on ``device`` (the ``tiling`` argument
    of ``compile_hlo``); empty without a device or a database file.

    >>> from fusion.text.parser import parse_hlo
    >>> tuned_tilings(parse_hlo("HloModule m\\nENTRY e {\\n  ROOT x = f32[] parameter(0)\\n}"), None)
    {}
    """
    return {name: tuple(config["tile_sizes"])
            for name, config in tuned_configs(module, device, db).items()}
