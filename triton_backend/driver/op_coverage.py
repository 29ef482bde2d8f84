"""What the Triton path covers, per opcode, and the ops of a module it does not.

:data:`COVERAGE` is the one table (alphabetical, keyed by opcode) of where ``compile_hlo``
handles each op and its limits: a *kernel value rule* (``lowering.rules.value_rules``, elementwise ops
through ``elementwise_lowering``), a *reduction* (``tl.reduce``), the *dot*, *sort* or
*scatter template*, a *host op* (``host_ops``), or not at all.  It is derived from the
emitters' registries (``ELEMENTWISE_RULES``, ``value_rules.rule_for``) and the evaluator's
``OP_RULES``, so an op gains coverage when its rule is registered; the limits that depend on
an instruction (dtypes, attributes, row lengths) are checked by the templates' own planners
(``dot_spec``, ``comparator_order``, ``scatter_plan``), never by a copy of their logic.

:func:`uncovered_ops` walks what ``compile_hlo`` compiles (the ENTRY computation, the bodies
of its calls, loops and conditionals, the fused computations, the reducers) and returns every
instruction the Triton path cannot run, with the reason; :func:`check_triton_coverage` raises
them as one located ``UnsupportedOpError``, before any kernel is generated.  Nothing here
imports torch or triton (``fusion-compile check --triton`` uses it).

>>> COVERAGE["sort"].handler, COVERAGE["map"].covered
('sort template', False)
>>> from fusion.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... ENTRY e {
...   x = f32[4] parameter(0)
...   ROOT r = f32[4] reduce-precision(x), exponent_bits=5, mantissa_bits=10
... }''')
>>> [(u.instruction.name, u.computation.name) for u in uncovered_ops(m)]
[('r', 'e')]
>>> try:
...     check_triton_coverage(m)
... except UnsupportedOpError as err:
...     print(err.line, err.column, err.message.split(":")[0])
4 3 op reduce-precision (%r) in computation e is not covered by the Triton path
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import NamedTuple

from fusion.canonicalize import canonicalize
from fusion.element_types import ELEMENT_TYPES
from fusion.errors import FusionCompilerError, UnsupportedOpError
from fusion.evaluator.registry import OP_RULES
from fusion.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.opcodes import opcodes_with
from fusion.shape import ArrayShape, Shape, flatten_shape
from triton_backend.lowering.rules.elementwise_rules import (
    ELEMENTWISE_RULES,
    render_elementwise,
    storage_dtype,
)
from triton_backend.lowering.combine_function import accumulator_type
from triton_backend.templates.scatter_template import scatter_plan
from triton_backend.driver.compiled_fusion import SUPPORTED_KINDS, emitter_analysis
from triton_backend.driver.attention_fusion import attention_pattern, is_attention_fusion
from triton_backend.driver.dot_fusion import dot_spec, is_dot_fusion
from triton_backend.driver.sort_fusion import (
    MAX_SORT_LENGTH,
    comparator_order,
    is_sort_fusion,
    sort_of,
)
from triton_backend.driver.single_op_fusion import wrap_lone_ops
from triton_backend.lowering.rules.value_rules import rule_for

HOST = "host op"
HOST_OR_KERNEL = "host view or kernel value rule"
KERNEL = "kernel value rule"
ELEMENTWISE = "kernel value rule (elementwise lowering)"
REDUCTION = "kernel reduction (tl.reduce)"
DOT = "dot template"
SORT = "sort template"
SCATTER = "scatter template"
FUSION = "fusion dispatch"
NEVER = "not covered"

#: ``check(module, computation, instruction) -> reason or None`` for one instruction's limits.
Check = Callable[[HloModule, HloComputation, HloInstruction], "str | None"]


@dataclass(frozen=True)
class OpCoverage:
    """Where the Triton path handles an opcode (``handler``) and within which ``limits``.

    For an op that is not covered, ``limits`` is the reason.
    """

    handler: str
    limits: str = ""
    check: Check | None = field(default=None, compare=False, repr=False)

    @property
    def covered(self) -> bool:
        return self.handler != NEVER


class Uncovered(NamedTuple):
    """An instruction the Triton path cannot run, the computation holding it, and why."""

    instruction: HloInstruction
    computation: HloComputation
    reason: str


#: Element types a host tensor can hold (``input_validation.TORCH_DTYPES``; a test keeps them equal).
HOST_TENSOR_TYPES = frozenset({
    "bf16", "c128", "c64", "f16", "f32", "f64", "f8e4m3fn", "f8e4m3fnuz", "f8e5m2", "f8e5m2fnuz",
    "f8e8m0fnu", "pred", "s16", "s32", "s64", "s8", "u16", "u32", "u64", "u8",
})
#: Ops a reducer (``to_apply`` of reduce, reduce-window, scatter) may hold (``combine_function``).
REDUCER_OPCODES = frozenset({"constant", "parameter", "tuple", *ELEMENTWISE_RULES})
#: Ops that only ever run on the host: they move values, never compute them.
_HOST_ONLY = opcodes_with("host_only")
_CONTROL_FLOW = opcodes_with("control_flow")
_REDUCER_USERS = opcodes_with("kernel_reducer")
_TEMPLATES = {"dot": "dot", "sort": "sort", "scatter": "scatter"}


def _kernel_types() -> frozenset[str]:
    supported = set()
    for name, element_type in ELEMENT_TYPES.items():
        try:
            storage_dtype(element_type)
        except UnsupportedOpError:
            continue
        supported.add(name)
    return frozenset(supported)


#: Element types a kernel can load, compute in and store (``elementwise_lowering``).
KERNEL_ELEMENT_TYPES: frozenset[str] = _kernel_types()


# ---- per-instruction limits ------------------------------------------------------------------

def _bits(shape: Shape) -> int | None:
    return shape.element_type.bits if isinstance(shape, ArrayShape) else None


def is_view_layout(shape: Shape) -> bool:
    """True when a row-major logical tensor is also the physical buffer of ``shape``.

    >>> from fusion.layout import Layout
    >>> is_view_layout(ArrayShape("f32", (4, 1, 6), Layout((2, 0, 1))))
    True
    >>> is_view_layout(ArrayShape("f32", (4, 6), Layout((0, 1))))
    False
    """
    if not isinstance(shape, ArrayShape) or shape.dtype not in HOST_TENSOR_TYPES:
        return False
    layout = shape.effective_layout
    if layout.is_tiled or layout.element_size_in_bits:
        return False
    order = [d for d in reversed(layout.minor_to_major) if shape.dims[d] != 1]
    return order == sorted(order)


def is_host_view(source: Shape, result: Shape) -> bool:
    """True when ``host_ops`` runs a bitcast/reshape from ``source`` to ``result`` as a view.

    >>> from fusion.layout import Layout
    >>> is_host_view(ArrayShape("f32", (2, 3)), ArrayShape("f32", (6,)))
    True
    >>> is_host_view(ArrayShape("f32", (2, 3), Layout((0, 1))), ArrayShape("f32", (6,)))
    False
    """
    return (is_view_layout(source) and is_view_layout(result) and _bits(source) == _bits(result)
            and source.num_elements == result.num_elements)


def _bitcast_check(module: HloModule, comp: HloComputation, instr: HloInstruction) -> str | None:
    source = comp.instruction(instr.operands[0]).shape
    if _bits(source) != _bits(instr.shape):
        return (f"bitcast from {_bits(source)}-bit to {_bits(instr.shape)}-bit elements "
                "(a kernel bitcast cannot change the element width)")
    return None


def _elementwise_check(module: HloModule, comp: HloComputation, instr: HloInstruction,
                       widen: bool = False) -> str | None:
    """Render the op at dummy operands: the lowering's own dtype rules decide (no copy of them)."""
    types = [comp.instruction(o).shape for o in instr.operands] + [instr.shape]
    if not all(isinstance(t, ArrayShape) for t in types):
        return f"{instr.opcode} of a tuple-shaped value"
    if {t.dtype for t in types} - KERNEL_ELEMENT_TYPES:
        return None  # reported with the element types
    element_types = [accumulator_type(t.element_type) if widen else t.element_type for t in types]
    try:
        render_elementwise(instr.opcode, [f"x{k}" for k in range(len(instr.operands))],
                           element_types[:-1], element_types[-1], dict(instr.attributes))
    except UnsupportedOpError as err:
        return err.message
    return None


def _gather_check(module: HloModule, comp: HloComputation, instr: HloInstruction) -> str | None:
    for key in ("operand_batching_dims", "start_indices_batching_dims"):
        if instr.attr(key, ()):
            return f"gather with {key} is not emitted"
    return None


def _reduce_window_check(module: HloModule, comp: HloComputation,
                         instr: HloInstruction) -> str | None:
    window = instr.attr("window", None)
    if window is not None and any(d.window_reversal for d in window.dims):
        return "reduce-window with window reversal is not emitted"
    return None


def fusion_template(module: HloModule, fusion_instr: HloInstruction) -> tuple[str | None, str | None]:
    """``(template or None, reason or None)``: how ``compile_fusion`` would emit the fusion.

    The template is ``"attention"``, ``"dot"``, ``"sort"`` or ``"scatter"`` (``None`` for the
    index-expression emitter); the reason says why it cannot be emitted, from the template's own planner.
    """

    try:
        if is_attention_fusion(module, fusion_instr):
            attention_pattern(module, fusion_instr)
            return "attention", None
        if is_dot_fusion(module, fusion_instr):
            dot_spec(module, fusion_instr)
            return "dot", None
        if is_sort_fusion(module, fusion_instr):
            return "sort", _sort_reason(module, fusion_instr)
        kind = emitter_analysis(module, fusion_instr)
        if kind.kind.value == "scatter":
            scatter_plan(module, fusion_instr)
            return "scatter", None
        if kind.kind.value not in SUPPORTED_KINDS:
            return None, (f"{kind.kind.value} fusions are not emitted by the Triton backend "
                          f"({kind.reason})")
    except FusionCompilerError as err:
        return None, err.message
    return None, None


def _sort_reason(module: HloModule, fusion_instr: HloInstruction) -> str | None:
    sort = sort_of(module, fusion_instr)
    comp = module.computation(fusion_instr.attr("calls"))
    for name in sort.operands:
        if comp.instruction(name).opcode not in ("parameter", "iota"):
            return (f"sort operand {name} is a {comp.instruction(name).opcode}; sort fusions take "
                    "parameters or iotas as operands")
    (dim,) = sort.attr("dimensions")
    length = flatten_shape(sort.shape)[0].dims[dim]
    if length > MAX_SORT_LENGTH:
        return (f"sort along a dimension of {length} elements: rows longer than "
                f"{MAX_SORT_LENGTH} elements are not sorted in one tile")
    comparator_order(module, sort)
    return None


def _template_check(module: HloModule, comp: HloComputation, instr: HloInstruction) -> str | None:
    """A lone dot/sort/scatter: plan it as the one-op fusion ``compile_hlo`` would wrap it in."""
    wrapped = wrap_lone_ops(module, {comp.name: (instr.name,)})
    for fusion in wrapped.computation(comp.name).instructions:
        if fusion.opcode == "fusion" and wrapped.computation(fusion.attr("calls")).root_name == instr.name:
            return fusion_template(wrapped, fusion)[1]
    return None


# ---- the table -------------------------------------------------------------------------------

_REDUCER_LIMIT = ("its reducer may hold only elementwise ops, constants, parameters and tuples")

_EXPLICIT: dict[str, OpCoverage] = {
    "bitcast": OpCoverage(HOST_OR_KERNEL, "a view on the host when both layouts are untiled and "
                          "row-major; otherwise a kernel; the element width may not change",
                          _bitcast_check),
    "call": OpCoverage(HOST, "the callee's ops are compiled in turn"),
    "complex": OpCoverage(NEVER, "complex numbers have no Triton representation"),
    "conditional": OpCoverage(HOST, "the branch index is read back; the branches' ops are "
                              "compiled in turn"),
    "constant": OpCoverage(HOST, "materialized once at compile time (a tensor: element types "
                           "with a torch dtype); inside a fusion, a kernel value rule"),
    "custom-call": OpCoverage(NEVER, "a custom-call runs an opaque target (a library call) that "
                              "has no Triton lowering"),
    "dot": OpCoverage(DOT, "operands f32/bf16/f16 with an f32/bf16/f16 result, or s8 x s8 -> "
                      "s32/s16/s8; algorithm dot_f32_f32_f32, dot_tf32_tf32_f32 or "
                      "dot_tf32_tf32_f32_x3; fused only with elementwise prologues/epilogues",
                      _template_check),
    "fusion": OpCoverage(FUSION, "a dot or sort fusion, a scatter fusion, or emitter kind "
                         "concatenate, in_place_dynamic_update_slice, input_slices, loop, "
                         "reduction or transpose (not cudnn/custom/triton)"),
    "gather": OpCoverage(KERNEL, "no operand/start-indices batching dims", _gather_check),
    "get-tuple-element": OpCoverage(HOST, "no copy; inside a fusion, a kernel value rule"),
    "imag": OpCoverage(NEVER, "complex numbers have no Triton representation"),
    "map": OpCoverage(NEVER, "map is not emitted (XLA inlines its to_apply as elementwise ops "
                      "before fusion)"),
    "parameter": OpCoverage(HOST, "inside a fusion, a kernel load"),
    "real": OpCoverage(NEVER, "complex numbers have no Triton representation"),
    "reduce": OpCoverage(REDUCTION, _REDUCER_LIMIT + "; a zero-element reduce is its init, on "
                         "the host"),
    "reduce-precision": OpCoverage(NEVER, "no emitter rule rounds to a custom exponent/mantissa "
                                   "width"),
    "reduce-window": OpCoverage(REDUCTION, "no window reversal; " + _REDUCER_LIMIT,
                                _reduce_window_check),
    "reshape": OpCoverage(HOST_OR_KERNEL, "a view on the host when both layouts are untiled "
                          "and row-major; otherwise a kernel"),
    "scatter": OpCoverage(SCATTER, "one operand (not variadic), a fusion parameter updated in "
                          "place; " + _REDUCER_LIMIT, _template_check),
    "select-and-scatter": OpCoverage(NEVER, "no emitter (XLA rewrites it before codegen)"),
    "sort": OpCoverage(SORT, "rows of at most 4096 elements; the comparator a LT/GT comparison "
                       "of the keys (plain, TOTALORDER or JAX's NaN order); operands parameters "
                       "or iotas", _template_check),
    "tuple": OpCoverage(HOST, "no copy; inside a fusion, a kernel value rule"),
    "while": OpCoverage(HOST, "the predicate is read back each iteration; the condition's and "
                        "body's ops are compiled in turn"),
}


@cache
def has_kernel_rule(opcode: str) -> bool:
    """True when the index-expression emitter (``value_rules.rule_for``) has a rule for ``opcode``.

    >>> has_kernel_rule("transpose"), has_kernel_rule("sort")
    (True, False)
    """
    try:
        rule_for(HloInstruction("probe", opcode, ArrayShape("f32", ())))
    except UnsupportedOpError:
        return False
    return True


def _build_table() -> dict[str, OpCoverage]:
    table = dict(_EXPLICIT)
    for opcode in ELEMENTWISE_RULES:
        table.setdefault(opcode, OpCoverage(ELEMENTWISE, "element types as its lowering "
                                            "allows", _elementwise_check))
    for opcode in OP_RULES:
        if opcode not in table:
            table[opcode] = (OpCoverage(KERNEL) if has_kernel_rule(opcode)
                             else OpCoverage(NEVER, "no Triton emitter rule for this opcode"))
    return dict(sorted(table.items()))


#: opcode -> coverage, alphabetical: every opcode of the evaluator, plus ``custom-call``.
COVERAGE: dict[str, OpCoverage] = _build_table()


# ---- walking a module ------------------------------------------------------------------------

def _types_reason(comp: HloComputation, instr: HloInstruction, allowed: frozenset[str],
                  where: str) -> str | None:
    shapes = [*flatten_shape(instr.shape)]
    for operand in instr.operands:
        if comp.has_instruction(operand):
            shapes.extend(flatten_shape(comp.instruction(operand).shape))
    bad = sorted({s.dtype for s in shapes} - allowed)
    if bad:
        return f"element type {', '.join(bad)} cannot be held {where}"
    return None


def _op_reason(module: HloModule, comp: HloComputation, instr: HloInstruction, role: str,
               template: str | None) -> str | None:
    coverage = COVERAGE.get(instr.opcode)
    if coverage is None:
        return f"no Triton lowering for opcode {instr.opcode}"
    if not coverage.covered:
        return coverage.limits
    if role == "reducer":
        if instr.opcode not in REDUCER_OPCODES:
            return (f"op {instr.opcode} in reducer {comp.name}: " + _REDUCER_LIMIT)
        if instr.opcode in ELEMENTWISE_RULES:
            reason = _elementwise_check(module, comp, instr, widen=True)
            if reason is not None:
                return reason
        return _types_reason(comp, instr, KERNEL_ELEMENT_TYPES, "in a Triton kernel")
    if role == "host":
        if instr.opcode in _HOST_ONLY or instr.opcode == "fusion":
            return None  # a fusion is judged by its template (``fusion_template``)
        if instr.opcode == "constant":
            return _types_reason(comp, instr, HOST_TENSOR_TYPES, "in a torch tensor")
        if instr.opcode in ("bitcast", "reshape") and \
                is_host_view(comp.instruction(instr.operands[0]).shape, instr.shape):
            return None
        if instr.opcode == "reduce" and _zero_elements(comp, instr):
            return None
    elif instr.opcode in _TEMPLATES:
        if template != _TEMPLATES[instr.opcode]:
            return f"{instr.opcode} is emitted only by its own template, not inside this fusion"
    elif instr.opcode == "fusion" or not has_kernel_rule(instr.opcode):
        return f"{instr.opcode} is not emitted inside a fused computation"
    if coverage.check is not None and (role == "host" or instr.opcode not in _TEMPLATES):
        reason = coverage.check(module, comp, instr)
        if reason is not None:
            return reason
    return _types_reason(comp, instr, KERNEL_ELEMENT_TYPES, "in a Triton kernel")


def _zero_elements(comp: HloComputation, instr: HloInstruction) -> bool:
    shape = comp.instruction(instr.operands[0]).shape
    return isinstance(shape, ArrayShape) and shape.num_elements == 0


def uncovered_ops(module: HloModule) -> list[Uncovered]:
    """Every instruction ``compile_hlo`` would compile but the Triton path cannot, in text order.

    Walks the ENTRY computation and the computations it runs on the host (call, while,
    conditional), the fused computations of its fusions and the reducers of its reduces;
    a sort's comparator is run by the evaluator at compile time, so only its order matters.
    """
    found: list[Uncovered] = []
    seen: set[tuple[str, str]] = set()

    def visit(name: str, role: str, template: str | None) -> None:
        if (name, role) in seen or not module.has_computation(name):
            return
        seen.add((name, role))
        comp = module.computation(name)
        for instr in comp.instructions:
            reason = _op_reason(module, comp, instr, role, template)
            if reason is None and role == "host" and instr.opcode == "fusion":
                fused_template, reason = fusion_template(module, instr)
                if reason is None:
                    visit(instr.attr("calls"), "fused", fused_template)
            if reason is not None:
                found.append(Uncovered(instr, comp, reason))
            elif role == "host" and instr.opcode in _CONTROL_FLOW:
                for callee in instr.called_computations():
                    visit(callee, "host", None)
            elif instr.opcode in _REDUCER_USERS and role != "reducer" \
                    and not (role == "host" and instr.opcode == "reduce" and _zero_elements(comp, instr)):
                visit(instr.attr("to_apply"), "reducer", None)

    visit(module.entry_name, "host", None)
    return sorted(found, key=_position)


def _position(item: Uncovered) -> tuple[int, int]:
    loc = item.instruction.location
    return (loc.line, loc.column) if loc is not None else (1 << 30, 0)


def describe(item: Uncovered) -> str:
    """``"L:C opcode %name in computation C: reason"`` (``?`` for a built module's location)."""
    loc = item.instruction.location
    return (f"{loc if loc is not None else '?'} {item.instruction.opcode} %{item.instruction.name} "
            f"in computation {item.computation.name}: {item.reason}")


def check_triton_coverage(module: HloModule, *, canonicalized: bool = False) -> None:
    """Raise ``UnsupportedOpError`` at the first uncovered instruction, listing all of them.

    ``canonicalized``: the fusion pass will run first, so judge the module as its
    canonicalization (``fusion.canonicalize``) leaves it: an op it removes (a ``copy`` in a
    reducer, a constant expression it folds) is never compiled.
    """
    uncovered = uncovered_ops(module)
    if uncovered and canonicalized:
        uncovered = uncovered_ops(canonicalize(module))
    if not uncovered:
        return
    first = uncovered[0]
    instr, loc = first.instruction, first.instruction.location
    message = (f"op {instr.opcode} (%{instr.name}) in computation {first.computation.name} is "
               f"not covered by the Triton path: {first.reason}")
    if len(uncovered) > 1:
        message += f"\n  {len(uncovered)} ops are not covered:\n" + "\n".join(
            "    " + describe(item) for item in uncovered)
    raise UnsupportedOpError(message, line=loc.line if loc else None,
                             column=loc.column if loc else None, where=instr.name)


__all__ = [
    "COVERAGE",
    "HOST_TENSOR_TYPES",
    "KERNEL_ELEMENT_TYPES",
    "REDUCER_OPCODES",
    "OpCoverage",
    "Uncovered",
    "check_triton_coverage",
    "describe",
    "fusion_template",
    "has_kernel_rule",
    "is_host_view",
    "is_view_layout",
    "uncovered_ops",
]
