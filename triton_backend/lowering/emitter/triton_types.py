"""The ``tl`` types of HLO element types: in memory, in registers, and the conversions between.

Register representation (see ``numerics_policy``): f32/f64 as themselves, bf16/f16 as fp32
holding a representable value, integers as their own ``tl`` type, pred as ``tl.int1``.
Generated kernels must start with :data:`KERNEL_IMPORTS`.
"""
from __future__ import annotations

from fusion.errors import UnsupportedOpError
from fusion.ir.element_types import ElementType

KERNEL_IMPORTS = (
    "import triton\n"
    "import triton.language as tl\n"
    "from triton_backend.device_lib import elementwise_math as xla_math\n"
)

_TL_STORAGE = {
    "pred": "tl.int1", "s8": "tl.int8", "s16": "tl.int16", "s32": "tl.int32", "s64": "tl.int64",
    "u8": "tl.uint8", "u16": "tl.uint16", "u32": "tl.uint32", "u64": "tl.uint64",
    "f16": "tl.float16", "bf16": "tl.bfloat16", "f32": "tl.float32", "f64": "tl.float64",
    # Sub-byte integers: one value per byte, sign- or zero-extended (``wrap_sub_byte``).
    "s2": "tl.int8", "s4": "tl.int8", "u2": "tl.uint8", "u4": "tl.uint8",
}


def storage_dtype(t: ElementType) -> str:
    """The ``tl`` dtype of this element type in memory.

    >>> from fusion.ir.element_types import ELEMENT_TYPES as T
    >>> storage_dtype(T["bf16"]), storage_dtype(T["pred"])
    ('tl.bfloat16', 'tl.int1')
    """
    try:
        return _TL_STORAGE[t.name]
    except KeyError:
        raise UnsupportedOpError(f"element type {t.name} is not supported by the Triton backend") from None


def register_dtype(t: ElementType) -> str:
    """The ``tl`` dtype holding values of ``t`` inside a kernel (16-bit floats widen to fp32).

    >>> from fusion.ir.element_types import ELEMENT_TYPES as T
    >>> register_dtype(T["f16"]), register_dtype(T["s8"])
    ('tl.float32', 'tl.int8')
    """
    return "tl.float32" if t.name in ("bf16", "f16") else storage_dtype(t)


def render_load_widen(expr: str, t: ElementType) -> str:
    """Convert a loaded value (storage dtype) to its register representation (exact)."""
    if t.name == "bf16":
        return f"xla_math.bf16_to_f32({expr})"
    return f"({expr}).to(tl.float32)" if t.name == "f16" else expr


def render_store_narrow(expr: str, t: ElementType) -> str:
    """Convert a register value to the storage dtype (exact: 16-bit results are pre-rounded)."""
    if t.name == "bf16":
        return f"xla_math.f32_to_bf16_exact({expr})"
    return f"({expr}).to({storage_dtype(t)})" if t.name == "f16" else expr
