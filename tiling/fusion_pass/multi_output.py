"""Multi-output fusion (XLA's ``MultiOutputFusion``), run after producer-consumer fusion.

* *Producer-consumer*: a producer that must stay in memory (its other users could not take it:
  it is expensive, or one of them is no fusion) is fused into a reduction reading it at the
  reduction's input index, and written as an extra output of that fusion.  Softmax's ``exp``
  is then computed once, with its row sum, instead of being written and read back.
* *Sibling*: two reductions of the same shape reading a common input become one fusion with a
  tuple root, so the input is read once (kind ``kInput``).

Neither may create a cycle: a merge is refused when one node reaches the other through a
third.  Each merge must save bytes under the traffic model, and must not put reductions side
by side in a kernel of few blocks (``decisions.side_by_side_problem``: a batch norm's sum and
sum of squares over batch and space stay two kernels, each split among programs, not one
kernel on one or two SMs).
"""
from __future__ import annotations

from fusion.ir.shape import ArrayShape
from fusion.opcodes import traits
from tiling.fusion_pass.decisions import (
    FusionDecision,
    Node,
    elements,
    external_inputs,
    reachable,
    reaches_through_another,
    outer_reduces,
    reduce_members,
    side_by_side_problem,
)
from tiling.fusion_pass.graph import FusionGraph
from tiling.fusion_pass.tiled_merge import KernelCosts



def _reduction_signature(graph: FusionGraph, node: Node):
    """(input dims, reduced dims) shared by all the node's reductions, or None."""
    comp = graph.comp
    sigs = set()
    for r in reduce_members(comp, node.members):
        instr = comp.instruction(r)
        operand = comp.instruction(instr.operands[0]).shape
        if not isinstance(operand, ArrayShape) or not isinstance(instr.shape, ArrayShape):
            return None
        sigs.add((operand.dims, tuple(instr.attr("dimensions"))))
    return sigs.pop() if len(sigs) == 1 else None


def _all_array_outputs(graph: FusionGraph, node: Node) -> bool:
    return all(isinstance(graph.comp.instruction(o).shape, ArrayShape) for o in node.outputs)


def _merge(graph: FusionGraph, a: int, b: int, merged: Node, decision: FusionDecision
           ) -> FusionDecision:
    del graph.nodes[a]
    del graph.nodes[b]
    graph.add(merged)
    return decision


def _producer_candidates(graph: FusionGraph):
    comp = graph.comp
    readers = graph.readers()
    succ = graph.successors()
    for pid, producer in graph.nodes.items():
        if (not producer.fusible or len(producer.outputs) != 1 or producer.root == comp.root_name
                or reduce_members(comp, producer.members)
                or any(traits(comp.instruction(m).opcode).contraction
                       for m in producer.members)
                or not isinstance(comp.instruction(producer.root).shape, ArrayShape)):
            continue
        users = sorted(set(readers.get(producer.root, ())))
        if len(users) < 2:
            continue
        for cid in users:
            consumer = graph.nodes[cid]
            sig = _reduction_signature(graph, consumer) if consumer.fusible else None
            if sig is None or elements(comp, producer.root) != _elements(sig[0]):
                continue
            if not _all_array_outputs(graph, consumer):
                continue
            yield pid, cid, reaches_through_another(succ, pid, cid)


def _elements(dims: tuple[int, ...]) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


def _sibling_candidates(graph: FusionGraph):
    comp = graph.comp
    succ = graph.successors()
    ids = sorted(graph.nodes)
    for i, a in enumerate(ids):
        na = graph.nodes[a]
        sig = _reduction_signature(graph, na) if na.fusible else None
        if sig is None or not _all_array_outputs(graph, na):
            continue
        inputs_a = set(external_inputs(comp, na.members))
        for b in ids[i + 1:]:
            nb = graph.nodes[b]
            if not nb.fusible or _reduction_signature(graph, nb) != sig:
                continue
            if not _all_array_outputs(graph, nb) or not inputs_a & set(
                    external_inputs(comp, nb.members)):
                continue
            cyclic = b in reachable(succ, a) or a in reachable(succ, b)
            yield a, b, cyclic


def _try(graph: FusionGraph, costs: KernelCosts, a: int, b: int, merged: Node, kind: str,
         cyclic: bool):
    """The decision for merging nodes ``a`` and ``b`` into ``merged``."""
    comp = graph.comp
    names = (graph.nodes[b].root,)

    def decide(fused: bool, reason: str, saved: int = 0) -> FusionDecision:
        return FusionDecision(comp.name, graph.nodes[a].root, names, fused, reason, saved, kind)

    if cyclic:
        return decide(False, "one reaches the other through a third node: a cycle")
    problem = graph.check_limits(merged)
    if problem:
        return decide(False, problem)
    saved = graph.traffic(graph.nodes[a]) + graph.traffic(graph.nodes[b]) - graph.traffic(merged)
    if saved <= 0:
        return decide(False, f"would move {-saved} more bytes")
    problem = graph.tile_problem(merged, (graph.nodes[a], graph.nodes[b]))  # the costliest
    if problem:
        return decide(False, problem)
    if len(outer_reduces(comp, merged.members)) > 1:
        problem = side_by_side_problem(comp, merged.members, costs.of(merged).blocks)
        if problem:
            return decide(False, problem)
    return decide(True, f"saves {saved} bytes", saved)


def multi_output_fusion(graph: FusionGraph) -> list[FusionDecision]:
    """Apply the best multi-output merge until none saves bytes; returns the decisions
    (including the refused candidates of the final state)."""
    log: list[FusionDecision] = []
    costs = KernelCosts(graph)
    while True:
        options: list[tuple[FusionDecision, int, int, Node]] = []
        for pid, cid, cyclic in _producer_candidates(graph):
            producer, consumer = graph.nodes[pid], graph.nodes[cid]
            merged = Node(graph.ordered(consumer.members + producer.members),
                          consumer.outputs + producer.outputs, True)
            options.append((_try(graph, costs, pid, cid, merged, "multi-output", cyclic), pid,
                            cid, merged))
        for a, b, cyclic in _sibling_candidates(graph):
            na, nb = graph.nodes[a], graph.nodes[b]
            outputs = tuple(dict.fromkeys(na.outputs + nb.outputs))
            merged = Node(graph.ordered(na.members + nb.members), outputs, True)
            options.append((_try(graph, costs, a, b, merged, "sibling", cyclic), a, b, merged))
        accepted = [o for o in options if o[0].fused]
        if not accepted:
            log.extend(o[0] for o in options)
            return log
        best = max(accepted, key=lambda o: o[0].bytes_saved)
        log.append(_merge(graph, best[1], best[2], best[3], best[0]))
