"""An ``HloModule`` as bytes that load several times faster than its text parses.

A warm compile used to spend most of its time parsing the module its plan holds (about 3 ms
for a 20-fusion module on a 2-core machine; the loads below take about a sixth of that).  The
bytes are pickle's format, written and read with two restrictions that keep the cache
directory from becoming a way to run code and a stale entry from being misread:

* **Writing** names only the IR's own frozen dataclasses (``fusion.ir``), ``complex`` and
  the builtin containers; each dataclass is stored as its class and its fields alone (never a
  ``cached_property`` filled in since).  Anything else (a value of another type in an
  attribute) makes :func:`encode` return None: the plan keeps the text form.
* **Reading** resolves no global but those same classes: the data can build IR objects and
  nothing else (no function of any module is reachable from it).  Bytes that do not decode, or
  decode to something that is not an ``HloModule``, are a :class:`SnapshotError` (the plan is
  then unusable: a miss, never a crash).

The pickle is zlib-compressed (to about a sixth: the plan file that carries it in base64 is
hashed and decoded on every warm start, and that costs more per byte than inflating), and
inflated to at most ``MAX_BYTES``.  The module cache keys plans on the compiler's sources
(``source_stamp``), so bytes written by other IR classes are never read; ``SNAPSHOT_FORMAT``
versions the layout itself.

>>> from fusion.text.parser import parse_hlo
>>> module = parse_hlo("HloModule m\\nENTRY e { ROOT c = s32[] constant(7) }")
>>> decode(encode(module)) == module
True
"""
from __future__ import annotations

import copyreg
import dataclasses
import io
import pickle
import zlib
from typing import Any

from fusion.ir import attributes, convolution, hlo_module, layout, shape
from fusion.ir.hlo_module import HloModule

#: Leads every snapshot; bump when the layout of the bytes changes.
SNAPSHOT_FORMAT = b"hlo-ir-snapshot/1\n"
#: The most a snapshot inflates to (a module of a million instructions takes far less).
MAX_BYTES = 1 << 30

#: The classes a snapshot may name: every dataclass the IR's modules define.
_CLASSES: dict[tuple[str, str], type] = {
    (cls.__module__, cls.__qualname__): cls
    for module in (attributes, convolution, hlo_module, layout, shape)
    for cls in vars(module).values()
    if isinstance(cls, type) and dataclasses.is_dataclass(cls) and cls.__module__ == module.__name__
}
_CLASSES[("builtins", "complex")] = complex
_ALLOWED = frozenset(_CLASSES.values())
_FIELDS = {cls: tuple(f.name for f in dataclasses.fields(cls))
           for cls in _ALLOWED if dataclasses.is_dataclass(cls)}


class SnapshotError(ValueError):
    """Bytes that are not a snapshot this code wrote."""


class _Unencodable(Exception):
    """A value the snapshot does not hold (the plan keeps the text form)."""


class _Pickler(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        cls = type(obj)
        names = _FIELDS.get(cls)
        if names is not None:
            # The fields alone: a cached_property filled in since is not part of the IR.
            return copyreg.__newobj__, (cls,), {n: getattr(obj, n) for n in names}
        if cls is complex or (cls is type and obj in _ALLOWED):
            return NotImplemented  # pickle's own way: complex(re, im), the class by name
        raise _Unencodable(f"{cls.__name__} is not part of the IR")


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        try:
            return _CLASSES[(module, name)]
        except KeyError:
            raise SnapshotError(f"a snapshot names {module}.{name}, not an IR class") from None

    def persistent_load(self, pid: Any) -> Any:
        raise SnapshotError("a snapshot holds no persistent ids")


def encode(module: HloModule) -> bytes | None:
    """The snapshot of ``module``; None when it holds a value outside the IR's types.

    >>> encode(HloModule("m", (), "e")).startswith(SNAPSHOT_FORMAT)
    True
    """
    buffer = io.BytesIO()
    try:
        _Pickler(buffer, protocol=5).dump(module)
    except (_Unencodable, RecursionError, pickle.PicklingError):
        return None
    return SNAPSHOT_FORMAT + zlib.compress(buffer.getbuffer(), 6)


def decode(data: bytes) -> HloModule:
    """The module ``encode`` wrote into ``data``; ``SnapshotError`` for anything else.

    >>> decode(b"not a snapshot")
    Traceback (most recent call last):
    ...
    triton_backend.runtime.ir_snapshot.SnapshotError: not a module snapshot (format b'hlo-ir-snapshot/1\\n')
    """
    if not data.startswith(SNAPSHOT_FORMAT):
        raise SnapshotError(f"not a module snapshot (format {SNAPSHOT_FORMAT!r})")
    try:
        inflater = zlib.decompressobj()
        raw = inflater.decompress(memoryview(data)[len(SNAPSHOT_FORMAT):], MAX_BYTES)
        if inflater.unconsumed_tail or inflater.unused_data or not inflater.eof:
            raise SnapshotError("the snapshot is truncated, has bytes after its end or "
                                f"inflates past {MAX_BYTES} bytes")
        module = _Unpickler(io.BytesIO(raw)).load()
    except SnapshotError:
        raise
    except Exception as err:  # noqa: BLE001 - untrusted bytes: whatever fails is "no snapshot"
        raise SnapshotError(f"the snapshot does not decode: {type(err).__name__}: {err}") from None
    if type(module) is not HloModule:
        raise SnapshotError(f"the snapshot holds a {type(module).__name__}, not an HloModule")
    return module


__all__ = ["MAX_BYTES", "SNAPSHOT_FORMAT", "SnapshotError", "decode", "encode"]
