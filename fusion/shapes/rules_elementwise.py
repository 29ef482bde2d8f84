"""Shape rules of the elementwise ops: unary, binary, compare, select, clamp, conversions, map.

HLO has no implicit broadcasting: every array operand of an elementwise op has the result's
dims (clamp's bounds alone may be scalars).

>>> from fusion.ir.hlo_module import HloInstruction
>>> f = ArrayShape("f32", (2, 3))
>>> i = HloInstruction("c", "compare", ArrayShape("pred", (2, 3)), ("a", "b"),
...                    (("direction", "LT"),))
>>> str(shape_compare(i, (f, f), None))
'pred[2,3]'
"""
from __future__ import annotations

from typing import Callable, Sequence

from fusion.ir.hlo_module import HloInstruction, HloModule
from fusion.ir.element_types import COMPLEX_OF_PART_TYPES, COMPLEX_PART_TYPES
from fusion.ir.shape import ArrayShape, Shape
from fusion.opcodes import traits
from fusion.shapes.checks import (
    callee,
    etype,
    expect_array,
    expect_callee_params,
    expect_kind,
    expect_operand_count,
    expect_same_dims,
    expect_same_type,
    fail,
    int_attr,
    scalar,
    signature,
)

Rule = Callable[[HloInstruction, Sequence[Shape], "HloModule | None"], Shape]

FLOATING = "float complex"
INTEGRAL = "signed unsigned"
LOGICAL = "pred signed unsigned"
NUMERIC = "signed unsigned float complex"
SIGNED_NUMERIC = "signed float complex"


# Unary op -> the element-type kinds it accepts.
UNARY_KINDS: dict[str, str] = {
    "abs": SIGNED_NUMERIC,
    "cbrt": FLOATING,
    "ceil": "float",
    "cosine": FLOATING,
    "count-leading-zeros": INTEGRAL,
    "erf": "float",
    "exponential": FLOATING,
    "exponential-minus-one": FLOATING,
    "floor": "float",
    "imag": FLOATING,
    "is-finite": "float",
    "log": FLOATING,
    "log-plus-one": FLOATING,
    "logistic": FLOATING,
    "negate": NUMERIC,
    "not": LOGICAL,
    "popcnt": INTEGRAL,
    "real": FLOATING,
    "round-nearest-afz": "float",
    "round-nearest-even": "float",
    "rsqrt": FLOATING,
    "sign": SIGNED_NUMERIC,
    "sine": FLOATING,
    "sqrt": FLOATING,
    "tan": FLOATING,
    "tanh": FLOATING,
}

# Binary op -> the element-type kinds it accepts.
BINARY_KINDS: dict[str, str] = {
    "add": "pred " + NUMERIC,  # on pred: or (XLA's EmitPredBinaryOp)
    "and": LOGICAL,
    "atan2": FLOATING,
    "complex": "float",
    "divide": NUMERIC,
    "maximum": "pred " + NUMERIC,
    "minimum": "pred " + NUMERIC,
    "multiply": "pred " + NUMERIC,  # on pred: and
    "or": LOGICAL,
    "power": NUMERIC,
    "remainder": NUMERIC,
    "shift-left": INTEGRAL,
    "shift-right-arithmetic": INTEGRAL,
    "shift-right-logical": INTEGRAL,
    "subtract": NUMERIC,
    "xor": LOGICAL,
}

COMPARISON_DIRECTIONS = ("EQ", "NE", "LT", "LE", "GT", "GE")


def shape_unary(instr: HloInstruction, operands: Sequence[Shape], module: HloModule | None) -> Shape:
    """Result of a unary elementwise op: the operand's dims; type changes for a few ops."""
    expect_operand_count(instr, operands, 1)
    x = expect_array(instr, operands[0], "the operand")
    expect_kind(instr, x, UNARY_KINDS[instr.opcode], "the operand")
    dtype = x.dtype
    if instr.opcode == "is-finite":
        dtype = "pred"
    elif traits(instr.opcode).complex_to_real and dtype in COMPLEX_PART_TYPES:
        dtype = COMPLEX_PART_TYPES[dtype]
    return ArrayShape(dtype, x.dims)


def _two_alike(instr: HloInstruction, operands: Sequence[Shape]) -> tuple[ArrayShape, ArrayShape]:
    """The two array operands of a binary op, checked to share element type and dims."""
    expect_operand_count(instr, operands, 2)
    a = expect_array(instr, operands[0], "operand 0")
    b = expect_array(instr, operands[1], "operand 1")
    expect_same_type(instr, (a, b), "the operands")
    expect_same_dims(instr, (a, b), "the operands")
    return a, b


def shape_binary(instr: HloInstruction, operands: Sequence[Shape], module: HloModule | None) -> Shape:
    """Result of a binary elementwise op: operands of equal dims and element type."""
    a, b = _two_alike(instr, operands)
    if a.dtype == "pred" and "pred" not in BINARY_KINDS[instr.opcode].split():
        # XLA's ShapeInference::InferBinaryOpShape: "Expected element type in shape to be
        # arithmetic type for operation subtract; got PRED."
        fail(instr, f"{instr.opcode} is not defined on pred operands (XLA defines add as or, "
             "multiply as and, maximum as or, minimum as and; no other arithmetic)",
             expected="element type of kind " + " or ".join(BINARY_KINDS[instr.opcode].split()))
    expect_kind(instr, a, BINARY_KINDS[instr.opcode], "the operands")
    if instr.opcode == "complex":
        if a.dtype not in COMPLEX_OF_PART_TYPES:
            fail(instr, f"complex needs f32 or f64 operands, got {a.dtype}")
        return ArrayShape(COMPLEX_OF_PART_TYPES[a.dtype], a.dims)
    return ArrayShape(a.dtype, a.dims)


def shape_bitcast_convert(
    instr: HloInstruction, operands: Sequence[Shape], module: HloModule | None
) -> Shape:
    """Same bits reinterpreted; a width change adds or removes a minor dim of the ratio."""
    expect_operand_count(instr, operands, 1)
    x = expect_array(instr, operands[0], "the operand")
    out = expect_array(instr, instr.shape, "the result")
    for shape, what in ((x, "operand"), (out, "result")):
        if not etype(instr, shape).has_values:  # 0 bits: no width to reinterpret
            fail(instr, f"cannot bitcast-convert a {what} of type {shape.dtype}, which has no "
                 "values", expected="an array element type")
    in_bits, out_bits = etype(instr, x).bits, etype(instr, out).bits
    if in_bits == out_bits:
        return ArrayShape(out.dtype, x.dims)
    if in_bits > out_bits:
        if in_bits % out_bits:
            fail(instr, f"cannot bitcast-convert {x.dtype} to {out.dtype}: widths do not divide")
        return ArrayShape(out.dtype, x.dims + (in_bits // out_bits,))
    if out_bits % in_bits or not x.dims or x.dims[-1] != out_bits // in_bits:
        fail(
            instr,
            f"bitcast-convert from {x} to {out.dtype} needs a minor dim of {out_bits // in_bits}",
        )
    return ArrayShape(out.dtype, x.dims[:-1])


def shape_clamp(instr: HloInstruction, operands: Sequence[Shape], module: HloModule | None) -> Shape:
    """``clamp(min, x, max)``: min and max are scalars or have x's dims."""
    expect_operand_count(instr, operands, 3)
    lo, x, hi = (expect_array(instr, s, f"operand {n}") for n, s in enumerate(operands))
    expect_same_type(instr, (lo, x, hi), "the operands")
    for bound in (lo, hi):
        if bound.rank != 0 and bound.dims != x.dims:
            fail(instr, f"clamp bound {bound} must be a scalar or have the operand's shape {x}")
    return ArrayShape(x.dtype, x.dims)


def shape_compare(instr: HloInstruction, operands: Sequence[Shape], module: HloModule | None) -> Shape:
    """Comparison: operands of equal shape, a valid direction, result pred."""
    a, b = _two_alike(instr, operands)
    direction = instr.attr("direction", None)
    if direction not in COMPARISON_DIRECTIONS:
        fail(
            instr,
            f"compare has invalid direction {direction!r}",
            expected="direction=" + "|".join(COMPARISON_DIRECTIONS),
        )
    return ArrayShape("pred", a.dims)


def shape_convert(instr: HloInstruction, operands: Sequence[Shape], module: HloModule | None) -> Shape:
    """Any array type to any other, element by element; the target type is the declared one."""
    expect_operand_count(instr, operands, 1)
    x = expect_array(instr, operands[0], "the operand")
    out = expect_array(instr, instr.shape, "the result")
    if not etype(instr, x).has_values or not etype(instr, out).has_values:
        fail(instr, f"cannot convert {x.dtype} to {out.dtype}")
    return ArrayShape(out.dtype, x.dims)


def shape_stochastic_convert(instr: HloInstruction, operands: Sequence[Shape],
                             module: HloModule | None) -> Shape:
    """``stochastic-convert(x, random)``: floats to a signed integer type, rounding each
    magnitude up with the probability of its fraction, read against unsigned ``random`` bits
    of ``x``'s width (XLA's ``StochasticConvertDecomposer`` converts to signed integers only)."""
    expect_operand_count(instr, operands, 2)
    x = expect_array(instr, operands[0], "the operand")
    random = expect_array(instr, operands[1], "the random bits")
    out = expect_array(instr, instr.shape, "the result")
    source, bits, target = etype(instr, x), etype(instr, random), etype(instr, out)
    if source.kind != "float" or bits.kind != "unsigned" or bits.bits != source.bits:
        fail(instr, f"stochastic-convert takes floats and unsigned random bits of their width, "
             f"got {x} and {random}", expected=f"{x.dtype} and u{source.bits}")
    expect_same_dims(instr, (x, random), "the operands")
    if target.kind != "signed":
        fail(instr, f"stochastic-convert to {out.dtype} is not defined (XLA converts floats to "
             "signed integers only)", expected="s8, s16, s32 or s64")
    return ArrayShape(out.dtype, x.dims)


def shape_map(instr: HloInstruction, operands: Sequence[Shape], module: HloModule | None) -> Shape:
    """``map(xs...), to_apply=f``: f takes one scalar per operand and returns a scalar."""
    expect_operand_count(instr, operands, 1, -1)
    xs = [expect_array(instr, s, f"operand {n}") for n, s in enumerate(operands)]
    expect_same_dims(instr, xs, "the operands")
    comp = callee(instr, module, "to_apply")
    expect_callee_params(instr, comp, [scalar(x.dtype) for x in xs], "to_apply")
    _, root = signature(comp)
    if not isinstance(root, ArrayShape) or root.rank != 0:
        fail(instr, f"to_apply computation '{comp.name}' of map must return a scalar, got {root}")
    return ArrayShape(root.dtype, xs[0].dims)


def shape_reduce_precision(
    instr: HloInstruction, operands: Sequence[Shape], module: HloModule | None
) -> Shape:
    """Rounds floats to fewer exponent/mantissa bits; the shape is unchanged."""
    expect_operand_count(instr, operands, 1)
    x = expect_array(instr, operands[0], "the operand")
    expect_kind(instr, x, "float", "the operand")
    if int_attr(instr, "exponent_bits") < 1 or int_attr(instr, "mantissa_bits") < 0:
        fail(instr, "reduce-precision needs exponent_bits >= 1 and mantissa_bits >= 0")
    return ArrayShape(x.dtype, x.dims)


def shape_select(instr: HloInstruction, operands: Sequence[Shape], module: HloModule | None) -> Shape:
    """``select(pred, on_true, on_false)``: pred has the branches' dims, or is a scalar that
    picks one whole branch (XLA's ``InferSelectShape`` takes a rank-0 pred)."""
    expect_operand_count(instr, operands, 3)
    p, t, f = (expect_array(instr, s, f"operand {n}") for n, s in enumerate(operands))
    if p.dtype != "pred":
        fail(instr, f"select predicate must be pred, got {p}")
    expect_same_type(instr, (t, f), "the branches")
    expect_same_dims(instr, (t, f) if p.rank == 0 else (p, t, f), "the predicate and branches")
    return ArrayShape(t.dtype, t.dims)
