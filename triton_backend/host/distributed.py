"""Collectives between processes: each one ``torch.distributed`` call, a host step between kernels.

A module partitioned for ``N`` devices runs as ``N`` processes of one ``torch.distributed``
world (gloo on CPU, NCCL on GPUs), each running the same compiled module on its shard; rank
``r`` is device ``r`` (``fusion.analysis.spmd_groups``).  :func:`join_process_groups`, called
by ``compile_hlo`` on every rank in the same order, checks every collective's groups, creates
one process group per distinct group (``new_group``, on every rank, the whole world being the
default group) and recognises each reducer by evaluating it (``combiner_kind``: sum, product,
maximum, minimum); what it returns, a :class:`ProcessPlace`, travels with the compiled module
to the host context of each call.  Then, on logical tensors (:func:`exchange`):

* ``all-reduce``: ``all_reduce`` with the reducer's op, once per operand;
* ``all-gather``: ``all_gather_into_tensor``, concatenated along the op's dimension;
* ``reduce-scatter``: ``reduce_scatter_tensor`` of the blocks along the op's dimension;
* ``all-to-all``: ``all_to_all_single`` of the blocks (``all_to_all`` in the tuple form);
* ``collective-broadcast``: ``broadcast`` from the HLO group's first member, per operand;
* ``ragged-all-to-all``: ``all_to_all`` of each slice's size and target, then of the rows;
* ``collective-permute``: ``batch_isend_irecv`` of its pairs; zeros where nothing arrives.

A process group numbers its ranks in increasing order while an HLO group may list them in any
order: blocks are permuted to and from the group's order.  Unsigned integers move as the
signed type of their width (bit for bit) and are reduced in ``int64``.  Every call waits at
most the place's ``timeout`` seconds; a failure or time-out is a ``DistributedError`` at the
op's line, naming the rank and its group.

>>> blocks = ["to 2", "to 0"]
>>> _to_group_order(blocks, (2, 0)), _from_group_order(["from 0", "from 2"], (2, 0))
(['to 0', 'to 2'], ['from 2', 'from 0'])
"""
from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from fusion.analysis.collectives import group_key, is_collective
from fusion.analysis.ragged_all_to_all import RaggedSlice, slice_problem, slices_to, write_slices
from fusion.analysis.spmd_groups import (
    DeviceCounts, device_counts, rank_groups, rank_pairs, spmd_problem,
)
from fusion.autodiff.combiner_kind import CombinerKind, combiner_kind
from fusion.errors import DistributedError
from fusion.ir.hlo_module import HloInstruction, HloModule
from fusion.ir.shape import flatten_shape

#: Seconds a collective (and the process-group setup) waits for the other ranks.
DEFAULT_TIMEOUT = 60.0

_REDUCE_OPS = {CombinerKind.ADD: "SUM", CombinerKind.MUL: "PRODUCT", CombinerKind.MAX: "MAX",
               CombinerKind.MIN: "MIN"}
_UNSIGNED_AS_SIGNED = {torch.uint16: torch.int16, torch.uint32: torch.int32,
                       torch.uint64: torch.int64}


@dataclass(frozen=True)
class ProcessPlace:
    """This process's place in a multi-process run: its rank, the module's device counts,
    the process group of each group of ranks (sorted ranks -> group; the whole world is the
    default group, None), the ``ReduceOp`` name of each reducer output ``(name, k)``, and the
    longest a collective may wait."""

    rank: int
    counts: DeviceCounts
    groups: Mapping[tuple[int, ...], Any] = field(repr=False)
    reducers: Mapping[str, tuple[str, ...]]
    timeout: float = DEFAULT_TIMEOUT

    def group(self, instr: HloInstruction) -> tuple[int, ...]:
        """This rank's group at ``instr``, in the HLO's order (checked at join time)."""
        return next(g for g in rank_groups(instr, self.counts) if self.rank in g)


def _located(instr: HloInstruction, message: str) -> DistributedError:
    loc = instr.location
    return DistributedError(message, line=loc.line if loc else None,
                            column=loc.column if loc else None, where=instr.name)


def _reducer_ops(module: HloModule, instr: HloInstruction) -> dict[str, tuple[str, ...]]:
    name = instr.attr("to_apply")
    ops = []
    for k in range(len(flatten_shape(module.computation(name).root.shape))):
        kind = combiner_kind(module, name, k, integers=True)
        if kind not in _REDUCE_OPS:
            raise _located(instr, f"reducer {name} of {instr.opcode} is not a sum, product, "
                           "maximum or minimum: torch.distributed has no such reduction")
        ops.append(_REDUCE_OPS[kind])
    return {name: tuple(ops)}


def _reduce_op(instr: HloInstruction, place: "ProcessPlace", k: int) -> Any:
    """The ``ReduceOp`` for operand ``k``: a scalar reducer applies to every operand (XLA's
    combined all-reduce), a tuple reducer's output ``k`` to operand ``k``."""
    import torch.distributed as dist  # noqa: PLC0415

    ops = place.reducers[instr.attr("to_apply")]
    return getattr(dist.ReduceOp, ops[k if len(ops) > 1 else 0])


def join_process_groups(module: HloModule, rank: int, world_size: int,
                        timeout: float = DEFAULT_TIMEOUT) -> ProcessPlace:
    """Check the module's collectives for ``world_size`` processes and create their process
    groups; every rank must call it, with the same module (module docstring)."""
    import torch.distributed as dist  # noqa: PLC0415 - only multi-process runs need it

    counts = device_counts(module)
    groups: dict[tuple[int, ...], Any] = {}
    reducers: dict[str, tuple[str, ...]] = {}
    for comp in module.computations:
        for instr in comp.instructions:
            if not is_collective(instr.opcode) or instr.opcode.endswith("-done"):
                continue
            problem = spmd_problem(instr, counts)
            if problem is not None:
                raise _located(instr, problem)
            if instr.has_attr("to_apply"):
                reducers.update(_reducer_ops(module, instr))
            if group_key(instr) == "replica_groups":
                for g in rank_groups(instr, counts):
                    groups.setdefault(tuple(sorted(g)), None)
    wait = datetime.timedelta(seconds=timeout)
    for ranks in groups:  # insertion order: the same on every rank
        if len(ranks) < world_size:
            groups[ranks] = dist.new_group(list(ranks), timeout=wait)
    return ProcessPlace(rank, counts, groups, reducers, timeout)


def _to_group_order(blocks: Sequence, group: Sequence[int]) -> list:
    """Blocks listed in the HLO group's order, listed in the process group's (sorted) order."""
    return [blocks[group.index(r)] for r in sorted(group)]


def _from_group_order(blocks: Sequence, group: Sequence[int]) -> list:
    """Blocks listed in the process group's (sorted) order, listed in the HLO group's order."""
    order = sorted(group)
    return [blocks[order.index(r)] for r in group]


def _wire(t: torch.Tensor) -> torch.Tensor:
    t = t.contiguous()
    signed = _UNSIGNED_AS_SIGNED.get(t.dtype)
    return t.view(signed) if signed is not None else t


def _unwire(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return t.view(dtype) if t.dtype != dtype else t


def _call(instr: HloInstruction, place: ProcessPlace, what: str, run: Callable[[], Any]) -> None:
    """Run one asynchronous ``torch.distributed`` call and wait for it, at most the timeout."""
    try:
        works = run()
        for work in works if isinstance(works, list) else [works]:
            if work is not None:
                work.wait(datetime.timedelta(seconds=place.timeout))
    except (RuntimeError, ValueError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise _located(instr, f"{instr.opcode} {what} failed on rank {place.rank}: {first}") \
            from None


def _all_reduce(instr, place, values, pg, group):
    import torch.distributed as dist  # noqa: PLC0415

    out = []
    for k, value in enumerate(values):
        op = _reduce_op(instr, place, k)
        wide = value.to(torch.int64) if value.dtype in _UNSIGNED_AS_SIGNED else value.clone()
        wide = wide.contiguous()
        _call(instr, place, f"over ranks {group}",
              lambda: dist.all_reduce(wide, op=op, group=pg, async_op=True))
        out.append(wide.to(value.dtype))
    return out


def _all_gather(instr, place, values, pg, group):
    import torch.distributed as dist  # noqa: PLC0415

    (dim,) = instr.attr("dimensions")
    out = []
    for value in values:
        sent = _wire(value)
        # Gloo and NCCL gather along dim 0: (n * d0, ...), one member's block after another.
        got = torch.empty((len(group) * sent.shape[0], *sent.shape[1:]), dtype=sent.dtype,
                          device=sent.device)
        _call(instr, place, f"over ranks {group}",
              lambda: dist.all_gather_into_tensor(got, sent, group=pg, async_op=True))
        blocks = got.chunk(len(group), 0)
        pieces = _from_group_order([_unwire(p, value.dtype) for p in blocks], group)
        out.append(torch.cat(pieces, dim=dim))
    return out


def _reduce_scatter(instr, place, values, pg, group):
    import torch.distributed as dist  # noqa: PLC0415

    (dim,) = instr.attr("dimensions")
    out = []
    for k, value in enumerate(values):
        op = _reduce_op(instr, place, k)
        wide = value.to(torch.int64) if value.dtype in _UNSIGNED_AS_SIGNED else value
        blocks = _to_group_order(wide.chunk(len(group), dim), group)
        # Scattered along dim 0 as (n * d0, ...): block j (of the group's order) to member j.
        sent = torch.cat([b.contiguous() for b in blocks], 0) if blocks[0].dim() else \
            torch.stack(blocks)
        got = torch.empty_like(blocks[0].contiguous())
        _call(instr, place, f"over ranks {group}",
              lambda: dist.reduce_scatter_tensor(got, sent, op=op, group=pg, async_op=True))
        out.append(got.to(value.dtype))
    return out


def _all_to_all(instr, place, values, pg, group):
    import torch.distributed as dist  # noqa: PLC0415

    if not instr.has_attr("dimensions"):  # the tuple form: operand k goes to member k
        sent = _to_group_order([_wire(v) for v in values], group)
        got = [torch.empty_like(s) for s in sent]
        _call(instr, place, f"over ranks {group}",
              lambda: dist.all_to_all(got, sent, group=pg, async_op=True))
        return [_unwire(g, v.dtype) for g, v in zip(_from_group_order(got, group), values)]
    (dim,) = instr.attr("dimensions")
    (value,) = values
    sent = torch.stack(_to_group_order(_wire(value).chunk(len(group), dim), group)).contiguous()
    got = torch.empty_like(sent)
    _call(instr, place, f"over ranks {group}",
          lambda: dist.all_to_all_single(got, sent, group=pg, async_op=True))
    pieces = _from_group_order([_unwire(p, value.dtype) for p in got.unbind(0)], group)
    return [torch.cat(pieces, dim=dim)]


def _broadcast(instr, place, values, pg, group):
    import torch.distributed as dist  # noqa: PLC0415

    out = []
    for value in values:
        sent = _wire(value).clone()
        _call(instr, place, f"from rank {group[0]} over ranks {group}",
              lambda: dist.broadcast(sent, src=group[0], group=pg, async_op=True))
        out.append(_unwire(sent, value.dtype))
    return out


def _ragged_all_to_all(instr, place, values, pg, group):
    import torch.distributed as dist  # noqa: PLC0415

    data, output, offsets, sizes, targets = values[:5]
    n = len(group)
    plans = [slices_to(j, n, offsets.tolist(), sizes.tolist(), targets.tolist())
             for j in range(n)]
    for sl in (sl for plan in plans for sl in plan):
        problem = slice_problem(sl, data.shape[0], None)
        if problem is not None:
            raise _located(instr, f"ragged-all-to-all on rank {place.rank}: a slice reads "
                           f"{problem}")
    # First each member's slice sizes and targets, then the rows themselves (a member's rows
    # one block of all_to_all_single, whose split sizes may differ: gloo's list form may not).
    meta = torch.stack(_to_group_order([torch.tensor(
        [[sl.size, sl.target] for sl in plan], dtype=torch.int64).reshape(len(plan), 2)
        for plan in plans], group))
    got_meta = torch.empty_like(meta)
    _call(instr, place, f"(slice sizes) over ranks {group}", lambda: dist.all_to_all_single(
        got_meta, meta, group=pg, async_op=True))
    got_meta = _from_group_order(list(got_meta.unbind(0)), group)
    rows = _to_group_order([torch.cat([data[sl.source:sl.source + sl.size] for sl in plan] or
                                      [data[:0]]) for plan in plans], group)
    sent = _wire(torch.cat(rows))
    counts = _to_group_order([int(m[:, 0].sum()) for m in got_meta], group)
    got = torch.empty((sum(counts), *data.shape[1:]), dtype=sent.dtype)
    _call(instr, place, f"over ranks {group}", lambda: dist.all_to_all_single(
        got, sent, output_split_sizes=counts, input_split_sizes=[r.shape[0] for r in rows],
        group=pg, async_op=True))
    got_rows = _from_group_order(list(got.split(counts)), group)
    received = []
    for m, r in zip(got_meta, got_rows):
        starts = torch.cumsum(m[:, 0], 0) - m[:, 0]
        received.append((_unwire(r, data.dtype), [
            RaggedSlice(int(s), int(size), int(t)) for s, (size, t) in zip(starts, m.tolist())]))
    try:
        return [write_slices(output, received)]
    except ValueError as err:
        raise _located(instr, f"ragged-all-to-all on rank {place.rank}: {err}") from None


def _permute(instr, place, values):
    import torch.distributed as dist  # noqa: PLC0415

    pairs = rank_pairs(instr, place.counts)
    targets = [t for s, t in pairs if s == place.rank and t != place.rank]
    source = next((s for s, t in pairs if t == place.rank), None)
    out = []
    for value in values:
        sent = _wire(value)
        got = sent.clone() if source == place.rank else torch.zeros_like(sent)
        ops = [dist.P2POp(dist.isend, sent, t) for t in targets]
        if source is not None and source != place.rank:
            ops.append(dist.P2POp(dist.irecv, got, source))
        if ops:
            _call(instr, place, f"with pairs {list(pairs)}", lambda: dist.batch_isend_irecv(ops))
        out.append(_unwire(got, value.dtype))
    return out


_EXCHANGES = {"all-reduce": _all_reduce, "all-gather": _all_gather,
              "reduce-scatter": _reduce_scatter, "all-to-all": _all_to_all,
              "collective-broadcast": _broadcast, "ragged-all-to-all": _ragged_all_to_all}


def exchange(instr: HloInstruction, values: Sequence[torch.Tensor],
             place: ProcessPlace) -> list[torch.Tensor]:
    """The collective's results on this rank, one logical tensor per operand (module
    docstring); ``values`` are this rank's logical operands."""
    kind = instr.opcode.removesuffix("-start")
    if kind == "collective-permute":
        return _permute(instr, place, values)
    group = place.group(instr)
    return _EXCHANGES[kind](instr, place, list(values), place.groups[tuple(sorted(group))],
                            group)


__all__ = ["DEFAULT_TIMEOUT", "ProcessPlace", "exchange", "join_process_groups"]
