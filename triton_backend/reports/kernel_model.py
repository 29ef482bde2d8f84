"""The cost model's prediction for one compiled kernel (``KernelModel``), as the compile report
gives it: each template's own workload (``tuning.dot_candidates``, ``tuning.attention_workload``),
the tile analysis' for the other kernels, or the compulsory bytes where it cannot model one.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from fusion.ir.shape import flatten_shape
from tiling.policy.candidates import TilingCandidate, evaluate_candidate
from tiling.symbolic.tiled_fusion import analyze_fusion_tiling
from triton_backend.runtime.kernel_loading import TemplateKind
from triton_backend.templates.dot.driver import dot_spec
from triton_backend.templates.dot.tiling import DotTiling
from triton_backend.tuning.attention_workload import attention_workload
from triton_backend.tuning.autotune import workload_for
from triton_backend.tuning.cost_model import InfeasibleLaunch, Workload, estimate
from triton_backend.tuning.dot_candidates import dot_workload


@dataclass(frozen=True)
class KernelModel:
    """The cost model (``triton_backend.tuning.cost_model``) on one kernel at the tiling it was
    compiled with, on ``device``.

    ``modeled_bytes``: the DRAM bytes the tiled kernel moves as the model counts them (every
    block reads the tiles it needs, so re-reads count; caches are ignored);
    ``roofline_time_s``: the kernel's compulsory bytes at the device's peak bandwidth;
    ``hbm_roofline_fraction``: ``roofline_time_s / predicted_time_s``.  ``note`` says how the
    bytes were modeled when it was not from the tile analysis of the compiled tiling (e.g. a
    kernel the tile analysis cannot model is counted at its compulsory bytes).
    ``dot_flops``: the FLOPs of the kernel's dots (a dot or attention template's; 0 for
    others), over the predicted time ``predicted_tflops``, and as a fraction of the device's
    tensor-core peak for the dots' operand type (``tensor_core_peak_flops``, 0 where it has
    none) ``tensor_core_peak_fraction``.
    """

    device: str
    modeled_bytes: int
    predicted_time_s: float
    roofline_time_s: float
    bound: str
    note: str = ""
    dot_flops: int = 0
    tensor_core_peak_flops: float = 0.0

    @property
    def hbm_roofline_fraction(self) -> float:
        return self.roofline_time_s / self.predicted_time_s if self.predicted_time_s else 0.0

    @property
    def predicted_tflops(self) -> float | None:
        """The dots' TFLOP/s at the predicted time (None: no dots)."""
        if not self.dot_flops or not self.predicted_time_s:
            return None
        return self.dot_flops / self.predicted_time_s / 1e12

    @property
    def tensor_core_peak_fraction(self) -> float | None:
        """:attr:`predicted_tflops` over the tensor-core peak (None: no dots or no peak)."""
        if self.predicted_tflops is None or not self.tensor_core_peak_flops:
            return None
        return self.predicted_tflops * 1e12 / self.tensor_core_peak_flops


def array_bytes(shape) -> int:
    """The bytes of every array of ``shape`` (a tuple's leaves summed)."""
    return sum(s.element_type.byte_size * s.num_elements for s in flatten_shape(shape))


def _output_tile(module, instr, kernel, output_dims: tuple[int, ...]) -> tuple[int, ...]:
    """The output tile of the compiled kernel in the tile analysis' terms.

    Loop and reduction kernels tile the output directly (codegen pads a tile past a small dim
    to a power of two; the analysis takes tiles within the dims).  A dot kernel's tile sizes
    are ``(BM, BN, BK[, SPLIT_K])`` over the flattened M and N: each batch dim gets 1, and BM (BN) is laid
    over the lhs (rhs) free dims from the minor one out.
    """
    sizes = tuple(kernel.tile_sizes)[:3]  # a split-K dot's fourth, split_k, is not a tile
    if kernel.kind is TemplateKind.DOT and len(sizes) == 3 and len(output_dims) != 2:
        spec = dot_spec(module, instr)
        nb, nm, nn = len(spec.batch_sizes), len(spec.m_sizes), len(spec.n_sizes)
        if nb + nm + nn == len(output_dims):

            def spread(block: int, dims: tuple[int, ...]) -> list[int]:
                out = []
                for d in reversed(dims):
                    t = max(1, min(block, d))
                    out.append(t)
                    block = max(1, block // t)
                return out[::-1]

            sizes = (*([1] * nb), *spread(sizes[0], output_dims[nb:nb + nm]),
                     *spread(sizes[1], output_dims[nb + nm:]))
    elif kernel.kind is TemplateKind.DOT and len(sizes) == 3:
        sizes = sizes[:2]
    return tuple(min(t, max(n, 1)) for t, n in zip(sizes, output_dims))


def _analysis_workload(module, instr, kernel) -> tuple[Workload | None, str]:
    """The tile analysis' workload of ``kernel``'s tiling, or None and why not."""
    workload, note = None, ""
    try:
        analysis = analyze_fusion_tiling(module, instr)
        dims = tuple(analysis.output_dims)
        candidate = evaluate_candidate(analysis, _output_tile(module, instr, kernel, dims),
                                       getattr(kernel, "reduction_chunk", None))
        if isinstance(candidate, TilingCandidate):
            workload = workload_for(module, instr, candidate)
        else:
            note = f"tile analysis rejects the tiling: {candidate.reason}"
    except Exception as err:  # noqa: BLE001 - any analysis failure: modeled as compulsory
        note = f"no tile analysis ({type(err).__name__}: {str(err)[:160]})"
    return workload, note


def kernel_model(module, instr, kernel, spec, num_warps: int = 4,
                 num_stages: int = 1) -> KernelModel:
    """The cost model's prediction for ``kernel`` (a ``CompiledFusion`` of ``instr``) on
    ``spec``: the tile analysis' costs of its tiling (``tiling.policy.candidates.evaluate_candidate``,
    through ``autotune.workload_for``), estimated by ``cost_model.estimate``; a dot template
    kernel's (split-K programs and partial tiles included, operand tiles shared through L2
    within a wave) by ``dot_candidates.dot_workload``; an attention kernel's (its dots per
    visited block, its steps' critical path) by ``attention_workload``.  A kernel the
    tile analysis cannot model (a sort, a scatter, a tiling it rejects) is modeled at its
    compulsory bytes, and ``note`` says why."""

    comp = module.computation(instr.attr("calls"))
    inputs = sum(array_bytes(p.shape) for p in comp.parameters)
    outputs = array_bytes(instr.shape)
    blocks = max(1, math.prod(kernel.grid))
    sizes = tuple(kernel.tile_sizes)
    if kernel.kind is TemplateKind.DOT and len(sizes) in (3, 4):  # the dot's own model
        tiling = DotTiling(*sizes[:3], num_warps=num_warps, num_stages=num_stages,
                           split_k=sizes[3] if len(sizes) == 4 else 1)
        workload, note = dot_workload(module, instr, tiling, spec), ""
    elif kernel.kind in (TemplateKind.ATTENTION, TemplateKind.ATTENTION_BACKWARD):
        workload, note = attention_workload(module, instr, kernel, spec, num_warps), ""
    else:
        workload, note = _analysis_workload(module, instr, kernel)
        if workload is not None and blocks > workload.num_blocks:
            # A split reduction launches parts of each output tile: its waves are the grid's.
            workload = replace(workload, num_blocks=blocks)
    if workload is None:
        workload = Workload(tuple(kernel.tile_sizes), blocks, inputs, outputs, inputs, outputs, 0)
        note = "modeled at compulsory bytes; " + note
    try:
        cost = estimate(workload, spec, num_warps=num_warps, num_stages=num_stages)
    except InfeasibleLaunch as err:
        note = (note + "; " if note else "") + f"launch not feasible as written ({err}); 4 warps"
        cost = estimate(workload, spec, num_warps=4, num_stages=1)
    roofline = workload.compulsory_bytes / spec.memory_bandwidth_bytes_per_s
    return KernelModel(spec.key, workload.modeled_bytes, cost.predicted_time_s, roofline,
                       cost.bound, note, workload.dot_flops, _tensor_core_peak(spec, workload))


def _tensor_core_peak(spec, workload: Workload) -> float:
    """The tensor-core peak of the workload's dot operand type (0: no dots, dots on the FMA
    units (exact f32), or a type without a tensor-core path)."""
    if not workload.dot_flops or not workload.tensor_core_flops:
        return 0.0
    try:  # the dot workload names f32 tensor-core dots tf32 already
        return spec.peak_flops(workload.tensor_core_dtype, tensor_cores=True)
    except ValueError:
        return 0.0


__all__ = ["KernelModel", "array_bytes", "kernel_model"]
