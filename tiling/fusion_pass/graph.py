"""The state of the fusion pass over one computation: ``FusionGraph`` (its nodes, and the facts
of each node remembered while the pass runs) and ``FusionOptions`` (the pass's knobs).

Its own module so that the stages (``attention``, ``tiled_merge``, ``multi_output``) import the
graph they work on, not the driver of the pass (``priority_fusion``) that imports them.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from fusion.analysis.element_width import changes_element_width
from fusion.ir.hlo_module import HloComputation, HloModule
from fusion.ir.shape import ArrayShape
from tiling.fusion_pass.builder import NameAllocator, fused_computation
from tiling.fusion_pass.decisions import (
    FUSIBLE_OPCODES,
    MAX_FUSION_MEMBERS,
    MAX_FUSION_PARAMETERS,
    MapsCheck,
    Node,
    TileCheck,
    external_inputs,
    has_expensive,
    indexing_reads_differently,
    is_kernel,
    node_traffic,
    reduction_members,
)
from tiling.fusion_pass.tile_check import TilingVerdicts, scan_problem
from tiling.policy.tile_scans import scan_along_tile_candidate


@dataclass(frozen=True)
class FusionOptions:
    """Knobs of the pass.  ``tile_check`` and ``maps_check`` are the injected analyses.

    Without ``tile_check``, a merge is refused when the emitter's structural check refuses
    it, or when the tile analysis cannot tile it although it could tile each part
    (``tiling.fusion_pass.tile_check``).  An injected ``tile_check`` is absolute: any fusion it
    refuses is not made.  ``maps_check`` defaults to the indexing analysis with a structural
    fallback.  ``tiled_merges`` and ``attention`` turn on the GPU compiler's stages (see the
    module docstring); with both off the pass stops where XLA's CPU backend stops."""

    canonicalize: bool = True
    multi_output: bool = True
    tiled_merges: bool = True
    attention: bool = True
    tile_check: TileCheck | None = None
    maps_check: MapsCheck | None = None
    max_members: int = MAX_FUSION_MEMBERS
    max_parameters: int = MAX_FUSION_PARAMETERS


@dataclass
class FusionGraph:
    """The nodes of one computation while the pass runs (owned by one call; not shared)."""

    comp: HloComputation
    module: HloModule
    options: FusionOptions
    nodes: dict[int, Node] = field(default_factory=dict)
    _next: int = 0
    _cache: dict = field(default_factory=dict)
    # Facts of a node that are linear in its size, kept per node: a producer is judged
    # again after every merge next to it, and its node (the larger the further a chain has
    # grown) is the same each time.
    _inputs: dict = field(default_factory=dict)
    _traffic: dict = field(default_factory=dict)
    _kernel: dict = field(default_factory=dict)
    _members_facts: dict = field(default_factory=dict)
    _member_sets: dict = field(default_factory=dict)
    _scans: set = field(default_factory=set)  # the fusible scans (``scan_problem``)

    def __post_init__(self) -> None:
        self.index = {i.name: n for n, i in enumerate(self.comp.instructions)}
        self.tiling = TilingVerdicts(self.comp, self.module, self.candidate)
        for instr in self.comp.instructions:
            # A scan fuses as a reduction does: its tile runs along the scanned dim, so
            # the fusion reads its operand once (a reduce-window reduces a window per output).
            # A bitcast-convert between widths adds or drops a dim: a view, no kernel's op.
            fusible = instr.opcode in FUSIBLE_OPCODES and (
                isinstance(instr.shape, ArrayShape) or instr.opcode == "reduce") \
                and not changes_element_width(self.comp, instr)
            if not fusible and scan_along_tile_candidate(instr, self.comp, self.module):
                fusible = True
                self._scans.add(instr.name)
            self.add(Node((instr.name,), (instr.name,), fusible))

    def add(self, node: Node) -> int:
        self.nodes[self._next] = node
        self._next += 1
        return self._next - 1

    def ordered(self, names) -> tuple[str, ...]:
        return tuple(sorted(set(names), key=self.index.__getitem__))

    def readers(self) -> dict[str, list[int]]:
        """For each value, the nodes reading it from memory."""
        out: dict[str, list[int]] = {}
        for nid, node in self.nodes.items():
            for v in external_inputs(self.comp, node.members):
                out.setdefault(v, []).append(nid)
        return out

    def owner(self) -> dict[str, int]:
        return {v: nid for nid, node in self.nodes.items() for v in node.outputs}

    def successors(self) -> dict[int, set[int]]:
        owner = self.owner()
        succ: dict[int, set[int]] = {nid: set() for nid in self.nodes}
        for nid, node in self.nodes.items():
            for v in external_inputs(self.comp, node.members):
                succ[owner[v]].add(nid)
        return succ

    def input_set(self, node: Node) -> frozenset[str]:
        """The values the node reads from outside it (``external_inputs`` as a set),
        remembered per node."""
        hit = self._inputs.get(node)
        if hit is None:
            hit = self._inputs[node] = frozenset(external_inputs(self.comp, node.members))
        return hit

    def member_set(self, node: Node) -> frozenset[str]:
        hit = self._member_sets.get(node.members)
        if hit is None:
            hit = self._member_sets[node.members] = frozenset(node.members)
        return hit

    def is_kernel(self, node: Node) -> bool:
        hit = self._kernel.get(node)
        if hit is None:
            hit = self._kernel[node] = is_kernel(self.comp, node)
        return hit

    def traffic(self, node: Node) -> int:
        """``node_traffic`` (remembered per node)."""
        hit = self._traffic.get(node)
        if hit is None:
            hit = self._traffic[node] = node_traffic(self.comp, node, self.input_set(node),
                                                     self.is_kernel(node))
        return hit

    def member_facts(self, node: Node) -> tuple[tuple[str, ...], str | None]:
        """``(reduction_members, has_expensive)`` of the node's members (remembered)."""
        hit = self._members_facts.get(node.members)
        if hit is None:
            hit = (reduction_members(self.comp, node.members),
                   has_expensive(self.comp, node.members))
            self._members_facts[node.members] = hit
        return hit

    def derive(self, merged: Node, producer: Node, consumer: Node) -> None:
        """Remember the facts of ``merged`` (``producer`` fused into ``consumer``) from
        theirs, without walking its members: a chain's merges would otherwise cost its
        length each.  A value is read from outside the merge when a member of one part reads
        it and the other part does not hold it (the parts may share duplicated members)."""
        if merged not in self._inputs:
            held_p, held_c = self.member_set(producer), self.member_set(consumer)
            self._inputs[merged] = frozenset(
                [v for v in self.input_set(consumer) if v not in held_p]
                + [v for v in self.input_set(producer) if v not in held_c])
        if merged not in self._kernel:
            self._kernel[merged] = self.is_kernel(consumer) or self.is_kernel(producer)
        if merged.members not in self._members_facts:
            (reduces_c, first_c), (reduces_p, first_p) = (self.member_facts(consumer),
                                                          self.member_facts(producer))
            at = self.index.__getitem__
            firsts = [e for e in (first_c, first_p) if e is not None]
            self._members_facts[merged.members] = (
                tuple(sorted(set(reduces_c) | set(reduces_p), key=at)),
                min(firsts, key=at) if firsts else None)

    def candidate(self, node: Node) -> HloComputation:
        """The fused computation ``node`` would become, for the injected checks."""
        names = NameAllocator(reserved=self.index.keys())
        return fused_computation(self.comp, node, "candidate", names)

    def check_limits(self, node: Node) -> str | None:
        if len(node.members) > self.options.max_members:
            return f"the fusion would have {len(node.members)} instructions (limit " \
                   f"{self.options.max_members})"
        inputs = len(self.input_set(node))
        if inputs > self.options.max_parameters:
            return f"the fusion would have {inputs} parameters (limit " \
                   f"{self.options.max_parameters})"
        return None

    def merge_limit_problem(self, node: Node) -> str | None:
        """Why a merge into ``node`` is refused before any cost is weighed: the size limits,
        then an injected tile check (absolute when given); None when neither objects."""
        problem = self.check_limits(node)
        if problem is None and self.options.tile_check is not None:
            refused = self.options.tile_check(self.candidate(node), self.module)
            problem = refused and f"the injected tile check refuses it: {refused}"
        return problem

    def tile_problem(self, node: Node, parts: tuple[Node, ...]) -> str | None:
        """Why ``node``, made of ``parts`` (producer, consumer), must not be fused (None: it
        may)."""
        if any(m in self._scans for m in node.members):
            problem = scan_problem(self.candidate(node))
            if problem:
                return problem
        if self.options.tile_check is not None:
            return self.options.tile_check(self.candidate(node), self.module)
        return self.tiling.merge_problem(node, parts)

    def reads_differently(self, node: Node, name: str) -> bool:
        check = self.options.maps_check or indexing_reads_differently
        return check(self.candidate(node), self.module, name)

    def order(self) -> list[Node]:
        """Nodes with producers first (stable by the position of their first output)."""
        succ = self.successors()
        indegree = {nid: 0 for nid in self.nodes}
        for nid, targets in succ.items():
            for t in targets:
                indegree[t] += 1
        key = {nid: min(self.index[o] for o in n.outputs) for nid, n in self.nodes.items()}
        # Keys are distinct (a value has one owner): the heap pops what a sort would.
        ready = [(key[nid], nid) for nid, d in indegree.items() if d == 0]
        heapq.heapify(ready)
        out: list[Node] = []
        while ready:
            _, nid = heapq.heappop(ready)
            out.append(self.nodes[nid])
            for t in succ[nid]:
                indegree[t] -= 1
                if indegree[t] == 0:
                    heapq.heappush(ready, (key[t], t))
        return out


__all__ = ["FusionGraph", "FusionOptions"]
