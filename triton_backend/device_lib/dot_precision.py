"""The ``tl.dot`` ``input_precision`` of XLA's bf16 split algorithms, as this Triton runs them
(re-exported by ``elementwise_math``, which generated kernels import as ``xla_math``).

XLA's ``dot_bf16_bf16_f32_x3`` and ``_x6`` multiply f32 operands as sums of two or three bf16
parts on the tensor cores; Triton lowers the same split for NVIDIA GPUs as
``input_precision="bf16x3"`` and ``"bf16x6"`` where it knows them (3.9 does).  The interpreter
takes neither, and an older Triton may not know them: there the dot is exact f32
(``"ieee"``), at least as exact as the split.  The kernel text names the constant, so one
kernel file serves both.

>>> BF16X3_PRECISION.value in ("bf16x3", "ieee"), BF16X6_PRECISION.value in ("bf16x6", "ieee")
(True, True)
"""
from __future__ import annotations

import triton.language as tl
from triton import knobs

INTERPRETED = bool(knobs.runtime.interpret)


def _gpu_precisions() -> tuple[str, ...]:
    """The ``input_precision`` values this Triton's NVIDIA backend takes (none if it has none)."""
    try:
        from triton.backends.nvidia.compiler import CUDAOptions
    except ImportError:
        return ()
    field = getattr(CUDAOptions, "__dataclass_fields__", {}).get("allowed_dot_input_precisions")
    return tuple(field.default) if field is not None else ()


def _available(precision: str) -> str:
    return precision if not INTERPRETED and precision in _gpu_precisions() else "ieee"


BF16X3_PRECISION = tl.constexpr(_available("bf16x3"))
BF16X6_PRECISION = tl.constexpr(_available("bf16x6"))

__all__ = ["BF16X3_PRECISION", "BF16X6_PRECISION"]
