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
    # 8-bit floats: held in fp32 like bf16, converted by ``device_lib.float8`` (and
    # ``float8_formats``: the types Triton has no NVIDIA dtype for move as their byte).
    "f8e4m3fn": "tl.float8e4nv", "f8e5m2": "tl.float8e5",
    "f8e3m4": "tl.uint8", "f8e4m3": "tl.uint8", "f8e4m3b11fnuz": "tl.uint8",
    "f8e4m3fnuz": "tl.uint8", "f8e5m2fnuz": "tl.uint8", "f8e8m0fnu": "tl.uint8",
    "f4e2m1fn": "tl.uint8",  # one code a byte, as the sub-byte integers
}

#: Floats narrower than fp32 that a kernel holds in fp32 registers, rounding each op's result.
#: The floats of 8 bits or fewer (``device_lib.float8``, ``float8_formats``).
FLOAT8 = frozenset({"f4e2m1fn", "f8e3m4", "f8e4m3", "f8e4m3b11fnuz", "f8e4m3fn", "f8e4m3fnuz",
                    "f8e5m2", "f8e5m2fnuz", "f8e8m0fnu"})
NARROW_FLOATS = frozenset({"bf16", "f16"}) | FLOAT8


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
    """The ``tl`` dtype holding values of ``t`` inside a kernel (narrow floats widen to fp32).

    >>> from fusion.ir.element_types import ELEMENT_TYPES as T
    >>> register_dtype(T["f16"]), register_dtype(T["s8"]), register_dtype(T["f8e4m3fn"])
    ('tl.float32', 'tl.int8', 'tl.float32')
    """
    return "tl.float32" if t.name in NARROW_FLOATS else storage_dtype(t)


def render_load_widen(expr: str, t: ElementType) -> str:
    """Convert a loaded value (storage dtype) to its register representation (exact).

    >>> from fusion.ir.element_types import ELEMENT_TYPES as T
    >>> render_load_widen("v", T["f8e5m2"])
    'xla_math.f8e5m2_to_f32(v)'
    """
    if t.name in FLOAT8:
        return f"xla_math.{t.name}_to_f32({expr})"
    if t.name == "bf16":
        return f"xla_math.bf16_to_f32({expr})"
    return f"({expr}).to(tl.float32)" if t.name == "f16" else expr


def render_store_narrow(expr: str, t: ElementType) -> str:
    """Convert a register value to the storage dtype (exact: narrow results are pre-rounded)."""
    if t.name in FLOAT8:
        return f"xla_math.f32_to_{t.name}_exact({expr})"
    if t.name == "bf16":
        return f"xla_math.f32_to_bf16_exact({expr})"
    return f"({expr}).to({storage_dtype(t)})" if t.name == "f16" else expr


def masked_fill(t: ElementType) -> str:
    """The ``other=`` of a masked load of ``t``: Triton's interpreter cannot cast the integer
    0 to an fp8 type, so fp8 loads fill with 0.0 (the same zero bits).

    >>> from fusion.ir.element_types import ELEMENT_TYPES as T
    >>> masked_fill(T["f8e4m3fn"]), masked_fill(T["f32"])
    ('0.0', '0')
    """
    return "0.0" if t.name in FLOAT8 else "0"


def render_round(expr: str, t: ElementType) -> str:
    """Round an fp32 register value to the narrow float ``t``, still held in fp32 (nearest
    even, as XLA rounds each op's result); ``expr`` itself for other types.

    >>> from fusion.ir.element_types import ELEMENT_TYPES as T
    >>> render_round("a", T["f8e4m3fn"]), render_round("a", T["f32"])
    ('xla_math.round_to_f8e4m3fn(a)', 'a')
    """
    if t.name in FLOAT8:
        return f"xla_math.round_to_{t.name}({expr})"
    if t.name == "bf16":
        return f"xla_math.round_to_bf16({expr})"
    if t.name == "f16":
        return f"({expr}).to(tl.float16).to(tl.float32)"
    return expr
