"""Floating-point division as XLA computes it, complex division included.

NumPy divides complex numbers its own way (it ignores the sign of a zero divisor, for one);
XLA uses Smith's algorithm and then, where that gives NaN in both parts, C99's results for a
zero divisor, an infinite dividend or an infinite divisor
(``ElementalIrEmitter::EmitComplexDivide``).  The kernels compute the same formula on real
and imaginary parts (``fusion.transforms.complex_expansion``).

>>> divide(np.array([1 + 0j], np.complex64), np.array([complex(-0.0, 0)], np.complex64)).tolist()
[(-inf+nanj)]
>>> divide(np.array([6.0]), np.array([3.0])).tolist()
[2.0]
"""
from __future__ import annotations

import numpy as np


def divide(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``x / y`` for float or complex arrays (broadcast), with XLA's complex semantics."""
    if not (np.iscomplexobj(x) or np.iscomplexobj(y)):
        return np.divide(x, y)
    dtype = np.result_type(x, y)
    x, y = np.broadcast_arrays(np.asarray(x, dtype), np.asarray(y, dtype))
    part = np.real(np.zeros((), dtype)).dtype
    a_r, a_i, b_r, b_i = x.real, x.imag, y.real, y.imag
    zero, one, inf = part.type(0), part.type(1), part.type(np.inf)
    with np.errstate(all="ignore"):
        narrow = np.abs(b_r) < np.abs(b_i)
        r1 = b_i / b_r
        d1 = b_r + b_i * r1
        r2 = b_r / b_i
        d2 = b_i + b_r * r2
        c_r = np.where(narrow, (a_r * r2 + a_i) / d2, (a_r + a_i * r1) / d1)
        c_i = np.where(narrow, (a_i * r2 - a_r) / d2, (a_i - a_r * r1) / d1)
        abs_br, abs_bi, abs_ar, abs_ai = np.abs(b_r), np.abs(b_i), np.abs(a_r), np.abs(a_i)
        zero_divisor = (abs_br == 0) & (abs_bi == 0) & (~np.isnan(a_r) | ~np.isnan(a_i))
        signed_inf = np.copysign(inf, b_r)
        case1 = (signed_inf * a_r, signed_inf * a_i)
        a_r_inf, a_i_inf = abs_ar == inf, abs_ai == inf
        inf_dividend = (a_r_inf | a_i_inf) & (abs_br < inf) & (abs_bi < inf)
        s_r = np.copysign(np.where(a_r_inf, one, zero), a_r)
        s_i = np.copysign(np.where(a_i_inf, one, zero), a_i)
        case2 = (inf * (s_r * b_r + s_i * b_i), inf * (s_i * b_r - s_r * b_i))
        b_r_inf, b_i_inf = abs_br == inf, abs_bi == inf
        inf_divisor = (b_r_inf | b_i_inf) & (abs_ar < inf) & (abs_ai < inf)
        t_r = np.copysign(np.where(b_r_inf, one, zero), b_r)
        t_i = np.copysign(np.where(b_i_inf, one, zero), b_i)
        case3 = (zero * (a_r * t_r + a_i * t_i), zero * (a_i * t_r - a_r * t_i))
        nan = np.isnan(c_r) & np.isnan(c_i)
        parts = []
        for k, smith in enumerate((c_r, c_i)):
            fixed = np.where(zero_divisor, case1[k],
                             np.where(inf_dividend, case2[k], np.where(inf_divisor, case3[k], smith)))
            parts.append(np.where(nan, fixed, smith))
    out = np.empty(x.shape, dtype)
    out.real, out.imag = parts
    return out


__all__ = ["divide"]
