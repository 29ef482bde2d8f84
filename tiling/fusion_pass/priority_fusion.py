"""Priority fusion: turn an unfused module (as JAX lowers it) into XLA-style fusions.

In the spirit of XLA's ``PriorityFusion`` and ``MultiOutputFusion`` passes:

1. canonicalize (``fusion.transforms.canonicalize``: inline calls, drop no-op ops, fold constants);
2. every instruction starts as its own node; repeatedly, of all producers that may fuse into
   *all* their consumers (see ``tiling.fusion_pass.decisions``), the one saving the most bytes of
   memory traffic is fused (a producer with several consumers is duplicated into each); no
   merge of tileable parts into a fusion the tile analysis cannot tile is made
   (``tiling.fusion_pass.tile_check``).  This is where XLA's CPU backend stops;
3. attention: a dot, the normalization of its scores and the dot contracting them become one
   fusion when the indexing structure says so (``tiling.fusion_pass.attention``);
4. tiled merges, as a GPU compiler fuses (``tiling.fusion_pass.tiled_merge``): a reduction into
   the consumers that broadcast it back over its rows (softmax, layernorm, RMSNorm in one
   kernel), a dot with its prologue and elementwise epilogue, an attention kernel with its
   epilogue, whenever the merged fusion has a legal tiling whose modeled memory cost is lower;
   then an attention kernel's K/V prologue that its query blocks' programs would recompute
   at more cost than a kernel of its own becomes one (``attention.split_attention_prologues``),
   and a dot's result chain that a dot or attention kernel took as an operand prologue
   becomes the producing dot's epilogue (``operand_epilogue``);
5. multi-output fusion (``tiling.fusion_pass.multi_output``): a producer that must stay
   materialized is fused into a reduction that reads it as a second output, and reductions
   of the same shape sharing an input become one fusion with a tuple root;
6. every node that does work becomes a ``fusion`` (kind ``kInput`` with a reduction hero, else
   ``kLoop``); ``while``/``conditional`` bodies are fused recursively.

Gathers, scatters, sorts, reduce-windows, custom-calls and control flow stay unfused; a fusion
holds at most one dot, or two in the attention pattern.

>>> from fusion.text.parser import parse_hlo
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
from dataclasses import dataclass

from fusion.ir.call_graph import reachable_computations
from fusion.transforms.canonicalize import canonicalize
from fusion.gc_pause import paused_gc
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.ir.instruction_order import in_dependency_order
from fusion.opcodes import PLUMBING_OPCODES
from fusion.transforms.complex_dots import expand_complex_dots
from fusion.transforms.dot_operand_rounding import round_dot_operands
from tiling.fusion_pass.attention_orientation import orient_score_dots
from tiling.fusion_pass.builder import NameAllocator, rebuild_computation
from tiling.fusion_pass.decisions import (
    FusionDecision,
    Node,
    broadcast_reuse,
    epilogue_problem,
    is_kernel,
    outer_reduction_problem,
    reduce_members,
)
from tiling.fusion_pass.attention import attention_fusion, split_attention_prologues
from tiling.fusion_pass.attention_backward import attention_backward_fusion
from tiling.fusion_pass.multi_output import multi_output_fusion
from tiling.fusion_pass.operand_epilogue import epilogues_before_operands
from tiling.fusion_pass.tiled_merge import tiled_merge_fusion
from tiling.fusion_pass.graph import FusionGraph, FusionOptions
from tiling.fusion_pass.index_splitting import split_index_values

# Attribute keys whose computations run at the caller's level (fused recursively); other
# called computations (reduction regions, comparators, fused computations) are left alone.
CONTROL_FLOW_KEYS = ("body", "branch_computations", "condition", "false_computation",
                     "true_computation")


@dataclass(frozen=True)
class FusionResult:
    """The fused module and every decision taken (or refused), with its reason."""

    module: HloModule
    decisions: tuple[FusionDecision, ...]

    def explain(self) -> str:
        """The decision log, one line per decision."""
        return "\n".join(str(d) for d in self.decisions)


def evaluate_producer(graph: FusionGraph, pid: int, readers: dict[str, list[int]]
                      ) -> tuple[FusionDecision, list[int], list[Node]] | None:
    """Whether node ``pid`` may fuse into all its consumers, with the merged consumer nodes;
    None when it has no consumer (or is a parameter, tuple or get-tuple-element)."""
    comp = graph.comp
    producer = graph.nodes[pid]
    consumers = sorted(set(readers.get(producer.root, ())))
    if not consumers:
        return None
    if comp.instruction(producer.root).opcode in PLUMBING_OPCODES:
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
        consumer = graph.nodes[consumers[0]]
        problem = epilogue_problem(comp, producer, consumer)
        if problem and reduce_members(comp, consumer.members):
            outer = outer_reduction_problem(comp, producer, consumer)
            problem = None if outer is None else f"{problem}, and {outer}"
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
        # The attention backward's region, before the tiled merges split it up; its kernels
        # recompute the scores, so a training step's forward attention, whose scores the
        # backward read, may now be one kernel too.
        backward = attention_backward_fusion(graph)
        log += backward
        if any(d.fused for d in backward):
            log += attention_fusion(graph)
    if options.tiled_merges:
        log += tiled_merge_fusion(graph)
    if options.attention:
        # The tiled merges grow attention's K/V prologues piece by piece: judged whole here.
        log += split_attention_prologues(graph)
    if options.tiled_merges:
        # A dot's result chain that a dot or attention kernel took as its operand's prologue:
        # the producing dot's epilogue instead (run once, the operand loaded as it is).
        log += epilogues_before_operands(graph)
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
    # a dot whose algorithm only rounds its operands as converts and a plain dot, which the
    # dot and attention patterns take, and a complex dot as real ones, which a dot fusion
    # takes (compile_hlo's plain_ops did both already)
    module = expand_complex_dots(round_dot_operands(module))
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
        # grouped attention's score dots with the query dim last (attention_orientation), and
        # a mask's positions one copy per reader, so each is a query or a key coordinate
        comp = orient_score_dots(split_index_values(comp, names.fresh), names.fresh)
        new, fused, log = fuse_computation(comp, module, options, names)
        computations.extend(fused)
        computations.append(new)
        decisions.extend(log)
    fused_module = HloModule(module.name, tuple(computations), module.entry_name,
                             module.attributes, module.stack_frames)
    return FusionResult(fused_module, tuple(decisions))
