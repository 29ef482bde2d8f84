"""``fusion-compile run FILE --world-size N`` (``cli.world_run``): two processes, per-rank npz
keys (``pK_rankR``, ``oK_rankR``) equal to the lockstep evaluator's, and usage errors for a
world size the module cannot run on, reported before any process starts."""
from __future__ import annotations

import time

import numpy as np

from fusion import parse_hlo
from fusion.evaluator.npz_io import load_arrays
from fusion.evaluator.spmd import evaluate_spmd
from tests.conformance.sharded_programs import corpus_files
from triton_backend.cli import main

TWO = corpus_files("collectives", 2)[1]


def test_run_on_two_processes_writes_every_ranks_outputs_and_checks_them(tmp_path, capsys):
    outputs, inputs = tmp_path / "out.npz", tmp_path / "in.npz"
    status = main(["run", str(TWO), "--world-size", "2", "--check", "--seed", "3",
                   "--outputs", str(outputs), "--save-inputs", str(inputs)])
    printed = capsys.readouterr().out
    assert status == 0, printed
    assert "check passed" in printed and "o4_rank1" in printed
    saved, got = load_arrays(inputs), load_arrays(outputs)
    assert sorted(saved) == ["p0_rank0", "p0_rank1"]
    # --seed + R: the ranks' random inputs differ
    assert not np.array_equal(saved["p0_rank0"], saved["p0_rank1"])
    module = parse_hlo(TWO.read_text())
    want = evaluate_spmd(module, [[saved["p0_rank0"]], [saved["p0_rank1"]]])
    assert sorted(got) == sorted(f"o{k}_rank{r}" for r in range(2) for k in range(5))
    for r in range(2):
        for k, w in enumerate(want[r]):
            np.testing.assert_allclose(got[f"o{k}_rank{r}"], w, rtol=1e-5, atol=1e-5,
                                       err_msg=f"o{k}_rank{r}")


def test_a_world_size_the_module_does_not_ask_for_is_a_usage_error(capsys):
    start = time.monotonic()
    for size, says in (("0", "--world-size 0: expected 1 or more"),
                       ("4", "the module runs on 2 devices (num_partitions=2), but 4 processes "
                             "run it: start 2")):
        assert main(["run", str(TWO), "--world-size", size]) == 2
        err = capsys.readouterr().err
        assert f"fusion-compile run: error: --world-size: {says}" in err, err  # located
    assert time.monotonic() - start < 5, "a usage error must not start processes"
