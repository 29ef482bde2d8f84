"""``@triton.jit`` helpers for the 8-bit floats f8e4m3fn and f8e5m2 (re-exported by
``elementwise_math``, which generated kernels import as ``xla_math``).

Inside a kernel an fp8 value is held in fp32 (exact: every fp8 value is an fp32 value), like
bf16 (``numerics_policy``).  The conversions are integer arithmetic on the bits wherever a
plain ``.to`` is wrong for XLA's semantics:

* widening: Triton 3.9's interpreter turns an fp8 NaN into a finite number (0x7F -> 480.0),
  so there the bits are moved; a GPU converts exactly, and a plain ``.to(tl.float32)`` lets a
  loaded tile converted back for ``tl.dot`` stay fp8;
* rounding fp32 -> fp8 (round to nearest even, as XLA and ml_dtypes): a GPU's
  ``cvt.rn.satfinite`` saturates, but XLA gives NaN past f8e4m3fn's 448 (it has no infinity)
  and infinity past f8e5m2's 57344; so both targets use the same integer code;
* narrowing a held (representable) value to the storage type: built from its bits, because
  ``satfinite`` would also turn an f8e5m2 infinity into 57344.

The codecs of the bits (``_bits_to_f32``, ``_f32_to_bits``) take a format's layout and
special codes, and serve the other small floats too (``float8_formats``).

:data:`DOT_F8E4M3FN` and :data:`DOT_F8E5M2` are the dtypes ``tl.dot`` multiplies fp8 tiles in:
the fp8 type itself on a GPU (sm_89+ tensor cores, fp32 accumulation), exactly widened fp32
under the interpreter (whose ``tl.dot`` would multiply the raw bytes).

>>> DOT_F8E4M3FN.value in (tl.float32, tl.float8e4nv)
True
"""
from __future__ import annotations

import triton.language as tl
from triton import knobs
from triton_backend.device_lib.device_function import device_function

INTERPRETED = bool(knobs.runtime.interpret)

DOT_F8E4M3FN = tl.constexpr(tl.float32 if INTERPRETED else tl.float8e4nv)
DOT_F8E5M2 = tl.constexpr(tl.float32 if INTERPRETED else tl.float8e5)


@device_function
def _round_to_f8(x, MANTISSA: tl.constexpr, MIN_NORMAL: tl.constexpr, MAX_FINITE: tl.constexpr,
                 OVERFLOW_NAN: tl.constexpr):
    """fp32 ``x`` rounded to nearest even in an fp8 format with ``MANTISSA`` bits, still fp32.

    Normal results round the fp32 bits (as ``round_to_bf16``); results below ``MIN_NORMAL``
    have a fixed quantum ``MIN_NORMAL * 2**-MANTISSA``, and adding then subtracting
    ``2**23`` quanta rounds to it exactly (fp32 adds round to nearest even).
    """
    shift: tl.constexpr = 23 - MANTISSA
    a = tl.abs(x)
    bits = a.to(tl.uint32, bitcast=True)
    normal = ((bits + ((1 << (shift - 1)) - 1) + ((bits >> shift) & 1))
              & ((0xFFFFFFFF << shift) & 0xFFFFFFFF)).to(tl.float32, bitcast=True)
    magic: tl.constexpr = MIN_NORMAL * 8388608.0 / (1 << MANTISSA)
    subnormal = (a + magic) - magic
    r = tl.where(a < MIN_NORMAL, subnormal, normal)
    if OVERFLOW_NAN:
        r = tl.where(r > MAX_FINITE, float("nan"), r)
    else:
        r = tl.where(r > MAX_FINITE, float("inf"), r)
    r = tl.where(x < 0, -r, r)
    # -0.0 keeps its sign (``x < 0`` is false for it); NaN stays NaN.
    r = tl.where(x == 0, x, r)
    return tl.where(x != x, x, r)


# The special codes (``SPECIAL``) of the small floats: IEEE (infinity and NaNs in the all-ones
# exponent), none (every code a finite value: f4e2m1fn), fnuz (0x80 is the NaN) or fn (no
# infinity; all-ones exponent and mantissa, 0x7F and 0xFF, the NaNs: f8e4m3fn).
_IEEE = tl.constexpr(0)
_FINITE = tl.constexpr(1)
_FNUZ = tl.constexpr(2)
_FN = tl.constexpr(3)


@device_function
def _bits_to_f32(x, MANTISSA: tl.constexpr, EXPONENT: tl.constexpr, BIAS: tl.constexpr,
                 SPECIAL: tl.constexpr):
    """The fp32 value of the 8-bit code ``x`` (any 8-bit dtype, read as its bits)."""
    b = x.to(tl.uint8, bitcast=True).to(tl.uint32)
    e = (b >> MANTISSA) & ((1 << EXPONENT) - 1)
    m = b & ((1 << MANTISSA) - 1)
    normal = (((e + (127 - BIAS)) << 23) | (m << (23 - MANTISSA))).to(tl.float32, bitcast=True)
    # a subnormal's quantum is 2 ** (1 - BIAS - MANTISSA): exact as an fp32 product
    quantum = (((128 - BIAS - MANTISSA) << 23) + tl.zeros_like(b)).to(tl.float32, bitcast=True)
    mag = tl.where(e == 0, m.to(tl.float32) * quantum, normal)
    if SPECIAL == _IEEE:
        top = e == (1 << EXPONENT) - 1
        mag = tl.where(top, tl.where(m == 0, float("inf"), float("nan")), mag)
    if SPECIAL == _FN:
        mag = tl.where((b & 0x7F) == 0x7F, float("nan"), mag)
    value = tl.where(b >= 128, -mag, mag)
    if SPECIAL == _FNUZ:
        value = tl.where(b == 128, float("nan"), value)  # positive, as XLA widens it
    return value


@device_function
def _f32_to_bits(x, MANTISSA: tl.constexpr, EXPONENT: tl.constexpr, BIAS: tl.constexpr,
                 SPECIAL: tl.constexpr):
    """The 8-bit code (uint8) of an fp32 that holds a value of the format (see
    ``round_to_*``): NaN to the format's NaN (its sign kept where the format has one), -0.0
    of a fnuz format to +0.0."""
    bits = x.to(tl.uint32, bitcast=True)
    sign = (bits >> 24) & 0x80
    a = tl.abs(x)
    ab = a.to(tl.uint32, bitcast=True)
    e = ((ab >> 23) + BIAS - 127) & ((1 << EXPONENT) - 1)
    m = (ab >> (23 - MANTISSA)) & ((1 << MANTISSA) - 1)
    min_normal = (((128 - BIAS) << 23) + tl.zeros_like(bits)).to(tl.float32, bitcast=True)
    # Masked to 0.0 elsewhere so that NaN and infinity are never converted to an integer.
    scale = (((126 + BIAS + MANTISSA) << 23) + tl.zeros_like(bits)).to(tl.float32, bitcast=True)
    subnormal = (tl.where(a < min_normal, a, 0.0) * scale).to(tl.uint32)
    mag = tl.where(a < min_normal, subnormal, (e << MANTISSA) | m)
    top = ((1 << EXPONENT) - 1) << MANTISSA
    if SPECIAL == _IEEE:
        mag = tl.where(a == float("inf"), top, mag)
        code = tl.where(x != x, sign | top | (1 << (MANTISSA - 1)), sign | mag)
    elif SPECIAL == _FNUZ:
        code = tl.where(x != x, 0x80, tl.where(mag == 0, 0, sign | mag))
    elif SPECIAL == _FN:
        code = sign | tl.where(x != x, 0x7F, mag)
    else:  # no special codes: the value is finite
        code = sign | mag
    return code.to(tl.uint8)


@device_function
def round_to_f8e4m3fn(x):
    """fp32 ``x`` rounded to f8e4m3fn (nearest even; past 448 -> NaN), still fp32."""
    return _round_to_f8(x, 3, 0.015625, 448.0, True)


@device_function
def round_to_f8e5m2(x):
    """fp32 ``x`` rounded to f8e5m2 (nearest even; past 57344 -> infinity), still fp32."""
    return _round_to_f8(x, 2, 0.00006103515625, 57344.0, False)


if INTERPRETED:
    @device_function
    def f8e4m3fn_to_f32(x):
        """Widen f8e4m3fn exactly from its bits: sign, 4 exponent bits (bias 7), 3 mantissa
        bits, no infinity, 0x7F/0xFF NaN."""
        return _bits_to_f32(x, 3, 4, 7, 3)

    @device_function
    def f8e5m2_to_f32(x):
        """Widen f8e5m2 exactly: its bits are the high byte of an f16."""
        b = x.to(tl.uint8, bitcast=True).to(tl.uint16)
        return (b << 8).to(tl.float16, bitcast=True).to(tl.float32)
else:
    @device_function
    def f8e4m3fn_to_f32(x):
        """Widen f8e4m3fn: the GPU's conversion is exact (NaN included)."""
        return x.to(tl.float32)

    @device_function
    def f8e5m2_to_f32(x):
        """Widen f8e5m2: the GPU's conversion is exact (infinities and NaN included)."""
        return x.to(tl.float32)


@device_function
def f32_to_f8e4m3fn_exact(x):
    """Narrow an fp32 holding an f8e4m3fn value (see ``round_to_f8e4m3fn``) from its bits."""
    return _f32_to_bits(x, 3, 4, 7, 3).to(tl.float8e4nv, bitcast=True)


@device_function
def f32_to_f8e5m2_exact(x):
    """Narrow an fp32 holding an f8e5m2 value: the high byte of its (exact) f16."""
    h = x.to(tl.float16).to(tl.uint16, bitcast=True)
    return (h >> 8).to(tl.uint8).to(tl.float8e5, bitcast=True)


__all__ = ["DOT_F8E4M3FN", "DOT_F8E5M2", "f32_to_f8e4m3fn_exact", "f32_to_f8e5m2_exact",
           "f8e4m3fn_to_f32", "f8e5m2_to_f32", "round_to_f8e4m3fn", "round_to_f8e5m2"]
