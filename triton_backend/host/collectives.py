"""Collectives on the host, on the one device a compiled module runs on.

With one participant (``fusion.analysis.collectives``) every collective moves values without
computing: ``all-reduce``, ``all-gather``, ``reduce-scatter``, ``all-to-all`` and
``collective-broadcast`` copy their operands; ``collective-permute`` copies its operand when a
pair sends device 0 to itself and gives zeros when none targets it; ``ragged-all-to-all``
writes its own slices into a copy of its output (:func:`host_ragged_all_to_all`).  The
``-start`` halves build XLA's value (the result, or ``(operand, result[, contexts])`` with
zero contexts) and a ``-done`` takes the result out.
Copies go through the logical tensors, so operand and result may have different layouts.  An
op that names another device runs only across processes: a call whose host context has a
``ProcessPlace`` (``compile_hlo`` under ``torch.distributed``) hands each collective to
``distributed.exchange``, and ``partition-id``/``replica-id`` give the rank's ids; without one
``op_coverage`` refuses such an op, located, before any kernel.  The sharding custom calls
(``fusion.analysis.sharding``) copy their operands too (:func:`host_sharding_call`).

>>> import torch
>>> from fusion.ir.shape import ArrayShape
>>> x = HloInstruction("x", "parameter", ArrayShape("f32", (2,)), (), (("parameter_number", 0),))
>>> p = HloInstruction("p", "collective-permute", ArrayShape("f32", (2,)), ("x",),
...                    (("source_target_pairs", ()),))
>>> host_collective(HloComputation("c", (x, p), "p"), p, torch.device("cpu"))(
...     [torch.tensor([1.0, 2.0])], None).tolist()
[0.0, 0.0]
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from fusion.analysis.collectives import async_result_index, sends_to_self, single_device_problem
from fusion.analysis.ragged_all_to_all import slices_to, write_slices
from fusion.errors import EvaluationError, UnsupportedOpError
from fusion.analysis.sharding import sharding_call_problem
from fusion.analysis.spmd_groups import device_ids
from fusion.ir.hlo_module import HloComputation, HloInstruction
from fusion.ir.shape import ArrayShape, TupleShape, flatten_shape
from fusion.opcodes import opcodes_with
from triton_backend.host.distributed import exchange
from triton_backend.host.input_validation import pack_logical, torch_dtype, unpack_physical


def _copy(value: torch.Tensor, source: ArrayShape, result: ArrayShape) -> torch.Tensor:
    logical = unpack_physical(value, source)
    return pack_logical(logical.clone(memory_format=torch.contiguous_format), result)


def _zeros(value: torch.Tensor, source: ArrayShape, result: ArrayShape) -> torch.Tensor:
    return pack_logical(torch.zeros_like(unpack_physical(value, source),
                                         memory_format=torch.contiguous_format), result)


def host_collective(comp: HloComputation, instr: HloInstruction,
                    device: torch.device) -> Callable[[Sequence, object], object] | None:
    """The executor of a collective: across processes when the call has a place, else on one
    device (module docstring)."""
    if instr.opcode.endswith("-done"):
        index = async_result_index(instr.opcode.removesuffix("-done") + "-start")
        return lambda operands, ctx: operands[0] if index is None else operands[0][index]
    sources = [comp.instruction(o).shape for o in instr.operands]
    wrapped = async_result_index(instr.opcode) is not None
    assert not wrapped or isinstance(instr.shape, TupleShape)
    results = instr.shape.elements[1] if wrapped else instr.shape
    leaves = flatten_shape(results)
    move = _zeros if instr.opcode.startswith("collective-permute") \
        and not sends_to_self(instr) else _copy
    contexts = instr.shape.elements[2:] if wrapped else ()
    # ``compile_hlo`` refuses it on one process (op_coverage, process_world), with its line.
    alone = single_device_problem(instr, None)

    def run(operands: Sequence, ctx) -> object:
        place = getattr(ctx, "place", None)
        if place is None and alone is not None:
            loc = instr.location
            raise UnsupportedOpError(alone, line=loc.line if loc else None,
                                     column=loc.column if loc else None, where=instr.name)
        if place is None:
            out = [move(v, s, r) for v, s, r in zip(operands, sources, leaves)]
        else:
            got = exchange(instr, [unpack_physical(v, s) for v, s in zip(operands, sources)],
                           place)
            out = [pack_logical(g.contiguous(), r) for g, r in zip(got, leaves)]
        value = tuple(out) if isinstance(results, TupleShape) else out[0]
        if not wrapped:
            return value
        given = operands[0] if len(operands) == 1 else tuple(operands)
        zeros = tuple(torch.zeros((), dtype=torch_dtype(c.dtype), device=device) for c in contexts)
        return (given, value, *zeros)

    return run


def host_ragged_all_to_all(comp: HloComputation, instr: HloInstruction,
                           device: torch.device) -> Callable[[Sequence, object], object]:
    """``ragged-all-to-all`` (``fusion.analysis.ragged_all_to_all``): on one device its own
    slices written into a copy of its output; across processes what each rank sends it."""
    sources = [comp.instruction(o).shape for o in instr.operands]
    alone = single_device_problem(instr, None)

    def run(operands: Sequence, ctx) -> torch.Tensor:
        place = getattr(ctx, "place", None)
        logical = [unpack_physical(v, s) for v, s in zip(operands, sources)]
        if place is not None:
            (got,) = exchange(instr, logical, place)
            return pack_logical(got.contiguous(), instr.shape)
        if alone is not None:
            raise UnsupportedOpError(alone, **instr._located())
        data, output, offsets, sizes, targets = logical[:5]
        try:
            got = write_slices(output, [(data, slices_to(0, 1, offsets.tolist(),
                                                         sizes.tolist(), targets.tolist()))])
        except ValueError as err:
            raise EvaluationError(f"ragged-all-to-all: {err}", **instr._located()) from None
        return pack_logical(got.contiguous(), instr.shape)

    return run


def host_sharding_call(comp: HloComputation, instr: HloInstruction,
                       device: torch.device) -> Callable[[Sequence, object], object] | None:
    """A sharding custom call (``fusion.analysis.sharding``) on one device: a copy of its
    operands (``None``, no host rule, where a shard is not the whole value)."""
    sources = [comp.instruction(o).shape for o in instr.operands]
    if sharding_call_problem(instr, sources) is not None:
        return None
    leaves = flatten_shape(instr.shape)
    is_tuple = isinstance(instr.shape, TupleShape)

    def run(operands: Sequence, ctx) -> object:
        out = [_copy(v, s, r) for v, s, r in zip(operands, sources, leaves)]
        return tuple(out) if is_tuple else out[0]

    return run


def host_device_id(comp: HloComputation, instr: HloInstruction,
                   device: torch.device) -> Callable[[Sequence, object], object]:
    """``partition-id``/``replica-id``: ``u32`` 0 on one device, the rank's id across
    processes (``fusion.analysis.spmd_groups.device_ids``)."""
    replica = instr.opcode == "replica-id"

    def run(operands: Sequence, ctx) -> torch.Tensor:
        place = getattr(ctx, "place", None)
        ids = (0, 0) if place is None else device_ids(place.counts, place.rank)
        return torch.tensor(ids[0] if replica else ids[1], dtype=torch_dtype("u32"),
                            device=device)

    return run


#: One rule for every collective (the ``collective`` trait) but the one that computes where
#: its values go.
COLLECTIVE_HOST_RULES = {
    **{opcode: host_collective for opcode in sorted(opcodes_with("collective"))},
    **{opcode: host_device_id for opcode in sorted(opcodes_with("device_id"))},
    "ragged-all-to-all": host_ragged_all_to_all,
}

__all__ = ["COLLECTIVE_HOST_RULES", "host_collective", "host_device_id",
           "host_ragged_all_to_all", "host_sharding_call"]
