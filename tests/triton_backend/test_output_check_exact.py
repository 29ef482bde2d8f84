"""output_check.judged_against_exact: an output past its tolerance is judged by its error
against the module computed in f64, next to the reference evaluator's own."""
from __future__ import annotations

import numpy as np

from fusion.evaluator import evaluate
from fusion.text.parser import parse_hlo
from triton_backend.host.output_check import (EXACT_ERROR_FACTOR, compare_output,
                                              judged_against_exact)

# A sum of large terms that cancel: every order of the f32 adds is off from the exact value
# by far more than f32's tolerance of the (small) result.
CANCELLING_SUM = '''HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[64,4096] parameter(0)
  z = f32[] constant(0)
  ROOT s = f32[64] reduce(x, z), dimensions={1}, to_apply=add
}'''


def _inputs():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(64, 4096)) * 1e4
    x[:, -1] = -x[:, :-1].sum(axis=1)  # each row sums to about zero
    return [x.astype(np.float32)]


def _judged(actual):
    module = parse_hlo(CANCELLING_SUM)
    inputs = _inputs()
    (reference,) = evaluate(module, *inputs)
    strict = [compare_output("o0", reference, actual, "f32", summation_length=4096)]
    return strict[0], judged_against_exact(module, inputs, [reference], [actual], strict)[0]


def test_another_order_of_the_sum_fails_strictly_and_passes_against_exact():
    # A looped GPU reduction's order: 16 chunks of 256 summed, then the chunks in sequence.
    chunks = _inputs()[0].reshape(64, 16, 256).sum(axis=2, dtype=np.float32)
    blocked = np.cumsum(chunks, axis=1, dtype=np.float32)[:, -1]
    strict, judged = _judged(blocked)
    assert not strict.passed and strict.exact is None
    assert judged.passed and judged.exact is not None
    exact = _inputs()[0].astype(np.float64).sum(axis=1)
    assert judged.exact.max_error == np.abs(blocked - exact).max()
    assert "f64" in judged.describe()


def test_a_wrong_result_still_fails():
    wrong = np.cumsum(_inputs()[0][:, :-2], axis=1, dtype=np.float32)[:, -1]  # drops 2 terms
    strict, judged = _judged(wrong)
    assert not strict.passed and not judged.passed
    assert judged.exact.max_error > EXACT_ERROR_FACTOR * judged.exact.reference_max_error


def test_outputs_within_tolerance_are_not_reevaluated():
    module = parse_hlo(CANCELLING_SUM)
    inputs = _inputs()
    (reference,) = evaluate(module, *inputs)
    same = [compare_output("o0", reference, reference, "f32")]
    assert judged_against_exact(module, inputs, [reference], [reference], same) is same
