"""The ``reduce`` rule: reduced dims become extra tensor axes, reduced with ``tl.reduce``.

Each reduce of the fusion owns one kernel axis per reduced dim (assigned by ``kernel_plan``),
holding the whole dim padded to a power of two (a *persistent* reduction); padding lanes are
marked invalid and ignored by the generated masked combiner (``combine_function``).  The axes
are reduced one at a time with ``keep_dims=True`` so the result still broadcasts against the
rank-K kernel space; then the init value is combined in once, and 16-bit results are rounded
to their declared type.
"""
from __future__ import annotations

from fusion.errors import UnsupportedOpError
from fusion.hlo_module import HloInstruction
from tiling.affine_expr import AffineExpr
from triton_backend.codegen.combine_function import render_combine_function
from triton_backend.codegen.value_emitter import Value, ValueEmitter, array_shape
from triton_backend.elementwise_lowering import storage_dtype
from triton_backend.identifiers import sanitize


def _combine_function(em: ValueEmitter, to_apply: str, arity: int) -> str:
    key = f"{to_apply}/{arity}"
    if key not in em.helper_functions:
        name = em.names.fresh(f"combine_{sanitize(to_apply)}")
        em.helper_functions[key] = render_combine_function(em.module.computation(to_apply), name, arity)
        em.helper_names[key] = name
    return em.helper_names[key]


def reduce_rule(em: ValueEmitter, instr: HloInstruction, indices: tuple[AffineExpr, ...]) -> Value:
    """Emit ``instr`` (a possibly variadic reduce) at its output ``indices``."""
    arity = len(instr.operands) // 2
    inputs, inits = instr.operands[:arity], instr.operands[arity:]
    in_shape = array_shape(em.instruction(inputs[0]))
    dims = tuple(instr.attr("dimensions"))
    axes = em.reduce_axes[instr.name]
    fresh = {dim: em.new_dim(f"r_{instr.name}_{dim}", axis, in_shape.dims[dim])
             for dim, axis in zip(dims, axes)}
    kept = iter(indices)
    operand_indices = tuple(fresh[k] if k in fresh else next(kept) for k in range(in_shape.rank))
    shape = em.shape_of(operand_indices)
    valid = em.in_bounds(tuple(fresh.values()), tuple(in_shape.dims[d] for d in dims))
    accumulators = []
    for name in inputs:
        value = em.value(name, operand_indices)
        if not isinstance(value, str):
            raise UnsupportedOpError("reduce of a tuple-shaped operand", where=instr.name)
        accumulators.append(em.bind(f"tl.broadcast_to({value}, {shape})", f"{instr.name}_in"))
    accumulators.append(em.bind(f"tl.broadcast_to(({valid or 'tl.full([], 1, tl.int1)'}).to(tl.int8), {shape})",
                                f"{instr.name}_valid"))
    combine = _combine_function(em, instr.attr("to_apply"), arity)
    for axis in axes:
        reduced = [em.names.fresh(f"{instr.name}_acc") for _ in accumulators]
        em.emit(f"{', '.join(reduced)} = tl.reduce(({', '.join(accumulators)},), {axis}, "
                f"{combine}, keep_dims=True)")
        accumulators = reduced
    # Scalars are broadcast to the reduced shape: the interpreter mishandles rank-0 operands.
    reduced_shape = tuple(1 if a in axes else size for a, size in enumerate(shape))
    init_values = [f"tl.broadcast_to({em.scalar_value(name)}, {reduced_shape})" for name in inits]
    results = [em.names.fresh(f"{instr.name}_r{i}") for i in range(arity)]
    em.emit(f"{', '.join(results)}, _ = {combine}({', '.join(init_values)}, "
            f"tl.full({reduced_shape}, 1, tl.int8), {', '.join(accumulators)})")
    out_types = ([s.element_type for s in instr.shape.elements] if arity > 1 or
                 not hasattr(instr.shape, "dims") else [instr.shape.element_type])
    for name, t in zip(results, out_types):
        if t.name in ("bf16", "f16"):
            em.emit(f"{name} = {name}.to({storage_dtype(t)}).to(tl.float32)")
    return tuple(results) if arity > 1 or not hasattr(instr.shape, "dims") else results[0]
