"""What the GPU library custom-calls (``gemm_calls``, ``cudnn_conv_calls``) share: reading
their ``backend_config``, the types they compute in, and saying, located, what in it this
project does not compute.

>>> from fusion.ir.hlo_module import HloInstruction
>>> from fusion.ir.shape import ArrayShape
>>> cc = HloInstruction("c", "custom-call", ArrayShape("f32", (2,)), ("x",),
...                     (("custom_call_target", "t"), ("backend_config", '{"a": {"b": 1}}')))
>>> backend_config_of(cc, "a"), config_number({"k": "2.5"}, "k", 0, cc)
({'b': 1}, 2.5)
>>> compute_type("bf16"), compute_type("f64")
('f32', 'f64')
"""
from __future__ import annotations

from fusion.errors import UnsupportedOpError
from fusion.ir.attributes import RawText
from fusion.ir.hlo_module import HloInstruction
from fusion.text.backend_config import parse_backend_config


#: The result types the libraries' float epilogues (scale, bias, activation) are computed for.
REAL_FLOATS = ("bf16", "f16", "f32", "f64")


def compute_type(result_dtype: str) -> str:
    """The type cuBLAS and cuDNN accumulate and compute the epilogue in for a result of
    ``result_dtype``: f32 for 16-bit floats (rounded once at the end), else the result's."""
    return "f32" if result_dtype in ("bf16", "f16") else result_dtype


def backend_config_of(instr: HloInstruction, message: str) -> dict:
    """The ``message`` of ``instr``'s backend config: inside XLA's ``GpuBackendConfig``, or
    the whole config (dumps from before that wrapper); ``{}`` when it has none."""
    raw = instr.attr("backend_config", None)
    config = parse_backend_config(raw.text if isinstance(raw, RawText) else str(raw or "")) or {}
    inner = config.get(message, config)
    return inner if isinstance(inner, dict) else {}


def config_number(config: dict, key: str, default: float, instr: HloInstruction) -> float:
    """``config[key]`` as a number (JSON gives numbers, a protobuf text or an int64 strings)."""
    value = config.get(key, default)
    try:
        return float(value)
    except (TypeError, ValueError):
        raise custom_call_error(instr, f"{key}={value!r} is not a number") from None


def custom_call_error(instr: HloInstruction, why: str) -> UnsupportedOpError:
    """``why`` the custom-call ``instr`` cannot be computed, at its line and column."""
    loc = instr.location
    return UnsupportedOpError(f"custom-call {instr.attr('custom_call_target')} ({instr.name}): "
                              f"{why}", line=loc.line if loc else None,
                              column=loc.column if loc else None, where=instr.name)


__all__ = ["REAL_FLOATS", "backend_config_of", "compute_type", "config_number",
           "custom_call_error"]
