"""Attention merges: a dot, the normalization of its scores and the dot that contracts them
become one fusion (one flash-attention-style kernel), when ``tiling.fusion_pass.attention_pattern``
recognizes the merged computation.

After producer-consumer fusion and tiled merges, attention as JAX lowers it is three nodes:
``[dot1 + scale + mask]``, ``[row max, exp, row sum]``, ``[divide + dot2]``; the score matrix
is written and read twice.  This stage looks at every pair of dot nodes ``A -> B`` (``A``
reaches ``B`` with no other dot node between them), takes ``A``, ``B`` and every node on a
path between them, and merges them when

* no value computed between them is read by anything else (the template writes one output,
  the second dot's: the scores and normalized scores never reach memory);
* the merged computation is attention by its indexing structure: the normalization reduces
  the first dot's key dim and the second dot contracts that same dim
  (``attention_pattern.analyze_attention``, which also checks the template's limits).

After the tiled merges, ``split_attention_prologues`` judges each attention kernel's K and V
prologues by time, as ``dot_prologue`` judges a dot's: every query block's program of every
query head sharing the kv head computes them again, and one that costs more so than a kernel
of its own (RoPE's cos and sin on K) becomes that kernel, the attention reading its result.

Every pair considered is logged (kind ``attention``) with why it was or was not merged; when
it is not, the nodes stay as they were (at most the three kernels above).

>>> from fusion.text.parser import parse_hlo
>>> from tiling.fusion_pass.priority_fusion import fuse_module
>>> m = parse_hlo('''HloModule m
... mx { a = f32[] parameter(0)
...   b = f32[] parameter(1)
...   ROOT m = f32[] maximum(a, b) }
... add { a = f32[] parameter(0)
...   b = f32[] parameter(1)
...   ROOT s = f32[] add(a, b) }
... ENTRY e {
...   q = f32[2,16,8] parameter(0)
...   k = f32[2,16,8] parameter(1)
...   v = f32[2,16,8] parameter(2)
...   s = f32[2,16,16] dot(q, k), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={2}
...   ninf = f32[] constant(-inf)
...   m = f32[2,16] reduce(s, ninf), dimensions={2}, to_apply=mx
...   mb = f32[2,16,16] broadcast(m), dimensions={0,1}
...   x = f32[2,16,16] subtract(s, mb)
...   e = f32[2,16,16] exponential(x)
...   zero = f32[] constant(0)
...   l = f32[2,16] reduce(e, zero), dimensions={2}, to_apply=add
...   lb = f32[2,16,16] broadcast(l), dimensions={0,1}
...   p = f32[2,16,16] divide(e, lb)
...   ROOT o = f32[2,16,8] dot(p, v), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
... }''')
>>> result = fuse_module(m)
>>> [i.opcode for i in result.module.entry.instructions]
['parameter', 'parameter', 'parameter', 'fusion']
>>> print([d for d in result.decisions if d.kind == "attention"][0])  # doctest: +ELLIPSIS
e: fuse s -> o [attention]: one kernel: ... keys streamed in blocks, scores never written ...
"""
from __future__ import annotations

from fusion.opcodes import traits
from tiling.fusion_pass.attention_pattern import NotAttention, analyze_attention
from tiling.fusion_pass.decisions import (
    FusionDecision,
    Node,
    node_traffic,
    structural_tile_check,
)
from tiling.fusion_pass.dot_prologue import attention_recompute_problem, upstream_members
from tiling.fusion_pass.graph import FusionGraph
from tiling.fusion_pass.tiled_merge import dot_member, mergeable



def _pairs(graph: FusionGraph):
    """``(A, B, region)`` for dot nodes ``A`` reaching ``B`` with no dot node between them;
    ``region``: the nodes on the paths from ``A`` to ``B``, ends included."""
    comp = graph.comp
    succ = graph.successors()
    dots = [n for n, node in graph.nodes.items() if dot_member(comp, node) is not None]
    if len(dots) < 2:
        return
    after, before, ids, bit = _reach_sets(succ)
    dot_mask = sum(bit[n] for n in dots)
    for a in dots:
        for b in dots:
            if b == a or not after[a] & bit[b]:
                continue
            between = after[a] & before[b]
            if between & dot_mask:
                continue  # a dot chain: the adjacent pairs are judged instead
            yield a, b, (a, *_members_of(between, ids), b)


def _reach_sets(succ: dict[int, set[int]]
                ) -> tuple[dict[int, int], dict[int, int], list[int], dict[int, int]]:
    """Per node, the nodes it reaches and the nodes reaching it, as bit sets over ``ids``
    (the nodes in increasing id; ``bit``: each node's own bit): one pass each way in
    topological order, instead of a walk of the graph per pair of dots (cubic in a model's
    layers)."""
    ids = sorted(succ)
    preds: dict[int, list[int]] = {n: [] for n in ids}
    indegree = dict.fromkeys(ids, 0)
    for n in ids:
        for t in succ[n]:
            preds[t].append(n)
            indegree[t] += 1
    order = [n for n in ids if indegree[n] == 0]
    for n in order:  # grows while it is walked: Kahn's algorithm
        for t in succ[n]:
            indegree[t] -= 1
            if indegree[t] == 0:
                order.append(t)
    bit = {n: 1 << i for i, n in enumerate(ids)}
    after: dict[int, int] = {}
    for n in reversed(order):
        reach = 0
        for t in succ[n]:
            reach |= bit[t] | after[t]
        after[n] = reach
    before: dict[int, int] = {}
    for n in order:
        reach = 0
        for p in preds[n]:
            reach |= bit[p] | before[p]
        before[n] = reach
    return after, before, ids, bit


def _members_of(bits: int, ids: list[int]) -> list[int]:
    """The ids whose bits are set, in increasing id."""
    out = []
    while bits:
        low = bits & -bits
        out.append(ids[low.bit_length() - 1])
        bits ^= low
    return out


def _merged(graph: FusionGraph, region: tuple[int, ...]) -> tuple[Node, list[str]]:
    """The region as one node with the last node's outputs, and the values computed inside
    the region that something outside it (or the computation's result) still reads."""
    inside = set(region)
    members = graph.ordered(m for n in region for m in graph.nodes[n].members)
    readers = graph.readers()
    escaping = [o for n in region[:-1] for o in graph.nodes[n].outputs
                if o == graph.comp.root_name or any(r not in inside for r in readers.get(o, ()))]
    return Node(members, graph.nodes[region[-1]].outputs, True), escaping


def _judge(graph: FusionGraph, a: int, b: int, region: tuple[int, ...]
           ) -> tuple[FusionDecision, Node | None]:
    comp = graph.comp
    first, second = graph.nodes[a], graph.nodes[b]

    def decide(node: Node | None, reason: str, saved: int = 0):
        decision = FusionDecision(comp.name, first.root, (second.root,), node is not None,
                                  reason, saved, "attention")
        return decision, node

    for n in region:
        if not mergeable(comp, graph.nodes[n]):
            return decide(None, f"{graph.nodes[n].root} between the dots cannot be fused")
    node, escaping = _merged(graph, region)
    if escaping:
        return decide(None, f"{', '.join(escaping)} computed between the dots is also read "
                            "elsewhere: the template writes only the second dot's result")
    problem = graph.merge_limit_problem(node)
    if problem:
        return decide(None, problem)
    try:
        pattern = analyze_attention(graph.candidate(node), orient=True)
    except NotAttention as why:
        return decide(None, f"not attention: {why}")
    saved = sum(node_traffic(comp, graph.nodes[n]) for n in region) - node_traffic(comp, node)
    batch = "x".join(str(x) for x in pattern.batch) or "1"
    return decide(node, f"one kernel: batch {batch}, {pattern.queries} queries, "
                        f"{pattern.keys} keys streamed in blocks, scores never written "
                        f"({len(pattern.reduces)} reductions over the key dim {pattern.dot1} "
                        f"and {pattern.dot2} share); saves {saved} bytes", saved)


def split_prologues(graph: FusionGraph, node: Node) -> tuple[list[Node], list[FusionDecision]]:
    """The attention node ``node`` without the K/V prologues whose recomputation by every
    query block's program costs more time than a kernel of their own
    (``dot_prologue.attention_recompute_problem``), and those prologues as nodes of their own
    writing the operand the attention then reads; with the decisions saying why.  Members the
    attention part still reads (a table shared with Q's prologue) are duplicated.  When a part
    is not a kernel the pass can make, ``node`` stays whole (and the decision says why)."""
    comp = graph.comp
    attn, parts = node, []
    while (found := attention_recompute_problem(comp, attn.members, attn)) is not None:
        operand, why = found
        inside = set(attn.members)
        kept: set[str] = set()
        for out in attn.outputs:
            kept |= upstream_members(comp, out, inside - {operand})
        parts.append((Node(graph.ordered(upstream_members(comp, operand, inside)), (operand,),
                           True), why))
        attn = Node(graph.ordered(kept), attn.outputs, True)
    if not parts:
        return [node], []
    problem = _split_problem(graph, attn, [p for p, _ in parts])
    decisions = [FusionDecision(comp.name, p.root, (node.root,), problem is not None,
                                f"costs time: {why}" + (f"; kept fused: {problem}" if problem
                                                        else "; a kernel of its own"),
                                0, "attention") for p, why in parts]
    return ([node] if problem else [attn, *(p for p, _ in parts)]), decisions


def split_attention_prologues(graph: FusionGraph) -> list[FusionDecision]:
    """Run after the tiled merges, which grow an attention node's K/V prologue one piece at
    a time (each piece cheap to recompute alone): ``split_prologues`` of every attention node
    (two dots), the whole prologue judged at once."""
    log: list[FusionDecision] = []
    for nid, node in list(graph.nodes.items()):
        if sum(traits(graph.comp.instruction(m).opcode).contraction
               for m in node.members) != 2:
            continue
        nodes, decisions = split_prologues(graph, node)
        log.extend(decisions)
        if len(nodes) > 1:
            del graph.nodes[nid]
            for new in nodes:
                graph.add(new)
    return log


def _split_problem(graph: FusionGraph, attn: Node, prologues: list[Node]) -> str | None:
    """Why the split parts are not kernels the pass can make (None: they are)."""
    for part in (attn, *prologues):
        problem = graph.merge_limit_problem(part)
        if problem:
            return problem
    try:
        analyze_attention(graph.candidate(attn), orient=True)
    except NotAttention as why:
        return f"without the prologue it is not attention: {why}"
    for part in prologues:
        problem = structural_tile_check(graph.candidate(part), graph.module)
        if problem:
            return f"the prologue is not a kernel of its own: {problem}"
    return None


def attention_fusion(graph: FusionGraph) -> list[FusionDecision]:
    """Merge every recognized attention region of ``graph`` (one at a time, as merging changes
    the graph); returns the decisions, made and refused."""
    log: list[FusionDecision] = []
    refused: set[tuple] = set()
    while True:
        for a, b, region in _pairs(graph):
            key = tuple(graph.nodes[n] for n in region)
            if key in refused:
                continue
            decision, node = _judge(graph, a, b, region)
            log.append(decision)
            if node is None:
                refused.add(key)
                continue
            for n in region:
                del graph.nodes[n]
            graph.add(node)
            break
        else:
            return log


__all__ = ["attention_fusion", "split_attention_prologues"]
