"""The rules and the cost model of priority fusion: may a producer fuse into its consumers,
and how many bytes of memory traffic would that save?

A *node* is what will become one kernel (a fusion) or one unfused instruction: a set of the
computation's instructions (``members``, names of the canonicalized computation) and the
values it writes to memory (``outputs``).  The same instruction may be a member of several
nodes: a cheap producer fused into several consumers is duplicated, as in XLA.

The cost model counts the bytes a kernel moves: every distinct value it reads from outside
plus every value it writes.  A fusion's benefit is the traffic of the kernels it replaces
minus the traffic of the kernels it creates; it is taken only when positive.

>>> from fusion.ir.shape import ArrayShape
>>> value_bytes(ArrayShape("bf16", (4, 8)))
64
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from fusion.analysis.emitter_kind import analyze_computation
from fusion.errors import FusionCompilerError
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.opcodes import opcodes_with, traits
from fusion.ir.shape import ArrayShape, Shape, flatten_shape
from tiling.indexing_analysis.fusion_indexing import output_to_input_indexing_of_computation
from tiling.maps.range_evaluator import RangeEvaluator
from tiling.policy.limits import MIN_SPLIT_ELEMENTS, NUM_SMS

# Ops that may be members of a fusion (XLA's producer-consumer fusible ops, without the ones
# this project keeps as their own kernels: dot, scatter, sort, reduce-window, ...).
FUSIBLE_OPCODES = opcodes_with("fusible")

# Ops that are no kernel of their own: they only name, group or alias values.
TRIVIAL_OPCODES = opcodes_with("trivial")

# XLA's ``IsExpensive`` flavour: transcendental and division-like elementwise ops; fusing a
# producer holding one of these into several consumers (or behind a broadcast that reads each
# element many times) would compute it again and again.
EXPENSIVE_OPCODES = opcodes_with("expensive")

# Ops that change which element of their operand an output element reads; every other fusible
# op reads its operands at its own index.
_INDEX_CHANGING = opcodes_with("index_changing")

# XLA's priority fusion caps a fusion's operands, not its size; this cap only bounds a
# kernel's compile time.  A counter-based random generator (``rng-bit-generator`` written
# out: Philox's 10 rounds are about 200 integer ops) must fit beside its readers, and so must
# a normal ``rng`` draw, two Philox words and Box-Muller per element (about 430 ops).
MAX_FUSION_MEMBERS = 600
MAX_FUSION_PARAMETERS = 64
_MAX_SIGNATURES = 16


@dataclass(frozen=True)
class Node:
    """A future kernel: ``members`` in the computation's order, ``outputs`` it materializes.

    ``fusible`` is False for an instruction that stays as it is (parameter, dot, while, ...).
    """

    members: tuple[str, ...]
    outputs: tuple[str, ...]
    fusible: bool

    @property
    def root(self) -> str:
        return self.outputs[0]


@dataclass(frozen=True)
class FusionDecision:
    """One decision of the pass, with why.  ``kind`` is ``producer-consumer``,
    ``multi-output`` (a producer fused into a reduction and still written) or ``sibling``.

    >>> str(FusionDecision("main", "exp", ("add",), True, "saves 96 bytes", 96))
    'main: fuse exp -> add: saves 96 bytes'
    """

    computation: str
    producer: str
    consumers: tuple[str, ...]
    fused: bool
    reason: str
    bytes_saved: int = 0
    kind: str = "producer-consumer"

    def __str__(self) -> str:
        verb = "fuse" if self.fused else "keep"
        arrow = " + " if self.kind == "sibling" else " -> "
        target = ", ".join(self.consumers) if self.consumers else "(no consumer)"
        tag = "" if self.kind == "producer-consumer" else f" [{self.kind}]"
        return f"{self.computation}: {verb} {self.producer}{arrow}{target}{tag}: {self.reason}"


# Injected checks: "is this fused computation tileable?" (None, or why not) and "is value
# ``name`` of this fused computation read through more than one indexing map?".  Both get the
# module to reach called computations (reduction regions).
TileCheck = Callable[[HloComputation, HloModule], "str | None"]
MapsCheck = Callable[[HloComputation, HloModule, str], bool]


def value_bytes(shape: Shape) -> int:
    """Bytes of a value in memory (sub-byte types rounded up per array)."""
    total = 0
    for leaf in flatten_shape(shape):
        if leaf.dtype == "token":
            continue
        total += math.ceil(leaf.num_elements * leaf.element_type.bits / 8)
    return total


def external_inputs(comp: HloComputation, members: tuple[str, ...]) -> tuple[str, ...]:
    """The values the members read from outside the node, in order of first use."""
    inside = set(members)
    seen: dict[str, None] = {}
    for name in members:
        for op in comp.instruction(name).operands:
            if op not in inside:
                seen.setdefault(op)
    return tuple(seen)


def node_traffic(comp: HloComputation, node: Node, inputs: Iterable[str] | None = None,
                 kernel: bool | None = None) -> int:
    """Bytes the node's kernel reads plus writes; 0 for what is no kernel.  ``inputs``
    (the node's ``external_inputs``, in any order) and ``kernel`` (``is_kernel``): when the
    caller knows them."""
    if not (is_kernel(comp, node) if kernel is None else kernel):
        return 0
    if inputs is None:
        inputs = external_inputs(comp, node.members)
    reads = sum(value_bytes(comp.instruction(v).shape) for v in inputs)
    return reads + sum(value_bytes(comp.instruction(v).shape) for v in node.outputs)


def reachable(succ: dict[int, set[int]], start: int, skip: int | None = None) -> set[int]:
    """The nodes reachable from ``start`` along ``succ`` (itself only when on a cycle),
    leaving out the direct edge to ``skip``.

    >>> sorted(reachable({0: {1, 2}, 1: {2}, 2: set()}, 0, skip=2))
    [1, 2]
    """
    seen: set[int] = set()
    stack = [t for t in succ[start] if t != skip]
    while stack:
        n = stack.pop()
        if n not in seen:
            seen.add(n)
            stack.extend(succ[n])
    return seen


def reaches_through_another(succ: dict[int, set[int]], start: int, goal: int) -> bool:
    """Whether ``goal`` is reachable from ``start`` other than by the direct edge: merging
    the two would then make a cycle through the node between them."""
    return goal in reachable(succ, start, skip=goal)


def footprint_bytes(fused: HloComputation, module: HloModule) -> int | None:
    """Bytes a kernel of ``fused`` reads and writes, each input counted at the bounding box of
    the indices the indexing maps read it at (a slice reads its slice, not its whole operand)
    and each output once; None when the indexing analysis has no rule for some op.

    >>> from fusion.text.parser import parse_hlo
    >>> m = parse_hlo('HloModule m\\nENTRY e {\\n  p = f32[4,96] parameter(0)\\n'
    ...               '  ROOT s = f32[4,32] slice(p), slice={[0:4], [32:64]}\\n}')
    >>> footprint_bytes(m.entry, m)  # 4x32 f32 read, 4x32 written
    1024
    """
    try:
        maps = output_to_input_indexing_of_computation(fused, module)
    except FusionCompilerError:
        return None
    total = sum(value_bytes(s) for s in flatten_shape(fused.root.shape))
    for p in fused.parameters:
        if not isinstance(p.shape, ArrayShape):
            total += value_bytes(p.shape)
            continue
        count = math.prod(_read_box(maps.get(p.name, ()), p.shape.dims))
        total += math.ceil(count * p.shape.element_type.bits / 8)
    return total


def _read_box(maps, dims: tuple[int, ...]) -> tuple[int, ...]:
    """Per dim, the extent of the bounding box of every index ``maps`` read (the whole dim
    where a map is undefined)."""
    if not maps:
        return tuple(0 for _ in dims)
    lo: list[int | None] = [None] * len(dims)
    hi: list[int | None] = [None] * len(dims)
    for m in maps:
        if m.is_undefined or len(m.results) != len(dims):
            return dims
        symbols = list(m.range_bounds) + [v.feasible_values for v in m.rt_vars]
        evaluator = RangeEvaluator(m.dim_bounds, symbols)
        for j, e in enumerate(m.results):
            iv = evaluator.compute(e)
            lo[j] = iv.lower if lo[j] is None else min(lo[j], iv.lower)
            hi[j] = iv.upper if hi[j] is None else max(hi[j], iv.upper)
    return tuple(max(0, min(h, n - 1) - max(l, 0) + 1) for n, l, h in zip(dims, lo, hi))


def is_kernel(comp: HloComputation, node: Node) -> bool:
    """Whether the node launches work: not only parameters, constants, tuples, bitcasts."""
    return any(not _is_trivial(comp.instruction(m)) for m in node.members)


def _is_trivial(instr: HloInstruction) -> bool:
    return instr.opcode in TRIVIAL_OPCODES or (
        instr.opcode == "reshape" and _default_layout(instr))


def _default_layout(instr: HloInstruction) -> bool:
    # A reshape between row-major shapes is a bitcast: no data moves.
    shape = instr.shape
    return isinstance(shape, ArrayShape) and shape.layout in (None, shape.effective_layout) and (
        shape.effective_layout.minor_to_major == tuple(range(shape.rank - 1, -1, -1)))


def reduce_members(comp: HloComputation, members: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(m for m in members if comp.instruction(m).opcode == "reduce")


def outer_reduces(comp: HloComputation, members: tuple[str, ...]) -> tuple[str, ...]:
    """The reduces among ``members`` that no other member reduce reads, through members, in its
    operands: a layer-norm's statistics and an outer mean of row losses have one (the row
    reductions are nested in it), a batch norm's sum and sum of squares two.

    >>> from fusion.text.parser import parse_hlo
    >>> m = parse_hlo('''HloModule m
    ... add { a = f32[] parameter(0)
    ...   b = f32[] parameter(1)
    ...   ROOT s = f32[] add(a, b) }
    ... ENTRY e {
    ...   x = f32[4,3] parameter(0)
    ...   z = f32[] constant(0)
    ...   s = f32[3] reduce(x, z), dimensions={0}, to_apply=add
    ...   q = f32[4,3] multiply(x, x)
    ...   t = f32[3] reduce(q, z), dimensions={0}, to_apply=add
    ...   ROOT u = f32[] reduce(t, z), dimensions={0}, to_apply=add
    ... }''')
    >>> outer_reduces(m.entry, ("s", "q", "t", "u")), outer_reduces(m.entry, ("s", "q", "t"))
    (('s', 'u'), ('s', 't'))
    """
    inside = set(members)
    reduces = reduce_members(comp, members)
    nested: set[str] = set()
    for r in reduces:
        stack, seen = list(comp.instruction(r).operands), set()
        while stack:
            name = stack.pop()
            if name in seen or name not in inside:
                continue
            seen.add(name)
            if name in reduces:
                nested.add(name)
            stack.extend(comp.instruction(name).operands)
    return tuple(r for r in reduces if r not in nested)


def side_by_side_problem(comp: HloComputation, members: tuple[str, ...], blocks: int
                         ) -> str | None:
    """Why a kernel of ``members`` tiled into ``blocks`` blocks would be slow: it holds
    several outer reductions side by side (``outer_reduces``) in fewer blocks than half the
    GPU's SMs, each long enough that the kernel planner would split it alone.  The planner
    splits a lone outer reduction among programs (``kernel_plan``'s split reduction, when
    each part keeps ``MIN_SPLIT_ELEMENTS``); side by side, reductions run on the few SMs
    their blocks fill (a batch norm's two sums over batch and space: on one).  None when it
    may be fused."""
    if not blocks or 2 * blocks >= NUM_SMS:
        return None
    outer = outer_reduces(comp, members)
    per_block = max((elements(comp, comp.instruction(r).operands[0]) for r in outer),
                    default=0) // blocks
    if len(outer) < 2 or per_block < 2 * MIN_SPLIT_ELEMENTS:
        return None
    return (f"the merged kernel would hold {len(outer)} reductions side by side "
            f"({', '.join(outer)}) in {blocks} blocks: only a lone one is split among "
            "programs")


def reduction_members(comp: HloComputation, members: tuple[str, ...]) -> tuple[str, ...]:
    """The members that fold many elements into each output: reduces, and the scans (the
    reduce-windows a fusion may hold: ``tiling.policy.tile_scans``)."""
    return tuple(m for m in members if traits(comp.instruction(m).opcode).reduction)


def has_expensive(comp: HloComputation, members: tuple[str, ...]) -> str | None:
    """The first expensive member, if any (by XLA's notion: transcendental, divide, reduce)."""
    for m in members:
        if comp.instruction(m).opcode in EXPENSIVE_OPCODES:
            return m
    return None


def elements(comp: HloComputation, name: str) -> int:
    leaves = flatten_shape(comp.instruction(name).shape)
    return leaves[0].num_elements if leaves else 0


def access_signatures(fused: HloComputation, name: str) -> frozenset[tuple]:
    """Structural stand-in for indexing maps: for each path from the root to ``name``, the
    index-changing ops along it (elementwise ops read at their own index and are skipped).

    Two different signatures mean ``name`` is (probably) read at two different indices; equal
    signatures mean surely the same index.
    """
    sigs: dict[str, set[tuple]] = {fused.root_name: {()}}
    users = fused.users
    for instr in reversed(fused.instructions):
        if instr.name == fused.root_name:
            continue
        acc: set[tuple] = set()
        for user_name in users.get(instr.name, ()):
            user = fused.instruction(user_name)
            for s in sigs.get(user_name, ()):
                if user.opcode in _INDEX_CHANGING:
                    key = tuple((k, v) for k, v in user.attributes if k != "metadata")
                    positions = tuple(i for i, o in enumerate(user.operands) if o == instr.name)
                    acc.add(s + ((user.opcode, key, positions, str(user.shape)),))
                else:
                    acc.add(s)
                if len(acc) > _MAX_SIGNATURES:
                    break
        sigs[instr.name] = acc
        if instr.name == name:
            break
    return frozenset(sigs.get(name, ()))


def structural_reads_differently(fused: HloComputation, module: HloModule, name: str) -> bool:
    """Default ``MapsCheck``: more than one access signature.  A scalar has one element, so
    every path reads it at the same (empty) index."""
    if elements(fused, name) == 1 and not any(
            leaf.dims for leaf in flatten_shape(fused.instruction(name).shape)):
        return False
    return len(access_signatures(fused, name)) > 1


def indexing_reads_differently(fused: HloComputation, module: HloModule, name: str) -> bool:
    """``MapsCheck`` with the indexing analysis: more than one distinct output->input map
    reaches ``name``; falls back to the structural check where the analysis has no rule."""
    try:
        maps = output_to_input_indexing_of_computation(fused, module)
        return len(maps[name]) > 1
    except FusionCompilerError:  # an op the analysis cannot read as given: judge structurally
        return structural_reads_differently(fused, module, name)


def structural_tile_check(fused: HloComputation, module: HloModule) -> str | None:
    """The emitter analysis must accept the fusion (one reduction shape per fusion, no nested
    tuples: what the tile analysis does not express); returns the reason when it does not.
    Part of the pass's default check, with the tile analysis (``tiling.fusion_pass.tile_check``)."""
    if not any(i.opcode == "reduce" for i in fused.instructions):
        return None  # the loop emitter takes any fusion of fusible ops
    try:
        analyze_computation(fused)
    except FusionCompilerError as err:
        return f"the emitter analysis rejects it: {err.message}"
    return None


def broadcast_reuse(fused: HloComputation, name: str) -> bool:
    """Whether some path from ``name`` to the root passes a broadcast that adds elements, so
    each element of ``name`` is used for many output elements."""
    seen: set[str] = set()
    stack = [name]
    users = fused.users
    while stack:
        current = stack.pop()
        for u in users.get(current, ()):
            user = fused.instruction(u)
            if user.opcode == "broadcast" and elements(fused, u) > elements(fused, current):
                return True
            if u not in seen:
                seen.add(u)
                stack.append(u)
    return False


def _misfit_member(comp: HloComputation, members, counts: tuple[int, ...]
                   ) -> tuple[str, bool] | None:
    """The first of ``members`` that is not elementwise work over ``counts`` elements (what only
    repeats or reshapes a value and constants count as elementwise; a scalar constant is read
    once per element anyway): ``(name, True)`` when it is no elementwise op at all,
    ``(name, False)`` when it has another element count; None when every member fits."""
    for m in members:
        instr = comp.instruction(m)
        t = traits(instr.opcode)
        if not (t.elementwise or t.keeps_constant or instr.opcode == "constant"):
            return m, True
        if instr.opcode == "constant" and elements(comp, m) == 1:
            continue
        if elements(comp, m) not in counts:
            return m, False
    return None


def epilogue_problem(comp: HloComputation, producer: Node, consumer: Node) -> str | None:
    """Why a reduction node cannot take ``consumer`` as its epilogue (None if it can): the
    epilogue must be elementwise work on the reduction's output shape."""
    if reduce_members(comp, consumer.members):
        return "the consumer has its own reduction"
    count = elements(comp, producer.root)
    misfit = _misfit_member(comp, consumer.members, (count,))
    if misfit is None:
        return None
    m, not_elementwise = misfit
    if not_elementwise:
        return f"{comp.instruction(m).opcode} {m} is no elementwise epilogue op"
    return (f"{m} has {elements(comp, m)} elements, not the reduction's {count}: the "
            "reduction would be recomputed per element")


def outer_reduction_problem(comp: HloComputation, producer: Node, consumer: Node) -> str | None:
    """Why ``consumer``'s reduction cannot take the reduction node ``producer`` in (None if it
    can): the consumer must reduce the producer's results, each read once, with elementwise
    work around it (a loss's mean over rows of each row's log-sum-exp).  Nothing is then
    computed twice, and the merged kernel splits the outer reduction among programs
    (``triton_backend.lowering.kernel_plan``'s split reduction) where its outputs are few.
    """
    reduces = reduce_members(comp, consumer.members)
    if len(reduces) != 1:
        return f"the consumer has {len(reduces)} reductions"
    outer = comp.instruction(reduces[0])
    count, out_count = elements(comp, producer.root), elements(comp, outer.name)
    if elements(comp, outer.operands[0]) != count:
        return (f"the consumer's reduction {outer.name} reduces {elements(comp, outer.operands[0])}"
                f" elements, not the {count} results of the producer's")
    misfit = _misfit_member(comp, [m for m in consumer.members if m != outer.name],
                            (count, out_count))
    if misfit is None:
        return None
    m, not_elementwise = misfit
    if not_elementwise:
        return (f"{comp.instruction(m).opcode} {m} is neither elementwise nor the consumer's "
                "reduction")
    return (f"{m} has {elements(comp, m)} elements: the producer's results would be read more "
            "than once")
