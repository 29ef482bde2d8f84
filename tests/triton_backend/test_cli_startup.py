"""``fusion-compile`` starts with what each subcommand needs: ``--version`` with argparse and
the version alone, the analysis subcommands without torch or triton.

Each check runs in a fresh interpreter (what the command itself is) and reads ``sys.modules``:
no wall-clock time is asserted (``bench/`` measures it; the README gives the numbers).
"""
from __future__ import annotations

import importlib.metadata
import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).parents[2]
GELU = str(ROOT / "examples" / "gelu.hlo")

# The subcommands that analyse HLO and never launch a kernel.
ANALYSIS = {
    "check": ["check", GELU],
    "indexing": ["indexing", GELU],
    "layout": ["layout", "bf16[37,300]{1,0:T(8,128)(2,1)}", "--index", "3,5"],
    "tile": ["tile", GELU],
    "fuse": ["fuse", GELU],
}


def _child(code: str) -> dict:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_version_imports_neither_numpy_nor_the_metadata_library():
    # importlib.metadata is only counted when this package imported it (a .pth file of the
    # environment may have loaded it first).
    code = ("import contextlib, io, json, sys\n"
            "before = set(sys.modules)\n"
            "from triton_backend.cli import main\n"
            "out = io.StringIO()\n"
            "with contextlib.redirect_stdout(out):\n"
            "    try:\n"
            "        main(['--version'])\n"
            "    except SystemExit as done:\n"
            "        code = done.code\n"
            "new = sorted(set(sys.modules) - before)\n"
            "print(json.dumps({'code': code, 'out': out.getvalue(), 'new': new}))\n")
    found = _child(code)
    assert found["code"] == 0
    assert found["out"] == f"fusion-compile {importlib.metadata.version('hlo-triton-fusion')}\n"
    roots = {name.split(".")[0] for name in found["new"]}
    assert not roots & {"numpy", "torch", "triton", "logging", "json"}, sorted(roots)
    assert "importlib.metadata" not in found["new"]
    assert not [m for m in found["new"] if m.startswith("triton_backend.cli.")], found["new"]


def test_analysis_subcommands_import_neither_torch_nor_triton():
    code = ("import contextlib, io, json, sys\n"
            "from triton_backend.cli import main\n"
            f"cases = {ANALYSIS!r}\n"
            "seen = {}\n"
            "for name, argv in cases.items():\n"
            "    with contextlib.redirect_stdout(io.StringIO()):\n"
            "        status = main(argv)\n"
            "    heavy = sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'triton'})\n"
            "    seen[name] = [status, heavy]\n"
            "print(json.dumps(seen))\n")
    seen = _child(code)
    assert seen == {name: [0, []] for name in ANALYSIS}
