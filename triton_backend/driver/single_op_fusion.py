"""Wrap a lone op of a host-executed computation as a one-op fusion, as XLA's ``wrapped_*`` ones.

The op moves, keeping its name and source location, into a new fused computation whose
parameters stand for its distinct operands (an operand used twice, ``multiply(x, x)``, is one
parameter); in its place the calling computation gets a ``fusion`` instruction named
``wrapped_<op>`` (instruction names are unique in a module) with the op's shape and location,
and every use of the op is renamed to it.  Called computations (``to_apply`` of a reduce, a
sort's comparator) stay shared in the module.

>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... ENTRY e {
...   x = f32[4] parameter(0)
...   ROOT y = f32[4] multiply(x, x)
... }''')
>>> w = wrap_lone_ops(m, {"e": ("y",)})
>>> fused = w.entry.root
>>> fused.name, fused.opcode, fused.operands, fused.attr("calls")
('wrapped_y', 'fusion', ('x',), 'wrapped_y_computation')
>>> [(i.name, i.opcode, i.operands) for i in w.computation("wrapped_y_computation")]
[('param_0', 'parameter', ()), ('y', 'multiply', ('param_0', 'param_0'))]
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule


def wrapped_computation(comp: HloComputation, instr: HloInstruction, name: str,
                        taken: set[str] | None = None) -> HloComputation:
    """The fused computation holding ``instr`` alone, parameters for its distinct operands.

    Parameter names avoid ``taken`` (instruction names are unique in the whole module) and
    are added to it.
    """
    operands = tuple(dict.fromkeys(instr.operands))
    taken = taken if taken is not None else set()
    taken.add(instr.name)
    params: list[HloInstruction] = []
    renamed: dict[str, str] = {}
    for number, operand in enumerate(operands):
        pname = _fresh(f"param_{number}", taken)
        taken.add(pname)
        renamed[operand] = pname
        params.append(HloInstruction(pname, "parameter", comp.instruction(operand).shape, (),
                                     (("parameter_number", number),)))
    body = instr.replace(operands=tuple(renamed[o] for o in instr.operands))
    return HloComputation(name, (*params, body), instr.name)


def fusion_call(instr: HloInstruction, name: str, computation_name: str) -> HloInstruction:
    """The ``fusion`` instruction ``name`` that replaces ``instr`` in its computation."""
    return HloInstruction(
        name, "fusion", instr.shape, tuple(dict.fromkeys(instr.operands)),
        (("kind", "kLoop"), ("calls", computation_name)), location=instr.location)


def wrap_lone_ops(module: HloModule, lone: Mapping[str, Sequence[str]]) -> HloModule:
    """``module`` with every op named in ``lone`` (computation name -> op names) wrapped.

    New computations are named ``wrapped_<op>_computation`` (made unique in the module) and
    placed before the computations that call them, as XLA prints callees first.
    """
    taken = {c.name for c in module.computations}
    names = {i.name for c in module.computations for i in c.instructions}
    new_comps: list[HloComputation] = []
    out: list[HloComputation] = []
    for comp in module.computations:
        chosen = set(lone.get(comp.name, ()))
        if not chosen:
            out.append(comp)
            continue
        renamed: dict[str, str] = {}
        for instr in comp.instructions:
            if instr.name in chosen:
                renamed[instr.name] = _fresh(f"wrapped_{instr.name}", names)
                names.add(renamed[instr.name])
        rewritten = []
        for instr in comp.instructions:
            if instr.name in chosen:
                cname = _fresh(f"wrapped_{instr.name}_computation", taken)
                taken.add(cname)
                new_comps.append(wrapped_computation(comp, instr, cname, names))
                instr = fusion_call(instr, renamed[instr.name], cname)
            rewritten.append(instr.replace(operands=tuple(renamed.get(o, o) for o in instr.operands)))
        out.extend(new_comps)
        new_comps = []
        out.append(HloComputation(comp.name, tuple(rewritten),
                                  renamed.get(comp.root_name, comp.root_name), comp.is_entry,
                                  comp.location))
    return HloModule(module.name, tuple(out), module.entry_name, module.attributes,
                     module.stack_frames)


def _fresh(base: str, taken: set[str]) -> str:
    name, n = base, 1
    while name in taken:
        name = f"{base}.{n}"
        n += 1
    return name


__all__ = ["fusion_call", "wrap_lone_ops", "wrapped_computation"]
