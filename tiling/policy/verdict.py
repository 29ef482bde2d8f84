"""A typed legality verdict: ``Illegal(kind, message)``; a legal tiling's verdict is ``None``.

Callers decide on the ``kind`` (never on the wording); users read the ``message``, which
``str`` gives unchanged.  ``in`` looks for text in the message, so that reports and tests
can still say what a reason mentions.

>>> why = Illegal(IllegalKind.SMALL_ROOT_TILE, "root tile (1, 4) has 4 elements, fewer than 16")
>>> why.kind is IllegalKind.SMALL_ROOT_TILE, "fewer than 16" in why
(True, True)
>>> f"rejected: {why}"
'rejected: root tile (1, 4) has 4 elements, fewer than 16'
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class IllegalKind(Enum):
    """Why a tiling is refused, one member per rule of ``tiling.policy.legality``."""

    #: As many tile sizes as output dims are needed.
    RANK = "rank"
    #: A tile size is outside ``[1, dim]``.
    OUT_OF_RANGE = "out of range"
    #: Some instruction's symbolic tile is not exact at these sizes.
    INEXACT = "inexact"
    #: A concatenate's tile would read from two operands.
    CONCATENATE = "concatenate"
    #: The reduced dims do not fit a persistent reduction: loop over chunks.
    PERSISTENT_LIMIT = "persistent limit"
    #: A reduction chunk was given to a fusion that reduces nothing.
    CHUNK_WITHOUT_REDUCTION = "chunk without reduction"
    #: A reduction chunk is not a power of two.
    CHUNK_NOT_POWER_OF_TWO = "chunk not a power of two"
    #: No reduction chunk makes the tiling legal.
    NO_LEGAL_CHUNK = "no legal chunk"
    #: A padded tile (or a program's largest tensor) exceeds Triton's numel limit.
    TILE_TOO_LARGE = "tile too large"
    #: The block is smaller than preferred: a performance preference, not a correctness rule.
    SMALL_ROOT_TILE = "small root tile"
    #: More blocks than CUDA's grid holds.
    GRID_TOO_LARGE = "grid too large"


@dataclass(frozen=True)
class Illegal:
    """Why a tiling is refused: the rule (``kind``) and one sentence for the user."""

    kind: IllegalKind
    message: str

    def __str__(self) -> str:
        return self.message

    def __contains__(self, text: str) -> bool:
        return text in self.message

    @property
    def is_preference(self) -> bool:
        """Whether only a preference refuses the tiling (it runs correctly when asked for)."""
        return self.kind is IllegalKind.SMALL_ROOT_TILE


__all__ = ["Illegal", "IllegalKind"]
