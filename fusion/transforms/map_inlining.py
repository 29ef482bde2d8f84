"""Inline ``map``: its ``to_apply`` computation's scalar ops applied element-wise, as array ops.

``map(x, y), to_apply=f`` computes ``f`` at every element.  XLA's front ends rarely emit it, but
XLA's own CPU pipeline does: a long ``cumsum`` becomes a tree of scans whose partial sums are
combined by ``map(column_scan, prefix), to_apply=<the reducer>``, inside a fusion.  No kernel
emits a call per element; when ``f`` is scalar element-wise ops on its parameters and
constants, the same value is those ops on whole arrays: each parameter becomes the matching
operand, each constant a broadcast of it, each op the op on the map's shape (its element type
the op's own, its layout the map's).  Maps whose ``to_apply`` holds anything else are left as
they are (``op_coverage`` refuses them).  Computations no longer called are dropped; a module
without maps is returned as is.

>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... f {
...   a = f32[] parameter(0)
...   b = f32[] parameter(1)
...   two = f32[] constant(2)
...   t = f32[] multiply(a, two)
...   ROOT s = f32[] add(t, b)
... }
... ENTRY e {
...   x = f32[4] parameter(0)
...   y = f32[4] parameter(1)
...   ROOT r = f32[4] map(x, y), dimensions={0}, to_apply=f
... }''')
>>> out = inline_maps(m)
>>> [(i.name, i.opcode) for i in out.entry][2:]
[('r.map1', 'constant'), ('r.map2', 'broadcast'), ('r.map3', 'multiply'), ('r', 'add')]
>>> [c.name for c in out.computations], inline_maps(out) is out
(['e'], True)
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from fusion.ir.call_graph import reachable_computations
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.ir.shape import ArrayShape
from fusion.opcodes import traits


def is_scalar_elementwise(comp: HloComputation) -> bool:
    """Whether ``comp`` is scalar element-wise ops on its parameters and constants (what
    :func:`inline_scalar_computation` can apply to arrays)."""
    return all(isinstance(i.shape, ArrayShape) and i.shape.rank == 0 and not i.called_computations()
               and (traits(i.opcode).given_value or traits(i.opcode).elementwise) for i in comp)


def inline_scalar_computation(called: HloComputation, operands: Sequence[str],
                              shape: ArrayShape, fresh: Callable[[], str]
                              ) -> list[HloInstruction]:
    """The instructions computing ``called`` (:func:`is_scalar_elementwise`) at every element
    of ``operands`` (its parameters, in order, each of ``shape``'s dims), named by ``fresh``;
    the last computes the root (a ``copy`` when the root is a parameter)."""
    out: list[HloInstruction] = []
    names: dict[str, str] = {}

    def add(opcode: str, dtype: str, args: tuple[str, ...], attributes, dims=None) -> str:
        name = fresh()
        at = shape if dims is None else ArrayShape(dtype, dims)
        out.append(HloInstruction(name, opcode, replace(at, dtype=dtype), args,
                                  tuple(attributes)))
        return name

    for inner in called:
        dtype = inner.shape.dtype
        if inner.opcode == "parameter":
            names[inner.name] = operands[inner.attr("parameter_number")]
        elif not inner.operands:  # a constant: made once, then spread
            scalar = add(inner.opcode, dtype, (), inner.attributes, dims=())
            names[inner.name] = add("broadcast", dtype, (scalar,), (("dimensions", ()),))
        else:
            names[inner.name] = add(inner.opcode, dtype,
                                    tuple(names[o] for o in inner.operands), inner.attributes)
    if not out or out[-1].name != names[called.root_name]:
        root = called.root
        add("copy", root.shape.dtype, (names[called.root_name],), ())
    return out


def inline_maps(module: HloModule) -> HloModule:
    """``module`` with every ``map`` whose ``to_apply`` is scalar element-wise ops replaced
    by those ops on arrays (module docstring)."""
    if not any(i.opcode == "map" for c in module.computations for i in c):
        return module
    taken = {i.name for c in module.computations for i in c}
    comps = tuple(_inlined(c, module, taken) for c in module.computations)
    if all(new is old for new, old in zip(comps, module.computations)):
        return module
    current = replace(module, computations=comps)
    reachable = set(reachable_computations(current, current.entry_name))
    return replace(current, computations=tuple(c for c in current.computations
                                               if c.name in reachable))


def _inlined(comp: HloComputation, module: HloModule, taken: set[str]) -> HloComputation:
    out: list[HloInstruction] = []
    changed = False
    for instr in comp:
        # A map naming no computation is left to the verifier, which says so, located.
        name = instr.attr("to_apply", None) if instr.opcode == "map" else None
        called = module.computation(name) \
            if isinstance(name, str) and module.has_computation(name) else None
        if called is None or not isinstance(instr.shape, ArrayShape) \
                or not is_scalar_elementwise(called):
            out.append(instr)
            continue
        ops = inline_scalar_computation(called, instr.operands, instr.shape,
                                        fresh_names(instr.name, taken))
        ops[-1] = ops[-1].replace(name=instr.name, location=instr.location)
        out.extend(ops)
        changed = True
    return replace(comp, instructions=tuple(out)) if changed else comp


def fresh_names(base: str, taken: set[str], tag: str = "map") -> Callable[[], str]:
    """Names ``<base>.<tag>1``, ``<base>.<tag>2``, ... not in ``taken`` (each added to it).

    >>> fresh = fresh_names("r", {"r.map1"})
    >>> fresh(), fresh()
    ('r.map2', 'r.map3')
    """
    def fresh() -> str:
        n = 1
        while f"{base}.{tag}{n}" in taken:
            n += 1
        taken.add(f"{base}.{tag}{n}")
        return f"{base}.{tag}{n}"
    return fresh


__all__ = ["fresh_names", "inline_maps", "inline_scalar_computation", "is_scalar_elementwise"]
