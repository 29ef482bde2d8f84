"""A scatter of complex values written as a scatter of their real parts.

Kernels hold no complex type, and a scatter runs as its own template, not inside the kernel
a complex fusion expands into; so before fusing, ``scatter(o, i, u)`` of ``c64`` (``c128``)
values becomes the variadic scatter of the parts, ``scatter(real(o), imag(o), i, real(u),
imag(u))``, whose combiner is ``to_apply`` on pairs of floats (``complex_expansion``'s
rewrite of it: an ``add`` adds each part, a ``multiply`` multiplies as complex numbers), and
the result ``complex`` of the two parts it gives.  XLA:GPU's scatter computes the same
combiner per element.

>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... add { a = c64[] parameter(0)
...   b = c64[] parameter(1)
...   ROOT c = c64[] add(a, b) }
... ENTRY e {
...   x = c64[8] parameter(0)
...   i = s32[2,1] parameter(1)
...   u = c64[2] parameter(2)
...   ROOT s = c64[8] scatter(x, i, u), update_window_dims={}, inserted_window_dims={0},
...     scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add
... }''')
>>> [(i.opcode, str(i.shape)) for i in expand_complex_scatters(m).entry][-4:]
[('scatter', '(f32[8], f32[8])'), ('get-tuple-element', 'f32[8]'), ('get-tuple-element', 'f32[8]'), ('complex', 'c64[8]')]
"""
from __future__ import annotations

from dataclasses import replace

from fusion.ir.element_types import COMPLEX_PART_TYPES
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.ir.instruction_writer import InstructionWriter
from fusion.ir.shape import ArrayShape, TupleShape, flatten_shape
from fusion.transforms.complex_expansion import real_parts_computation
from fusion.transforms.naming import taken_names
from fusion.transforms.op_expansion import expand_ops


def expand_complex_scatters(module: HloModule) -> HloModule:
    """``module`` with every scatter of complex values written over their real parts
    (module docstring); ``module`` itself when it has no scatter."""
    reducers: list[HloComputation] = []
    taken = taken_names(module)

    def write(ops: InstructionWriter, instr: HloInstruction, shapes: tuple, adder) -> bool:
        leaves = flatten_shape(instr.shape)
        if not any(isinstance(s, ArrayShape) and s.dtype in COMPLEX_PART_TYPES
                   for s in (*leaves, *shapes)):
            return False
        count = (len(instr.operands) - 1) // 2
        parts: list[str] = []
        for name, shape in zip(instr.operands, shapes):
            if shape.dtype in COMPLEX_PART_TYPES:
                real = ArrayShape(COMPLEX_PART_TYPES[shape.dtype], shape.dims)
                parts += [ops.add("real", real, (name,)), ops.add("imag", real, (name,))]
            else:
                parts.append(name)
        reducer = real_parts_computation(module, module.computation(instr.attr("to_apply")),
                                         reducers, taken)
        kinds = [ArrayShape(COMPLEX_PART_TYPES.get(s.dtype, s.dtype), s.dims)
                 for s in shapes[:count] for _ in range(2 if s.dtype in COMPLEX_PART_TYPES else 1)]
        attrs = {k: reducer.name if k == "to_apply" else v for k, v in instr.attributes}
        scatter = ops.add("scatter", TupleShape(tuple(kinds)), tuple(parts), **attrs)
        results, k = [], 0
        for leaf in leaves:
            got = [ops.add("get-tuple-element", kinds[k + j], (scatter,), index=k + j)
                   for j in range(2 if leaf.dtype in COMPLEX_PART_TYPES else 1)]
            k += len(got)
            results.append(ops.add("complex", leaf, tuple(got)) if len(got) == 2 else got[0])
        if isinstance(instr.shape, TupleShape):
            ops.add("tuple", instr.shape, tuple(results))
        return True

    expanded = expand_ops(module, "scatter", write, "cs")
    if expanded is module or not reducers:
        return expanded
    return replace(expanded, computations=tuple(reducers) + expanded.computations)


__all__ = ["expand_complex_scatters"]
