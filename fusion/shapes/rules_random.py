"""Shape rules of the random ops: ``(new_state, bits) = rng-bit-generator(state)``, ``rng``
and the state its expansion reads, ``rng-get-and-update-state``.

The state is a ``u64`` vector (its first element the key) and the new state has its shape;
the bits may be of any integer or floating type of 8 to 64 bits (XLA fills their bits).  The
states XLA's expander accepts (``fusion.evaluator.random_ops``) are the ones accepted here:
``u64[2]`` for every algorithm, ``u64[3]`` (a 128-bit counter) for Philox too.

``rng(a, b), distribution=rng_uniform|rng_normal`` takes two scalars of its result's element
type (XLA's verifier) and computes one of the types XLA's expander computes
(``fusion.analysis.rng_streams``); ``rng-get-and-update-state(), delta=D`` is a ``u64[2]``.

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

from fusion.analysis.rng_streams import DISTRIBUTION_TYPES
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


def shape_rng(instr: HloInstruction, operands: Sequence[Shape],
               module: HloModule | None) -> Shape:
    """The declared shape, after checking the distribution, its type and the two scalar
    parameters (module docstring)."""
    expect_operand_count(instr, operands, 2)
    distribution = instr.attr("distribution", None)
    if distribution not in DISTRIBUTION_TYPES:
        fail(instr, f"rng distribution {distribution!r} is unknown",
             expected=" or ".join(DISTRIBUTION_TYPES))
    result = expect_array(instr, instr.shape, "the result")
    types = DISTRIBUTION_TYPES[distribution]
    if result.dtype not in types:
        fail(instr, f"rng ({distribution}) draws {result.dtype} values, which XLA's expander "
                    "does not compute", expected=", ".join(types))
    for k, name in enumerate(("a", "b") if distribution == "rng_uniform" else ("mu", "sigma")):
        given = expect_array(instr, operands[k], f"parameter {name}")
        if given.rank != 0 or given.dtype != result.dtype:
            fail(instr, f"rng's parameter {name} is {given}", expected=f"{result.dtype}[]")
    return result


def shape_rng_get_and_update_state(instr: HloInstruction, operands: Sequence[Shape],
                                   module: HloModule | None) -> Shape:
    """``u64[2]``, the 128-bit state, with an integer ``delta`` of at least 0."""
    expect_operand_count(instr, operands, 0)
    delta = instr.attr("delta", None)
    if not isinstance(delta, int) or delta < 0:
        fail(instr, f"rng-get-and-update-state needs delta=N, got {delta!r}",
             expected="a count of 32-bit words, 0 or more")
    return ArrayShape("u64", (2,))


__all__ = ["BIT_WIDTHS", "STATE_LENGTHS", "shape_rng", "shape_rng_bit_generator",
           "shape_rng_get_and_update_state"]
