"""``fusion-compile autotune``'s results (summary line, progress lines, ``--json``, ``--csv``,
``--plot``), unfused input, and sweeps on a ``dask.distributed`` cluster."""
from __future__ import annotations

import csv
import io
import json
import pathlib

import pytest

from fusion.text.parser import parse_hlo
from triton_backend.cli import autotune_command, main
from triton_backend.cli.json_output import SCHEMAS, validate
from triton_backend.tuning.autotune import autotune, default_config
from triton_backend.runtime.tuning_db import TuningDb

HLO = pathlib.Path(__file__).parents[1] / "data" / "hlo"
RMSNORM = str(HLO / "rmsnorm.after.hlo")
FUSION = "broadcast_multiply_fusion"


@pytest.fixture(autouse=True)
def _db(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSION_TUNING_DB", str(tmp_path / "tuning.sqlite"))
    monkeypatch.chdir(tmp_path)


def _sweep(capsys, *extra):
    code = main(["autotune", RMSNORM, "--fusion", FUSION, "--budget", "6", "--jobs", "1",
                 "--device", "h100", *extra])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_json_csv_and_plot_agree(capsys):
    pytest.importorskip("matplotlib")
    code, out, _ = _sweep(capsys, "--json", "--csv", "cands.csv", "--plot", "sweep.png")
    assert code == 0
    doc = json.loads(out)
    assert validate(doc, SCHEMAS["autotune"]) == []
    (fusion,) = doc["fusions"]
    trials = fusion["trials"]
    assert fusion["candidates"] == len(trials) == 6
    assert [t["time_s"] for t in trials] == sorted(t["time_s"] for t in trials)
    assert fusion["winner"]["tile_sizes"] == trials[0]["tile_sizes"]
    # The default is the configuration compile_fusion picks untuned, timed by the same model.
    module = parse_hlo(pathlib.Path(RMSNORM).read_text())
    d = default_config(module, module.entry.instruction(FUSION))
    assert fusion["default"]["tile_sizes"] == list(d.tile_sizes)
    assert fusion["default"]["num_warps"] == d.num_warps
    saved = 1 - trials[0]["time_s"] / fusion["default"]["time_s"]
    assert fusion["improvement_over_default"] == pytest.approx(saved)
    with open("cands.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 6 and tuple(rows[0]) == autotune_command.CSV_COLUMNS
    assert [float(r["time_s"]) for r in rows] == pytest.approx([t["time_s"] for t in trials])
    assert [r["winner"] for r in rows] == ["1"] + ["0"] * 5
    assert pathlib.Path("sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_text_has_a_summary_line(capsys):
    code, out, _ = _sweep(capsys, "--force")
    assert code == 0
    (line,) = [ln for ln in out.splitlines() if ln.startswith("summary:")]
    assert f"summary: fusion {FUSION}: 6 candidates in " in line and "; winner " in line
    assert "less time than the default" in line or "is as fast" in line


def test_plain_progress_lines_when_stderr_is_not_a_terminal():
    stream = io.StringIO()
    progress = autotune_command.Progress("autotune f", stream)
    progress.on_total(20)
    for _ in range(20):
        progress.update(1)
    progress.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 10 and lines[0].startswith("autotune f: 2/20 (10%), ")
    assert lines[-1].startswith("autotune f: 20/20 (100%)") and "\r" not in stream.getvalue()
    quiet = io.StringIO()
    small = autotune_command.Progress("x", quiet)
    small.on_total(3)
    small.update(3)
    assert quiet.getvalue() == ""


def test_plot_without_matplotlib_is_a_usage_error_before_any_work(capsys, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    code, _, err = _sweep(capsys, "--plot", "other.png", "--force")
    assert code == 2 and "pip install 'hlo-triton-fusion[plot]'" in err
    assert not pathlib.Path("other.png").exists()


def test_unfused_input_is_fused_like_run(capsys):
    code = main(["autotune", str(HLO / "rmsnorm.before.hlo"), "--budget", "2", "--jobs", "1",
                 "--device", "h100", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["fusions"] and not doc["skipped"]
    from triton_backend.driver.module_compiler import compile_hlo

    fused = compile_hlo(parse_hlo((HLO / "rmsnorm.before.hlo").read_text())).module
    assert sorted(f["fusion"] for f in doc["fusions"]) == sorted(
        i.name for _, i in fused.fusions())


def test_a_dask_cluster_sweep_equals_the_local_one(tmp_path, capsys):
    distributed = pytest.importorskip("distributed")
    module = parse_hlo(pathlib.Path(RMSNORM).read_text())
    local = autotune(module, FUSION, device="h100", budget=4, jobs=1,
                     db=TuningDb(tmp_path / "local.sqlite"))
    # Worker threads keep the start-up to seconds on a small machine; the scheduler, its
    # workers and their communication are dask.distributed's own.
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        remote_db = TuningDb(tmp_path / "remote.sqlite")
        remote = autotune(module, FUSION, device="h100", budget=4, executor=client,
                          db=remote_db)
        assert remote.trials == local.trials and remote.default == local.default
        assert remote_db.rows()[0]["result"] == TuningDb(tmp_path / "local.sqlite").rows()[0]["result"]
        # The command line's --scheduler reaches the same cluster.
        code = main(["autotune", RMSNORM, "--fusion", FUSION, "--budget", "4", "--device",
                     "h100", "--scheduler", cluster.scheduler_address, "--json", "--force"])
        doc = json.loads(capsys.readouterr().out)
    assert code == 0
    assert [t["tile_sizes"] for t in doc["fusions"][0]["trials"]] == [
        list(t.config.tile_sizes) for t in local.trials]
