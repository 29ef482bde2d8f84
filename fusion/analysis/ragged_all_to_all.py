"""``ragged-all-to-all(input, output, input_offsets, send_sizes, output_offsets, recv_sizes)``
(``jax.lax.ragged_all_to_all``: a mixture of experts' token exchange): every member of a group
sends slices of its ``input`` (along dim 0) to the members, which write them into a copy of
their ``output``.  The four index operands list ``n * k`` slices for a group of ``n``: slice
``i`` goes to member ``i // k`` (in the group's order), taking ``send_sizes[i]`` rows from
``input_offsets[i]`` and writing them at ``output_offsets[i]`` *of the receiver's* output;
``recv_sizes`` tells a receiver what arrives, as XLA's spec asks (it must agree, and is not
read here).  Rows nobody writes keep ``output``'s values.

One code serves NumPy arrays (the evaluator) and torch tensors (the host rules):
:func:`slices_to` lists what one sender sends to one member, :func:`write_slices` writes the
received slices into a copy of the output, checking bounds (XLA leaves a slice past an end
undefined: here it is an error naming the slice).

>>> import numpy as np
>>> sent = slices_to(0, 1, [0, 4], [2, 1], [3, 0])
>>> write_slices(np.zeros(5), [(np.arange(1.0, 7.0), sent)]).tolist()
[5.0, 0.0, 0.0, 1.0, 2.0]
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RaggedSlice:
    """``size`` rows read from the sender's input at ``source`` and written to the
    receiver's output at ``target``."""

    source: int
    size: int
    target: int


def slices_to(member: int, members: int, input_offsets: Sequence, send_sizes: Sequence,
              output_offsets: Sequence) -> list[RaggedSlice]:
    """The slices a sender with these index operands sends to group member ``member`` (of
    ``members``), in order."""
    per = len(send_sizes) // members
    return [RaggedSlice(int(input_offsets[i]), int(send_sizes[i]), int(output_offsets[i]))
            for i in range(member * per, (member + 1) * per)]


def slice_problem(sl: RaggedSlice, input_rows: int, output_rows: int | None) -> str | None:
    """Why ``sl`` does not fit the sender's input or the receiver's output (``None``: not
    checked); None if it does."""
    if sl.size < 0:
        return f"a negative send size {sl.size}"
    if not 0 <= sl.source <= input_rows - sl.size:
        return (f"rows [{sl.source}, {sl.source + sl.size}) of an input of {input_rows} rows")
    if output_rows is not None and not 0 <= sl.target <= output_rows - sl.size:
        return (f"rows [{sl.target}, {sl.target + sl.size}) of an output of {output_rows} rows")
    return None


def write_slices(output: Any, received: Sequence[tuple[Any, Sequence[RaggedSlice]]]) -> Any:
    """A copy of ``output`` (a NumPy array or torch tensor) with each sender's slices of its
    input written in, senders in order; ``ValueError`` naming a slice that does not fit."""
    result = output.copy() if hasattr(output, "copy") else output.clone()
    for k, (source, slices) in enumerate(received):
        for sl in slices:
            problem = slice_problem(sl, source.shape[0], result.shape[0])
            if problem is not None:
                raise ValueError(f"slice of sender {k} (input_offsets {sl.source}, send_sizes "
                                 f"{sl.size}, output_offsets {sl.target}) reads or writes "
                                 f"{problem}")
            result[sl.target:sl.target + sl.size] = source[sl.source:sl.source + sl.size]
    return result


__all__ = ["RaggedSlice", "slice_problem", "slices_to", "write_slices"]
