"""``fusion-compile compile -o DIR``: which directories it writes into, its stale files, and
kernel file names that cannot shadow a package."""
from __future__ import annotations

import errno
import json
import os
import pathlib
import subprocess
import sys

import pytest

from triton_backend.cli import main
from triton_backend.reports.compile_report import kernel_file_name
from triton_backend.runtime import atomic_files

ROOT = pathlib.Path(__file__).parents[2]
HLO = ROOT / "tests" / "data" / "hlo"


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _names(directory: pathlib.Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_kernel_files_are_named_after_sanitized_fusions(in_tmp, capsys):
    assert main(["compile", str(HLO / "softmax.after.hlo"), "-o", "out"]) == 0
    report = json.loads((in_tmp / "out" / "report.json").read_text())
    files = [f["kernel_file"] for f in report["fusions"]]
    assert files == [f"kernel_{f['name'].replace('.', '_')}.py" for f in report["fusions"]]
    assert _names(in_tmp / "out") == sorted(files + ["report.json", "report.txt"])


@pytest.mark.parametrize("name, stem", [
    ("fusion", "kernel_fusion"), ("fusion.1", "kernel_fusion_1"),
    ("fused/add-3", "kernel_fused_add_3"), ("ünï", "kernel__n_"),
])
def test_kernel_file_name_is_a_module_name(name, stem):
    assert kernel_file_name(name, set()) == stem and stem.isidentifier()


def test_kernel_file_names_stay_unique():
    taken: set[str] = set()
    assert [kernel_file_name(n, taken) for n in ("f.1", "f_1", "f.1")] == [
        "kernel_f_1", "kernel_f_1_1", "kernel_f_1_2"]


def test_a_script_in_the_output_directory_still_imports_the_fusion_package(in_tmp, capsys):
    # XLA names fusions "fusion": a "fusion.py" there hid the project's own package.
    assert main(["compile", str(ROOT / "examples" / "gelu_small.hlo"), "-o", "out"]) == 0
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", "import fusion.errors"], cwd=in_tmp / "out",
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr


def test_reusing_the_directory_removes_the_earlier_files(in_tmp, capsys):
    assert main(["compile", str(HLO / "softmax.after.hlo"), "-o", "out"]) == 0
    first = _names(in_tmp / "out")
    capsys.readouterr()
    (in_tmp / "out" / "notes.txt").write_text("mine")  # not ours: kept
    assert main(["compile", str(HLO / "gelu.after.hlo"), "-o", "out", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert sorted(doc["removed"]) == first
    assert _names(in_tmp / "out") == sorted(doc["files"] + ["notes.txt"])
    assert len([n for n in doc["files"] if n.endswith(".py")]) == 1


def test_a_foreign_directory_is_refused_unless_forced(in_tmp, capsys):
    (in_tmp / "mine").mkdir()
    (in_tmp / "mine" / "data.txt").write_text("keep")
    assert main(["compile", str(HLO / "gelu.after.hlo"), "-o", "mine"]) == 1
    err = capsys.readouterr().err
    assert "mine is not empty (data.txt) and was not written by fusion-compile compile" in err
    assert "--force" in err and _names(in_tmp / "mine") == ["data.txt"]
    assert main(["compile", str(HLO / "gelu.after.hlo"), "-o", "mine", "--force"]) == 0
    assert "data.txt" in _names(in_tmp / "mine") and "report.json" in _names(in_tmp / "mine")


def test_an_empty_or_unusable_directory(in_tmp, capsys):
    (in_tmp / "empty").mkdir()
    assert main(["compile", str(HLO / "gelu.after.hlo"), "-o", "empty"]) == 0
    (in_tmp / "afile").write_text("x")
    assert main(["compile", str(HLO / "gelu.after.hlo"), "-o", "afile"]) == 1
    assert "afile exists and is not a directory" in capsys.readouterr().err


def test_a_report_cannot_make_compile_delete_outside_its_directory(in_tmp, capsys):
    (in_tmp / "out").mkdir()
    (in_tmp / "victim.txt").write_text("keep")
    (in_tmp / "out" / "report.json").write_text(json.dumps(
        {"fusions": [{"kernel_file": "../victim.txt", "target": None}]}))
    assert main(["compile", str(HLO / "gelu.after.hlo"), "-o", "out"]) == 0
    assert (in_tmp / "victim.txt").read_text() == "keep"


class _FullDisk:
    """A file object that writes half of what it is given, then fails as a full disk does."""

    def __init__(self, handle):
        self._handle = handle

    def write(self, data):
        self._handle.write(data[: len(data) // 2])
        self._handle.flush()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __getattr__(self, name):
        return getattr(self._handle, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self._handle.__exit__(*exc)


def _disk_fills_at(monkeypatch, nth: int) -> list[int]:
    """From the ``nth`` file opened for writing on (1-based), writes fail halfway."""
    real_fdopen, opened = os.fdopen, [0]

    def fdopen(fd, mode="r", *args, **kwargs):
        handle = real_fdopen(fd, mode, *args, **kwargs)
        if "w" not in mode:
            return handle
        opened[0] += 1
        return _FullDisk(handle) if opened[0] >= nth else handle

    monkeypatch.setattr(atomic_files.os, "fdopen", fdopen)
    return opened


def test_a_write_failing_midway_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "kernel_f.py"
    target.write_bytes(b"old\n")
    _disk_fills_at(monkeypatch, 1)
    with pytest.raises(OSError, match="No space left"):
        atomic_files.write_bytes_atomic(target, b"new kernel text\n" * 100)
    assert target.read_bytes() == b"old\n" and _names(tmp_path) == ["kernel_f.py"]


@pytest.mark.parametrize("nth", [1, 2, 3])
def test_compile_on_a_full_disk_leaves_no_file_behind(in_tmp, capsys, monkeypatch, nth):
    # softmax.after.hlo has two kernels: the disk fills at the first kernel, the second one,
    # or the report, after complete kernel files were written.
    (in_tmp / "out").mkdir()
    opened = _disk_fills_at(monkeypatch, nth)
    assert main(["compile", str(HLO / "softmax.after.hlo"), "-o", "out"]) == 1
    assert opened[0] == nth  # the failure stopped the writing
    err = capsys.readouterr().err
    assert "-o" in err and "cannot write the files of this compile into out" in err
    assert "No space left on device" in err and "Traceback" not in err
    assert _names(in_tmp / "out") == []  # no empty, truncated or temporary file
