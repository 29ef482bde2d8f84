"""Numerics policy of generated kernels (this module is documentation plus the pinned settings).

1. **16-bit floats** (bf16, f16) are held in fp32 registers inside a fusion.  Each op whose HLO
   result type is 16-bit is computed in fp32 and its result is rounded (round-to-nearest-even)
   to the declared type and widened back, exactly where XLA's reference evaluator rounds: after
   every such op.  Loads widen exactly; stores narrow an already-representable value.
   Conversions involving bf16/f16 go through fp32 (XLA does the same: ``s32 -> bf16`` is
   ``s32 -> f32 -> bf16``, with its double rounding).  NaN payloads of 16-bit floats survive
   in the interpreter but a GPU's ``cvt.rn.bf16.f32`` returns the canonical NaN.  The 8-bit
   floats f8e4m3fn and f8e5m2 follow the same rule (``device_lib.float8``): past the largest
   finite value f8e4m3fn rounds to NaN (it has no infinity), f8e5m2 to infinity, as XLA.  So
   do f8e4m3fnuz, f8e5m2fnuz, f8e4m3b11fnuz (NaN past the largest; no -0.0; their one NaN
   widens to a positive NaN, as XLA's) and f8e4m3, f8e3m4 (infinity past the largest), and
   the MX formats f8e8m0fnu (powers of two, halfway up; NaN for zero, negatives and past
   2**127) and f4e2m1fn (saturating at 6; NaN to -0.0), all moved as their codes
   (``device_lib.float8_formats``; uint8 tensors on the host).
2. **No FP contraction**: ``TRITON_DEFAULT_FP_FUSION=0`` (the knob
   ``triton.knobs.language.default_fp_fusion`` in Triton 3.9, read at compile time; 3.9 warns
   when it is unset and 3.10 changes the default), and ``ptx_report`` passes
   ``enable_fp_fusion=False``.  So ``a * b + c`` is two roundings on every release.
3. **Exactly rounded where XLA is**: add, subtract, multiply, ``div_rn`` for divide (plain
   ``/`` is ``div.full.f32``, ~2 ulp), except a divide by a constant, which XLA's
   AlgebraicSimplifier makes a multiply by the constant's reciprocal (so do we, bit for bit
   XLA:CPU's: the reciprocal rounded to f32 for f32 and bf16, to f16 for f16; ``x / 11.3137``
   is ``x * 0.0883883``, within an ulp of the quotient; exact for a power of two), ``sqrt_rn``
   for sqrt (``tl.sqrt`` is
   ``sqrt.approx.ftz``), and all integer, compare, select, convert, rounding, abs, negate,
   sign, min/max ops are bit-exact.  Plain ``add.rn.f32`` does not flush denormals.
4. **Transcendentals** (exp, expm1, log, log1p, tanh, logistic, rsqrt, cbrt, sin, cos, tan,
   atan2, erf, power): on a GPU the CUDA libdevice functions (``__nv_expf`` ...), which XLA:GPU
   also calls; ``tl.exp`` is avoided because it lowers to ``ex2.approx``.  The interpreter has
   no libdevice, so ``elementwise_math`` computes them in fp64 with tl primitives; tests allow
   the per-op ulp tolerances listed in ``ULP_TOLERANCE`` (f32 results; 16-bit results are
   compared after rounding, allowing 1 ulp of the 16-bit type).
5. **maximum/minimum** follow XLA's elemental emitter, which emits LLVM's ``llvm.maximum`` /
   ``llvm.minimum`` (IEEE 754-2019): NaN-propagating, and ``-0.0 < +0.0`` whatever the operand
   order (``max(-0.0, +0.0) = max(+0.0, -0.0) = +0.0``; checked against XLA:CPU through jax).
   ``clamp(lo, x, hi) = min(max(x, lo), hi)`` with these rules.
6. **Integers** wrap on overflow; ``x / 0 = -1`` (signed) or all ones (unsigned), ``x % 0 = x``,
   ``INT_MIN / -1 = INT_MIN``, ``INT_MIN % -1 = 0``; shift amounts are read as unsigned and
   amounts ``>= bits`` give 0 (left, logical right) or the sign fill (arithmetic right).
   float -> int saturates, NaN -> 0; float -> pred is ``x != 0`` (NaN -> true).  Integer
   ``power`` is XLA's: only the low 6 bits of the exponent count (``3 ** 64 == 1``), and an
   exponent negative as a signed number gives 1 for base 1, +-1 for base -1, else 0.
7. **Denormals** are kept (f32 and 16-bit), as on XLA:GPU.  XLA:CPU flushes them (its runtime
   sets FTZ/DAZ), so cross-checks against jax on CPU leave denormal inputs out.

>>> TRITON_ENVIRONMENT["TRITON_DEFAULT_FP_FUSION"]
'0'
"""
from __future__ import annotations

import os

#: Environment every process that compiles generated kernels must run with.
TRITON_ENVIRONMENT = {"TRITON_DEFAULT_FP_FUSION": "0"}

#: Max error in f32 ulps allowed by the tests for the ops that are not exactly rounded.
ULP_TOLERANCE = {
    "atan2": 2, "cbrt": 2, "cosine": 2, "erf": 2, "exponential": 2, "exponential-minus-one": 2,
    "log": 2, "log-plus-one": 2, "logistic": 3, "power": 2, "rsqrt": 2, "sine": 2, "tan": 3,
    "tanh": 2,
}


def pin_triton_environment() -> None:
    """Force the policy's environment in this process (call before compiling kernels)."""
    os.environ.update(TRITON_ENVIRONMENT)
