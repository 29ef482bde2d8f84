"""Render the kernel file of a sort by any comparator: a bitonic network that asks the HLO
comparator itself (``device_lib.sorting_network``).

The packed-key kernel (``kernel.py``) sorts when the comparator is a LT/GT order of one key
of at most 32 bits.  Every other comparator XLA accepts (several keys, as ``lax.sort`` with
``num_keys > 1`` and ``jnp.lexsort`` write them; 64-bit keys; a key compared through
arithmetic) is rendered as a ``@triton.jit`` function of the operands' pairs, and the row is
sorted by Batcher's bitonic network over tiles of the operands the comparator reads, each
carried as the integers of its bits.  At every compare-and-swap a lane takes its partner's
values when the partner must come first and the lane ends with the earlier of the pair (or
must come second and the lane ends with the later): "first" is the comparator, ties broken by
the original lane index, so the sort is stable (XLA's ``is_stable`` asks no more), and lanes
past the row (padding to a power of two) come last.  The network's result is each lane's
source lane, and the operands are gathered there as the packed-key kernel gathers them.

A comparator that is no strict weak order has no defined result in XLA either; the network
then gives some permutation of the row.
"""
from __future__ import annotations

from dataclasses import dataclass

from fusion.errors import FusionCompilerError
from fusion.ir.element_types import ElementType
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.text.printer import print_computation
from fusion.ir.shape import ArrayShape
from triton_backend.lowering.emitter.identifiers import IdentifierAllocator, comment_block, sanitize
from triton_backend.lowering.emitter.triton_types import NARROW_FLOATS, register_dtype, render_load_widen
from triton_backend.lowering.rules.combine_function import scalar_body
from triton_backend.templates.sort.kernel import SortOperand, sort_kernel_source

#: The signed integer of each register width (the kernel carries every value as its bits).
_CARRIED_INT = {8: "tl.int8", 16: "tl.int16", 32: "tl.int32", 64: "tl.int64"}


def network_warps(block: int) -> int:
    """Warps of a network sort of ``block`` lanes: 256 lanes a warp, 4 to 16 (a 4096-lane row
    of 4 warps spilled on sm_90; of 16 warps an f64 key and an s32 tie-break take 96
    registers, no spills).

    >>> network_warps(64), network_warps(2048), network_warps(4096)
    (4, 8, 16)
    """
    return min(16, max(4, block // 256))


def render_network_sort_kernel(module: HloModule, fusion_instr: HloInstruction,
                               sort: HloInstruction, operands: tuple[SortOperand, ...],
                               outputs: tuple[ArrayShape, ...], block: int,
                               rows_tile: int = 1) -> tuple[str, tuple[int, ...]]:
    """The kernel file source sorting ``sort``'s rows (of at most ``block`` lanes, a power of
    two; ``rows_tile`` a program) by its comparator, and its grid."""
    network = ComparatorNetwork.of(module, fusion_instr, sort, operands)
    log_n = max(1, (block - 1).bit_length())

    def sorting(read, gather) -> list[str]:
        lines = network.registers(lambda i: read(i, "lane"), "lanes")
        lines += network.stages(1, log_n, "0")
        return lines + ["source = h_source"] + gather("lane")

    return sort_kernel_source(module, fusion_instr, sort, operands, outputs, block, sorting,
                              f"a bitonic network asking comparator {network.comparator.name}; "
                              f"padded to {block}", network.functions(), NETWORK_IMPORTS,
                              network_warps(block * rows_tile), rows_tile=rows_tile)


#: The kernel file's import of the network's device functions.
NETWORK_IMPORTS = "from triton_backend.device_lib import sorting_network\n"


@dataclass(frozen=True)
class ComparatorNetwork:
    """What the network's lines are rendered from: the comparator (rendered as the jitted
    function ``less``), the operands it reads (``carried``, each carried as the integers of
    its register bits), every operand's element type and the row length ``n``."""

    comparator: HloComputation
    less: str
    carried: tuple[int, ...]
    types: tuple[ElementType, ...]
    n: int

    @classmethod
    def of(cls, module: HloModule, fusion_instr: HloInstruction, sort: HloInstruction,
           operands: tuple[SortOperand, ...]) -> ComparatorNetwork:
        comparator = module.computation(sort.attr("to_apply"))
        read_params = {p.attr("parameter_number") for p in comparator.parameters
                       if comparator.users.get(p.name)}
        return cls(comparator, f"{sanitize(fusion_instr.name)}_comes_first",
                   tuple(sorted({k // 2 for k in read_params})),
                   tuple(o.shape.element_type for o in operands),
                   operands[0].shape.dims[sort.attr("dimensions")[0]])

    def functions(self) -> str:
        """The source of the comparator's ``@triton.jit`` function."""
        return _comparator_function(self.comparator, self.less, len(self.types)) + "\n\n"

    def carriers(self) -> dict[int, str]:
        """The integer type carrying each carried operand."""
        return {i: _carrier(self.types[i]) for i in self.carried}

    def registers(self, read, source: str) -> list[str]:
        """Lines making ``h{i}`` (operand ``i``'s bits) and ``h_source`` (the lanes' row
        indices ``source``) tiles; ``read(i)``: the raw values."""
        lines = [f"h{i} = {_to_bits(render_load_widen(read(i), self.types[i]), self.types[i])}"
                 for i in self.carried]
        return lines + [f"h_source = {source}"]

    def stages(self, first: int, log_n: int, descending: str) -> list[str]:
        """Lines of the network's stages ``first`` to ``log_n`` on the tiles (a loop: see
        ``device_lib.sorting_network``), the last one's run reversed where ``descending``
        (Triton text of 0 or 1)."""
        step = ["bit = tile_stage - 1 - step"]
        step += [f"p{i} = sorting_network.partner(h{i}, lane, bit)" for i in self.carried]
        step.append("p_source = sorting_network.partner(h_source, lane, bit)")
        step += self.first("p", "h")
        step.append(f"take = first != sorting_network.keeps_later(lane, {log_n}, tile_stage, "
                    f"bit, {descending})")
        step += [f"h{i} = tl.where(take, p{i}, h{i})" for i in self.carried]
        step.append("h_source = tl.where(take, p_source, h_source)")
        return ([f"for tile_stage in range({first}, {log_n + 1}):",
                 "    for step in range(tile_stage):"]
                + ["        " + line for line in step])

    def first(self, theirs: str, mine: str) -> list[str]:
        """Lines setting ``first``: the value of prefix ``theirs`` comes before the one of
        prefix ``mine`` (the comparator, ties by source lane; lanes past the row last).

        >>> from fusion.ir.element_types import ELEMENT_TYPES as T
        >>> print("\\n".join(ComparatorNetwork(None, "lt", (0,), (T["s32"],), 5).first("p", "h")))
        # the comparator, ties by source lane; lanes past the row last
        p_first = lt(p0, h0)
        h_first = lt(h0, p0)
        first = (p_source < 5) & ((h_source >= 5) | p_first | (~h_first & (p_source < h_source)))
        """
        a = _arguments(len(self.types), self.carried, self.types, theirs)
        b = _arguments(len(self.types), self.carried, self.types, mine)
        pairs = lambda x, y: ", ".join(f"{u}, {v}" for u, v in zip(x, y))  # noqa: E731
        s, m, n = f"{theirs}_source", f"{mine}_source", self.n
        return ["# the comparator, ties by source lane; lanes past the row last",
                f"{theirs}_first = {self.less}({pairs(a, b)})",
                f"{mine}_first = {self.less}({pairs(b, a)})",
                f"first = ({s} < {n}) & (({m} >= {n}) | {theirs}_first | "
                f"(~{mine}_first & ({s} < {m})))"]


def _carrier(t: ElementType) -> str:
    """The integer type carrying ``t``'s register values through the network: as wide as the
    register (fp32 for the narrow floats, a byte for pred and the sub-byte integers).

    >>> from fusion.ir.element_types import ELEMENT_TYPES as T
    >>> _carrier(T["bf16"]), _carrier(T["s4"]), _carrier(T["u32"]), _carrier(T["pred"])
    ('tl.int32', 'tl.int8', 'tl.int32', 'tl.int8')
    """
    bits = 32 if t.name in NARROW_FLOATS else max(8, t.bits)
    return _CARRIED_INT[bits]


def _to_bits(value: str, t: ElementType) -> str:
    """The register value as the integer of its bits (a pred as 0 or 1)."""
    carrier = _carrier(t)
    if t.is_pred:
        return f"({value}).to({carrier})"
    reg = register_dtype(t)
    return value if reg == carrier else f"({value}).to({carrier}, bitcast=True)"


def _arguments(count: int, carried: tuple[int, ...], types: tuple[ElementType, ...],
               prefix: str) -> list[str]:
    """The comparator's arguments for one side of each pair: the carried operands in their
    register type, ``0`` for operands it does not read."""
    out = []
    for i in range(count):
        t = types[i]
        reg = register_dtype(t)
        if i not in carried:
            out.append("0")
        elif t.is_pred:
            out.append(f"({prefix}{i} != 0)")
        elif reg == _carrier(t):  # carried as itself (a signed integer)
            out.append(f"{prefix}{i}")
        else:
            out.append(f"{prefix}{i}.to({reg}, bitcast=True)")
    return out


def comparator_problem(module: HloModule, sort: HloInstruction) -> str | None:
    """Why the network cannot ask ``sort``'s comparator (an op that is not elementwise, a
    type no kernel holds); None when it can."""
    comparator = module.computation(sort.attr("to_apply"))
    try:
        _comparator_function(comparator, "probe", len(sort.operands))
    except FusionCompilerError as err:
        return f"comparator {comparator.name}: {err.message}"
    return None


def _comparator_function(comparator, name: str, k: int) -> str:
    """``@triton.jit def name(a0, b0, a1, b1, ...)``: the comparator on tensors, each op in
    its own type (16-bit floats held in fp32, as in every kernel)."""
    names = IdentifierAllocator()
    params = [names.fresh(f"{side}{i}") for i in range(k) for side in ("a", "b")]
    body: list[str] = []
    (result,) = scalar_body(comparator, names, params, body, widen=False)
    header = comment_block(print_computation(comparator))
    return (header + f"@triton.jit\ndef {name}({', '.join(params)}):\n" + "\n".join(body)
            + f"\n    return {result}\n")


__all__ = ["NETWORK_IMPORTS", "ComparatorNetwork", "comparator_problem", "network_warps",
           "render_network_sort_kernel"]
