"""``fusion-compile``'s conventions, the same on every subcommand: ``--version``, ``--json`` with
one schema (``docs/cli.md``), compiler-style errors, ``-`` for standard input, exit statuses,
did-you-mean, verification first, output files written only when asked and atomically, and
``-v`` logging."""
from __future__ import annotations

import importlib.metadata
import io
import json
import logging
import pathlib

import numpy as np
import pytest

import triton_backend
from fusion import logs
from fusion.evaluator import evaluate
from fusion.evaluator.npz_io import load_arrays
from fusion.text.parser import parse_hlo
from triton_backend.cli import SUBCOMMANDS, main
from triton_backend.cli.json_output import SCHEMAS, envelope, validate

ROOT = pathlib.Path(__file__).parents[2]
HLO = ROOT / "tests" / "data" / "hlo"

SMALL = """HloModule small
f {
  p = f32[4,8] parameter(0)
  ROOT n = f32[4,8] negate(p)
}
ENTRY e {
  x = f32[4,8] parameter(0)
  ROOT r = f32[4,8] fusion(x), kind=kLoop, calls=f
}
"""
ILL_TYPED = "HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT n = s32[2] negate(p)\n}\n"


@pytest.fixture
def small(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FUSION_TUNING_DB", str(tmp_path / "tuning.sqlite"))
    monkeypatch.setenv("FUSION_KERNEL_CACHE_DIR", str(tmp_path / "kernels"))
    path = tmp_path / "small.hlo"
    path.write_text(SMALL)
    return path


def _doc(capsys) -> tuple[dict, str]:
    text = capsys.readouterr().out
    return json.loads(text), text


def test_version_is_the_installed_metadata(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    version = importlib.metadata.version("hlo-triton-fusion")
    assert capsys.readouterr().out == f"fusion-compile {version}\n"
    assert triton_backend.__version__ == version


# One small invocation per subcommand; each must print a document its schema accepts.
JSON_CASES = {
    "autotune": lambda f: ["autotune", f, "--budget", "2", "--jobs", "1", "--device", "h100"],
    "cache": lambda f: ["cache", "info"],
    "check": lambda f: ["check", f],
    "compile": lambda f: ["compile", f, "-o", "out"],
    "evaluate": lambda f: ["evaluate", f],
    "fuse": lambda f: ["fuse", f],
    "indexing": lambda f: ["indexing", f],
    "layout": lambda f: ["layout", "f32[3,5]{1,0:T(2,2)}", "--index", "2,3"],
    "run": lambda f: ["run", f, "--check"],
    "tile": lambda f: ["tile", f],
    "tuning": lambda f: ["tuning", "list"],
    "vjp": lambda f: ["vjp", f],
}


def test_every_subcommand_has_a_json_case():
    assert set(SUBCOMMANDS) <= set(JSON_CASES)


@pytest.mark.parametrize("command", sorted(JSON_CASES))
def test_json_output_follows_the_documented_schema(small, capsys, command):
    assert main([*JSON_CASES[command](str(small)), "--json"]) == 0
    doc, text = _doc(capsys)
    assert validate(doc, SCHEMAS[command]) == []
    assert doc["command"] == command and doc["error"] is None
    assert text.startswith('{\n  "schema_version": 1,\n')  # one style: 2-space indent
    documented = (ROOT / "docs" / "cli.md").read_text()
    assert f"### `{command}`" in documented
    for field in SCHEMAS[command]["required"]:
        assert f"`{field}`" in documented, (command, field)


def test_json_values_match_the_reference(small, capsys):
    assert main(["evaluate", str(small), "--json"]) == 0
    doc, _ = _doc(capsys)
    (out,) = doc["outputs"]
    assert out == {"name": "o0", "type": "f32", "shape": [4, 8], "summary": out["summary"]}
    assert doc["outputs_file"] is None and doc["inputs"] == "random (seed 0)"
    assert main(["run", str(small), "--check", "--json"]) == 0
    run_doc, _ = _doc(capsys)
    assert run_doc["outputs"] == doc["outputs"]  # the same seed, the same values
    assert run_doc["check"]["passed"] is True and run_doc["kernels"] == 1


def test_errors_are_json_in_json_mode(tmp_path, capsys):
    bad = tmp_path / "bad.hlo"
    bad.write_text(ILL_TYPED)
    assert main(["evaluate", str(bad), "--json"]) == 1
    doc, _ = _doc(capsys)
    assert validate(doc, envelope()) == []
    assert doc["error"]["file"] == str(bad) and (doc["error"]["line"], doc["error"]["column"]) == (4, 3)
    assert doc["error"]["kind"] == "HloVerifyError" and "declared shape s32[2]" in doc["error"]["message"]
    assert main(["tile", str(bad), "--fusion", "x", "--json"]) == 1  # verified before the lookup
    assert _doc(capsys)[0]["error"]["kind"] == "HloVerifyError"
    with pytest.raises(SystemExit) as exit_info:  # argparse's own usage errors too
        main(["check", str(bad), "--json", "--no-such-flag"])
    assert exit_info.value.code == 2
    doc, _ = _doc(capsys)
    assert doc["error"]["kind"] == "usage" and "--no-such-flag" in doc["error"]["message"]


def test_located_error_golden_text(tmp_path, capsys):
    bad = tmp_path / "bad.hlo"
    bad.write_text("HloModule m\nENTRY e {\n\tp = f32[2] parameter(0)\n\tROOT n = f32[2] add(p, q)\n}\n")
    assert main(["check", str(bad)]) == 1
    assert capsys.readouterr().err == (
        f"{bad}:4:2: error: operand 'q' of instruction 'n' does not exist in computation 'e' (in n)\n"
        "\tROOT n = f32[2] add(p, q)\n"
        "\t^\n")


def test_dash_reads_standard_input(monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO(ILL_TYPED))
    assert main(["check", "-"]) == 1
    assert capsys.readouterr().err.startswith("<stdin>:4:3: error: declared shape s32[2]")
    monkeypatch.setattr("sys.stdin", io.StringIO(SMALL))
    assert main(["fuse", "-", "--json"]) == 0
    assert parse_hlo(_doc(capsys)[0]["hlo"]).fusions()


@pytest.mark.parametrize("argv, status", [
    (["check", "{small}"], 0),
    (["check", "{bad}"], 1),
    (["evaluate", "{small}", "--inputs", "missing.npz"], 1),
    (["compile", "{small}", "-o", "d", "--device", "v100"], 2),
    (["tile", "{small}", "--fusion", "rr"], 2),
    (["autotune", "{small}", "--fusion", "rr"], 2),
    (["run", "{small}", "--tile", "rr=8,8"], 2),
    (["run", "{small}", "--tile", "8,8"], 2),
    (["tuning", "import"], 2),
    (["cache", "info", "--max-size", "1M"], 2),
])
def test_exit_statuses(small, capsys, argv, status):
    bad = small.with_name("bad.hlo")
    bad.write_text(ILL_TYPED)
    argv = [a.format(small=small, bad=bad) for a in argv]
    assert main(argv) == status
    err = capsys.readouterr().err
    assert status == 0 or "error: " in err


def test_argparse_usage_error_is_status_2(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["compile", "x.hlo"])  # -o is required
    assert exit_info.value.code == 2


# A failed --check exits with 3: test_cli_run_compile.test_run_check_fails_with_status_3_...


@pytest.mark.parametrize("argv, hint", [
    (["tile", "{small}", "--fusion", "rr"], "did you mean r?"),
    (["autotune", "{small}", "--fusion", "rr"], "did you mean r?"),
    (["indexing", "{small}", "--instruction", "rr"], "did you mean r"),
    (["run", "{small}", "--tile", "rr=8,8"], "did you mean r?"),
])
def test_names_looked_up_suggest_the_closest(small, capsys, argv, hint):
    assert main([a.format(small=small) for a in argv]) == 2
    assert hint in capsys.readouterr().err


@pytest.mark.parametrize("command", ["autotune", "check", "compile", "evaluate", "fuse",
                                     "indexing", "run", "tile"])
def test_every_subcommand_verifies_the_module_first(small, capsys, command):
    bad = small.with_name("bad.hlo")
    bad.write_text(ILL_TYPED)
    argv = {"compile": ["-o", "out"]}.get(command, [])
    assert main([command, str(bad), *argv]) == 1
    assert f"{bad}:4:3: error: declared shape s32[2] of negate does not match" in \
        capsys.readouterr().err
    assert not (small.parent / "out").exists()


def test_unusable_output_paths_fail_before_any_work(small, capsys):
    (small.parent / "adir").mkdir()
    assert main(["evaluate", str(small), "--outputs", "adir"]) == 1
    assert "--outputs: adir is a directory, not a file" in capsys.readouterr().err
    assert main(["evaluate", str(small), "--save-inputs", "small.hlo/x.npz"]) == 1
    assert "a parent is not a directory" in capsys.readouterr().err
    assert sorted(p.name for p in small.parent.iterdir()) == ["adir", "small.hlo"]


def test_a_failed_write_leaves_no_file(small, monkeypatch):
    from triton_backend.cli import npz_files

    def interrupted(handle, arrays, dtypes):
        handle.write(b"PK half an archive")
        raise KeyboardInterrupt

    monkeypatch.setattr(npz_files, "save_arrays", interrupted)
    assert main(["evaluate", str(small), "--outputs", "out.npz"]) == 130
    assert sorted(p.name for p in small.parent.iterdir()) == ["small.hlo"]


def test_outputs_are_the_reference_values(small):
    assert main(["evaluate", str(small), "--save-inputs", "in.npz", "--outputs", "o"]) == 0
    (want,) = evaluate(parse_hlo(SMALL), load_arrays("in.npz")["p0"])
    np.testing.assert_array_equal(load_arrays("o")["o0"], want)


def test_verbose_flags_switch_logging_on(small, caplog):
    root = logging.getLogger(logs.ROOT)
    before = root.level
    try:
        assert main(["-v", "check", str(small)]) == 0
        assert root.level == logging.INFO
        messages = [r.getMessage() for r in caplog.records
                    if r.name == "hlo_triton_fusion.triton_backend.cli"]
        assert any("parsed and verified" in m for m in messages), messages
        assert main(["tile", str(small), "-vv"]) == 0  # after the subcommand too
        assert root.level == logging.DEBUG
    finally:
        root.setLevel(before)
