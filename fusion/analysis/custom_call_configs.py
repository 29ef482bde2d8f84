"""What the GPU library custom-calls (``gemm_calls``, ``cudnn_conv_calls``) share: reading
their ``backend_config`` and saying, located, what in it this project does not compute.

>>> from fusion.ir.hlo_module import HloInstruction
>>> from fusion.ir.shape import ArrayShape
>>> cc = HloInstruction("c", "custom-call", ArrayShape("f32", (2,)), ("x",),
...                     (("custom_call_target", "t"), ("backend_config", '{"a": {"b": 1}}')))
>>> backend_config_of(cc, "a"), config_number({"k": "2.5"}, "k", 0, cc)
({'b': 1}, 2.5)
"""
from __future__ import annotations

from fusion.errors import UnsupportedOpError
from fusion.ir.attributes import RawText
from fusion.ir.hlo_module import HloInstruction
from fusion.text.backend_config import parse_backend_config


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


__all__ = ["backend_config_of", "config_number", "custom_call_error"]
