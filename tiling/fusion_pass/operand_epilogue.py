"""Elementwise work on a dot's result moves out of the dot or attention kernel that reads it
and into the dot kernel that computes it, as that dot's epilogue.

Producer-consumer fusion fuses an elementwise op into its consumers before any dot takes an
epilogue, so a transformer's QKV bias (``x @ w_qkv + b``, then slices into Q, K and V) lands
in the attention kernel as the prologue of its operands.  Same bytes either way, but not the
same time: a prologue runs on every operand tile the consumer loads (each K/V tile once per
query block, an lhs tile once per program along N), and a tile with arithmetic on it cannot
go from the asynchronous copy straight to the tensor cores; it goes through registers and
back to shared memory on every step.  As the producing dot's epilogue the same ops run once
per element, on the accumulator, and the consumer's operands are loaded as they are.

So, after the tiled merges: for each dot or attention node ``N`` and each value ``V`` it
reads that is the only output of a dot node ``D`` and read by ``N`` alone, the chain of
elementwise ops ``N`` computes from ``V`` (each the single reader of the one before, its other
operands computed from outside values without another dot) moves into ``D``, which then
writes the chain's last value; ``N`` reads that value instead (a member both still need, a
broadcast bias say, is duplicated).  It moves when ``D`` stays a dot kernel (one dot, an
elementwise epilogue), ``N`` stays the kernel it was (the attention template still takes
it), and the two kernels move no more bytes than before (a widening convert stays where it
is).  Each move is logged (kind ``tiled``).

>>> from fusion.text.parser import parse_hlo
>>> from tiling.fusion_pass.priority_fusion import fuse_module
>>> m = parse_hlo('''HloModule m
... ENTRY e {
...   x = bf16[256,64] parameter(0)
...   w = bf16[64,128] parameter(1)
...   b = bf16[128] parameter(2)
...   v = bf16[128,32] parameter(3)
...   d = bf16[256,128] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
...   bb = bf16[256,128] broadcast(b), dimensions={1}
...   a = bf16[256,128] add(d, bb)
...   ROOT o = bf16[256,32] dot(a, v), lhs_contracting_dims={1}, rhs_contracting_dims={0}
... }''')
>>> result = fuse_module(m)
>>> print([str(d) for d in result.decisions if "epilogue" in d.reason][0])  # doctest: +ELLIPSIS
e: fuse d -> a [tiled]: the epilogue of d, not a prologue in o's dot kernel: ...
>>> [i.opcode for i in result.module.entry.instructions]
['parameter', 'parameter', 'parameter', 'parameter', 'fusion', 'fusion']
"""
from __future__ import annotations

from fusion.ir.hlo_module import HloComputation
from fusion.opcodes import traits
from tiling.fusion_pass.attention_pattern import NotAttention, analyze_attention
from tiling.fusion_pass.decisions import FusionDecision, Node
from tiling.fusion_pass.dot_prologue import upstream_members
from tiling.fusion_pass.graph import FusionGraph
from tiling.fusion_pass.tiled_merge import dot_member


def epilogues_before_operands(graph: FusionGraph) -> list[FusionDecision]:
    """Move each dot's result chain from the dot or attention node reading it into the dot
    node (module docstring); returns the moves made."""
    log: list[FusionDecision] = []
    moved = True
    while moved:  # a move changes two nodes: look again from the start
        moved = False
        readers, owner = graph.readers(), graph.owner()
        for nid, node in list(graph.nodes.items()):
            if _contractions(graph.comp, node) not in (1, 2):
                continue
            for value in graph.input_set(node):
                did = owner.get(value)
                if did is None or readers.get(value) != [nid]:
                    continue
                found = _move(graph, graph.nodes[did], node, value)
                if found is None:
                    continue
                producer, consumer, decision = found
                del graph.nodes[did], graph.nodes[nid]
                graph.add(producer)
                graph.add(consumer)
                log.append(decision)
                moved = True
                break
            if moved:
                break
    return log


def _contractions(comp: HloComputation, node: Node) -> int:
    return sum(traits(comp.instruction(m).opcode).contraction for m in node.members)


def _move(graph: FusionGraph, dot_node: Node, reader: Node, value: str
          ) -> tuple[Node, Node, FusionDecision] | None:
    """``(dot node with the chain, reader without it, decision)`` for the chain ``reader``
    computes from ``value``, the only output of ``dot_node``; None when there is none or the
    move is not made."""
    comp = graph.comp
    if dot_node.outputs != (value,) or value == comp.root_name or \
            dot_member(comp, dot_node) is None:
        return None
    chain, sides = _chain(comp, reader, value)
    if not chain:
        return None
    inside = set(reader.members) - set(chain)
    kept: set[str] = set()
    for out in reader.outputs:
        kept |= upstream_members(comp, out, inside)
    top = chain[-1]
    producer = Node(graph.ordered(dot_node.members + tuple(chain) + tuple(sides)), (top,), True)
    consumer = Node(graph.ordered(kept), reader.outputs, True)
    if _problem(graph, producer, consumer):
        return None
    before = graph.traffic(dot_node) + graph.traffic(reader)
    after = graph.traffic(producer) + graph.traffic(consumer)
    if after > before:
        return None
    kind = "attention" if _contractions(comp, reader) == 2 else "dot"
    reason = (f"the epilogue of {value}, not a prologue in {reader.root}'s {kind} kernel: "
              f"{len(chain)} elementwise "
              f"op{'s' if len(chain) > 1 else ''} run once per element rather than on every "
              f"tile loaded, and the operand reaches the tensor cores as loaded; "
              f"{before - after} bytes saved")
    return producer, consumer, FusionDecision(comp.name, value, (top,), True, reason,
                                              before - after, "tiled")


def _chain(comp: HloComputation, reader: Node, value: str) -> tuple[list[str], list[str]]:
    """The elementwise ops of ``reader`` computed from ``value`` one after another (each the
    only reader of the one before, none an output of ``reader``), and the members their
    other operands are computed from (no dot, no reduction, nothing from the chain)."""
    inside = set(reader.members)
    chain: list[str] = []
    sides: list[str] = []
    current = value
    while True:
        users = [u for u in comp.users.get(current, ()) if u in inside]
        if len(users) != 1 or users[0] in reader.outputs:
            return chain, sides
        instr = comp.instruction(users[0])
        t = traits(instr.opcode)
        if not t.elementwise or t.data_movement or \
                instr.shape.dims != comp.instruction(current).shape.dims:
            return chain, sides
        extra: set[str] = set()
        for op in instr.operands:
            if op != current:
                extra |= upstream_members(comp, op, inside)
        if any(_computes(comp, m) for m in extra) or extra & set(chain):
            return chain, sides
        chain.append(users[0])
        sides.extend(m for m in extra if m not in sides)
        current = users[0]


def _computes(comp: HloComputation, name: str) -> bool:
    """Whether a side operand's member does a dot's or a reduction's work (it would then be
    computed by the dot kernel instead)."""
    opcode = comp.instruction(name).opcode
    return traits(opcode).contraction or opcode == "reduce"


def _problem(graph: FusionGraph, producer: Node, consumer: Node) -> str | None:
    """Why the two new kernels are not ones the pass makes (None: they are)."""
    comp = graph.comp
    for node in (producer, consumer):
        problem = graph.merge_limit_problem(node)
        if problem:
            return problem
    if dot_member(comp, producer) is None:
        return "the dot kernel would not take the chain as its epilogue"
    if _contractions(comp, consumer) == 1:
        return None if dot_member(comp, consumer) is not None else "not a dot kernel"
    try:
        analyze_attention(graph.candidate(consumer), orient=True)
    except NotAttention as why:
        return f"not attention without the chain: {why}"
    return None


__all__ = ["epilogues_before_operands"]
