"""Scatters and sorts of complex values written as the same ops over their real parts.

Kernels hold no complex type, and a scatter or a sort runs as its own template, not inside
the kernel a complex fusion expands into; so before fusing, each complex operand of one
becomes two operands, its ``real`` and ``imag`` parts, the op's called computation is
``complex_expansion``'s rewrite of it over pairs of floats (a scatter's ``add`` adds each
part, a ``multiply`` multiplies as complex numbers; a sort's comparator reads ``real`` and
``imag`` of its parameters), and each complex result is the ``complex`` of the two parts the
op gives.  XLA computes the same called computation per element.

The two ops order their called computation's parameters differently, which is all that
differs between them here: a scatter's are grouped by role (every operand's, then every
update's), so a complex one's two parts are consecutive parameters as they are consecutive
operands; a sort's comparator takes each operand's pair of compared elements in turn, so
the real parts' pair comes before the imaginary parts' pair.

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
>>> [(i.opcode, str(i.shape)) for i in expand_complex_variadic_ops(m).entry][-4:]
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

#: The ops rewritten, and the attribute naming the computation each calls per element.
CALLED = {"scatter": "to_apply", "sort": "to_apply"}


def _is_complex(shape) -> bool:
    return isinstance(shape, ArrayShape) and shape.dtype in COMPLEX_PART_TYPES


def _parts(shape: ArrayShape) -> list[ArrayShape]:
    """The shapes ``shape``'s value becomes: two real parts of a complex one, else itself."""
    part = ArrayShape(COMPLEX_PART_TYPES.get(shape.dtype, shape.dtype), shape.dims)
    return [part, part] if _is_complex(shape) else [part]


def _comparator_order(comp: HloComputation, operand_shapes: tuple) -> HloComputation:
    """``comp`` (a sort comparator expanded by ``real_parts_computation``, so each complex
    element's parts are consecutive parameters) with its parameters renumbered in a sort's
    order: per operand, the two compared real parts, then the two imaginary parts."""
    renumber, start = {}, 0
    for shape in operand_shapes:
        if _is_complex(shape):  # (lhs.re, lhs.im, rhs.re, rhs.im) -> (lhs.re, rhs.re, ...)
            renumber.update({start + 1: start + 2, start + 2: start + 1})
        start += 2 * len(_parts(shape))

    def renumbered(instr: HloInstruction) -> HloInstruction:
        number = instr.attr("parameter_number")
        return replace(instr, attributes=(("parameter_number", renumber.get(number, number)),))

    return replace(comp, instructions=tuple(
        renumbered(i) if i.opcode == "parameter" else i for i in comp.instructions))


def expand_complex_variadic_ops(module: HloModule) -> HloModule:
    """``module`` with every scatter and sort of complex values written over their real
    parts (module docstring); ``module`` itself when it has none."""
    called: list[HloComputation] = []
    taken = taken_names(module)

    def write(ops: InstructionWriter, instr: HloInstruction, shapes: tuple, adder) -> bool:
        leaves = flatten_shape(instr.shape)
        if not any(_is_complex(s) for s in (*leaves, *shapes)):
            return False
        parts: list[str] = []
        for name, shape in zip(instr.operands, shapes):
            if _is_complex(shape):
                real = _parts(shape)[0]
                parts += [ops.add("real", real, (name,)), ops.add("imag", real, (name,))]
            else:
                parts.append(name)
        key = CALLED[instr.opcode]
        comp = real_parts_computation(module, module.computation(instr.attr(key)), called, taken)
        if instr.opcode == "sort":
            called[-1] = comp = _comparator_order(comp, shapes)
        kinds = [part for leaf in leaves for part in _parts(leaf)]
        attrs = {k: comp.name if k == key else v for k, v in instr.attributes}
        op = ops.add(instr.opcode, TupleShape(tuple(kinds)), tuple(parts), **attrs)
        results, k = [], 0
        for leaf in leaves:
            got = [ops.add("get-tuple-element", kinds[k + j], (op,), index=k + j)
                   for j in range(len(_parts(leaf)))]
            k += len(got)
            results.append(ops.add("complex", leaf, tuple(got)) if len(got) == 2 else got[0])
        if isinstance(instr.shape, TupleShape):
            ops.add("tuple", instr.shape, tuple(results))
        return True

    expanded = expand_ops(module, tuple(CALLED), write, "cv")
    if expanded is module or not called:
        return expanded
    return replace(expanded, computations=tuple(called) + expanded.computations)


__all__ = ["expand_complex_variadic_ops"]
