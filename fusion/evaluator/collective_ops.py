"""Collectives on the one device the evaluator models (``fusion.analysis.collectives``).

With one participant, ``all-reduce``, ``all-gather``, ``reduce-scatter``, ``all-to-all`` and
``collective-broadcast`` give their operands; ``collective-permute`` gives its operand when a
pair sends device 0 to itself, zeros when none targets it; ``ragged-all-to-all`` writes its
own slices into its output (``fusion.analysis.ragged_all_to_all``).  A ``-start`` computes
that value (``all-gather-start`` as ``(operand, result)``, ``collective-permute-start`` as
``(operand, result, contexts...)`` with zero contexts); its ``-done`` takes the result out.
An op whose groups name another device is an ``EvaluationError`` at its line and column.  The sharding custom calls
(``fusion.analysis.sharding``) give their operands: :func:`eval_sharding_call`.  Under
``fusion.evaluator.spmd`` (several devices in lockstep) the collectives are resolved across
the devices instead.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from fusion.analysis.collectives import (
    async_result_index,
    sends_to_self,
    single_device_problem,
)
from fusion.analysis.ragged_all_to_all import slices_to, write_slices
from fusion.analysis.sharding import sharding_call_problem
from fusion.analysis.spmd_groups import device_ids, rank_pairs
from fusion.evaluator.failures import op_error
from fusion.ir.shape import TupleShape


def _one_device(ev: Any, instr: Any) -> None:
    if getattr(ev, "spmd", None) is not None:
        return  # several devices in lockstep (``spmd``): the groups are resolved there
    problem = single_device_problem(instr, ev.module)
    if problem is not None:
        raise op_error(instr, problem)


def _one_or_tuple(values: list) -> Any:
    return values[0] if len(values) == 1 else tuple(values)


def _reduced(ev: Any, instr: Any, values: list) -> list:
    """The group's operands (one list per device) reduced element by element."""
    out = [np.asarray(v) for v in values[0]]
    for other in values[1:]:
        out = [ev.call_scalar(instr.attr("to_apply"), [a, np.asarray(b)], caller=instr)[0]
               for a, b in zip(out, other)]
    return [np.asarray(o, dtype=np.asarray(a).dtype) for o, a in zip(out, values[0])]


def _across_devices(ev: Any, instr: Any, args: list) -> Any:
    """The op's value on this device of an SPMD evaluation (``fusion.evaluator.spmd``)."""
    ctx = ev.spmd
    values = ctx.exchange(instr, [np.asarray(a) for a in args])
    me = ctx.group(instr).index(ctx.device)
    kind = instr.opcode.removesuffix("-start")
    if kind == "all-reduce":
        return _one_or_tuple(_reduced(ev, instr, values))
    if kind == "collective-broadcast":  # the group's first member's values
        return _one_or_tuple(list(values[0]))
    if kind == "collective-permute":
        sources = [s for s, t in rank_pairs(instr, ctx.counts) if t == ctx.device]
        got = values[sources[0]] if sources else [np.zeros_like(a) for a in values[ctx.device]]
        return _one_or_tuple(list(got))
    if kind == "all-to-all" and not instr.has_attr("dimensions"):
        return tuple(v[me] for v in values)
    (dim,) = instr.attr("dimensions")
    if kind == "all-gather":
        return _one_or_tuple([np.concatenate([v[k] for v in values], axis=dim)
                              for k in range(len(args))])
    if kind == "reduce-scatter":
        return _one_or_tuple([np.split(r, len(values), axis=dim)[me]
                              for r in _reduced(ev, instr, values)])
    return np.concatenate([np.split(v[0], len(values), axis=dim)[me] for v in values], axis=dim)


def eval_one_participant(ev: Any, instr: Any, args: list) -> Any:
    """all-reduce, all-gather, reduce-scatter, all-to-all, collective-broadcast (and
    all-reduce-start): the operands."""
    if getattr(ev, "spmd", None) is not None:
        return _across_devices(ev, instr, args)
    _one_device(ev, instr)
    if instr.opcode == "all-to-all" and not instr.has_attr("dimensions"):
        return tuple(args)  # the tuple form's result is a tuple even of one operand
    return _one_or_tuple(args)


def eval_collective_permute(ev: Any, instr: Any, args: list) -> Any:
    if getattr(ev, "spmd", None) is not None:
        return _across_devices(ev, instr, args)
    _one_device(ev, instr)
    if sends_to_self(instr):
        return _one_or_tuple(args)
    return _one_or_tuple([np.zeros_like(np.asarray(a)) for a in args])


def eval_ragged_all_to_all(ev: Any, instr: Any, args: list) -> Any:
    """Each member's slices written into a copy of the output
    (``fusion.analysis.ragged_all_to_all``): this device's own, alone, on one device."""
    if getattr(ev, "spmd", None) is not None:
        ctx = ev.spmd
        values = ctx.exchange(instr, [np.asarray(a) for a in args])
        me = ctx.group(instr).index(ctx.device)
    else:
        _one_device(ev, instr)
        values, me = [[np.asarray(a) for a in args]], 0
    received = [(v[0], slices_to(me, len(values), v[2], v[3], v[4])) for v in values]
    try:
        return write_slices(np.asarray(args[1]), received)
    except ValueError as err:
        raise op_error(instr, f"ragged-all-to-all: {err}") from None


def eval_all_gather_start(ev: Any, instr: Any, args: list) -> Any:
    result = eval_one_participant(ev, instr, args)
    return (_one_or_tuple(args), result)


def eval_collective_permute_start(ev: Any, instr: Any, args: list) -> Any:
    result = eval_collective_permute(ev, instr, args)
    declared = instr.shape.elements[2:] if isinstance(instr.shape, TupleShape) else ()
    contexts = tuple(np.zeros((), c.element_type.numpy_dtype()) for c in declared)
    return (args[0], result, *contexts)


def eval_sharding_call(ev: Any, instr: Any, args: list) -> Any:
    """A sharding custom call (``fusion.analysis.sharding``): its operands, on one device."""
    problem = sharding_call_problem(instr, ev.operand_shapes(instr))
    if problem is not None:
        raise op_error(instr, problem)
    return args[0] if len(args) == 1 and not isinstance(instr.shape, TupleShape) \
        else tuple(args)


def eval_async_done(ev: Any, instr: Any, args: list) -> Any:
    index = async_result_index(instr.opcode.removesuffix("-done") + "-start")
    if index is None:
        return args[0]
    if not isinstance(args[0], tuple):
        raise op_error(instr, f"the operand of {instr.opcode} must be its start's tuple")
    return args[0][index]


def eval_device_id(ev: Any, instr: Any, args: list) -> Any:
    """``partition-id``, ``replica-id``: this device's id of that kind (0 on one device)."""
    ctx = getattr(ev, "spmd", None)
    if ctx is None:
        return np.uint32(0)
    replica, partition = device_ids(ctx.counts, ctx.device)
    return np.uint32(replica if instr.opcode == "replica-id" else partition)


COLLECTIVE_RULES: dict[str, Callable[..., Any]] = {
    "all-gather": eval_one_participant,
    "all-gather-done": eval_async_done,
    "all-gather-start": eval_all_gather_start,
    "all-reduce": eval_one_participant,
    "all-reduce-done": eval_async_done,
    "all-reduce-start": eval_one_participant,
    "all-to-all": eval_one_participant,
    "collective-broadcast": eval_one_participant,
    "collective-permute": eval_collective_permute,
    "collective-permute-done": eval_async_done,
    "collective-permute-start": eval_collective_permute_start,
    "partition-id": eval_device_id,
    "ragged-all-to-all": eval_ragged_all_to_all,
    "reduce-scatter": eval_one_participant,
    "replica-id": eval_device_id,
}
