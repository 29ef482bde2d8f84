"""Render the kernel file of a convolution fusion: an implicit GEMM on ``tl.dot``.

Per group ``g`` (``feature_group_count`` or ``batch_group_count`` groups; ``program_id(1)``):

* M walks the output batch and output spatial positions (flattened, spatial fastest),
* N walks the group's output features,
* K walks the window taps and the group's input features (flattened, features fastest, so
  the lhs reads of one tap are contiguous in the usual feature-minor layouts).

The lhs tile ``[BLOCK_M, BLOCK_K]`` is gathered at input position
``(o * stride + tap * rhs_dilate - pad_low) / lhs_dilate`` (any dim order: the dimension
numbers give each operand dim its role) and zeroed where that position is padding, falls
between the dilated input's elements, or lies past K; the rhs tile ``[BLOCK_K, BLOCK_N]``
reads the kernel at the tap (reversed when ``rhs_reversal``).  Both operands are rendered by
:class:`ValueEmitter`, so an elementwise or data-movement prologue of the convolution is
computed in the K loop, and the epilogue emitter renders the fusion root at the output tile,
where reading the convolution yields the accumulator (bias, activation, batch-norm inference).
The numerics are the dot's (``dot_fusion.dot_numerics``): 16-bit and s8 operands go to the
tensor cores with an f32 (s32) accumulator.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from fusion.ir.convolution import Convolution
from fusion.errors import UnsupportedOpError
from fusion.ir.hlo_module import HloInstruction, HloModule
from fusion.text.printer import print_computation, print_instruction
from tiling.maps.affine_expr import AffineExpr
from triton_backend.lowering.emitter.addressing import buffer_addressing
from triton_backend.lowering.host_template import PRELUDE, RUNTIME, kernel_specs
from triton_backend.lowering.emitter.identifiers import IdentifierAllocator, comment_block, sanitize
from triton_backend.lowering.emitter.index_arithmetic import row_major_coordinates
from triton_backend.lowering.kernel_file import output_shapes
from triton_backend.lowering.emitter.triton_types import KERNEL_IMPORTS, render_store_narrow
from triton_backend.lowering.rules.value_rules import rule_for
from triton_backend.lowering.emitter.value_emitter import ValueEmitter
from triton_backend.templates.dot.kernel import DOT_BF16_PRELUDE, AccumulatorEpilogue
from triton_backend.templates.dot.tiling import DotProblem, DotTiling, batch_on_grid_x, grid_size


@dataclass(frozen=True)
class ConvSpec:
    """What the template needs to know about the fusion's convolution (``conv_fusion.conv_spec``)."""

    conv: HloInstruction
    attrs: Convolution
    lhs_dims: tuple[int, ...]
    rhs_dims: tuple[int, ...]
    out_dims: tuple[int, ...]
    operand_dtype: str
    acc_dtype: str
    input_precision: str | None
    result_rounding: str

    @property
    def groups(self) -> int:
        return self.attrs.feature_group_count * self.attrs.batch_group_count

    @property
    def out_batch(self) -> int:
        return self.out_dims[self.attrs.dims.out_batch]

    @property
    def out_spatial(self) -> tuple[int, ...]:
        return tuple(self.out_dims[d] for d in self.attrs.dims.out_spatial)

    @property
    def taps(self) -> tuple[int, ...]:
        return tuple(w.size for w in self.attrs.window.dims)

    @property
    def group_in(self) -> int:
        return self.rhs_dims[self.attrs.dims.rhs_input]

    @property
    def group_out(self) -> int:
        return self.out_dims[self.attrs.dims.out_feature] // self.groups

    @property
    def m_sizes(self) -> tuple[int, ...]:
        return (self.out_batch, *self.out_spatial)

    @property
    def k_sizes(self) -> tuple[int, ...]:
        return (*self.taps, self.group_in)

    def problem(self, operand_bytes: int, expensive_prologue: bool = False) -> DotProblem:
        """The GEMM it is: groups x (M x K) @ (K x N)."""
        return DotProblem(self.groups, math.prod(self.m_sizes), self.group_out,
                          math.prod(self.k_sizes), operand_bytes, expensive_prologue)


def _masked_tile(em: ValueEmitter, name: str, indices, shape, valid: list[str], dtype: str) -> str:
    value = em.value(name, indices)
    if not isinstance(value, str):
        raise UnsupportedOpError(f"tuple-shaped convolution operand {name}", where=name)
    value = em.bind(f"tl.broadcast_to({value}, {(1,) * (em.rank - 2) + tuple(shape)})",
                    f"{name}_tile")
    if valid:
        # Padding, the holes of lhs dilation and lanes past K must add nothing, whatever the
        # operand's prologue computed there.
        value = em.bind(f"tl.where({' & '.join(valid)}, {value}, 0)", f"{name}_tile")
    if em.rank > 2:
        value = em.bind(f"tl.reshape({value}, {tuple(shape)})", f"{name}_tile")
    return em.bind(f"{value}.to({dtype})", f"{name}_in")


def _lhs_position_checks(em: ValueEmitter, spec: ConvSpec, out_sp, taps) -> tuple[list, list[str]]:
    """Per spatial dim, the lhs index read, and the checks that the position is an element."""
    dn, indices, checks = spec.attrs.dims, [], []
    for i, w in enumerate(spec.attrs.window.dims):
        n = spec.lhs_dims[dn.lhs_spatial[i]]
        q = out_sp[i] * w.stride + taps[i] * w.window_dilation - w.padding_low
        extent = (n - 1) * w.base_dilation + 1
        low, high = em.bounds(q)
        text = f"({em.index_text(q)})"
        if low < 0:
            checks.append(f"({text} >= 0)")
        if high >= extent:
            checks.append(f"({text} < {extent})")
        if w.base_dilation > 1:
            checks.append(f"({text} % {w.base_dilation} == 0)")
            q = q // w.base_dilation
        indices.append(q)
    return indices, checks


def render_conv_kernel(module: HloModule, fusion_instr: HloInstruction, spec: ConvSpec,
                       tiling: DotTiling) -> tuple[str, tuple[int, ...]]:
    """The kernel file source for the convolution fusion ``fusion_instr``, and its grid."""
    computation = module.computation(fusion_instr.attr("calls"))
    outputs = output_shapes(fusion_instr)
    dn, attrs = spec.attrs.dims, spec.attrs
    problem = spec.problem(4)
    m, n, k, groups = problem.m, problem.n, problem.k, problem.batch
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
    out_pointers = [names.fresh(f"out{i}_ptr") for i in range(len(outputs))]
    pid, pid_g = names.fresh("pid"), names.fresh("pid_group")
    group, first_m, group_rows = names.fresh("tile_group"), names.fresh("first_m"), names.fresh("group_rows")
    pid_m, pid_n = names.fresh("pid_m"), names.fresh("pid_n")
    in_group = tiling.group_m * tiles_n
    if batch_on_grid_x(problem):
        top = [f"{pid_g} = tl.program_id(0) // {tiles_m * tiles_n}",
               f"{pid} = tl.program_id(0) % {tiles_m * tiles_n}"]
    else:
        top = [f"{pid} = tl.program_id(0)", f"{pid_g} = tl.program_id(1)"]
    top += ["# grouped ordering: GROUP_M rows of tiles walk the N tiles together (L2 reuse)",
            f"{group} = {pid} // {in_group}",
            f"{first_m} = {group} * {tiling.group_m}",
            f"{group_rows} = tl.minimum({tiles_m} - {first_m}, {tiling.group_m})",
            f"{pid_m} = {first_m} + ({pid} % {in_group}) % {group_rows}",
            f"{pid_n} = ({pid} % {in_group}) // {group_rows}"]
    lead = 1 if groups > 1 else 0

    def group_index(em: ValueEmitter) -> AffineExpr | int:
        # The group is a dim variable on a leading axis of one lane (bounded, never masked).
        return em.new_dim("group", 0, groups, pid_g, groups - 1) if lead else 0

    acc, k0 = names.fresh("acc"), names.fresh("k0")
    top.append(f"{acc} = tl.zeros(({bm}, {bn}), dtype={spec.acc_dtype})")
    k_upper = math.ceil(k / bk) * bk - 1 if k else bk - 1
    k_ragged = k % bk != 0
    rank = len(spec.out_dims)

    # lhs: input element of (output batch and position along M) x (tap and feature along K).
    lhs = emitter(ValueEmitter, [1] * lead + [bm, bk], "        ")
    g = group_index(lhs)
    lm = lhs.new_dim("m", lead, m, f"{pid_m} * {bm}", tiles_m * bm - 1)
    lk = lhs.new_dim("k", lead + 1, k, k0, k_upper)
    b_out, *out_sp = row_major_coordinates(lm, spec.m_sizes)
    *taps, channel = row_major_coordinates(lk, spec.k_sizes)
    spatial, valid = _lhs_position_checks(lhs, spec, out_sp, taps)
    lhs_idx: list = [0] * rank
    lhs_idx[dn.lhs_batch] = b_out + g * spec.out_batch if attrs.batch_group_count > 1 else b_out
    lhs_idx[dn.lhs_feature] = (g * spec.group_in + channel if attrs.feature_group_count > 1
                               else channel)
    for i, e in enumerate(spatial):
        lhs_idx[dn.lhs_spatial[i]] = e
    if k_ragged:
        valid.append(f"({lhs.dims[lk.index].name} < {k})")
    a = _masked_tile(lhs, spec.conv.operands[0], tuple(lhs_idx), (bm, bk), valid,
                     spec.operand_dtype)

    # rhs: kernel element of (tap and feature along K) x (output feature along N).
    rhs = emitter(ValueEmitter, [1] * lead + [bk, bn], "        ")
    g = group_index(rhs)
    rk = rhs.new_dim("k", lead, k, k0, k_upper)
    rn = rhs.new_dim("n", lead + 1, n, f"{pid_n} * {bn}", tiles_n * bn - 1)
    *taps, channel = row_major_coordinates(rk, spec.k_sizes)
    rhs_idx: list = [0] * rank
    for i, (t, w) in enumerate(zip(taps, attrs.window.dims)):
        rhs_idx[dn.rhs_spatial[i]] = (w.size - 1) - t if w.window_reversal else t
    rhs_idx[dn.rhs_input] = channel
    rhs_idx[dn.rhs_output] = g * spec.group_out + rn if groups > 1 else rn
    rvalid = [f"({rhs.dims[rk.index].name} < {k})"] if k_ragged else []
    b = _masked_tile(rhs, spec.conv.operands[1], tuple(rhs_idx), (bk, bn), rvalid,
                     spec.operand_dtype)
    precision = f", input_precision={spec.input_precision!r}" if spec.input_precision else ""
    loop = [f"for {k0} in range(0, {k}, {bk}):", *lhs.lines, *rhs.lines,
            f"        {acc} = tl.dot({a}, {b}, {acc}{precision}, out_dtype={spec.acc_dtype})"]

    epi = emitter(AccumulatorEpilogue, [1] * lead + [bm, bn], "    ")
    g = group_index(epi)
    em_ = epi.new_dim("m", lead, m, f"{pid_m} * {bm}", tiles_m * bm - 1)
    en_ = epi.new_dim("n", lead + 1, n, f"{pid_n} * {bn}", tiles_n * bn - 1)
    b_out, *out_sp = row_major_coordinates(em_, spec.m_sizes)
    out_idx: list = [0] * rank
    out_idx[dn.out_batch] = b_out
    out_idx[dn.out_feature] = g * spec.group_out + en_ if groups > 1 else en_
    for i, e in enumerate(out_sp):
        out_idx[dn.out_spatial[i]] = e
    out_indices = tuple(out_idx)
    epi.hero_name, epi.hero_kind = spec.conv.name, "convolution"
    epi.hero_indices = out_indices
    acc_view = f"tl.reshape({acc}, (1, {bm}, {bn}))" if lead else acc
    epi.hero_value = epi.bind(spec.result_rounding.format(acc=acc_view), spec.conv.name)
    root_value = epi.value(computation.root_name, out_indices)
    values = root_value if isinstance(root_value, tuple) else (root_value,)
    if len(values) != len(outputs):
        raise UnsupportedOpError(f"root produces {len(values)} values for {len(outputs)} outputs",
                                 where=computation.root_name)
    mn = [epi.dims[em_.index].name, epi.dims[en_.index].name]
    mask = epi.bind(f"({mn[0]} < {m}) & ({mn[1]} < {n})", "out_mask")
    zero = epi.bind(f"{mn[0]} * 0 + {mn[1]} * 0", "tile_zero")
    for i, (v, shape, pointer) in enumerate(zip(values, outputs, out_pointers)):
        if tuple(shape.dims) != tuple(spec.out_dims):
            raise UnsupportedOpError(f"output {i} {list(shape.dims)} is not shaped like the "
                                     f"convolution {list(spec.out_dims)}", where=fusion_instr.name)
        offset = epi.index_text(buffer_addressing(shape, f"output {i}").offset(out_indices))
        epi.emit(f"tl.store({pointer} + {offset} + {zero}, "
                 f"{render_store_narrow(v, shape.element_type)}, mask={mask})")

    parameters = computation.parameters
    constants = [buf for buf in buffers.values() if buf.parameter_number is None]
    signature = [buffers[p.name].pointer for p in parameters] + [c.pointer for c in constants]
    signature += out_pointers
    grid = grid_size(tiling, problem)
    header = comment_block(
        f"Generated by triton_backend.templates.conv.kernel for convolution fusion "
        f"{fusion_instr.name}.\n{print_instruction(fusion_instr)}\n\n"
        f"{print_computation(computation)}\n\n"
        f"groups {groups}, M {list(spec.m_sizes)} -> {m}, N {n}, K {list(spec.k_sizes)} -> {k}\n"
        f"tiling {tiling}, grid {grid}")
    body = ["    " + line for line in top] + ["    " + loop[0], *loop[1:], *epi.lines]
    kernel = f"@triton.jit\ndef {kernel_name}({', '.join(signature)}):\n" + "\n".join(body) + "\n"
    combiners = "\n\n".join(helpers.values())
    specs = kernel_specs(kernel_name, grid, parameters, [c.instruction for c in constants], outputs,
                         (tiling.num_warps, tiling.num_stages))
    source = (header + PRELUDE + KERNEL_IMPORTS + DOT_BF16_PRELUDE + "\n\n"
              + (combiners + "\n\n" if combiners else "") + kernel + "\n\n" + specs + RUNTIME)
    return source, grid


__all__ = ["ConvSpec", "render_conv_kernel"]
