"""Render the kernel file of a dot fusion: prologue reads, a K loop of ``tl.dot``, an epilogue.

One program computes a ``BLOCK_M x BLOCK_N`` tile of one batch element (``program_id(1)``, or
folded into ``program_id(0)`` when the batch exceeds grid y's 65535 blocks),
with grouped ordering of the tiles (``GROUP_M`` rows of tiles share the rhs columns in L2).
Three :class:`ValueEmitter` instances of the codegen engineer's emitter share identifiers and
buffers:

* the lhs emitter (axes ``[BLOCK_M, BLOCK_K]``) and the rhs emitter (``[BLOCK_K, BLOCK_N]``)
  render the dot's operands, prologue included (convert, broadcast, transpose, bitcast,
  dequantizing multiplies ...), inside the K loop, at indices computed from the dot's
  dimension numbers (batch dims from the batch program id, free dims from M/N, contracting
  dims from K: any layout or dim order, never an assumed row-major ``M x K``);
* the epilogue emitter (``[BLOCK_M, BLOCK_N]``) renders the fusion root at the output tile;
  reading the dot there yields the accumulator (rounded to the dot's type).

Lanes past K are zeroed before ``tl.dot``; lanes past M or N are masked at the store.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from fusion.errors import UnsupportedOpError
from fusion.ir.hlo_module import HloInstruction, HloModule
from fusion.text.printer import print_computation, print_instruction
from fusion.ir.shape import ArrayShape
from tiling.maps.affine_expr import AffineExpr
from triton_backend.lowering.emitter.addressing import buffer_addressing
from triton_backend.lowering.emitter.index_arithmetic import row_major_coordinates
from triton_backend.templates.dot.tiling import DotTiling, batch_on_grid_x, grid_size
from triton_backend.lowering.host_template import PRELUDE, RUNTIME, kernel_specs
from triton_backend.lowering.rules.value_rules import rule_for
from triton_backend.lowering.emitter.value_emitter import Value, ValueEmitter
from triton_backend.lowering.emitter.triton_types import KERNEL_IMPORTS, render_store_narrow
from triton_backend.lowering.emitter.identifiers import IdentifierAllocator, comment_block, sanitize
from triton_backend.templates.dot.tiling import DotProblem
from triton_backend.lowering.kernel_file import output_shapes

#: bf16 tl.dot in the Triton 3.9 interpreter multiplies the raw uint16 bits; there the
#: (exact) widened operands are multiplied in fp32 instead, which is what the tensor cores
#: compute for bf16 (exact products, fp32 accumulation).
DOT_BF16_PRELUDE = (
    "\n# bf16 operands go to the tensor cores as bf16; the interpreter's bf16 tl.dot is broken,\n"
    "# so there they are multiplied as (exactly widened) fp32.\n"
    "DOT_BF16 = tl.constexpr(tl.float32 if os.environ.get('TRITON_INTERPRET', '') == '1' "
    "else tl.bfloat16)\n"
)


@dataclass(frozen=True)
class DotSpec:
    """What the template needs to know about the fusion's dot (see ``dot_fusion.dot_spec``)."""

    dot: HloInstruction
    batch_sizes: tuple[int, ...]
    m_sizes: tuple[int, ...]
    n_sizes: tuple[int, ...]
    k_sizes: tuple[int, ...]
    lhs_dims: tuple[tuple[str, int], ...]   # per lhs operand dim: ("b"|"m"|"k", position)
    rhs_dims: tuple[tuple[str, int], ...]
    operand_dtype: str      # tl dtype text the operands are multiplied in
    acc_dtype: str          # tl dtype of the accumulator
    input_precision: str | None
    result_rounding: str    # template turning the accumulator into the dot's register value


@dataclass
class AccumulatorEpilogue(ValueEmitter):
    """The emitter of a GEMM template's epilogue: the hero (a dot or a convolution) is the
    accumulator, read at the output tile; anything else is emitted as usual."""

    hero_name: str = ""
    hero_kind: str = "dot"
    hero_indices: tuple = ()
    hero_value: str = ""

    def value(self, name: str, indices: tuple[AffineExpr, ...]) -> Value:
        if name == self.hero_name:
            if tuple(indices) != tuple(self.hero_indices):
                raise UnsupportedOpError(
                    f"the epilogue reads {self.hero_kind} {name} through a data-movement op; only "
                    f"elementwise epilogues (at the {self.hero_kind}'s own output index) are fused "
                    f"with a {self.hero_kind}", where=name)
            return self.hero_value
        return super().value(name, indices)


def _operand_indices(roles, batch, m_or_n, k) -> tuple[AffineExpr, ...]:
    table = {"b": batch, "m": m_or_n, "k": k}
    return tuple(table[role][pos] for role, pos in roles)


def _tile_value(em: ValueEmitter, name: str, indices, shape, k_valid: str | None,
                dtype: str) -> str:
    value = em.value(name, indices)
    if not isinstance(value, str):
        raise UnsupportedOpError(f"tuple-shaped dot operand {name}", where=name)
    value = em.bind(f"tl.broadcast_to({value}, {(1,) * (em.rank - 2) + tuple(shape)})", f"{name}_tile")
    if k_valid is not None:
        # Padding lanes of K must add nothing, whatever the operand computed there.
        value = em.bind(f"tl.where({k_valid}, {value}, 0)", f"{name}_tile")
    if em.rank > 2:
        value = em.bind(f"tl.reshape({value}, {tuple(shape)})", f"{name}_tile")
    return em.bind(f"{value}.to({dtype})", f"{name}_in")


def render_dot_kernel(module: HloModule, fusion_instr: HloInstruction, spec: DotSpec,
                      tiling: DotTiling) -> tuple[str, tuple[int, ...]]:
    """The kernel file source for the dot fusion ``fusion_instr``, and its launch grid."""
    computation = module.computation(fusion_instr.attr("calls"))
    outputs = _output_shapes(fusion_instr)
    m, n, k = math.prod(spec.m_sizes), math.prod(spec.n_sizes), math.prod(spec.k_sizes)
    batch = math.prod(spec.batch_sizes)
    bm, bn, bk = tiling.block_m, tiling.block_n, tiling.block_k
    tiles_m, tiles_n = math.ceil(m / bm), math.ceil(n / bn)
    names = IdentifierAllocator()
    kernel_name = names.fresh(f"{sanitize(fusion_instr.name)}_kernel")
    buffers: dict = {}
    helpers: dict = {}
    helper_names: dict = {}

    def emitter(cls, blocks, indent, **extra):
        return cls(module, computation, list(blocks), names, {}, buffers=buffers,
                   helper_functions=helpers, helper_names=helper_names, indent=indent,
                   rule_for=rule_for, **extra)

    for p in computation.parameters:  # parameter pointers first, in parameter order
        emitter(ValueEmitter, [1], "    ").pointer_for(p)
    top: list[str] = []
    out_pointers = [names.fresh(f"out{i}_ptr") for i in range(len(outputs))]
    pid, pid_b = names.fresh("pid"), names.fresh("pid_batch")
    group, first_m, group_rows = names.fresh("group"), names.fresh("first_m"), names.fresh("group_rows")
    pid_m, pid_n = names.fresh("pid_m"), names.fresh("pid_n")
    in_group = tiling.group_m * tiles_n
    if batch_on_grid_x(_problem(spec)):
        # Past grid y's 65535 blocks the batch shares grid x: program = batch * tiles + tile.
        top += [f"{pid_b} = tl.program_id(0) // {tiles_m * tiles_n}",
                f"{pid} = tl.program_id(0) % {tiles_m * tiles_n}"]
    else:
        top += [f"{pid} = tl.program_id(0)", f"{pid_b} = tl.program_id(1)"]
    top += ["# grouped ordering: GROUP_M rows of tiles walk the N tiles together (L2 reuse)",
            f"{group} = {pid} // {in_group}",
            f"{first_m} = {group} * {tiling.group_m}",
            f"{group_rows} = tl.minimum({tiles_m} - {first_m}, {tiling.group_m})",
            f"{pid_m} = {first_m} + ({pid} % {in_group}) % {group_rows}",
            f"{pid_n} = ({pid} % {in_group}) // {group_rows}"]

    lead = 1 if spec.batch_sizes else 0
    batch_extent = math.prod(spec.batch_sizes)

    def batch_indices(em: ValueEmitter) -> list[AffineExpr]:
        # The batch element is a dim variable on a leading axis of one lane, so the emitter
        # knows its bounds (no masks) and the operand tiles are reshaped to 2-D for tl.dot.
        if not lead:
            return []
        flat = em.new_dim("batch", 0, batch_extent, pid_b, batch_extent - 1)
        return row_major_coordinates(flat, spec.batch_sizes)

    acc = names.fresh("acc")
    k0 = names.fresh("k0")
    top.append(f"{acc} = tl.zeros(({bm}, {bn}), dtype={spec.acc_dtype})")
    k_upper = math.ceil(k / bk) * bk - 1 if k else bk - 1
    k_valid_needed = k % bk != 0

    lhs = emitter(ValueEmitter, [1] * lead + [bm, bk], "        ")
    lhs_b = batch_indices(lhs)
    lm = lhs.new_dim("m", lead, m, f"{pid_m} * {bm}", tiles_m * bm - 1)
    lk = lhs.new_dim("k", lead + 1, k, k0, k_upper)
    lk_name = lhs.dims[lk.index].name
    lhs_indices = _operand_indices(spec.lhs_dims, lhs_b, row_major_coordinates(lm, spec.m_sizes),
                                   row_major_coordinates(lk, spec.k_sizes))
    a = _tile_value(lhs, spec.dot.operands[0], lhs_indices, (bm, bk),
                    f"{lk_name} < {k}" if k_valid_needed else None, spec.operand_dtype)

    rhs = emitter(ValueEmitter, [1] * lead + [bk, bn], "        ")
    rhs_b = batch_indices(rhs)
    rk = rhs.new_dim("k", lead, k, k0, k_upper)
    rn = rhs.new_dim("n", lead + 1, n, f"{pid_n} * {bn}", tiles_n * bn - 1)
    rk_name = rhs.dims[rk.index].name
    rhs_indices = _operand_indices(spec.rhs_dims, rhs_b, row_major_coordinates(rn, spec.n_sizes),
                                   row_major_coordinates(rk, spec.k_sizes))
    b = _tile_value(rhs, spec.dot.operands[1], rhs_indices, (bk, bn),
                    f"{rk_name} < {k}" if k_valid_needed else None, spec.operand_dtype)
    precision = f", input_precision={spec.input_precision!r}" if spec.input_precision else ""
    loop = [f"for {k0} in range(0, {k}, {bk}):", *lhs.lines, *rhs.lines,
            f"        {acc} = tl.dot({a}, {b}, {acc}{precision}, out_dtype={spec.acc_dtype})"]

    epi = emitter(AccumulatorEpilogue, [1] * lead + [bm, bn], "    ")
    epi_b = batch_indices(epi)
    em_ = epi.new_dim("m", lead, m, f"{pid_m} * {bm}", tiles_m * bm - 1)
    en_ = epi.new_dim("n", lead + 1, n, f"{pid_n} * {bn}", tiles_n * bn - 1)
    out_indices = tuple(epi_b) + tuple(row_major_coordinates(em_, spec.m_sizes)) + tuple(row_major_coordinates(en_, spec.n_sizes))
    epi.hero_name = spec.dot.name
    epi.hero_indices = out_indices
    acc_view = f"tl.reshape({acc}, (1, {bm}, {bn}))" if lead else acc
    epi.hero_value = epi.bind(spec.result_rounding.format(acc=acc_view), spec.dot.name)
    root_value = epi.value(computation.root_name, out_indices)
    values = root_value if isinstance(root_value, tuple) else (root_value,)
    if len(values) != len(outputs):
        raise UnsupportedOpError(f"root produces {len(values)} values for {len(outputs)} outputs",
                                 where=computation.root_name)
    mn = [epi.dims[em_.index].name, epi.dims[en_.index].name]
    mask = epi.bind(f"({mn[0]} < {m}) & ({mn[1]} < {n})", "out_mask")
    zero = epi.bind(f"{mn[0]} * 0 + {mn[1]} * 0", "tile_zero")
    for i, (v, shape, pointer) in enumerate(zip(values, outputs, out_pointers)):
        if tuple(shape.dims) != tuple(spec.dot.shape.dims):
            raise UnsupportedOpError(f"output {i} {list(shape.dims)} is not shaped like the dot "
                                     f"{list(spec.dot.shape.dims)}", where=fusion_instr.name)
        offset = epi.index_text(buffer_addressing(shape, f"output {i}").offset(out_indices))
        epi.emit(f"tl.store({pointer} + {offset} + {zero}, "
                 f"{render_store_narrow(v, shape.element_type)}, mask={mask})")

    parameters = computation.parameters
    constants = [buf for buf in buffers.values() if buf.parameter_number is None]
    signature = [buffers[p.name].pointer for p in parameters] + [c.pointer for c in constants]
    signature += out_pointers
    grid = grid_size(tiling, _problem(spec))
    header = comment_block(
        f"Generated by triton_backend.templates.dot.kernel for dot fusion {fusion_instr.name}.\n"
        f"{print_instruction(fusion_instr)}\n\n{print_computation(computation)}\n\n"
        f"batch {list(spec.batch_sizes)} -> {batch}, M {list(spec.m_sizes)} -> {m}, "
        f"N {list(spec.n_sizes)} -> {n}, K {list(spec.k_sizes)} -> {k}\n"
        f"tiling {tiling}, grid {grid}")
    body = ["    " + line for line in top] + ["    " + loop[0], *loop[1:], *epi.lines]
    kernel = f"@triton.jit\ndef {kernel_name}({', '.join(signature)}):\n" + "\n".join(body) + "\n"
    combiners = "\n\n".join(helpers.values())
    specs = kernel_specs(kernel_name, grid, parameters, [c.instruction for c in constants], outputs,
                         (tiling.num_warps, tiling.num_stages))
    source = (header + PRELUDE + KERNEL_IMPORTS + DOT_BF16_PRELUDE + "\n\n"
              + (combiners + "\n\n" if combiners else "") + kernel + "\n\n" + specs + RUNTIME)
    return source, grid


def _problem(spec: DotSpec):
    return DotProblem(math.prod(spec.batch_sizes), math.prod(spec.m_sizes),
                      math.prod(spec.n_sizes), math.prod(spec.k_sizes), 4)


def _output_shapes(fusion_instr: HloInstruction) -> tuple[ArrayShape, ...]:
    return output_shapes(fusion_instr)
