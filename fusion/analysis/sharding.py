"""Sharding and placement annotations: the custom calls JAX and XLA's partitioners and
host offloading put around values.

JAX lowers ``jax.sharding`` annotations and ``shard_map`` to custom calls that only guide
XLA's SPMD partitioner: ``Sharding`` (``with_sharding_constraint``, a ``sharding=`` attribute),
``SPMDFullToShardShape``/``SPMDShardToFullShape`` (GSPMD's entry to and exit from manual
sharding) and Shardy's ``xla.sdy.GlobalToLocalShape``/``xla.sdy.LocalToGlobalShape``
(``shard_map``).  Their Shardy attributes (``frontend_attributes={xla.sdy.sharding=...}``)
ride along as ordinary attributes, which the printer writes back.  Placement is annotated the
same way: ``annotate_device_placement`` (``jax.device_put(x, memory_kind=...)`` inside ``jit``,
and the offloading remat policies such as ``save_and_offload_only_these_names``) and XLA's
``MoveToHost``/``MoveToDevice`` say in which memory a value lives, never what it is.

On one device every shard is the whole value, so each of these calls is the identity: its
result is its operand (a tuple of them when it takes several).  A call whose result has
another shape than its operand (a shard of a value split over several devices) cannot run on
one device: :func:`sharding_call_problem` says why.

>>> from fusion.ir.shape import ArrayShape
>>> s = HloInstruction("s", "custom-call", ArrayShape("f32", (4, 6)), ("x",),
...                    (("custom_call_target", "Sharding"),))
>>> is_sharding_call(s), sharding_call_problem(s, (ArrayShape("f32", (4, 6)),))
(True, None)
>>> print(sharding_call_problem(s, (ArrayShape("f32", (8, 6)),)))
custom-call Sharding gives f32[4,6] from f32[8,6]: a shard of a value split over several devices, and modules run on one device here, where a shard is the whole value
"""
from __future__ import annotations

from collections.abc import Sequence

from fusion.ir.hlo_module import HloInstruction
from fusion.ir.shape import Shape, flatten_shape

#: The custom-call targets that annotate shardings or placements (identity on one device).
SHARDING_TARGETS = frozenset({
    "MoveToDevice",
    "MoveToHost",
    "SPMDFullToShardShape",
    "SPMDShardToFullShape",
    "Sharding",
    "annotate_device_placement",
    "xla.sdy.GlobalToLocalShape",
    "xla.sdy.LocalToGlobalShape",
})


def is_sharding_call(instr: HloInstruction) -> bool:
    """A custom call to one of :data:`SHARDING_TARGETS`."""
    return instr.opcode == "custom-call" and \
        instr.attr("custom_call_target", None) in SHARDING_TARGETS


def sharding_call_problem(instr: HloInstruction, operand_shapes: Sequence[Shape]) -> str | None:
    """Why ``instr``, a sharding call, is not the identity on one device; None when it is
    (one result leaf per operand, each with its operand's element type and dims)."""
    results = flatten_shape(instr.shape)
    target = instr.attr("custom_call_target", "?")
    if len(results) != len(operand_shapes) or any(
            len(flatten_shape(s)) != 1 for s in operand_shapes):
        return (f"custom-call {target} takes {len(operand_shapes)} array operands and gives "
                f"{len(results)} results: a sharding call gives one result per operand")
    for result, operand in zip(results, operand_shapes):
        source = flatten_shape(operand)[0]
        if not result.same_dims_and_type(source):
            return (f"custom-call {target} gives {result.with_layout(None)} from "
                    f"{source.with_layout(None)}: a shard of a value split over several "
                    "devices, and modules run on one device here, where a shard is the "
                    "whole value")
    return None


__all__ = ["SHARDING_TARGETS", "is_sharding_call", "sharding_call_problem"]
