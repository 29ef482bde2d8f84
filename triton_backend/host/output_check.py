"""Comparing a compiled module's outputs with the reference evaluator's, per element type.

An element passes when ``|out - ref| <= atol + rtol * |ref|`` (NaN where the reference has NaN,
the same infinity where it has one).  The tolerances allow for what ``numerics_policy``
documents: transcendentals within a few ulps on f32/f64, one or two ulps of rounding for the
16- and 8-bit floats (a last-bit difference in f32 may move the rounded result by one ulp);
integers and pred must be exact.  A float result behind a sum of ``n`` terms (a reduction, a
dot, a convolution: ``fusion.analysis.summation_length``) is compared at ``sqrt(n)`` times
its type's tolerance: the order of a sum's combines is unspecified, and a GPU's differs from
the evaluator's pairwise tree.

With f32 dots run as TF32 (``compile_hlo(f32_dot_precision="tf32")``, ``run
--f32-dot-precision tf32``) f32 outputs are compared at :data:`TF32_TOLERANCE` instead: TF32
keeps 10 of f32's 23 mantissa bits (each product is off by up to about 1e-3 relative, the
sum of K of them by about 1e-3 * sqrt(K) of its typical term), so the check allows about what
bf16 results get (1e-2): enough for unit-scale inputs and K up to about a hundred, a sanity
check beyond that (tests bound a dot's TF32 error by 2e-3 * (|A| @ |B|) instead).  ``tf32x3`` (three
TF32 products) is about as exact as f32 and keeps f32's tolerance.  A module whose HLO names
``algorithm=dot_tf32_tf32_f32`` on a dot is compared at TF32's tolerance too.

>>> import numpy as np
>>> c = compare_output("o0", np.float32([1, 2.5]), np.float32([1, 2.5000002]), "f32")
>>> c.passed, c.max_abs_error > 0
(True, True)
>>> compare_output("o0", np.int32([1, 2]), np.int32([1, 3]), "s32").passed
False
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from fusion.analysis.summation_length import output_summation_lengths
from fusion.errors import FusionCompilerError
from fusion.evaluator import evaluate
from fusion.evaluator.numerics import is_float_dtype
from fusion.ir.element_types import element_type
from fusion.transforms.dot_algorithm import DOT_ALGORITHM_PRECISIONS
from fusion.transforms.promote_floats import promote_floats


@dataclass(frozen=True)
class Tolerance:
    """Absolute and relative tolerance of one element type."""

    atol: float
    rtol: float


#: Per HLO element type (alphabetical); types not listed compare exactly.
TOLERANCES: dict[str, Tolerance] = {
    "bf16": Tolerance(1e-2, 1.6e-2),
    "c128": Tolerance(1e-12, 1e-12),
    "c64": Tolerance(1e-6, 1e-5),
    "f16": Tolerance(1e-3, 2e-3),
    "f32": Tolerance(1e-6, 1e-5),
    "f64": Tolerance(1e-12, 1e-12),
    "f8e4m3": Tolerance(0.125, 0.25),
    "f8e4m3b11fnuz": Tolerance(0.125, 0.25),
    "f8e4m3fn": Tolerance(0.125, 0.25),
    "f8e4m3fnuz": Tolerance(0.125, 0.25),
    "f8e5m2": Tolerance(0.25, 0.5),
    "f8e5m2fnuz": Tolerance(0.25, 0.5),
}
EXACT = Tolerance(0.0, 0.0)

#: f32 outputs of a module whose f32 dots run as TF32 (module docstring).
TF32_TOLERANCE = Tolerance(1e-2, 1e-2)


#: An output past its tolerance still passes when its error against the module computed in
#: f64 is at most this many times the reference evaluator's own (:class:`AgainstExact`): two
#: orders of one sum differ in accuracy by a few times (a GPU's blocked order against the
#: evaluator's pairwise tree), a wrong result by orders of magnitude.
EXACT_ERROR_FACTOR = 4.0


@dataclass(frozen=True)
class AgainstExact:
    """An output's and the reference evaluator's errors against the module computed in f64
    (``fusion.transforms.promote_floats``): the largest and the mean absolute error of each.

    Where a program cancels large terms, both the evaluator and a GPU are off from the exact
    value by more than the output type's tolerance, in different elements; the output is
    then as accurate as the reference when neither of its errors exceeds
    :data:`EXACT_ERROR_FACTOR` times the evaluator's.

    >>> AgainstExact(1.2, 0.004, 1.28, 0.005).passed, AgainstExact(30.0, 0.5, 1.28, 0.005).passed
    (True, False)
    """

    max_error: float
    mean_error: float
    reference_max_error: float
    reference_mean_error: float

    @property
    def passed(self) -> bool:
        return (self.max_error <= EXACT_ERROR_FACTOR * self.reference_max_error
                and self.mean_error <= EXACT_ERROR_FACTOR * self.reference_mean_error)

    def describe(self) -> str:
        verdict = "within" if self.passed else "past"
        return (f"against the module computed in f64: max error {self.max_error:.3g} (the "
                f"evaluator's {self.reference_max_error:.3g}), mean {self.mean_error:.3g} "
                f"({self.reference_mean_error:.3g}), {verdict} {EXACT_ERROR_FACTOR:g}x the "
                "evaluator's own")


def against_exact(reference: np.ndarray, actual: np.ndarray, exact: np.ndarray) -> AgainstExact:
    """The errors of ``actual`` and ``reference`` against ``exact`` (same shapes, real).

    >>> exact = np.float64([1000.0, -1000.0, 0.5])
    >>> against_exact(exact + [0.3, -0.2, 0.0], exact + [0.1, 0.4, 0.0], exact).passed
    True
    """
    truth = np.asarray(exact, dtype=np.float64)
    ours = np.abs(np.asarray(actual).astype(np.float64) - truth)
    ref = np.abs(np.asarray(reference).astype(np.float64) - truth)
    return AgainstExact(float(ours.max(initial=0.0)), float(ours.mean()) if ours.size else 0.0,
                        float(ref.max(initial=0.0)), float(ref.mean()) if ref.size else 0.0)


@dataclass(frozen=True)
class OutputComparison:
    """How one output compares: worst absolute and relative error, and the verdict.

    The relative error of an element is its error over ``max(|reference|, atol)``: against a
    reference of 0 (an Adam update's cancelled gradient, say) a plain quotient is 1e301,
    which says nothing; over ``atol`` it says how far past the absolute tolerance it is.
    """

    key: str
    dtype: str
    max_abs_error: float
    max_rel_error: float
    tolerance: Tolerance
    mismatches: int
    size: int
    #: When some elements are past the tolerance: the errors against the module computed in
    #: f64, which decide (None: not computed, or the module cannot be promoted).
    exact: AgainstExact | None = None

    @property
    def passed(self) -> bool:
        return self.mismatches == 0 or (self.exact is not None and self.exact.passed)

    def describe(self) -> str:
        if self.mismatches == 0:
            verdict = "ok"
        else:
            verdict = (f"{'ok' if self.passed else 'FAILED'} ({self.mismatches}/{self.size} "
                       "elements past the tolerance"
                       + (f"; {self.exact.describe()}" if self.exact is not None else "") + ")")
        return (f"{self.key}: {self.dtype} max abs error {self.max_abs_error:.3g}, max rel error "
                f"{self.max_rel_error:.3g} (atol {self.tolerance.atol:g}, rtol "
                f"{self.tolerance.rtol:g}): {verdict}")


def tolerance_for(dtype: str, f32_dot_precision: str = "ieee") -> Tolerance:
    """The tolerance of ``dtype`` (exact for integers and pred); f32's is
    :data:`TF32_TOLERANCE` when the f32 dots ran as ``"tf32"``."""
    if dtype == "f32" and f32_dot_precision == "tf32":
        return TF32_TOLERANCE
    return TOLERANCES.get(dtype, EXACT)


def widened(tol: Tolerance, summation_length: int) -> Tolerance:
    """``tol`` scaled by ``sqrt(summation_length)`` (an exact type's stays exact).

    >>> widened(Tolerance(0.5, 1.0), 10000), widened(EXACT, 10000)
    (Tolerance(atol=50.0, rtol=100.0), Tolerance(atol=0.0, rtol=0.0))
    """
    scale = math.sqrt(max(1, summation_length))
    return Tolerance(tol.atol * scale, tol.rtol * scale)


def compare_output(key: str, reference: np.ndarray, actual: np.ndarray, dtype: str, *,
                   f32_dot_precision: str = "ieee", summation_length: int = 1) -> OutputComparison:
    """Compare ``actual`` with ``reference`` (same shape) under ``dtype``'s tolerance (with
    f32 dots run at ``f32_dot_precision``), widened by ``sqrt(summation_length)`` for a
    float result behind a sum of that many terms
    (``fusion.analysis.summation_length``): two orders of such a sum differ by about that
    many roundings, which a result that cancels shows as a large relative error.

    >>> compare_output("o0", np.float32([1e-6]), np.float32([3e-5]), "f32").passed
    False
    >>> compare_output("o0", np.float32([1e-6]), np.float32([3e-5]), "f32",
    ...                summation_length=8192).passed
    True
    """
    tol = widened(tolerance_for(dtype, f32_dot_precision), summation_length)
    kind = element_type(dtype).kind
    if tuple(reference.shape) != tuple(actual.shape):
        return OutputComparison(key, dtype, float("inf"), float("inf"), tol, reference.size,
                                reference.size)
    if reference.size == 0:
        return OutputComparison(key, dtype, 0.0, 0.0, tol, 0, 0)
    wide = np.complex128 if kind == "complex" else np.float64
    ref = np.asarray(reference).astype(wide)
    out = np.asarray(actual).astype(wide)
    nan_ref, nan_out = np.isnan(ref), np.isnan(out)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(out - ref)
        same = (ref == out) | (nan_ref & nan_out)
        close = same | (~nan_ref & ~nan_out & np.isfinite(ref) & (diff <= tol.atol + tol.rtol * np.abs(ref)))
        finite = np.isfinite(diff)
        diff = np.where(same, 0.0, np.where(finite, diff, np.inf))
        rel = diff / np.maximum(np.abs(ref), max(tol.atol, np.finfo(np.float64).tiny))
        rel = np.where(same, 0.0, rel)
    return OutputComparison(key, dtype, float(diff.max()), float(np.nanmax(rel)), tol,
                            int((~close).sum()), int(ref.size))


def judged_against_exact(module, inputs, references, outputs,
                         comparisons: list[OutputComparison],
                         max_while_iterations: int | None = None) -> list[OutputComparison]:
    """``comparisons`` with :class:`AgainstExact` added to each real float output that has
    elements past its tolerance, from one evaluation of ``module`` computed in f64
    (``fusion.transforms.promote_floats``) on ``inputs`` widened to f64.  Unchanged when
    every output is within tolerance, or when the module cannot be promoted or evaluated so
    (the strict verdict then stands)."""
    failing = [n for n, c in enumerate(comparisons)
               if c.mismatches and element_type(c.dtype).kind == "float"]
    if not failing:
        return comparisons

    promoted = promote_floats(module)
    if promoted is None:
        return comparisons
    wide = [np.asarray(x).astype(np.float64) if is_float_dtype(np.asarray(x).dtype) else x
            for x in inputs]
    try:
        exact = evaluate(promoted, *wide, max_while_iterations=max_while_iterations)
    except (FusionCompilerError, ValueError, TypeError, OverflowError):
        return comparisons
    out = list(comparisons)
    for n in failing:
        if tuple(np.shape(exact[n])) == tuple(np.shape(references[n])):
            out[n] = replace(out[n], exact=against_exact(references[n], outputs[n], exact[n]))
    return out


def _names_tf32(module) -> bool:
    """Whether a dot of ``module`` names an algorithm that runs as (one-product) TF32."""
    return any(i.opcode == "dot" and DOT_ALGORITHM_PRECISIONS.get(str(i.attr("algorithm", "")))
               == "tf32" for c in module.computations for i in c.instructions)


def compare_with_evaluator(module, inputs, outputs, out_types, max_while_iterations=None,
                           f32_dot_precision: str = "ieee") -> list[OutputComparison]:
    """``run --check``'s verdict: each of ``outputs`` (of HLO element types ``out_types``)
    against the reference evaluator's run of ``module`` on ``inputs``, at its type's tolerance
    widened by its summation length, then judged against the module computed in f64."""
    references = evaluate(module, *inputs, max_while_iterations=max_while_iterations)
    lengths = output_summation_lengths(module)
    if f32_dot_precision == "ieee" and _names_tf32(module):
        f32_dot_precision = "tf32"  # the HLO asks for TF32 itself (the evaluator is exact)
    comparisons = [compare_output(f"o{n}", ref, out, dtype, f32_dot_precision=f32_dot_precision,
                                  summation_length=length)
                   for n, (ref, out, dtype, length) in enumerate(zip(references, outputs,
                                                                     out_types, lengths))]
    return judged_against_exact(module, inputs, references, outputs, comparisons,
                                max_while_iterations)


__all__ = ["AgainstExact", "EXACT", "EXACT_ERROR_FACTOR", "OutputComparison", "TF32_TOLERANCE",
           "TOLERANCES", "Tolerance", "against_exact", "compare_output", "compare_with_evaluator",
           "judged_against_exact",
           "tolerance_for", "widened"]
