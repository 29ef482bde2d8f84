"""One rule per HLO opcode: emit an instruction's value at index expressions.

A rule is ``rule(emitter, instr, indices) -> identifier`` (a tuple of identifiers for
tuple-shaped values).  Where an op reads its operands is not re-derived here: it comes from the
indexing analysis' output -> operand maps (``operand_indices``), so elementwise ops (identity,
or ``()`` for a scalar operand) and data-movement ops read their operands at those maps'
results.  What the maps do not say stays in the rules: which operand a concatenate selects,
the padding value outside a pad's domain, a dynamic-update-slice's choice between update and
base, and the element computation itself (``elementwise_lowering``).  Parameters and array
constants are loaded (see ``memory_rules``); reductions, whose range variables become
reduction axes, are in ``reduction_rules`` and ``reduce_window_rules``.  Anything else raises
``UnsupportedOpError`` naming the op and why.
"""
from __future__ import annotations

from collections.abc import Callable

from fusion.analysis.splat import splat_value
from fusion.ir.element_types import ELEMENT_TYPES
from fusion.errors import UnsupportedOpError
from fusion.ir.hlo_module import HloInstruction
from tiling.maps.affine_expr import AffineExpr
from triton_backend.lowering.emitter.addressing import physical_strides
from triton_backend.lowering.rules.memory_rules import lower_constant, lower_parameter
from triton_backend.lowering.emitter.operand_indices import (
    domain_mask,
    exact_operand_indices,
    operand_indices,
    operand_map,
)
from triton_backend.lowering.rules.reduce_window_rules import lower_reduce_window
from triton_backend.lowering.rules.reduction_rules import lower_reduce
from triton_backend.lowering.emitter.value_emitter import (
    Value,
    ValueEmitter,
    array_shape,
    element_type_of,
)
from triton_backend.lowering.rules.elementwise_rules import ELEMENTWISE_RULES, render_elementwise

Indices = tuple[AffineExpr, ...]
Rule = Callable[[ValueEmitter, HloInstruction, Indices], Value]


def _operand_shape(em: ValueEmitter, instr: HloInstruction, i: int):
    return array_shape(em.instruction(instr.operands[i]))


def _single(em: ValueEmitter, name: str, indices: Indices) -> str:
    value = em.value(name, indices)
    if not isinstance(value, str):
        raise UnsupportedOpError(f"tuple-shaped operand {name} used as an array", where=name)
    return value


def lower_elementwise(em: ValueEmitter, instr: HloInstruction, indices: Indices) -> Value:
    why = "operand and result ranks differ (a bitcast-convert between different bit widths?)"
    # Rank-0 operands (a broadcast scalar, clamp's or select's scalar operand) become blocks
    # first, so every operation of the lowering combines tensors of one rank.
    operands = tuple(em.spanning(_single(em, o, exact_operand_indices(em, instr, k, indices,
                                                                      why=why)), indices)
                     for k, o in enumerate(instr.operands))
    types = tuple(element_type_of(em.instruction(o)) for o in instr.operands)
    expr = render_elementwise(instr.opcode, operands, types, element_type_of(instr),
                              dict(instr.attributes),
                              tuple(splat_value(em.instruction(o), em.instruction)
                                    for o in instr.operands))
    return em.bind(expr, instr.name)


def lower_through_map(em: ValueEmitter, instr: HloInstruction, indices: Indices) -> Value:
    """Broadcast, copy, dynamic-slice, reshape, reverse, slice, transpose: operand 0 where its
    map says (dynamic-slice offsets are the map's runtime variables, read and clamped)."""
    return em.value(instr.operands[0], exact_operand_indices(em, instr, 0, indices))


def lower_bitcast(em: ValueEmitter, instr: HloInstruction, indices: Indices) -> Value:
    out, operand = array_shape(instr), _operand_shape(em, instr, 0)
    if out.element_type.bits != operand.element_type.bits:
        raise UnsupportedOpError("bitcast changing the element width", where=instr.name)
    # The analysis' map ignores packing (E(n)) and refuses tiles; a physical layout has no
    # per-dim strides to reinterpret, so it is rejected here with that reason.
    physical_strides(out), physical_strides(operand)
    value = lower_through_map(em, instr, indices)
    if out.element_type.name == operand.element_type.name:
        return value
    # Another element type of the same width: the map moves elements, the bits are then
    # reinterpreted exactly as bitcast-convert does (not converted by value).
    expr = render_elementwise("bitcast-convert", (value,), (operand.element_type,), out.element_type)
    return em.bind(expr, instr.name)


def lower_concatenate(em: ValueEmitter, instr: HloInstruction, indices: Indices) -> Value:
    # The maps give each operand's index; each holds only on its span of the axis (its dim
    # bound), which the kernel honours by selecting among the operands in order.
    (axis,) = instr.attr("dimensions")
    pieces = []
    for k, name in enumerate(instr.operands):
        m = operand_map(em, instr, k)
        if m is None:  # an empty operand is never read
            continue
        pieces.append((m.dim_bounds[axis].upper + 1,
                       _single(em, name, operand_indices(em, instr, k, indices))))
    if not pieces:  # every operand is empty, so is the result: no lane is ever stored
        return _single(em, instr.operands[0], indices)
    where = em.index_tensor(indices[axis])
    expr = pieces[-1][1]
    for end, value in reversed(pieces[:-1]):
        expr = f"tl.where({where} < {end}, {value}, {expr})"
    return em.bind(expr, instr.name)


def lower_dynamic_update_slice(em: ValueEmitter, instr: HloInstruction, indices: Indices) -> Value:
    # The update's map is not restricted to the updated window (as in XLA): the kernel selects
    # the update inside the window and the base elsewhere.
    update = _operand_shape(em, instr, 1)
    inner = exact_operand_indices(em, instr, 1, indices)
    base = _single(em, instr.operands[0], exact_operand_indices(em, instr, 0, indices))
    patch = _single(em, instr.operands[1], inner)
    inside = em.in_bounds(inner, update.dims) or "True"
    return em.bind(f"tl.where({inside}, {patch}, {base})", instr.name)


def lower_gather(em: ValueEmitter, instr: HloInstruction, indices: Indices) -> Value:
    # Batching dims are in the operand's map (read at the partner output batch dim).
    return em.value(instr.operands[0],
                    exact_operand_indices(em, instr, 0, indices, hint="gather_start"))


def lower_get_tuple_element(em: ValueEmitter, instr: HloInstruction, indices: Indices) -> Value:
    # Indices pass through (the analysis' map is the identity); the rule picks the leaf.
    value = em.value(instr.operands[0], indices)
    if isinstance(value, str):
        raise UnsupportedOpError("get-tuple-element of an array", where=instr.name)
    return value[instr.attr("index")]


def lower_iota(em: ValueEmitter, instr: HloInstruction, indices: Indices) -> Value:
    # No operand, so no map: the value is the index itself.
    t = element_type_of(instr)
    index = em.index_tensor(indices[instr.attr("iota_dimension")])
    if t.is_pred:
        return em.bind(f"{index} != 0", instr.name)
    expr = render_elementwise("convert", (f"{index}.to(tl.int32)",), (ELEMENT_TYPES["s32"],), t)
    return em.bind(expr, instr.name)


def lower_pad(em: ValueEmitter, instr: HloInstruction, indices: Indices) -> Value:
    # The operand's map holds only on the non-padding positions (its dim bounds and interior
    # constraints): the kernel masks by that domain and takes the padding value elsewhere.
    m = operand_map(em, instr, 0)
    at = operand_indices(em, instr, 0, indices)
    value = _single(em, instr.operands[0], at) if at is not None else None
    padding = _single(em, instr.operands[1], exact_operand_indices(em, instr, 1, indices))
    if m is None or value is None:  # nothing of the operand survives: all padding
        return padding
    inside = domain_mask(em, m, indices)
    if inside is None:
        return value
    return em.bind(f"tl.where({inside}, {value}, {padding})", instr.name)


def lower_tuple(em: ValueEmitter, instr: HloInstruction, indices: Indices) -> Value:
    # The analysis maps one leaf at a time (identity to its operand); the emitter produces all
    # leaves at the same indices at once.
    return tuple(_single(em, o, indices) for o in instr.operands)


STRUCTURAL_RULES: dict[str, Rule] = {
    "bitcast": lower_bitcast,
    "broadcast": lower_through_map,
    "concatenate": lower_concatenate,
    "constant": lower_constant,
    "copy": lower_through_map,
    "dynamic-slice": lower_through_map,
    "dynamic-update-slice": lower_dynamic_update_slice,
    "gather": lower_gather,
    "get-tuple-element": lower_get_tuple_element,
    "iota": lower_iota,
    "pad": lower_pad,
    "parameter": lower_parameter,
    "reduce": lower_reduce,
    "reduce-window": lower_reduce_window,
    "reshape": lower_through_map,
    "reverse": lower_through_map,
    "slice": lower_through_map,
    "transpose": lower_through_map,
    "tuple": lower_tuple,
}

_WHY_UNSUPPORTED = {
    "dot": "matrix multiplication belongs to the library/Triton GEMM path, not the emitters",
    "scatter": "scatter is emitted only as the root of a scatter fusion (scatter_template)",
    "sort": "sort needs its own emitter",
}


def rule_for(instr: HloInstruction) -> Rule:
    """The rule emitting ``instr``; ``UnsupportedOpError`` naming the op and why otherwise.

    >>> from fusion.ir.hlo_module import HloInstruction
    >>> from fusion.ir.shape import ArrayShape
    >>> try:
    ...     rule_for(HloInstruction("s", "sort", ArrayShape("f32", (3,)), ("p",)))
    ... except UnsupportedOpError as e:
    ...     print(e)
    s: op sort (s) is not supported by the Triton emitter: sort needs its own emitter
    """
    rule = STRUCTURAL_RULES.get(instr.opcode)
    if rule is not None:
        return rule
    if instr.opcode in ELEMENTWISE_RULES:
        return lower_elementwise
    why = _WHY_UNSUPPORTED.get(instr.opcode, "no emitter rule for this opcode")
    raise UnsupportedOpError(f"op {instr.opcode} ({instr.name}) is not supported by the Triton "
                             f"emitter: {why}", where=instr.name)
