"""Dot (matmul) fusions lowered to ``tl.dot`` kernels: the dot, its prologue and its epilogue.

A *dot fusion* is a ``fusion`` whose computation holds exactly one ``dot``: XLA's Triton GEMM
fusions (``kind=kCustom`` with ``backend_config`` kind ``__triton_gemm``) and plain
``kLoop``/``kOutput`` fusions whose hero is a dot.  The operands may be computed by a prologue
of elementwise and data-movement ops (convert, broadcast, transpose, bitcast, ``convert(s8) *
scale`` dequantization ...), read inside the kernel's K loop; the root may be an elementwise
epilogue of the dot (bias add through a broadcast, GELU, residual add, convert), applied to the
accumulator before the store.

Numerics (matching XLA's reference evaluator):

* f32 x f32 dots are exact (``input_precision="ieee"``) unless the dot's ``algorithm`` asks for
  TF32 (``dot_tf32_tf32_f32`` -> ``"tf32"``, ``dot_tf32_tf32_f32_x3`` -> ``"tf32x3"``).  XLA:GPU
  would use TF32 for ``operand_precision=default``; we follow XLA:CPU and JAX's documented
  default semantics instead (exact unless asked), so results do not depend on the target.
  ``operand_precision`` ``highest``/``high``/``default`` all mean exact here.  TF32 is an
  explicit option: ``compile_hlo(f32_dot_precision="tf32")`` (or ``"tf32x3"``) gives every f32
  dot without an algorithm and without ``highest`` operand precision XLA's TF32 algorithm
  first (``fusion.transforms.dot_algorithm``), as ``torch.backends.cuda.matmul.allow_tf32``
  is an opt-in; TF32 keeps 10 mantissa bits (about 1e-3 relative per product), so checks of
  such a module allow for it (``output_check.TF32_TOLERANCE``).
* bf16 and f16 operands are multiplied on the tensor cores with an fp32 accumulator
  (``out_dtype=tl.float32``), rounded once to the dot's type.
* f8e4m3fn x f8e4m3fn and f8e5m2 x f8e5m2 go to the tensor cores as fp8 on a GPU (sm_89+:
  ``xla_math.DOT_F8E4M3FN``, fp32 accumulator); under the interpreter they are exactly widened
  to fp32 (fp8 products are exact in fp32, as XLA computes them).  Other mixes with fp8 (e4m3
  x e5m2, fp8 x bf16) and the small floats ``tl.dot`` has no type for (the fnuz formats,
  f8e4m3, f8e3m4, f8e8m0fnu, f4e2m1fn) are widened to fp32 on every target.  Below sm_89 Triton has no
  f8e4m3fn, so such a dot is refused there (:func:`compile_dot_fusion`).
* f64 x f64 -> f64 multiplies and accumulates in f64 (``out_dtype=tl.float64``; DMMA on sm_80+).
* s8 x s8 -> s32 uses ``out_dtype=tl.int32``.  Other integer dots (s32, s64, u32, s16, u8,
  pred) take no ``tl.dot``: the kernel sums a ``[BLOCK_M, BLOCK_K, BLOCK_N]`` product tile in
  the result type, wrapping as XLA does (small tiles: ``DotProblem.multiply_add``).  Integer
  operands with a float result are converted to f32 first, as XLA converts them; an f8
  result is the f32 sum rounded once.

>>> import fusion
>>> m = fusion.parse_hlo('''HloModule m
... f {
...   a = f32[20,28] parameter(0)
...   b = f32[28,36] parameter(1)
...   ROOT d = f32[20,36] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
... }
... ENTRY e {
...   x = f32[20,28] parameter(0)
...   y = f32[28,36] parameter(1)
...   ROOT r = f32[20,36] fusion(x, y), kind=kCustom, calls=f
... }''')
>>> is_dot_fusion(m, m.entry.root)
True
>>> problem = dot_problem(m, m.entry.root)
>>> (problem.m, problem.n, problem.k, problem.batch), dot_flops(problem)
((20, 36, 28, 1), 40320)
"""
from __future__ import annotations

import math
from collections.abc import Callable

from fusion.errors import UnsupportedOpError
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.opcodes import traits
from fusion.transforms.dot_algorithm import DOT_ALGORITHM_PRECISIONS
from fusion.ir.element_types import ELEMENT_TYPES, element_type
from fusion.ir.shape import ArrayShape
from triton_backend.lowering.emitter.triton_types import FLOAT8, render_round, storage_dtype
from triton_backend.templates.dot.gemm_kernel import TL_DOT_OPERAND_DTYPES, TL_DOT_OPERANDS
from triton_backend.templates.dot.kernel import DotSpec, render_dot_kernel
from triton_backend.runtime.launch_mode import runs_on_interpreter
from triton_backend.templates.dot.tiling import (
    DotProblem,
    DotTiling,
    dot_flops,
    interpreter_tiling,
    tiling_from,
)
from triton_backend.runtime.kernel_loading import (CompiledFusion, TemplateKind, find_fusion,
                                                   fused_ops, hero_count, load_kernel,
                                                   refuse_other_loops)
from triton_backend.runtime.kernel_cache import KernelCache

_ALGORITHM_PRECISION = DOT_ALGORITHM_PRECISIONS


_INTEGERS = frozenset(t.name for t in ELEMENT_TYPES.values() if t.is_integer or t.is_pred)

#: The accumulator of an integer dot by its result type (32 bits for narrower results).
_INTEGER_ACCUMULATORS = {"pred": "tl.int32", "s8": "tl.int32", "s16": "tl.int32",
                         "s32": "tl.int32", "s64": "tl.int64", "u8": "tl.uint32",
                         "u16": "tl.uint32", "u32": "tl.uint32", "u64": "tl.uint64"}

#: Float result types a dot accumulates in f32 and rounds to.
_FLOAT_RESULTS = frozenset({"bf16", "f16", "f32"}) | FLOAT8

#: Operand types Triton lowers only on sm_89 and newer (``fp8e4nv``).
_SM89_OPERANDS = frozenset({"f8e4m3fn"})

def is_dot_fusion(module: HloModule, fusion_instr: HloInstruction | str) -> bool:
    """True when ``fusion_instr`` is a fusion whose computation holds exactly one dot."""
    return hero_count(module, fusion_instr, "dot") == 1


def _the_dot(module: HloModule, fusion_instr: HloInstruction) -> HloInstruction:
    dots = fused_ops(module, fusion_instr, "dot")
    if len(dots) != 1:
        raise UnsupportedOpError(f"fusion {fusion_instr.name} holds {len(dots)} dots; a dot "
                                 "fusion holds exactly one", where=fusion_instr.name)
    return dots[0]


def dot_spec(module: HloModule, fusion_instr: HloInstruction | str) -> DotSpec:
    """The flattened dims, roles of operand dims and dtypes of the fusion's dot."""
    fusion_instr = find_fusion(module, fusion_instr)
    dot = _the_dot(module, fusion_instr)
    comp = module.computation(fusion_instr.attr("calls"))
    refuse_other_loops(comp, dot)
    lhs, rhs = (comp.instruction(o).shape for o in dot.operands)
    out = dot.shape
    if not all(isinstance(s, ArrayShape) for s in (lhs, rhs, out)):
        raise UnsupportedOpError("dot with tuple-shaped operands", where=dot.name)
    lc, rc = tuple(dot.attr("lhs_contracting_dims", ())), tuple(dot.attr("rhs_contracting_dims", ()))
    lb, rb = tuple(dot.attr("lhs_batch_dims", ())), tuple(dot.attr("rhs_batch_dims", ()))
    lf = [d for d in range(lhs.rank) if d not in lc and d not in lb]
    rf = [d for d in range(rhs.rank) if d not in rc and d not in rb]

    def roles(rank, batch, free, contracting):
        table = {}
        for i, d in enumerate(batch):
            table[d] = ("b", i)
        for i, d in enumerate(free):
            table[d] = ("m", i)
        for i, d in enumerate(contracting):
            table[d] = ("k", i)
        return tuple(table[d] for d in range(rank))

    operand_dtype, acc_dtype, precision, rounding = dot_numerics(dot, lhs.dtype, rhs.dtype, out.dtype)
    return DotSpec(
        dot=dot,
        batch_sizes=tuple(lhs.dims[d] for d in lb),
        m_sizes=tuple(lhs.dims[d] for d in lf),
        n_sizes=tuple(rhs.dims[d] for d in rf),
        k_sizes=tuple(lhs.dims[d] for d in lc),
        lhs_dims=roles(lhs.rank, lb, lf, lc),
        rhs_dims=roles(rhs.rank, rb, rf, rc),
        operand_dtype=operand_dtype, acc_dtype=acc_dtype, input_precision=precision,
        result_rounding=rounding)


def dot_numerics(dot: HloInstruction, lhs: str, rhs: str, out: str):
    """``(operand dtype, accumulator dtype, input_precision, result rounding)`` of a dot with
    operand types ``lhs``, ``rhs`` and result type ``out`` (the numerics in the module
    docstring); also used by the attention template for its two dots.  An operand dtype
    outside ``TL_DOT_OPERANDS`` is multiplied and summed on the CUDA cores
    (``GemmKernel.k_loop``)."""
    algorithm = dot.attr("algorithm", None)
    if algorithm is not None and str(algorithm) not in _ALGORITHM_PRECISION:
        raise UnsupportedOpError(f"dot algorithm {algorithm} is not supported (supported: "
                                 f"{sorted(_ALGORITHM_PRECISION)})", where=dot.name)
    integers = lhs in _INTEGERS and rhs in _INTEGERS
    if lhs == rhs == "s8" and out in ("s32", "s16", "s8"):  # int8 tensor cores
        rounding = "{acc}" if out == "s32" else "{acc}.to(tl.int%s)" % out[1:]
        return "tl.int8", "tl.int32", None, rounding
    if integers and out in _INTEGER_ACCUMULATORS:
        # XLA multiplies and sums integers in the result type (wrapping); narrower results
        # wrap the same from a 32-bit sum.
        acc = _INTEGER_ACCUMULATORS[out]
        storage = storage_dtype(element_type(out))
        rounding = "({acc} != 0)" if out == "pred" else \
            "{acc}" if storage == acc else "{acc}.to(%s)" % storage
        return acc, acc, None, rounding
    # the small floats tl.dot has no type for: widened to f32 (their products are exact)
    known = all(t in TL_DOT_OPERAND_DTYPES or t in _INTEGERS or t in FLOAT8 or t == "f64"
                for t in (lhs, rhs))
    if known and out == "f64":
        # f64 products summed in f64 (the FP64 tensor cores on sm_80+, DMMA)
        return "tl.float64", "tl.float64", None, "{acc}"
    if not known or "f64" in (lhs, rhs) or out not in _FLOAT_RESULTS:
        raise UnsupportedOpError(f"dot of {lhs} x {rhs} -> {out} is not supported (supported: "
                                 "f32, bf16, f16, the 8-bit and 4-bit floats and integer operands with an "
                                 f"{', '.join(sorted(_FLOAT_RESULTS))} result, f64 with an f64 "
                                 "result, integers with an integer or pred result)",
                                 where=dot.name)
    if lhs == rhs and lhs in TL_DOT_OPERAND_DTYPES and lhs not in ("f32", "s8") and not integers:
        operand, precision = TL_DOT_OPERAND_DTYPES[lhs], None
    else:
        # Mixed, f32 or integer operands: both are (exactly, or as XLA converts them)
        # widened to f32.
        operand = "tl.float32"
        precision = _ALGORITHM_PRECISION.get(str(algorithm), "ieee") if algorithm else "ieee"
    return operand, "tl.float32", precision, render_round("{acc}", element_type(out))


def _operand_bytes(module: HloModule, fusion_instr: HloInstruction, dot: HloInstruction) -> int:
    comp = module.computation(fusion_instr.attr("calls"))
    return max(comp.instruction(o).shape.element_type.bits // 8 for o in dot.operands)


def dot_problem(module: HloModule, fusion_instr: HloInstruction | str) -> DotProblem:
    """The dot's flattened sizes (batch, M, N, K) and operand width, for tiling and costs."""
    fusion_instr = find_fusion(module, fusion_instr)
    spec = dot_spec(module, fusion_instr)
    return DotProblem(math.prod(spec.batch_sizes), math.prod(spec.m_sizes),
                      math.prod(spec.n_sizes), math.prod(spec.k_sizes),
                      _operand_bytes(module, fusion_instr, spec.dot),
                      _expensive_prologue(module, fusion_instr, spec.dot),
                      0 if spec.operand_dtype in TL_DOT_OPERANDS
                      else max(4, spec.dot.shape.element_type.byte_size))


def _expensive_prologue(module: HloModule, fusion_instr: HloInstruction,
                        dot: HloInstruction) -> bool:
    """Whether an operand of the dot is computed with an expensive op inside the fusion."""
    return prologue_has(module.computation(fusion_instr.attr("calls")), dot,
                        lambda instr: traits(instr.opcode).expensive)


def prologue_has(comp: HloComputation, dot: HloInstruction,
                 predicate: Callable[[HloInstruction], bool],
                 stop_at: frozenset[str] = frozenset()) -> bool:
    """Whether an instruction of ``comp`` that ``dot``'s operands are computed from (the
    operands included) satisfies ``predicate``; the walk neither tests nor passes the
    instructions ``stop_at`` names."""
    stack, seen = list(dot.operands), set(stop_at)
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        instr = comp.instruction(name)
        if predicate(instr):
            return True
        stack.extend(instr.operands)
    return False


def target_arch(target: str | None) -> int:
    """The compute capability a target names (``"cuda:80"``, ``"sm_90"``); 90 for none, or a
    backend named without one (``"cuda"``, what ``autotune`` compiles its untuned default for).

    >>> target_arch("cuda:80"), target_arch("sm_90"), target_arch("cuda"), target_arch(None)
    (80, 90, 90, 90)
    """
    if not target or str(target).strip().lower() in ("cuda", "gpu"):
        return 90
    digits = "".join(ch for ch in str(target).rsplit(":", 1)[-1] if ch.isdigit())
    if not digits:
        raise UnsupportedOpError(f"cannot read a compute capability from target {target!r} "
                                 "(expected e.g. 'cuda:90' or 'sm_80')", where=str(target))
    return int(digits)


def _refuse_fp8_below_sm89(module: HloModule, fusion_instr: HloInstruction, spec: DotSpec,
                           arch: int, target: str | None) -> None:
    """A GPU below sm_89 cannot hold f8e4m3fn at all (Triton's ``fp8e4nv``): refuse there."""
    comp = module.computation(fusion_instr.attr("calls"))
    types = {comp.instruction(o).shape.dtype for o in spec.dot.operands}
    if arch < 89 and types & _SM89_OPERANDS and not runs_on_interpreter(target):
        raise UnsupportedOpError(f"dot {spec.dot.name} of f8e4m3fn operands needs sm_89 or newer "
                                 f"(target {target}): Triton has no f8e4m3fn below sm_89",
                                 where=spec.dot.name)


def compile_dot_fusion(module: HloModule, fusion_instr: HloInstruction | str, *,
                       tile_sizes=None, target: str | None = None,
                       cache: KernelCache | None = None):
    """Generate, cache and load the ``tl.dot`` kernel of a dot fusion.

    ``tile_sizes``: None (the default tiling), ``(block_m, block_n, block_k)``, a mapping of
    ``DotTiling`` fields, or a ``DotTiling``; illegal tilings raise ``UnsupportedOpError``.
    ``target`` (``"cuda:80"``, ``"sm_90"``; default sm_90) bounds shared memory.  Returns a
    ``CompiledFusion`` of kind ``"dot"`` whose ``tile_sizes`` are ``(BM, BN, BK)``.
    """
    fusion_instr = find_fusion(module, fusion_instr)
    spec = dot_spec(module, fusion_instr)
    arch = target_arch(target)
    _refuse_fp8_below_sm89(module, fusion_instr, spec, arch, target)
    problem = dot_problem(module, fusion_instr)
    if tile_sizes is None and runs_on_interpreter(target):
        tile_sizes = interpreter_tiling(problem, arch)
    tiling = tiling_from(tile_sizes, problem, arch)
    source, grid = render_dot_kernel(module, fusion_instr, spec, tiling)
    loaded, path = load_kernel(module, fusion_instr, source, repr(tiling), target, cache)
    return CompiledFusion(fusion_instr.name, TemplateKind.DOT, path, source, grid, tiling.tile_sizes, loaded)


__all__ = ["TL_DOT_OPERANDS", "DotProblem", "DotTiling", "compile_dot_fusion", "dot_flops",
           "dot_numerics", "dot_problem", "dot_spec", "is_dot_fusion", "target_arch"]
