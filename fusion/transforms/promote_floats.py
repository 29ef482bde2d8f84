"""A module computed in f64: every narrower real float type promoted, as a truth to measure
rounding error against.

``run --check`` compares a compiled module's outputs with the reference evaluator's at the
output type's tolerance.  Where a program cancels large terms (a transformer block's
residual sum of values in the thousands, from unit-scale random inputs) both results are
off from the exact value by far more than that tolerance, in different elements, and the
check fails though the kernels are as accurate as the evaluator.  The promoted module's
value says by how much each result is off (``triton_backend.host.output_check``).

Every array type among the real floats narrower than 64 bits (f32, bf16, f16, the f8 types)
becomes f64 in every computation; converts between them become no-ops.  An op whose value
depends on its types' bit widths (``width_dependent``: bitcast-convert, reduce-precision,
random bits; a ``bitcast`` to another element type) runs at its own types: its float
operands are converted back to theirs before it and its float result widened after it (the
uniform floats a random generator's bits make, a TOTALORDER comparator's keys).  A module is
not promoted (None) when a shape has a physical (tiled or packed) layout, or such an op
takes or makes a tuple holding floats.  A dot's ``algorithm`` (which types it multiplies in)
is dropped: the exact product is what every algorithm approximates.

>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... ENTRY e {
...   x = bf16[4] parameter(0)
...   c = f32[4] convert(x)
...   ROOT s = f32[4] multiply(c, c)
... }''')
>>> [str(i.shape) for i in promote_floats(m).entry]
['f64[4]', 'f64[4]', 'f64[4]']
>>> [(i.name, i.opcode, str(i.shape)) for i in promote_floats(parse_hlo('''HloModule m
... ENTRY e {
...   x = f32[4] parameter(0)
...   ROOT b = s32[4] bitcast-convert(x)
... }''')).entry]
[('x', 'parameter', 'f64[4]'), ('x.own_type', 'convert', 'f32[4]'), ('b', 'bitcast-convert', 's32[4]')]
"""
from __future__ import annotations

from dataclasses import replace

from fusion.ir.element_types import element_type
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.ir.shape import ArrayShape, Shape, TupleShape
from fusion.opcodes import traits
from fusion.transforms.naming import fresh_name

WIDE = "f64"


def _promoted_type(dtype: str) -> str:
    info = element_type(dtype)
    return WIDE if info.kind == "float" and info.bits < 64 else dtype


def _promote_shape(shape: Shape) -> Shape | None:
    """``shape`` with its narrow floats made f64; None when it has a physical layout."""
    if isinstance(shape, TupleShape):
        elements = [_promote_shape(e) for e in shape.elements]
        return None if any(e is None for e in elements) else TupleShape(tuple(elements))
    if not isinstance(shape, ArrayShape):
        return shape
    layout = shape.layout
    if layout is not None and (layout.tiles or layout.element_size_in_bits):
        return None
    dtype = _promoted_type(shape.dtype)
    return shape if dtype == shape.dtype else replace(shape, dtype=dtype)


def _promote_instruction(comp: HloComputation, instr: HloInstruction, taken: set[str]
                         ) -> list[HloInstruction] | None:
    if traits(instr.opcode).width_dependent or _reinterprets_bits(comp, instr):
        return _at_own_types(comp, instr, taken)
    shape = _promote_shape(instr.shape)
    if shape is None:
        return None
    return [instr.replace(shape=shape, attributes=tuple(
        (k, v) for k, v in instr.attributes if k != "algorithm"))]


def _at_own_types(comp: HloComputation, instr: HloInstruction, taken: set[str]
                  ) -> list[HloInstruction] | None:
    """``instr`` at its own types amid promoted values: converts of its promoted operands
    back to their types before it, a convert of its float result to f64 after it (under its
    name); None where a tuple holding floats or a physical layout is in the way."""
    result = _promote_shape(instr.shape)
    if result is None:
        return None
    out, operands = [], []
    for name in instr.operands:
        own = comp.instruction(name).shape
        wide = _promote_shape(own)
        if isinstance(own, TupleShape) and wide != own:
            return None
        if wide is None:
            return None
        if wide != own:
            out.append(HloInstruction(fresh_name(f"{name}.own_type", taken), "convert", own,
                                      (name,), location=instr.location))
            name = out[-1].name
        operands.append(name)
    if result == instr.shape:
        return out + [instr.replace(operands=tuple(operands))]
    if isinstance(instr.shape, TupleShape):
        return None
    inner = fresh_name(f"{instr.name}.own_type", taken)
    return out + [instr.replace(name=inner, operands=tuple(operands)),
                  HloInstruction(instr.name, "convert", result, (inner,),
                                 location=instr.location)]


def _reinterprets_bits(comp: HloComputation, instr: HloInstruction) -> bool:
    """A ``bitcast`` to another element type (XLA's optimized form of a bitcast-convert, as
    in a TOTALORDER comparator): its value depends on the widths too."""
    if not traits(instr.opcode).reshape_like or not instr.operands:
        return False
    source = comp.instruction(instr.operands[0]).shape
    return isinstance(source, ArrayShape) and isinstance(instr.shape, ArrayShape) \
        and source.dtype != instr.shape.dtype


def promote_floats(module: HloModule) -> HloModule | None:
    """``module`` computed in f64 (module docstring), or None when it cannot be."""
    taken = {i.name for c in module.computations for i in c}
    computations = []
    for comp in module.computations:
        instructions: list[HloInstruction] = []
        for instr in comp:
            promoted = _promote_instruction(comp, instr, taken)
            if promoted is None:
                return None
            instructions.extend(promoted)
        computations.append(replace(comp, instructions=tuple(instructions)))
    return replace(module, computations=tuple(computations))


__all__ = ["promote_floats"]
