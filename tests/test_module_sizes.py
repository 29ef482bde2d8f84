"""Modules stay small enough to read in one sitting, and functions small enough to hold in
one's head: no module of our three packages over 600 lines, no function over 80 (read with
``ast``, decorators and docstrings included).  A file that grows past it is split by
responsibility, not trimmed."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("fusion", "tiling", "triton_backend")
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80


def _sources():
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield path.relative_to(ROOT), path.read_text()


def test_no_module_is_over_600_lines():
    long = [f"{path}: {len(text.splitlines())} lines" for path, text in _sources()
            if len(text.splitlines()) > MAX_MODULE_LINES]
    assert not long, "split by responsibility:\n" + "\n".join(long)


def test_no_function_is_over_80_lines():
    long = []
    for path, text in _sources():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                if node.end_lineno - first + 1 > MAX_FUNCTION_LINES:
                    long.append(f"{path}:{node.lineno} {node.name}: "
                                f"{node.end_lineno - first + 1} lines")
    assert not long, "split by responsibility:\n" + "\n".join(long)
