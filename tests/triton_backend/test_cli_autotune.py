"""``fusion-compile autotune`` on CPU: the table, the winner, the cost-model notice, the db."""
from __future__ import annotations

import re

import pytest

from triton_backend.cli import main

CORPUS = "tests/data/hlo/"


@pytest.fixture(autouse=True)
def _db(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSION_TUNING_DB", str(tmp_path / "tuning.sqlite"))


def _run(capsys, *argv):
    code = main(["autotune", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_table_winner_and_cost_model_notice(capsys):
    code, out, err = _run(capsys, CORPUS + "rmsnorm.after.hlo", "--fusion",
                          "broadcast_multiply_fusion", "--budget", "3", "--jobs", "1",
                          "--device", "a100-40gb")
    assert code == 0, err
    assert "no GPU here: nothing was measured" in out and "A100 40GB" in out
    header = next(line for line in out.splitlines() if "tiling" in line and "warps" in line)
    assert "predicted time" in header and "GB/s" in header and "% of peak BW" in header
    rows = [line for line in out.splitlines() if re.match(r"\s+\d+x\d+\s+\d+\s+\d+\s+[\d.]+ us", line)]
    assert len(rows) == 3
    times = [float(re.search(r"([\d.]+) us", r).group(1)) for r in rows]
    assert times == sorted(times)
    winner = re.search(r"winner: tiling \[(\d+), (\d+)\], num_warps (\d+)", out)
    first = rows[0].split()
    assert winner and f"{winner.group(1)}x{winner.group(2)}" == first[0] and winner.group(3) == first[1]
    assert "\r" not in err  # not a terminal: no progress bar
    code, again, _ = _run(capsys, CORPUS + "rmsnorm.after.hlo", "--fusion",
                          "broadcast_multiply_fusion", "--device", "a100-40gb")
    assert code == 0 and "from the tuning database" in again and "--force" in again
    code, forced, _ = _run(capsys, CORPUS + "rmsnorm.after.hlo", "--fusion",
                           "broadcast_multiply_fusion", "--device", "a100-40gb", "--budget", "2",
                           "--jobs", "1", "--force")
    assert code == 0 and "from the tuning database" not in forced and "winner:" in forced


def test_bad_arguments_are_clear_errors(capsys):
    code, _, err = _run(capsys, CORPUS + "rmsnorm.after.hlo", "--device", "v100")
    assert code == 2 and "unknown device 'v100'" in err
    code, _, err = _run(capsys, CORPUS + "rmsnorm.after.hlo", "--fusion", "broadcast_multiply")
    assert code == 2 and "no fusion named 'broadcast_multiply'" in err
    assert "did you mean broadcast_multiply_fusion?" in err
    code, _, err = _run(capsys, CORPUS + "does_not_exist.hlo")
    assert code == 1 and "no such file" in err


def test_progress_bar_only_on_a_terminal_and_long_sweeps(monkeypatch):
    import io

    from triton_backend.cli import autotune_command

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr("sys.stderr", io.StringIO())
    assert autotune_command._progress_bar(100) is None
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    assert autotune_command._progress_bar(3) is None
    bar = autotune_command._progress_bar(100)
    bar.update(50)
    bar.refresh()
    bar.close()
    assert "autotune" in terminal.getvalue() and "50/100" in terminal.getvalue()
