"""Build fused computations and the rewritten caller from the nodes the fusion pass chose.

Names follow XLA: fusion instructions ``fusion``, ``fusion.1``, ...; fused computations
``fused_computation``, ``fused_computation.1``, ...; their parameters ``param_0``,
``param_1``, ... (with XLA's ``.N`` suffix when the name is taken, since instruction names
are unique in the whole module).  Fused instructions keep their names; a second copy of a
duplicated producer gets a fresh ``name.N``.  A node with several outputs gets a root
``tuple`` and its users read it through ``get-tuple-element``.

>>> names = NameAllocator({"fusion", "fusion.1"})
>>> names.fresh("fusion"), names.fresh("param_0"), names.fresh("param_0")
('fusion.2', 'param_0', 'param_0.1')
"""
from __future__ import annotations

from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from fusion.ir.hlo_module import HloComputation, HloInstruction
from fusion.ir.shape import TupleShape
from tiling.fusion_pass.attention_orientation import oriented
from tiling.fusion_pass.attention_pattern import NotAttention, analyze_attention
from tiling.fusion_pass.decisions import Node, external_inputs, reduce_members
from tiling.fusion_pass.decisions import is_kernel


@dataclass
class NameAllocator:
    """Module-unique names: ``taken`` holds every name in use (instructions, computations).

    ``reserved`` is a set of names in use that the allocator only reads (shared, not copied:
    the pass builds a candidate per merge it weighs, each with its own allocator)."""

    taken: set[str] = field(default_factory=set)
    reserved: AbstractSet[str] = frozenset()
    # Per stem, the N of the last ``stem.N`` handed out: names are never freed, so the
    # smallest free N is above it (a module of n fusions names them in O(n), not O(n^2)).
    _last: dict[str, int] = field(default_factory=dict, repr=False)

    def _used(self, name: str) -> bool:
        return name in self.taken or name in self.reserved

    def fresh(self, base: str) -> str:
        """``base`` if free, else ``base.N`` for the smallest free N."""
        if not self._used(base):
            self.taken.add(base)
            return base
        stem = base.rsplit(".", 1)[0] if base.rsplit(".", 1)[-1].isdigit() else base
        n = self._last.get(stem, 0) + 1
        while self._used(f"{stem}.{n}"):
            n += 1
        self._last[stem] = n
        self.taken.add(f"{stem}.{n}")
        return f"{stem}.{n}"


@dataclass
class Claims:
    """Original names already emitted: a second copy of one must be renamed."""

    names: NameAllocator
    claimed: set[str] = field(default_factory=set)

    def claim(self, original: str) -> str:
        if original not in self.claimed:
            self.claimed.add(original)
            return original
        return self.names.fresh(original)


def fusion_kind(comp: HloComputation, node: Node) -> str:
    """``kInput`` when a reduction is the hero, else ``kLoop`` (XLA's kinds)."""
    return "kInput" if reduce_members(comp, node.members) else "kLoop"


def fused_computation(comp: HloComputation, node: Node, name: str,
                      names: NameAllocator, claims: Claims | None = None) -> HloComputation:
    """The fused computation of ``node``: parameters for its external inputs (in order of
    first use), copies of its members, a tuple root when it has several outputs."""
    claims = claims or Claims(names)
    inputs = external_inputs(comp, node.members)
    renamed: dict[str, str] = {}
    out: list[HloInstruction] = []
    for number, value in enumerate(inputs):
        pname = names.fresh(f"param_{number}")
        renamed[value] = pname
        shape = comp.instruction(value).shape
        out.append(HloInstruction(pname, "parameter", shape, (),
                                  (("parameter_number", number),)))
    for member in node.members:
        instr = comp.instruction(member)
        new_name = claims.claim(member)
        renamed[member] = new_name
        out.append(instr.replace(name=new_name,
                                 operands=tuple(renamed[o] for o in instr.operands)))
    if len(node.outputs) == 1:
        root = renamed[node.root]
    else:
        root = names.fresh("tuple")
        shape = TupleShape(tuple(comp.instruction(o).shape for o in node.outputs))
        out.append(HloInstruction(root, "tuple", shape,
                                  tuple(renamed[o] for o in node.outputs)))
    return _oriented(HloComputation(name, tuple(out), root), names)


def _oriented(body: HloComputation, names: NameAllocator) -> HloComputation:
    """An attention fusion as the template reads it (``attention_orientation.oriented``: the
    second dot reading the probabilities as lhs, each dot's query dim last); any other
    computation as it is."""
    if sum(i.opcode == "dot" for i in body.instructions) != 2:
        return body
    swapped = oriented(body, names.fresh)
    if swapped is body:
        return body
    try:
        analyze_attention(swapped)
    except NotAttention:
        return body
    return swapped


def rebuild_computation(comp: HloComputation, nodes: list[Node],
                        names: NameAllocator) -> tuple[HloComputation, list[HloComputation]]:
    """``comp`` with every fusible node that is a kernel replaced by a fusion instruction.

    ``nodes`` must be in an order where producers come before consumers.  Returns the new
    computation and the fused computations it calls.
    """
    claims = Claims(names)
    wrapped = [n.fusible and is_kernel(comp, n) for n in nodes]
    for node, wrap in zip(nodes, wrapped):
        if not wrap:
            for m in node.members:
                claims.claim(m)
    value_of: dict[str, str] = {}
    out: list[HloInstruction] = []
    fused: list[HloComputation] = []
    for node, wrap in zip(nodes, wrapped):
        if not wrap:
            for m in node.members:
                if value_of.get(m) == m:
                    continue  # a trivial producer copied into two trivial nodes
                instr = comp.instruction(m)
                out.append(instr.replace(operands=tuple(value_of.get(o, o)
                                                        for o in instr.operands)))
                value_of[m] = m
            continue
        body = fused_computation(comp, node, names.fresh("fused_computation"), names, claims)
        fused.append(body)
        root = body.root
        fusion_name = names.fresh("fusion")
        operands = tuple(value_of[v] for v in external_inputs(comp, node.members))
        out.append(HloInstruction(
            fusion_name, "fusion", root.shape, operands,
            (("kind", fusion_kind(comp, node)), ("calls", body.name))))
        if len(node.outputs) == 1:
            value_of[node.root] = fusion_name
            continue
        for index, value in enumerate(node.outputs):
            gte = names.fresh("get-tuple-element")
            out.append(HloInstruction(gte, "get-tuple-element", comp.instruction(value).shape,
                                      (fusion_name,), (("index", index),)))
            value_of[value] = gte
    new = HloComputation(comp.name, tuple(out), value_of[comp.root_name], comp.is_entry,
                         comp.location)
    return new, fused
