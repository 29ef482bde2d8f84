"""The public entry points of the indexing analysis (see the package docstring)."""
from __future__ import annotations

from typing import Sequence

from fusion.errors import IndexingError
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.ir.shape import Shape, TupleShape, flatten_shape
from tiling.indexing_analysis.fusion_indexing import fusion_input_to_output, fusion_output_to_input
from tiling.indexing_analysis.op_indexing import op_input_to_output, op_output_to_input
from tiling.indexing_analysis.operands import Operand, num_outputs
from tiling.maps.indexing_map import IndexingMap


def _holding_computation(instr: HloInstruction, module) -> HloComputation | None:
    if isinstance(module, HloComputation):
        return module
    for computation in module.computations:
        if computation.has_instruction(instr.name) and computation.instruction(instr.name) == instr:
            return computation
    return None


def _operands(instr: HloInstruction, module, operand_shapes) -> tuple[Operand, ...]:
    if operand_shapes is not None:
        if len(operand_shapes) != len(instr.operands):
            raise IndexingError(f"{instr.opcode} {instr.name!r} has {len(instr.operands)} operands,"
                                f" got {len(operand_shapes)} operand shapes", where=instr.name)
        return tuple(Operand(shape) for shape in operand_shapes)
    if not instr.operands:
        return ()
    computation = None if module is None else _holding_computation(instr, module)
    if computation is None:
        raise IndexingError(
            f"{instr.opcode} {instr.name!r}: pass the module (or computation) holding it, or"
            " operand_shapes, to know its operands' shapes", where=instr.name)
    return tuple(
        Operand(computation.instruction(n).shape, computation.instruction(n))
        for n in instr.operands
    )


def _as_set(maps, zero_size: bool = False) -> frozenset[IndexingMap]:
    """The simplified maps without the known-empty ones (an operand not read there); for an
    op with a zero-size shape, a set of nothing else is one ``KNOWN EMPTY`` map, as XLA
    gives it."""
    simplified = [m if m.is_known_empty else m.simplify() for m in maps]
    kept = frozenset(m for m in simplified if not m.is_known_empty)
    if not kept and simplified and zero_size:
        return frozenset({simplified[0].as_known_empty()})
    return kept


def _has_zero_size(instr: HloInstruction, module, operand_shapes) -> bool:
    shapes = [*flatten_shape(instr.shape)]
    if operand_shapes is not None:
        shapes += [leaf for s in operand_shapes for leaf in flatten_shape(s)]
    else:
        computation = None if module is None or not instr.operands else _holding_computation(instr, module)
        if computation is not None:
            shapes += [leaf for n in instr.operands
                       for leaf in flatten_shape(computation.instruction(n).shape)]
    return any(0 in leaf.dims for leaf in shapes)


def _module_of(instr: HloInstruction, module) -> HloModule:
    if not isinstance(module, HloModule):
        raise IndexingError(f"fusion {instr.name!r}: pass the HloModule to reach its fused"
                            " computation", where=instr.name)
    return module


def _map_sets(instr: HloInstruction, module, operand_shapes, index: int, fusion_maps,
              op_maps) -> tuple[frozenset[IndexingMap], ...]:
    """One simplified set of maps per operand or output, for ``index``: a fusion's from
    ``fusion_maps`` (which needs the module), any other op's from ``op_maps``."""
    zero_size = _has_zero_size(instr, module, operand_shapes)
    if instr.opcode == "fusion":
        return tuple(_as_set(maps, zero_size)
                     for maps in fusion_maps(instr, _module_of(instr, module), index))
    maps = op_maps(instr, _operands(instr, module, operand_shapes), index)
    return tuple(_as_set((m,), zero_size) for m in maps)


def output_to_input_indexing(
    instr: HloInstruction,
    module: HloModule | HloComputation | None = None,
    output_index: int = 0,
    operand_shapes: Sequence[Shape] | None = None,
) -> tuple[frozenset[IndexingMap], ...]:
    """One set of maps per operand: from output ``output_index`` (a leaf of a tuple-shaped
    result) of ``instr`` to that operand."""
    return _map_sets(instr, module, operand_shapes, output_index, fusion_output_to_input,
                     op_output_to_input)


def input_to_output_indexing_per_output(
    instr: HloInstruction,
    operand_index: int,
    module: HloModule | HloComputation | None = None,
    operand_shapes: Sequence[Shape] | None = None,
) -> tuple[frozenset[IndexingMap], ...]:
    """One set of maps per output (tuple leaf, in order; one for an array result): from
    operand ``operand_index`` to that output."""
    if not 0 <= operand_index < len(instr.operands):
        raise IndexingError(f"{instr.opcode} {instr.name!r} has {len(instr.operands)} operands;"
                            f" there is no operand {operand_index}", where=instr.name)
    return _map_sets(instr, module, operand_shapes, operand_index, fusion_input_to_output,
                     op_input_to_output)


def input_to_output_indexing(
    instr: HloInstruction,
    operand_index: int,
    module: HloModule | HloComputation | None = None,
    operand_shapes: Sequence[Shape] | None = None,
) -> frozenset[IndexingMap]:
    """The maps from operand ``operand_index`` to the output.  For a tuple-shaped result
    whose leaves all have the same dims (a variadic reduce: every input reaches every output
    through the same map) this is the union over the leaves; other multi-output results
    (a multi-output fusion) need ``input_to_output_indexing_per_output``."""
    per_output = input_to_output_indexing_per_output(instr, operand_index, module,
                                                     operand_shapes)
    if isinstance(instr.shape, TupleShape) and num_outputs(instr.shape) > 1:
        leaves = {leaf.dims for leaf in instr.shape.elements}
        if len(leaves) > 1:
            raise IndexingError(
                f"{instr.opcode} {instr.name!r} has outputs of different shapes; use"
                " input_to_output_indexing_per_output", where=instr.name)
    return frozenset().union(*per_output)
