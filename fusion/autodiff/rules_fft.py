"""The VJP rule of ``fft``: a linear map, transposed as JAX transposes it
(``jax._src.lax.fft``), with complex cotangents in JAX's convention (``cotangents``).

An ``FFT``'s matrix is symmetric, so its transpose is itself (``IFFT`` likewise).  An
``RFFT`` is a full ``FFT`` of the real input cut to its first ``n // 2 + 1`` bins: its
transpose pads the cotangent back to ``n`` bins, takes the ``FFT`` and the real part.  An
``IRFFT``'s transpose is the conjugate of the cotangent's ``RFFT`` over ``n`` points, the
bins an ``RFFT`` stores once for two doubled.

>>> sorted(FFT_VJP_RULES)
['fft']
"""
from __future__ import annotations

import math
from typing import Sequence

from fusion.autodiff.cotangents import Cotangent
from fusion.autodiff.reverse_pass import Rule, VjpContext
from fusion.ir.attributes import Literal
from fusion.ir.hlo_module import HloInstruction
from fusion.ir.shape import ArrayShape

Cts = Sequence[Cotangent]


def _fft(ctx: VjpContext, x: str, kind: str, lengths: tuple[int, ...]) -> str:
    return ctx.b.emit("fft", (x,), (("fft_type", kind), ("fft_length", lengths)))


def _rfft_transpose(ctx: VjpContext, ct: str, lengths: tuple[int, ...], dtype: str) -> str:
    b = ctx.b
    dims = b.array_shape(ct).dims
    config = [(0, 0, 0)] * (len(dims) - 1) + [(0, lengths[-1] - dims[-1], 0)]
    padded = b.pad(ct, b.scalar(0, b.array_shape(ct).dtype), config)
    return b.convert(b.unary("real", _fft(ctx, padded, "FFT", lengths)), dtype)


def _irfft_transpose(ctx: VjpContext, ct: str, lengths: tuple[int, ...]) -> str:
    b = ctx.b
    spectrum = _fft(ctx, ct, "RFFT", lengths)
    shape = b.array_shape(spectrum)
    bins, odd = shape.dims[-1], lengths[-1] % 2
    weights = (1.0,) + (2.0,) * (bins - 2 + odd) + (1.0,) * (1 - odd)
    scale = 1.0 / math.prod(lengths)
    real = b.array_shape(ct).dtype
    literal = Literal((bins,), tuple(w * scale for w in weights))
    mask = b.emit("constant", (), (("literal", literal),), ArrayShape(real, (bins,)))
    mask = b.broadcast(mask, shape.dims, (len(shape.dims) - 1,))
    return b.emit("complex", (b.multiply(b.unary("real", spectrum), mask),
                              b.negate(b.multiply(b.unary("imag", spectrum), mask))))


def vjp_fft(ctx: VjpContext, instr: HloInstruction, ct: str) -> Cts:
    kind = instr.attr("fft_type")
    lengths = tuple(instr.attr("fft_length"))
    if kind == "RFFT":
        return (_rfft_transpose(ctx, ct, lengths, ctx.operand_shape(instr, 0).dtype),)
    if kind == "IRFFT":
        return (_irfft_transpose(ctx, ct, lengths),)
    return (_fft(ctx, ct, kind, lengths),)


FFT_VJP_RULES: dict[str, Rule] = {
    "fft": vjp_fft,
}
