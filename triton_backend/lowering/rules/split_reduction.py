"""A reduction split among programs: each reduces a span of its outermost reduced dim, and
the output tile's last program to finish combines the parts, in part order.

``kernel_plan`` splits a looped reduction whose output tiles are too few to fill the GPU (a
sum to a scalar ran as one program: 0.2% of the HBM roofline for a 128 MB input).  The
programs of part ``p`` are ``p * tiles .. (p + 1) * tiles - 1``; program ``(tile, p)`` walks
elements ``p * span .. (p + 1) * span - 1`` of the split dim (lanes past the dim are masked,
as any chunk's).  After its loop each program stores its accumulators (the values and their
validity) to its slot of a workspace and counts its arrival
(``device_lib.ordered_sums.last_to_arrive``); the last one loads the parts and combines them
in order ``0, 1, ...`` with the reduction's own combiner, then goes on to the epilogue; the
others skip the combining loop and store nothing.  Whichever program arrives last, the
result is the same bits.

Host side, the workspaces and the arrival counters (one per output tile, zeroed, left zero
by the kernel) are the file's ``SCRATCH_SPECS`` (``host_template``).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from fusion.errors import UnsupportedOpError
from fusion.ir.shape import ArrayShape, Shape
from triton_backend.lowering.emitter.triton_types import register_dtype
from triton_backend.lowering.rules.combine_function import accumulator_type

#: The device library the joining code calls (imported by kernel files that split).
ORDERED_SUMS_IMPORT = "from triton_backend.device_lib import ordered_sums\n"

#: Register dtype of an accumulator -> the torch dtype of its workspace (a pred's validity
#: and value are stored as bytes and converted back on load).
_WORKSPACE_DTYPES = {
    "tl.int1": "torch.int8", "tl.int8": "torch.int8", "tl.int16": "torch.int16",
    "tl.int32": "torch.int32", "tl.int64": "torch.int64", "tl.uint8": "torch.uint8",
    "tl.uint16": "torch.uint16", "tl.uint32": "torch.uint32", "tl.uint64": "torch.uint64",
    "tl.float16": "torch.float16", "tl.bfloat16": "torch.bfloat16",
    "tl.float32": "torch.float32", "tl.float64": "torch.float64",
}


class SplitRefused(UnsupportedOpError):
    """The split reduction cannot be emitted as planned (it is read at two indices); the
    kernel file is rendered again without splitting.  Never reaches a user."""


def splittable(shape: Shape) -> bool:
    """True when a reduce input of ``shape`` has an accumulator a workspace can hold.

    >>> from fusion.ir.shape import ArrayShape
    >>> splittable(ArrayShape("bf16", (4,))), splittable(ArrayShape("c64", (4,)))
    (True, False)
    """
    if not isinstance(shape, ArrayShape):
        return False
    try:
        return register_dtype(accumulator_type(shape.element_type)) in _WORKSPACE_DTYPES
    except UnsupportedOpError:
        return False


def scratch_specs_line(workspaces: Sequence[tuple[str, str, int]], counters: tuple[str, int]
                       ) -> str:
    """The ``SCRATCH_SPECS`` line of a kernel whose programs meet through
    ``device_lib.ordered_sums``: ``workspaces`` as ``(name, torch dtype text, entries)``
    (written before they are read), then ``counters`` ``(name, entries)`` of int32 arrival
    counters (zeroed; the kernel leaves them zero), in the kernel's parameter order.  Launches
    on one CUDA stream share both (``host_template._scratch``).

    >>> print(scratch_specs_line([("w", "torch.int8", 8)], ("c", 2)), end="")
    SCRATCH_SPECS = (('w', torch.int8, (8,), (0,), False), ('c', torch.int32, (2,), (0,), True), )
    """
    specs = [f"({name!r}, {dtype}, ({entries},), (0,), False)"
             for name, dtype, entries in workspaces]
    specs.append(f"({counters[0]!r}, torch.int32, ({counters[1]},), (0,), True)")
    return f"SCRATCH_SPECS = ({', '.join(specs)}, )\n"


@dataclass
class SplitEmission:
    """What the kernel's code for a split reduction needs while it is emitted: the plan
    (``kernel_plan.SplitReduction``), the program's part and output tile (identifiers), and
    what joining its parts defined (workspace pointers and their dtypes, the counters, the
    ``last`` flag: None until the reduction is emitted)."""

    plan: object
    part: str
    tile: str
    tiles: int
    pointers: list[str] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=list)
    counters: str = ""
    last: str | None = None
    size: int = 0

    def loop_bounds(self, block: int) -> str:
        """The ``range`` bounds of the split dim's loop in this program."""
        start = f"{self.part} * {self.plan.span}"
        return f"{start}, {start} + {self.plan.span}, {block}"

    def scratch_specs(self) -> str:
        """The file's ``SCRATCH_SPECS``: a workspace per accumulator (every part of every
        tile), then the zeroed arrival counters, in the kernel's parameter order."""
        entries = self.tiles * self.plan.parts * self.size
        return scratch_specs_line([(f"split_part_{i}", dtype, entries)
                                   for i, dtype in enumerate(self.dtypes)],
                                  ("split_arrivals", self.tiles))


def join_parts(em, name: str, accumulators: list[str], dtypes: list[str],
               shape: tuple[int, ...], combine: str) -> list[str]:
    """After the split loop of reduce ``name``: store this program's ``accumulators`` (of
    register ``dtypes`` and ``shape``: the output tile, size 1 on reduced axes), count the
    arrival, and return the accumulators combined over every part (meaningful in the last
    program only)."""
    split = em.split
    if split.last is not None:
        raise SplitRefused(f"split reduction {name} is read at more than one index", where=name)
    split.size = math.prod(shape)
    lanes = " + ".join(f"tl.arange(0, {n}){em.axis_view(a)} * {math.prod(shape[a + 1:])}"
                       for a, n in enumerate(shape) if n > 1)
    offsets = em.bind(f"tl.broadcast_to({lanes}, {list(shape)})" if lanes
                      else f"tl.zeros({list(shape)}, tl.int32)", "part_offsets")
    region = em.bind(f"{split.tile} * {split.plan.parts * split.size}", "parts_base")
    em.emit(f"# split reduction: this program's part joins the tile's other "
            f"{split.plan.parts - 1}; the last to finish adds them in part order")
    split.dtypes = [_WORKSPACE_DTYPES[t] for t in dtypes]
    split.pointers = [em.names.fresh(f"split_part{i}_ptr") for i in range(len(accumulators))]
    split.counters = em.names.fresh("split_arrivals_ptr")
    for pointer, acc in zip(split.pointers, accumulators):
        em.emit(f"tl.store({pointer} + {region} + {split.part} * {split.size} + {offsets}, "
                f"{acc})")
    split.last = em.bind(f"ordered_sums.last_to_arrive({split.counters}, {split.tile}, "
                         f"{split.plan.parts})", "last")
    joined = [em.bind(f"tl.zeros({list(shape)}, {t})", f"{name}_joined") for t in dtypes]
    part = em.names.fresh("part")
    with em.block(f"for {part} in range(0, {split.last}.to(tl.int32) * {split.plan.parts}):"):
        # .cg: the other programs' parts are in L2, never in this SM's L1
        loaded = [em.bind(f"tl.load({pointer} + {region} + {part} * {split.size} + {offsets}, "
                          f"cache_modifier='.cg').to({t})", f"{name}_part")
                  for pointer, t in zip(split.pointers, dtypes)]
        em.emit(f"{', '.join(joined)} = {combine}({', '.join(joined)}, {', '.join(loaded)})")
    return joined


def last_program_mask(em, mask: str, shape: tuple[int, ...]) -> str:
    """``mask`` and "this program joined the parts", as a block: the interpreter types a
    0-d flag's ``&`` with a block as an int mask, which stores reject."""
    last = em.split.last
    return em.bind(f"{mask} & (tl.broadcast_to({last}.to(tl.int8), {list(shape)}) != 0)",
                   "out_mask")


__all__ = ["ORDERED_SUMS_IMPORT", "SplitEmission", "SplitRefused", "join_parts",
           "last_program_mask", "scratch_specs_line", "splittable"]
