"""The attention backward in at most three kernels: the row statistics, dQ, and dK with dV.

What ``fusion.autodiff.vjp`` derives from attention is a *score space*
(``tiling.fusion_pass.score_space``): score dots (``S = q k^T``, ``dP = dO v^T``), values
computed from them point by point and from per-row vectors, reductions of them over the keys
(the row statistics: the max, the sum, the softmax backward's row sums, in dependent stages),
and *output dots* contracting score-shaped values with a free operand, over the keys (``dQ``)
or over the queries (``dK``, ``dV``).  As JAX lowers it the score matrices are written and read
by several kernels; here the region from the score dots to the output dots becomes

* one ``rows`` kernel writing the reductions the others read (per query block, one loop over
  the keys per reduction, the scores recomputed);
* one ``query`` kernel writing the output dots that contract the keys, with their epilogues;
* one ``key`` kernel writing those that contract the queries (all of them: one loop computes
  every one), with their epilogues.

Grouped- and multi-query attention's backward is the same: the score dots' lhs free dims
before the queries are the query-head group (``score_space``), dK and dV contract it with the
queries, and the ``key`` kernel sums it per kv head.

A kind with nothing to write is left out; with no output dot contracting the queries, the
``query`` kernel computes the reductions itself and there is no ``rows`` kernel.  Cheap
prologues only the region reads (the cotangent's converts, the mask's iotas) are recomputed
inside each kernel that reads them.  The region is found by the dots' data flow, not by names:
an output dot is a dot one of whose operands is computed, through no other dot, from dots
shaped alike (the score dots).  A value of the region something else reads (the forward's
probabilities in a training step) is still written by the kernel that wrote it.  Anything
that does not fit (a kernel ``analyze_score_space`` refuses, kernels that would read each
other) leaves the graph as it was, and the decision (kind ``attention``) says why.

>>> from fusion.autodiff.vjp_module import vjp
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
>>> fused = fuse_module(vjp(m)).module
>>> sum(i.opcode == "fusion" for i in fused.entry.instructions)
3
"""
from __future__ import annotations

from fusion.ir.hlo_module import HloComputation
from fusion.ir.shape import ArrayShape
from fusion.opcodes import traits
from tiling.fusion_pass.decisions import FUSIBLE_OPCODES, FusionDecision, Node
from tiling.fusion_pass.graph import FusionGraph
from tiling.fusion_pass.layout_tail import rearranges
from tiling.fusion_pass.score_space import NotScoreSpace, analyze_score_space


def _dot_producers(comp: HloComputation, name: str, dots: set[str]) -> tuple[set[str], bool]:
    """The dots ``name`` is computed from through no other dot, and whether a reduction
    lies on those paths (a normalization: what makes them scores)."""
    found: set[str] = set()
    seen: set[str] = set()
    reduced = False
    stack = [name]
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        if current in dots:
            found.add(current)
        else:
            reduced |= comp.instruction(current).opcode == "reduce"
            stack.extend(comp.instruction(current).operands)
    return found, reduced


def _regions(comp: HloComputation) -> list[tuple[set[str], set[str]]]:
    """``(score dots, output dots)`` per connected region: an output dot has one operand
    computed through no other dot, and through a reduction, from dots shaped alike (the
    score dots); its other operand is free (a parameter, or computed from other dots).  An
    output dot some score dot of its region is computed from (the forward's ``P @ V`` in a
    training step, which the backward's ``dP`` depends on) is left out: the region's kernels
    would read each other."""
    dots = {i.name for i in comp.instructions if i.opcode == "dot"}
    candidates: dict[str, set[str]] = {}
    for name in sorted(dots):
        dot = comp.instruction(name)
        sides = [_dot_producers(comp, o, dots) for o in dot.operands]
        scored = [found for found, reduced in sides if found and reduced and _alike(comp, found)]
        if len(scored) == 1:
            candidates[name] = scored[0]
    groups = _grouped(candidates)
    feeding = {out for scores, outs in groups for out in outs
               if any(comp.computed_from(s, out) for s in scores)}
    groups = _grouped({o: s for o, s in candidates.items() if o not in feeding})
    return [g for g in groups if len(g[1]) >= 2]


def _grouped(candidates: dict[str, set[str]]) -> list[tuple[set[str], set[str]]]:
    groups: list[tuple[set[str], set[str]]] = []
    for name, found in candidates.items():
        scores, joined = set(found), {name}
        for group in [g for g in groups if g[0] & scores]:
            groups.remove(group)
            scores |= group[0]
            joined |= group[1]
        groups.append((scores, joined))
    return groups


def _alike(comp: HloComputation, names: set[str]) -> bool:
    shapes = {comp.instruction(n).shape.dims for n in names}
    return len(shapes) == 1 and len(next(iter(shapes))) >= 2


def _between(comp: HloComputation, scores: set[str], outs: set[str]) -> set[str]:
    """The instructions on paths from the score dots to the output dots through no other dot,
    ends included."""
    after = set(scores)
    for instr in comp.instructions:  # through no other dot
        if instr.opcode != "dot" and any(o in after for o in instr.operands):
            after.add(instr.name)
    before: set[str] = set()
    stack = list(outs)
    while stack:
        current = stack.pop()
        if current in before or current not in after | outs:
            continue
        before.add(current)
        stack.extend(comp.instruction(current).operands)
    return before | outs


def _users(comp: HloComputation) -> dict[str, list[str]]:
    users: dict[str, list[str]] = {i.name: [] for i in comp.instructions}
    for instr in comp.instructions:
        for o in instr.operands:
            users[o].append(instr.name)
    return users


def _cheap(comp: HloComputation, name: str) -> bool:
    instr = comp.instruction(name)
    return (instr.opcode in FUSIBLE_OPCODES and instr.opcode != "reduce"
            and isinstance(instr.shape, ArrayShape) and not traits(instr.opcode).given_value) \
        or instr.opcode == "constant"


def _epilogue_op(comp: HloComputation, name: str) -> bool:
    """An op the kernel applies to an output dot's tile before the store: elementwise, or
    one that only rearranges it (a transpose; a reshape merging the heads into one dim is
    stored through, as the chain's layout tail: ``_epilogues``)."""
    instr = comp.instruction(name)
    return _cheap(comp, name) and (traits(instr.opcode).elementwise or rearranges(instr))


def _prologue(comp: HloComputation, region: set[str], users) -> set[str]:
    """Cheap instructions that only the region (and each other) read: recomputed inside."""
    inside = set(region)
    for instr in reversed(comp.instructions):
        name = instr.name
        if name in inside or not _cheap(comp, name) or not users[name]:
            continue
        if all(u in inside for u in users[name]) or (
                not instr.operands and any(u in inside for u in users[name])):
            inside.add(name)  # a constant or iota is recomputed wherever it is read
    return inside - region


def _epilogues(comp: HloComputation, outs: set[str], users, root: str
               ) -> dict[str, tuple[str, set[str]]]:
    """Per output dot, the last value of the cheap chain only it feeds (itself if none: a
    transpose or convert the kernel applies before its store) and the chain's members."""
    ends = {}
    for dot in outs:
        chain = [dot]
        while chain[-1] != root and len(users[chain[-1]]) == 1 and \
                _epilogue_op(comp, users[chain[-1]][0]) and \
                all(_cheap(comp, o) or o == chain[-1]
                    for o in comp.instruction(users[chain[-1]][0]).operands):
            chain.append(users[chain[-1]][0])
        # A reshape is stored through only in the chain's rearranging top (a layout tail):
        # a value computed after it would be read at merged dims' indices.
        computing = [i for i, n in enumerate(chain) if i and not rearranges(comp.instruction(n))]
        last = computing[-1] if computing else 0
        for i, name in enumerate(chain[1:last + 1], 1):
            if traits(comp.instruction(name).opcode).reshape_like:
                chain = chain[:i]
                break
        ends[dot] = (chain[-1], set(chain))
    return ends


def _upstream(comp: HloComputation, outputs, allowed: set[str], stop: set[str]) -> set[str]:
    found: set[str] = set()
    stack = list(outputs)
    while stack:
        current = stack.pop()
        if current in found or current not in allowed:
            continue
        found.add(current)
        if current not in stop or current in outputs:
            stack.extend(comp.instruction(current).operands)
    return found


def _plan(graph: FusionGraph, scores: set[str], outs: set[str], external: set[str]):
    """The new nodes (rows, query, key kernels) and the members they replace, or why not;
    ``external``: values of the region the new kernels read rather than compute (a kernel
    kept for another reader writes them)."""
    comp = graph.comp
    users = _users(comp)
    region = _between(comp, scores, outs)
    if not any(comp.instruction(n).opcode == "reduce" for n in region):
        return None, "no reduction of the scores between the dots (not attention)"
    ends = _epilogues(comp, outs, users, comp.root_name)
    tails = {m for _, chain in ends.values() for m in chain}
    allowed = (region | tails | _prologue(comp, region | tails, users)) - external
    by_kind: dict[str, list[str]] = {"query": [], "key": []}
    for dot in sorted(outs, key=graph.index.__getitem__):
        by_kind[_contracts(comp, dot, region)].append(ends[dot][0])
    reduces = {n for n in region - external if comp.instruction(n).opcode == "reduce"}
    stop = reduces if by_kind["key"] else set()
    nodes: list[tuple[str, Node]] = []
    read: set[str] = set()
    for kind in ("query", "key"):
        if by_kind[kind]:
            members = _upstream(comp, by_kind[kind], allowed, stop)
            read |= {o for m in members for o in comp.instruction(m).operands} & reduces
            nodes.append((kind, Node(graph.ordered(members - (stop - set(by_kind[kind]))),
                                     tuple(by_kind[kind]), True)))
    if read:
        rows = tuple(sorted(read, key=graph.index.__getitem__))
        nodes.insert(0, ("rows", Node(graph.ordered(_upstream(comp, rows, allowed, set())),
                                      rows, True)))
    owned = set(graph.owner()) | {o for _, n in nodes for o in n.outputs}
    closed = []
    for kind, node in nodes:
        members = _closed(comp, set(node.members), owned)
        if members is None:
            return None, f"the {kind} kernel reads a value no kernel writes"
        allowed |= members
        closed.append((kind, Node(graph.ordered(members), node.outputs, True)))
    return (closed, allowed), None


def _closed(comp: HloComputation, members: set[str], owned: set[str]) -> set[str] | None:
    """``members`` with the cheap values they read that no kernel writes (computed inside
    another fusion) computed here too; None when one is not cheap."""
    stack = [o for m in members for o in comp.instruction(m).operands if o not in members]
    while stack:
        value = stack.pop()
        if value in members or value in owned:
            continue
        if not _cheap(comp, value):
            return None
        members.add(value)
        stack.extend(comp.instruction(value).operands)
    return members


def _contracts(comp: HloComputation, dot_name: str, region: set[str]) -> str:
    """``query`` when the output dot contracts the score dots' key dim (their last), else
    ``key``: read from its dimension numbers on the score-shaped side (the pass's guess; the
    kernel's analysis checks it by the indexing maps)."""
    dot = comp.instruction(dot_name)
    side = 0 if dot.operands[0] in region else 1
    shape = comp.instruction(dot.operands[side]).shape
    contracting = dot.attr(("lhs", "rhs")[side] + "_contracting_dims")[0]
    return "query" if contracting == shape.rank - 1 else "key"


def _replace(graph: FusionGraph, nodes: list[tuple[str, Node]], allowed: set[str]):
    """Swap the nodes touching ``allowed`` for ``nodes``, keeping those that still write a
    value something else reads (less what the new nodes write); why not (None: done), or
    the values new nodes would write that a kept node reads (nothing done: they are to be
    read, not written, by the new nodes)."""
    comp = graph.comp
    produced = {o for _, n in nodes for o in n.outputs}
    touching = {nid for nid, n in graph.nodes.items() if set(n.members) & allowed}
    needed = {comp.root_name} | {o for _, n in nodes for o in _reads(comp, n)}
    kept: dict[int, Node] = {}
    changed = True
    while changed:
        changed = False
        reads = set(needed)
        for nid, n in graph.nodes.items():
            if nid not in touching or nid in kept:
                reads |= _reads(comp, kept.get(nid, n))
        for nid in touching - set(kept):
            if any(o in reads and o not in produced for o in graph.nodes[nid].outputs):
                kept[nid] = _trimmed(graph, graph.nodes[nid], produced)
                changed = True
    # Only the row statistics can be read instead of written (the forward's kernels compute
    # them too); a kept kernel reading dQ, dK or dV is their consumer (the sum over a
    # repeated kv head's query heads), ordered after them (a cycle is caught below).
    statistics = {o for kind, n in nodes if kind == "rows" for o in n.outputs}
    conflicts = {o for n in kept.values() for o in _reads(comp, n) if o in statistics}
    if conflicts:
        return conflicts
    before = dict(graph.nodes)
    for nid in touching:
        graph.nodes.pop(nid)
        if nid in kept and kept[nid].outputs:
            graph.add(kept[nid])
    for _, node in nodes:
        graph.add(node)
    if len(graph.order()) != len(graph.nodes):
        graph.nodes.clear()
        graph.nodes.update(before)
        return "the kernels it keeps and the new ones would read each other in a cycle"
    return None


def _trimmed(graph: FusionGraph, node: Node, produced: set[str]) -> Node:
    """``node`` kept beside the new kernels: its outputs they do not write, from the members
    those need, less what the new kernels write (read from them instead: the sum of a repeated
    kv head's dV reads the key kernel's transposed dV rather than transposing dV again, which
    would keep dV's dot, and the probabilities it reads, in memory)."""
    outputs = tuple(o for o in node.outputs if o not in produced)
    members = _upstream(graph.comp, outputs, set(node.members) - produced, set())
    return Node(graph.ordered(members), outputs, node.fusible)


def _reads(comp: HloComputation, node: Node) -> set[str]:
    inside = set(node.members)
    return {o for m in node.members for o in comp.instruction(m).operands if o not in inside}


def attention_backward_fusion(graph: FusionGraph) -> list[FusionDecision]:
    """Make each score-space region of ``graph`` at most three kernels (see the module
    docstring); returns the decisions, made and refused."""
    comp = graph.comp
    log: list[FusionDecision] = []
    for scores, outs in _regions(comp):
        first, names = min(scores, key=graph.index.__getitem__), tuple(sorted(outs))

        def decide(fused: bool, reason: str):
            log.append(FusionDecision(comp.name, first, names, fused, reason, 0, "attention"))

        if any(sum(comp.instruction(m).opcode == "dot" for m in n.members) > 1
               for n in graph.nodes.values() if set(n.members) & (scores | outs)):
            continue  # already an attention kernel
        made, problem = _fuse_region(graph, scores, outs)
        if problem is not None:
            decide(False, f"attention backward kept apart: {problem}")
            continue
        kinds = ", ".join(f"{k} ({', '.join(n.outputs)})" for k, n in made)
        decide(True, f"attention backward in {len(made)} kernels: {kinds}; score matrices "
                     "never written")
    return log


def _fuse_region(graph: FusionGraph, scores: set[str], outs: set[str]):
    """``(the new nodes, None)`` once they replace the region's, or ``(None, why not)``.
    Values the new kernels would write that a kept kernel reads (the forward's row max and
    sum in a training step, which its probabilities read) are read instead, and the plan
    made again."""
    external: set[str] = set()
    for _ in range(4):
        plan, why = _plan(graph, scores, outs, external)
        if plan is None:
            return None, why
        nodes, allowed = plan
        problem = _check(graph, nodes)
        if problem is not None:
            return None, problem
        problem = _replace(graph, nodes, allowed)
        if not isinstance(problem, set):
            return (None, problem) if problem else (nodes, None)
        external |= problem
    return None, "the kernels it keeps read what the new ones write"


def _check(graph: FusionGraph, nodes: list[tuple[str, Node]]) -> str | None:
    for kind, node in nodes:
        problem = graph.check_limits(node)
        if problem:
            return f"the {kind} kernel: {problem}"
        try:
            space = analyze_score_space(graph.candidate(node))
        except NotScoreSpace as why:
            return f"the {kind} kernel is not a score-space kernel: {why}"
        if space.kind != kind:
            return f"the {kind} kernel analyses as a {space.kind} kernel"
    return None


__all__ = ["attention_backward_fusion"]
