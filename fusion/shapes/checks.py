"""Checks shared by the shape-inference rules: located errors, operand and attribute access.

Every failure is an ``HloVerifyError`` carrying the instruction's line:column (when it came from
text) and its name, so a rule only has to say what is wrong.

>>> from fusion.ir.hlo_module import HloInstruction
>>> i = HloInstruction("a", "add", ArrayShape("f32", (2,)), ("x",))
>>> try:
...     expect_operand_count(i, (), 2)
... except HloVerifyError as e:
...     print(e)
a: add expects 2 operands, got 0
"""
from __future__ import annotations

from typing import Any, NoReturn, Sequence

from fusion.ir.element_types import ElementType, element_type
from fusion.errors import HloVerifyError
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.ir.shape import ArrayShape, Shape, TupleShape


def fail(instr: HloInstruction, message: str, expected: str | None = None) -> NoReturn:
    """Raise an ``HloVerifyError`` located at ``instr``."""
    loc = instr.location
    raise HloVerifyError(
        message,
        line=loc.line if loc else None,
        column=loc.column if loc else None,
        where=instr.name,
        expected=expected,
    )


def expect_operand_count(
    instr: HloInstruction, operands: Sequence[Shape], low: int, high: int | None = None
) -> None:
    """Require ``low`` operands (or between ``low`` and ``high``; ``high=-1``: at least ``low``)."""
    n = len(operands)
    if high is None:
        if n != low:
            fail(instr, f"{instr.opcode} expects {low} operands, got {n}")
    elif n < low or (high >= 0 and n > high):
        bound = f"at least {low}" if high < 0 else f"{low} to {high}"
        fail(instr, f"{instr.opcode} expects {bound} operands, got {n}")


def expect_array(instr: HloInstruction, shape: Shape, what: str) -> ArrayShape:
    """``shape`` as an array; a tuple or token is an error naming ``what``."""
    if not isinstance(shape, ArrayShape):
        fail(instr, f"{what} of {instr.opcode} must be an array, got tuple {shape}")
    return shape


def etype(instr: HloInstruction, shape: ArrayShape) -> ElementType:
    try:
        return element_type(shape.dtype)
    except KeyError as err:
        fail(instr, str(err.args[0]))


def expect_kind(instr: HloInstruction, shape: ArrayShape, kinds: str, what: str) -> None:
    """Require the element type of ``shape`` to be of one of ``kinds`` (space-separated)."""
    if etype(instr, shape).kind not in kinds.split():
        fail(
            instr,
            f"{what} of {instr.opcode} has element type {shape.dtype}",
            expected="element type of kind " + " or ".join(kinds.split()),
        )


def expect_same_type(instr: HloInstruction, shapes: Sequence[ArrayShape], what: str) -> None:
    dtypes = [s.dtype for s in shapes]
    if len(set(dtypes)) > 1:
        fail(instr, f"{what} of {instr.opcode} have mismatched element types {', '.join(dtypes)}")


def expect_same_dims(instr: HloInstruction, shapes: Sequence[ArrayShape], what: str) -> None:
    if len({s.dims for s in shapes}) > 1:
        listed = ", ".join(str(s) for s in shapes)
        fail(instr, f"{what} of {instr.opcode} have incompatible shapes {listed}")


def expect_scalar(instr: HloInstruction, shape: Shape, what: str) -> ArrayShape:
    arr = expect_array(instr, shape, what)
    if arr.rank != 0:
        fail(instr, f"{what} of {instr.opcode} must be a scalar, got {arr}")
    return arr


def int_list(instr: HloInstruction, key: str, default: Any = None) -> tuple[int, ...]:
    """An attribute holding a list of ints (``dimensions={1,0}``)."""
    value = instr.attr(key, default)
    if value is None:
        fail(instr, f"{instr.opcode} is missing attribute '{key}'")
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,)
    if not isinstance(value, tuple) or not all(isinstance(v, int) for v in value):
        fail(instr, f"attribute '{key}' of {instr.opcode} must be a list of integers, got {value}")
    return value


def one_dim(instr: HloInstruction, key: str) -> int:
    """An attribute holding exactly one dim (``dimensions={1}`` of concatenate and sort)."""
    dims = int_list(instr, key)
    if len(dims) != 1:
        fail(instr, f"{instr.opcode} needs exactly one dim in {key}, got "
             f"{{{','.join(map(str, dims))}}}", expected=f"{key}={{<dim>}}")
    return dims[0]


def int_attr(instr: HloInstruction, key: str, default: Any = None) -> int:
    value = instr.attr(key, default)
    if isinstance(value, tuple) and len(value) == 1:
        value = value[0]
    if not isinstance(value, int) or isinstance(value, bool):
        if value is None:
            fail(instr, f"{instr.opcode} is missing attribute '{key}'")
        fail(instr, f"attribute '{key}' of {instr.opcode} must be an integer, got {value}")
    return value


def expect_dims_in_range(
    instr: HloInstruction, dims: Sequence[int], rank: int, key: str, unique: bool = True
) -> None:
    for d in dims:
        if not 0 <= d < rank:
            fail(instr, f"{key}={{{','.join(map(str, dims))}}} has dim {d} out of range for rank {rank}")
    if unique and len(set(dims)) != len(dims):
        fail(instr, f"{key}={{{','.join(map(str, dims))}}} repeats a dim")


def callee(instr: HloInstruction, module: HloModule | None, key: str) -> HloComputation:
    """The computation named by attribute ``key`` (``to_apply``, ``calls``, ...)."""
    name = instr.attr(key, None)
    if name is None:
        fail(instr, f"{instr.opcode} is missing attribute '{key}'")
    if isinstance(name, tuple):
        if len(name) != 1:
            fail(instr, f"attribute '{key}' of {instr.opcode} must name one computation")
        name = name[0]
    if module is None or not module.has_computation(name):
        fail(instr, f"called computation '{name}' ({key}) does not exist")
    return module.computation(name)


def signature(comp: HloComputation) -> tuple[tuple[Shape, ...], Shape]:
    """Parameter shapes (by number) and root shape of a computation."""
    return tuple(p.shape for p in comp.parameters), comp.root.shape


def expect_callee_params(
    instr: HloInstruction, comp: HloComputation, wanted: Sequence[Shape], role: str
) -> None:
    """Require ``comp``'s parameters to match ``wanted`` (ignoring layouts)."""
    params, _ = signature(comp)
    if len(params) != len(wanted):
        fail(
            instr,
            f"{role} computation '{comp.name}' takes {len(params)} parameters, "
            f"but {instr.opcode} passes {len(wanted)}",
        )
    for n, (have, want) in enumerate(zip(params, wanted)):
        if not have.same_dims_and_type(want):
            fail(
                instr,
                f"parameter {n} of {role} computation '{comp.name}' is {have}, "
                f"but {instr.opcode} passes {want}",
                expected=str(want),
            )


def strip_layout(shape: Shape) -> Shape:
    """The shape with every layout removed (inferred shapes carry none)."""
    if isinstance(shape, ArrayShape):
        return ArrayShape(shape.dtype, shape.dims, None, shape.dynamic)
    return TupleShape(tuple(strip_layout(e) for e in shape.elements))


def scalar(dtype: str) -> ArrayShape:
    return ArrayShape(dtype, ())
