"""Split a contraction fusion the templates refuse into two kernels, at its dot.

A dot fusion's template writes its outputs at the dot's output indices, so a fusion that
reads the dot through a data-movement op (a broadcast, reshape or transpose of the dot as
its root, or anything after one) or through an op with a loop of its own (a reduce of the
dot, a softmax over its rows) is refused by the template although XLA runs it.  XLA's
own emitters would run the dot into a buffer and the rest as another kernel; this module
does the same to the HLO: the *head* (the dot and the elementwise epilogue shaped like it)
stays a contraction fusion, and the *tail* (whatever reads the head through anything else)
becomes a second fusion reading the head's result.  Values that do not depend on the dot
(parameters' broadcasts, constants) are copied into whichever part reads them.

``split_at_contraction`` returns None when the fusion has no single contraction or nothing
after it to split off: the caller then keeps the template's refusal.

>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... fused {
...   p0 = f32[4,2] parameter(0)
...   p1 = f32[2,3] parameter(1)
...   d = f32[4,3] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
...   n = f32[4,3] negate(d)
...   ROOT b = f32[2,4,3] broadcast(n), dimensions={1,2}
... }
... ENTRY e {
...   a0 = f32[4,2] parameter(0)
...   a1 = f32[2,3] parameter(1)
...   ROOT f = f32[2,4,3] fusion(a0, a1), kind=kOutput, calls=fused
... }''')
>>> split = split_at_contraction(m, m.entry, m.entry.root)
>>> [(i.name, i.attr("kind")) for i in split.module.entry.instructions if i.opcode == "fusion"]
[('f.dot', 'kOutput'), ('f', 'kLoop')]
>>> split.head_root, [i.opcode for i in split.module.computation("fused_computation.1")]
('n', ['parameter', 'broadcast'])
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.opcodes import traits
from tiling.fusion_pass.builder import Claims, NameAllocator, fused_computation
from tiling.fusion_pass.decisions import Node, external_inputs


@dataclass(frozen=True)
class Split:
    """The module with one fusion split in two: ``head`` (the contraction fusion, named
    ``<fusion>.dot``) computes ``head_root``; ``tail`` keeps the fusion's name and value."""

    module: HloModule
    head: HloInstruction
    tail: HloInstruction
    contraction: str
    head_root: str


def split_at_contraction(module: HloModule, comp: HloComputation,
                         fusion: HloInstruction) -> Split | None:
    """``fusion`` (an instruction of ``comp``) as a contraction fusion and a second fusion
    reading its result; None when it has no single contraction with a tail after it."""
    fused = module.computation(fusion.attr("calls"))
    heroes = [i.name for i in fused if traits(i.opcode).contraction]
    if len(heroes) != 1:
        return None
    dependent = _dependents(fused, heroes[0])
    head = _head(fused, heroes[0], dependent)
    tail = [n for n in dependent if n not in head]
    if not tail:
        return None
    cuts = {o for t in tail for o in fused.instruction(t).operands if o in head}
    if len(cuts) > 1:
        # The tail reads several head values: cut at the dot alone, so that the head has
        # one output (the kind of output a contraction template writes).
        head, cuts = {heroes[0]}, {heroes[0]}
    (cut,) = cuts
    return _rebuilt(module, comp, fusion, fused, heroes[0], cut)


def _dependents(fused: HloComputation, hero: str) -> list[str]:
    """The instructions whose value depends on ``hero`` (itself included), in order."""
    reached = {hero}
    for instr in fused:
        if any(o in reached for o in instr.operands):
            reached.add(instr.name)
    return [i.name for i in fused if i.name in reached]


def _head(fused: HloComputation, hero: str, dependent: list[str]) -> set[str]:
    """``hero`` and the elementwise ops shaped like it that read only head values (or
    values independent of it): the epilogue a contraction template writes in place."""
    dims = fused.instruction(hero).array_shape.dims
    head, depends = {hero}, set(dependent)
    for name in dependent[1:]:
        instr = fused.instruction(name)
        shaped = getattr(instr.shape, "dims", None) == dims
        if (traits(instr.opcode).elementwise and shaped
                and all(o in head or o not in depends for o in instr.operands)):
            head.add(name)
    return head


def _members(fused: HloComputation, root: str, stop: str | None) -> tuple[str, ...]:
    """``root`` and what it reads in ``fused``, in order, but parameters and what only
    ``stop`` (read as a parameter of the new fusion) reaches."""
    params = {p.name for p in fused.parameters}
    wanted = {root}
    for instr in reversed(fused.instructions):
        if instr.name in wanted and instr.name != stop:
            wanted.update(instr.operands)
    return tuple(i.name for i in fused
                 if i.name in wanted and i.name not in params and i.name != stop)


def _rebuilt(module: HloModule, comp: HloComputation, fusion: HloInstruction,
             fused: HloComputation, hero: str, cut: str) -> Split:
    """The module with ``fusion`` replaced by a head fusion computing ``cut`` and a tail
    fusion computing the fused root from it."""
    # ``fused`` goes away, so its instruction names are free for the copies (they keep their
    # names and source locations); a value both parts read is renamed in the second.
    others = {i.name for c in module.computations if c.name != fused.name for i in c}
    names = NameAllocator(others | {c.name for c in module.computations})
    claims = Claims(names)
    head_members = _members(fused, cut, None)
    head_comp = fused_computation(fused, Node(head_members, (cut,), True),
                                  names.fresh("fused_computation"), names, claims)
    tail_members = _members(fused, fused.root_name, cut)
    tail_comp = fused_computation(fused, Node(tail_members, (fused.root_name,), True),
                                  names.fresh("fused_computation"), names, claims)
    head_name = names.fresh(f"{fusion.name}.dot")
    head_instr = HloInstruction(
        head_name, "fusion", fused.instruction(cut).shape,
        _operands(fusion, fused, head_members, {}),
        tuple((k, head_comp.name if k == "calls" else v) for k, v in fusion.attributes),
        fusion.location)
    reduces = any(traits(fused.instruction(m).opcode).reduction for m in tail_members)
    tail_instr = HloInstruction(
        fusion.name, "fusion", fusion.shape,
        _operands(fusion, fused, tail_members, {cut: head_name}),
        (("kind", "kInput" if reduces else "kLoop"), ("calls", tail_comp.name)),
        fusion.location)
    new_comp = HloComputation(
        comp.name, tuple(j for i in comp for j in ((head_instr, tail_instr)
                                                   if i.name == fusion.name else (i,))),
        comp.root_name, comp.is_entry, comp.location)
    still_called = any(fused.name in i.called_computations()
                       for c in module.computations for i in c if i is not fusion)
    computations = [new_comp if c.name == comp.name else c for c in module.computations
                    if c.name != fused.name or still_called]
    at = computations.index(new_comp)
    computations[at:at] = [head_comp, tail_comp]
    return Split(replace(module, computations=tuple(computations)), head_instr, tail_instr,
                 hero, cut)


def _operands(fusion: HloInstruction, fused: HloComputation, members: tuple[str, ...],
              given: dict[str, str]) -> tuple[str, ...]:
    """The caller's values for the new fusion's parameters (``fused_computation`` numbers
    them in the order of ``external_inputs``): the fusion's operands, or ``given``'s."""
    number = {p.name: p.attr("parameter_number") for p in fused.parameters}
    return tuple(given[v] if v in given else fusion.operands[number[v]]
                 for v in external_inputs(fused, members))
