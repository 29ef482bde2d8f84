"""Emitting the values of a fused computation at index tensors (the index-expression emitter).

A kernel works on rank-K tensors: the output dims of the tile first, then one axis per reduced
dim of every reduce in the fusion.  An *index* is an ``AffineExpr`` over dim variables (each an
``arange`` living on one axis) and symbols (runtime scalars such as clamped dynamic-slice
starts).  ``ValueEmitter.value(name, indices)`` appends the lines computing instruction
``name`` at those indices and returns the identifier holding it; results are memoized by
(instruction, indices), so a producer read through the same map by several users is emitted
once (the computation partitioner's point).  The rule for each opcode lives in
``lowering.rules`` (one rule per opcode, alphabetical); the emitter receives that table as its
``rule_for`` (so the rules, which call back into the emitter, are not imported here).  A failure
inside a rule that is not already one of our errors is re-raised as a ``LoweringError`` naming
the instruction.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Union

from fusion.ir.element_types import ElementType
from fusion.errors import FusionCompilerError, LoweringError, UnsupportedOpError
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.ir.shape import ArrayShape
from fusion.opcodes import traits
from tiling.maps.affine_expr import (
    AffineExpr,
    Constant,
    DimExpr,
    FloorDivExpr,
    ModExpr,
    SumExpr,
    SymbolExpr,
    d,
    s,
)
from tiling.maps.expr_variables import used_variables
from triton_backend.lowering.emitter.index_arithmetic import render_affine
from triton_backend.lowering.emitter.identifiers import IdentifierAllocator

Value = Union[str, tuple[str, ...]]  # noqa: UP007 - a runtime alias, not an annotation
#: A lowering rule: ``rule(emitter, instr, indices)`` emits ``instr`` at ``indices``.
Rule = Callable[["ValueEmitter", HloInstruction, tuple[AffineExpr, ...]], Value]
#: The rule table: the rule lowering an instruction (``lowering.rules.rule_for``).
RuleTable = Callable[[HloInstruction], Rule]


def _no_rule_table(instr: HloInstruction) -> Rule:
    raise LoweringError(f"no lowering rule table was given to this emitter, so {instr.opcode} "
                        f"{instr.name!r} cannot be emitted (pass lowering.rules.rule_for)",
                        where=instr.name)


@dataclass(frozen=True)
class IndexVar:
    """One dim variable of the kernel: ``name`` holds ``offset + arange(block)`` on ``axis``.

    Its values lie in ``[0, upper]`` (tile offsets are non-negative); ``extent`` is the size of
    the dim it walks (lanes at or beyond it are masked).  An output tile's variable also
    knows its ``start`` (the text of its first index) and its ``tile`` size (lanes from
    ``start + tile`` on belong to the next program).
    """

    name: str
    axis: int
    block: int
    extent: int
    upper: int
    start: str | None = None
    tile: int | None = None


@dataclass(frozen=True)
class ExternalBuffer:
    """A buffer the kernel reads: a fusion parameter or an array constant passed as one."""

    pointer: str
    instruction: HloInstruction
    parameter_number: int | None


@dataclass
class _Scope:
    """An open :meth:`ValueEmitter.block`: where its header line is, the indentation and the
    memo outside it, how many dims and symbols were defined before it, whether it hoists."""

    position: int
    indent: str
    memo: dict
    dims: int
    symbols: int
    hoist: bool


@dataclass
class ValueEmitter:
    """Mutable builder of one kernel body (used only while rendering one kernel)."""

    module: HloModule
    computation: HloComputation
    axis_blocks: list[int]
    names: IdentifierAllocator
    reduce_axes: dict[str, tuple[int, ...]]
    lines: list[str] = field(default_factory=list)
    dims: list[IndexVar] = field(default_factory=list)
    symbols: list[str] = field(default_factory=list)
    symbol_axes: list[frozenset[int]] = field(default_factory=list)
    memo: dict = field(default_factory=dict)
    #: Every (instruction, indices) read from memory, for the kernel file's header comment.
    reads: set = field(default_factory=set)
    buffers: dict[str, ExternalBuffer] = field(default_factory=dict)
    helper_functions: dict[str, str] = field(default_factory=dict)
    helper_names: dict[str, str] = field(default_factory=dict)
    indent: str = "    "
    #: Chunk of looped reductions (None: reductions are persistent).
    reduction_chunk: int | None = None
    #: Width of index arithmetic: 64 when some buffer has more than 2^31 - 1 elements.
    index_bits: int = 32
    #: Reduce tensor axes by halving steps (``reduction_rules.emit_tree_reduce``) instead of
    #: ``tl.reduce``: for the Triton interpreter, whose ``tl.reduce`` calls the combiner once
    #: per element in Python (a million-element reduction took minutes).
    tree_reductions: bool = False
    #: The reduction split among programs and what its code defined
    #: (``rules.split_reduction.SplitEmission``); None when no reduction is split.
    split: object = None
    #: Per kernel axis, the ``range`` arguments (``"first, end, step"``, names bound in the
    #: kernel) of the looped reductions over it, where a template knows that the chunks
    #: outside add nothing (an attention mask's band); absent axes loop from 0 to the extent.
    loop_bounds: dict[int, str] = field(default_factory=dict)
    #: The output tile's dim variables (``kernel_file`` sets them; templates leave none): a
    #: persistent reduce over a dim one of them walks whole reduces along it
    #: (``reduction_rules._tile_dims``).
    tile_dims: tuple = ()
    #: The scans ``kernel_plan`` computes along the tile (``rules.tile_scan``).
    tile_scans: frozenset[str] = frozenset()
    #: The indexing analysis' output -> operand maps per instruction (``operand_indices``).
    index_maps: dict = field(default_factory=dict)
    #: Kernel axes of the indices each value identifier was first computed at (a value that
    #: spans none may be a 0-d tensor; see :meth:`spanning`).
    value_axes: dict[str, frozenset[int]] = field(default_factory=dict)
    #: The rule lowering each instruction (``lowering.rules.rule_for``); emitters that only
    #: compute indices or bounds need none.
    rule_for: RuleTable = _no_rule_table
    #: The dim variables and symbols made at the outermost call's indentation while it runs,
    #: by their arguments (:meth:`_rerun_stable`).
    _rerun_variables: dict = field(default_factory=dict)
    #: Rules now nested in ``value`` (0: none) and the indentation of the outermost call.
    _nesting: int = 0
    _outer_indent: str | None = ""
    #: The blocks now open, outermost first (see :meth:`block`).
    _scopes: list[_Scope] = field(default_factory=list)

    @property
    def index_dtype(self) -> str:
        return f"tl.int{self.index_bits}"

    # --- variables --------------------------------------------------------------------------
    @property
    def rank(self) -> int:
        return len(self.axis_blocks)

    def axis_view(self, axis: int) -> str:
        """The subscript placing a 1-D tensor on ``axis`` of the rank-K kernel space."""
        return "[" + ", ".join(":" if a == axis else "None" for a in range(self.rank)) + "]"

    def new_dim(self, hint: str, axis: int, extent: int, start: str | None = None,
                upper: int | None = None, tile: int | None = None) -> DimExpr:
        """A fresh dim variable ``start + arange(block)`` on ``axis`` (block from the axis).

        ``upper`` bounds its values (default ``block - 1``, right when ``start`` is None);
        ``tile``: an output tile's size along it.
        """
        def make() -> DimExpr:
            block = self.axis_blocks[axis]
            name = self.names.fresh(hint)
            lanes = f"tl.arange(0, {block})"
            if self.index_bits == 64:
                lanes = f"{lanes}.to(tl.int64)"
            base = lanes if start is None else f"({start} + {lanes})"
            self.emit(f"{name} = {base}{self.axis_view(axis)}")
            self.dims.append(IndexVar(name, axis, block, extent,
                                      block - 1 if upper is None else upper, start, tile))
            return d(len(self.dims) - 1)

        return self._rerun_stable(("dim", hint, axis, extent, start, upper, tile), make)

    def new_symbol(self, expr_text: str, hint: str,
                   from_indices: tuple[AffineExpr, ...] = (),
                   value: str | None = None) -> AffineExpr:
        """A runtime value bound to a symbol usable in index expressions.

        ``from_indices`` are the indices it was read at (it spans their axes; none: a scalar).
        ``value``, the identifier ``expr_text`` computes from, narrows that to the axes the
        value really spans: a start read through a broadcast of a scalar is itself a scalar,
        and a mask compared from it must be broadcast (see :meth:`comparable_index`).
        """
        def make() -> AffineExpr:
            axes = frozenset(self._axes_of(from_indices))
            if value is not None:
                axes &= self.value_axes.get(value, axes)
            self.symbols.append(self.bind(expr_text, hint))
            self.symbol_axes.append(axes)
            return s(len(self.symbols) - 1)

        return self._rerun_stable(("symbol", expr_text, hint, tuple(from_indices), value), make)

    def _rerun_stable(self, key: tuple, make):
        """``make()``, or, in the outermost call's indentation while it runs, what ``make``
        made for ``key`` there before.  A request deeper than ``_MAX_NESTING`` aborts every
        rule in progress, and the outermost call runs them again once it has emitted it:
        a rule that makes a variable before asking for operands (a persistent reduce's
        dims, a dynamic slice's clamped start) must get the same one back, or the operand
        values memoized under the old one are never found and the rerun never gets deeper
        (a compile hang)."""
        if self._nesting == 0 or self.indent != self._outer_indent:
            return make()
        if key not in self._rerun_variables:
            self._rerun_variables[key] = make()
        return self._rerun_variables[key]

    def _axes_of(self, indices: tuple[AffineExpr, ...]) -> set[int]:
        axes: set[int] = set()
        for e in indices:
            dims, syms = used_variables(e)
            axes.update(self.dims[i].axis for i in dims)
            for j in syms:
                axes.update(self.symbol_axes[j])
        return axes

    def emit(self, line: str) -> None:
        self.lines.append(self.indent + line)

    @contextmanager
    def block(self, header: str, hoist: bool = False, hoist_at: int | None = None) -> Iterator[None]:
        """Emit ``header`` (e.g. a ``for``) and the lines of the ``with`` body indented under it.

        Values emitted inside are forgotten afterwards: they are not defined after the loop.
        With ``hoist`` (a loop whose body does not change what it reads), a reduction asked
        for inside at indices defined before the block is emitted before ``header`` instead
        (:meth:`_hoisted`): once, not once per iteration, and still known after the block;
        ``hoist_at`` (a line index, default the header's) places it earlier, above lines
        that only belong to the loop (its accumulators).
        """
        position = len(self.lines) if hoist_at is None else hoist_at
        scope = _Scope(position, self.indent, dict(self.memo), len(self.dims),
                       len(self.symbols), hoist)
        self.emit(header)
        self._scopes.append(scope)
        self.indent += "    "
        try:
            yield
        finally:
            self._scopes.pop()
            self.indent, self.memo = scope.indent, scope.memo

    def _hoist_target(self, key: tuple) -> int | None:
        """The outermost enclosing hoisting block (index into ``_scopes``) that reduction
        ``key`` can be emitted before: its indices use no variable defined inside it; None
        when ``key`` is no reduction or no such block is open."""
        if not self._scopes or not traits(self.instruction(key[0]).opcode).reduction:
            return None
        dims: set[int] = set()
        syms: set[int] = set()
        for e in key[1]:
            used_dims, used_syms = used_variables(e)
            dims.update(used_dims)
            syms.update(used_syms)
        target = None
        for k in reversed(range(len(self._scopes))):
            scope = self._scopes[k]
            if not scope.hoist or max(dims, default=-1) >= scope.dims or max(syms, default=-1) >= scope.symbols:
                break
            target = k
        return target

    def _hoisted(self, key: tuple, target: int) -> Value:
        """Emit ``key`` before the header of block ``_scopes[target]``, from the values known
        there, and make it (and what it computed) known there and in every block inside.

        Blocks opened while emitting it hoist only within it: the lines go to a list of
        their own, spliced in afterwards.  No request is handed back to the outermost call
        (``_Deeper``) meanwhile: that call would emit it inside the loop.
        """
        scope = self._scopes[target]
        saved = self.lines, self.indent, self.memo, self._scopes, self._outer_indent
        self.lines, self.indent, self.memo = [], scope.indent, dict(scope.memo)
        self._scopes, self._outer_indent = [], None
        self._nesting += 1
        try:
            result = self._compute(key)
            hoisted, known = self.lines, self.memo
        finally:
            self._nesting -= 1
            self.lines, self.indent, self.memo, self._scopes, self._outer_indent = saved
        self.lines[scope.position:scope.position] = hoisted
        added = {k: v for k, v in known.items() if k not in scope.memo}
        for inner in self._scopes[target:]:
            inner.position += len(hoisted)  # every later header moved down
            inner.memo.update(added)
        self.memo.update(added)
        return result

    def bind(self, expr: str, hint: str) -> str:
        name = self.names.fresh(hint)
        self.emit(f"{name} = {expr}")
        return name

    def index_text(self, expr: AffineExpr) -> str:
        return render_affine(expr, [v.name for v in self.dims], self.symbols)

    def index_tensor(self, expr: AffineExpr) -> str:
        """Like ``index_text`` but always a tensor (a constant index becomes ``tl.full``)."""
        if isinstance(expr, Constant):
            return f"tl.full([], {expr.value}, {self.index_dtype})"
        return f"({self.index_text(expr)})"

    def shape_of(self, indices: tuple[AffineExpr, ...]) -> tuple[int, ...]:
        """The static tensor shape spanned by index expressions (1 on unused axes)."""
        axes = self._axes_of(indices)
        return tuple(self.axis_blocks[a] if a in axes else 1 for a in range(self.rank))

    def in_bounds(self, indices: tuple[AffineExpr, ...], sizes: tuple[int, ...]) -> str | None:
        """A mask text true where every index lies in ``[0, size)`` (None: provably always).

        An index spanning no kernel axis is compared as a block (:meth:`comparable_index`).
        """
        checks = []
        for e, size in zip(indices, sizes):
            low, high = self.bounds(e)
            if low >= 0 and high < size:
                continue
            text = self.comparable_index(e, indices)
            if low < 0:
                checks.append(f"({text} >= 0)")
            if high >= size:
                checks.append(f"({text} < {size})")
        return " & ".join(checks) if checks else None

    def comparable_index(self, e: AffineExpr, indices: tuple[AffineExpr, ...]) -> str:
        """``e``'s text, broadcast to the block of ``indices`` when ``e`` spans no kernel axis
        but ``indices`` do (bound once per shape), so a mask compared from it is a block.

        The Triton 3.9 interpreter labels a 0-d comparison's result with its operands' dtype,
        so splatting a scalar comparison to a block gives an int32 mask that
        ``tl.load``/``tl.store`` reject ("mask has unsupported dtype"); comparing the
        broadcast index instead gives a bool block.  On a GPU the broadcast is free.
        """
        text = self.index_text(e)
        if isinstance(e, Constant) or self._axes_of((e,)) or not self._axes_of(tuple(indices)):
            return text
        shape = self.shape_of(tuple(indices))
        key = ("block_index", text, shape)
        cached = self.memo.get(key)
        if cached is None:
            cached = self.bind(f"tl.broadcast_to({text}, {list(shape)})", "block_index")
            self.memo[key] = cached
        return cached

    def bounds(self, e: AffineExpr) -> tuple[float, float]:
        """Interval of ``e`` over the dim variables' blocks (symbols: unbounded), as the kernel
        computes it: Triton's ``//`` and ``%`` truncate toward zero like C, so on lanes where a
        dividend is negative (other concatenate pieces, padding) a quotient rounds up and a
        remainder is negative; the masks built from these bounds must still hold there.

        >>> from fusion.ir.hlo_module import HloComputation, HloModule
        >>> from tiling.maps.affine_expr import d
        >>> em = ValueEmitter(HloModule("m", (), ""), HloComputation("c", (), ""), [8], None, {},
        ...                   dims=[IndexVar("i0", 0, 8, 8, 7)])
        >>> em.bounds((d(0) - 2) // 4), em.bounds((d(0) - 2) % 4), em.bounds(d(0) % 4)
        ((0, 1), (-3, 3), (0, 3))
        """
        if isinstance(e, Constant):
            return e.value, e.value
        if isinstance(e, DimExpr):
            return 0, self.dims[e.index].upper
        if isinstance(e, SymbolExpr):
            return float("-inf"), float("inf")
        if isinstance(e, FloorDivExpr):  # truncation is monotone: bound the ends
            lo, hi = self.bounds(e.dividend)
            return _truncating_div(lo, e.divisor), _truncating_div(hi, e.divisor)
        if isinstance(e, ModExpr):
            lo, hi = self.bounds(e.dividend)
            return (0 if lo >= 0 else 1 - e.divisor), (0 if hi <= 0 else e.divisor - 1)
        if isinstance(e, SumExpr):
            lo = hi = e.constant
            for atom, coeff in e.terms:
                a, b = self.bounds(atom)
                lo, hi = (lo + coeff * a, hi + coeff * b) if coeff > 0 else (lo + coeff * b, hi + coeff * a)
            return lo, hi
        return float("-inf"), float("inf")

    # --- values -----------------------------------------------------------------------------
    def instruction(self, name: str) -> HloInstruction:
        return self.computation.instruction(name)

    def value(self, name: str, indices: tuple[AffineExpr, ...]) -> Value:
        """The identifier(s) holding instruction ``name`` at ``indices`` (emitted once).

        Rules ask for their operands' values, so emitting a chain of n ops nests n rules.
        The nesting is bounded: below ``_MAX_NESTING`` rules (outside loop bodies) the
        request is handed back to the outermost call (``_Deeper``), which emits that operand
        first and then asks again, now answered from the memo (an explicit stack of pending
        requests, each retried at most once per ``_MAX_NESTING`` levels below it)."""
        key = (name, tuple(indices))
        cached = self.memo.get(key)
        if cached is not None:
            return cached
        if self._nesting == 0:
            return self._value_from_stack(key)
        target = self._hoist_target(key)
        if target is not None:
            return self._hoisted(key, target)
        if self._nesting >= _MAX_NESTING and self.indent == self._outer_indent:
            raise _Deeper(key)
        self._nesting += 1
        try:
            return self._compute(key)
        finally:
            self._nesting -= 1

    def _value_from_stack(self, key: tuple) -> Value:
        self._outer_indent = self.indent
        self._rerun_variables = {}
        pending = [key]
        while pending:
            if pending[-1] in self.memo:
                pending.pop()
                continue
            self._nesting = 1
            try:
                self._compute(pending[-1])
                pending.pop()
            except _Deeper as deeper:  # emit the deeper operand first, then retry
                pending.append(deeper.key)
            finally:
                self._nesting = 0
        return self.memo[key]

    def _compute(self, key: tuple) -> Value:
        name, indices = key
        instr = self.instruction(name)
        if traits(instr.opcode).given_value:  # read from memory (or the HLO text)
            self.reads.add(key)
        rule = self.rule_for(instr)
        try:
            result = rule(self, instr, tuple(indices))
        except (FusionCompilerError, _Deeper):
            raise
        except Exception as err:  # noqa: BLE001 - a bug in a rule: say which instruction
            raise _lowering_error(instr, indices, err) from err
        return self.remember(name, indices, result)

    def remember(self, name: str, indices: tuple[AffineExpr, ...], result: Value) -> Value:
        """Make ``result`` the answer for ``name`` at ``indices`` in the open block (a
        template's or a shared loop's value, as :meth:`value` records a rule's); returns it.

        Operands are emitted before their users, so the first record of an identifier is
        where it was computed; a pass-through (broadcast, reshape, ...) keeps its axes.
        """
        axes = frozenset(self._axes_of(tuple(indices)))
        for ident in (result if isinstance(result, tuple) else (result,)):
            self.value_axes.setdefault(ident, axes)
        self.memo[(name, tuple(indices))] = result
        return result

    def spanning(self, value: str, indices: tuple[AffineExpr, ...]) -> str:
        """``value`` as a tensor over the axes of ``indices``: a value computed at indices
        that span no axis (a scalar constant or load, maybe read through a broadcast) is
        broadcast to the block first.

        Combining a 0-d tensor with a block is legal Triton, but the 3.9 interpreter labels a
        0-d comparison's result with its operands' dtype, so ``block_bool | (c != c)`` fails
        there; on a GPU the broadcast of a scalar is free.
        """
        axes = self._axes_of(tuple(indices))
        if not axes or self.value_axes.get(value, frozenset(axes)):
            return value
        shape = self.shape_of(tuple(indices))
        key = ("spanning", value, shape)
        cached = self.memo.get(key)
        if cached is None:
            cached = self.bind(f"tl.broadcast_to({value}, {list(shape)})", value)
            self.value_axes[cached] = frozenset(axes)
            self.memo[key] = cached
        return cached

    def scalar_value(self, name: str) -> str:
        """A rank-0 instruction's value (e.g. a dynamic-slice start)."""
        result = self.value(name, ())
        assert isinstance(result, str)
        return result

    def pointer_for(self, instr: HloInstruction) -> ExternalBuffer:
        """The kernel argument reading ``instr`` (a parameter or an array constant)."""
        existing = self.buffers.get(instr.name)
        if existing is None:
            number = instr.attr("parameter_number") if instr.opcode == "parameter" else None
            hint = f"in{number}_ptr" if number is not None else f"const_{instr.name}_ptr"
            existing = ExternalBuffer(self.names.fresh(hint), instr, number)
            self.buffers[instr.name] = existing
        return existing


#: Rules nested in ``ValueEmitter.value`` before a request goes back to the outermost call
#: (a few Python frames each: far below the interpreter's recursion limit).
_MAX_NESTING = 48


class _Deeper(BaseException):
    """A value request handed back to the outermost ``ValueEmitter.value`` call.  A
    ``BaseException``, so that no rule's ``except Exception`` takes it for a failure."""

    def __init__(self, key: tuple) -> None:
        super().__init__(key[0])
        self.key = key


def _truncating_div(value: float, divisor: int) -> float:
    if value in (float("inf"), float("-inf")):
        return value
    quotient = abs(int(value)) // divisor
    return quotient if value >= 0 else -quotient


def array_shape(instr: HloInstruction) -> ArrayShape:
    if not isinstance(instr.shape, ArrayShape):
        raise UnsupportedOpError(f"{instr.opcode} with a tuple shape is not supported here",
                                 where=instr.name)
    return instr.shape


def element_type_of(instr: HloInstruction) -> ElementType:
    return array_shape(instr).element_type


def _lowering_error(instr: HloInstruction, indices: tuple[AffineExpr, ...],
                    err: Exception) -> LoweringError:
    """A ``LoweringError`` naming ``instr`` (name, opcode, HLO line:column when known) and the
    indices it was lowered at, for an unexpected failure ``err`` inside its rule."""
    loc = instr.location
    return LoweringError(
        f"lowering {instr.opcode} {instr.name!r} at indices "
        f"({', '.join(str(e) for e in indices)}) failed: {type(err).__name__}: {err}",
        line=loc.line if loc else None, column=loc.column if loc else None, where=instr.name)
