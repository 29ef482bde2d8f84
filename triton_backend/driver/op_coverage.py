"""What the Triton path covers, per opcode, and the ops of a module it does not.

:data:`COVERAGE` is the one table (alphabetical, keyed by opcode) of where ``compile_hlo``
handles each op and its limits: a *kernel value rule* (``lowering.rules.value_rules``, elementwise ops
through ``elementwise_lowering``), a *reduction* (``tl.reduce``), the *dot*, *sort* or
*scatter template*, a *host op* (``host_ops``), inlined before compiling (``map``), or not
at all.  It is derived from the
emitters' registries (``ELEMENTWISE_RULES``, ``value_rules.rule_for``) and the evaluator's
``OP_RULES``, so an op gains coverage when its rule is registered; the limits that depend on
an instruction (dtypes, attributes, row lengths) are checked (``coverage_checks``, each entry's
``check``) by the lowering's and the templates' own rules and planners (``dot_spec``,
``comparator_order``, ``scatter_plan``), never by a copy of their logic.

:func:`uncovered_ops` walks what ``compile_hlo`` compiles (the ENTRY computation, the bodies
of its calls, loops and conditionals, the fused computations, the reducers) and returns every
instruction the Triton path cannot run, with the reason (a contraction fusion its template
refuses is covered when ``compile_hlo`` can run it as two kernels, ``fusion_split``, and
both are); :func:`check_triton_coverage` raises them as one located ``UnsupportedOpError``,
before any kernel is generated.  Nothing here
imports torch or triton (``fusion-compile check --triton`` uses it).

>>> COVERAGE["sort"].handler, COVERAGE["map"].covered
('sort template', True)
>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... neg { a = f32[] parameter(0)
...   ROOT n = f32[] negate(a) }
... outer { a = f32[] parameter(0)
...   ROOT c = f32[] call(a), to_apply=neg }
... ENTRY e {
...   x = f32[4] parameter(0)
...   ROOT r = f32[4] map(x), dimensions={0}, to_apply=outer
... }''')
>>> [(u.instruction.name, u.computation.name) for u in uncovered_ops(m)]
[('r', 'e')]
>>> try:
...     check_triton_coverage(m)
... except UnsupportedOpError as err:
...     print(err.line, err.column, err.message.split(":")[0])
8 3 op map (%r) in computation e is not covered by the Triton path
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import NamedTuple

from fusion.analysis.element_width import changes_element_width
from fusion.analysis.library_calls import is_library_call, library_call
from fusion.errors import FusionCompilerError, UnsupportedOpError
from fusion.evaluator.registry import OP_RULES
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.ir.shape import ArrayShape, flatten_shape
from fusion.opcodes import opcodes_with, traits
from fusion.transforms.canonicalize import canonicalize
from fusion.transforms.complex_expansion import expand_complex_fusion, involves_complex, is_complex_shape
from fusion.transforms.plain_ops import plain_ops
from triton_backend.host.views import HOST_TENSOR_TYPES, is_host_view, is_view_layout
from triton_backend.lowering.rules.combine_function import lowers_in_reducer
from triton_backend.lowering.rules.elementwise_rules import ELEMENTWISE_RULES
from triton_backend.driver.coverage_checks import (
    KERNEL_ELEMENT_TYPES,
    Check,
    bitcast_check,
    collective_check,
    elementwise_check,
    fusion_template,
    library_check,
    map_check,
    reduce_window_check,
    template_check,
)
from triton_backend.driver.fusion_split import split_at_contraction
from triton_backend.driver.single_op_fusion import wrap_lone_ops
from triton_backend.lowering.rules.value_rules import rule_for

HOST = "host op"
HOST_OR_KERNEL = "host view or kernel value rule"
KERNEL = "kernel value rule"
ELEMENTWISE = "kernel value rule (elementwise lowering)"
REDUCTION = "kernel reduction (tl.reduce)"
CONV = "convolution template"
DOT = "dot template"
SORT = "sort template"
SCATTER = "scatter template"
SELECT_AND_SCATTER = "select-and-scatter template"
RAGGED_DOT = "ragged-dot template (a grouped GEMM)"
LIBRARY = "library call (torch.fft / torch.linalg / torch.sort on the host)"
PAIRS = "complex expansion (kernel value rules on the real and imaginary parts)"
FUSION = "fusion dispatch"
INLINED = "inlined as elementwise ops before compiling (fusion.transforms.map_inlining)"
EXPANDED = "written as the ops computing it before compiling, as XLA's expanders do " \
    "(fusion.transforms.rng_expansion, batch_norm_expansion, ragged_dot_expansion); they fuse " \
    "with its readers"
NEVER = "not covered"


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


#: Ops that only ever run on the host: they move values, never compute them.
_HOST_ONLY = opcodes_with("host_only")
_CONTROL_FLOW = opcodes_with("control_flow")
_REDUCER_USERS = opcodes_with("kernel_reducer")
_TEMPLATES = {"convolution": "convolution", "dot": "dot", "ragged-dot": "ragged_dot",
              "sort": "sort", "scatter": "scatter", "select-and-scatter": "select_and_scatter"}


# ---- the table -------------------------------------------------------------------------------

_PAIRS = ("complex values as pairs of floats: a fusion over c64/c128 compiles from its "
          "expansion into real parts (fusion.transforms.complex_expansion)")
_REDUCER_LIMIT = ("its reducer may hold only elementwise ops, constants, parameters and tuples")
_ONE_DEVICE = OpCoverage(HOST, "one device: its groups name device 0 alone (replica_groups={} "
                         "or {{0}}; collective-permute pairs {} or {{0,0}}), where it copies "
                         "its operands (a collective-permute receiving nothing gives zeros)",
                         collective_check)

_DEVICE_ID = OpCoverage(HOST, "one device: its id, 0")

_EXPLICIT: dict[str, OpCoverage] = {
    "batch-norm-grad": OpCoverage(EXPANDED, "reductions over the non-feature dims and "
                                  "elementwise ops, as XLA's BatchNormExpander writes them"),
    "batch-norm-inference": OpCoverage(EXPANDED, "elementwise ops, as XLA's BatchNormExpander "
                                       "writes them"),
    "batch-norm-training": OpCoverage(EXPANDED, "as batch-norm-grad"),
    "bitcast": OpCoverage(HOST_OR_KERNEL, "a view on the host when both layouts are untiled and "
                          "row-major; otherwise a kernel; the element width may not change",
                          bitcast_check),
    "bitcast-convert": OpCoverage(HOST_OR_KERNEL, "between types of one width an elementwise "
                                  "kernel op; between widths (a minor dim added or dropped) a "
                                  "view of the buffer on the host, untiled row-major layouts, "
                                  "never fused", elementwise_check),
    # compile_hlo (and this check) first rewrite a pair nothing else reads as the call it
    # runs (fusion.transforms.async_unwrapping); only a pair read whole is left to refuse.
    "async-done": OpCoverage(NEVER, "an async pair whose start or update is read other than "
                             "by its async-update/async-done (compiled as a call otherwise)"),
    "async-start": OpCoverage(NEVER, "as async-done"),
    "async-update": OpCoverage(NEVER, "as async-done"),
    "call": OpCoverage(HOST, "the callee's ops are compiled in turn"),
    "cholesky": OpCoverage(LIBRARY, "torch.linalg.cholesky_ex; f32, f64, c64, c128",
                           library_check),
    "complex": OpCoverage(PAIRS, _PAIRS),
    "conditional": OpCoverage(HOST, "the branch index is read back; the branches' ops are "
                              "compiled in turn"),
    "constant": OpCoverage(HOST, "materialized once at compile time (a tensor: element types "
                           "with a torch dtype); inside a fusion, a kernel value rule"),
    "convolution": OpCoverage(CONV, "1-D to 3-D, any dim_labels, strides, padding, lhs/rhs "
                              "dilation, window reversal, feature and batch groups; operand "
                              "types as a dot's; fused only with elementwise prologues/epilogues",
                              template_check),
    "copy-done": OpCoverage(HOST, "the copy-start's destination, no copy"),
    "copy-start": OpCoverage(HOST, "one device memory holds both ends: no copy"),
    "custom-call": OpCoverage(LIBRARY, "the LAPACK / cuSOLVER targets JAX emits (Cholesky, LU, "
                              "QR, Householder product, eigh, SVD, triangular solve, LU pivots "
                              "to permutation) and XLA's TopK, by fusion.analysis.library_calls.TARGETS; "
                              "XLA:GPU's cuBLAS GEMMs (__cublas$gemm, __cublas$lt$matmul: alpha, "
                              "beta, bias, ReLU/GELU epilogues) and cuDNN convolutions "
                              "(__cudnn$convForward, __cudnn$convBiasActivationForward, "
                              "__cudnn$convBackwardInput/Filter) and fused attention "
                              "(__cudnn$fmhaSoftmax, __cudnn$fmhaScaleBiasSoftmax and their "
                              "Backward: causal, padding and sliding-window masks, grouped "
                              "K/V; no dropout) as the "
                              "dot, convolution or attention and ops they compute "
                              "(fusion.transforms.gpu_call_expansion); "
                              "the sharding and placement annotations (Sharding, "
                              "SPMDFullToShardShape, annotate_device_placement, MoveToHost, "
                              "...: fusion.analysis.sharding), copies on one device; "
                              "any other target is opaque and not covered", library_check),
    "dot": OpCoverage(DOT, "float, integer and pred operands: tl.dot for f32/bf16/f16/f8 (an "
                      "f32/bf16/f16/f8 result), f64 and s8; other integers summed on the CUDA "
                      "cores, wrapping in the result type; complex as four real dots "
                      "(fusion.transforms.complex_dots); every XLA algorithm (the "
                      "operand-rounding ones as converts; the bf16 splits x3/x6 as Triton's, "
                      "x9 as exact f32); fused only with elementwise prologues/epilogues",
                      template_check),
    "fft": OpCoverage(LIBRARY, "torch.fft (FFT, IFFT, RFFT, IRFFT over 1 to 3 dims)",
                      library_check),
    "fusion": OpCoverage(FUSION, "a dot or sort fusion, a scatter fusion, or emitter kind "
                         "concatenate, in_place_dynamic_update_slice, input_slices, loop, "
                         "reduction or transpose (not cudnn/custom/triton)"),
    "gather": OpCoverage(KERNEL, "any dimension numbers, operand/start-indices batching dims "
                         "included"),
    "get-dimension-size": OpCoverage(HOST, "a static dim's size, a constant (a dynamic dim's "
                                     "runtime size is refused)"),
    "get-tuple-element": OpCoverage(HOST, "no copy; inside a fusion, a kernel value rule"),
    "imag": OpCoverage(PAIRS, _PAIRS),
    "map": OpCoverage(INLINED, "its to_apply must be scalar elementwise ops on its parameters "
                      "and constants", map_check),
    "opt-barrier": OpCoverage(HOST, "no copy: its operand passes on; fusions never cross it"),
    "parameter": OpCoverage(HOST, "inside a fusion, a kernel load"),
    "ragged-all-to-all": OpCoverage(HOST, "one device: its groups name device 0 alone, where "
                                    "its own slices are written into a copy of its output; "
                                    "across processes, two torch.distributed all_to_all "
                                    "calls", collective_check),
    "ragged-dot": OpCoverage(RAGGED_DOT, "[m, k] x [g, k, n] (or [g, n, k]) by rows and "
                             "[k, m] x [k, n] by contracting dim, row-major bf16/f16/f32; any "
                             "other as the dense dot of its operands masked by group (every "
                             "group's product for every row); one list of group sizes",
                             template_check),
    "real": OpCoverage(PAIRS, _PAIRS),
    "reduce": OpCoverage(REDUCTION, _REDUCER_LIMIT + "; a zero-element reduce is its init, on "
                         "the host"),
    "reduce-window": OpCoverage(REDUCTION, "no window reversal; " + _REDUCER_LIMIT,
                                reduce_window_check),
    "reshape": OpCoverage(HOST_OR_KERNEL, "a view on the host when both layouts are untiled "
                          "and row-major; otherwise a kernel"),
    "rng": OpCoverage(EXPANDED, "Philox bits of a key and a per-op counter, turned into the "
                      "distribution as XLA's RngExpander does"),
    "rng-bit-generator": OpCoverage(EXPANDED, "Philox (rng_default, rng_philox) and Threefry "
                                    "(rng_three_fry), bit for bit XLA's"),
    "rng-get-and-update-state": OpCoverage(HOST, "its counter, advanced on every run (no CUDA "
                                           "graph)"),
    "scaled-dot": OpCoverage(EXPANDED, "the dot of the operands times their scales repeated "
                             "over their blocks, as XLA's ScaledDotRewriter writes it (and "
                             "BlockScalingRewriter the __op$block_scaled_dot call); the "
                             "dequantization is a dot prologue like any other"),
    "scatter": OpCoverage(SCATTER, "one or several (variadic) operands, each a fusion "
                          "parameter updated in place; " + _REDUCER_LIMIT, template_check),
    "select-and-scatter": OpCoverage(SELECT_AND_SCATTER, "no window reversal or base "
                                     "dilation, at most 64 window positions; select and "
                                     "scatter computations of elementwise ops", template_check),
    "sort": OpCoverage(SORT, "any comparator of elementwise ops (a bitonic network asking "
                       "it, rows of more than 4096 elements tile by tile through scratch; "
                       "packed keys for a LT/GT order of one key: plain, TOTALORDER or JAX's "
                       "NaN order, past 4096 elements one torch.sort); operands parameters "
                       "or iotas", template_check),
    "stochastic-convert": OpCoverage(EXPANDED, "floats to signed integers, as XLA's "
                                     "StochasticConvertDecomposer writes it"),
    "topk": OpCoverage(LIBRARY, "a stable torch.sort in XLA's total order (ties: lower index "
                       "first)", library_check),
    "triangular-solve": OpCoverage(LIBRARY, "torch.linalg.solve_triangular; f32, f64, c64, c128",
                                   library_check),
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
    table = {**dict.fromkeys(opcodes_with("collective"), _ONE_DEVICE),
             **dict.fromkeys(opcodes_with("device_id"), _DEVICE_ID), **_EXPLICIT}
    for opcode in ELEMENTWISE_RULES:
        table.setdefault(opcode, OpCoverage(ELEMENTWISE, "element types as its lowering "
                                            "allows", elementwise_check))
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
               template: str | None, devices: int = 1) -> str | None:
    coverage = COVERAGE.get(instr.opcode)
    if coverage is None:
        return f"no Triton lowering for opcode {instr.opcode}"
    if not coverage.covered:
        return coverage.limits
    if coverage.handler in (INLINED, EXPANDED):  # gone before any phase sees it
        return coverage.check(module, comp, instr) if coverage.check else None
    if role == "reducer":
        if not lowers_in_reducer(instr.opcode):
            return (f"op {instr.opcode} in reducer {comp.name}: " + _REDUCER_LIMIT)
        if instr.opcode in ELEMENTWISE_RULES:
            reason = elementwise_check(module, comp, instr, widen=True)
            if reason is not None:
                return reason
        return _types_reason(comp, instr, KERNEL_ELEMENT_TYPES, "in a Triton kernel")
    if role == "host":
        if instr.opcode in _HOST_ONLY or instr.opcode == "fusion":
            return None  # a fusion is judged by its template (``fusion_template``)
        if traits(instr.opcode).collective:
            # Across processes the groups are checked, as a DistributedError, by
            # ``process_world.check_spmd_module``; on one device by the coverage check.
            return ((collective_check(module, comp, instr) if devices == 1 else None)
                    or _types_reason(comp, instr, HOST_TENSOR_TYPES, "in a torch tensor"))
        if instr.opcode == "constant":
            return _types_reason(comp, instr, HOST_TENSOR_TYPES, "in a torch tensor")
        if traits(instr.opcode).reshape_like and \
                is_host_view(comp.instruction(instr.operands[0]).shape, instr.shape):
            return None
        if changes_element_width(comp, instr):
            return _width_change_reason(comp, instr)
        if instr.opcode == "reduce" and _zero_elements(comp, instr):
            return None
        if coverage.handler == LIBRARY:
            return (library_check(module, comp, instr)
                    or _types_reason(comp, instr, HOST_TENSOR_TYPES, "in a torch tensor"))
        if _holds_complex(comp, instr):
            return _lone_complex_reason(module, comp, instr)
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


def _width_change_reason(comp: HloComputation, instr: HloInstruction) -> str | None:
    """A bitcast-convert between widths runs on the host as a view of the buffer
    (``host_ops.host_bitcast_convert``): untiled row-major layouts, a torch dtype."""
    source = comp.instruction(instr.operands[0]).shape
    if not (is_view_layout(source) and is_view_layout(instr.shape)):
        return (f"{instr.opcode} from {source} to {instr.shape} changes the element width: "
                "a view of the buffer, which takes untiled row-major layouts")
    return _types_reason(comp, instr, HOST_TENSOR_TYPES, "in a torch tensor")


def _holds_complex(comp: HloComputation, instr: HloInstruction) -> bool:
    return is_complex_shape(instr.shape) or any(
        comp.has_instruction(o) and is_complex_shape(comp.instruction(o).shape)
        for o in instr.operands)


def _lone_complex_reason(module: HloModule, comp: HloComputation,
                         instr: HloInstruction) -> str | None:
    """A lone op on complex values: judged as the one-op fusion ``compile_hlo`` wraps it in."""
    wrapped = wrap_lone_ops(module, {comp.name: (instr.name,)})
    for fusion in wrapped.computation(comp.name).instructions:
        if fusion.opcode == "fusion" and \
                wrapped.computation(fusion.attr("calls")).root_name == instr.name:
            return _complex_fusion_reason(wrapped, fusion)
    return None


def _complex_fusion_reason(module: HloModule, fusion: HloInstruction) -> str | None:
    """Kernels hold complex values as pairs of floats: a fusion over complex values is judged
    by its expansion (``fusion.transforms.complex_expansion``), alone in a module of its own."""
    try:
        expansion = expand_complex_fusion(module, fusion)
    except FusionCompilerError as err:
        return err.message
    found = uncovered_ops(expansion.module)
    return found[0].reason if found else None


def _zero_elements(comp: HloComputation, instr: HloInstruction) -> bool:
    shape = comp.instruction(instr.operands[0]).shape
    return isinstance(shape, ArrayShape) and shape.num_elements == 0


def uncovered_ops(module: HloModule, devices: int = 1) -> list[Uncovered]:
    """Every instruction ``compile_hlo`` would compile but the Triton path cannot, in text order
    (``devices``: how many processes run it; collectives are judged for one device by default).

    Walks the ENTRY computation and the computations it runs on the host (call, while,
    conditional), the fused computations of its fusions and the reducers of its reduces;
    a sort's comparator is judged by the sort template (its order, or the network's rendering).
    """
    module = plain_ops(module)  # as compile_hlo does first: the maps left are refused
    found: list[Uncovered] = []
    seen: set[tuple[str, str]] = set()

    def visit(name: str, role: str, template: str | None) -> None:
        if (name, role) in seen or not module.has_computation(name):
            return
        seen.add((name, role))
        walk(module, module.computation(name), role, template)

    def split_covered(comp: HloComputation, fusion: HloInstruction) -> bool:
        # ``compile_hlo`` runs a contraction fusion its template refuses as two kernels
        # (``fusion_split``): covered when both parts are; else the template's refusal stands.
        split = split_at_contraction(module, comp, fusion)
        if split is None:
            return False
        before, seen_before = len(found), set(seen)
        for part in (split.head, split.tail):
            part_template, reason = fusion_template(split.module, part)
            if reason is not None:
                break
            walk(split.module, split.module.computation(part.attr("calls")), "fused",
                 part_template)
        if reason is None and len(found) == before:
            return True
        del found[before:]
        seen.intersection_update(seen_before)
        return False

    def walk(within: HloModule, comp: HloComputation, role: str, template: str | None) -> None:
        for instr in comp.instructions:
            reason = _op_reason(within, comp, instr, role, template, devices)
            if reason is None and role == "host" and instr.opcode == "fusion" \
                    and involves_complex(module, instr):
                reason = _complex_fusion_reason(module, instr)
            elif reason is None and role == "host" and instr.opcode == "fusion":
                fused_template, reason = fusion_template(module, instr)
                if reason is None:
                    visit(instr.attr("calls"), "fused", fused_template)
                elif split_covered(comp, instr):
                    reason = None
            if reason is not None:
                found.append(Uncovered(instr, comp, reason))
            elif role == "host" and instr.opcode in _CONTROL_FLOW:
                for callee in instr.called_computations():
                    visit(callee, "host", None)
            elif instr.opcode in _REDUCER_USERS and role != "reducer" \
                    and not (role == "host" and instr.opcode == "reduce" and _zero_elements(comp, instr)) \
                    and not (role == "host" and _holds_complex(comp, instr)):  # judged expanded
                visit(instr.attr("to_apply"), "reducer", None)

    visit(module.entry_name, "host", None)
    return sorted(found, key=_position)


class LibraryCallSite(NamedTuple):
    """A library call the host runs (``host.library_calls``), where, and what it computes."""

    instruction: HloInstruction
    computation: HloComputation
    routine: str
    target: str


def library_call_sites(module: HloModule) -> list[LibraryCallSite]:
    """Every library call of the computations the host runs (ENTRY and the bodies of its
    calls, loops and conditionals), in text order: the ops ``compile_hlo`` hands to
    ``torch.fft``/``torch.linalg``/``torch.sort`` between the kernels.

    >>> from fusion.text.parser import parse_hlo
    >>> m = parse_hlo("HloModule m\\nENTRY e {\\n  x = c64[8] parameter(0)\\n"
    ...               "  ROOT f = c64[8] fft(x), fft_type=FFT, fft_length={8}\\n}")
    >>> [(s.instruction.name, s.routine, s.target) for s in library_call_sites(m)]
    [('f', 'fft', 'fft')]
    """
    found: list[LibraryCallSite] = []
    seen: set[str] = set()
    pending = [module.entry_name]
    while pending:
        name = pending.pop()
        if name in seen or not module.has_computation(name):
            continue
        seen.add(name)
        comp = module.computation(name)
        for instr in comp.instructions:
            if instr.opcode in _CONTROL_FLOW:
                pending.extend(instr.called_computations())
            elif is_library_call(instr):
                try:
                    call = library_call(instr)
                except FusionCompilerError:
                    continue  # uncovered_ops reports it
                found.append(LibraryCallSite(instr, comp, call.routine, call.target))
    return sorted(found, key=_position)


def _position(item) -> tuple[int, int]:
    loc = item.instruction.location
    return (loc.line, loc.column) if loc is not None else (1 << 30, 0)


def describe(item: Uncovered) -> str:
    """``"L:C opcode %name in computation C: reason"`` (``?`` for a built module's location)."""
    loc = item.instruction.location
    return (f"{loc if loc is not None else '?'} {item.instruction.opcode} %{item.instruction.name} "
            f"in computation {item.computation.name}: {item.reason}")


def check_triton_coverage(module: HloModule, *, canonicalized: bool = False,
                          devices: int = 1) -> None:
    """Raise ``UnsupportedOpError`` at the first uncovered instruction, listing all of them.

    ``devices``: the processes that run it (``compile_hlo(world_size=)``).
    ``canonicalized``: the fusion pass will run first, so judge the module as its
    canonicalization (``fusion.transforms.canonicalize``) leaves it: an op it removes (a ``copy`` in a
    reducer, a constant expression it folds) is never compiled.
    """
    uncovered = uncovered_ops(module, devices)
    if uncovered and canonicalized:
        uncovered = uncovered_ops(canonicalize(module), devices)
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
    "LibraryCallSite",
    "OpCoverage",
    "Uncovered",
    "check_triton_coverage",
    "describe",
    "has_kernel_rule",
    "library_call_sites",
    "uncovered_ops",
]
