"""A value of a fused computation at one point of its iteration space, as a function to run.

Between a fusion's reductions (or before them), the values an attention kernel renders per
(query, key) point are element-wise in that point: each output element reads each operand at
the same point, up to broadcasts, reshapes and other single-operand data movement.  Such a
value is then a scalar function of a few inputs at that point (the scores, a row's maximum,
...) and of the point's own coordinates (an ``iota``).  ``pointwise`` rebuilds it so: the
element-wise ops as they are at rank 0, data movement as copies, scalar constants as they are,
each ``iota`` as an input fed with the coordinate its dim has; anything else (a dot, a
reduction that is not an input, a parameter, a non-scalar constant) refuses with
``NotPointwise``.  The reference evaluator then runs it on whole arrays of sample points at
once, so the fusion pass and the attention template can ask what a value *does* (is it
``exp(a - m)``? which keys does a mask hide?) without looking at op names.

>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... ENTRY e {
...   s = f32[4,4] parameter(0)
...   i = s32[4,4] iota(), iota_dimension=0
...   j = s32[4,4] iota(), iota_dimension=1
...   c = pred[4,4] compare(i, j), direction=GE
...   f = f32[] constant(-inf)
...   fb = f32[4,4] broadcast(f), dimensions={}
...   ROOT a = f32[4,4] select(c, s, fb)
... }''')
>>> masked = pointwise(m, m.entry, "a", ("s",), {"i": "q", "j": "k"})
>>> masked({"s": np.float32([1, 1])}, {"q": np.int32([2, 0]), "k": np.int32([1, 1])}).tolist()
[1.0, -inf]
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

import numpy as np

from fusion.errors import FusionCompilerError
from fusion.evaluator.interpreter import Evaluator
from fusion.evaluator.numerics import numpy_dtype
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.ir.shape import ArrayShape
from fusion.opcodes import traits

#: ``(input values by name, coordinates by role) -> the value at those points``; its
#: ``types`` attribute holds the element types the value is computed in.
Pointwise = Callable[[Mapping[str, np.ndarray], Mapping[object, np.ndarray]], np.ndarray]


class NotPointwise(Exception):
    """Why a value is no element-wise function of its inputs and coordinates (the message)."""


def pointwise(module: HloModule, comp: HloComputation, root: str, inputs: Sequence[str],
              iota_roles: Mapping[str, object] | None = None,
              parameters_as_inputs: bool = False) -> Pointwise:
    """``root`` of ``comp`` as a function of the values of ``inputs`` and of the coordinates
    its ``iota`` instructions read (``iota_roles``: iota name -> the role whose coordinates
    feed it; an iota not named refuses).  With ``parameters_as_inputs``, every parameter it
    reads is an input too (a load at the point).  See the module docstring."""
    iota_roles = dict(iota_roles or {})
    kept: dict[str, HloInstruction] = {}
    free = list(inputs)
    pending = [root]
    while pending:
        name = pending.pop()
        if name in kept or name in inputs:
            continue
        instr = comp.instruction(name)
        if parameters_as_inputs and instr.opcode == "parameter":
            free.append(name)
            continue
        if instr.opcode == "iota":
            if name not in iota_roles:
                raise NotPointwise(f"{name} reads coordinates of a dim no role names")
            free.append(name)
            continue
        kept[name] = _at_rank_zero(instr)
        pending.extend(instr.operands)
    parameters = [HloInstruction(name, "parameter", ArrayShape(_dtype(comp, name), ()), (),
                                 (("parameter_number", k),)) for k, name in enumerate(free)]
    body = tuple(parameters) + tuple(kept[i.name] for i in comp.instructions if i.name in kept)
    probe = HloComputation(f"{comp.name}.pointwise.{root}", body, root)
    evaluator = Evaluator(HloModule(module.name, module.computations + (probe,),
                                    module.entry_name))
    dtypes = [numpy_dtype(p.shape) for p in parameters]

    def run(values: Mapping[str, np.ndarray], coordinates: Mapping[object, np.ndarray]) -> np.ndarray:
        """``values`` by input name (a parameter not named there: ``values[None]``)."""
        args = [coordinates[iota_roles[name]] if name in iota_roles
                else values[name] if name in values else values[None] for name in free]
        args = [np.asarray(a).astype(t) for a, t in zip(args, dtypes)]
        try:
            return np.asarray(evaluator.call(probe.name, args, batched=True))
        except FusionCompilerError as error:
            raise NotPointwise(f"{root} does not evaluate point by point: {error}") from None

    # The element types it computes in (its precision is the least precise of them).
    run.types = frozenset(i.shape.dtype for i in kept.values())  # type: ignore[attr-defined]
    return run


def _dtype(comp: HloComputation, name: str) -> str:
    shape = comp.instruction(name).shape
    if not isinstance(shape, ArrayShape):
        raise NotPointwise(f"{name} is tuple-shaped")
    return shape.dtype


def _at_rank_zero(instr: HloInstruction) -> HloInstruction:
    """``instr`` at one point: element-wise ops as they are, a single-operand data movement
    (broadcast, reshape, transpose, ...) as a copy, a scalar constant as it is."""
    shape = instr.shape
    if not isinstance(shape, ArrayShape):
        raise NotPointwise(f"{instr.name} is tuple-shaped")
    scalar = ArrayShape(shape.dtype, ())
    op = traits(instr.opcode)
    if instr.opcode == "constant":
        if shape.rank:
            raise NotPointwise(f"{instr.name} is a constant array")
        return replace(instr, shape=scalar)
    if op.elementwise:
        return replace(instr, shape=scalar)
    if op.index_changing and len(instr.operands) == 1 and not op.own_loop:
        return HloInstruction(instr.name, "copy", scalar, instr.operands)
    raise NotPointwise(f"{instr.name} ({instr.opcode}) is not element-wise at one point")


__all__ = ["NotPointwise", "Pointwise", "pointwise"]
