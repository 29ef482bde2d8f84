"""What a reducer or scatter combiner computes, recognised by behaviour, not by op names.

A ``to_apply`` computation over two scalars is run in the reference evaluator on sample pairs
and compared with each candidate function; it is that function when every pair agrees.  So a
reducer written as ``maximum(p0, p1)``, ``maximum(p1, p0)`` or ``select(p0 > p1, p0, p1)`` is
recognised alike.

>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... r {
...   a = f32[] parameter(0)
...   b = f32[] parameter(1)
...   g = pred[] compare(b, a), direction=GT
...   ROOT s = f32[] select(g, b, a)
... }
... ENTRY e {
...   x = f32[3] parameter(0)
...   z = f32[] constant(0)
...   ROOT y = f32[] reduce(x, z), dimensions={0}, to_apply=r
... }''')
>>> combiner_kind(m, "r")
<CombinerKind.MAX: 'maximum'>
"""
from __future__ import annotations

import enum
from typing import Callable

import numpy as np

from fusion.errors import FusionCompilerError
from fusion.evaluator.interpreter import Evaluator, flatten_value
from fusion.evaluator.numerics import numpy_dtype
from fusion.ir.hlo_module import HloModule
from fusion.ir.shape import ArrayShape, flatten_shape


class CombinerKind(enum.Enum):
    """A binary scalar function; the value is the HLO opcode computing it, if one does."""

    ADD = "add"
    MUL = "multiply"
    MAX = "maximum"
    MIN = "minimum"
    SET = "set"  # (old, new) -> new: a scatter that overwrites


_CANDIDATES: dict[CombinerKind, Callable[[float, float], float]] = {
    CombinerKind.ADD: lambda a, b: a + b,
    CombinerKind.MUL: lambda a, b: a * b,
    CombinerKind.MAX: max,
    CombinerKind.MIN: min,
    CombinerKind.SET: lambda a, b: b,
}

# Exactly representable in every float type (bf16 included), with ties, signs and zeros.
_SAMPLES = ((1.5, -2.25), (-0.75, 3.0), (2.0, 2.0), (0.0, -4.0), (-1.25, -0.5), (6.0, 0.25))
# Complex samples tell apart the combiners complex numbers have (no max or min), and a
# conjugating one from add or multiply.
_COMPLEX_SAMPLES = ((1.5 - 0.5j, -2.25 + 1j), (-0.75 + 2j, 3.0 - 0.25j), (2.0, 2.0),
                    (0.5j, -4.0 + 1.5j))
_COMPLEX_KINDS = (CombinerKind.ADD, CombinerKind.MUL, CombinerKind.SET)
# In every integer type, unsigned and 8-bit included; products and sums stay in range.
_INTEGER_SAMPLES = ((3, 5), (7, 2), (4, 4), (0, 9), (6, 1), (2, 3))


def combiner_kind(module: HloModule, name: str, output: int = 0,
                  integers: bool = False) -> CombinerKind | None:
    """The kind of the scalar computation ``name`` as a function of its float parameters
    ``output`` and ``n + output`` (``n`` the number of results), on its result ``output``;
    the other parameters (the indices of an argmax) are held at zero.  ``None`` when it is
    no known function of them.  ``integers``: integer parameters are recognised too (an
    all-reduce of ``s32``); otherwise they give None, as gradients need floats."""
    comp = module.computation(name)
    params = comp.parameters
    results = flatten_shape(comp.root.shape)
    count = len(results)
    if len(params) != 2 * count or output >= count or not all(
        isinstance(p.shape, ArrayShape) and p.shape.rank == 0 for p in params):
        return None
    lhs, rhs = params[output].shape, params[count + output].shape
    floats = lhs.element_type.is_float and rhs.element_type.is_float
    complexes = lhs.element_type.is_complex and rhs.element_type.is_complex
    ints = integers and lhs.element_type.is_integer and rhs.element_type.is_integer
    if not (floats or complexes or ints):
        return None
    samples = _COMPLEX_SAMPLES if complexes else _SAMPLES if floats else _INTEGER_SAMPLES
    as_python = complex if complexes else float
    evaluator = Evaluator(module)
    outputs = []
    try:
        for a, b in samples:
            args = [np.zeros((), numpy_dtype(p.shape)) for p in params]
            args[output] = np.asarray(a, numpy_dtype(lhs))
            args[count + output] = np.asarray(b, numpy_dtype(rhs))
            value = flatten_value(evaluator.call(name, args))[output]
            outputs.append(as_python(np.asarray(value)))
    except FusionCompilerError:
        return None
    for kind, function in _CANDIDATES.items():
        if complexes and kind not in _COMPLEX_KINDS:
            continue
        if all(out == function(a, b) for out, (a, b) in zip(outputs, samples)):
            return kind
    return None
