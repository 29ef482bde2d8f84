"""Tiled merges: fusion decided by the tile analysis and the cost model, as a GPU compiler fuses.

Producer-consumer fusion (``tiling.fusion_pass.priority_fusion``) stops where XLA's CPU backend stops: a
reduction whose result is broadcast back over its own input (softmax's row max, layernorm's
mean) stays a kernel of its own, since fusing it into a consumer that reads it at every
element looks like computing it again per element.  Under block-level tiling it is not: when
a block holds whole rows, the row's reduction is computed once per block and the broadcast
reads it from registers.  Whether that holds is a question for the tile analysis, not for
op names.

This stage merges a producer node into a consumer node that reads it when the merged fusion
has a legal tiling (``tiling.symbolic`` + ``tiling.policy.legality``) whose modeled memory
cost (``tiling.policy.candidates``: DRAM bytes, L2-resident re-reads at L2 speed, the cost of
the default tiling, slowed by ``idle_factor`` when it has fewer blocks than the GPU has SMs)
is lower than the two kernels' costs together.  Dot and attention kernels (one dot with its
prologue and elementwise epilogue; two dots that ``tiling.fusion_pass.attention_pattern`` recognizes)
are costed at their inputs and outputs, each once: their templates stream operand tiles
through L2.  A producer still read by
other nodes (or the computation's result) stays an output of the merged fusion (a
multi-output fusion).  The best saving is taken first, until no merge saves.  A prologue
that saves bytes yet costs the dot more time in recomputation than a kernel of its own would
take is refused (``tiling.fusion_pass.dot_prologue``).

>>> from fusion.text.parser import parse_hlo
>>> from tiling.fusion_pass.priority_fusion import fuse_module
>>> m = parse_hlo('''HloModule m
... add { a = f32[] parameter(0)
...   b = f32[] parameter(1)
...   ROOT s = f32[] add(a, b) }
... ENTRY e {
...   p = f32[64,256] parameter(0)
...   z = f32[] constant(0)
...   s = f32[64] reduce(p, z), dimensions={1}, to_apply=add
...   b = f32[64,256] broadcast(s), dimensions={0}
...   ROOT d = f32[64,256] divide(p, b)
... }''')
>>> fused = fuse_module(m).module
>>> [i.opcode for i in fused.entry.instructions]
['parameter', 'fusion']
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from fusion.analysis.ragged_dot import grouped_gemm_problem, ragged_dot
from fusion.errors import FusionCompilerError
from fusion.ir.hlo_module import HloComputation
from fusion.opcodes import ELEMENTWISE_OPCODES, traits
from tiling.fusion_pass.attention_pattern import NotAttention, analyze_attention
from tiling.fusion_pass.decisions import (
    FUSIBLE_OPCODES,
    FusionDecision,
    Node,
    external_inputs,
    footprint_bytes,
    node_traffic,
    reaches_through_another,
    side_by_side_problem,
    structural_tile_check,
)
from tiling.fusion_pass.dot_prologue import recompute_problem
from tiling.fusion_pass.graph import FusionGraph
from tiling.fusion_pass.layout_tail import rearranges
from tiling.fusion_pass.tile_check import candidate_structure
from tiling.policy.candidates import report_for
from tiling.policy.limits import MAX_MERGED_OUTPUT_TILE, NUM_SMS
from tiling.symbolic.tiled_fusion import analyze_computation_tiling, next_power_of_two


def dot_member(comp: HloComputation, node: Node) -> str | None:
    """The dot of a node that may become a ``tl.dot`` kernel: exactly one dot, every other
    member fusible and no reduction, and what is computed from the dot elementwise at its
    index, then perhaps rearranged (the dot template takes elementwise and data-movement
    prologues, elementwise epilogues and a layout tail); None for any other node."""
    # A ``contraction`` (a dot, or a convolution as an implicit GEMM): its ``tl.dot``
    # template takes prologues and an elementwise epilogue.
    dots = [m for m in node.members if traits(comp.instruction(m).opcode).contraction]
    if len(dots) != 1:
        return None
    for m in node.members:
        opcode = comp.instruction(m).opcode
        if m != dots[0] and (opcode not in FUSIBLE_OPCODES or opcode == "reduce"):
            return None
    # The epilogue is applied to the accumulator tile: everything computed from the dot must
    # be elementwise at the dot's own output index, but for a layout tail at the top (a
    # transpose or reshape of the result, stored through: ``layout_tail``) of a value that
    # nothing else reads.
    out_dims = comp.instruction(dots[0]).shape.dims
    downstream, tail = {dots[0]}, set()
    for m in node.members:  # members are in the computation's (topological) order
        instr = comp.instruction(m)
        if m in downstream or not any(o in downstream or o in tail for o in instr.operands):
            continue
        if rearranges(instr) and comp.users.get(instr.operands[0], ()) == (m,):
            tail.add(m)
        elif tail & set(instr.operands) or instr.opcode not in ELEMENTWISE_OPCODES \
                or instr.shape.dims != out_dims:
            return None
        else:
            downstream.add(m)
    # A tail of reshapes alone moves no element: its consumers read through it as well.
    if tail and not any(traits(comp.instruction(m).opcode).physical_transpose for m in tail):
        return None
    return dots[0]


def ragged_member(comp: HloComputation, node: Node) -> str | None:
    """The ragged dot of a node the grouped GEMM template takes (``templates/ragged_dot``):
    one ragged dot by rows that the kernel runs, reading its operands as they are (no
    prologue), and what the node computes from it elementwise at its own index (an
    epilogue: a SiLU, a scale; scalars broadcast), one output; None for any other node."""
    rds = [m for m in node.members if comp.instruction(m).opcode == "ragged-dot"]
    if len(rds) != 1 or len(node.outputs) != 1:
        return None
    rd = comp.instruction(rds[0])
    if any(o in node.members for o in rd.operands):
        return None
    lhs, rhs, sizes = (comp.instruction(o).shape for o in rd.operands)
    r = ragged_dot(rd, lhs, rhs, sizes)
    if r.mode != "noncontracting" or grouped_gemm_problem(r, lhs, rhs, rd.shape) is not None:
        return None
    for m in node.members:
        instr = comp.instruction(m)
        scalar_spread = instr.opcode == "broadcast" and \
            comp.instruction(instr.operands[0]).shape.rank == 0
        scalar = instr.opcode == "constant" and instr.shape.rank == 0
        if m != rds[0] and not scalar and not scalar_spread and (
                instr.opcode not in ELEMENTWISE_OPCODES or instr.shape.dims != rd.shape.dims):
            return None
    return rds[0]


def _dot_count(comp: HloComputation, node: Node) -> int:
    return sum(traits(comp.instruction(m).opcode).contraction for m in node.members)


def mergeable(comp: HloComputation, node: Node) -> bool:
    """Whether a node may take part in a tiled merge: a fusible node, a dot node, or an
    attention node (two dots; the cost model checks the attention template takes it)."""
    if node.fusible or dot_member(comp, node) is not None or \
            ragged_member(comp, node) is not None:
        return True
    return _dot_count(comp, node) == 2 and all(
        comp.instruction(m).opcode in FUSIBLE_OPCODES or comp.instruction(m).opcode == "dot"
        for m in node.members)


@dataclass(frozen=True)
class ModeledCost:
    """The modeled memory cost of one node's kernel at its default tiling, or why none."""

    cost: int | None
    problem: str | None = None
    tiling: tuple[int, ...] = ()
    blocks: int = 0


@dataclass
class KernelCosts:
    """Memoized ``ModeledCost`` per node of one computation."""

    graph: FusionGraph
    _by_node: dict[Node, ModeledCost] = field(default_factory=dict)
    _by_structure: dict[tuple, ModeledCost] = field(default_factory=dict)
    #: Prologues refused for the time their recomputation costs, by (producer, dot node):
    #: logged at the end even when their nodes merged elsewhere since.
    time_refusals: dict[tuple[str, str], FusionDecision] = field(default_factory=dict)

    def of(self, node: Node) -> ModeledCost:
        if node not in self._by_node:
            # A model's layers offer the same candidates under other names: cost each
            # structure once.  Only costs are shared; a refusal's reason names instructions.
            structure = candidate_structure(self.graph.comp, node)
            cost = self._by_structure.get(structure) if structure is not None else None
            if cost is None:
                cost = self._model(node)
                if structure is not None and cost.problem is None:
                    self._by_structure[structure] = cost
            self._by_node[node] = cost
        return self._by_node[node]

    def _template_bytes(self, node: Node, fused: HloComputation) -> int:
        """A template kernel's bytes: each input at the footprint its indexing reads (the
        query third of a QKV matmul's output, not all of it), each output once."""
        footprint = footprint_bytes(fused, self.graph.module)
        return node_traffic(self.graph.comp, node) if footprint is None else footprint

    def _model(self, node: Node) -> ModeledCost:
        comp = self.graph.comp
        if any(comp.instruction(m).opcode == "ragged-dot" for m in node.members):
            # The grouped GEMM streams each group's matrix through L2: its inputs' footprint.
            if ragged_member(comp, node) is None:
                return ModeledCost(None, "a ragged-dot kernel reads its operands as they are "
                                         "and takes only an elementwise epilogue")
            return ModeledCost(self._template_bytes(node, self.graph.candidate(node)))
        dots = _dot_count(comp, node)
        # A dot or attention kernel streams its operand tiles through L2 (its template's own
        # tiling): its DRAM traffic is the footprint of its inputs and its outputs, once each.
        if dots == 1:
            if dot_member(comp, node) is None or len(node.outputs) != 1:
                return ModeledCost(None, "a dot fusion holds one dot, elementwise or "
                                         "data-movement prologues and one elementwise output")
            return ModeledCost(self._template_bytes(node, self.graph.candidate(node)))
        if dots == 2:
            if len(node.outputs) != 1:
                return ModeledCost(None, "an attention fusion has one output")
            fused = self.graph.candidate(node)
            try:
                analyze_attention(fused, orient=True)
            except NotAttention as why:
                return ModeledCost(None, f"the attention template does not take it: {why}")
            return ModeledCost(self._template_bytes(node, fused))
        if dots:
            return ModeledCost(None, f"a fusion holds at most two dots (attention), not {dots}")
        fused = self.graph.candidate(node)
        problem = structural_tile_check(fused, self.graph.module)
        if problem:
            return ModeledCost(None, problem)
        try:
            report = report_for(analyze_computation_tiling(fused, fused.name))
        except FusionCompilerError as err:  # an op without a rule: no modeled cost
            return ModeledCost(None, f"the tile analysis fails: {getattr(err, 'message', err)}")
        if report.default is None:
            return ModeledCost(None, f"the tile analysis finds no legal tiling "
                                     f"({report.default_reason})")
        default = report.default
        held = math.prod(next_power_of_two(t) for t in default.tile_sizes)
        if held > MAX_MERGED_OUTPUT_TILE:
            # Bytes cannot see registers: a normalization over a long column (a batch norm's
            # statistics over batch and space) is cheapest in bytes with every reduced
            # element of a feature in one block's output tile, a million values that spill.
            return ModeledCost(None, f"its output tile {list(default.tile_sizes)} holds "
                                     f"{held} elements, more than the "
                                     f"{MAX_MERGED_OUTPUT_TILE} a block keeps in registers")
        return ModeledCost(default.memory_cost * idle_factor(default.num_blocks), None,
                           default.tile_sizes, default.num_blocks)


def idle_factor(num_blocks: int) -> int:
    """How much slower memory moves when a kernel has fewer blocks than the GPU has SMs: each
    SM streams at about its share of the bandwidth, so ``num_blocks`` blocks reach that
    fraction of it.  Keeps a merge from trading parallelism for bytes (a row-wise loss fused
    with its mean over all rows would run on one SM).

    >>> idle_factor(4096), idle_factor(66), idle_factor(1) == NUM_SMS
    (1, 2, True)
    """
    return max(1, -(-NUM_SMS // max(1, num_blocks)))


def _holds_hero(comp: HloComputation, node: Node) -> bool:
    """Whether the node holds a reduce, a dot or a ragged dot: what producer-consumer fusion
    keeps apart."""
    return any(traits(opcode).contraction or opcode == "reduce" or opcode == "ragged-dot"
               for opcode in (comp.instruction(m).opcode for m in node.members))


def _merged(graph: FusionGraph, pid: int, cid: int, readers: dict[str, list[int]]) -> Node:
    """Producer ``pid`` fused into consumer ``cid``: outputs of the producer that others still
    read (or that the computation returns) stay outputs."""
    producer, consumer = graph.nodes[pid], graph.nodes[cid]
    kept = tuple(o for o in producer.outputs
                 if o == graph.comp.root_name or any(r != cid for r in readers.get(o, ())))
    return Node(graph.ordered(consumer.members + producer.members), consumer.outputs + kept,
                True)


def _candidates(graph: FusionGraph):
    readers = graph.readers()
    owner = graph.owner()
    succ = graph.successors()
    for cid, consumer in graph.nodes.items():
        for pid in _producers_of(graph, cid, owner):
            yield pid, cid, _merged(graph, pid, cid, readers), reaches_through_another(
                succ, pid, cid)


def _pair_allowed(graph: FusionGraph, pid: int, cid: int) -> bool:
    """Whether producer ``pid`` and consumer ``cid`` form a candidate at all."""
    comp = graph.comp
    producer, consumer = graph.nodes[pid], graph.nodes[cid]
    if pid == cid or not mergeable(comp, producer) or not mergeable(comp, consumer):
        return False
    # Two loop fusions: producer-consumer fusion has judged them.
    return _holds_hero(comp, producer) or _holds_hero(comp, consumer)


def _producers_of(graph: FusionGraph, cid: int, owner: dict[str, int]) -> list[int]:
    """The producers ``cid`` forms candidates with, in increasing id."""
    if not mergeable(graph.comp, graph.nodes[cid]):
        return []
    producers = sorted({owner[v] for v in external_inputs(graph.comp, graph.nodes[cid].members)})
    return [pid for pid in producers if _pair_allowed(graph, pid, cid)]


def _judge(graph: FusionGraph, costs: KernelCosts, pid: int, cid: int, merged: Node,
           cyclic: bool) -> FusionDecision:
    comp = graph.comp
    producer, consumer = graph.nodes[pid], graph.nodes[cid]

    def decide(fused: bool, reason: str, saved: int = 0) -> FusionDecision:
        return FusionDecision(comp.name, producer.root, (consumer.root,), fused, reason, saved,
                              "tiled")

    if cyclic:
        return decide(False, "the producer reaches the consumer through a third node: a cycle")
    problem = graph.merge_limit_problem(merged)
    if problem:
        return decide(False, problem)
    before = [costs.of(producer), costs.of(consumer)]
    if any(b.cost is None for b in before):
        return decide(False, "a part has no modeled cost (not tileable on its own)")
    after = costs.of(merged)
    if after.cost is None:
        return decide(False, f"the merged fusion cannot be tiled: {after.problem}")
    if _dot_count(comp, producer) == 0 and _dot_count(comp, merged) == 1:
        # Bytes are not the whole story of a prologue: the dot recomputes it per N block.
        problem = recompute_problem(comp, producer, merged)
        if problem:
            refusal = decide(False, f"costs time: {problem}")
            costs.time_refusals[(producer.root, consumer.root)] = refusal
            return refusal
    problem = side_by_side_problem(comp, merged.members, after.blocks)
    if problem:
        return decide(False, problem)
    saved = sum(b.cost for b in before) - after.cost
    if saved <= 0:
        return decide(False, f"modeled memory cost {after.cost} bytes at tiling "
                             f"{list(after.tiling)}, not less than the two kernels' "
                             f"{sum(b.cost for b in before)}")
    return decide(True, f"modeled memory cost {after.cost} bytes at tiling "
                        f"{list(after.tiling)} instead of {sum(b.cost for b in before)}: "
                        f"saves {saved}", saved)


def tiled_merge_fusion(graph: FusionGraph) -> list[FusionDecision]:
    """Apply the tiled merge that saves the most modeled memory cost until none saves; returns
    the decisions taken and, for the final state, those refused.

    The best is the largest saving, the smallest consumer id then producer id on a tie (the
    order the candidates are listed in).  A candidate's verdict depends only on its two nodes,
    except that a path between them through a third node (a cycle if merged) may appear when
    nodes elsewhere merge, never disappear: so candidates are judged once, when their nodes
    appear, wait in a heap, and the one popped is checked for such a path again.  A module
    of n nodes costs O(n log n) judgements instead of one per candidate per merge."""
    costs = KernelCosts(graph)
    log: list[FusionDecision] = []
    readers = {v: set(r) for v, r in graph.readers().items()}
    owner = graph.owner()
    heap: list[tuple[int, int, int, FusionDecision, Node]] = []

    def succ_of(nid: int) -> set[int]:
        return {r for o in graph.nodes[nid].outputs for r in readers.get(o, ())}

    def consider(pid: int, cid: int) -> None:
        merged = _merged(graph, pid, cid, readers)
        decision = _judge(graph, costs, pid, cid, merged, _through_another(succ_of, pid, cid))
        if decision.fused:
            heapq.heappush(heap, (-decision.bytes_saved, cid, pid, decision, merged))

    for cid in list(graph.nodes):
        for pid in _producers_of(graph, cid, owner):
            consider(pid, cid)
    while heap:
        _, cid, pid, decision, merged = heapq.heappop(heap)
        if pid not in graph.nodes or cid not in graph.nodes:
            continue  # one of its nodes was merged since
        if _through_another(succ_of, pid, cid):
            continue  # a merge elsewhere made a path between them: refused now
        for gone in (pid, cid):
            for v in graph.input_set(graph.nodes[gone]):
                readers[v].discard(gone)
            for o in graph.nodes[gone].outputs:
                owner.pop(o, None)
            del graph.nodes[gone]
        new = graph.add(merged)
        for v in graph.input_set(merged):
            readers.setdefault(v, set()).add(new)
        for o in merged.outputs:
            owner[o] = new
        log.append(decision)
        for producer in _producers_of(graph, new, owner):
            consider(producer, new)
        for consumer in sorted(succ_of(new) - {new}):
            if _pair_allowed(graph, new, consumer):
                consider(new, consumer)
    options = [_judge(graph, costs, pid, cid, merged, cyclic)
               for pid, cid, merged, cyclic in _candidates(graph)]
    log.extend(options)
    # A prologue refused for its recomputation usually merges elsewhere (a layernorm into
    # its reduction, a GELU into the dot before it as an epilogue), and the final verdict on
    # the pair then names the new node's shape: say why it left the dot in the first place.
    final = set(options)
    log.extend(d for d in costs.time_refusals.values() if d not in final)
    return log


class _Successors:
    """The successor map ``reaches_through_another`` indexes, computed when asked (the graph
    changes after every merge)."""

    def __init__(self, succ_of) -> None:
        self._succ_of = succ_of

    def __getitem__(self, nid: int) -> set[int]:
        return self._succ_of(nid)


def _through_another(succ_of, start: int, goal: int) -> bool:
    return reaches_through_another(_Successors(succ_of), start, goal)


__all__ = ["KernelCosts", "ModeledCost", "tiled_merge_fusion"]
