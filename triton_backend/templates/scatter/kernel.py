"""Scatter fusions: a kernel that walks the updates and combines them into a copy of the operand.

The output buffer starts as a copy of the operand (the host copies the fusion parameter in:
XLA updates it in place).  The updates are seen as a ``rows x window`` matrix: a *row* is
one scatter index (the update dims not in ``update_window_dims``, flattened), the *window*
the update window (``update_window_dims``, flattened).  Row ``r``'s start in the operand is
read from the indices (``scatter_dims_to_operand_dims``, ``index_vector_dim``; batching dims
take the row's own coordinate); a window whose start puts any part of it out of bounds is
skipped whole, as XLA does.  Indices and updates may be computed inside the fusion (they go
through the index-expression emitter).

Combining, by ``to_apply``:

* a plain ``add`` of a type with hardware atomics: ``tl.atomic_add``, one program per tile
  of rows x window (any order gives the same sums up to float rounding);

A variadic scatter (``N`` operands, indices, ``N`` updates, a tuple result and a combiner over
``N`` pairs) writes its ``N`` outputs at the same targets: each program loads the ``N`` old
values, combines them with the ``N`` updates at once and stores each (never atomic: the ``N``
stores of one element must come from one combine).
* any combiner with ``unique_indices=true``: parallel load, combine, store (no two rows
  touch one element);
* otherwise one program applies the rows in order (load, combine, store, barrier), which is
  XLA's sequential semantics.

Into a word-packed output (``s4[..]{..:E(4)}``), where rows, programs and lanes share 32-bit
words, each lane's store is one ``atomic_xor`` of its field's change
(``packed_access.emit_field_update``), in either mode.

>>> import fusion
>>> m = fusion.parse_hlo('''HloModule m
... add {
...   a = f32[] parameter(0)
...   b = f32[] parameter(1)
...   ROOT s = f32[] add(a, b)
... }
... f {
...   o = f32[5] parameter(0)
...   i = s32[3,1] parameter(1)
...   u = f32[3] parameter(2)
...   ROOT s = f32[5] scatter(o, i, u), update_window_dims={}, inserted_window_dims={0},
...     scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add
... }
... ENTRY e {
...   x = f32[5] parameter(0)
...   y = s32[3,1] parameter(1)
...   z = f32[3] parameter(2)
...   ROOT r = f32[5] fusion(x, y, z), kind=kScatter, calls=f
... }''')
>>> plan = scatter_plan(m, m.entry.root)
>>> plan.mode, plan.rows, plan.window
('atomic', 3, 1)
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from fusion.analysis.emitter_kind import EmitterKind
from fusion.errors import UnsupportedOpError
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.text.printer import print_computation, print_instruction
from fusion.ir.shape import ArrayShape
from tiling.maps.affine_expr import AffineExpr, const
from tiling.symbolic.tiled_fusion import next_power_of_two
from triton_backend.runtime.kernel_loading import CompiledFusion, load_kernel
from triton_backend.lowering.emitter.addressing import buffer_addressing
from triton_backend.lowering.emitter.packed_access import emit_field_update
from triton_backend.lowering.host_template import (
    PRELUDE,
    RUNTIME,
    kernel_specs,
)
from triton_backend.lowering.emitter.index_arithmetic import row_major_coordinates
from triton_backend.lowering.kernel_plan import index_bits_for
from triton_backend.lowering.rules.value_rules import rule_for
from triton_backend.lowering.rules.reduction_rules import combine_function
from triton_backend.lowering.emitter.value_emitter import ValueEmitter, array_shape
from triton_backend.lowering.emitter.triton_types import (
    KERNEL_IMPORTS,
    masked_fill,
    render_load_widen,
    render_store_narrow,
)
from triton_backend.lowering.emitter.identifiers import IdentifierAllocator, comment_block, sanitize

#: Element types whose ``add`` combiner becomes ``tl.atomic_add``.
ATOMIC_ADD_TYPES = ("f32", "s32", "u32", "s64", "u64", "f64")
#: Elements (rows x window) per program of a parallel scatter.
TILE_BUDGET = 1024


@dataclass(frozen=True)
class ScatterPlan:
    """How a scatter fusion is emitted: ``mode`` is ``atomic``, ``parallel`` or ``serial``."""

    scatter: HloInstruction
    mode: str
    rows: int
    window: int
    row_block: int
    window_block: int

    @property
    def grid(self) -> tuple[int]:
        if self.mode == "serial":
            return (1,)
        return (-(-self.rows // self.row_block) * -(-self.window // self.window_block),)


def _combiner_is_add(module: HloModule, name: str) -> bool:
    comp = module.computation(name)
    root = comp.root
    params = {i.name for i in comp.instructions if i.opcode == "parameter"}
    return root.opcode == "add" and set(root.operands) == params and len(params) == 2


def scatter_plan(module: HloModule, fusion_instr: HloInstruction,
                 tile_sizes: tuple[int, ...] | None = None) -> ScatterPlan:
    """Check that the fusion's scatter is supported; choose its mode and tile."""
    comp = module.computation(fusion_instr.attr("calls"))
    scatter = comp.root
    if scatter.opcode != "scatter":
        raise UnsupportedOpError(f"scatter fusion {fusion_instr.name}: root is {scatter.opcode}, "
                                 "not a scatter", where=fusion_instr.name)
    count = scatter_arity(scatter)
    for operand_name, result in zip(scatter.operands[:count], scatter_outputs(scatter)):
        operand = comp.instruction(operand_name)
        if operand.opcode != "parameter":
            raise UnsupportedOpError(f"scatter {scatter.name}: its operand {operand.name} is "
                                     "computed inside the fusion; only a fusion parameter "
                                     "(updated in place) is supported", where=scatter.name)
        if array_shape(operand).layout != result.layout and \
                array_shape(operand).layout is not None and result.layout is not None:
            raise UnsupportedOpError(f"scatter {scatter.name}: operand and result layouts differ",
                                     where=scatter.name)
    updates = array_shape(comp.instruction(scatter.operands[count + 1]))
    window_dims = tuple(scatter.attr("update_window_dims", ()))
    rows = math.prod(n for k, n in enumerate(updates.dims) if k not in window_dims)
    window = math.prod(updates.dims[k] for k in window_dims)
    dtype = scatter_outputs(scatter)[0].dtype
    if count == 1 and _combiner_is_add(module, scatter.attr("to_apply")) and dtype in ATOMIC_ADD_TYPES:
        mode = "atomic"
    elif scatter.attr("unique_indices", False):
        mode = "parallel"
    else:
        mode = "serial"
    if tile_sizes is not None:
        row_block, window_block = (int(t) for t in tile_sizes)
        if mode == "serial" and row_block != 1:
            raise UnsupportedOpError(f"scatter {scatter.name} is applied row by row (its combiner "
                                     "is not atomic and indices may repeat): row tile must be 1",
                                     where=scatter.name)
        if any(t < 1 or t & (t - 1) for t in (row_block, window_block)):
            raise UnsupportedOpError(f"scatter tile sizes {list(tile_sizes)} must be powers of two",
                                     where=scatter.name)
    else:
        window_block = min(next_power_of_two(max(window, 1)), TILE_BUDGET)
        row_block = 1 if mode == "serial" else min(next_power_of_two(max(rows, 1)),
                                                   max(1, TILE_BUDGET // window_block))
    return ScatterPlan(scatter, mode, rows, window, row_block, window_block)


def scatter_arity(scatter: HloInstruction) -> int:
    """How many operands (and updates) a scatter has: ``N`` of its ``2N + 1`` operands."""
    return (len(scatter.operands) - 1) // 2


def scatter_outputs(scatter: HloInstruction) -> tuple[ArrayShape, ...]:
    """The scatter's result arrays: one, or the elements of a variadic scatter's tuple."""
    if isinstance(scatter.shape, ArrayShape):
        return (scatter.shape,)
    return tuple(scatter.shape.elements)


def render_scatter_kernel(module: HloModule, fusion_instr: HloInstruction,
                          plan: ScatterPlan) -> str:
    """The kernel file of a scatter fusion (see the module docstring)."""
    comp = module.computation(fusion_instr.attr("calls"))
    scatter = plan.scatter
    outs = scatter_outputs(scatter)
    names = IdentifierAllocator()
    kernel_name = names.fresh(f"{sanitize(fusion_instr.name)}_kernel")
    counts = [math.prod(p.shape.dims) for p in comp.parameters if isinstance(p.shape, ArrayShape)]
    em = ValueEmitter(module, comp, [plan.row_block, plan.window_block], names, {},
                      index_bits=index_bits_for(counts), rule_for=rule_for)
    for p in comp.parameters:
        em.pointer_for(p)
    out_pointers = [names.fresh(f"out{k}_ptr") for k in range(len(outs))]
    em.emit("pid = tl.program_id(0)")
    if plan.mode == "serial":
        with em.block(f"for row_start in range(0, {plan.rows}):"), \
                em.block(f"for window_start in range(0, {plan.window}, {plan.window_block}):"):
            _emit_update(em, comp, plan, outs, out_pointers, "row_start", "window_start")
            # Rows apply in order: the next row may read what another lane just stored.
            em.emit("tl.debug_barrier()")
    else:
        window_tiles = -(-plan.window // plan.window_block)
        row_start = em.bind(f"(pid // {window_tiles}) * {plan.row_block}", "row_start")
        window_start = em.bind(f"(pid % {window_tiles}) * {plan.window_block}", "window_start")
        _emit_update(em, comp, plan, outs, out_pointers, row_start, window_start)
    constants = [b for b in em.buffers.values() if b.parameter_number is None]
    signature = [em.buffers[p.name].pointer for p in comp.parameters] + [b.pointer for b in constants]
    signature.extend(out_pointers)
    operand_numbers = [comp.instruction(o).attr("parameter_number")
                       for o in scatter.operands[:len(outs)]]
    header = comment_block(
        f"Generated by triton_backend.lowering for fusion {fusion_instr.name} (scatter template).\n"
        f"{print_instruction(fusion_instr)}\n\n{print_computation(comp)}\n\n"
        f"{plan.rows} update rows x window of {plan.window}; mode {plan.mode}; "
        f"tiles {plan.row_block} x {plan.window_block}; grid {plan.grid}; {em.index_bits}-bit offsets")
    kernel = f"@triton.jit\ndef {kernel_name}({', '.join(signature)}):\n" + "\n".join(em.lines) + "\n"
    combiners = "\n\n".join(em.helper_functions.values())
    specs = (kernel_specs(kernel_name, plan.grid, comp.parameters,
                          [b.instruction for b in constants], list(outs))
             + f"OUTPUT_FROM_INPUT = {tuple(enumerate(operand_numbers))!r}\n")
    return (header + PRELUDE + KERNEL_IMPORTS + "\n\n" + (combiners + "\n\n" if combiners else "")
            + kernel + "\n\n" + specs + RUNTIME)


def _emit_update(em: ValueEmitter, comp: HloComputation, plan: ScatterPlan,
                 outs: tuple[ArrayShape, ...], out_pointers: list[str], row_start: str,
                 window_start: str) -> None:
    scatter = plan.scatter
    count = len(outs)
    out = outs[0]
    indices_name = scatter.operands[count]
    update_names = scatter.operands[count + 1:]
    indices_shape = array_shape(comp.instruction(indices_name))
    updates_shape = array_shape(comp.instruction(update_names[0]))
    window_dims = tuple(scatter.attr("update_window_dims", ()))
    inserted = tuple(scatter.attr("inserted_window_dims", ()))
    operand_batching = tuple(scatter.attr("input_batching_dims", ()))
    indices_batching = tuple(scatter.attr("scatter_indices_batching_dims", ()))
    to_operand = tuple(scatter.attr("scatter_dims_to_operand_dims"))
    vector_dim = scatter.attr("index_vector_dim")
    row = em.new_dim("row", 0, plan.rows, row_start,
                     -(-plan.rows // plan.row_block) * plan.row_block - 1)
    win = em.new_dim("win", 1, plan.window, window_start,
                     -(-plan.window // plan.window_block) * plan.window_block - 1)
    scatter_dims = [k for k in range(updates_shape.rank) if k not in window_dims]
    row_coords = row_major_coordinates(row, [updates_shape.dims[k] for k in scatter_dims])
    window_coords = row_major_coordinates(win, [updates_shape.dims[k] for k in window_dims])
    update_indices = [const(0)] * updates_shape.rank
    for k, c in zip(scatter_dims, row_coords):
        update_indices[k] = c
    for k, c in zip(window_dims, window_coords):
        update_indices[k] = c
    updates = [em.value(u, tuple(update_indices)) for u in update_names]
    index_dims = [k for k in range(indices_shape.rank) if k != vector_dim]
    starts: dict[int, AffineExpr] = {}
    for c, operand_dim in enumerate(to_operand):
        where = list(row_coords)
        if vector_dim < indices_shape.rank:
            where.insert(vector_dim, const(c))
        raw = em.value(indices_name, tuple(where))
        starts[operand_dim] = em.new_symbol(f"({raw}).to({em.index_dtype})", f"start{c}", tuple(where))
    for operand_dim, index_dim in zip(operand_batching, indices_batching):
        starts[operand_dim] = row_coords[index_dims.index(index_dim)]
    window_operand_dims = [j for j in range(out.rank) if j not in inserted and j not in operand_batching]
    window_size = [1] * out.rank
    offsets: list[AffineExpr] = [const(0)] * out.rank
    for i, j in enumerate(window_operand_dims):
        window_size[j] = updates_shape.dims[window_dims[i]]
        offsets[j] = window_coords[i]
    checks = [f"({em.index_text(row)} < {plan.rows})", f"({em.index_text(win)} < {plan.window})"]
    for j, start in starts.items():
        text = em.comparable_index(start, (row, win))  # a block: see comparable_index
        checks.append(f"({text} >= 0) & ({text} <= {out.dims[j] - window_size[j]})")
    mask = em.bind(" & ".join(checks), "in_bounds")
    target = tuple(starts.get(j, const(0)) + offsets[j] for j in range(out.rank))
    addressings = [buffer_addressing(shape, f"output {k}") for k, shape in enumerate(outs)]
    if any(a.is_packed for a in addressings):
        offset = (f"{em.index_text(addressings[0].element_offset(target))} + "
                  f"{em.index_text(row)} * 0 + {em.index_text(win)} * 0")
        _emit_packed_update(em, scatter, addressings, out_pointers[0], offset, updates,
                            mask, em.shape_of((row, win)))
        return
    pointers = []
    for k, (shape, out_pointer) in enumerate(zip(outs, out_pointers)):
        offset = em.index_text(addressings[k].offset(target))
        # Offsets broadcast over the whole tile, so pointer, value and mask share one shape.
        pointers.append(em.bind(f"{out_pointer} + {offset} + {em.index_text(row)} * 0 + "
                                f"{em.index_text(win)} * 0", "target"))
    if plan.mode == "atomic":
        em.emit(f"tl.atomic_add({pointers[0]}, tl.broadcast_to({updates[0]}, "
                f"{em.shape_of((row, win))}), mask={mask})")
        return
    olds = [em.bind(render_load_widen(f"tl.load({pointer}, mask={mask}, "
                                      f"other={masked_fill(shape.element_type)})",
                                      shape.element_type), "old")
            for pointer, shape in zip(pointers, outs)]
    combine = combine_function(em, scatter.attr("to_apply"), count)
    one = "tl.full([], 1, tl.int8)"
    news = [em.names.fresh("new") for _ in outs]
    em.emit(f"{', '.join(news)}, _ = {combine}({', '.join(olds)}, {one}, {', '.join(updates)}, {one})")
    for pointer, new, shape in zip(pointers, news, outs):
        em.emit(f"tl.store({pointer}, {render_store_narrow(new, shape.element_type)}, mask={mask})")


def _emit_packed_update(em: ValueEmitter, scatter: HloInstruction, addressings,
                        pointer: str, offset: str, updates: list[str], mask: str,
                        tile: tuple[int, ...]) -> None:
    """A scatter into a word-packed output (``s4[..]{..:E(4)}``): each lane read-modify-writes
    its field atomically (``packed_access.emit_field_update``), since updates of other rows,
    programs or lanes may land in the same word.  One output: the N fields of a variadic
    scatter could not be combined in one atomic step."""
    if len(addressings) != 1:
        raise UnsupportedOpError(f"variadic scatter {scatter.name} into word-packed outputs",
                                 where=scatter.name)
    (addressing,), (update,) = addressings, updates
    combine = combine_function(em, scatter.attr("to_apply"), 1)
    t = addressing.shape.element_type
    one = "tl.full([], 1, tl.int8)"

    def combined(old: str) -> str:
        new = em.names.fresh("new")
        em.emit(f"{new}, _ = {combine}({old}, {one}, {update}, {one})")
        return em.bind(f"tl.broadcast_to({render_store_narrow(new, t)}, {tile})", "new_value")

    emit_field_update(em, pointer, addressing, offset, mask, combined)


def compile_scatter_fusion(module: HloModule, fusion_instr: HloInstruction, *,
                           tile_sizes=None, target: str | None = None, cache=None):
    """Generate, cache and load the kernel of a scatter fusion (kind ``"scatter"``).

    ``tile_sizes`` may give ``(row_block, window_block)`` (powers of two).
    """
    plan = scatter_plan(module, fusion_instr, tile_sizes)
    source = render_scatter_kernel(module, fusion_instr, plan)
    loaded, path = load_kernel(module, fusion_instr, source,
                               repr((plan.mode, plan.row_block, plan.window_block)), target, cache)
    reason = (f"scatter template ({plan.mode}): "
              + ("explicit tile sizes" if tile_sizes is not None else
                 f"{plan.row_block} rows x {plan.window_block} window elements per program"))
    return CompiledFusion(fusion_instr.name, EmitterKind.SCATTER, path, source, plan.grid,
                          (plan.row_block, plan.window_block), loaded, reason)


__all__ = ["ScatterPlan", "compile_scatter_fusion", "render_scatter_kernel", "scatter_arity",
           "scatter_outputs", "scatter_plan"]
