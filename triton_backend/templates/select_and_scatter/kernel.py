"""Select-and-scatter fusions (max-pool gradients): one deterministic gather-style kernel.

``select-and-scatter(operand, source, init)`` slides ``window`` over ``operand``; in each window
(one per ``source`` element) ``select`` picks one position, scanning the window's in-bounds
positions in row-major order and keeping the current pick while ``select(picked, candidate)``
holds (so the first of equal maxima with ``GE``, as XLA does); the output starts as ``init``
everywhere and each ``source`` element is combined into its window's pick with ``scatter``, in
source order.

Rather than scatter with atomics (whose order, hence float rounding, would vary from run to run
and which only works for ``add``), each program owns a block of *output* elements and gathers:
for output position ``p`` and window offset ``k`` (in reverse row-major order, which visits the
windows holding ``p`` in ascending source order), the window ``w = (p + pad_low - k * dilation)
/ stride`` holds ``p`` when the division is exact and ``w`` is in range; its pick is found by
scanning its offsets ``j`` (the operand at ``p + (j - k) * dilation``, shared between windows
through the emitter's memo) and ``source[w]`` is combined in when the pick is ``k``.  The cost
is ``prod(window)^2`` operand reads per element, so windows are limited to
:data:`MAX_WINDOW_ELEMENTS` positions (max pools use 2x2 or 3x3).

>>> import fusion
>>> m = fusion.parse_hlo('''HloModule m
... ge {
...   a = f32[] parameter(0)
...   b = f32[] parameter(1)
...   ROOT c = pred[] compare(a, b), direction=GE
... }
... add {
...   a = f32[] parameter(0)
...   b = f32[] parameter(1)
...   ROOT s = f32[] add(a, b)
... }
... f {
...   x = f32[4,6] parameter(0)
...   s = f32[2,3] parameter(1)
...   z = f32[] parameter(2)
...   ROOT r = f32[4,6] select-and-scatter(x, s, z), window={size=2x2 stride=2x2}, select=ge,
...     scatter=add
... }
... ENTRY e {
...   x = f32[4,6] parameter(0)
...   s = f32[2,3] parameter(1)
...   z = f32[] parameter(2)
...   ROOT r = f32[4,6] fusion(x, s, z), kind=kLoop, calls=f
... }''')
>>> plan = select_and_scatter_plan(m, m.entry.root)
>>> plan.elements, plan.block, plan.grid, plan.window_positions
(24, 32, (1,), 4)
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from fusion.errors import UnsupportedOpError
from fusion.ir.hlo_module import HloInstruction, HloModule
from fusion.text.printer import print_computation, print_instruction
from fusion.ir.shape import ArrayShape
from tiling.symbolic.tiled_fusion import next_power_of_two
from triton_backend.runtime.kernel_loading import CompiledFusion, TemplateKind, load_kernel
from triton_backend.runtime.launch_mode import runs_on_interpreter
from triton_backend.lowering.emitter.addressing import buffer_addressing
from triton_backend.lowering.host_template import PRELUDE, RUNTIME, kernel_specs
from triton_backend.lowering.emitter.identifiers import IdentifierAllocator, comment_block, sanitize
from triton_backend.lowering.emitter.index_arithmetic import row_major_coordinates
from triton_backend.lowering.kernel_plan import index_bits_for
from triton_backend.lowering.emitter.triton_types import KERNEL_IMPORTS, render_store_narrow
from triton_backend.lowering.rules.reduction_rules import combine_function
from triton_backend.lowering.rules.value_rules import rule_for
from triton_backend.lowering.emitter.value_emitter import ValueEmitter, array_shape

#: Window positions at most (the kernel unrolls ``positions^2`` selection steps).
MAX_WINDOW_ELEMENTS = 64
#: Output elements per program on a GPU, and under the interpreter (fewer, larger programs:
#: it pays per program and per unrolled statement, not per lane).
GPU_BLOCK = 256
INTERPRETER_BLOCK = 1 << 14


@dataclass(frozen=True)
class SelectAndScatterPlan:
    """How a select-and-scatter fusion is emitted: ``block`` output elements per program."""

    op: HloInstruction
    elements: int
    block: int
    window_positions: int

    @property
    def grid(self) -> tuple[int]:
        return (max(1, -(-self.elements // self.block)),)


def is_select_and_scatter_fusion(module: HloModule, fusion_instr: HloInstruction) -> bool:
    """True when the fusion's root is a ``select-and-scatter``."""
    if fusion_instr.opcode != "fusion" or not fusion_instr.has_attr("calls"):
        return False
    return module.computation(fusion_instr.attr("calls")).root.opcode == "select-and-scatter"


def select_and_scatter_plan(module: HloModule, fusion_instr: HloInstruction,
                            tile_sizes: tuple[int, ...] | None = None,
                            interpreter: bool = False) -> SelectAndScatterPlan:
    """Check that the fusion's select-and-scatter is supported; choose its block."""
    op = module.computation(fusion_instr.attr("calls")).root
    window = op.attr("window", None)
    positions = math.prod(d.size for d in window.dims) if window is not None else 1
    if window is not None and any(d.window_reversal or d.base_dilation != 1
                                  for d in window.dims):
        raise UnsupportedOpError("select-and-scatter with window reversal or base (lhs) "
                                 "dilation is not emitted", where=op.name)
    if positions > MAX_WINDOW_ELEMENTS:
        raise UnsupportedOpError(
            f"select-and-scatter window of {positions} positions: the kernel unrolls "
            f"positions^2 selection steps, at most {MAX_WINDOW_ELEMENTS} positions",
            where=op.name)
    elements = math.prod(array_shape(op).dims)
    if tile_sizes is not None:
        (block,) = (int(t) for t in tile_sizes)
        if block < 1 or block & (block - 1):
            raise UnsupportedOpError(f"select-and-scatter tile size {block} must be a power "
                                     "of two", where=op.name)
    else:
        block = min(next_power_of_two(max(elements, 1)),
                    INTERPRETER_BLOCK if interpreter else GPU_BLOCK)
    return SelectAndScatterPlan(op, elements, block, positions)


def render_select_and_scatter_kernel(module: HloModule, fusion_instr: HloInstruction,
                                     plan: SelectAndScatterPlan) -> str:
    """The kernel file of a select-and-scatter fusion (see the module docstring)."""
    comp = module.computation(fusion_instr.attr("calls"))
    out = array_shape(plan.op)
    names = IdentifierAllocator()
    kernel_name = names.fresh(f"{sanitize(fusion_instr.name)}_kernel")
    counts = [math.prod(p.shape.dims) for p in comp.parameters if isinstance(p.shape, ArrayShape)]
    em = ValueEmitter(module, comp, [plan.block], names, {},
                      index_bits=index_bits_for(counts + [plan.elements]), rule_for=rule_for)
    for p in comp.parameters:
        em.pointer_for(p)
    out_pointer = names.fresh("out0_ptr")
    em.emit("pid = tl.program_id(0)")
    flat = em.new_dim("i", 0, plan.elements, em.bind(f"pid * {plan.block}", "start"),
                      plan.grid[0] * plan.block - 1)
    p = row_major_coordinates(flat, out.dims)
    acc = _gathered_output(em, plan, flat, p)
    offset = em.index_text(buffer_addressing(out, "output 0").offset(tuple(p)))
    em.emit(f"tl.store({out_pointer} + {offset}, {render_store_narrow(acc, out.element_type)}, "
            f"mask={em.index_text(flat)} < {plan.elements})")
    constants = [b for b in em.buffers.values() if b.parameter_number is None]
    signature = [em.buffers[q.name].pointer for q in comp.parameters] + [b.pointer for b in constants]
    signature.append(out_pointer)
    header = comment_block(
        f"Generated by triton_backend.lowering for fusion {fusion_instr.name} "
        f"(select-and-scatter template).\n{print_instruction(fusion_instr)}\n\n"
        f"{print_computation(comp)}\n\n{plan.elements} output elements, {plan.block} per "
        f"program; window of {plan.window_positions} positions; grid {plan.grid}")
    kernel = f"@triton.jit\ndef {kernel_name}({', '.join(signature)}):\n" + "\n".join(em.lines) + "\n"
    helpers = "\n\n".join(em.helper_functions.values())
    specs = kernel_specs(kernel_name, plan.grid, comp.parameters,
                         [b.instruction for b in constants], [out])
    return (header + PRELUDE + KERNEL_IMPORTS + "\n\n" + (helpers + "\n\n" if helpers else "")
            + kernel + "\n\n" + specs + RUNTIME)


#: A one-element int8 block: the validity flag the combine functions take with each value.
_ONE = "tl.full([], 1, tl.int8)"


def _gathered_output(em: ValueEmitter, plan: SelectAndScatterPlan, flat, p) -> str:
    """The output block at positions ``p``: ``init``, with the ``source`` element of every
    window that picks ``p`` combined in by ``scatter``, in source order."""
    op = plan.op
    operand_name, source_name, init_name = op.operands
    source = array_shape(em.computation.instruction(source_name))
    window = op.attr("window", None)
    dims = window.dims if window is not None else ()
    offsets = list(itertools.product(*(range(d.size) for d in dims)))
    select = combine_function(em, op.attr("select"), 1)
    scatter = combine_function(em, op.attr("scatter"), 1)
    block_shape = [plan.block]
    acc = em.bind(f"tl.broadcast_to({em.scalar_value(init_name)}, {block_shape})", "acc")
    em.bind(f"tl.zeros({block_shape}, tl.int32)", "zero")  # read as `zero` by the masks below
    for k in reversed(offsets):  # windows holding p, in ascending source order
        numerators = [p[i] + (d.padding_low - k[i] * d.window_dilation) for i, d in enumerate(dims)]
        w = [num // d.stride if d.stride > 1 else num for num, d in zip(numerators, dims)]
        holds = []
        for i, (num, d) in enumerate(zip(numerators, dims)):
            text = em.index_tensor(num)
            holds.append(f"({text} >= 0)")
            if d.stride > 1:
                holds.append(f"({text} % {d.stride} == 0)")
            holds.append(f"({em.index_tensor(w[i])} < {source.dims[i]})")
        holds_p = em.bind(" & ".join(holds) if holds else "True", "holds")
        picked_k = _window_picks(em, operand_name, select, flat, p, k, offsets, dims,
                                 array_shape(op).dims)
        hit = em.bind(f"{holds_p} & {picked_k}", "hit")
        src = em.value(source_name, tuple(w))
        combined = em.names.fresh("combined")
        em.emit(f"{combined}, _ = {scatter}({acc}, {_ONE}, {src}, {_ONE})")
        acc = em.bind(f"tl.where({hit}, {combined}, {acc})", "acc")
    return acc


def _window_picks(em: ValueEmitter, operand_name: str, select: str, flat, p, k, offsets,
                  dims, out_dims) -> str:
    """Whether the window holding ``p`` at its offset ``k`` picks ``p``: its positions ``j``
    scanned in row-major order, the pick kept while ``select(picked, candidate)`` holds."""
    picked_value = picked_k = have = None
    for j in offsets:  # the window's pick, scanning its positions in row-major order
        at = tuple(p[i] + (j[i] - k[i]) * d.window_dilation for i, d in enumerate(dims))
        value = em.spanning(em.value(operand_name, at), (flat,))
        # Padding positions are never picked.  Or-ed with a false block so the mask is a
        # block even where the bounds hold statically (the interpreter's 0-d masks).
        inside = em.in_bounds(at, out_dims) or "True"
        inside = em.bind(f"({inside}) | (zero != 0)", "inside")
        if picked_value is None:
            picked_value, have = value, inside
            picked_k = inside if j == k else em.bind("zero != 0", "picked_k")
            continue
        keep = em.names.fresh("keep")
        em.emit(f"{keep}, _ = {select}({picked_value}, {_ONE}, {value}, {_ONE})")
        take = em.bind(f"{inside} & ((~{have}) | ({keep} == 0))", "take")
        picked_value = em.bind(f"tl.where({take}, {value}, {picked_value})", "picked")
        # Whether the pick is now p's own position k: set by taking k, cleared by any other.
        picked_k = em.bind(f"{picked_k} | {take}" if j == k else f"{picked_k} & (~{take})",
                           "picked_k")
        have = em.bind(f"{have} | {inside}", "have")
    return picked_k


def compile_select_and_scatter_fusion(module: HloModule, fusion_instr: HloInstruction, *,
                                      tile_sizes=None, target: str | None = None, cache=None):
    """Generate, cache and load the kernel of a select-and-scatter fusion.

    ``tile_sizes`` may give ``(block,)``, output elements per program (a power of two).
    """
    plan = select_and_scatter_plan(module, fusion_instr, tile_sizes,
                                   interpreter=runs_on_interpreter(target))
    source = render_select_and_scatter_kernel(module, fusion_instr, plan)
    loaded, path = load_kernel(module, fusion_instr, source, repr((plan.block,)), target, cache)
    reason = ("select-and-scatter template: "
              + ("explicit tile sizes" if tile_sizes is not None else
                 f"{plan.block} output elements per program"))
    return CompiledFusion(fusion_instr.name, TemplateKind.SELECT_AND_SCATTER, path, source, plan.grid,
                          (plan.block,), loaded, reason)


__all__ = ["SelectAndScatterPlan", "compile_select_and_scatter_fusion",
           "is_select_and_scatter_fusion", "render_select_and_scatter_kernel",
           "select_and_scatter_plan"]
