"""Fuzzing the front end: mutated real modules must give success or a located project error.

400 reproducible cases (``tests.fuzz.mutations.generate``) go through parse -> verify ->
print/parse round trip -> layouts -> evaluate -> indexing analysis -> the ``check``,
``evaluate``, ``indexing`` and ``layout`` commands (``tests.fuzz.fuzz_pipeline``).  A failure
prints the case's mutations and its full text, so it can be replayed.  ``bench/fuzz_frontend.py``
runs the same pipeline on 10,000 cases.
"""
from __future__ import annotations

import random

import pytest

from fusion.errors import HloVerifyError
from tests.fuzz.fuzz_pipeline import FAILURES, run_pipeline
from tests.fuzz.mutations import MUTATIONS, generate, seed_modules

CASES = 400
CHUNKS = 8
SEED = 2024


def _report(case, outcome) -> str:
    return (f"case {case.index} from {case.source}, mutations {list(case.mutations)}: "
            f"{outcome.kind} at stage {outcome.stage}\n{outcome.detail}\n"
            f"--- mutated text ---\n{case.text}")


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_mutated_modules_fail_cleanly(chunk):
    cases = list(generate(CASES, seed=SEED))[chunk::CHUNKS]
    failures = []
    for case in cases:
        outcome = run_pipeline(case.text)
        if outcome.failed:
            failures.append(_report(case, outcome))
    assert not failures, f"{len(failures)} of {len(cases)} cases failed:\n\n" + "\n\n".join(
        failures[:3])


#: Seeds larger than the pipeline evaluates: the seed's GELU (bf16[6,512,4096]) and the
#: corpus's top-p sampling (a sort longer than one tile: 5,000 logits a row).
OVER_THE_SIZE_LIMIT = {"examples/gelu.hlo", "tests/data/hlo/top_p_sampling.before.hlo",
                       "tests/data/hlo/top_p_sampling.after.hlo"}


def test_every_seed_module_is_ok_unmutated():
    # The baseline: without mutations every stage succeeds, so every error seen above comes
    # from a mutation, not from the pipeline itself.
    for path, text in seed_modules():
        outcome = run_pipeline(text)
        if path in OVER_THE_SIZE_LIMIT:
            # Over the pipeline's lowered size limit: the evaluator must refuse it, by name,
            # before allocating anything.
            assert (outcome.kind, outcome.stage) == ("EvaluationError", "evaluate"), outcome
            assert "too large to evaluate" in outcome.detail
            continue
        assert outcome.kind == "ok", f"{path}: {outcome.kind} at {outcome.stage}\n{outcome.detail}"


def test_outcomes_cover_success_and_several_error_types():
    kinds = {run_pipeline(c.text).kind for c in generate(120, seed=SEED + 1)}
    assert "ok" in kinds and "HloParseError" in kinds and "HloVerifyError" in kinds
    assert not kinds & set(FAILURES)


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_every_mutation_changes_some_seed(name):
    rng = random.Random(name)
    texts = [text for _, text in seed_modules()]
    assert any(MUTATIONS[name](rng, t) != t for t in texts for _ in range(3))


def test_pipeline_reports_crashes_and_timeouts():
    # The harness itself must be able to fail: an internal exception is a CRASH and a
    # stage that never ends is a TIMEOUT.
    def crashing(text):
        yield "parse"
        raise KeyError("boom")

    def hanging(text):
        yield "evaluate"
        while True:
            pass

    def unlocated(text):
        yield "verify"
        raise HloVerifyError("bad, but where?")

    assert run_pipeline("", stages=crashing).kind == "CRASH"
    assert run_pipeline("", stages=unlocated).kind == "CRASH"
    assert run_pipeline("", timeout_s=0.2, stages=hanging).kind == "TIMEOUT"


def test_pipeline_reports_wrong_results():
    from tests.fuzz.fuzz_pipeline import NotRun, WrongResult

    def wrong(text):
        yield "run"
        raise WrongResult("o0 differs")

    def not_run(text):
        yield "run"
        raise NotRun("too large")

    assert run_pipeline("", stages=wrong).kind == "WRONG"
    assert "WRONG" in FAILURES
    assert run_pipeline("", stages=not_run).kind == "NOT_RUN"
