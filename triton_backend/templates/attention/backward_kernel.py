"""Render the kernel file of a score-space fusion (``tiling.fusion_pass.score_space``): the
attention backward's kernels, the score matrices never leaving registers.

The kernel space has the axes ``[batch (1 lane)], query (BLOCK_M), key (BLOCK_N), head
(BLOCK_D)``, as the forward's (``attention.kernel``), and one ``ValueEmitter`` renders every
value of the fused computation in it.  One program owns a block of the *row* role and loops
over blocks of the *streamed* one:

* ``rows`` and ``query`` kernels own ``BLOCK_M`` queries and stream the keys: the reductions
  over the keys take one loop per dependency level (``emit_sibling_reductions``: the scores
  recomputed once per level, not once per reduction; a softmax's max and sum in one loop,
  the sum rescaled as the max grows), then (``query``) one loop accumulates every output dot ``X @ Y`` (``X`` score
  shaped ``[BLOCK_M, BLOCK_N]``, ``Y`` the free operand at the key block);
* ``key`` kernels own ``BLOCK_N`` keys and stream the queries: one loop accumulates every
  output dot ``X^T @ Y`` (``dK``, ``dV`` together), the per-row vectors read as inputs.  With
  a query-head group (grouped-query attention, ``ScoreSpace.group``) the programs are per kv
  head and an outer loop walks the group's query heads in order, so a kv head's ``dK`` and
  ``dV`` sum its group in one program, in a fixed order: no atomics, the same bits each run.

Each score dot is the template's own ``tl.dot`` of its two operand tiles (the owned side
loaded once, before any loop); each output dot multiplies as the HLO's types say
(``dot_numerics``).  Lanes past the streamed extent are zeroed in both factors of an output
dot; lanes past the head dims are zeroed in the score dots' operands; stores are masked.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from functools import partial

from fusion.errors import UnsupportedOpError
from fusion.ir.hlo_module import HloInstruction, HloModule
from fusion.ir.shape import ArrayShape, flatten_shape
from fusion.text.printer import print_computation, print_instruction
from tiling.fusion_pass.attention_mask import KeyBand
from tiling.fusion_pass.attention_pattern import free_dims
from tiling.fusion_pass.online_softmax import online_sum
from tiling.fusion_pass.score_space import ScoreSpace
from tiling.maps.affine_expr import AffineExpr, DimExpr, const
from triton_backend.lowering.emitter.identifiers import IdentifierAllocator, comment_block, sanitize
from triton_backend.lowering.emitter.triton_types import KERNEL_IMPORTS
from triton_backend.lowering.host_template import PRELUDE, RUNTIME, kernel_specs
from triton_backend.lowering.kernel_plan import index_bits_for
from triton_backend.lowering.rules.memory_rules import store_output
from triton_backend.lowering.rules.reduction_rules import emit_sibling_reductions
from triton_backend.lowering.rules.value_rules import rule_for
from triton_backend.templates.attention.kernel import (DotNumerics, HookedEmitter, _decompose,
                                                       _operand_indices, row_and_batch_programs)
from triton_backend.templates.attention.tiling import AttentionTiling
from triton_backend.templates.dot.gemm_kernel import DOT_BF16_PRELUDE, dot_operand, precision_keyword


@dataclass
class _ScoreKernel:
    """The state of one rendering (used once)."""

    module: HloModule
    fusion_instr: HloInstruction
    space: ScoreSpace
    tiling: AttentionTiling
    numerics: dict
    interpreter: bool = False
    #: The (query, key) band the output dots read (``tiling.fusion_pass.score_band``).
    band: KeyBand | None = None
    #: The band of keys the row statistics must visit (``score_band.reduction_band``).
    reduce_band: KeyBand | None = None

    def __post_init__(self) -> None:
        self.comp = self.module.computation(self.fusion_instr.attr("calls"))
        self.lead = 1 if self.space.batch else 0
        t = self.tiling
        self.qa, self.ka, self.da = self.lead, self.lead + 1, self.lead + 2
        self.blocks = [1] * self.lead + [t.block_m, t.block_n, t.block_d]
        self.names = IdentifierAllocator()
        shapes = [p.shape for p in self.comp.parameters if isinstance(p.shape, ArrayShape)]
        outs = [s for s in _leaves(self.fusion_instr.shape)]
        bits = index_bits_for(math.prod(s.dims) for s in (*shapes, *outs))
        self.em = HookedEmitter(
            self.module, self.comp, list(self.blocks), self.names,
            {r: (self.ka,) for r in self.space.reduces}, reduction_chunk=t.block_n,
            index_bits=bits, rule_for=rule_for, tree_reductions=self.interpreter,
            hooks={d: partial(self.scores, d) for d in self.space.score_dots})
        self.owned: dict = {}
        self.head_vars: dict[int, DimExpr] = {}
        self.dots_emitted = 0

    # --- helpers ----------------------------------------------------------------------------
    def _full(self, axes: dict[int, int]) -> tuple[int, ...]:
        return tuple(axes.get(a, 1) for a in range(len(self.blocks)))

    def _var(self, e: DimExpr) -> str:
        return self.em.dims[e.index].name

    def _head(self, extent: int) -> DimExpr:
        if extent not in self.head_vars:
            self.head_vars[extent] = self.em.new_dim("h", self.da, extent)
        return self.head_vars[extent]

    def _single(self, name: str, indices) -> str:
        value = self.em.value(name, tuple(indices))
        if not isinstance(value, str):
            raise UnsupportedOpError(f"tuple-shaped operand {name}", where=name)
        return value

    def _tile(self, value: str, axes: tuple[int, int], masks: list[str], dtype: str,
              hint: str, transpose: bool = False) -> str:
        return dot_operand(self.em, value, self._full({a: self.blocks[a] for a in axes}),
                           tuple(self.blocks[a] for a in axes), masks, dtype, hint, transpose)

    def _bound(self, var: DimExpr, extent: int, block: int) -> list[str]:
        return [] if extent % block == 0 and extent >= block else [f"({self._var(var)} < {extent})"]

    # --- score dots -------------------------------------------------------------------------
    def _operand_tile(self, dot: HloInstruction, side: str, at_var: DimExpr) -> str:
        """A score dot's operand tile ``[rows of at_var's axis, head]``."""
        operand = self.comp.instruction(dot.operands[side == "rhs"])
        c = dot.attr(f"{side}_contracting_dims")[0]
        head = self._head(operand.shape.dims[c])
        at = _operand_indices(dot, side, operand.shape.rank, self.batch, at_var, head)
        axis = self.em.dims[at_var.index].axis
        masks = self._bound(head, operand.shape.dims[c], self.tiling.block_d)
        return self._tile(self._single(operand.name, at), (axis, self.da), masks,
                          self.numerics[dot.name].operand_dtype, side, transpose=side == "rhs")

    def scores(self, name: str, indices: tuple[AffineExpr, ...]) -> str:
        """Score dot ``name`` at ``(batch, query, key)``: ``lhs_tile @ rhs_tile^T``, rounded;
        the owned side's tile is the one loaded before the loops."""
        nb = len(self.space.batch)
        dot = self.comp.instruction(name)
        q, k = indices[nb], indices[nb + 1]
        if tuple(indices[:nb]) != tuple(self.batch[:nb]) or not all(
                isinstance(e, DimExpr) for e in (q, k)):
            raise UnsupportedOpError(f"the scores {name} are read at {indices}, not at "
                                     "(batch, query rows, key block)", where=name)
        lhs = self.owned.get((name, "lhs")) if q == self.row else None
        lhs = lhs or self._operand_tile(dot, "lhs", q)
        rhs = self.owned.get((name, "rhs")) if k == self.row else None
        rhs = rhs or self._operand_tile(dot, "rhs", k)
        numerics = self.numerics[name]
        em = self.em
        self.dots_emitted += 1
        s = em.bind(f"tl.dot({lhs}, {rhs}{precision_keyword(numerics.input_precision)}, "
                    f"out_dtype={numerics.acc_dtype})", "qk")
        s = em.bind(f"tl.reshape({s}, {self._full({self.qa: self.blocks[self.qa], self.ka: self.blocks[self.ka]})})", "qk")
        return em.bind(numerics.result_rounding.format(acc=s), name)

    def _load_owned(self) -> None:
        """The score dots' operand tiles on the owned side, once, before any loop."""
        side = "rhs" if self.space.kind == "key" else "lhs"
        for name in self.space.score_dots:
            dot = self.comp.instruction(name)
            self.owned[(name, side)] = self._operand_tile(dot, side, self.row)

    # --- output dots ------------------------------------------------------------------------
    def _output_loop(self) -> None:
        """One loop over the streamed blocks accumulating every output dot."""
        em, t, space = self.em, self.tiling, self.space
        key_kind = space.kind == "key"
        sa = self.qa if key_kind else self.ka
        extent = space.queries if key_kind else space.keys
        step = self.blocks[sa]
        accs = {}
        for name in space.output_dots:
            numerics = self.numerics[name]
            accs[name] = em.bind(f"tl.zeros(({self.blocks[self.ra]}, {t.block_d}), "
                                 f"dtype={numerics.acc_dtype})", "acc")
        first, end = self._streamed_blocks(extent, step)
        with contextlib.ExitStack() as loops:
            if key_kind and space.group:
                loops.enter_context(self._group_loop())
            start = self.names.fresh("start")
            loops.enter_context(em.block(f"for {start} in range({first}, {end}, {step}):"))
            var = em.new_dim("qs" if key_kind else "ks", sa, extent, start,
                             -(-extent // step) * step - 1)
            masks = self._bound(var, extent, step)
            for name in space.output_dots:
                self._accumulate(name, accs[name], var, masks)
        for name in space.output_dots:
            dot = self.comp.instruction(name)
            numerics = self.numerics[name]
            view = em.bind(f"tl.reshape({accs[name]}, "
                           f"{self._full({self.ra: self.blocks[self.ra], self.da: t.block_d})})",
                           "acc")
            value = em.bind(numerics.result_rounding.format(acc=view), name)
            at = self._indices(space.roles[name], dot.shape.dims)
            em.remember(name, at, value)

    @contextlib.contextmanager
    def _group_loop(self):
        """A ``key`` kernel's loop over its kv head's query-head group, in order (the
        accumulators sum the group); inside it the batch indices end with the group's."""
        em, group = self.em, math.prod(self.space.group)
        kv = list(self.batch)
        head = self.names.fresh("group_head")
        em.emit("# every query head of the kv head's group, in order: dK and dV sum them")
        with em.block(f"for {head} in range(0, {group}):"):
            var = em.new_dim("group", 0, group, head, group - 1)
            self.batch = kv + _decompose(var, self.space.group)
            try:
                yield
            finally:
                self.batch = kv

    def _streamed_blocks(self, extent: int, step: int,
                         band: KeyBand | None = None) -> tuple[str, str]:
        """The first and the end of the streamed blocks the mask's band (the output dots',
        unless ``band`` is given) lets this program's rows meet (``score_band``; every block
        without one)."""
        band, em = band or self.band, self.em
        if band is None:
            return "0", str(extent)
        block = self.blocks[self.ra]
        r0 = f"{self.pid} * {block}"
        # keys k meet queries q + low <= k <= q + high: a key block meets q in [k - high, k - low]
        low, high = (band.low, band.high) if self.space.kind != "key" else \
            (None if band.high is None else -band.high, None if band.low is None else -band.low)
        first, end = "0", str(extent)
        if low is not None:
            first = em.bind(f"tl.minimum(tl.maximum({r0} + {low}, 0), {extent}) "
                            f"// {step} * {step}", "first")
        if high is not None:
            end = em.bind(f"tl.minimum(tl.maximum({r0} + {block + high}, 0), {extent})", "end")
        em.emit("# blocks the mask hides from every row of this program are not visited")
        return first, end

    def _accumulate(self, name: str, acc: str, var: DimExpr, masks: list[str]) -> None:
        em, space = self.em, self.space
        dot = self.comp.instruction(name)
        numerics = self.numerics[name]
        xs = 0 if dot.operands[0] in space.roles else 1
        sides = ("lhs", "rhs")
        x_name, y_name = dot.operands[xs], dot.operands[1 - xs]
        x_shape = self.comp.instruction(x_name).shape
        x_at = self._indices(space.roles[x_name], x_shape.dims, var)
        x = self._tile(self._single(x_name, x_at), (self.qa, self.ka), masks,
                       numerics.operand_dtype, "x", transpose=space.kind == "key")
        y_shape = self.comp.instruction(y_name).shape
        (free,) = free_dims(y_shape.rank, dot, sides[1 - xs])
        head = self._head(y_shape.dims[free])
        # Y's batch and contracting dims pair with X's: read at the indices of X's roles there
        # (the streamed dim, and with a query-head group summed, the group's).
        x_roles = space.roles[x_name]
        paired = [[self._indices((x_roles[i],), (x_shape.dims[i],), var)[0]
                   for i in dot.attr(f"{sides[xs]}_{what}_dims", ())]
                  for what in ("batch", "contracting")]
        y_at = _operand_indices(dot, sides[1 - xs], y_shape.rank, paired[0], head,
                                tuple(paired[1]))
        sa = self.em.dims[var.index].axis
        y = self._tile(self._single(y_name, y_at), (sa, self.da), masks,
                       numerics.operand_dtype, "y")
        self.dots_emitted += 1
        em.emit(f"{acc} = tl.dot({x}, {y}, {acc}{precision_keyword(numerics.input_precision)}, "
                f"out_dtype={numerics.acc_dtype})")

    def _indices(self, roles: tuple, dims: tuple[int, ...], streamed: DimExpr | None = None):
        out: list[AffineExpr] = []
        for role, n in zip(roles, dims):
            if isinstance(role, tuple):
                out.append(self.batch[role[1]])
            elif role == self.space.streamed and streamed is not None:
                out.append(streamed)
            elif role in ("q", "k") and role != self.space.streamed:
                out.append(self.row)
            elif role == "d":
                out.append(self._head(n))
            elif role is None:
                out.append(const(0))
            else:
                raise UnsupportedOpError(f"a value read along {role!r} outside the loop",
                                         where=self.fusion_instr.name)
        return tuple(out)

    # --- the kernel -------------------------------------------------------------------------
    def render(self) -> tuple[str, tuple[int, ...]]:
        em, space = self.em, self.space
        for p in self.comp.parameters:
            em.pointer_for(p)
        key_kind = space.kind == "key"
        self.ra = self.ka if key_kind else self.qa
        rows = space.keys if key_kind else space.queries
        block = self.blocks[self.ra]
        # A key kernel's programs are per kv head: the group is its loop's (``_group_loop``).
        programs = space.kv_batch if key_kind else space.batch
        batch = math.prod(programs)
        tiles = -(-rows // block)
        pid, pid_b, grid = row_and_batch_programs(em, tiles, batch, "pid_row")
        self.pid = pid
        self.batch: list[AffineExpr] = []
        if self.lead:
            flat = em.new_dim("batch", 0, batch, pid_b, batch - 1)
            self.batch = _decompose(flat, programs)
        self.row = em.new_dim("k" if key_kind else "q", self.ra, rows, f"{pid} * {block}",
                              tiles * block - 1)
        self._load_owned()
        if space.reduces:
            em.emit("# the row statistics by dependency level, each level one loop over the keys")
            if self.reduce_band is not None:
                step = self.blocks[self.ka]
                first, end = self._streamed_blocks(space.keys, step, self.reduce_band)
                em.loop_bounds[self.ka] = f"{first}, {end}, {step}"
            emit_sibling_reductions(em, [
                (name, self._indices(space.roles[name], self.comp.instruction(name).shape.dims))
                for name in space.reduces],
                online=lambda top, total: online_sum(self.module, self.comp, top, total))
            em.loop_bounds.pop(self.ka, None)
        if space.output_dots:
            em.emit(f"# one loop over the {'queries' if key_kind else 'keys'}: every output "
                    "dot accumulated")
            self._output_loop()
        pointers = self._store_outputs()
        return self._source(pointers, grid), grid

    def _store_outputs(self) -> list[str]:
        em, root = self.em, self.comp.root
        outs = list(root.operands) if root.opcode == "tuple" else [root.name]
        pointers = []
        for i, name in enumerate(outs):
            # the value below the output's layout tail, stored where the tail puts it
            tail = self.space.tails.get(name)
            below = tail.value if tail is not None else name
            shape = self.comp.instruction(below).shape
            at = self._indices(self.space.roles[below], shape.dims)
            value = self._single(below, at)
            pointer = self.names.fresh(f"out{i}_ptr")
            pointers.append(pointer)
            conds = [f"({self._var(e)} < {n})" for e, n in zip(at, shape.dims)
                     if isinstance(e, DimExpr) and em.dims[e.index].axis != 0]
            mask = em.bind(" & ".join(conds) or "True", "out_mask")
            zero = em.bind(" + ".join(f"{self._var(e)} * 0" for e in at
                                      if isinstance(e, DimExpr)) or "0", "tile_zero")
            if tail is not None and tail.ops:
                em.emit(f"# stored where {', '.join(tail.ops)} puts each element: "
                        f"{tail.to_root}")
            store_output(em, value, self.comp.instruction(name).shape, pointer,
                         tail.at_root(at) if tail is not None else at, mask, zero,
                         f"output {i}", at)
        return pointers

    def _source(self, pointers: list[str], grid) -> str:
        em, t, space = self.em, self.tiling, self.space
        kernel_name = self.names.fresh(f"{sanitize(self.fusion_instr.name)}_kernel")
        parameters = self.comp.parameters
        constants = [b for b in em.buffers.values() if b.parameter_number is None]
        signature = [em.buffers[p.name].pointer for p in parameters]
        signature += [c.pointer for c in constants] + pointers
        header = comment_block(
            f"Generated by triton_backend.templates.attention.backward_kernel for fusion "
            f"{self.fusion_instr.name}.\n{print_instruction(self.fusion_instr)}\n\n"
            f"{print_computation(self.comp)}\n\n"
            f"{space.kind} kernel: score dots {list(space.score_dots)}, output dots "
            f"{list(space.output_dots)}, reductions {list(space.reduces)}, batch "
            f"{list(space.batch)}, {space.queries} queries, {space.keys} keys\n"
            f"tiling {t}, grid {grid}")
        kernel = (f"@triton.jit\ndef {kernel_name}({', '.join(signature)}):\n"
                  + "\n".join(em.lines) + "\n")
        combiners = "\n\n".join(em.helper_functions.values())
        specs = kernel_specs(kernel_name, grid, parameters, [c.instruction for c in constants],
                             tuple(_leaves(self.fusion_instr.shape)),
                             (t.num_warps, t.num_stages))
        # Every loop walks the same streamed blocks, so its dots add up per block.
        dots = (f"\n# tl.dot calls per streamed block, all loops together (the cost model's count)\n"
                f"DOTS_PER_BLOCK = {self.dots_emitted}\n")
        return (header + PRELUDE + KERNEL_IMPORTS + DOT_BF16_PRELUDE + "\n\n"
                + (combiners + "\n\n" if combiners else "") + kernel + "\n\n" + specs + dots
                + RUNTIME)


def _leaves(shape) -> list[ArrayShape]:
    return list(flatten_shape(shape))


def render_score_kernel(module: HloModule, fusion_instr: HloInstruction, space: ScoreSpace,
                        tiling: AttentionTiling, numerics: dict[str, DotNumerics],
                        interpreter: bool = False, band: KeyBand | None = None,
                        reduce_band: KeyBand | None = None) -> tuple[str, tuple[int, ...]]:
    """The kernel file source of the score-space fusion ``fusion_instr`` and its grid
    (``numerics``: each dot's, by name; ``interpreter``: reductions by halving steps;
    ``band``: the (query, key) points its output dots read, whose blocks alone it visits;
    ``reduce_band``: likewise for its row statistics' loops)."""
    return _ScoreKernel(module, fusion_instr, space, tiling, numerics, interpreter,
                        band, reduce_band).render()


__all__ = ["render_score_kernel"]
