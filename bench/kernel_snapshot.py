"""Snapshot the kernel files the corpus compiles to, and compare two snapshots.

A refactoring that must not change behaviour must not change a generated kernel either:

    python bench/kernel_snapshot.py write /tmp/kernels.before      # on the old tree
    python bench/kernel_snapshot.py write /tmp/kernels.after       # on the new tree
    python bench/kernel_snapshot.py compare /tmp/kernels.before /tmp/kernels.after

Each program of ``tests/data/hlo``, ``examples/`` and ``bench/programs/`` is compiled with ``compile_hlo`` and its
kernel files written to ``DIR/<program>/``.  ``compare`` ignores the content hash on the first
line (it covers the text, so it changes with any byte) and the module paths a kernel names
(``--rename OLD=NEW``, e.g. ``triton_backend.codegen=triton_backend.lowering``), and prints
every file that differs otherwise; it exits 1 when one does.
"""
from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = (sorted((ROOT / "tests" / "data" / "hlo").glob("*.hlo"))
            + sorted((ROOT / "examples").glob("*.hlo"))
            + sorted((ROOT / "bench" / "programs").glob("*.hlo")))


def write(out_dir: Path) -> int:
    from triton_backend import compile_hlo  # noqa: PLC0415  (torch/triton: only when writing)
    from triton_backend.reports.compile_report import build_report, write_kernels  # noqa: PLC0415

    count = 0
    for path in PROGRAMS:
        compiled = compile_hlo(path.read_text())
        report = build_report(compiled)
        target = out_dir / path.parent.name / path.stem
        write_kernels(compiled, report, target)
        count += len(report.fusions)
    print(f"{count} kernel files of {len(PROGRAMS)} programs written to {out_dir}")
    return 0


def _normalized(path: Path, renames: list[tuple[str, str]]) -> list[str]:
    lines = path.read_text().splitlines(keepends=True)
    if lines and lines[0].startswith("# content-sha256:"):
        lines = lines[1:]
    text = "".join(lines)
    for old, new in renames:
        text = text.replace(old, new)
    return text.splitlines(keepends=True)


def compare(before: Path, after: Path, renames: list[tuple[str, str]]) -> int:
    old = {p.relative_to(before) for p in before.rglob("*.py")}
    new = {p.relative_to(after) for p in after.rglob("*.py")}
    problems = [f"only in {before}: {p}" for p in sorted(old - new)]
    problems += [f"only in {after}: {p}" for p in sorted(new - old)]
    for rel in sorted(old & new):
        a, b = _normalized(before / rel, renames), _normalized(after / rel, renames)
        if a != b:
            diff = "".join(difflib.unified_diff(a, b, str(before / rel), str(after / rel), n=1))
            problems.append(diff)
    for p in problems:
        print(p)
    print(f"{len(old & new)} kernel files compared, {len(problems)} difference(s)")
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write", help="compile the corpus and write its kernel files to DIR")
    w.add_argument("dir", type=Path)
    c = sub.add_parser("compare", help="compare two snapshots, content hashes aside")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    c.add_argument("--rename", action="append", default=[], metavar="OLD=NEW",
                   help="a module path renamed between the snapshots")
    args = parser.parse_args(argv)
    if args.command == "write":
        return write(args.dir)
    renames = [tuple(r.split("=", 1)) for r in args.rename]
    return compare(args.before, args.after, renames)


if __name__ == "__main__":
    sys.exit(main())
