"""A dot of complex values written as dots of their real parts.

Kernels hold no complex type (``complex_expansion`` rewrites a fusion's complex values into
pairs of floats), and a dot fusion holds exactly one dot; a complex dot is four real ones.  So
before fusing, ``d = dot(a, b)`` of ``c64`` (``c128``) values becomes

    re = dot(real(a), real(b)) - dot(imag(a), imag(b))
    im = dot(real(a), imag(b)) + dot(imag(a), real(b))
    d  = complex(re, im)

each real dot with the complex dot's dimension numbers and precision (a real operand has no
imaginary terms: two dots).  XLA:GPU sends a complex dot to cuBLAS (``cgemm``), which sums
the same four products per term; only the order of the roundings differs.

>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... ENTRY e {
...   a = c64[2,3] parameter(0)
...   b = c64[3,4] parameter(1)
...   ROOT d = c64[2,4] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
... }''')
>>> [i.opcode for i in expand_complex_dots(m).entry].count("dot")
4
"""
from __future__ import annotations

from dataclasses import replace

from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.ir.element_types import COMPLEX_PART_TYPES
from fusion.ir.shape import ArrayShape
from fusion.transforms.naming import fresh_name


def expand_complex_dots(module: HloModule) -> HloModule:
    """``module`` with every dot of complex values written as real dots (module docstring);
    ``module`` itself when it has none."""
    taken = {i.name for c in module.computations for i in c.instructions}
    comps = tuple(_expanded(c, taken) for c in module.computations)
    if all(new is old for new, old in zip(comps, module.computations)):
        return module
    return replace(module, computations=comps)


def _is_complex_dot(comp: HloComputation, instr: HloInstruction) -> bool:
    """A dot with a complex result and at least one complex operand."""
    shapes = [instr.shape] + [comp.instruction(o).shape for o in instr.operands]
    return instr.opcode == "dot" and all(isinstance(s, ArrayShape) for s in shapes) \
        and instr.shape.dtype in COMPLEX_PART_TYPES \
        and any(s.dtype in COMPLEX_PART_TYPES for s in shapes[1:])


def _expanded(comp: HloComputation, taken: set[str]) -> HloComputation:
    if not any(_is_complex_dot(comp, i) for i in comp.instructions):
        return comp
    out: list[HloInstruction] = []
    for instr in comp.instructions:
        if _is_complex_dot(comp, instr):
            out.extend(_real_dots(comp, instr, taken))
        else:
            out.append(instr)
    return replace(comp, instructions=tuple(out))


def _real_dots(comp: HloComputation, dot: HloInstruction,
               taken: set[str]) -> list[HloInstruction]:
    """The instructions computing complex ``dot`` from real dots; the last one keeps its
    name."""
    part = COMPLEX_PART_TYPES[dot.shape.dtype]
    made: list[HloInstruction] = []

    def add(hint: str, opcode: str, shape, operands, attributes=()) -> str:
        name = fresh_name(f"{dot.name}.{hint}", taken)
        made.append(dot.replace(name=name, opcode=opcode, shape=shape, operands=tuple(operands),
                                attributes=tuple(attributes)))
        return name

    def parts(operand: str) -> tuple[str, str | None]:
        shape = comp.instruction(operand).shape
        if shape.dtype not in COMPLEX_PART_TYPES:  # a real operand: no imaginary part
            return operand, None
        as_part = shape.with_dtype(COMPLEX_PART_TYPES[shape.dtype])
        return add("re", "real", as_part, (operand,)), add("im", "imag", as_part, (operand,))

    (a_re, a_im), (b_re, b_im) = parts(dot.operands[0]), parts(dot.operands[1])
    result = dot.shape.with_dtype(part)

    def real_dot(x: str | None, y: str | None, hint: str) -> str | None:
        return None if x is None or y is None else add(hint, "dot", result, (x, y), dot.attributes)

    def combine(opcode: str, x: str | None, y: str | None, hint: str) -> str:
        # a real operand leaves one term of each part out; one operand is complex, so the
        # other term is there
        if x is None or y is None:
            return x if y is None else y
        return add(hint, opcode, result, (x, y))

    re = combine("subtract", real_dot(a_re, b_re, "rr"), real_dot(a_im, b_im, "ii"), "real")
    im = combine("add", real_dot(a_re, b_im, "ri"), real_dot(a_im, b_re, "ir"), "imag")
    made.append(dot.replace(opcode="complex", operands=(re, im), attributes=()))
    return made


__all__ = ["expand_complex_dots"]
