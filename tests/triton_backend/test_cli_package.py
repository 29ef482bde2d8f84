"""The package as users install it: the wheel, in a fresh virtual environment, has its version
(``fusion-compile --version``), its license metadata and ``py.typed`` markers."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("fusion", "tiling", "triton_backend")

# Run in the new environment, which has the wheel and none of its dependencies: the metadata,
# the installed files, and the console script's --version (which imports no dependency).
PROBE = """
import importlib.metadata as md, json, pathlib, subprocess, sys
dist = md.distribution("hlo-triton-fusion")
files = [str(f) for f in dist.files]
script = pathlib.Path(sys.executable).with_name("fusion-compile")
version = subprocess.run([str(script), "--version"], capture_output=True, text=True)
print(json.dumps({
    "version": dist.version,
    "license": dist.metadata.get("License-Expression"),
    "license_files": dist.metadata.get_all("License-File"),
    "files": files,
    "license_text": next((dist.locate_file(f).read_text() for f in dist.files
                          if f.name == "LICENSE"), None),
    "cli_version": version.stdout,
    "cli_status": version.returncode,
    "cli_stderr": version.stderr,
}))
"""


def _copy_sources(target: Path) -> None:
    # A copy, so that building leaves no build/ or egg-info in the working tree.
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, target / name)
    for package in PACKAGES:
        shutil.copytree(ROOT / package, target / package,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


@pytest.mark.package
def test_wheel_in_a_fresh_venv_has_version_license_and_py_typed(tmp_path):
    source, wheels, venv = tmp_path / "src", tmp_path / "wheels", tmp_path / "venv"
    source.mkdir()
    _copy_sources(source)
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                            "--no-build-isolation", "--quiet", "-w", str(wheels), str(source)],
                           capture_output=True, text=True, timeout=120)
    assert build.returncode == 0, build.stderr
    (wheel,) = wheels.glob("hlo_triton_fusion-*.whl")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=60)
    python = venv / "bin" / "python"
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                              "--no-deps", "--no-index", "--quiet", str(wheel)],
                             capture_output=True, text=True, timeout=120)
    assert install.returncode == 0, install.stderr
    probe = subprocess.run([str(python), "-c", PROBE], capture_output=True, text=True,
                           timeout=60, cwd=tmp_path)
    assert probe.returncode == 0, probe.stderr
    found = json.loads(probe.stdout)

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert found["version"] == version
    assert (found["cli_status"], found["cli_version"]) == (0, f"fusion-compile {version}\n"), \
        found["cli_stderr"]
    assert found["license"] == "Apache-2.0" and found["license_files"] == ["LICENSE"]
    assert found["license_text"] == (ROOT / "LICENSE").read_text()
    assert "Apache License" in found["license_text"] and "Version 2.0" in found["license_text"]
    for package in PACKAGES:
        assert f"{package}/py.typed" in found["files"], package
