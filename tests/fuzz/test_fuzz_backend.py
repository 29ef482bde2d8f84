"""The fuzzer's back-end stages: tile, compile, and a run compared with the reference evaluator.

A small sample here (``bench/fuzz_frontend.py --stages tile,compile,run`` runs thousands): each
mutated module that passes the front end must tile, compile and run to the evaluator's result,
or fail with a located project error; never a crash, a hang or a wrong result.
"""
from __future__ import annotations

import numpy as np
import pytest

from tests.fuzz import backend_stages as backend
from tests.fuzz.fuzz_pipeline import FAILURES, run_pipeline, with_extra_stages
from tests.fuzz.mutations import generate

SEED = 77
CASES = 24


@pytest.fixture(scope="module")
def stages():
    return with_extra_stages(backend.backend_stages(["tile", "compile", "run"]))


def test_mutated_modules_run_correctly_or_fail_cleanly(stages):
    failures = []
    for case in generate(CASES, seed=SEED):
        outcome = run_pipeline(case.text, timeout_s=60, stages=stages)
        if outcome.failed:
            failures.append(f"case {case.index} {list(case.mutations)}: {outcome.kind} at "
                            f"{outcome.stage}\n{outcome.detail}\n{case.text}")
    assert not failures, "\n\n".join(failures[:2])


NEGATE = "HloModule m\nENTRY e {\n  p = f32[8] parameter(0)\n  ROOT n = f32[8] negate(p)\n}\n"


def test_run_stage_accepts_a_correct_module(stages):
    assert run_pipeline(NEGATE, timeout_s=60, stages=stages).kind == "ok"


def test_run_stage_reports_a_result_that_differs_from_the_evaluator(stages, monkeypatch):
    # The comparison can fail: a reference off by one in one element is a WRONG outcome.
    real = backend.evaluate

    def off_by_one(module, *args, **kwargs):
        outputs = [np.array(o, copy=True) for o in real(module, *args, **kwargs)]
        outputs[0].reshape(-1)[3] += 1
        return tuple(outputs)

    monkeypatch.setattr(backend, "evaluate", off_by_one)
    outcome = run_pipeline(NEGATE, timeout_s=60, stages=stages)
    assert outcome.kind == "WRONG" and "1/8 elements" in outcome.detail
    assert "WRONG" in FAILURES


def test_large_modules_compile_but_are_not_run(stages):
    text = NEGATE.replace("[8]", f"[{backend.RUN_MAX_ELEMENTS * 2}]")
    assert run_pipeline(text, timeout_s=60, stages=stages).kind == "NOT_RUN"
