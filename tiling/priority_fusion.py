"""Priority fusion: turn an unfused module (as JAX lowers it) into XLA-style fusions.

In the spirit of XLA's ``PriorityFusion`` and ``MultiOutputFusion`` passes:

1. canonicalize (``fusion.canonicalize``: inline calls, drop no-op ops, fold constants);
2. every instruction starts as its own node; repeatedly, of all producers that may fuse into
   *all* their consumers (see ``tiling.fusion_decisions``), the one saving the most bytes of
   memory traffic is fused (a producer with several consumers is duplicated into each); no
   merge of tileable parts into a fusion the tile analysis cannot tile is made
   (``tiling.fusion_tile_check``).  This is where XLA's CPU backend stops;
3. attention: a dot, the normalization of its scores and the dot contracting them become one
   fusion when the indexing structure says so (``tiling.fusion_attention``);
4. tiled merges, as a GPU compiler fuses (``tiling.fusion_tiled_merge``): a reduction into
   the consumers that broadcast it back over its rows (softmax, layernorm, RMSNorm in one
   kernel), a dot with its prologue and elementwise epilogue, an attention kernel with its
   epilogue, whenever the merged fusion has a legal tiling whose modeled memory cost is lower;
5. multi-output fusion (``tiling.fusion_multi_output``): a producer that must stay
   materialized is fused into a reduction that reads it as a second output, and reductions
   of the same shape sharing an input become one fusion with a tuple root;
6. every node that does work becomes a ``fusion`` (kind ``kInput`` with a reduction hero, else
   ``kLoop``); ``while``/``conditional`` bodies are fused recursively.

Gathers, scatters, sorts, reduce-windows, custom-calls and control flow stay unfused; a fusion
holds at most one dot, or two in the attention pattern.

>>> from fusion.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... ENTRY e {
...   p = f32[4,8] parameter(0)
...   e = f32[4,8] exponential(p)
...   ROOT n = f32[4,8] negate(e)
... }''')
>>> result = fuse_module(m)
>>> [i.opcode for i in result.module.entry.instructions]
['parameter', 'fusion']
>>> print(result.decisions[0])
e: fuse e -> n: saves 256 bytes
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from fusion.call_graph import reachable_computations
from fusion.canonicalize import canonicalize
from fusion.gc_pause import paused_gc
from fusion.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.instruction_order import in_dependency_order
from fusion.shape import ArrayShape
from tiling.fusion_builder import NameAllocator, fused_computation, rebuild_computation
from tiling.fusion_decisions import (
    FUSIBLE_OPCODES,
    MAX_FUSION_MEMBERS,
    MAX_FUSION_PARAMETERS,
    FusionDecision,
    MapsCheck,
    Node,
    TileCheck,
    broadcast_reuse,
    epilogue_problem,
    external_inputs,
    has_expensive,
    indexing_reads_differently,
    is_kernel,
    node_traffic,
    reduce_members,
)
from tiling.fusion_attention import attention_fusion
from tiling.fusion_multi_output import multi_output_fusion
from tiling.fusion_tiled_merge import tiled_merge_fusion
from tiling.fusion_tile_check import TilingVerdicts

# Attribute keys whose computations run at the caller's level (fused recursively); other
# called computations (reduction regions, comparators, fused computations) are left alone.
CONTROL_FLOW_KEYS = ("body", "branch_computations", "condition", "false_computation",
                     "true_computation")


@dataclass(frozen=True)
class FusionOptions:
    """Knobs of the pass.  ``tile_check`` and ``maps_check`` are the injected analyses.

    Without ``tile_check``, a merge is refused when the emitter's structural check refuses
    it, or when the tile analysis cannot tile it although it could tile each part
    (``tiling.fusion_tile_check``).  An injected ``tile_check`` is absolute: any fusion it
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


@dataclass(frozen=True)
class FusionResult:
    """The fused module and every decision taken (or refused), with its reason."""

    module: HloModule
    decisions: tuple[FusionDecision, ...]

    def explain(self) -> str:
        """The decision log, one line per decision."""
        return "\n".join(str(d) for d in self.decisions)


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

    def __post_init__(self) -> None:
        self.index = {i.name: n for n, i in enumerate(self.comp.instructions)}
        self.tiling = TilingVerdicts(self.comp, self.module, self.candidate)
        for instr in self.comp.instructions:
            fusible = instr.opcode in FUSIBLE_OPCODES and (
                isinstance(instr.shape, ArrayShape) or instr.opcode == "reduce")
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
        """``(reduce_members, has_expensive)`` of the node's members (remembered)."""
        hit = self._members_facts.get(node.members)
        if hit is None:
            hit = (reduce_members(self.comp, node.members),
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


def evaluate_producer(graph: FusionGraph, pid: int, readers: dict[str, list[int]]
                      ) -> tuple[FusionDecision, list[int], list[Node]] | None:
    """Whether node ``pid`` may fuse into all its consumers, with the merged consumer nodes;
    None when it has no consumer (or is a parameter, tuple or get-tuple-element)."""
    comp = graph.comp
    producer = graph.nodes[pid]
    consumers = sorted(set(readers.get(producer.root, ())))
    if not consumers:
        return None
    opcode = comp.instruction(producer.root).opcode
    if opcode in ("get-tuple-element", "parameter", "tuple"):
        return None
    names = tuple(graph.nodes[c].root for c in consumers)
    key = (producer, tuple(graph.nodes[c] for c in consumers))
    if key in graph._cache:
        return graph._cache[key]

    def reject(reason: str) -> tuple[FusionDecision, list[int], list[Node]]:
        return FusionDecision(comp.name, producer.root, names, False, reason), consumers, []

    result = _judge(graph, producer, consumers, reject)
    graph._cache[key] = result
    return result


def _judge(graph: FusionGraph, producer: Node, consumers: list[int], reject):
    comp = graph.comp
    opcode = comp.instruction(producer.root).opcode
    if not producer.fusible:
        hint = " (XLA GPU would make it a Triton gemm fusion)" if opcode == "dot" else ""
        return reject(f"{opcode} is not fusible: it stays its own kernel{hint}")
    if len(producer.outputs) > 1:
        return reject("a multi-output fusion is not fused further")
    if producer.root == comp.root_name:
        return reject("it is the computation's result")
    for c in consumers:
        node = graph.nodes[c]
        if not node.fusible:
            return reject(f"consumer {node.root} ({comp.instruction(node.root).opcode}) "
                          "cannot take a fused producer")
    reduces, expensive = graph.member_facts(producer)
    if reduces and len(consumers) > 1:
        return reject(f"reduction {reduces[0]} would be computed {len(consumers)} times")
    if reduces:
        problem = epilogue_problem(comp, producer, graph.nodes[consumers[0]])
        if problem:
            return reject(f"no reduction epilogue: {problem}")
    if expensive and len(consumers) > 1:
        return reject(f"expensive {comp.instruction(expensive).opcode} {expensive} would be "
                      f"computed in {len(consumers)} consumers")
    merged: list[Node] = []
    for c in consumers:
        consumer = graph.nodes[c]
        node = Node(graph.ordered(consumer.members + producer.members), consumer.outputs, True)
        graph.derive(node, producer, consumer)
        problem = graph.check_limits(node)
        if problem:
            return reject(problem)
        if expensive and not reduces:
            fused = graph.candidate(node)
            if broadcast_reuse(fused, producer.root):
                return reject(f"expensive {expensive} would be recomputed for every element "
                              f"a broadcast in {consumer.root} makes of it")
            if graph.reads_differently(node, producer.root):
                return reject(f"expensive {expensive} is read through different indexing "
                              f"maps in {consumer.root}")
        merged.append(node)
    before = graph.traffic(producer) + sum(graph.traffic(graph.nodes[c]) for c in consumers)
    saved = before - sum(graph.traffic(n) for n in merged)
    if saved < 0 or (saved == 0 and is_kernel(graph.comp, producer)):
        return reject(f"would move {-saved} more bytes")
    # Last: the tile analysis is the costliest check, wasted on a merge refused anyway.
    for c, node in zip(consumers, merged):
        problem = graph.tile_problem(node, (producer, graph.nodes[c]))
        if problem:
            return reject(f"fusing into {graph.nodes[c].root} cannot be tiled: {problem}")
    reason = f"saves {saved} bytes" + (
        f", duplicated into {len(consumers)} consumers" if len(consumers) > 1 else "")
    decision = FusionDecision(comp.name, producer.root,
                              tuple(graph.nodes[c].root for c in consumers), True, reason, saved)
    return decision, consumers, merged


def producer_consumer_fusion(graph: FusionGraph) -> list[FusionDecision]:
    """Fuse the best producer into its consumers until none saves traffic; then log why the
    remaining producers stay.

    The best is the largest saving, the earliest producer on a tie.  A producer's judgement
    depends only on its node and its consumers' nodes (``evaluate_producer``), so after a
    merge only the producers whose node or consumers changed are judged again: the new nodes
    and the owners of every value the removed or new nodes read.  The candidates wait in a
    heap (stale entries are skipped), so a chain of n ops costs O(n log n), not O(n^2)."""
    comp = graph.comp
    readers = {v: set(r) for v, r in graph.readers().items()}
    owner = graph.owner()
    inputs = {nid: graph.input_set(node) for nid, node in graph.nodes.items()}
    heap: list[tuple[int, int, int, int]] = []
    live: dict[int, tuple[int, tuple]] = {}  # pid -> (version, judgement) of its heap entry
    version = 0

    def judge(pid: int) -> None:
        nonlocal version
        judged = evaluate_producer(graph, pid, readers)
        if judged is None or not judged[0].fused:
            live.pop(pid, None)
            return
        version += 1
        live[pid] = (version, judged)
        heapq.heappush(heap, (-judged[0].bytes_saved, graph.index[graph.nodes[pid].root],
                              version, pid))

    for pid in list(graph.nodes):
        judge(pid)
    log: list[FusionDecision] = []
    while heap:
        _, _, entry_version, pid = heapq.heappop(heap)
        if pid not in live or live[pid][0] != entry_version:
            continue  # stale: the producer was merged or judged again since
        decision, consumers, merged = live[pid][1]
        touched: set[str] = set()
        for gone in (pid, *consumers):
            live.pop(gone, None)
            node = graph.nodes.pop(gone)
            for v in inputs.pop(gone):
                readers[v].discard(gone)
                touched.add(v)
            for v in node.outputs:
                del owner[v]
        added = []
        for node in merged:
            nid = graph.add(node)
            added.append(nid)
            inputs[nid] = graph.input_set(node)
            for v in inputs[nid]:
                readers.setdefault(v, set()).add(nid)
                touched.add(v)
            for v in node.outputs:
                owner[v] = nid
        log.append(decision)
        for nid in sorted({owner[v] for v in touched if v in owner} | set(added)):
            judge(nid)
    final = {v: sorted(r) for v, r in readers.items() if r}
    for pid in sorted(graph.nodes, key=lambda n: graph.index[graph.nodes[n].root]):
        judged = evaluate_producer(graph, pid, final)
        node = graph.nodes[pid]
        if judged is not None and (node.fusible or is_kernel(graph.comp, node)):
            log.append(judged[0])
    return log


def fuse_computation(comp: HloComputation, module: HloModule, options: FusionOptions,
                     names: NameAllocator) -> tuple[HloComputation, list[HloComputation],
                                                    list[FusionDecision]]:
    """Fuse one computation: its new version, the fused computations, the decisions."""
    graph = FusionGraph(comp, module, options)
    log = producer_consumer_fusion(graph)
    # Attention first: a tiled merge of a dot with its neighbours (the mask into the first
    # dot, the division into the second) would hide the dot -> normalization -> dot pattern.
    if options.attention:
        log += attention_fusion(graph)
    if options.tiled_merges:
        log += tiled_merge_fusion(graph)
    if options.multi_output:
        log += multi_output_fusion(graph)
    new, fused = rebuild_computation(comp, graph.order(), names)
    return new, fused, log


def computations_to_fuse(module: HloModule) -> list[str]:
    """The entry and every computation run as control flow from it (while bodies and
    conditions, conditional branches, calls that were not inlined)."""
    return reachable_computations(module, module.entry_name, _control_flow_callees)


def _control_flow_callees(instr: HloInstruction) -> list[str]:
    return [name for key, value in instr.attributes
            if key in CONTROL_FLOW_KEYS or (instr.opcode == "call" and key == "to_apply")
            for name in (value if isinstance(value, tuple) else (value,))]


def fuse_module(module: HloModule, *, options: FusionOptions | None = None) -> FusionResult:
    """Canonicalize and fuse ``module``; the result verifies, prints and parses back, and
    evaluates to the same values bit for bit.  See the module docstring for an example."""
    with paused_gc():  # the pass allocates no cycles: see fusion.gc_pause
        return _fuse_module(module, options or FusionOptions())


def _fuse_module(module: HloModule, options: FusionOptions) -> FusionResult:
    module = in_dependency_order(module)  # the pass walks each computation top to bottom
    if options.canonicalize:
        module = canonicalize(module)
    targets = set(computations_to_fuse(module))
    names = NameAllocator({i.name for c in module.computations for i in c.instructions}
                          | {c.name for c in module.computations})
    computations: list[HloComputation] = []
    decisions: list[FusionDecision] = []
    for comp in module.computations:
        if comp.name not in targets:
            computations.append(comp)
            continue
        new, fused, log = fuse_computation(comp, module, options, names)
        computations.extend(fused)
        computations.append(new)
        decisions.extend(log)
    fused_module = HloModule(module.name, tuple(computations), module.entry_name,
                             module.attributes, module.stack_frames)
    return FusionResult(fused_module, tuple(decisions))
