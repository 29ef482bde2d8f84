"""Appending instructions to a computation under construction, shapes inferred.

The VJP rules write the backward graph through a ``GraphBuilder``: each helper emits one HLO
instruction with a fresh name and the shape ``fusion.shapes.inference`` gives it (so every
instruction the rules write has a shape the verifier agrees with), and returns its name.

>>> b = GraphBuilder(ComputationTable({}))
>>> x = b.parameter(0, ArrayShape("f32", (2, 3)), "x")
>>> s = b.reduce_sum(b.multiply(x, x), (1,))
>>> str(b.shape(s)), [i.opcode for i in b.instructions]
('f32[2]', ['parameter', 'multiply', 'constant', 'reduce'])
"""
from __future__ import annotations

import re
from typing import Any, Iterable, Sequence

from fusion.ir.attributes import Literal, PaddingConfig, PaddingDim, SliceDim
from fusion.ir.element_types import element_type
from fusion.ir.hlo_module import HloComputation, HloInstruction, binary_computation
from fusion.ir.shape import ArrayShape, Shape, TupleShape
from fusion.shapes.inference import infer_shape

_SUFFIX = re.compile(r"\.\d+$")


class ComputationTable:
    """The computations a backward module will hold, by name; answers what shape inference
    asks of a module (``has_computation``, ``computation``) and hands out fresh names."""

    def __init__(self, computations: dict[str, HloComputation]) -> None:
        self.computations = dict(computations)
        self._reducers: dict[tuple[str, str], str] = {}

    def has_computation(self, name: str) -> bool:
        return name in self.computations

    def computation(self, name: str) -> HloComputation:
        return self.computations[name]

    def fresh_name(self, hint: str) -> str:
        """``hint`` when no computation has that name, else ``hint.N``."""
        if hint not in self.computations:
            return hint
        base = _SUFFIX.sub("", hint) or "comp"
        n = 1
        while f"{base}.{n}" in self.computations:
            n += 1
        return f"{base}.{n}"

    def add(self, computation: HloComputation) -> str:
        self.computations[computation.name] = computation
        return computation.name

    def scalar_reducer(self, opcode: str, dtype: str) -> str:
        """A computation ``(a, b) -> opcode(a, b)`` over ``dtype`` scalars (built once)."""
        key = (opcode, dtype)
        if key not in self._reducers:
            name = self.fresh_name(f"vjp_{opcode}_{dtype}")
            self.add(binary_computation(name, opcode, dtype))
            self._reducers[key] = name
        return self._reducers[key]


class GraphBuilder:
    """Instructions of one computation being written, with their shapes and fresh names."""

    def __init__(self, table: ComputationTable, taken: Iterable[str] = ()) -> None:
        self.table = table
        self.instructions: list[HloInstruction] = []
        self._shapes: dict[str, Shape] = {}
        self._taken: set[str] = set(taken)
        self._counters: dict[str, int] = {}

    # -- bookkeeping ---------------------------------------------------------------------------
    def shape(self, name: str) -> Shape:
        return self._shapes[name]

    def array_shape(self, name: str) -> ArrayShape:
        shape = self._shapes[name]
        assert isinstance(shape, ArrayShape), f"{name} is a tuple"
        return shape

    def fresh(self, hint: str) -> str:
        """``hint`` itself when free, else its stem with the next free ``.N`` suffix."""
        if hint not in self._taken:
            self._taken.add(hint)
            return hint
        base = _SUFFIX.sub("", hint) or "v"
        n = self._counters.get(base, 0)
        while True:
            n += 1
            candidate = f"{base}.{n}"
            if candidate not in self._taken:
                self._counters[base] = n
                self._taken.add(candidate)
                return candidate

    def append(self, instr: HloInstruction) -> str:
        """Add an instruction as is (its name must be fresh)."""
        self._taken.add(instr.name)
        self._shapes[instr.name] = instr.shape
        self.instructions.append(instr)
        return instr.name

    def redefine(self, name: str, opcode: str, operands: Sequence[str],
                 attributes: Sequence[tuple[str, Any]] = ()) -> None:
        """Compute the existing value ``name`` (same shape) as another instruction, which may
        read values written after it (dead-code elimination puts operands first again)."""
        k = next(k for k, instr in enumerate(self.instructions) if instr.name == name)
        old = self.instructions[k]
        self.instructions[k] = HloInstruction(name, opcode, old.shape, tuple(operands),
                                              tuple(attributes), old.location)

    def copy(self, instr: HloInstruction, operands: Sequence[str]) -> str:
        """A copy of a forward instruction reading ``operands``, under a fresh name."""
        name = self.fresh(instr.name)
        return self.append(instr.replace(name=name, operands=tuple(operands)))

    def emit(self, opcode: str, operands: Sequence[str], attributes: Sequence[tuple[str, Any]] = (),
             shape: Shape | None = None, hint: str | None = None) -> str:
        """One new instruction; its shape is inferred unless given."""
        # Some rules (dot, convolution) take the element type from the declared shape: the
        # probe declares the first array operand's.
        dtype = next((self._shapes[o].dtype for o in operands
                      if isinstance(self._shapes[o], ArrayShape)), "f32")
        probe = HloInstruction(hint or opcode, opcode, ArrayShape(dtype, ()), tuple(operands),
                               tuple(attributes))
        if shape is None:
            shape = infer_shape(probe, [self._shapes[o] for o in operands], self.table)
        return self.append(probe.replace(name=self.fresh(hint or opcode), shape=shape))

    def parameter(self, number: int, shape: Shape, hint: str) -> str:
        return self.emit("parameter", (), (("parameter_number", number),), shape, hint)

    # -- values --------------------------------------------------------------------------------
    def scalar(self, value: Any, dtype: str) -> str:
        """A scalar constant; a float is rounded to ``dtype`` (as the printed text will be)."""
        etype = element_type(dtype)
        if etype.is_float:
            value = float(etype.numpy_dtype().type(value))
        elif etype.is_complex:
            value = complex(etype.numpy_dtype().type(value))
        return self.emit("constant", (), (("literal", Literal((), (value,))),),
                         ArrayShape(dtype, ()))

    def full(self, value: Any, shape: ArrayShape) -> str:
        """``value`` broadcast to ``shape`` (its layout kept, so it can stand for a value)."""
        scalar = self.scalar(value, shape.dtype)
        if not shape.dims:
            return scalar
        return self.emit("broadcast", (scalar,), (("dimensions", ()),), shape)

    def zeros(self, shape: Shape) -> str:
        """Zeros of any shape (a tuple of zeros for a tuple shape)."""
        if isinstance(shape, TupleShape):
            return self.tuple([self.zeros(e) for e in shape.elements])
        return self.full(False if shape.dtype == "pred" else 0, shape)

    def full_like(self, value: Any, name: str) -> str:
        return self.full(value, self.array_shape(name).with_layout(None))

    def tuple(self, elements: Sequence[str]) -> str:
        return self.emit("tuple", elements)

    def get_tuple_element(self, name: str, index: int) -> str:
        return self.emit("get-tuple-element", (name,), (("index", index),))

    # -- elementwise ---------------------------------------------------------------------------
    def add(self, a: str, b: str) -> str:
        return self.emit("add", (a, b))

    def subtract(self, a: str, b: str) -> str:
        return self.emit("subtract", (a, b))

    def multiply(self, a: str, b: str) -> str:
        return self.emit("multiply", (a, b))

    def divide(self, a: str, b: str) -> str:
        return self.emit("divide", (a, b))

    def negate(self, a: str) -> str:
        return self.emit("negate", (a,))

    def unary(self, opcode: str, a: str) -> str:
        return self.emit(opcode, (a,))

    def scale(self, a: str, factor: float) -> str:
        """``a * factor`` (a constant of ``a``'s type)."""
        return self.multiply(a, self.full_like(factor, a))

    def compare(self, a: str, b: str, direction: str) -> str:
        return self.emit("compare", (a, b), (("direction", direction),))

    def select(self, predicate: str, on_true: str, on_false: str) -> str:
        return self.emit("select", (predicate, on_true, on_false))

    def convert(self, a: str, dtype: str) -> str:
        if self.array_shape(a).dtype == dtype:
            return a
        shape = self.array_shape(a).with_layout(None).with_dtype(dtype)
        return self.emit("convert", (a,), shape=shape)

    # -- data movement -------------------------------------------------------------------------
    def broadcast(self, a: str, dims: tuple[int, ...], dimensions: Sequence[int]) -> str:
        """``a`` broadcast to ``dims``; operand dim ``i`` becomes result dim ``dimensions[i]``."""
        shape = ArrayShape(self.array_shape(a).dtype, tuple(dims))
        return self.emit("broadcast", (a,), (("dimensions", tuple(dimensions)),), shape)

    def reshape(self, a: str, dims: tuple[int, ...]) -> str:
        if self.array_shape(a).dims == tuple(dims):
            return a
        return self.emit("reshape", (a,), shape=ArrayShape(self.array_shape(a).dtype, tuple(dims)))

    def transpose(self, a: str, permutation: Sequence[int]) -> str:
        if list(permutation) == list(range(len(permutation))):
            return a
        return self.emit("transpose", (a,), (("dimensions", tuple(permutation)),))

    def slice(self, a: str, starts: Sequence[int], limits: Sequence[int],
              strides: Sequence[int] | None = None) -> str:
        strides = strides or [1] * len(starts)
        dims = tuple(SliceDim(s, l, t) for s, l, t in zip(starts, limits, strides))
        return self.emit("slice", (a,), (("slice", dims),))

    def pad(self, a: str, value: str, config: Sequence[tuple[int, int, int]]) -> str:
        padding = PaddingConfig(tuple(PaddingDim(lo, hi, interior) for lo, hi, interior in config))
        return self.emit("pad", (a, value), (("padding", padding),))

    def reduce(self, a: str, init: str, dims: Sequence[int], opcode: str) -> str:
        """``a`` reduced over ``dims`` with the scalar ``opcode`` (add, maximum, and, ...)."""
        if not dims:
            return a
        reducer = self.table.scalar_reducer(opcode, self.array_shape(a).dtype)
        return self.emit("reduce", (a, init), (("dimensions", tuple(sorted(dims))),
                                                ("to_apply", reducer)))

    def reduce_sum(self, a: str, dims: Sequence[int]) -> str:
        if not dims:
            return a
        return self.reduce(a, self.scalar(0, self.array_shape(a).dtype), dims, "add")

    def sum_all(self, a: str) -> str:
        return self.reduce_sum(a, tuple(range(self.array_shape(a).rank)))

    def sum_to(self, a: str, dims: tuple[int, ...]) -> str:
        """``a`` summed down to a scalar when ``dims`` is ``()`` (a scalar operand that was
        implicitly broadcast, as clamp allows), otherwise ``a`` itself."""
        if dims == self.array_shape(a).dims:
            return a
        return self.sum_all(a)
