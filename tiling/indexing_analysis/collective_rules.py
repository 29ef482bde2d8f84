"""Indexing of the ops that move values between devices without computing on them: the
collectives (``all-reduce``, ``all-gather``, ``reduce-scatter``, ``all-to-all``,
``collective-broadcast``, ``collective-permute``, ``all-reduce-start``/``-done``) and the
sharding custom calls (``fusion.analysis.sharding``).

On one device each is the identity: output ``k`` is operand ``k``, element for element, and
reads no other operand (a ``collective-permute`` that receives nothing reads nothing: its
result is zeros).  ``all-reduce``, ``collective-broadcast`` and ``collective-permute`` keep
the identity on any number of devices (each element reduces or moves the same element of its
peers); an op whose result has another shape than its operand (an ``all-gather`` among
several devices, a shard) or whose value is a ``-start`` tuple has undefined indexing, as has an ``all-to-all`` whose
groups name several devices, and any other custom call.

>>> from fusion.ir.hlo_module import HloInstruction
>>> from fusion.ir.shape import ArrayShape
>>> from tiling.indexing_analysis.operands import Operand
>>> t = ArrayShape("f32", (4, 6))
>>> g = HloInstruction("g", "all-gather", t, ("x",), (("replica_groups", ((0,),)),
...                                                   ("dimensions", (0,))))
>>> print(o2i_collective(g, (Operand(t),), 0)[0])
(d0, d1) -> (d0, d1), domain: d0 in [0, 3], d1 in [0, 5]
"""
from __future__ import annotations

from typing import Sequence

from fusion.analysis.collectives import group_key, is_collective, sends_to_self
from fusion.analysis.sharding import is_sharding_call
from fusion.ir.shape import ArrayShape
from tiling.indexing_analysis.operands import (
    Operand,
    array_dims,
    not_read,
    num_outputs,
    undefined_maps,
)
from tiling.maps.indexing_map import IndexingMap


def _one_participant(instr) -> bool:
    groups = instr.attr(group_key(instr), ())
    return isinstance(groups, tuple) and all(len(g) <= 1 for g in groups)


def _moves_elements(instr, operands: Sequence[Operand]) -> bool:
    """Whether output ``k`` is operand ``k`` element for element (module docstring)."""
    if not (is_collective(instr.opcode) or is_sharding_call(instr)):
        return False
    if not all(isinstance(o.shape, ArrayShape) for o in operands) or \
            num_outputs(instr.shape) != len(operands):
        return False
    if any(array_dims(instr.shape, k) != o.dims for k, o in enumerate(operands)):
        return False
    return instr.opcode != "all-to-all" or _one_participant(instr)


def _receives(instr) -> bool:
    return not instr.opcode.startswith("collective-permute") or bool(
        instr.attr("source_target_pairs", ())) or sends_to_self(instr)


def o2i_collective(instr, operands: Sequence[Operand], output_index: int):
    """Output ``output_index`` reads operand ``output_index`` at the same index."""
    if not _moves_elements(instr, operands):
        return undefined_maps(len(operands))
    out = array_dims(instr.shape, output_index)
    return tuple(
        IndexingMap.identity(out) if k == output_index and _receives(instr)
        else not_read(out, len(o.dims)) for k, o in enumerate(operands))


def i2o_collective(instr, operands: Sequence[Operand], operand_index: int):
    """Operand ``operand_index`` reaches output ``operand_index`` at the same index."""
    if not _moves_elements(instr, operands):
        return undefined_maps(num_outputs(instr.shape))
    dims = operands[operand_index].dims
    return tuple(
        IndexingMap.identity(dims) if j == operand_index and _receives(instr)
        else not_read(dims, len(array_dims(instr.shape, j)))
        for j in range(num_outputs(instr.shape)))


__all__ = ["i2o_collective", "o2i_collective"]
