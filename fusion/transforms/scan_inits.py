"""Whether a scan's init value folds into itself: then how often a window folds it does not
matter.

A reduce-window counts every padding position of a window as its init value: a cumulative
sum's output ``o`` (forward, inclusive, length ``n``) folds the init ``n - o`` times, XLA's
tree of scans (``scan_tree``) a different number of times, a scan along a kernel's tile
once.  All agree when ``to_apply(init, init) == init`` bit for bit: 0 for a sum, 1 for a
product, any value for a maximum or minimum.  The init must be a constant: in the
computation, or passed in by the one fusion calling it (JAX's cumsum reaches the backend
as a single-op fusion whose init is a parameter).

>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... add {
...   a = f32[] parameter(0)
...   b = f32[] parameter(1)
...   ROOT s = f32[] add(a, b)
... }
... ENTRY e {
...   x = f32[40] parameter(0)
...   z = f32[] constant(0)
...   t = f32[] constant(3)
...   c = f32[40] reduce-window(x, z), window={size=40 pad=39_0}, to_apply=add
...   d = f32[40] reduce-window(x, t), window={size=40 pad=39_0}, to_apply=add
...   ROOT r = (f32[40], f32[40]) tuple(c, d)
... }''')
>>> [init_absorbs_itself(m.entry.instruction(n), m.entry, m) for n in ("c", "d")]
[True, False]
"""
from __future__ import annotations

import numpy as np

from fusion.errors import FusionCompilerError
from fusion.evaluator.constant_ops import constant_value
from fusion.evaluator.interpreter import Evaluator, flatten_value
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.ir.shape import ArrayShape


def init_absorbs_itself(instr: HloInstruction, computation: HloComputation,
                        module: HloModule) -> bool:
    """Whether the inits of ``instr`` (a reduce-window of ``computation``) are constants that
    its reducer maps ``(init, init)`` to, bit for bit."""
    inits = [_constant(computation.instruction(n), computation, module)
             for n in instr.operands[len(instr.operands) // 2:]]
    if not all(i is not None and isinstance(i.shape, ArrayShape) for i in inits):
        return False
    values = [constant_value(i) for i in inits]
    try:
        folded = flatten_value(Evaluator(module).call(instr.attr("to_apply"), values + values))
    except FusionCompilerError:
        return False
    return all(np.asarray(a).tobytes() == v.tobytes() for a, v in zip(folded, values))


def _constant(instr: HloInstruction, computation: HloComputation,
              module: HloModule) -> HloInstruction | None:
    """``instr`` if it is a constant, or the constant the one fusion calling ``computation``
    passes in as parameter ``instr``; else None."""
    if instr.has_attr("literal"):
        return instr
    if not instr.has_attr("parameter_number"):
        return None
    callers = [(c, f) for c, f in module.fusions() if f.attr("calls") == computation.name]
    if len(callers) != 1:
        return None
    caller, fusion = callers[0]
    operand = caller.instruction(fusion.operands[instr.attr("parameter_number")])
    return operand if operand.has_attr("literal") else None


__all__ = ["init_absorbs_itself"]
