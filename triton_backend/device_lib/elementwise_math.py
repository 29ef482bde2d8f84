"""``@triton.jit`` (``device_function``) math helpers called by the expressions ``elementwise_lowering`` renders.

Generated kernels import this module as ``xla_math``.  Two implementations of the
transcendental functions are chosen when this module is imported (Triton reads
``TRITON_INTERPRET`` at decoration time, so the choice matches how the kernels are run):

* compiled for a GPU: CUDA libdevice (``triton.language.extra.libdevice``), as XLA:GPU does;
* under ``TRITON_INTERPRET=1``, where libdevice calls are stubs returning ``None`` in Triton
  3.9: the same functions computed in fp64 from the primitives the interpreter has
  (``tl.exp``, ``tl.log``, ``tl.exp2``, ``tl.log2``, ``tl.sin``, ``tl.cos``), then rounded.

The bit-exact helpers (rounding to integers, clz, popcount, integer power) are plain tl code
shared by both.  Inputs are fp32 or fp64 (16-bit floats are held in fp32, see
``numerics_policy``); results have the input's dtype.
"""
from __future__ import annotations

import triton.language as tl
from triton import knobs
from triton.language.extra import libdevice

from triton_backend.device_lib.device_function import device_function
from triton_backend.device_lib.dot_precision import BF16X3_PRECISION, BF16X6_PRECISION
# The 8-bit float conversions live in their own module; kernels reach them as ``xla_math.*``.
from triton_backend.device_lib.float8 import (
    DOT_F8E4M3FN,
    DOT_F8E5M2,
    f8e4m3fn_to_f32,
    f8e5m2_to_f32,
    f32_to_f8e4m3fn_exact,
    f32_to_f8e5m2_exact,
    round_to_f8e4m3fn,
    round_to_f8e5m2,
)
from triton_backend.device_lib.float8_formats import (
    f4e2m1fn_to_f32,
    f8e8m0fnu_to_f32,
    f32_to_f4e2m1fn_exact,
    f32_to_f8e8m0fnu_exact,
    round_to_f4e2m1fn,
    round_to_f8e8m0fnu,
    f8e3m4_to_f32,
    f8e4m3_to_f32,
    f8e4m3b11fnuz_to_f32,
    f8e4m3fnuz_to_f32,
    f8e5m2fnuz_to_f32,
    f32_to_f8e3m4_exact,
    f32_to_f8e4m3_exact,
    f32_to_f8e4m3b11fnuz_exact,
    f32_to_f8e4m3fnuz_exact,
    f32_to_f8e5m2fnuz_exact,
    round_to_f8e3m4,
    round_to_f8e4m3,
    round_to_f8e4m3b11fnuz,
    round_to_f8e4m3fnuz,
    round_to_f8e5m2fnuz,
)

#: What this module re-exports from ``float8`` for the kernels (``xla_math.round_to_f8e5m2``).
FLOAT8_EXPORTS = (DOT_F8E4M3FN, DOT_F8E5M2, f8e4m3fn_to_f32, f8e5m2_to_f32, f32_to_f8e4m3fn_exact,
                  f32_to_f8e5m2_exact, round_to_f8e4m3fn, round_to_f8e5m2,
                  # and from ``float8_formats``: XLA's other 8-bit floats
                  f8e3m4_to_f32, f8e4m3_to_f32, f8e4m3b11fnuz_to_f32, f8e4m3fnuz_to_f32,
                  f8e5m2fnuz_to_f32, f32_to_f8e3m4_exact, f32_to_f8e4m3_exact,
                  f32_to_f8e4m3b11fnuz_exact, f32_to_f8e4m3fnuz_exact, f32_to_f8e5m2fnuz_exact,
                  round_to_f8e3m4, round_to_f8e4m3, round_to_f8e4m3b11fnuz, round_to_f8e4m3fnuz,
                  round_to_f8e5m2fnuz, f4e2m1fn_to_f32, f8e8m0fnu_to_f32, f32_to_f4e2m1fn_exact,
                  f32_to_f8e8m0fnu_exact, round_to_f4e2m1fn, round_to_f8e8m0fnu)

#: The ``input_precision`` of the bf16 split dots (``xla_math.BF16X3_PRECISION``).
DOT_PRECISION_EXPORTS = (BF16X3_PRECISION, BF16X6_PRECISION)

INTERPRETED = bool(knobs.runtime.interpret)


@device_function
def signbit(x):
    """True where the sign bit of the float ``x`` is set (also for -0.0 and -NaN)."""
    return x.to(tl.float64).to(tl.int64, bitcast=True) < 0


@device_function
def _nan_like(d):
    return (d.to(tl.int64, bitcast=True) * 0 + 0x7FF8000000000000).to(tl.float64, bitcast=True)


if INTERPRETED:
    @device_function
    def bf16_to_f32(x):
        """Widen bf16 exactly by moving its bits (the interpreter's conversion loses denormals)."""
        return (x.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)

    @device_function
    def f32_to_bf16_exact(x):
        """Narrow an fp32 that holds a bf16 value (see ``round_to_bf16``) by dropping low bits."""
        return (x.to(tl.uint32, bitcast=True) >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)
else:
    @device_function
    def bf16_to_f32(x):
        """Widen bf16 exactly: a plain conversion, which the GPU does exactly (denormals
        included), so that a loaded bf16 tile converted back for ``tl.dot`` folds away and
        reaches the tensor cores as loaded, not through registers."""
        return x.to(tl.float32)

    @device_function
    def f32_to_bf16_exact(x):
        """Narrow an fp32 that holds a bf16 value (exact: it is representable)."""
        return x.to(tl.bfloat16)


if INTERPRETED:
    @device_function
    def round_to_bf16(x):
        """fp32 ``x`` rounded to the nearest-even bf16 value, still as fp32 (NaN stays NaN,
        quiet, its sign and high payload kept as ml_dtypes does).

        Integer arithmetic on the bits, because the interpreter's ``.to(tl.bfloat16)``
        truncates.
        """
        bits = x.to(tl.uint32, bitcast=True)
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        # A NaN whose payload lies only in the low 16 bits (a signalling NaN such as
        # 0x7F800001) would truncate to infinity: set the quiet bit first.
        quiet = (bits | 0x00400000) & 0xFFFF0000
        return tl.where(x != x, quiet.to(tl.float32, bitcast=True),
                        rounded.to(tl.float32, bitcast=True))
else:
    @device_function
    def round_to_bf16(x):
        """fp32 ``x`` rounded to the nearest-even bf16 value, still as fp32: the GPU's
        ``cvt.rn.bf16.f32`` and back, as XLA:GPU rounds (a NaN becomes the canonical one,
        ``numerics_policy``).  The integer version the interpreter needs cost 9 instructions a
        rounding, which made a bf16 GELU compute-bound at a fifth of the memory bandwidth."""
        return x.to(tl.bfloat16).to(tl.float32)


@device_function
def round_nearest_even(x):
    """Round half to even; exact for fp32 and fp64 (``|x| + 2**52 - 2**52`` in fp64)."""
    d = x.to(tl.float64)
    a = tl.abs(d)
    r = tl.where(a < 4503599627370496.0, (a + 4503599627370496.0) - 4503599627370496.0, a)
    return tl.where(signbit(d), -r, r).to(x.dtype)


@device_function
def round_nearest_afz(x):
    """Round half away from zero; ``|x| - floor(|x|)`` is exact, so no double rounding."""
    a = tl.abs(x)
    t = tl.math.floor(a)
    r = tl.where(a - t >= 0.5, t + 1.0, t)
    return tl.where(signbit(x), -r, r)


@device_function
def clz32(u):
    """Leading zeros of ``uint32`` values (32 for 0), by binary search."""
    n = u * 0
    c = u <= 0x0000FFFF
    n = tl.where(c, n + 16, n)
    u = tl.where(c, u << 16, u)
    c = u <= 0x00FFFFFF
    n = tl.where(c, n + 8, n)
    u = tl.where(c, u << 8, u)
    c = u <= 0x0FFFFFFF
    n = tl.where(c, n + 4, n)
    u = tl.where(c, u << 4, u)
    c = u <= 0x3FFFFFFF
    n = tl.where(c, n + 2, n)
    u = tl.where(c, u << 2, u)
    c = u <= 0x7FFFFFFF
    n = tl.where(c, n + 1, n)
    return tl.where(u == 0, n + 1, n)


@device_function
def popc32(u):
    """Set bits of ``uint32`` values (SWAR)."""
    u = u - ((u >> 1) & 0x55555555)
    u = (u & 0x33333333) + ((u >> 2) & 0x33333333)
    u = (u + (u >> 4)) & 0x0F0F0F0F
    return (u * 0x01010101) >> 24


@device_function
def int_pow(x, e, BITS: tl.constexpr, SIGNED: tl.constexpr):
    """``x ** e`` wrapping, exactly as XLA's ``EmitIntegerPow`` (checked against XLA:CPU).

    XLA squares only 6 times, so only the low 6 bits of ``e`` count (``3 ** 64 == 1``); an
    exponent that is negative when read as signed (also for unsigned types) gives 1 for
    ``x == 1``, the parity-signed power for ``x == -1`` (all ones) and 0 otherwise.
    """
    acc = x * 0 + 1
    base = x
    for i in tl.static_range(6):
        bit = ((e >> i) & 1) != 0
        acc = tl.where(bit, acc * base, acc)
        base = base * base
    if SIGNED:
        negative = e < 0
    else:
        negative = (e >> (BITS - 1)) != 0
    all_ones = x == ~(x * 0)
    return tl.where(negative, tl.where(x == 1, acc * 0 + 1, tl.where(all_ones, acc, acc * 0)), acc)


@device_function
def reduce_precision_bits(b, SOURCE_EXPONENT_BITS: tl.constexpr, SOURCE_MANTISSA_BITS: tl.constexpr,
                          EXPONENT_BITS: tl.constexpr, MANTISSA_BITS: tl.constexpr):
    """XLA's ``reduce-precision`` on the bit pattern ``b`` (int64) of a float with the given
    source format: mantissa rounded to nearest even at ``MANTISSA_BITS``, then exponents above
    the reduced range become infinity and those at or below it (denormals too) signed zero.
    Integer arithmetic only, so it is bit-exact with ``fusion.evaluator``'s rule.  The caller
    keeps NaN inputs (the rounding may turn a NaN payload into infinity)."""
    WIDTH: tl.constexpr = 1 + SOURCE_EXPONENT_BITS + SOURCE_MANTISSA_BITS
    if MANTISSA_BITS < SOURCE_MANTISSA_BITS:
        DROPPED: tl.constexpr = SOURCE_MANTISSA_BITS - MANTISSA_BITS
        HALF_MINUS_ONE: tl.constexpr = (1 << (DROPPED - 1)) - 1
        LOW_MASK: tl.constexpr = (1 << DROPPED) - 1
        b = (b + (((b >> DROPPED) & 1) + HALF_MINUS_ONE)) & ~LOW_MASK
    if WIDTH < 64:
        b = b & ((1 << WIDTH) - 1)  # a carry out of the top bit is dropped, as in unsigned math
    if EXPONENT_BITS < SOURCE_EXPONENT_BITS:
        EXPONENT_MASK: tl.constexpr = ((1 << SOURCE_EXPONENT_BITS) - 1) << SOURCE_MANTISSA_BITS
        BIAS: tl.constexpr = (1 << (SOURCE_EXPONENT_BITS - 1)) - 1
        REDUCED_BIAS: tl.constexpr = (1 << (EXPONENT_BITS - 1)) - 1
        MAX_EXPONENT: tl.constexpr = (BIAS + REDUCED_BIAS) << SOURCE_MANTISSA_BITS
        MIN_EXPONENT: tl.constexpr = (BIAS - REDUCED_BIAS) << SOURCE_MANTISSA_BITS
        exponent = b & EXPONENT_MASK
        sign = b & ~((1 << (WIDTH - 1)) - 1)  # the sign bit (and nothing above it)
        b = tl.where(exponent > MAX_EXPONENT, sign | EXPONENT_MASK,
                     tl.where(exponent <= MIN_EXPONENT, sign, b))
    return b


@device_function
def _atan_f64(t):
    # Cephes atan (double): range reduction to |t| <= 0.66, then a rational approximation.
    a = tl.abs(t)
    big = a > 2.414213562373095
    mid = (a > 0.66) & ~big
    z = tl.where(big, -1.0 / tl.where(big, a, 1.0), tl.where(mid, (a - 1.0) / (a + 1.0), a))
    # A where of two constants is an fp32 tensor: the quarter turns are counted there, exactly,
    # and scaled by pi/4 in fp64 (tl.where(big, pi/2, ...) rounded pi/2 to fp32).
    quarters = tl.where(big, 2.0, tl.where(mid, 1.0, 0.0)).to(tl.float64)
    y0 = quarters * 0.7853981633974483
    zz = z * z
    p = (((-8.750608600031904122785e-1 * zz - 1.615753718733365076637e1) * zz
          - 7.500855792314704667340e1) * zz - 1.228866684490136173410e2) * zz - 6.485021904942025371773e1
    q = ((((zz + 2.485846490142306297962e1) * zz + 1.650270098316988542046e2) * zz
          + 4.328810604912902668951e2) * zz + 4.853903996359136964868e2) * zz + 1.945506571482613964425e2
    r = z * (zz * p / q) + z
    r = r + quarters * 3.061616997868382943065e-17
    r = y0 + r
    return tl.where(t < 0, -r, r)


@device_function
def _expm1_f64(d):
    u = tl.exp(d)
    um1 = u - 1.0
    safe_log = tl.where((u == 1.0) | (um1 == -1.0) | (u == float("inf")), 2.0, u)
    r = um1 * d / tl.log(safe_log)
    r = tl.where(u == 1.0, d, r)
    r = tl.where(um1 == -1.0, -1.0, r)
    return tl.where(u == float("inf"), u, r)


if INTERPRETED:
    @device_function
    def exp(x):
        return tl.exp(x.to(tl.float64)).to(x.dtype)

    @device_function
    def log(x):
        return tl.log(x.to(tl.float64)).to(x.dtype)

    @device_function
    def sin(x):
        return tl.sin(x.to(tl.float64)).to(x.dtype)

    @device_function
    def cos(x):
        return tl.cos(x.to(tl.float64)).to(x.dtype)

    @device_function
    def tan(x):
        d = x.to(tl.float64)
        return (tl.sin(d) / tl.cos(d)).to(x.dtype)

    @device_function
    def erf(x):
        return tl.math.erf(x.to(tl.float64)).to(x.dtype)

    @device_function
    def expm1(x):
        return _expm1_f64(x.to(tl.float64)).to(x.dtype)

    @device_function
    def log1p(x):
        d = x.to(tl.float64)
        u = 1.0 + d
        safe = tl.where((u == 1.0) | (u == float("inf")), 2.0, u)
        r = tl.log(safe) * (d / (safe - 1.0))  # the ratio first: log(u) * d overflows near max
        r = tl.where(u == 1.0, d, r)
        r = tl.where(d == float("inf"), d, r)
        r = tl.where(u == 0.0, -float("inf"), r)
        r = tl.where(u < 0.0, _nan_like(d), r)
        return r.to(x.dtype)

    @device_function
    def tanh(x):
        d = x.to(tl.float64)
        e = _expm1_f64(2.0 * tl.where(tl.abs(d) > 20.0, 0.0, d))
        r = e / (e + 2.0)
        r = tl.where(tl.abs(d) > 20.0, tl.where(d > 0, 1.0, -1.0), r)
        return r.to(x.dtype)

    @device_function
    def cbrt(x):
        d = x.to(tl.float64)
        a = tl.abs(d)
        ok = (a != 0.0) & (a != float("inf")) & (d == d)
        # A subnormal is scaled by 2^162 first: the Newton step cubes y, and a subnormal cube
        # has lost the bits the step would correct.
        tiny = a < 2.2250738585072014e-308
        a1 = tl.where(ok, a, 1.0)
        a1 = tl.where(tiny, a1 * 5.846006549323612e+48, a1)
        y = tl.exp2(tl.log2(a1) / 3.0)
        y = y - (y * y * y - a1) / (3.0 * y * y)
        y = tl.where(tiny, y * 5.551115123125783e-17, y)
        r = tl.where(ok, tl.where(d < 0, -y, y), d)
        return r.to(x.dtype)

    @device_function
    def atan2(y, x):
        # One shape first: the interpreter labels a rank-0 compare with its operand's float
        # type, and ``|`` of it with a block compare then fails.
        y, x = tl.broadcast(y, x)
        dy = y.to(tl.float64)
        dx = x.to(tl.float64)
        ay = tl.abs(dy)
        ax = tl.abs(dx)
        both_inf = (ay == float("inf")) & (ax == float("inf"))
        both_zero = (ay == 0.0) & (ax == 0.0)
        ratio = tl.where(both_inf | both_zero, 1.0, ay) / tl.where(both_inf | both_zero, 1.0, ax)
        t = _atan_f64(ratio)
        t = tl.where(both_zero, 0.0, t)
        t = tl.where(signbit(dx), 3.141592653589793 - t, t)
        r = tl.where(signbit(dy), -t, t)
        r = tl.where((dx != dx) | (dy != dy), dx + dy, r)
        return r.to(y.dtype)

    @device_function
    def pow(x, y):
        x, y = tl.broadcast(x, y)  # one shape first, as in ``atan2``
        d = x.to(tl.float64)
        e = y.to(tl.float64)
        ad = tl.abs(d)
        r = tl.exp2(e * tl.log2(ad))
        e_int = tl.math.floor(e) == e
        e_odd = e_int & (tl.abs(e) < 9007199254740992.0) & ((e % 2.0) != 0.0)
        neg = signbit(d) & (d == d)
        r = tl.where(neg & ~e_int & (ad != float("inf")) & (ad != 0.0) & (e == e), _nan_like(d), r)
        r = tl.where(neg & e_odd, -r, r)
        r = tl.where((ad == 1.0) & (tl.abs(e) == float("inf")), 1.0, r)
        r = tl.where(e == 1.0, d, r)  # exact: exp2(log2(max)) rounds to inf
        r = tl.where((e == 0.0) | (d == 1.0), 1.0, r)
        return r.to(x.dtype)

    @device_function
    def fmod(x, y):
        return x % y

else:
    @device_function
    def exp(x):
        return libdevice.exp(x)

    @device_function
    def log(x):
        return libdevice.log(x)

    @device_function
    def sin(x):
        return libdevice.sin(x)

    @device_function
    def cos(x):
        return libdevice.cos(x)

    @device_function
    def tan(x):
        return libdevice.tan(x)

    @device_function
    def erf(x):
        return libdevice.erf(x)

    @device_function
    def expm1(x):
        return libdevice.expm1(x)

    @device_function
    def log1p(x):
        return libdevice.log1p(x)

    @device_function
    def tanh(x):
        return libdevice.tanh(x)

    @device_function
    def cbrt(x):
        return libdevice.cbrt(x)

    @device_function
    def atan2(y, x):
        return libdevice.atan2(y, x)

    @device_function
    def pow(x, y):
        return libdevice.pow(x, y)

    @device_function
    def fmod(x, y):
        return libdevice.fmod(x, y)
