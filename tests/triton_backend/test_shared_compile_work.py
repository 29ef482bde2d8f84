"""Work one compile shares with the next in the same process, when only the target, the
tiling or the cache entry differs: the fusion pass's result per module text
(``module_cache.remembered_fusion``), and the loaded kernel modules (``kernel_cache``).
Whatever is shared, each compile's kernels still match the reference evaluator."""
from __future__ import annotations

import pathlib

import numpy as np
import torch

import tiling.fusion_pass.priority_fusion as priority_fusion
from fusion.evaluator import evaluate
from fusion.evaluator.npz_io import random_inputs
from fusion.text.parser import parse_hlo
from fusion.text.printer import print_hlo
from triton_backend.driver.module_compiler import compile_hlo
from tests.triton_backend.call_counting import count_calls
from triton_backend.runtime import kernel_cache, module_cache

SOFTMAX = (pathlib.Path(__file__).parents[1] / "data" / "hlo" / "softmax.before.hlo").read_text()


def _matches_the_evaluator(compiled, text: str) -> None:
    module = parse_hlo(text)
    arrays = random_inputs(module, seed=3)
    got = compiled(*[torch.from_numpy(a) for a in arrays])
    for g, want in zip(got, evaluate(module, *arrays)):
        np.testing.assert_allclose(g.numpy(), want, rtol=1e-5, atol=1e-6)


def test_a_text_compiled_for_two_targets_is_fused_once(monkeypatch, tmp_path):
    passes = count_calls(monkeypatch, priority_fusion, "fuse_module")
    sm90 = compile_hlo(SOFTMAX, target="sm_90")
    sm80 = compile_hlo(SOFTMAX, target="sm_80")
    interpreted = compile_hlo(SOFTMAX)
    assert len(passes) == 1
    assert print_hlo(sm90.module) == print_hlo(sm80.module) == print_hlo(interpreted.module)
    assert sm90.fusion_decisions == sm80.fusion_decisions
    _matches_the_evaluator(interpreted, SOFTMAX)
    # Another text is fused on its own; forgetting (a test's fresh cache) fuses again.
    compile_hlo(SOFTMAX.replace("HloModule ", "HloModule renamed_", 1))
    module_cache.forget_remembered()
    monkeypatch.setenv(module_cache.CACHE_DIR_ENV, str(tmp_path))  # no plan on disk either
    compile_hlo(SOFTMAX, target="sm_90")
    assert len(passes) == 3


def test_cache_off_runs_the_fusion_pass_afresh(monkeypatch):
    passes = count_calls(monkeypatch, priority_fusion, "fuse_module")
    compile_hlo(SOFTMAX, cache=False)
    compile_hlo(SOFTMAX, cache=False)
    assert len(passes) == 2


def test_a_kernel_compiled_again_is_the_module_already_loaded(monkeypatch):
    imports = count_calls(monkeypatch, kernel_cache, "import_checked_text")
    first = compile_hlo(SOFTMAX, cache=False)
    count = len(imports)  # none when an earlier test of this process loaded them
    again = compile_hlo(SOFTMAX, cache=False)
    assert count <= len(first.fusions) and len(imports) == count
    for name, fusion in first.fusions.items():
        assert again.fusions[name].module is fusion.module
    _matches_the_evaluator(again, SOFTMAX)


def test_the_report_reuses_the_mask_bands_the_compile_probed(monkeypatch):
    from tests.triton_backend.test_attention_backward import CASES, backward
    from tiling.fusion_pass import attention_mask, score_band
    from triton_backend.reports.compile_report import build_report

    forward, shape, dtype, _ = CASES["causal_f32"]
    text = backward(forward, shape, dtype)
    probes = count_calls(monkeypatch, score_band, "_hidden")
    mask_probes = count_calls(monkeypatch, attention_mask, "_hidden")
    compiled = compile_hlo(text, target="sm_90")
    compiled_probes = len(probes)
    report = build_report(compiled)
    assert compiled_probes > 0 and len(probes) == compiled_probes and not mask_probes
    # The bands the report read are the causal ones: the query blocks visit half the keys.
    fractions = [f.kv_blocks_visited_fraction for f in report.fusions
                 if f.kv_blocks_visited_fraction is not None]
    assert fractions and all(0 < f < 1 for f in fractions)
