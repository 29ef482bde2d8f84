"""Shape inference: for each supported opcode, the result shape its operands imply.

``SHAPE_RULES`` maps an opcode to a rule ``(instruction, operand_shapes, module) -> Shape``;
the module resolves called computations.  A rule raises ``HloVerifyError`` (located at the
instruction) when the operands or attributes are invalid.  Inferred shapes carry no layout.
The rules live in ``shape_rules_*`` modules grouped by kind of op; this is the one registry.

>>> from fusion.ir.hlo_module import HloInstruction
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
from fusion.ir.hlo_module import HloInstruction, HloModule
from fusion.ir.shape import ArrayShape, Shape
from fusion.shapes.checks import fail
from fusion.shapes.rules_batch_norm import (
    shape_batch_norm_grad, shape_batch_norm_inference, shape_batch_norm_training,
)
from fusion.shapes.rules_collective import (
    shape_all_gather,
    shape_all_gather_start,
    shape_all_reduce,
    shape_all_to_all,
    shape_async_done,
    shape_collective_broadcast,
    shape_collective_permute,
    shape_collective_permute_start,
    shape_ragged_all_to_all,
    shape_device_id,
    shape_reduce_scatter,
)
from fusion.shapes.rules_control import (
    shape_async_start,
    shape_async_update,
    shape_call,
    shape_conditional,
    shape_fusion,
    shape_while,
)
from fusion.shapes.rules_data import (
    shape_bitcast,
    shape_broadcast,
    shape_concatenate,
    shape_constant,
    shape_copy,
    shape_copy_done,
    shape_copy_start,
    shape_get_dimension_size,
    shape_opt_barrier,
    shape_dynamic_slice,
    shape_dynamic_update_slice,
    shape_get_tuple_element,
    shape_iota,
    shape_pad,
    shape_parameter,
    shape_reshape,
    shape_reverse,
    shape_slice,
    shape_transpose,
    shape_tuple,
)
from fusion.shapes.rules_elementwise import (
    BINARY_KINDS,
    UNARY_KINDS,
    Rule,
    shape_binary,
    shape_bitcast_convert,
    shape_clamp,
    shape_compare,
    shape_convert,
    shape_map,
    shape_reduce_precision,
    shape_select,
    shape_stochastic_convert,
    shape_unary,
)
from fusion.shapes.rules_conv import shape_convolution
from fusion.shapes.rules_dot import shape_dot, shape_ragged_dot, shape_scaled_dot
from fusion.shapes.rules_indexed import shape_gather, shape_scatter
from fusion.shapes.rules_library import (
    shape_cholesky,
    shape_custom_call,
    shape_fft,
    shape_topk,
    shape_triangular_solve,
)
from fusion.shapes.rules_reduce import shape_reduce, shape_reduce_window, shape_select_and_scatter
from fusion.shapes.rules_random import (shape_rng, shape_rng_bit_generator,
                                        shape_rng_get_and_update_state)
from fusion.shapes.rules_sort import shape_sort

_STRUCTURAL_RULES: dict[str, Rule] = {
    "all-gather": shape_all_gather,
    "all-gather-done": shape_async_done,
    "all-gather-start": shape_all_gather_start,
    "all-reduce": shape_all_reduce,
    "all-reduce-done": shape_async_done,
    "all-reduce-start": shape_all_reduce,
    "all-to-all": shape_all_to_all,
    "async-done": shape_async_done,
    "async-start": shape_async_start,
    "async-update": shape_async_update,
    "batch-norm-grad": shape_batch_norm_grad,
    "batch-norm-inference": shape_batch_norm_inference,
    "batch-norm-training": shape_batch_norm_training,
    "bitcast": shape_bitcast,
    "bitcast-convert": shape_bitcast_convert,
    "broadcast": shape_broadcast,
    "call": shape_call,
    "cholesky": shape_cholesky,
    "clamp": shape_clamp,
    "collective-broadcast": shape_collective_broadcast,
    "collective-permute": shape_collective_permute,
    "collective-permute-done": shape_async_done,
    "collective-permute-start": shape_collective_permute_start,
    "compare": shape_compare,
    "concatenate": shape_concatenate,
    "conditional": shape_conditional,
    "constant": shape_constant,
    "convert": shape_convert,
    "convolution": shape_convolution,
    "copy": shape_copy,
    "copy-done": shape_copy_done,
    "copy-start": shape_copy_start,
    "custom-call": shape_custom_call,
    "dot": shape_dot,
    "dynamic-slice": shape_dynamic_slice,
    "dynamic-update-slice": shape_dynamic_update_slice,
    "fft": shape_fft,
    "fusion": shape_fusion,
    "gather": shape_gather,
    "get-dimension-size": shape_get_dimension_size,
    "get-tuple-element": shape_get_tuple_element,
    "iota": shape_iota,
    "map": shape_map,
    "opt-barrier": shape_opt_barrier,
    "pad": shape_pad,
    "parameter": shape_parameter,
    "partition-id": shape_device_id,
    "ragged-all-to-all": shape_ragged_all_to_all,
    "ragged-dot": shape_ragged_dot,
    "reduce": shape_reduce,
    "reduce-precision": shape_reduce_precision,
    "reduce-scatter": shape_reduce_scatter,
    "reduce-window": shape_reduce_window,
    "replica-id": shape_device_id,
    "reshape": shape_reshape,
    "reverse": shape_reverse,
    "rng": shape_rng,
    "rng-bit-generator": shape_rng_bit_generator,
    "rng-get-and-update-state": shape_rng_get_and_update_state,
    "scaled-dot": shape_scaled_dot,
    "scatter": shape_scatter,
    "select": shape_select,
    "select-and-scatter": shape_select_and_scatter,
    "slice": shape_slice,
    "sort": shape_sort,
    "stochastic-convert": shape_stochastic_convert,
    "topk": shape_topk,
    "transpose": shape_transpose,
    "triangular-solve": shape_triangular_solve,
    "tuple": shape_tuple,
    "while": shape_while,
}

# The elementwise ops share two rules (their accepted element types are tables in
# shape_rules_elementwise); the registry itself is kept sorted by opcode.
SHAPE_RULES: dict[str, Rule] = dict(
    sorted(
        {
            **{op: shape_unary for op in UNARY_KINDS},
            **{op: shape_binary for op in BINARY_KINDS},
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
