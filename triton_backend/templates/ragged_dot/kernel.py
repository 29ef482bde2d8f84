"""Ragged-dot fusions as grouped GEMMs: each program multiplies rows of one group only, so a
mixture of experts costs its useful FLOPs, not ``g`` times them (the dense form
``fusion.transforms.ragged_dot_expansion`` writes for the other layouts).

Two forms (``fusion.analysis.ragged_dot.grouped_gemm_problem``):

* by rows, ``[m, k] x [g, k, n] -> [m, n]`` (``[g, n, k]`` too): program ``(slot, n)`` walks
  the group sizes to find which group's ``BLOCK_M``-row tile its slot is (the tiles of group 0,
  then of group 1, ...; ``cdiv(m, BLOCK_M) + g + 1`` slots bound them), runs a K loop of
  ``tl.dot`` over its rows and that group's matrix, computes the fusion's elementwise
  epilogue on the accumulator (``AccumulatorEpilogue``, as the dot template does) and
  stores; the slots past every group write the rows in no group (the epilogue of zeros);
* by contracting dim, ``[k, m] x [k, n] -> [g, m, n]`` (the experts' weight gradient):
  program ``(m, n, j)`` sums ``k`` over group ``j``'s range only; an empty group stores zeros.

Group sizes are read on the device (no host round trip); a negative size counts as 0, and
rows past ``m`` belong to no tile.  The numerics are the dot template's
(``dot.driver.dot_numerics``): f32 accumulation; an f32 product IEEE unless the op's
``algorithm`` says otherwise, never TF32 by default; bf16 to the tensor cores as loaded (the
interpreter, whose bf16 ``tl.dot`` is broken, multiplies the exactly widened values).

>>> import fusion
>>> m = fusion.parse_hlo('''HloModule m
... f {
...   a = bf16[100,64] parameter(0)
...   b = bf16[8,64,96] parameter(1)
...   g = s32[8] parameter(2)
...   ROOT r = f32[100,96] ragged-dot(a, b, g), lhs_contracting_dims={1}, rhs_contracting_dims={1}, lhs_ragged_dims={0}, rhs_group_dims={0}
... }
... ENTRY e {
...   a = bf16[100,64] parameter(0)
...   b = bf16[8,64,96] parameter(1)
...   g = s32[8] parameter(2)
...   ROOT r = f32[100,96] fusion(a, b, g), kind=kLoop, calls=f
... }''')
>>> plan = ragged_dot_plan(m, m.entry.root)
>>> plan.form, plan.m, plan.k, plan.n, plan.groups, plan.blocks, plan.grid
('rows', 100, 64, 96, 8, (128, 128, 64), (10, 1))
"""
from __future__ import annotations

from dataclasses import dataclass

from fusion.analysis.ragged_dot import grouped_gemm_problem, ragged_dot
from fusion.errors import UnsupportedOpError
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.ir.shape import ArrayShape
from fusion.text.printer import print_computation, print_instruction
from tiling.symbolic.tiled_fusion import next_power_of_two
from triton_backend.lowering.emitter.identifiers import (
    KERNEL_RESERVED_NAMES, IdentifierAllocator, comment_block, sanitize,
)
from triton_backend.lowering.emitter.triton_types import KERNEL_IMPORTS, render_store_narrow
from triton_backend.lowering.rules.value_rules import rule_for
from triton_backend.lowering.host_template import PRELUDE, RUNTIME, kernel_specs
from triton_backend.runtime.kernel_loading import CompiledFusion, TemplateKind, load_kernel
from triton_backend.templates.dot.driver import dot_numerics
from triton_backend.templates.dot.gemm_kernel import (
    DOT_BF16_PRELUDE, AccumulatorEpilogue, precision_keyword,
)

#: Largest tiles (rows, columns, reduction) and warps per operand type: bf16/f16 on the
#: tensor cores as Triton's tutorial GEMM tiles them; f32 (IEEE, on the CUDA cores) smaller.
#: A tile shrinks to its dim (at least 16: tl.dot's floor).
BLOCKS = {"bf16": (128, 128, 64, 8), "f16": (128, 128, 64, 8), "f32": (64, 64, 32, 4)}
MIN_BLOCK = 16
#: Stages of the pipelined K loop.
NUM_STAGES = 3


@dataclass(frozen=True)
class RaggedDotPlan:
    """One grouped GEMM: its form (``rows`` or ``contracting``), sizes and blocks."""

    op: HloInstruction
    form: str
    m: int
    k: int
    n: int
    groups: int
    blocks: tuple[int, int, int]
    operand_type: str
    rhs_transposed: bool = False

    @property
    def grid(self) -> tuple[int, ...]:
        bm, bn, _ = self.blocks
        tiles_m, tiles_n = -(-self.m // bm), -(-self.n // bn)
        if self.form == "rows":
            return (tiles_m + self.groups + 1, tiles_n)
        return (tiles_m, tiles_n, self.groups)


def is_ragged_dot_fusion(module: HloModule, fusion_instr: HloInstruction) -> bool:
    """True when the fusion holds a ``ragged-dot`` (with its epilogue, if any)."""
    if fusion_instr.opcode != "fusion" or not fusion_instr.has_attr("calls"):
        return False
    return any(i.opcode == "ragged-dot" for i in module.computation(fusion_instr.attr("calls")))


def ragged_dot_plan(module: HloModule, fusion_instr: HloInstruction,
                    tile_sizes: tuple[int, ...] | None = None) -> RaggedDotPlan:
    """Check the fusion is one grouped GEMM on its parameters; choose its blocks (or take
    ``tile_sizes``: ``(BLOCK_M, BLOCK_N, BLOCK_K)``, powers of two of at least 16)."""
    comp = module.computation(fusion_instr.attr("calls"))
    (op,) = [i for i in comp if i.opcode == "ragged-dot"]
    shapes = [comp.instruction(o).shape for o in op.operands]
    if any(comp.instruction(o).opcode != "parameter" for o in op.operands):
        raise UnsupportedOpError("a ragged-dot fusion reads the ragged dot's operands as they "
                                 "are (no prologue)", where=op.name)
    lhs, rhs, sizes = shapes
    r = ragged_dot(op, lhs, rhs, sizes)
    problem = grouped_gemm_problem(r, lhs, rhs, op.shape)
    if problem is not None:
        raise UnsupportedOpError(problem, where=op.name)
    if comp.root is not op and (r.mode != "noncontracting" or
                                not isinstance(comp.root.shape, ArrayShape)):
        raise UnsupportedOpError("only a ragged dot by rows takes an epilogue, of one output",
                                 where=op.name)
    if r.mode == "noncontracting":
        m, k = lhs.dims
        transposed = r.rhs_contracting == (2,)
        n = rhs.dims[1] if transposed else rhs.dims[2]
        form = "rows"
    else:
        (k, m), n, transposed, form = lhs.dims, rhs.dims[1], False, "contracting"
    if tile_sizes is not None:
        blocks = tuple(int(t) for t in tile_sizes)
        if len(blocks) != 3 or any(b < MIN_BLOCK or b & (b - 1) for b in blocks):
            raise UnsupportedOpError(f"ragged-dot tile sizes {tile_sizes} must be three powers "
                                     f"of two of at least {MIN_BLOCK}", where=op.name)
    else:
        fit = lambda size, most: max(MIN_BLOCK, min(most, next_power_of_two(size)))  # noqa: E731
        bm, bn, bk, _ = BLOCKS[lhs.dtype]
        blocks = (fit(m, bm), fit(n, bn), fit(k, bk))
    return RaggedDotPlan(op, form, m, k, n, r.groups, blocks, lhs.dtype, transposed)


def _rows_body(plan: RaggedDotPlan, step: str, acc_t: str) -> list[str]:
    """Program ``(slot, n)``: which group's row tile the slot is, then its K loop (the
    epilogue and the store follow: :func:`_rows_epilogue`)."""
    rhs_k, rhs_n = (1, plan.k) if plan.rhs_transposed else (plan.n, 1)
    return [
        "    slot = tl.program_id(0)",
        "    pid_n = tl.program_id(1)",
        "    # Walk the groups: their row tiles in order, each group's rows after the last's.",
        "    seen = tl.full((), 0, tl.int64)",
        "    start = tl.full((), 0, tl.int64)",
        "    group = tl.full((), G, tl.int32)",
        "    row0 = tl.full((), 0, tl.int64)",
        "    row_end = tl.full((), 0, tl.int64)",
        "    for j in range(G):",
        "        size = tl.maximum(tl.load(sizes_ptr + j).to(tl.int64), 0)",
        "        tiles = (size + BLOCK_M - 1) // BLOCK_M",
        "        hit = (slot >= seen) & (slot < seen + tiles)",
        "        group = tl.where(hit, j, group)",
        "        row0 = tl.where(hit, start + (slot - seen) * BLOCK_M, row0)",
        "        row_end = tl.where(hit, start + size, row_end)",
        "        seen += tiles",
        "        start += size",
        "    # Past every group: the rows in none, zeros.",
        "    tail = group == G",
        "    row0 = tl.where(tail, start + (slot - seen) * BLOCK_M, row0)",
        "    row_end = tl.minimum(tl.where(tail, M, row_end), M)",
        "    if row0 >= row_end:",
        "        return",
        "    rows = row0 + tl.arange(0, BLOCK_M)",
        "    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)",
        "    row_ok = rows < row_end",
        "    col_ok = cols < N",
        "    matrix = rhs_ptr + tl.minimum(group, G - 1).to(tl.int64) * (K * N)",
        f"    acc = tl.zeros((BLOCK_M, BLOCK_N), {acc_t})",
        "    if group < G:",
        "        for k0 in tl.range(0, K, BLOCK_K, num_stages=K_STAGES):",
        "            ks = k0 + tl.arange(0, BLOCK_K)",
        "            k_ok = ks < K",
        "            a = tl.load(lhs_ptr + rows[:, None].to(tl.int64) * K + ks[None, :],",
        "                        mask=row_ok[:, None] & k_ok[None, :], other=0.0)",
        f"            b = tl.load(matrix + ks[:, None] * {rhs_k} + cols[None, :] * {rhs_n},",
        "                        mask=k_ok[:, None] & col_ok[None, :], other=0.0)",
        f"            {step}",
    ]


#: The identifiers the hand-written kernel lines use (the epilogue's emitter avoids them).
_KERNEL_NAMES = frozenset({
    "slot", "pid_m", "pid_n", "seen", "start", "group", "row0", "row_end", "j", "size", "tiles",
    "hit", "tail", "rows", "cols", "row_ok", "col_ok", "matrix", "acc", "k0", "ks", "k_ok",
    "a", "b", "k_end", "out", "lhs_ptr", "rhs_ptr", "sizes_ptr", "out_ptr", "M", "N", "K", "G",
    "BLOCK_M", "BLOCK_N", "BLOCK_K", "K_STAGES", "DOT_BF16"})


def _rows_epilogue(module: HloModule, comp: HloComputation, plan: RaggedDotPlan,
                   out: ArrayShape, rounding: str) -> tuple[list[str], list[str], list]:
    """``(parameter pointers, epilogue and store lines, constant buffers)``: the fusion's
    root at the program's tile, the ragged dot read as the accumulator (rounded to its
    type), stored masked to the rows of its group and the columns in range."""
    names = IdentifierAllocator(KERNEL_RESERVED_NAMES | _KERNEL_NAMES)
    em = AccumulatorEpilogue(module, comp, [plan.blocks[0], plan.blocks[1]], names, {},
                             index_bits=64, rule_for=rule_for, hero_name=plan.op.name,
                             hero_kind="ragged dot")
    pointers = [em.pointer_for(p).pointer for p in comp.parameters]
    lhs, rhs, sizes = (em.buffers[o].pointer for o in plan.op.operands)
    lines = [f"    lhs_ptr, rhs_ptr, sizes_ptr = {lhs}, {rhs}, {sizes}"]
    m = em.new_dim("m", 0, plan.m, "row0", plan.m + plan.blocks[0])
    n = em.new_dim("n", 1, plan.n, f"pid_n * {plan.blocks[1]}",
                   -(-plan.n // plan.blocks[1]) * plan.blocks[1] - 1)
    em.hero_indices = (m, n)
    em.hero_value = em.bind(rounding.format(acc="acc"), plan.op.name)
    value = em.value(comp.root_name, (m, n))
    em.emit("tl.store(out_ptr + rows[:, None].to(tl.int64) * N + cols[None, :], "
            f"{render_store_narrow(value, out.element_type)}, "
            "mask=row_ok[:, None] & col_ok[None, :])")
    constants = [b for b in em.buffers.values() if b.parameter_number is None]
    return pointers + [c.pointer for c in constants], lines + em.lines, constants


def _contracting_body(step: str, acc_t: str, stored: str) -> list[str]:
    """Program ``(m, n, j)``: group ``j``'s product, over its own range of ``k``."""
    return [
        "    pid_m = tl.program_id(0)",
        "    pid_n = tl.program_id(1)",
        "    group = tl.program_id(2)",
        "    start = tl.full((), 0, tl.int64)",
        "    for j in range(G):",
        "        size = tl.maximum(tl.load(sizes_ptr + j).to(tl.int64), 0)",
        "        start += tl.where(j < group, size, 0)",
        "    size = tl.maximum(tl.load(sizes_ptr + group).to(tl.int64), 0)",
        "    k_end = tl.minimum(start + size, K)",
        "    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)",
        "    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)",
        "    row_ok = rows < M",
        "    col_ok = cols < N",
        f"    acc = tl.zeros((BLOCK_M, BLOCK_N), {acc_t})",
        "    for k0 in tl.range(start, k_end, BLOCK_K, num_stages=K_STAGES):",
        "        ks = k0 + tl.arange(0, BLOCK_K)",
        "        k_ok = ks < k_end",
        "        a = tl.load(lhs_ptr + ks[None, :].to(tl.int64) * M + rows[:, None],",
        "                    mask=row_ok[:, None] & k_ok[None, :], other=0.0)",
        "        b = tl.load(rhs_ptr + ks[:, None].to(tl.int64) * N + cols[None, :],",
        "                    mask=k_ok[:, None] & col_ok[None, :], other=0.0)",
        f"        {step}",
        "    out = out_ptr + group.to(tl.int64) * (M * N)",
        "    tl.store(out + rows[:, None].to(tl.int64) * N + cols[None, :],",
        f"             {stored}, mask=row_ok[:, None] & col_ok[None, :])",
    ]


def render_ragged_dot_kernel(module: HloModule, fusion_instr: HloInstruction,
                             plan: RaggedDotPlan) -> str:
    """The kernel file of a ragged-dot fusion (see the module docstring)."""
    comp = module.computation(fusion_instr.attr("calls"))
    out = comp.root.shape
    assert isinstance(out, ArrayShape)
    # The dot template's numerics: bf16 to the tensor cores as loaded (fp32 under the
    # interpreter), f32 in IEEE unless an ``algorithm`` says otherwise, f32 accumulation.
    t, acc_t, precision, rounding = dot_numerics(plan.op, plan.operand_type,
                                                 plan.operand_type, plan.op.shape.dtype)
    step = f"acc = tl.dot(a.to({t}), b.to({t}), acc{precision_keyword(precision)})"
    if plan.form == "rows":
        pointers, epilogue, arrays = _rows_epilogue(module, comp, plan, out, rounding)
        body = epilogue[:1] + _rows_body(plan, step, acc_t) + epilogue[1:]
    else:
        pointers, arrays = ["lhs_ptr", "rhs_ptr", "sizes_ptr"], []
        stored = render_store_narrow(rounding.format(acc="acc"), out.element_type)
        body = _contracting_body(step, acc_t, stored)
    name = f"{sanitize(fusion_instr.name)}_kernel"
    bm, bn, bk = plan.blocks
    header = comment_block(
        f"Generated by triton_backend.lowering for fusion {fusion_instr.name} (ragged-dot "
        f"template: a grouped GEMM by {plan.form}).\n{print_instruction(fusion_instr)}\n\n"
        f"{print_computation(comp)}\n\nm={plan.m} k={plan.k} n={plan.n}, {plan.groups} groups;"
        f" blocks {plan.blocks}; grid {plan.grid}")
    constants = "\n# The problem, and the tile each program computes (change them and run).\n" + \
        "".join(f"{k} = tl.constexpr({v})\n" for k, v in (
            ("M", plan.m), ("K", plan.k), ("N", plan.n), ("G", plan.groups), ("BLOCK_M", bm),
            ("BLOCK_N", bn), ("BLOCK_K", bk), ("K_STAGES", NUM_STAGES)))
    kernel = (f"@triton.jit\ndef {name}({', '.join(pointers + ['out_ptr'])}):\n"
              + "\n".join(body) + "\n")
    specs = kernel_specs(name, plan.grid, comp.parameters, [c.instruction for c in arrays],
                         [out], (BLOCKS[plan.operand_type][3], NUM_STAGES))
    # The grid follows the constants, so a tile changed above still covers every row.
    rows, cols = "-(-M.value // BLOCK_M.value)", "-(-N.value // BLOCK_N.value)"
    grid = (f"GRID = ({rows} + G.value + 1, {cols})" if plan.form == "rows" else
            f"GRID = ({rows}, {cols}, G.value)")
    specs = specs.replace(f"GRID = {plan.grid!r}", grid + f"  # {plan.grid!r}")
    return (header + PRELUDE + KERNEL_IMPORTS + DOT_BF16_PRELUDE + constants + "\n\n" + kernel
            + "\n\n" + specs + RUNTIME)


def compile_ragged_dot_fusion(module: HloModule, fusion_instr: HloInstruction, *,
                              tile_sizes=None, target: str | None = None, cache=None):
    """Generate, cache and load the grouped GEMM kernel of a ragged-dot fusion."""
    plan = ragged_dot_plan(module, fusion_instr, tile_sizes)
    source = render_ragged_dot_kernel(module, fusion_instr, plan)
    loaded, path = load_kernel(module, fusion_instr, source, repr(plan.blocks), target, cache)
    reason = ("ragged-dot template: " + ("explicit tile sizes" if tile_sizes is not None else
                                         f"a grouped GEMM by {plan.form}, blocks {plan.blocks}"))
    return CompiledFusion(fusion_instr.name, TemplateKind.RAGGED_DOT, path, source, plan.grid,
                          plan.blocks, loaded, reason)


__all__ = ["RaggedDotPlan", "compile_ragged_dot_fusion", "is_ragged_dot_fusion",
           "ragged_dot_plan", "render_ragged_dot_kernel"]
