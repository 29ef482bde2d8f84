"""Shape inference: for each supported opcode, the result shape its operands imply.

``SHAPE_RULES`` maps an opcode to a rule ``(instruction, operand_shapes, module) -> Shape``;
the module resolves called computations.  A rule raises ``HloVerifyError`` (located at the
instruction) when the operands or attributes are invalid.  Inferred shapes carry no layout.
The rules live in ``shape_rules_*`` modules grouped by kind of op; this is the one registry.

>>> from fusion.hlo_module import HloInstruction
>>> i = HloInstruction("a", "add", ArrayShape("f32", (2,)), ("x", "y"))
>>> str(infer_shape(i, (ArrayShape("f32", (2,)), ArrayShape("f32", (2,))), None))
'f32[2]'
>>> try:
...     infer_shape(i, (ArrayShape("f32", (2,)), ArrayShape("s32", (2,))), None)
... except HloVerifyError as e:
...     print(e.message)
the operands of add have mismatched element types f32, s32
"""
from __future__ import annotations

from typing import Sequence

from fusion.errors import HloVerifyError
from fusion.hlo_module import HloInstruction, HloModule
from fusion.shape import ArrayShape, Shape
from fusion.shape_checks import fail
from fusion.shape_rules_control import (
    infer_call,
    infer_conditional,
    infer_custom_call,
    infer_fusion,
    infer_while,
)
from fusion.shape_rules_data import (
    infer_bitcast,
    infer_broadcast,
    infer_concatenate,
    infer_constant,
    infer_copy,
    infer_dynamic_slice,
    infer_dynamic_update_slice,
    infer_get_tuple_element,
    infer_iota,
    infer_pad,
    infer_parameter,
    infer_reshape,
    infer_reverse,
    infer_slice,
    infer_transpose,
    infer_tuple,
)
from fusion.shape_rules_elementwise import (
    BINARY_KINDS,
    UNARY_KINDS,
    Rule,
    infer_binary,
    infer_bitcast_convert,
    infer_clamp,
    infer_compare,
    infer_convert,
    infer_map,
    infer_reduce_precision,
    infer_select,
    infer_unary,
)
from fusion.shape_rules_indexed import infer_gather, infer_scatter
from fusion.shape_rules_reduce import (
    infer_dot,
    infer_reduce,
    infer_reduce_window,
    infer_select_and_scatter,
    infer_sort,
)

_STRUCTURAL_RULES: dict[str, Rule] = {
    "bitcast": infer_bitcast,
    "bitcast-convert": infer_bitcast_convert,
    "broadcast": infer_broadcast,
    "call": infer_call,
    "clamp": infer_clamp,
    "compare": infer_compare,
    "concatenate": infer_concatenate,
    "conditional": infer_conditional,
    "constant": infer_constant,
    "convert": infer_convert,
    "copy": infer_copy,
    "custom-call": infer_custom_call,
    "dot": infer_dot,
    "dynamic-slice": infer_dynamic_slice,
    "dynamic-update-slice": infer_dynamic_update_slice,
    "fusion": infer_fusion,
    "gather": infer_gather,
    "get-tuple-element": infer_get_tuple_element,
    "iota": infer_iota,
    "map": infer_map,
    "pad": infer_pad,
    "parameter": infer_parameter,
    "reduce": infer_reduce,
    "reduce-precision": infer_reduce_precision,
    "reduce-window": infer_reduce_window,
    "reshape": infer_reshape,
    "reverse": infer_reverse,
    "scatter": infer_scatter,
    "select": infer_select,
    "select-and-scatter": infer_select_and_scatter,
    "slice": infer_slice,
    "sort": infer_sort,
    "transpose": infer_transpose,
    "tuple": infer_tuple,
    "while": infer_while,
}

# The elementwise ops share two rules (their accepted element types are tables in
# shape_rules_elementwise); the registry itself is kept sorted by opcode.
SHAPE_RULES: dict[str, Rule] = dict(
    sorted(
        {
            **{op: infer_unary for op in UNARY_KINDS},
            **{op: infer_binary for op in BINARY_KINDS},
            **_STRUCTURAL_RULES,
        }.items()
    )
)


def infer_shape(
    instr: HloInstruction, operand_shapes: Sequence[Shape], module: HloModule | None
) -> Shape:
    """The shape ``instr`` must have given its operands' shapes; ``HloVerifyError`` if invalid.

    An opcode without a rule is an error naming it: ``unsupported op 'foo'``.
    """
    rule = SHAPE_RULES.get(instr.opcode)
    if rule is None:
        fail(instr, f"unsupported op '{instr.opcode}'")
    return rule(instr, tuple(operand_shapes), module)


def same_shape(a: Shape, b: Shape) -> bool:
    """Equal element types and dims, ignoring layouts (and dynamic-dim markers).

    >>> same_shape(ArrayShape("f32", (2, 3)), ArrayShape("f32", (2, 3)).with_layout(None))
    True
    """
    if isinstance(a, ArrayShape) or isinstance(b, ArrayShape):
        return (
            isinstance(a, ArrayShape) and isinstance(b, ArrayShape)
            and a.dtype == b.dtype and a.dims == b.dims
        )
    return len(a.elements) == len(b.elements) and all(
        same_shape(x, y) for x, y in zip(a.elements, b.elements)
    )


__all__ = ["SHAPE_RULES", "HloVerifyError", "infer_shape", "same_shape"]
