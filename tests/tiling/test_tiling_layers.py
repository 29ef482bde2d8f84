"""The tiling choice's two layers: the mechanism (``tiling.symbolic``) never imports the
policy (``tiling.policy``), and the policy's limits are defined once."""
from __future__ import annotations

import ast
from pathlib import Path

TILING = Path(__file__).resolve().parents[2] / "tiling"


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
    return out


def test_the_mechanism_does_not_import_the_policy():
    for path in sorted((TILING / "symbolic").glob("*.py")):
        policy = {m for m in _imported_modules(path) if m.startswith("tiling.policy")}
        assert not policy, (path.name, policy)


def test_every_limit_is_defined_once():
    root = TILING.parent
    names = ("MAX_PERSISTENT_REDUCTION", "MAX_TILE_NUMEL", "TARGET_TILE_ELEMENTS", "NUM_SMS",
             "DEFAULT_REDUCTION_CHUNK", "MAX_REDUCTION_CHUNK")
    for package in ("fusion", "tiling", "triton_backend"):
        for path in sorted((root / package).rglob("*.py")):
            if path == TILING / "policy" / "limits.py":
                continue
            for node in ast.parse(path.read_text(), str(path)).body:
                targets = node.targets if isinstance(node, ast.Assign) else (
                    [node.target] if isinstance(node, ast.AnnAssign) else [])
                for target in targets:
                    assert not (isinstance(target, ast.Name) and target.id in names), (
                        f"{path.relative_to(root)} defines {target.id}")
