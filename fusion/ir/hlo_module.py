"""The HLO IR: instructions, computations and modules as frozen dataclasses.

Names are stored without the ``%`` sigil.  Operands are referenced by name within the
instruction's computation; called computations (``calls``, ``to_apply``, ``condition``,
``body``, ``branch_computations``, ...) by name within the module.

Attributes are an ordered tuple of ``(key, value)`` pairs with XLA's spelling of the key; two
pseudo-attributes hold what XLA writes in operand position: ``literal`` (a ``Literal``) for
``constant(...)`` and ``parameter_number`` (an ``int``) for ``parameter(N)``.

>>> i = HloInstruction("t", "transpose", ArrayShape("f32", (3, 2)), ("p",),
...                    (("dimensions", (1, 0)),))
>>> i.attr("dimensions")
(1, 0)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Iterator

from fusion.errors import MissingAttributeError, NotAnArrayError, UnknownNameError
from fusion.ir.shape import ArrayShape, Shape

_MISSING = object()

# Attribute keys that name called computations, and whether the value is a tuple of names.
CALLED_COMPUTATION_KEYS: dict[str, bool] = {
    "branch_computations": True,
    "body": False,
    "called_computations": True,
    "calls": False,
    "condition": False,
    "false_computation": False,
    "scatter": False,
    "select": False,
    "to_apply": False,
    "true_computation": False,
}


@dataclass(frozen=True)
class SourceLocation:
    """1-based line and column of a token in the HLO text."""

    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.line}:{self.column}"


@dataclass(frozen=True)
class HloInstruction:
    """One instruction: ``[ROOT] name = shape opcode(operands), attributes``."""

    name: str
    opcode: str
    shape: Shape
    operands: tuple[str, ...] = ()
    attributes: tuple[tuple[str, Any], ...] = ()
    location: SourceLocation | None = field(default=None, compare=False, repr=False)

    def attr(self, key: str, default: Any = _MISSING) -> Any:
        """The value of attribute ``key``; if absent and no default, ``MissingAttributeError``
        (a ``KeyError`` too) naming the op, the attribute and the instruction's HLO line:column.

        >>> HloInstruction("n", "negate", ArrayShape("f32", ()), ("p",),
        ...                location=SourceLocation(3, 5)).attr("dimensions")
        Traceback (most recent call last):
        ...
        fusion.errors.MissingAttributeError: 3:5: negate 'n' has no attribute 'dimensions' (in n)
        """
        for k, v in self.attributes:
            if k == key:
                return v
        if default is _MISSING:
            raise MissingAttributeError(f"{self.opcode} {self.name!r} has no attribute {key!r}",
                                        **self._located())
        return default

    def _located(self) -> dict[str, Any]:
        """The location keywords of a ``FusionCompilerError`` about this instruction."""
        loc = self.location
        return {"line": loc.line if loc else None, "column": loc.column if loc else None,
                "where": self.name}

    def has_attr(self, key: str) -> bool:
        return any(k == key for k, _ in self.attributes)

    @property
    def array_shape(self) -> ArrayShape:
        """The shape, asserting it is an array (most ops): ``NotAnArrayError`` (a located
        ``TypeError``) when it is a tuple."""
        if not isinstance(self.shape, ArrayShape):
            raise NotAnArrayError(f"{self.opcode} {self.name!r} has tuple shape {self.shape}",
                                  **self._located())
        return self.shape

    def called_computations(self) -> tuple[str, ...]:
        """Names of the computations this instruction calls, in attribute order."""
        names: list[str] = []
        for k, v in self.attributes:
            if k in CALLED_COMPUTATION_KEYS:
                names.extend(v if isinstance(v, tuple) else (v,))
        return tuple(names)

    def replace(self, **changes: Any) -> "HloInstruction":
        fields = {
            "name": self.name,
            "opcode": self.opcode,
            "shape": self.shape,
            "operands": self.operands,
            "attributes": self.attributes,
            "location": self.location,
        }
        fields.update(changes)
        return HloInstruction(**fields)


@dataclass(frozen=True)
class HloComputation:
    """A computation: instructions in textual (post-order for valid modules) order."""

    name: str
    instructions: tuple[HloInstruction, ...]
    root_name: str
    is_entry: bool = False
    location: SourceLocation | None = field(default=None, compare=False, repr=False)

    @cached_property
    def _by_name(self) -> dict[str, HloInstruction]:
        return {i.name: i for i in self.instructions}

    def instruction(self, name: str) -> HloInstruction:
        try:
            return self._by_name[name]
        except KeyError:
            raise UnknownNameError(f"computation {self.name!r} has no instruction {name!r}",
                                   where=self.name) from None

    def has_instruction(self, name: str) -> bool:
        return name in self._by_name

    @property
    def root(self) -> HloInstruction:
        return self.instruction(self.root_name)

    @cached_property
    def parameters(self) -> tuple[HloInstruction, ...]:
        """Parameter instructions ordered by parameter number."""
        params = [i for i in self.instructions if i.opcode == "parameter"]
        return tuple(sorted(params, key=lambda i: i.attr("parameter_number")))

    @cached_property
    def users(self) -> dict[str, tuple[str, ...]]:
        """For each instruction name, the names of the instructions that use it (in order)."""
        result: dict[str, list[str]] = {i.name: [] for i in self.instructions}
        for instr in self.instructions:
            for op in dict.fromkeys(instr.operands):
                if op in result:
                    result[op].append(instr.name)
        return {k: tuple(v) for k, v in result.items()}

    def computed_from(self, name: str, target: str) -> bool:
        """Whether instruction ``name`` is ``target`` or computed from it, through any chain
        of operands.

        >>> f32 = ArrayShape("f32", ())
        >>> c = HloComputation("c", (HloInstruction("p", "parameter", f32),
        ...                          HloInstruction("n", "negate", f32, ("p",))), "n")
        >>> c.computed_from("n", "p"), c.computed_from("p", "n")
        (True, False)
        """
        seen: set[str] = set()
        stack = [name]
        while stack:
            current = stack.pop()
            if current == target:
                return True
            if current not in seen:
                seen.add(current)
                stack.extend(self.instruction(current).operands)
        return False

    def __iter__(self) -> Iterator[HloInstruction]:
        return iter(self.instructions)


def binary_computation(name: str, opcode: str, dtype: str) -> HloComputation:
    """The scalar computation ``(a, b) -> opcode(a, b)`` over ``dtype`` (a reducer's).

    >>> [i.opcode for i in binary_computation("max", "maximum", "f32")]
    ['parameter', 'parameter', 'maximum']
    """
    scalar = ArrayShape(dtype, ())
    return HloComputation(name, (
        HloInstruction("a", "parameter", scalar, (), (("parameter_number", 0),)),
        HloInstruction("b", "parameter", scalar, (), (("parameter_number", 1),)),
        # A reducer returns its operands' type (the and/or reducers combine preds).
        HloInstruction("r", opcode, scalar, ("a", "b"))), "r")


@dataclass(frozen=True)
class HloModule:
    """A module: header attributes kept as text, computations in textual order.

    ``stack_frames`` keeps the module-level stack-frame tables (``FileNames`` ...
    ``StackFrames``) verbatim, as recent XLA prints them after the header.
    """

    name: str
    computations: tuple[HloComputation, ...]
    entry_name: str
    attributes: tuple[tuple[str, str], ...] = ()
    stack_frames: str = ""

    @cached_property
    def _by_name(self) -> dict[str, HloComputation]:
        return {c.name: c for c in self.computations}

    def computation(self, name: str) -> HloComputation:
        try:
            return self._by_name[name]
        except KeyError:
            raise UnknownNameError(f"module {self.name!r} has no computation {name!r}",
                                   where=self.name) from None

    def has_computation(self, name: str) -> bool:
        return name in self._by_name

    @property
    def entry(self) -> HloComputation:
        return self.computation(self.entry_name)

    def fusions(self) -> tuple[tuple[HloComputation, HloInstruction], ...]:
        """Every fusion instruction with the computation holding it."""
        return tuple(
            (c, i) for c in self.computations for i in c.instructions if i.opcode == "fusion"
        )
