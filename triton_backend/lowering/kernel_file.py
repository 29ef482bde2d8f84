"""Render the complete kernel file of one fusion: header, combiners, kernel, host code.

The file is self-contained Python: the source HLO and the operand reads (instruction at index
expressions, i.e. the indexing maps the kernel applies) are embedded as sanitized comments;
``run(*tensors)`` launches it and ``python kernel_<hash>.py`` runs it on example inputs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from fusion.analysis.emitter_kind import EmitterKind
from fusion.ir.element_types import ELEMENT_TYPES
from fusion.errors import UnsupportedOpError
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.text.printer import print_computation, print_instruction
from fusion.ir.shape import ArrayShape, TupleShape
from tiling.maps.affine_expr import AffineExpr, Constant, d
from tiling.maps.expr_variables import substitute, used_variables
from tiling.symbolic.tiled_fusion import reduce_projection
from triton_backend.lowering.host_template import (
    PRELUDE,
    RUNTIME,
    kernel_specs,
    padded_outputs_line,
)
from tiling.policy.limits import TARGET_TILE_ELEMENTS
from triton_backend.lowering.kernel_plan import (
    INTERPRETER_TILE_ELEMENTS,
    KernelPlan,
    index_bits_for,
    launch_options,
    plan_kernel,
    program_elements,
)
from triton_backend.lowering.rules.value_rules import rule_for
from triton_backend.lowering.rules.memory_rules import store_output
from triton_backend.lowering.rules.split_reduction import (
    ORDERED_SUMS_IMPORT,
    SplitEmission,
    SplitRefused,
    last_program_mask,
)
from triton_backend.lowering.emitter.packed_access import (
    flat_word_view,
    needs_flat_words,
    word_aligned_tile_sizes,
)
from triton_backend.lowering.emitter.value_emitter import ValueEmitter
from triton_backend.lowering.emitter.triton_types import KERNEL_IMPORTS
from triton_backend.lowering.emitter.identifiers import IdentifierAllocator, comment_block, sanitize


@dataclass(frozen=True)
class RenderedKernel:
    """A kernel file's source and what the host needs to know about it."""

    source: str
    kernel_name: str
    plan: KernelPlan
    output_shapes: tuple[ArrayShape, ...]
    num_warps: int = 4
    num_stages: int = 1


def _tile_scans_line(plan: KernelPlan) -> str:
    """The ``TILE_SCANS`` constant of a kernel with scans along the tile (none: no line),
    which the compile report reads."""
    if not plan.tile_scans:
        return ""
    return ("# Scans along the tile (instruction, output dim, form): 'whole' scans the tile's "
            "lanes once;\n# 'carried' also folds in the scan's output next to the tile.\n"
            f"TILE_SCANS = {plan.scan_forms!r}\n")


def output_shapes(fusion_instr: HloInstruction) -> tuple[ArrayShape, ...]:
    shape = fusion_instr.shape
    if isinstance(shape, TupleShape):
        if not all(isinstance(e, ArrayShape) for e in shape.elements):
            raise UnsupportedOpError("nested tuple outputs are not supported", where=fusion_instr.name)
        return tuple(shape.elements)
    return (shape,)


def render_kernel_file(module: HloModule, fusion_instr: HloInstruction,
                       tile_sizes: tuple[int, ...] | None = None,
                       kind: EmitterKind = EmitterKind.LOOP, *,
                       reduction_chunk: int | None = None,
                       index_bits: int | None = None, num_warps: int | None = None,
                       num_stages: int | None = None, interpreter: bool = False,
                       split_parts: int | None = None) -> RenderedKernel:
    """Render the kernel file for ``fusion_instr`` (a ``fusion`` op of ``module``).

    ``index_bits`` (32 or 64) defaults to 64 exactly when some buffer has more than
    2^31 - 1 elements.  ``num_warps``/``num_stages`` (the file's ``NUM_WARPS``/``NUM_STAGES``,
    which ``run`` launches with) default to ``kernel_plan.launch_options`` for the tile.
    ``interpreter``: the kernel will run under the Triton interpreter, so reductions are
    emitted as halving steps (``ValueEmitter.tree_reductions``), not ``tl.reduce``.
    ``split_parts``: how a looped reduction with few output tiles is split among programs
    (``kernel_plan.plan_kernel``; None: by the default rule, 1: never).
    """
    outputs = output_shapes(fusion_instr)
    if len({o.dims for o in outputs}) != 1:
        split_parts = 1  # outputs at other indices than the reduction's: nothing to join
    try:
        return _render(module, fusion_instr, tile_sizes, kind, reduction_chunk, index_bits,
                       num_warps, num_stages, interpreter, split_parts)
    except SplitRefused:
        return _render(module, fusion_instr, tile_sizes, kind, reduction_chunk, index_bits,
                       num_warps, num_stages, interpreter, 1)


def _render(module: HloModule, fusion_instr: HloInstruction, tile_sizes, kind: EmitterKind,
            reduction_chunk: int | None, index_bits: int | None, num_warps: int | None,
            num_stages: int | None, interpreter: bool, split_parts: int | None
            ) -> RenderedKernel:
    computation = module.computation(fusion_instr.attr("calls"))
    outputs = output_shapes(fusion_instr)
    space, projections = iteration_space(computation, fusion_instr, outputs)
    if index_bits is None:
        shapes = [p.shape for p in computation.parameters if isinstance(p.shape, ArrayShape)]
        index_bits = index_bits_for(math.prod(s.dims) for s in (*shapes, *outputs))
    target = INTERPRETER_TILE_ELEMENTS if interpreter else TARGET_TILE_ELEMENTS
    if tile_sizes is not None and len(tile_sizes) != len(space):
        tile_sizes = (math.prod(tile_sizes),)  # a flat space: as many elements per program
    plan = plan_kernel(computation, space, tile_sizes, reduction_chunk=reduction_chunk,
                       index_bits=index_bits, target_elements=target, split_parts=split_parts,
                       module=module)
    aligned = word_aligned_tile_sizes(plan.tile_sizes, _stored_shapes(space, outputs))
    if aligned != plan.tile_sizes:  # packed outputs: each program must own whole 32-bit words
        plan = plan_kernel(computation, space, aligned, reduction_chunk=reduction_chunk,
                           index_bits=index_bits, target_elements=target,
                           split_parts=split_parts, module=module)
    warps, stages = _launch_options(computation, plan, outputs)
    warps, stages = num_warps or warps, num_stages or stages
    names = IdentifierAllocator()
    kernel_name = names.fresh(f"{sanitize(fusion_instr.name)}_kernel")
    em = ValueEmitter(module, computation, list(plan.axis_blocks), names, dict(plan.reduce_axes),
                      reduction_chunk=plan.reduction_chunk, index_bits=plan.index_bits,
                      rule_for=rule_for, tree_reductions=interpreter,
                      tile_scans=frozenset(name for name, _ in plan.tile_scans))
    parameters = computation.parameters
    for p in parameters:
        em.pointer_for(p)
    out_pointers = [names.fresh(f"out{i}_ptr") for i in range(len(outputs))]
    _emit_body(em, plan, outputs, out_pointers, computation, projections)
    constants = [b for b in em.buffers.values() if b.parameter_number is None]
    signature = [em.buffers[p.name].pointer for p in parameters] + [b.pointer for b in constants]
    signature += out_pointers
    if em.split is not None:
        signature += [*em.split.pointers, em.split.counters]
    reads = sorted({f"{name} at ({', '.join(map(str, idx))})" for (name, idx) in em.reads})
    var_names = ", ".join(f"d{k}={v.name}" for k, v in enumerate(em.dims))
    looped = (f", reductions looped in chunks of {plan.reduction_chunk}"
              if plan.reduction_chunk is not None and plan.reduce_axes else "")
    if plan.tile_scans:
        looped += ", " + ", ".join(
            f"{name} scanned along the tile's dim {j}"
            + (", carried in from the other tiles" if form == "carried" else "")
            for name, j, form in plan.scan_forms)
    if plan.split is not None:
        looped += (f", {plan.split.reduce} split into {plan.split.parts} parts of "
                   f"{plan.split.span} per output tile")
    header = comment_block(
        f"Generated by triton_backend.lowering for fusion {fusion_instr.name} ({kind.value} "
        "emitter).\n"
        f"{print_instruction(fusion_instr)}\n\n{print_computation(computation)}\n\n"
        f"iteration space {list(plan.output_dims)}, tile sizes {list(plan.tile_sizes)}, "
        f"axis blocks {list(plan.axis_blocks)}, grid {plan.grid}{looped}, "
        f"{plan.index_bits}-bit offsets, num_warps {warps}, num_stages {stages}\n"
        f"index variables: {var_names}\n"
        "operand reads (output -> operand indexing):\n" + "\n".join("  " + r for r in reads))
    combiners = "\n\n".join(em.helper_functions.values())
    kernel = (f"@triton.jit\ndef {kernel_name}({', '.join(signature)}):\n" + "\n".join(em.lines) + "\n")
    specs = kernel_specs(kernel_name, plan.grid, parameters, [b.instruction for b in constants],
                         outputs, (warps, stages)) + padded_outputs_line(outputs)
    imports = KERNEL_IMPORTS
    if em.split is not None:
        specs += em.split.scratch_specs()
        imports += ORDERED_SUMS_IMPORT
    specs += _tile_scans_line(plan)
    source = (header + PRELUDE + imports + "\n\n" + (combiners + "\n\n" if combiners else "")
              + kernel + "\n\n" + specs + RUNTIME)
    return RenderedKernel(source, kernel_name, plan, outputs, warps, stages)


def _stored_shapes(space: tuple[int, ...], outputs: tuple[ArrayShape, ...]
                   ) -> tuple[ArrayShape, ...]:
    """The outputs whose words a tile must hold whole: over a flat space only the flat views
    of untiled packed outputs (``packed_access.flat_word_view``), their words along the
    space (other packed outputs are updated field by field there)."""
    if len(space) != 1:
        return outputs
    return tuple(view for view in map(flat_word_view, outputs) if view is not None)


def _launch_options(computation: HloComputation, plan: KernelPlan,
                    outputs: tuple[ArrayShape, ...]) -> tuple[int, int]:
    """``kernel_plan.launch_options`` for the plan's largest tensor and the narrowest element
    among the buffers (the one that needs the most elements per thread for 128 bits)."""
    shapes = [p.shape for p in computation.parameters if isinstance(p.shape, ArrayShape)]
    sizes = [ELEMENT_TYPES[s.dtype].byte_size for s in (*shapes, *outputs)
             if s.rank and s.dtype in ELEMENT_TYPES]
    looped = plan.reduction_chunk is not None and bool(plan.reduce_axes)
    return launch_options(program_elements(computation, plan), min(sizes, default=4), looped=looped)


def iteration_space(computation: HloComputation, fusion_instr: HloInstruction,
                    outputs: tuple[ArrayShape, ...]
                    ) -> tuple[tuple[int, ...], tuple[tuple[AffineExpr, ...], ...]]:
    """The shape the kernel iterates over and, per output, its index as expressions of the
    space's dims (``d_k``: space dim ``k``; ``0``: a unit dim).

    Outputs of one shape are indexed by all dims.  A multi-output reduction fusion (XLA's:
    reduces next to outputs of the reduce input's shape) iterates over the larger shape; a
    reduce output is indexed through the tile analysis' ``reduce_projection`` (the reduce's
    kept dims, ``0`` for unit dims a reshape added) and stored only where the dims it does not
    use are 0 (so each element is written once).

    Any other mix of shapes (XLA's input-slices fusions, an in-place dynamic-update-slice with
    a side output of the update's shape, a transpose or reshape next to its operand) iterates
    over a *flat* space, ``[n]`` for the largest output's ``n`` elements: each output is
    computed at its own row-major coordinates of ``d0`` (its values through the indexing maps,
    as any output) and stored where ``d0`` is below its own size (``flat_store_limits``); an
    untiled packed output at its memory-order coordinates instead, so that ``d0`` walks its
    words (``packed_access.flat_word_view``: also the space of an output whose words do not
    lie along one logical dim).  One
    kernel serves every output, so shared operands are read by one launch; the outputs are
    not computed at one common index (a slice's producer is evaluated once per output it
    feeds), the price of needing no relation between the shapes.
    """
    dims = {o.dims for o in outputs}
    if any(needs_flat_words(o) for o in outputs):
        return _flat_space(outputs)  # packed words across dims: stored in memory order
    if len(dims) == 1:
        identity = tuple(d(k) for k in range(len(outputs[0].dims)))
        return outputs[0].dims, tuple(identity for _ in outputs)
    space = max(dims, key=lambda ds: (math.prod(ds), len(ds)))
    root = computation.root
    projections = []
    for i, shape in enumerate(outputs):
        if shape.dims == space:
            projections.append(tuple(d(k) for k in range(len(space))))
            continue
        projection = (reduce_projection(computation, root.operands[i], tuple(space),
                                        tuple(shape.dims))
                      if root.opcode == "tuple" else None)
        if projection is None:
            return _flat_space(outputs)
        projections.append(projection)
    return space, tuple(projections)


def _flat_space(outputs: tuple[ArrayShape, ...]
                ) -> tuple[tuple[int, ...], tuple[tuple[AffineExpr, ...], ...]]:
    """The flat iteration space of outputs of unrelated shapes and each output's coordinates.

    >>> space, coords = _flat_space((ArrayShape("f32", (2, 3)), ArrayShape("f32", (4,))))
    >>> space, [[str(e) for e in c] for c in coords]
    ((6,), [['d0 floordiv 3', 'd0 mod 3'], ['d0']])
    >>> [[str(e) for e in c] for c in _flat_space((ArrayShape("f32", (2, 3)),
    ...                                             ArrayShape("f32", (2, 0))))[1]]
    [['d0 floordiv 3', 'd0 mod 3'], ['0', '0']]
    """
    size = max(math.prod(o.dims) for o in outputs)
    return (size,), tuple(_flat_coordinates(shape) for shape in outputs)


def _flat_coordinates(shape: ArrayShape) -> tuple[AffineExpr, ...]:
    """The coordinates of ``shape`` at flat index ``d0``: row-major, or in memory order for an
    untiled packed layout (then ``d0`` is the element's place in its words)."""
    coords, stride = [Constant(0)] * shape.rank, math.prod(shape.dims)
    if stride == 0:  # an empty output is never stored (its limit is 0): any coordinates
        return tuple(coords)
    major_first = (tuple(reversed(shape.layout.minor_to_major)) if flat_word_view(shape)
                   else tuple(range(shape.rank)))
    for position, k in enumerate(major_first):
        n = shape.dims[k]
        stride //= n
        q = d(0) // stride if stride > 1 else d(0)
        # The slowest coordinate needs no mod: lanes past the output's size are not stored.
        coords[k] = q if position == 0 else (q % n if n > 1 else Constant(0))
    return tuple(coords)


def flat_store_limits(space: tuple[int, ...], outputs: tuple[ArrayShape, ...]
                      ) -> tuple[int | None, ...]:
    """Per output, the flat index it is stored below (None: every lane of the space).

    Only a flat space (``_flat_space``: rank 1, outputs of other shapes) has limits.

    >>> flat_store_limits((6,), (ArrayShape("f32", (2, 3)), ArrayShape("f32", (4,))))
    (None, 4)
    """
    if len(space) != 1:
        return tuple(None for _ in outputs)
    return tuple(None if math.prod(o.dims) >= space[0] else math.prod(o.dims) for o in outputs)


def _emit_body(em: ValueEmitter, plan: KernelPlan, outputs, out_pointers, computation,
               projections) -> None:
    rest = em.bind("tl.program_id(0)", "pid")  # allocated, so no HLO value can rebind it
    if plan.split is not None:  # programs p * tiles .. (p + 1) * tiles - 1 reduce part p
        part = em.bind(f"{rest} // {plan.tiles}", "split_part")
        rest = em.bind(f"{rest} % {plan.tiles}", "tile_id")
        em.split = SplitEmission(plan.split, part, rest, plan.tiles)
    tile_vars = [""] * len(plan.output_dims)
    for k in reversed(range(len(plan.output_dims))):
        tile_vars[k] = em.bind(f"{rest} % {plan.tiles_per_dim[k]}", f"tile{k}")
        if plan.index_bits == 64:
            tile_vars[k] = em.bind(f"{tile_vars[k]}.to(tl.int64)", f"tile{k}")
        if k:
            rest = em.bind(f"{rest} // {plan.tiles_per_dim[k]}", "pid_rest")
    out_vars = [em.new_dim(f"i{k}", k, size, f"{tile_vars[k]} * {plan.tile_sizes[k]}",
                           (plan.tiles_per_dim[k] - 1) * plan.tile_sizes[k] + plan.axis_blocks[k] - 1,
                           plan.tile_sizes[k])
                for k, size in enumerate(plan.output_dims)]
    em.tile_dims = tuple(out_vars)
    names = [em.dims[v.index].name for v in out_vars]
    checks = [f"({n} < {size})" for n, size in zip(names, plan.output_dims)]
    for k, (n, tile) in enumerate(zip(names, plan.tile_sizes)):
        if tile != plan.axis_blocks[k] and plan.tiles_per_dim[k] > 1:
            # Lanes past a tile that is not a power of two belong to the next program.
            checks.append(f"({n} - {tile_vars[k]} * {tile} < {tile})")
    mask = em.bind(" & ".join(checks), "out_mask")
    zero = em.bind(" + ".join(f"{n} * 0" for n in names), "tile_zero")
    root = computation.root
    if len(outputs) > 1 and root.opcode == "tuple":
        values = []
        for operand, projection, shape in zip(root.operands, projections, outputs):
            indices = _indices(projection, out_vars) if shape.rank else ()
            value = em.value(operand, indices)
            if not isinstance(value, str):
                raise UnsupportedOpError("tuple-shaped fusion output", where=operand)
            values.append(value)
    else:
        value = em.value(root.name, _indices(projections[0], out_vars) if outputs[0].rank else ())
        values = list(value) if isinstance(value, tuple) else [value]
    if len(values) != len(outputs):
        raise UnsupportedOpError(f"root produces {len(values)} values for {len(outputs)} outputs",
                                 where=root.name)
    if em.split is not None:
        if em.split.last is None:
            raise SplitRefused(f"split reduction {plan.split.reduce} was not emitted",
                               where=plan.split.reduce)
        mask = last_program_mask(em, mask, em.shape_of(tuple(out_vars)))
    limits = flat_store_limits(plan.output_dims, outputs)
    for i, (v, shape, pointer, projection) in enumerate(zip(values, outputs, out_pointers,
                                                            projections)):
        indices = _indices(projection, out_vars) if shape.rank else ()
        store_mask = mask
        if limits[i] is not None:  # a flat space: this output is smaller than the space
            store_mask = f"{mask} & ({names[0]} < {limits[i]})"
        used = {k for e in projection for k in used_variables(e)[0]}
        dropped = [names[k] for k in range(len(names)) if k not in used]
        if dropped:
            store_mask = f"{store_mask} & " + " & ".join(f"({n} == 0)" for n in dropped)
        view = flat_word_view(shape) if len(out_vars) == 1 and shape.rank else None
        if view is not None and projection == _flat_coordinates(shape):  # the words in memory order, along the flat space
            shape, indices = view, (out_vars[0],)
        store_output(em, v, shape, pointer, indices, store_mask, zero, f"output {i}", tuple(out_vars))


def _indices(projection: tuple[AffineExpr, ...], out_vars) -> tuple[AffineExpr, ...]:
    """The projection's expressions over the space dims, in the kernel's dim variables."""
    return tuple(substitute(e, out_vars, None) for e in projection)


__all__ = ["RenderedKernel", "flat_store_limits", "iteration_space", "output_shapes",
           "render_kernel_file"]
