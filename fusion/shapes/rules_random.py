"""Shape rule of ``rng-bit-generator``: ``(new_state, bits) = rng-bit-generator(state)``.

The state is a ``u64`` vector (its first element the key) and the new state has its shape;
the bits may be of any integer or floating type of 8 to 64 bits (XLA fills their bits).  The
states XLA's expander accepts (``fusion.evaluator.random_ops``) are the ones accepted here:
``u64[2]`` for every algorithm, ``u64[3]`` (a 128-bit counter) for Philox too.

>>> from fusion.ir.hlo_module import HloInstruction
>>> state = ArrayShape("u64", (2,))
>>> rng = HloInstruction("r", "rng-bit-generator",
...                      TupleShape((state, ArrayShape("u32", (4, 8)))), ("s",),
...                      (("algorithm", "rng_default"),))
>>> str(shape_rng_bit_generator(rng, (state,), None))
'(u64[2], u32[4,8])'
"""
from __future__ import annotations

from collections.abc import Sequence

from fusion.ir.hlo_module import HloInstruction, HloModule
from fusion.ir.shape import ArrayShape, Shape, TupleShape
from fusion.shapes.checks import etype, expect_array, expect_operand_count, fail

#: The algorithms, and the state lengths XLA's expander takes for each.
STATE_LENGTHS = {"rng_default": (2, 3), "rng_philox": (2, 3), "rng_three_fry": (2,)}
#: The bit widths of the values it fills.
BIT_WIDTHS = (8, 16, 32, 64)


def shape_rng_bit_generator(instr: HloInstruction, operands: Sequence[Shape],
                            module: HloModule | None) -> Shape:
    """``(state's shape, the declared bits' shape)``, after checking both (module
    docstring)."""
    expect_operand_count(instr, operands, 1)
    state = expect_array(instr, operands[0], "the state")
    algorithm = instr.attr("algorithm", "rng_default")
    if algorithm not in STATE_LENGTHS:
        fail(instr, f"rng-bit-generator algorithm {algorithm!r} is unknown",
             expected=" or ".join(STATE_LENGTHS))
    lengths = STATE_LENGTHS[algorithm]
    if state.dtype != "u64" or state.rank != 1 or state.dims[0] not in lengths:
        fail(instr, f"the state of rng-bit-generator ({algorithm}) is {state}",
             expected=" or ".join(f"u64[{n}]" for n in lengths))
    declared = instr.shape
    if not isinstance(declared, TupleShape) or len(declared.elements) != 2 \
            or not isinstance(declared.elements[1], ArrayShape):
        fail(instr, f"rng-bit-generator returns (state, bits), declared {declared}")
    bits = declared.elements[1]
    kind = etype(instr, bits)
    if kind.kind not in ("signed", "unsigned", "float") or kind.bits not in BIT_WIDTHS:
        fail(instr, f"rng-bit-generator fills {bits.dtype} values",
             expected="an integer or floating type of 8, 16, 32 or 64 bits")
    return TupleShape((state, bits))


__all__ = ["BIT_WIDTHS", "STATE_LENGTHS", "shape_rng_bit_generator"]
