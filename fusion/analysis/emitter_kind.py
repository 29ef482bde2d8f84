"""Which XLA:GPU emitter a fusion gets, and why (``hlo_fusion_analysis.cc``).

The decision follows XLA's ``GetEmitterFusionKind`` priority order:

1. ``kind=kCustom`` fusions: Triton when the backend config asks for it (a
   ``block_level_fusion_config`` or a ``__triton*`` kind), cuDNN, else a custom fusion;
   XLA:CPU's library fusions (``"fusion_config": {"kind": "__ynn_fusion"}``: XNNPACK, YNNPACK,
   oneDNN calls) hold plain HLO and are decided by their body like any other fusion;
2. *reduction* if some output's hero is a reduce the reduction emitter handles, and every
   other output is a compatible reduce or has as many elements as the reduce input;
3. *transpose* if the transpose heroes (transposes, or copies that change the layout) are
   all the same normalized tiled transpose, and other outputs have the transpose's input shape;
4. several outputs: *input slices* if they are all unit-stride slices of same-shaped operands,
   else *loop*;
5. *scatter* if the root is a scatter; *concatenate* if the hero is a concatenate of at most
   four operands;
6. *loop* (the default), which XLA turns into an *in-place dynamic-update-slice* emitter
   when every output is a dynamic-update-slice writing into a fusion parameter.

>>> from fusion.ir.hlo_module import HloComputation, HloInstruction
>>> from fusion.ir.shape import ArrayShape
>>> comp = HloComputation("c", (
...     HloInstruction("p", "parameter", ArrayShape("f32", (8,)), (), (("parameter_number", 0),)),
...     HloInstruction("e", "exponential", ArrayShape("f32", (8,)), ("p",))), "e")
>>> analyze_computation(comp).kind
<EmitterKind.LOOP: 'loop'>
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from fusion.ir.attributes import RawText
from fusion.text.backend_config import parse_backend_config
from fusion.errors import HloVerifyError, UnsupportedOpError
from fusion.analysis.hero import (
    TransposeDescription,
    array_shape_of,
    find_non_trivial_hero,
    is_bitcast_op,
    fusion_roots,
    num_elements,
    operand,
    transpose_description,
)
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.analysis.in_place_update import in_place_dynamic_update_slice
from fusion.ir.shape import TupleShape
from fusion.opcodes import traits
from fusion.analysis.reduction_kind import (
    ReductionDimensions,
    describe,
    is_reduction_from_or_to_contiguous_dimensions,
    reduction_dimensions,
    reduction_is_race_free,
)

MAX_CONCATENATE_OPERANDS = 4


class EmitterKind(str, Enum):
    """The emitter kinds (seed: XLA:GPU's emitters, plus the library/Triton paths)."""

    CONCATENATE = "concatenate"
    CUDNN = "cudnn"
    CUSTOM = "custom"
    IN_PLACE_DYNAMIC_UPDATE_SLICE = "in_place_dynamic_update_slice"
    INPUT_SLICES = "input_slices"
    LOOP = "loop"
    REDUCTION = "reduction"
    SCATTER = "scatter"
    TRANSPOSE = "transpose"
    TRITON = "triton"


@dataclass(frozen=True)
class FusionAnalysis:
    """The emitter decision for one fusion.

    ``heroes[i]`` is the hero of output ``roots[i]`` (instruction names in the fused
    computation).  For a reduction, ``reduced_dims``/``kept_dims`` are the logical dims of
    the first reduction hero's input and ``reduction_dimensions`` XLA's 3-D grouping.
    """

    kind: EmitterKind
    heroes: tuple[str, ...]
    reason: str
    roots: tuple[str, ...] = ()
    is_row_reduction: bool | None = None
    reduced_dims: tuple[int, ...] = ()
    kept_dims: tuple[int, ...] = ()
    reduction_dimensions: tuple[int, int, int] | None = None
    transpose: TransposeDescription | None = None


def _fmt_dims(dims) -> str:
    return "{" + ",".join(str(d) for d in dims) + "}"


def _backend_kind(fusion_instr: HloInstruction) -> tuple[str, bool]:
    """``(fusion_backend_config.kind, has block_level_fusion_config)`` from the config."""
    raw = fusion_instr.attr("backend_config", None)
    if raw is None:
        return "", False
    text = raw.text if isinstance(raw, RawText) else str(raw)
    config = parse_backend_config(text)  # JSON or protobuf text format
    if config is None:
        match = re.search(r'"?kind"?\s*:\s*"([^"]*)"', text)
        return (match.group(1) if match else ""), "block_level_fusion_config" in text
    fbc = config.get("fusion_backend_config", {})
    fbc = fbc if isinstance(fbc, dict) else {}
    return str(fbc.get("kind", "")), "block_level_fusion_config" in fbc


def has_backend_kind(fusion_instr: HloInstruction) -> bool:
    """Whether ``fusion_instr``'s backend config names a fusion kind (``__triton_gemm``,
    ``__cudnn$fusion``, ...) or a block-level tiling; a bare ``kind=kCustom`` fusion names none.

    >>> has_backend_kind(HloInstruction("f", "fusion", None, (), (("kind", "kCustom"),)))
    False
    """
    kind, block_level = _backend_kind(fusion_instr)
    return bool(kind) or block_level


def is_cpu_library_fusion(fusion_instr: HloInstruction) -> bool:
    """Whether ``fusion_instr`` is one of XLA:CPU's library fusions (``kind=kCustom`` with a
    ``fusion_config``, e.g. ``{"fusion_config":{"kind":"__ynn_fusion"}}``).  Its body is
    plain HLO that the library call implements, so it compiles like any fusion."""
    raw = fusion_instr.attr("backend_config", None)
    if fusion_instr.attr("kind", "") != "kCustom" or raw is None:
        return False
    config = parse_backend_config(raw.text if isinstance(raw, RawText) else str(raw))
    return isinstance(config, dict) and isinstance(config.get("fusion_config"), dict)


def _custom_kind(fusion_instr: HloInstruction, heroes, roots) -> FusionAnalysis | None:
    kind = fusion_instr.attr("kind", "")
    if is_cpu_library_fusion(fusion_instr):
        return None
    backend_kind, block_level = _backend_kind(fusion_instr)
    if kind != "kCustom" and not backend_kind.startswith("__"):
        return None
    if block_level or backend_kind.startswith("__triton"):
        why = "block_level_fusion_config" if block_level else f"kind {backend_kind!r}"
        return FusionAnalysis(
            EmitterKind.TRITON, heroes,
            f"triton: kCustom fusion whose backend_config has {why} (block-level Triton path)",
            roots,
        )
    if backend_kind.startswith("__cudnn"):
        return FusionAnalysis(
            EmitterKind.CUDNN, heroes, f"cudnn: backend_config kind {backend_kind!r}", roots
        )
    return FusionAnalysis(
        EmitterKind.CUSTOM, heroes,
        f"custom: kCustom fusion with backend_config kind {backend_kind or 'unset'!r}", roots,
    )


def _reduce_info(computation: HloComputation, hero: HloInstruction) -> ReductionDimensions:
    source = array_shape_of(operand(computation, hero, 0))
    reduced = tuple(hero.attr("dimensions"))
    if any(d < 0 or d >= source.rank for d in reduced):
        raise HloVerifyError(
            f"reduce dimensions {_fmt_dims(reduced)} out of range for {source}", where=hero.name
        )
    return reduction_dimensions(source, reduced)


def _real_reduction_hero(computation, root: str, hero: str, notes: list[str]) -> bool:
    """XLA's ``IsRealReductionHero``."""
    instr = computation.instruction(hero)
    if instr.opcode != "reduce":
        return False
    source = array_shape_of(operand(computation, instr, 0))
    ok, why = is_reduction_from_or_to_contiguous_dimensions(source, tuple(instr.attr("dimensions")))
    if not ok:
        notes.append(f"reduce {hero!r} of {source} is not a reduction hero: {why}")
        return False
    if root != hero and not reduction_is_race_free(_reduce_info(computation, instr)):
        notes.append(
            f"reduce {hero!r} has ops after it but is not race free, so it cannot be a hero"
        )
        return False
    return True


def _reduction_compatible(computation, a: HloInstruction, b: HloInstruction) -> bool:
    """XLA's ``AreReductionsMultiOutputFusionCompatible`` (element types ignored)."""
    sa, sb = array_shape_of(operand(computation, a, 0)), array_shape_of(operand(computation, b, 0))
    oa, ob = array_shape_of(a), array_shape_of(b)
    return (
        sa.dims == sb.dims
        and sa.effective_layout == sb.effective_layout
        and oa.dims == ob.dims
        and tuple(a.attr("dimensions")) == tuple(b.attr("dimensions"))
    )


def _try_reduction(computation, roots, heroes, notes) -> FusionAnalysis | None:
    first = next(
        (i for i, (r, h) in enumerate(zip(roots, heroes))
         if _real_reduction_hero(computation, r, h, notes)),
        None,
    )
    if first is None:
        return None
    hero = computation.instruction(heroes[first])
    source = array_shape_of(operand(computation, hero, 0))
    for r, h in zip(roots, heroes):
        if h == hero.name:
            continue
        if _real_reduction_hero(computation, r, h, []):
            if not _reduction_compatible(computation, computation.instruction(h), hero):
                notes.append(f"reductions {hero.name!r} and {h!r} are not compatible")
                return None
        elif num_elements(computation.instruction(r)) != source.num_elements:
            notes.append(
                f"output {r!r} has {num_elements(computation.instruction(r))} elements, "
                f"not the {source.num_elements} of the input of reduce {hero.name!r}"
            )
            return None
    info = _reduce_info(computation, hero)
    via = "" if roots[first] == hero.name else f" (hero of root {roots[first]!r})"
    n_reduce = sum(1 for r, h in zip(roots, heroes) if computation.instruction(h).opcode == "reduce")
    extra = ""
    if len(roots) > 1:
        extra = f"; {len(roots)} outputs, {n_reduce} of them reductions sharing that input shape"
    reason = (
        f"reduction: {'reduce' if via else 'root'} {hero.name!r}{via} reduces dims "
        f"{_fmt_dims(info.reduced_dims)} of {source} ({describe(info)}; XLA groups it as "
        f"{list(info.dimensions)}){extra}"
    )
    return FusionAnalysis(
        EmitterKind.REDUCTION, heroes, reason, roots, info.is_row_reduction,
        info.reduced_dims, info.kept_dims, info.dimensions,
    )


def _try_transpose(computation, roots, heroes, notes) -> FusionAnalysis | None:
    """XLA's ``FindConsistentTransposeHero``."""
    found: TransposeDescription | None = None
    others = []
    for r, h in zip(roots, heroes):
        desc = transpose_description(computation, computation.instruction(h))
        if desc is None:
            others.append(r)
        elif found is None:
            found = desc
        elif not found.is_equivalent(desc):
            notes.append(f"transposes {found.instruction!r} and {h!r} differ")
            return None
    if found is None:
        return None
    hero = computation.instruction(found.instruction)
    source = array_shape_of(operand(computation, hero, 0))
    for r in others:
        if array_shape_of(computation.instruction(r)).dims != source.dims:
            notes.append(f"output {r!r} does not have the shape of transpose input {source}")
            return None
    what = "transpose" if hero.opcode == "transpose" else "copy changing the layout"
    via = "" if found.instruction in roots else " (through elementwise/bitcast ops)"
    reason = (
        f"transpose: {what} {hero.name!r}{via} from {source} to {hero.shape} is the physical "
        f"transpose {list(found.permutation)} of {list(found.dimensions)}; its swapped dims "
        "are large enough (XLA: both >= 16, or both >= 8 with product >= 8192) for a tiled "
        "shared-memory shuffle with coalesced reads and writes"
    )
    return FusionAnalysis(EmitterKind.TRANSPOSE, heroes, reason, roots, transpose=found)


def _is_unit_slice(instr: HloInstruction) -> bool:
    return instr.opcode == "slice" and all(d.stride == 1 for d in instr.attr("slice"))


def _try_input_slices(computation, roots, heroes) -> FusionAnalysis | None:
    instrs = [computation.instruction(r) for r in roots]
    if not all(_is_unit_slice(i) for i in instrs):
        return None
    shapes = {array_shape_of(operand(computation, i, 0)).dims for i in instrs}
    if len(shapes) != 1:
        return None
    return FusionAnalysis(
        EmitterKind.INPUT_SLICES, heroes,
        f"input_slices: all {len(roots)} outputs are unit-stride slices of operands of shape "
        f"{list(shapes.pop())}; one loop over the input writes each slice",
        roots,
    )


def _loop_or_dus(computation, roots, heroes, notes, fusion_instr, module) -> FusionAnalysis:
    ok, why = in_place_dynamic_update_slice(computation, roots, fusion_instr, module)
    if ok:
        return FusionAnalysis(EmitterKind.IN_PLACE_DYNAMIC_UPDATE_SLICE, heroes, why, roots)
    if why:
        notes.append(why)
    notes.extend(_unused_candidates(computation, heroes, notes))
    reason = "loop: no output has a hero with a dedicated emitter (the default)"
    if notes:
        reason += "; " + "; ".join(notes)
    return FusionAnalysis(EmitterKind.LOOP, heroes, reason, roots)


def _unused_candidates(computation, heroes, notes) -> list[str]:
    """Why reduces and transposes that are present did not make a dedicated emitter."""
    said = " ".join(notes)
    out = []
    for instr in computation.instructions:
        if repr(instr.name) in said:
            continue
        if instr.opcode == "reduce" and instr.name not in heroes:
            out.append(
                f"reduce {instr.name!r} is not a hero: it reaches the outputs through ops that "
                "are not unary elementwise ops or bitcasts (XLA's reduction epilogues)"
            )
        elif traits(instr.opcode).physical_transpose and not is_bitcast_op(computation, instr):
            if transpose_description(computation, instr) is None:
                out.append(
                    f"{instr.opcode} {instr.name!r} moves data but is not a tiled transpose "
                    "(its normalized physical permutation is not [0,2,1] or [2,1,0], or its "
                    "swapped dims are too small: XLA needs both >= 16, or both >= 8 with "
                    "product >= 8192), so the loop emitter reads it strided"
                )
            else:
                out.append(
                    f"{instr.opcode} {instr.name!r} is not a hero: ops after it are not all "
                    "elementwise or bitcasts, or it competes with another candidate"
                )
    return out


def _analyze(computation, module, fusion_instr, ignore_constant_operands) -> FusionAnalysis:
    roots = fusion_roots(computation)
    heroes = tuple(
        find_non_trivial_hero(computation, r, ignore_constant_operands=ignore_constant_operands)
        for r in roots
    )
    if fusion_instr is not None:
        custom = _custom_kind(fusion_instr, heroes, roots)
        if custom is not None:
            return custom
    notes: list[str] = []
    for attempt in (_try_reduction, _try_transpose):
        found = attempt(computation, roots, heroes, notes)
        if found is not None:
            return found
    if len(roots) > 1:
        found = _try_input_slices(computation, roots, heroes)
        if found is not None:
            return found
        return _loop_or_dus(computation, roots, heroes, notes, fusion_instr, module)
    root = computation.instruction(roots[0])
    if root.opcode == "scatter":
        return FusionAnalysis(
            EmitterKind.SCATTER, heroes, f"scatter: the root {root.name!r} is a scatter", roots
        )
    hero = computation.instruction(heroes[0])
    if hero.opcode == "concatenate" and not isinstance(root.shape, TupleShape):
        if len(hero.operands) <= MAX_CONCATENATE_OPERANDS:
            via = "" if hero.name == root.name else f" (hero of root {root.name!r})"
            return FusionAnalysis(
                EmitterKind.CONCATENATE, heroes,
                f"concatenate: {hero.name!r}{via} joins {len(hero.operands)} operands along "
                f"dim {hero.attr('dimensions')}; each operand is written by its own loop",
                roots,
            )
        notes.append(
            f"concatenate {hero.name!r} has {len(hero.operands)} operands, more than XLA's "
            f"{MAX_CONCATENATE_OPERANDS} for the concatenate emitter"
        )
    return _loop_or_dus(computation, roots, heroes, notes, fusion_instr, module)


def analyze_computation(
    computation: HloComputation,
    module: HloModule | None = None,
    *,
    ignore_constant_operands: bool = False,
) -> FusionAnalysis:
    """The emitter decision for a fused computation (no fusion instruction to consult).

    ``ignore_constant_operands`` lets the hero walk pass elementwise ops whose other operands
    are constants (e.g. ``divide(broadcast(1), reduce)``); XLA does not.
    """
    del module  # the decision needs only the fused computation
    return _analyze(computation, None, None, ignore_constant_operands)


def analyze_fusion(
    module: HloModule, fusion_instr: HloInstruction, *, ignore_constant_operands: bool = False
) -> FusionAnalysis:
    """The emitter decision for ``fusion_instr``, a ``fusion`` op of ``module``.

    Consults the fusion's ``kind`` and ``backend_config`` (for Triton/custom fusions) and,
    for the in-place dynamic-update-slice check, its operands.
    """
    if fusion_instr.opcode != "fusion":
        raise UnsupportedOpError(
            f"expected a fusion instruction, got {fusion_instr.opcode}", where=fusion_instr.name
        )
    called = fusion_instr.attr("calls", None)
    if not isinstance(called, str) or not module.has_computation(called):
        raise HloVerifyError(
            f"fusion calls unknown computation {called!r}", where=fusion_instr.name
        )
    return _analyze(module.computation(called), module, fusion_instr, ignore_constant_operands)
