"""``@triton.jit`` helpers for XLA's other 8-bit floats, from their bit layouts: f8e4m3fnuz and
f8e5m2fnuz (AMD's, in torch too), f8e4m3b11fnuz, and the OCP's IEEE-like f8e4m3 and f8e3m4
(re-exported by ``elementwise_math``, which kernels import as ``xla_math``).

As f8e4m3fn and f8e5m2 (``float8``), a value is held in fp32 inside a kernel and each op's
result is rounded to the format (``round_to_<type>``: nearest even, by ``float8._round_to_f8``),
as XLA and ml_dtypes round.  The formats differ in what their special codes mean:

* ``fnuz`` (finite, no negative zero): no infinity, one NaN (0x80, the would-be -0), and -0.0
  becomes +0.0; past the largest finite value a rounding gives NaN;
* IEEE-like (f8e4m3, f8e3m4): the all-ones exponent holds infinity (mantissa 0) and NaN;
  past the largest finite value a rounding gives infinity.

Triton has no dtype for most of these, and keeps its two fnuz ones (``tl.float8e4b8``,
``tl.float8e5b16``) to AMD GPUs, so a value moves as its byte (a uint8 tensor on the host,
``input_validation.BYTE_CARRIERS``): widened from the bits by integer arithmetic and narrowed
to them, on every target alike.

The layouts (mantissa bits, exponent bits, bias; largest finite value):

=============  ====  ====  ====  ======
format         man.  exp.  bias  max
=============  ====  ====  ====  ======
f8e4m3fnuz     3     4     8     240
f8e5m2fnuz     2     5     16    57344
f8e4m3b11fnuz  3     4     11    30
f8e4m3         3     4     7     240
f8e3m4         4     3     3     15.5
=============  ====  ====  ====  ======
"""
from __future__ import annotations

import triton.language as tl

from triton_backend.device_lib.device_function import device_function
from triton_backend.device_lib.float8 import _bits_to_f32, _f32_to_bits, _round_to_f8

@device_function
def _fnuz(r):
    """A rounded value as a fnuz format holds it: -0.0 is +0.0, every NaN the one NaN,
    which XLA reads back as a positive NaN (the code is the sign bit alone)."""
    r = tl.where(r == 0, 0.0, r)
    return tl.where(r != r, float("nan"), r)


@device_function
def f8e4m3fnuz_to_f32(x):
    """Widen f8e4m3fnuz exactly (bias 8; 0x80 NaN)."""
    return _bits_to_f32(x, 3, 4, 8, 2)


@device_function
def f8e5m2fnuz_to_f32(x):
    """Widen f8e5m2fnuz exactly (bias 16; 0x80 NaN)."""
    return _bits_to_f32(x, 2, 5, 16, 2)


@device_function
def f8e4m3b11fnuz_to_f32(x):
    """Widen f8e4m3b11fnuz exactly (bias 11; 0x80 NaN)."""
    return _bits_to_f32(x, 3, 4, 11, 2)


@device_function
def f8e4m3_to_f32(x):
    """Widen f8e4m3 exactly (bias 7; IEEE infinities and NaNs)."""
    return _bits_to_f32(x, 3, 4, 7, 0)


@device_function
def f8e3m4_to_f32(x):
    """Widen f8e3m4 exactly (bias 3; IEEE infinities and NaNs)."""
    return _bits_to_f32(x, 4, 3, 3, 0)


@device_function
def round_to_f8e4m3fnuz(x):
    """fp32 ``x`` rounded to f8e4m3fnuz (nearest even; past 240 -> NaN; -0 -> +0; one NaN),
    as fp32."""
    return _fnuz(_round_to_f8(x, 3, 0.0078125, 240.0, True))


@device_function
def round_to_f8e5m2fnuz(x):
    """fp32 ``x`` rounded to f8e5m2fnuz (past 57344 -> NaN; -0 -> +0), as fp32."""
    return _fnuz(_round_to_f8(x, 2, 0.000030517578125, 57344.0, True))


@device_function
def round_to_f8e4m3b11fnuz(x):
    """fp32 ``x`` rounded to f8e4m3b11fnuz (past 30 -> NaN; -0 -> +0), as fp32."""
    return _fnuz(_round_to_f8(x, 3, 0.0009765625, 30.0, True))


@device_function
def round_to_f8e4m3(x):
    """fp32 ``x`` rounded to f8e4m3 (nearest even; past 240 -> infinity), as fp32."""
    return _round_to_f8(x, 3, 0.015625, 240.0, False)


@device_function
def round_to_f8e3m4(x):
    """fp32 ``x`` rounded to f8e3m4 (nearest even; past 15.5 -> infinity), as fp32."""
    return _round_to_f8(x, 4, 0.25, 15.5, False)


@device_function
def f32_to_f8e4m3fnuz_exact(x):
    """Narrow an fp32 holding an f8e4m3fnuz value to its byte."""
    return _f32_to_bits(x, 3, 4, 8, 2)


@device_function
def f32_to_f8e5m2fnuz_exact(x):
    """Narrow an fp32 holding an f8e5m2fnuz value to its byte."""
    return _f32_to_bits(x, 2, 5, 16, 2)


@device_function
def f32_to_f8e4m3b11fnuz_exact(x):
    """Narrow an fp32 holding an f8e4m3b11fnuz value to its byte."""
    return _f32_to_bits(x, 3, 4, 11, 2)


@device_function
def f32_to_f8e4m3_exact(x):
    """Narrow an fp32 holding an f8e4m3 value to its byte."""
    return _f32_to_bits(x, 3, 4, 7, 0)


@device_function
def f32_to_f8e3m4_exact(x):
    """Narrow an fp32 holding an f8e3m4 value to its byte."""
    return _f32_to_bits(x, 4, 3, 3, 0)



# --- the MX formats: f8e8m0fnu (a scale: a power of two) and f4e2m1fn (one code a byte) -----

@device_function
def f8e8m0fnu_to_f32(x):
    """Widen f8e8m0fnu exactly: ``2 ** (code - 127)`` (code 0 is the f32 subnormal 2**-127),
    0xFF NaN."""
    b = x.to(tl.uint8, bitcast=True).to(tl.uint32)
    value = tl.where(b == 0, 0x00400000, b << 23).to(tl.float32, bitcast=True)
    return tl.where(b == 255, float("nan"), value)


@device_function
def round_to_f8e8m0fnu(x):
    """fp32 ``x`` rounded to f8e8m0fnu as XLA rounds it, as fp32: the nearest power of two,
    halfway cases up (``1.5 -> 2``, ``3 -> 4``); below 2**-127 that; zero, negatives,
    infinities, NaN and values past 2**127 NaN."""
    bits = x.to(tl.uint32, bitcast=True)
    exponent = (bits + 0x400000) >> 23  # the f32 exponent after rounding half up
    normal = (exponent << 23).to(tl.float32, bitcast=True)
    # f32 subnormals (below 2**-126): 2**-127, or 2**-126 from 1.5 * 2**-127 on
    low = tl.where(bits >= 0x00600000, 0x00800000, 0x00400000).to(tl.float32, bitcast=True)
    r = tl.where(bits < 0x00800000, low, normal)
    return tl.where((x != x) | (x <= 0) | (exponent >= 255), float("nan"), r)


@device_function
def f32_to_f8e8m0fnu_exact(x):
    """Narrow an fp32 holding an f8e8m0fnu value to its byte."""
    bits = x.to(tl.uint32, bitcast=True)
    code = tl.where(bits == 0x00400000, 0, bits >> 23)
    return tl.where(x != x, 255, code).to(tl.uint8)


@device_function
def f4e2m1fn_to_f32(x):
    """Widen f4e2m1fn exactly from the low 4 bits of its byte: sign, 2 exponent bits (bias
    1), 1 mantissa bit; every code finite (0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives)."""
    b = x.to(tl.uint8, bitcast=True)
    mag = _bits_to_f32(b & 7, 1, 2, 1, 1)
    return tl.where((b & 8) != 0, -mag, mag)


@device_function
def round_to_f4e2m1fn(x):
    """fp32 ``x`` rounded to f4e2m1fn as XLA rounds it, as fp32: nearest even, saturating at
    6 (infinities too), every NaN to -0.0 (the format has none)."""
    r = _round_to_f8(x, 1, 1.0, 6.0, False)
    r = tl.where(r == float("inf"), 6.0, tl.where(r == float("-inf"), -6.0, r))
    return tl.where(x != x, -0.0, r)


@device_function
def f32_to_f4e2m1fn_exact(x):
    """Narrow an fp32 holding an f4e2m1fn value to its code, in the low 4 bits of a byte."""
    sign = ((x.to(tl.uint32, bitcast=True) >> 28) & 8).to(tl.uint8)
    return sign | _f32_to_bits(tl.abs(x), 1, 2, 1, 1)


__all__ = [
    "f32_to_f4e2m1fn_exact", "f32_to_f8e8m0fnu_exact", "f4e2m1fn_to_f32", "f8e8m0fnu_to_f32",
    "round_to_f4e2m1fn", "round_to_f8e8m0fnu",
    "f32_to_f8e3m4_exact", "f32_to_f8e4m3_exact", "f32_to_f8e4m3b11fnuz_exact",
    "f32_to_f8e4m3fnuz_exact", "f32_to_f8e5m2fnuz_exact", "f8e3m4_to_f32", "f8e4m3_to_f32",
    "f8e4m3b11fnuz_to_f32", "f8e4m3fnuz_to_f32", "f8e5m2fnuz_to_f32", "round_to_f8e3m4",
    "round_to_f8e4m3", "round_to_f8e4m3b11fnuz", "round_to_f8e4m3fnuz", "round_to_f8e5m2fnuz",
]
