"""Inline fusions (and calls) nested inside reducers and fused computations.

XLA's test files hold reduces whose ``to_apply`` computation itself calls a ``fusion`` (a
fused ``add``, say), and XLA:GPU's generic Triton emitter writes a GEMM fusion whose operands
are ``fusion``s of their own (``__triton_nested_gemm_fusion``: the tiling of each operand).
XLA runs them; a Triton kernel inlines its reducer into the kernel as scalar code and emits a
fused computation as one kernel, which has no notion of launching a fusion.  Inlining the
called computation (its instructions in the fusion's place, renamed apart) gives the same
value, op for op, so the reference evaluator and every emitter see plain ops.  Computations
left uncalled afterwards are dropped; a module without such nesting is returned as is.

>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... fused_add {
...   a = f32[] parameter(0)
...   b = f32[] parameter(1)
...   ROOT s = f32[] add(a, b)
... }
... add {
...   x = f32[] parameter(0)
...   y = f32[] parameter(1)
...   ROOT f = f32[] fusion(x, y), kind=kLoop, calls=fused_add
... }
... ENTRY e {
...   p = f32[4] parameter(0)
...   z = f32[] constant(0)
...   ROOT r = f32[] reduce(p, z), dimensions={0}, to_apply=add
... }''')
>>> out = inline_nested_fusions(m)
>>> [c.name for c in out.computations], [i.opcode for i in out.computation("add")]
(['add', 'e'], ['parameter', 'parameter', 'add'])
>>> inline_nested_fusions(out) is out
True
"""
from __future__ import annotations

from dataclasses import replace

from fusion.ir.call_graph import reachable_computations
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.opcodes import traits


def inline_nested_fusions(module: HloModule) -> HloModule:
    """``module`` with every fusion or call inside a reducer (the ``to_apply`` of a reduce,
    reduce-window or scatter) or inside a fused computation replaced by the instructions of
    the computation it calls."""
    hosts = {i.attr("to_apply") for c in module.computations for i in c
             if traits(i.opcode).kernel_reducer and i.has_attr("to_apply")}
    hosts |= {i.attr("calls") for c in module.computations for i in c
              if i.opcode == "fusion" and i.has_attr("calls")}
    if not any(traits(i.opcode).inlinable for c in module.computations
               if c.name in hosts for i in c):
        return module
    taken = {i.name for c in module.computations for i in c}
    current = module
    while True:  # a fusion's body may call another fusion: inline until none is left
        comps = tuple(_inlined(c, current, taken) if c.name in hosts else c
                      for c in current.computations)
        if comps == current.computations:
            break
        current = replace(current, computations=comps)
    reachable = set(reachable_computations(current, current.entry_name))
    return replace(current, computations=tuple(c for c in current.computations
                                               if c.name in reachable))


def _inlined(comp: HloComputation, module: HloModule, taken: set[str]) -> HloComputation:
    """``comp`` with each inlinable instruction replaced by its callee's instructions; the
    callee's root takes the instruction's name, so users and the root stay valid."""
    out: list[HloInstruction] = []
    for instr in comp:
        if not traits(instr.opcode).inlinable:
            out.append(instr)
            continue
        (callee_name,) = instr.called_computations()
        callee = module.computation(callee_name)
        renamed = {p.name: instr.operands[p.attr("parameter_number")]
                   for p in callee.parameters}
        for inner in callee:
            if inner.name in renamed:
                continue
            name = instr.name if inner.name == callee.root_name else _fresh(inner.name, taken)
            renamed[inner.name] = name
            out.append(inner.replace(name=name, operands=tuple(renamed[o]
                                                               for o in inner.operands)))
        if renamed[callee.root_name] != instr.name:
            # The callee's root is one of its parameters: the instruction is that operand.
            out.append(HloInstruction(instr.name, "copy", instr.shape,
                                      (renamed[callee.root_name],)))
    return replace(comp, instructions=tuple(out))


def _fresh(name: str, taken: set[str]) -> str:
    """``name.N`` for the smallest N not yet taken in the module (then taken)."""
    n = 1
    while f"{name}.{n}" in taken:
        n += 1
    taken.add(f"{name}.{n}")
    return f"{name}.{n}"


__all__ = ["inline_nested_fusions"]
