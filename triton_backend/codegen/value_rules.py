"""One rule per HLO opcode: emit an instruction's value at index expressions.

A rule is ``rule(emitter, instr, indices) -> identifier`` (a tuple of identifiers for
tuple-shaped values).  Elementwise ops read their operands at the same indices and go through
``elementwise_lowering``; data-movement ops read their operand at the indices given by the op's
output->operand indexing map; parameters and array constants are loaded (see
``memory_rules``); reductions are in ``reduction_rules``.  Anything else raises
``UnsupportedOpError`` naming the op and why.
"""
from __future__ import annotations

from collections.abc import Callable

from fusion.element_types import ELEMENT_TYPES
from fusion.errors import UnsupportedOpError
from fusion.hlo_module import HloInstruction
from tiling.affine_expr import AffineExpr, const
from triton_backend.codegen.addressing import physical_strides
from triton_backend.codegen.memory_rules import constant_rule, parameter_rule
from triton_backend.codegen.reduce_window_rules import reduce_window_rule
from triton_backend.codegen.reduction_rules import reduce_rule
from triton_backend.codegen.value_emitter import (
    Value,
    ValueEmitter,
    array_shape,
    element_type_of,
)
from triton_backend.elementwise_lowering import ELEMENTWISE_RULES, render_elementwise

Indices = tuple[AffineExpr, ...]
Rule = Callable[[ValueEmitter, HloInstruction, Indices], Value]


def _operand_shape(em: ValueEmitter, instr: HloInstruction, i: int):
    return array_shape(em.instruction(instr.operands[i]))


def _single(em: ValueEmitter, name: str, indices: Indices) -> str:
    value = em.value(name, indices)
    if not isinstance(value, str):
        raise UnsupportedOpError(f"tuple-shaped operand {name} used as an array", where=name)
    return value


def _elementwise(em: ValueEmitter, instr: HloInstruction, indices: Indices) -> Value:
    operands = tuple(_single(em, o, indices) for o in instr.operands)
    types = tuple(element_type_of(em.instruction(o)) for o in instr.operands)
    expr = render_elementwise(instr.opcode, operands, types, element_type_of(instr),
                              dict(instr.attributes))
    return em.bind(expr, instr.name)


def _same_index(em: ValueEmitter, instr: HloInstruction, indices: Indices) -> Value:
    return em.value(instr.operands[0], indices)


def _broadcast(em: ValueEmitter, instr: HloInstruction, indices: Indices) -> Value:
    return em.value(instr.operands[0], tuple(indices[k] for k in instr.attr("dimensions")))


def _linear_relayout(em, instr, indices, out_strides, in_strides, in_dims) -> Value:
    linear = const(0)
    for index, stride in zip(indices, out_strides):
        linear = linear + index * stride
    operand_indices = []
    for j, (stride, size) in enumerate(zip(in_strides, in_dims)):
        q = linear // stride if stride != 1 else linear
        # The slowest dim needs no mod: lanes past the end fail the operand's bounds check.
        operand_indices.append(q if stride * size == _volume(in_dims) else q % size)
    return em.value(instr.operands[0], tuple(operand_indices))


def _volume(dims) -> int:
    total = 1
    for size in dims:
        total *= size
    return total


def _row_major(dims) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(dims):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def _bitcast(em: ValueEmitter, instr: HloInstruction, indices: Indices) -> Value:
    out, operand = array_shape(instr), _operand_shape(em, instr, 0)
    if out.element_type.bits != operand.element_type.bits:
        raise UnsupportedOpError("bitcast changing the element width", where=instr.name)
    # A bitcast reinterprets the buffer: equal physical linear offsets are the same element.
    return _linear_relayout(em, instr, indices, physical_strides(out), physical_strides(operand),
                            operand.dims)


def _reshape(em: ValueEmitter, instr: HloInstruction, indices: Indices) -> Value:
    out, operand = array_shape(instr), _operand_shape(em, instr, 0)
    return _linear_relayout(em, instr, indices, _row_major(out.dims), _row_major(operand.dims),
                            operand.dims)


def _concatenate(em: ValueEmitter, instr: HloInstruction, indices: Indices) -> Value:
    (axis,) = instr.attr("dimensions")
    pieces, offset = [], 0
    for i, name in enumerate(instr.operands):
        shifted = list(indices)
        shifted[axis] = indices[axis] - offset
        size = _operand_shape(em, instr, i).dims[axis]
        pieces.append((offset + size, _single(em, name, tuple(shifted))))
        offset += size
    where = em.index_tensor(indices[axis])
    expr = pieces[-1][1]
    for end, value in reversed(pieces[:-1]):
        expr = f"tl.where({where} < {end}, {value}, {expr})"
    return em.bind(expr, instr.name)


def _clamped_starts(em: ValueEmitter, instr: HloInstruction, first: int, sizes) -> list[AffineExpr]:
    operand = _operand_shape(em, instr, 0)
    starts = []
    for j, name in enumerate(instr.operands[first:]):
        raw = em.scalar_value(name)
        high = operand.dims[j] - sizes[j]
        starts.append(em.new_symbol(
            f"tl.minimum(tl.maximum(({raw}).to(tl.int64), 0), {high}).to({em.index_dtype})", f"start{j}"))
    return starts


def _dynamic_slice(em: ValueEmitter, instr: HloInstruction, indices: Indices) -> Value:
    starts = _clamped_starts(em, instr, 1, instr.attr("dynamic_slice_sizes"))
    return em.value(instr.operands[0], tuple(i + s for i, s in zip(indices, starts)))


def _dynamic_update_slice(em: ValueEmitter, instr: HloInstruction, indices: Indices) -> Value:
    update = _operand_shape(em, instr, 1)
    starts = _clamped_starts(em, instr, 2, update.dims)
    base = _single(em, instr.operands[0], indices)
    inner = tuple(i - s for i, s in zip(indices, starts))
    patch = _single(em, instr.operands[1], inner)
    inside = em.in_bounds(inner, update.dims) or "True"
    return em.bind(f"tl.where({inside}, {patch}, {base})", instr.name)


def _gather(em: ValueEmitter, instr: HloInstruction, indices: Indices) -> Value:
    for key in ("operand_batching_dims", "start_indices_batching_dims"):
        if instr.attr(key, ()):
            raise UnsupportedOpError(f"gather with {key} is not supported", where=instr.name)
    operand, starts_shape = _operand_shape(em, instr, 0), _operand_shape(em, instr, 1)
    offset_dims = tuple(instr.attr("offset_dims"))
    collapsed = tuple(instr.attr("collapsed_slice_dims"))
    start_map = tuple(instr.attr("start_index_map"))
    vector_dim = instr.attr("index_vector_dim")
    sizes = tuple(instr.attr("slice_sizes"))
    batch = [indices[k] for k in range(len(indices)) if k not in offset_dims]
    starts: dict[int, AffineExpr] = {}
    for i, operand_dim in enumerate(start_map):
        where = list(batch)
        if vector_dim < starts_shape.rank:
            where.insert(vector_dim, const(i))
        raw = _single(em, instr.operands[1], tuple(where))
        high = operand.dims[operand_dim] - sizes[operand_dim]
        starts[operand_dim] = em.new_symbol(
            f"tl.minimum(tl.maximum(({raw}).to(tl.int64), 0), {high}).to({em.index_dtype})",
            f"gather_start{i}", tuple(where))
    windows = iter(indices[k] for k in offset_dims)
    operand_indices = []
    for j in range(operand.rank):
        within = const(0) if j in collapsed else next(windows)
        operand_indices.append(within + starts[j] if j in starts else within)
    return em.value(instr.operands[0], tuple(operand_indices))


def _get_tuple_element(em: ValueEmitter, instr: HloInstruction, indices: Indices) -> Value:
    value = em.value(instr.operands[0], indices)
    if isinstance(value, str):
        raise UnsupportedOpError("get-tuple-element of an array", where=instr.name)
    return value[instr.attr("index")]


def _iota(em: ValueEmitter, instr: HloInstruction, indices: Indices) -> Value:
    t = element_type_of(instr)
    index = em.index_tensor(indices[instr.attr("iota_dimension")])
    if t.is_pred:
        return em.bind(f"{index} != 0", instr.name)
    expr = render_elementwise("convert", (f"{index}.to(tl.int32)",), (ELEMENT_TYPES["s32"],), t)
    return em.bind(expr, instr.name)


def _pad(em: ValueEmitter, instr: HloInstruction, indices: Indices) -> Value:
    operand = _operand_shape(em, instr, 0)
    conditions, operand_indices = [], []
    for index, pad, size in zip(indices, instr.attr("padding").dims, operand.dims):
        shifted = index - pad.low
        step = pad.interior + 1
        source = shifted // step if step > 1 else shifted
        operand_indices.append(source)
        text = em.index_text(shifted)
        conditions.append(f"({text} >= 0) & ({text} <= {(size - 1) * step})")
        if step > 1:
            conditions.append(f"(({text}) % {step} == 0)")
    value = _single(em, instr.operands[0], tuple(operand_indices))
    padding = _single(em, instr.operands[1], ())
    return em.bind(f"tl.where({' & '.join(conditions)}, {value}, {padding})", instr.name)


def _reverse(em: ValueEmitter, instr: HloInstruction, indices: Indices) -> Value:
    dims = array_shape(instr).dims
    flipped = tuple((dims[k] - 1) - index if k in instr.attr("dimensions") else index
                    for k, index in enumerate(indices))
    return em.value(instr.operands[0], flipped)


def _slice(em: ValueEmitter, instr: HloInstruction, indices: Indices) -> Value:
    return em.value(instr.operands[0], tuple(
        dim.start + dim.stride * index for index, dim in zip(indices, instr.attr("slice"))))


def _transpose(em: ValueEmitter, instr: HloInstruction, indices: Indices) -> Value:
    perm = instr.attr("dimensions")
    operand_indices = [const(0)] * len(perm)
    for out_dim, operand_dim in enumerate(perm):
        operand_indices[operand_dim] = indices[out_dim]
    return em.value(instr.operands[0], tuple(operand_indices))


def _tuple(em: ValueEmitter, instr: HloInstruction, indices: Indices) -> Value:
    return tuple(_single(em, o, indices) for o in instr.operands)


_STRUCTURAL_RULES: dict[str, Rule] = {
    "bitcast": _bitcast,
    "broadcast": _broadcast,
    "concatenate": _concatenate,
    "constant": constant_rule,
    "copy": _same_index,
    "dynamic-slice": _dynamic_slice,
    "dynamic-update-slice": _dynamic_update_slice,
    "gather": _gather,
    "get-tuple-element": _get_tuple_element,
    "iota": _iota,
    "pad": _pad,
    "parameter": parameter_rule,
    "reduce": reduce_rule,
    "reduce-window": reduce_window_rule,
    "reshape": _reshape,
    "reverse": _reverse,
    "slice": _slice,
    "transpose": _transpose,
    "tuple": _tuple,
}

_WHY_UNSUPPORTED = {
    "dot": "matrix multiplication belongs to the library/Triton GEMM path, not the emitters",
    "scatter": "scatter is emitted only as the root of a scatter fusion (scatter_template)",
    "sort": "sort needs its own emitter",
}


def rule_for(instr: HloInstruction) -> Rule:
    """The rule emitting ``instr``; ``UnsupportedOpError`` naming the op and why otherwise.

    >>> from fusion.hlo_module import HloInstruction
    >>> from fusion.shape import ArrayShape
    >>> try:
    ...     rule_for(HloInstruction("s", "sort", ArrayShape("f32", (3,)), ("p",)))
    ... except UnsupportedOpError as e:
    ...     print(e)
    s: op sort (s) is not supported by the Triton emitter: sort needs its own emitter
    """
    rule = _STRUCTURAL_RULES.get(instr.opcode)
    if rule is not None:
        return rule
    if instr.opcode in ELEMENTWISE_RULES:
        return _elementwise
    why = _WHY_UNSUPPORTED.get(instr.opcode, "no emitter rule for this opcode")
    raise UnsupportedOpError(f"op {instr.opcode} ({instr.name}) is not supported by the Triton "
                             f"emitter: {why}", where=instr.name)
