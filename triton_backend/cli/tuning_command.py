"""``fusion-compile tuning list|export|import|clear``: the autotuning database.

The database is ``$FUSION_TUNING_DB``, else ``$XDG_CACHE_HOME/hlo-triton-fusion/tuning.sqlite``.
``list`` prints one line per entry (fingerprint, device, shapes, the stored configuration);
``export [FILE]`` writes every entry as JSON (standard output without FILE, or ``-``) that
``import FILE`` (``-``: standard input) stores on another machine, keeping the newer of two
entries of one key; ``clear`` removes every entry.  Never imports torch or triton.
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys

from fusion.errors import BadArgumentError, CacheError
from triton_backend.cli.json_output import emit
from triton_backend.cli.output_files import check_output_path
from triton_backend.runtime.atomic_files import atomic_output
from triton_backend.runtime.tuning_db import TuningDb

HELP = "list, export, import or clear the autotuning database"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("list", "export", "import", "clear"),
                        help="list entries; export them as JSON; import an export; clear all")
    parser.add_argument("path", nargs="?", metavar="FILE",
                        help="export: the JSON file to write (default: standard output); "
                             "import: the JSON file to read (- : standard input)")


def _config_text(result: dict) -> str:
    parts = [f"tiling {result.get('tile_sizes')}"]
    if result.get("reduction_chunk"):
        parts.append(f"chunk {result['reduction_chunk']}")
    parts.append(f"warps {result.get('num_warps')}, stages {result.get('num_stages')}")
    if isinstance(result.get("time_s"), (int, float)):
        what = "measured" if result.get("measured") else "predicted"
        parts.append(f"{result['time_s'] * 1e6:.2f} us {what}")
    return ", ".join(parts)


def _read_import(path: str) -> dict:
    try:
        text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
    except FileNotFoundError:
        raise FileNotFoundError(f"no such file: {path}") from None
    try:
        return json.loads(text)
    except ValueError as err:
        raise CacheError(f"not JSON: {err}", where=path) from None


def run(args: argparse.Namespace) -> int:
    db = TuningDb()
    if args.action == "import" and not args.path:
        raise BadArgumentError("import needs the FILE an export wrote (- : standard input)",
                               where="tuning import")
    if args.action in ("list", "clear") and args.path:
        raise BadArgumentError(f"{args.action} takes no FILE", where=f"tuning {args.action}")
    payload: dict = {"action": args.action, "database": str(db.path)}
    if args.action == "list":
        rows = db.rows()
        if args.json:
            emit("tuning", {**payload, "entries": rows})
            return 0
        print(f"tuning database: {db.path} ({len(rows)} entries)")
        for row in rows:
            when = datetime.datetime.fromtimestamp(row["created"]).strftime("%Y-%m-%d %H:%M")
            print(f"  {row['fingerprint'][:12]}  {row['device']:<10} {when}  {row['shapes']}")
            print(f"      {_config_text(row['result'])}")
        return 0
    if args.action == "export":
        exported = db.export_json()
        to_stdout = args.path in (None, "-")
        target = None if to_stdout else check_output_path(args.path, "tuning export")
        if target is not None:
            with atomic_output(target, "w") as handle:
                json.dump(exported, handle, indent=2)
                handle.write("\n")
        if to_stdout and not args.json:
            json.dump(exported, sys.stdout, indent=2)
            print()
            return 0
        if args.json:
            emit("tuning", {**payload, "entries": len(exported["entries"]),
                            "file": None if target is None else str(target),
                            **({"export": exported} if target is None else {})})
        else:
            print(f"exported {len(exported['entries'])} entries of {db.path} to {target}")
        return 0
    if args.action == "import":
        data = _read_import(args.path)
        written = db.import_json(data, where=args.path)
        total = len(data["entries"])
        if args.json:
            emit("tuning", {**payload, "entries": total, "written": written})
        else:
            print(f"imported {written} of {total} entries into {db.path}"
                  + (f" ({total - written} kept: the stored entry was newer)"
                     if written < total else ""))
        return 0
    removed = db.clear()
    if args.json:
        emit("tuning", {**payload, "removed": removed})
    else:
        print(f"removed {removed} entries from {db.path}")
    return 0
