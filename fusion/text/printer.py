"""The HLO text printer, in the style of ``jax.jit(f).lower(x).as_text(dialect="hlo")``.

Names are printed without ``%`` and computations as ``name {`` / ``ENTRY name {``, as current
XLA prints unoptimized modules.  The output parses back to an equal module: attributes keep
their parsed order, opaque ones are printed verbatim, and floats are printed with the fewest
digits that give back the same value of their element type.

>>> from fusion.text.parser import parse_hlo
>>> text = "HloModule m\\n\\nENTRY e {\\n  p = f32[2]{0} parameter(0)\\n" \\
...        "  ROOT s = f32[1]{0} slice(p), slice={[0:1]}\\n}\\n"
>>> print_hlo(parse_hlo(text)) == text
True
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from fusion.ir.attributes import Literal, PaddingConfig, RawText, SliceDim, Window
from fusion.ir.element_types import ELEMENT_TYPES
from fusion.ir.hlo_module import CALLED_COMPUTATION_KEYS, HloComputation, HloInstruction, HloModule
from fusion.ir.shape import Shape, TupleShape

_QUOTED_KEYS = frozenset({"custom_call_target"})
_PSEUDO_ATTRIBUTES = frozenset({"literal", "parameter_number"})


def print_hlo(module: HloModule) -> str:
    """The text of a whole module; ``parse_hlo(print_hlo(m)) == m``."""
    header = "HloModule " + module.name
    for key, value in module.attributes:
        header += f", {key}={value}"
    parts = [header]
    if module.stack_frames:
        parts.append(module.stack_frames)
    for comp in module.computations:
        parts.append(print_computation(comp, is_entry=comp.is_entry or comp.name == module.entry_name))
    return "\n\n".join(parts) + "\n"


def print_computation(comp: HloComputation, *, is_entry: bool | None = None) -> str:
    """``[ENTRY ]name {`` then one instruction per line, then ``}``."""
    entry = comp.is_entry if is_entry is None else is_entry
    lines = [("ENTRY " if entry else "") + comp.name + " {"]
    for instr in comp.instructions:
        lines.append("  " + print_instruction(instr, is_root=instr.name == comp.root_name))
    lines.append("}")
    return "\n".join(lines)


def print_instruction(instr: HloInstruction, *, is_root: bool = False) -> str:
    """One instruction line without indentation.

    >>> from fusion.ir.shape import ArrayShape
    >>> print_instruction(HloInstruction("c", "constant", ArrayShape("bf16", ()), (),
    ...     (("literal", Literal((), (0.796875,))),)))
    'c = bf16[] constant(0.797)'
    """
    if instr.opcode == "constant" and instr.has_attr("literal"):
        inside = print_literal(instr.attr("literal"), instr.shape)
    elif instr.opcode == "parameter" and instr.has_attr("parameter_number"):
        inside = str(instr.attr("parameter_number"))
    else:
        inside = ", ".join(instr.operands)
    text = f"{'ROOT ' if is_root else ''}{instr.name} = {instr.shape} {instr.opcode}({inside})"
    for key, value in instr.attributes:
        if key not in _PSEUDO_ATTRIBUTES:
            text += f", {key}={print_attribute_value(key, value)}"
    return text


def print_shape(shape: Shape) -> str:
    """``f32[2,3]{1,0}``, ``(f32[], s32[2])``: the shape's own ``str``."""
    return str(shape)


def print_attribute_value(key: str, value: Any) -> str:
    """The text after ``key=`` for a typed or raw attribute value.

    >>> print_attribute_value("dimensions", (0, 1))
    '{0,1}'
    >>> print_attribute_value("branch_computations", ("a", "b"))
    '{a, b}'
    """
    if isinstance(value, RawText):
        return value.text
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        if key in _QUOTED_KEYS:
            return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
        return value
    if isinstance(value, PaddingConfig):
        return _print_padding(value)
    if isinstance(value, Window):
        return str(value)
    if isinstance(value, tuple):
        if value and isinstance(value[0], SliceDim):
            # XLA prints every stride as soon as one dim is strided.
            if all(d.stride == 1 for d in value):
                return "{" + ", ".join(str(d) for d in value) + "}"
            return "{" + ", ".join(f"[{d.start}:{d.limit}:{d.stride}]" for d in value) + "}"
        if key in CALLED_COMPUTATION_KEYS:
            return "{" + ", ".join(value) + "}"
        return "{" + ",".join(print_attribute_value(key, v) for v in value) + "}"
    return str(value)


def _print_padding(config: PaddingConfig) -> str:
    # XLA prints the interior field on every dim as soon as one dim has interior padding.
    if not any(d.interior for d in config.dims):
        return str(config)
    return "x".join(f"{d.low}_{d.high}_{d.interior}" for d in config.dims)


def print_literal(literal: Literal, shape: Shape | str) -> str:
    """The text of a constant's value for ``shape`` (or an element type name).

    >>> print_literal(Literal((2, 2), (1.0, 0.1, math.inf, math.nan)), "f32")
    '{ {1, 0.1}, {inf, nan} }'
    """
    if literal.elements is not None:
        element_shapes = shape.elements if isinstance(shape, TupleShape) else (None,) * len(
            literal.elements)
        return "(" + ", ".join(
            print_literal(e, s if s is not None else "f64")
            for e, s in zip(literal.elements, element_shapes)
        ) + ")"
    dtype = shape if isinstance(shape, str) else shape.dtype
    fmt = _value_formatter(dtype)
    texts = [fmt(v) for v in literal.values]
    if not literal.dims:
        return texts[0] if texts else "{}"
    return _nest(texts, literal.dims)


def _nest(texts: list[str], dims: tuple[int, ...]) -> str:
    if len(dims) == 1:
        return "{" + ", ".join(texts) + "}"
    step = math.prod(dims[1:])
    rows = [_nest(texts[i * step : (i + 1) * step], dims[1:]) for i in range(dims[0])]
    return "{ " + ", ".join(rows) + " }" if rows else "{}"


def _value_formatter(dtype: str):
    etype = ELEMENT_TYPES[dtype]
    if etype.kind == "pred":
        return lambda v: "true" if v else "false"
    if etype.kind in ("signed", "unsigned"):
        return lambda v: str(int(v))
    if etype.kind == "complex":
        part = _float_formatter("f32" if dtype == "c64" else "f64")
        return lambda v: f"({part(complex(v).real)}, {part(complex(v).imag)})"
    return _float_formatter(dtype)


def _float_formatter(dtype: str):
    np_type = ELEMENT_TYPES[dtype].numpy_dtype().type

    def fmt(v: float) -> str:
        v = float(v)
        if math.isnan(v):
            return "-nan" if math.copysign(1.0, v) < 0 else "nan"
        if math.isinf(v):
            return "-inf" if v < 0 else "inf"
        if v == 0.0:  # not "-0": XLA's parser (and ours) reads that integer token as +0
            return "-0.0" if math.copysign(1.0, v) < 0 else "0"
        with np.errstate(all="ignore"):
            target = np_type(v)
            for digits in range(1, 18):
                text = f"{v:.{digits}g}"
                if np_type(float(text)) == target:
                    return text
        return repr(v)

    return fmt
