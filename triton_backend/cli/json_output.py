"""The one JSON style of ``fusion-compile --json``: an object with ``schema_version``, the
``command``, its fields and ``error`` (null on success), printed with a 2-space indent.

``SCHEMAS`` holds each command's JSON Schema (the subset ``validate`` checks: ``type``,
``required``, ``properties``, ``items``, ``enum``); ``docs/cli.md`` documents the same fields
and a test checks every command's output against its schema.

>>> import io
>>> out = io.StringIO()
>>> emit("layout", {"shape": "f32[2]{0}"}, out)
>>> print(out.getvalue(), end="")
{
  "schema_version": 1,
  "command": "layout",
  "shape": "f32[2]{0}",
  "error": null
}
>>> validate({"schema_version": 1, "command": "x", "error": None}, envelope())
[]
>>> for problem in validate({"schema_version": "1", "error": None}, envelope()):
...     print(problem)
$.schema_version: expected integer, got str
$: missing required 'command'
"""
from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any, TextIO

#: Bumped when a field is removed or changes meaning (adding a field does not bump it).
SCHEMA_VERSION = 1


def document(command: str, payload: Mapping[str, Any], error: Mapping[str, Any] | None = None
             ) -> dict[str, Any]:
    """The JSON object of ``command``: envelope fields around ``payload``."""
    return {"schema_version": SCHEMA_VERSION, "command": command, **payload,
            "error": None if error is None else dict(error)}


def emit(command: str, payload: Mapping[str, Any], out: TextIO | None = None,
         error: Mapping[str, Any] | None = None) -> None:
    """Print ``document(command, payload, error)`` with a 2-space indent."""
    out = out if out is not None else sys.stdout
    out.write(json.dumps(document(command, payload, error), indent=2, default=_plain) + "\n")


def _plain(value: Any) -> Any:
    # NumPy scalars, tuples of paths...: JSON has no types of its own for them.
    if hasattr(value, "item"):
        return value.item()
    return str(value)


# --- schemas ------------------------------------------------------------------------------

_ERROR = {"type": ["object", "null"], "required": ["file", "line", "column", "message", "kind"],
          "properties": {"file": {"type": ["string", "null"]},
                         "line": {"type": ["integer", "null"]},
                         "column": {"type": ["integer", "null"]},
                         "message": {"type": "string"}, "kind": {"type": "string"},
                         "where": {"type": ["string", "null"]},
                         "expected": {"type": ["string", "null"]}}}
_INTS = {"type": "array", "items": {"type": "integer"}}
_OUTPUT = {"type": "object", "required": ["name", "type", "shape", "summary"],
           "properties": {"name": {"type": "string"}, "type": {"type": "string"},
                          "shape": _INTS, "summary": {"type": "string"}}}


def envelope(**properties: Any) -> dict[str, Any]:
    """The schema of a document whose command adds ``properties`` (all required)."""
    return {"type": "object", "required": ["schema_version", "command", *properties, "error"],
            "properties": {"schema_version": {"type": "integer", "enum": [SCHEMA_VERSION]},
                           "command": {"type": "string"}, **properties, "error": _ERROR}}


_TRIAL = {"type": "object", "required": ["tile_sizes", "num_warps", "num_stages", "time_s",
                                         "error"],
          "properties": {"tile_sizes": _INTS, "num_warps": {"type": "integer"},
                         "num_stages": {"type": "integer"},
                         "time_s": {"type": ["number", "null"]},
                         "error": {"type": ["string", "null"]}}}
_TUNED = {"type": "object", "required": ["fusion", "device", "method", "measured", "from_cache",
                                         "candidates", "winner", "default",
                                         "improvement_over_default", "trials"],
          "properties": {"fusion": {"type": "string"}, "device": {"type": "string"},
                         "method": {"type": "string"}, "measured": {"type": "boolean"},
                         "from_cache": {"type": "boolean"}, "candidates": {"type": "integer"},
                         "winner": {"type": ["object", "null"]},
                         "default": {"type": ["object", "null"]},
                         "improvement_over_default": {"type": ["number", "null"]},
                         "trials": {"type": "array", "items": _TRIAL}}}

#: The schema of each subcommand's success document (errors: ``envelope()`` with ``error``).
SCHEMAS: dict[str, dict[str, Any]] = {
    "autotune": envelope(fusions={"type": "array", "items": _TUNED},
                         skipped={"type": "array"}, summary={"type": "string"}),
    "cache": envelope(action={"type": "string", "enum": ["info", "clear", "prune"]},
                      directory={"type": "string"}, plan_directory={"type": "string"},
                      files={"type": "integer"}, bytes={"type": "integer"},
                      kernel_files={"type": "integer"}, kernel_bytes={"type": "integer"},
                      plans={"type": "integer"}, plan_bytes={"type": "integer"},
                      max_bytes={"type": "integer"},
                      removed_files={"type": "integer"}, freed_bytes={"type": "integer"}),
    "check": envelope(module={"type": ["string", "null"]}, valid={"type": "boolean"},
                      computations={"type": "array"}, fusions={"type": "object"},
                      ops={"type": "object"}),
    "compile": envelope(output_dir={"type": "string"},
                        files={"type": "array", "items": {"type": "string"}},
                        removed={"type": "array", "items": {"type": "string"}},
                        report={"type": "object"}),
    "evaluate": envelope(module={"type": "string"}, inputs={"type": "string"},
                         outputs={"type": "array", "items": _OUTPUT},
                         outputs_file={"type": ["string", "null"]},
                         inputs_file={"type": ["string", "null"]}),
    "fuse": envelope(module={"type": "string"}, hlo={"type": ["string", "null"]},
                     output_file={"type": ["string", "null"]},
                     decisions={"type": "array", "items": {"type": "string"}},
                     kernels_before={"type": "integer"}, kernels_after={"type": "integer"}),
    "indexing": envelope(instruction={"type": "string"}, direction={"type": "string"}),
    "layout": envelope(shape={"type": "string"}, physical_shape=_INTS,
                       padded_elements={"type": "integer"}, bytes={"type": "integer"},
                       map={"type": "string"}),
    "run": envelope(module={"type": "string"}, inputs={"type": "string"},
                    outputs={"type": "array", "items": _OUTPUT},
                    outputs_file={"type": ["string", "null"]},
                    inputs_file={"type": ["string", "null"]}, kernels={"type": "integer"},
                    device={"type": "string"}, compile_s={"type": "number"},
                    run_s={"type": "number"},
                    check={"type": ["object", "null"]}),
    "tile": envelope(fusions={"type": "array"}),
    "tuning": envelope(action={"type": "string",
                               "enum": ["list", "export", "import", "clear"]},
                       database={"type": "string"}),
    "vjp": envelope(module={"type": "string"}, wrt=_INTS, hlo={"type": ["string", "null"]},
                    output_file={"type": ["string", "null"]}),
}

_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None),
          "number": (int, float), "integer": int}


def _type_ok(value: Any, name: str) -> bool:
    if name in ("integer", "number") and isinstance(value, bool):
        return False
    return isinstance(value, _TYPES[name])


def validate(value: Any, schema: Mapping[str, Any], path: str = "$") -> list[str]:
    """The ways ``value`` breaks ``schema`` (empty when it conforms)."""
    problems: list[str] = []
    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else list(types)
        if not any(_type_ok(value, n) for n in names):
            return [f"{path}: expected {' or '.join(names)}, got {type(value).__name__}"]
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{path}: {value!r} is not one of {schema['enum']}")
    if isinstance(value, dict):
        for key, sub in schema.get("properties", {}).items():
            if key in value:
                problems += validate(value[key], sub, f"{path}.{key}")
        problems += [f"{path}: missing required {key!r}" for key in schema.get("required", ())
                     if key not in value]
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            problems += validate(item, schema["items"], f"{path}[{i}]")
    return problems
