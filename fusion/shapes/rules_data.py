"""Shape rules of the ops that make or move data: constants, reshapes, slices, pads, gathers.

Ops whose result dims an attribute cannot fully give (broadcast, reshape, bitcast, iota) take
the declared dims and check they are consistent with the operand.

>>> from fusion.ir.hlo_module import HloInstruction
>>> from fusion.ir.attributes import SliceDim
>>> i = HloInstruction("s", "slice", ArrayShape("f32", (2,)), ("x",),
...                    (("slice", (SliceDim(1, 6, 3),)),))
>>> str(shape_slice(i, (ArrayShape("f32", (8,)),), None))
'f32[2]'
"""
from __future__ import annotations

from typing import Sequence

from fusion.ir.attributes import Literal, PaddingConfig, SliceDim
from fusion.ir.hlo_module import HloInstruction, HloModule
from fusion.ir.shape import ArrayShape, Shape, TupleShape
from fusion.shapes.checks import (
    etype,
    expect_array,
    expect_dims_in_range,
    expect_kind,
    expect_operand_count,
    expect_same_type,
    expect_scalar,
    fail,
    one_dim,
    int_attr,
    int_list,
)


def _declared_array(instr: HloInstruction) -> ArrayShape:
    return expect_array(instr, instr.shape, "the result")


def shape_bitcast(instr: HloInstruction, operands: Sequence[Shape], module: HloModule | None) -> Shape:
    """A reinterpretation of the same buffer: the total number of bits is unchanged."""
    expect_operand_count(instr, operands, 1)
    x = expect_array(instr, operands[0], "the operand")
    out = _declared_array(instr)
    have = x.num_elements * etype(instr, x).bits
    want = out.num_elements * etype(instr, out).bits
    if have != want:
        fail(instr, f"bitcast from {x} ({have} bits) to {out} ({want} bits) changes the size")
    return ArrayShape(out.dtype, out.dims)


def shape_broadcast(instr: HloInstruction, operands: Sequence[Shape], module: HloModule | None) -> Shape:
    """``dimensions[i]`` is the result dim that operand dim ``i`` maps to; sizes must agree."""
    expect_operand_count(instr, operands, 1)
    x = expect_array(instr, operands[0], "the operand")
    out = _declared_array(instr)
    dims = int_list(instr, "dimensions")  # required, even for a scalar (``dimensions={}``)
    if len(dims) != x.rank:
        fail(instr, f"broadcast of rank-{x.rank} {x} needs {x.rank} dimensions, got {len(dims)}")
    expect_dims_in_range(instr, dims, out.rank, "dimensions")
    for i, d in enumerate(dims):
        if x.dims[i] != out.dims[d]:
            fail(instr, f"broadcast maps operand dim {i} (size {x.dims[i]}) to result dim {d} "
                 f"(size {out.dims[d]})")
    return ArrayShape(x.dtype, out.dims)


def shape_concatenate(
    instr: HloInstruction, operands: Sequence[Shape], module: HloModule | None
) -> Shape:
    expect_operand_count(instr, operands, 1, -1)
    xs = [expect_array(instr, s, f"operand {n}") for n, s in enumerate(operands)]
    expect_same_type(instr, xs, "the operands")
    dim = one_dim(instr, "dimensions")
    expect_dims_in_range(instr, (dim,), xs[0].rank, "dimensions")
    for x in xs[1:]:
        if x.rank != xs[0].rank or any(
            a != b for i, (a, b) in enumerate(zip(x.dims, xs[0].dims)) if i != dim
        ):
            fail(instr, f"concatenate operands {xs[0]} and {x} differ outside dim {dim}")
    dims = list(xs[0].dims)
    dims[dim] = sum(x.dims[dim] for x in xs)
    return ArrayShape(xs[0].dtype, tuple(dims))


def _literal_matches(instr: HloInstruction, literal: Literal, shape: Shape) -> None:
    if isinstance(shape, TupleShape):
        if literal.elements is None or len(literal.elements) != len(shape.elements):
            fail(instr, f"constant literal does not match tuple shape {shape}")
        for sub, sub_shape in zip(literal.elements, shape.elements):
            _literal_matches(instr, sub, sub_shape)
        return
    if literal.elements is not None:
        fail(instr, f"constant has a tuple literal but array shape {shape}")
    if literal.dims != shape.dims:
        fail(instr, f"constant literal has dims {list(literal.dims)} but the shape is {shape}")
    if len(literal.values) != shape.num_elements:
        fail(instr, f"constant literal has {len(literal.values)} values but {shape} has "
             f"{shape.num_elements} elements")


def shape_constant(instr: HloInstruction, operands: Sequence[Shape], module: HloModule | None) -> Shape:
    """The declared shape, once the literal is checked to fill it exactly."""
    expect_operand_count(instr, operands, 0)
    literal = instr.attr("literal", None)
    if not isinstance(literal, Literal):
        fail(instr, "constant has no literal value")
    _literal_matches(instr, literal, instr.shape)
    return instr.shape


def shape_copy(instr: HloInstruction, operands: Sequence[Shape], module: HloModule | None) -> Shape:
    expect_operand_count(instr, operands, 1)
    return operands[0]


def shape_copy_done(
    instr: HloInstruction, operands: Sequence[Shape], module: HloModule | None
) -> Shape:
    """The destination of the ``copy-start`` it completes (element 0 of its tuple)."""
    expect_operand_count(instr, operands, 1)
    started = operands[0]
    if not (isinstance(started, TupleShape) and len(started.elements) == 3):
        fail(instr, f"copy-done needs a copy-start's (destination, source, u32[]) tuple, "
             f"got {started}")
    return started.elements[0]


def shape_copy_start(
    instr: HloInstruction, operands: Sequence[Shape], module: HloModule | None
) -> Shape:
    """``(destination, source, u32[] context)``: the destination is the operand's value,
    in another memory space (its layout's ``S(n)``)."""
    expect_operand_count(instr, operands, 1)
    source = expect_array(instr, operands[0], "operand")
    return TupleShape((source, source, ArrayShape("u32", ())))


def shape_get_dimension_size(
    instr: HloInstruction, operands: Sequence[Shape], module: HloModule | None
) -> Shape:
    """``s32[]``: the size of the operand's dim ``dimensions={d}``."""
    expect_operand_count(instr, operands, 1)
    operand = expect_array(instr, operands[0], "operand")
    d = instr.attr("dimensions", ())
    if not (isinstance(d, tuple) and len(d) == 1 and 0 <= d[0] < operand.rank):
        fail(instr, f"get-dimension-size needs one dim of the rank-{operand.rank} operand, "
             f"got dimensions={list(d) if isinstance(d, tuple) else d}")
    return ArrayShape("s32", ())


def shape_opt_barrier(
    instr: HloInstruction, operands: Sequence[Shape], module: HloModule | None
) -> Shape:
    """Its operand's shape, array or tuple: the barrier passes its operand on unchanged."""
    expect_operand_count(instr, operands, 1)
    return operands[0]


def _start_indices(instr: HloInstruction, operands: Sequence[Shape], first: int, rank: int) -> None:
    """Scalar integer start indices, one per dim, all of one type."""
    indices = [expect_scalar(instr, s, f"start index {n}") for n, s in enumerate(operands[first:])]
    if len(indices) != rank:
        fail(instr, f"{instr.opcode} of a rank-{rank} array needs {rank} start indices, "
             f"got {len(indices)}")
    for n, s in enumerate(indices):
        expect_kind(instr, s, "signed unsigned", f"start index {n}")
    expect_same_type(instr, indices, "the start indices")


def shape_dynamic_slice(
    instr: HloInstruction, operands: Sequence[Shape], module: HloModule | None
) -> Shape:
    expect_operand_count(instr, operands, 1, -1)
    x = expect_array(instr, operands[0], "the operand")
    _start_indices(instr, operands, 1, x.rank)
    sizes = int_list(instr, "dynamic_slice_sizes")
    if len(sizes) != x.rank:
        fail(instr, f"dynamic_slice_sizes has {len(sizes)} entries for rank-{x.rank} {x}")
    for d, (size, bound) in enumerate(zip(sizes, x.dims)):
        if not 0 <= size <= bound:
            fail(instr, f"dynamic slice size {size} of dim {d} exceeds the operand's {bound}")
    return ArrayShape(x.dtype, sizes)


def shape_dynamic_update_slice(
    instr: HloInstruction, operands: Sequence[Shape], module: HloModule | None
) -> Shape:
    expect_operand_count(instr, operands, 2, -1)
    x = expect_array(instr, operands[0], "the operand")
    update = expect_array(instr, operands[1], "the update")
    expect_same_type(instr, (x, update), "the operand and update")
    if update.rank != x.rank or any(u > d for u, d in zip(update.dims, x.dims)):
        fail(instr, f"update {update} does not fit in operand {x}")
    _start_indices(instr, operands, 2, x.rank)
    return ArrayShape(x.dtype, x.dims)


def shape_get_tuple_element(
    instr: HloInstruction, operands: Sequence[Shape], module: HloModule | None
) -> Shape:
    expect_operand_count(instr, operands, 1)
    t = operands[0]
    if not isinstance(t, TupleShape):
        fail(instr, f"get-tuple-element needs a tuple operand, got {t}")
    index = int_attr(instr, "index")
    if not 0 <= index < len(t.elements):
        fail(instr, f"tuple index {index} out of range for {t}")
    return t.elements[index]


def shape_iota(instr: HloInstruction, operands: Sequence[Shape], module: HloModule | None) -> Shape:
    expect_operand_count(instr, operands, 0)
    out = _declared_array(instr)
    if out.rank == 0:
        fail(instr, "iota needs a result of rank >= 1")
    expect_dims_in_range(instr, (int_attr(instr, "iota_dimension"),), out.rank, "iota_dimension")
    expect_kind(instr, out, "signed unsigned float complex", "the result")
    return ArrayShape(out.dtype, out.dims)


def shape_pad(instr: HloInstruction, operands: Sequence[Shape], module: HloModule | None) -> Shape:
    """Each dim becomes ``low + high + size + (size - 1) * interior``; low/high may be negative."""
    expect_operand_count(instr, operands, 2)
    x = expect_array(instr, operands[0], "the operand")
    value = expect_scalar(instr, operands[1], "the padding value")
    expect_same_type(instr, (x, value), "the operand and padding value")
    config = instr.attr("padding", None)
    if not isinstance(config, PaddingConfig) or len(config.dims) != x.rank:
        fail(instr, f"pad of rank-{x.rank} {x} needs a padding config with {x.rank} dims")
    dims = []
    for d, (size, p) in enumerate(zip(x.dims, config.dims)):
        if p.interior < 0:
            fail(instr, f"interior padding {p.interior} of dim {d} is negative")
        new = p.low + p.high + size + max(size - 1, 0) * p.interior
        if new < 0:
            fail(instr, f"padding {p} makes dim {d} of {x} negative ({new})")
        dims.append(new)
    return ArrayShape(x.dtype, tuple(dims))


def shape_parameter(instr: HloInstruction, operands: Sequence[Shape], module: HloModule | None) -> Shape:
    expect_operand_count(instr, operands, 0)
    number = instr.attr("parameter_number", None)
    if not isinstance(number, int) or isinstance(number, bool) or number < 0:
        fail(instr, f"parameter has invalid number {number!r}")
    return instr.shape


def shape_reshape(instr: HloInstruction, operands: Sequence[Shape], module: HloModule | None) -> Shape:
    expect_operand_count(instr, operands, 1)
    x = expect_array(instr, operands[0], "the operand")
    out = _declared_array(instr)
    if x.num_elements != out.num_elements:
        fail(instr, f"reshape from {x} ({x.num_elements} elements) to {out} "
             f"({out.num_elements} elements) changes the element count")
    return ArrayShape(x.dtype, out.dims)


def shape_reverse(instr: HloInstruction, operands: Sequence[Shape], module: HloModule | None) -> Shape:
    expect_operand_count(instr, operands, 1)
    x = expect_array(instr, operands[0], "the operand")
    expect_dims_in_range(instr, int_list(instr, "dimensions"), x.rank, "dimensions")
    return ArrayShape(x.dtype, x.dims)


def shape_slice(instr: HloInstruction, operands: Sequence[Shape], module: HloModule | None) -> Shape:
    """Each dim becomes ``ceil((limit - start) / stride)``."""
    expect_operand_count(instr, operands, 1)
    x = expect_array(instr, operands[0], "the operand")
    spec = instr.attr("slice", None)
    if not isinstance(spec, tuple) or len(spec) != x.rank or not all(
        isinstance(s, SliceDim) for s in spec
    ):
        fail(instr, f"slice of rank-{x.rank} {x} needs {x.rank} [start:limit:stride] entries")
    dims = []
    for d, (s, size) in enumerate(zip(spec, x.dims)):
        if s.stride < 1 or not 0 <= s.start <= s.limit <= size:
            fail(instr, f"slice {s} of dim {d} is invalid for size {size}")
        dims.append(-(-(s.limit - s.start) // s.stride))
    return ArrayShape(x.dtype, tuple(dims))


def shape_transpose(instr: HloInstruction, operands: Sequence[Shape], module: HloModule | None) -> Shape:
    """Result dim ``i`` is operand dim ``dimensions[i]``."""
    expect_operand_count(instr, operands, 1)
    x = expect_array(instr, operands[0], "the operand")
    perm = int_list(instr, "dimensions")
    if sorted(perm) != list(range(x.rank)):
        fail(instr, f"transpose dimensions {list(perm)} are not a permutation of rank {x.rank}")
    return ArrayShape(x.dtype, tuple(x.dims[p] for p in perm))


def shape_tuple(instr: HloInstruction, operands: Sequence[Shape], module: HloModule | None) -> Shape:
    return TupleShape(tuple(operands))


