"""The per-instruction limits of the Triton path: the ``check`` functions of ``op_coverage``'s table.

Each check (``check(module, computation, instruction) -> reason or None``) says why one
instruction of a covered opcode is still beyond what its handler emits: a bitcast changing the
element width, an elementwise op on types its lowering refuses (decided by rendering it, the
lowering's own rules), a reversed reduce-window, a dot, convolution, sort or scatter their
template's planner refuses (:func:`fusion_template`, also how ``op_coverage`` judges a whole
fusion), a library call with an unknown target, a tiled layout or element types LAPACK lacks.
They are apart from the table (``op_coverage.COVERAGE``) and its walk over a module because
they hold the backend's knowledge per op, reached through the emitters' and templates' own
rules; the table only says which check applies.  Nothing here imports torch or triton.

>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... ENTRY e {
...   x = f32[4] parameter(0)
...   ROOT b = s16[4,2] bitcast(x)
... }''')
>>> bitcast_check(m, m.entry, m.entry.root)
'bitcast from 32-bit to 16-bit elements (a kernel bitcast cannot change the element width)'
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from fusion.analysis.collectives import single_device_problem
from fusion.analysis.sharding import is_sharding_call, sharding_call_problem
from fusion.analysis.library_calls import (
    TARGETS, layout_problem, library_call, opaque_target_reason,
)
from fusion.errors import FusionCompilerError, UnsupportedOpError
from fusion.ir.element_types import ELEMENT_TYPES
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.ir.shape import ArrayShape, Shape, TupleShape, flatten_shape
from fusion.transforms.map_inlining import is_scalar_elementwise
from triton_backend.lowering.emitter.triton_types import storage_dtype
from triton_backend.lowering.rules.combine_function import accumulator_type
from triton_backend.lowering.rules.elementwise_rules import render_elementwise
from triton_backend.templates.attention.driver import attention_pattern, is_attention_fusion
from triton_backend.templates.attention.backward_driver import is_score_space_fusion
from triton_backend.templates.conv.driver import conv_spec, is_conv_fusion
from triton_backend.templates.dot.driver import dot_spec, is_dot_fusion
from triton_backend.templates.scatter.kernel import scatter_plan
from triton_backend.templates.ragged_dot.kernel import is_ragged_dot_fusion, ragged_dot_plan
from triton_backend.templates.select_and_scatter.kernel import (
    is_select_and_scatter_fusion,
    select_and_scatter_plan,
)
from triton_backend.templates.sort.driver import (
    SORT_OPERANDS,
    comparator_order,
    is_sort_fusion,
    sort_method,
    sort_of,
)
from triton_backend.driver.compiled_fusion import SUPPORTED_KINDS, emitter_analysis
from triton_backend.driver.single_op_fusion import wrap_lone_ops

#: ``check(module, computation, instruction) -> reason or None`` for one instruction's limits.
Check = Callable[[HloModule, HloComputation, HloInstruction], "str | None"]


def _kernel_types() -> frozenset[str]:
    supported = set()
    for name, element_type in ELEMENT_TYPES.items():
        try:
            storage_dtype(element_type)
        except UnsupportedOpError:
            continue
        supported.add(name)
    return frozenset(supported)


#: Element types a kernel can load, compute in and store (``elementwise_lowering``).
KERNEL_ELEMENT_TYPES: frozenset[str] = _kernel_types()


def _bits(shape: Shape) -> int | None:
    return shape.element_type.bits if isinstance(shape, ArrayShape) else None


def collective_check(module: HloModule, comp: HloComputation, instr: HloInstruction) -> str | None:
    """A collective runs on one device: its groups may name device 0 alone."""
    return single_device_problem(instr, module)


def bitcast_check(module: HloModule, comp: HloComputation, instr: HloInstruction) -> str | None:
    source = comp.instruction(instr.operands[0]).shape
    if _bits(source) != _bits(instr.shape):
        return (f"bitcast from {_bits(source)}-bit to {_bits(instr.shape)}-bit elements "
                "(a kernel bitcast cannot change the element width)")
    return None


def elementwise_check(module: HloModule, comp: HloComputation, instr: HloInstruction,
                       widen: bool = False) -> str | None:
    """Render the op at dummy operands: the lowering's own dtype rules decide (no copy of them)."""
    types = [comp.instruction(o).shape for o in instr.operands] + [instr.shape]
    if not all(isinstance(t, ArrayShape) for t in types):
        return f"{instr.opcode} of a tuple-shaped value"
    if {t.dtype for t in types} - KERNEL_ELEMENT_TYPES:
        return None  # reported with the element types
    element_types = [accumulator_type(t.element_type) if widen else t.element_type for t in types]
    try:
        render_elementwise(instr.opcode, [f"x{k}" for k in range(len(instr.operands))],
                           element_types[:-1], element_types[-1], dict(instr.attributes))
    except UnsupportedOpError as err:
        return err.message
    return None


def map_check(module: HloModule, comp: HloComputation, instr: HloInstruction) -> str | None:
    """A map is inlined (``fusion.transforms.map_inlining``) when its ``to_apply`` is scalar
    elementwise ops on its parameters and constants; any other is refused."""
    called = instr.attr("to_apply", None)
    if isinstance(called, str) and module.has_computation(called) \
            and is_scalar_elementwise(module.computation(called)):
        return None
    return (f"map's to_apply {called} is more than scalar elementwise ops on its parameters "
            "and constants, so it cannot be inlined as array ops")


def reduce_window_check(module: HloModule, comp: HloComputation,
                         instr: HloInstruction) -> str | None:
    window = instr.attr("window", None)
    if window is not None and any(d.window_reversal for d in window.dims):
        return "reduce-window with window reversal is not emitted"
    return None


def fusion_template(module: HloModule, fusion_instr: HloInstruction) -> tuple[str | None, str | None]:
    """``(template or None, reason or None)``: how ``compile_fusion`` would emit the fusion.

    The template is ``"attention"``, ``"attention_backward"``, ``"dot"``, ``"sort"`` or
    ``"scatter"`` (``None`` for the
    index-expression emitter); the reason says why it cannot be emitted, from the template's own planner.
    """

    try:
        if is_attention_fusion(module, fusion_instr):
            attention_pattern(module, fusion_instr)
            return "attention", None
        if is_conv_fusion(module, fusion_instr):
            conv_spec(module, fusion_instr)
            return "convolution", None
        if is_dot_fusion(module, fusion_instr):
            dot_spec(module, fusion_instr)
            return "dot", None
        if is_ragged_dot_fusion(module, fusion_instr):
            ragged_dot_plan(module, fusion_instr)
            return "ragged_dot", None
        if is_select_and_scatter_fusion(module, fusion_instr):
            select_and_scatter_plan(module, fusion_instr)
            return "select_and_scatter", None
        if is_sort_fusion(module, fusion_instr):
            return "sort", _sort_reason(module, fusion_instr)
        if is_score_space_fusion(module, fusion_instr):
            return "attention_backward", None
        kind = emitter_analysis(module, fusion_instr)
        if kind.kind.value == "scatter":
            scatter_plan(module, fusion_instr)
            return "scatter", None
        if kind.kind.value not in SUPPORTED_KINDS:
            return None, (f"{kind.kind.value} fusions are not emitted by the Triton backend "
                          f"({kind.reason})")
    except FusionCompilerError as err:
        return None, err.message
    return None, None


def _sort_reason(module: HloModule, fusion_instr: HloInstruction) -> str | None:
    sort = sort_of(module, fusion_instr)
    comp = module.computation(fusion_instr.attr("calls"))
    for name in sort.operands:
        if comp.instruction(name).opcode not in SORT_OPERANDS:
            return (f"sort operand {name} is a {comp.instruction(name).opcode}; sort fusions take "
                    "parameters or iotas as operands")
    sort_method(module, fusion_instr, sort)
    return None


def template_check(module: HloModule, comp: HloComputation, instr: HloInstruction) -> str | None:
    """A lone dot/sort/scatter: plan it as the one-op fusion ``compile_hlo`` would wrap it in."""
    wrapped = wrap_lone_ops(module, {comp.name: (instr.name,)})
    for fusion in wrapped.computation(comp.name).instructions:
        if fusion.opcode == "fusion" and wrapped.computation(fusion.attr("calls")).root_name == instr.name:
            return fusion_template(wrapped, fusion)[1]
    return None


#: Element types ``torch.linalg`` factors (LAPACK's s, d, c, z).
_LINALG_TYPES = frozenset({"f32", "f64", "c64", "c128"})


def library_check(module: HloModule, comp: HloComputation, instr: HloInstruction) -> str | None:
    """A sharding call (``fusion.analysis.sharding``) that is the identity on one device, or
    a library call (``fusion.analysis.library_calls``) the host rules run: a known target with valid
    options, untiled layouts, LAPACK's element types for the linear algebra, and for XLA's
    ``TopK`` custom-call a comparator ordering the values descending."""
    if is_sharding_call(instr):
        return sharding_call_problem(instr, tuple(comp.instruction(o).shape for o in instr.operands))
    if instr.opcode == "custom-call" and instr.attr("custom_call_target", None) not in TARGETS:
        return opaque_target_reason(instr.attr("custom_call_target", None))
    try:
        call = library_call(instr)
    except FusionCompilerError as err:
        return err.message
    problem = layout_problem(call, instr, tuple(comp.instruction(o).shape for o in instr.operands))
    if problem is not None:
        return problem
    shapes = [*flatten_shape(instr.shape)]
    for operand in instr.operands:
        shapes.extend(flatten_shape(comp.instruction(operand).shape))
    for shape in shapes:
        if shape.layout is not None and (shape.layout.is_tiled or shape.layout.element_size_in_bits):
            return f"{instr.opcode} on the tiled or packed layout {shape}: library calls take untiled tensors"
    if call.routine not in ("fft", "lu_pivots_to_permutation", "topk"):
        matrix = flatten_shape(comp.instruction(instr.operands[0]).shape)[0]
        if matrix.dtype not in _LINALG_TYPES:
            return f"{call.routine} of {matrix.dtype} matrices (torch.linalg takes f32, f64, c64, c128)"
    if call.routine == "topk" and instr.opcode == "custom-call":
        return _topk_comparator_reason(module, instr)
    return None


def _topk_comparator_reason(module: HloModule, instr: HloInstruction) -> str | None:
    """XLA:CPU's ``TopK`` custom-call sorts by its comparator: it must order values descending."""
    comparators = instr.attr("called_computations", ())
    comparators = (comparators,) if isinstance(comparators, str) else tuple(comparators)
    if len(comparators) != 1:
        return "TopK needs exactly one comparator in called_computations"
    values = flatten_shape(instr.shape)[0]
    # XLA:CPU's comparator compares the values alone (two parameters) or the values and
    # their indices (four): probe it as the sort of that many operands.
    operands = len(module.computation(comparators[0]).parameters) // 2
    sort = replace(instr, opcode="sort",
                   shape=values if operands == 1 else TupleShape(tuple(flatten_shape(instr.shape))),
                   operands=instr.operands * operands,
                   attributes=(("dimensions", (values.rank - 1,)), ("to_apply", comparators[0])))
    try:
        order = comparator_order(module, sort)
    except FusionCompilerError as err:
        return f"TopK comparator: {err.message}"
    if not order.descending:
        return f"TopK comparator {comparators[0]} orders values ascending; top-k takes the largest"
    return None


__all__ = [
    "Check",
    "KERNEL_ELEMENT_TYPES",
    "bitcast_check",
    "elementwise_check",
    "fusion_template",
    "library_check",
    "reduce_window_check",
    "template_check",
]
