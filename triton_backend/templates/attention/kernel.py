"""Render the kernel file of an attention fusion: one program per (batch element, block of
``BLOCK_M`` query rows); keys and values streamed in blocks of ``BLOCK_N``; the scores never
leave registers.

The kernel space has the axes ``[batch (1 lane)], query (BLOCK_M), key (BLOCK_N), head
(BLOCK_D)``, and one :class:`ValueEmitter` renders every value of the fused computation in it
(the same rules as every other kernel: masks, converts, iota masks, combiners).  The first dot
at ``(batch, query, key)`` is the template's own: ``tl.dot`` of the query tile (loaded once,
before any loop) and the key tile at that key block, rounded to the dot's type.  The second
dot takes one of two forms (``attention_form`` in the driver says which, and why):

* **one-pass** (``online_output``), when the normalization is a softmax
  (``tiling.fusion_pass.online_softmax``): FlashAttention's loop over key blocks, with a
  running max and sum and an accumulator rescaled as the max grows; only the masked scores are
  rendered from the HLO.  A mask whose hidden keys form a band (``attention_mask``) bounds the
  loop to the key blocks this program's rows may see, and the blocks inside the band for every
  row run in a loop of their own without the mask's arithmetic;
* **multi-pass** (``output``), for any other normalization the pattern accepts (plain sums,
  several reductions...): each reduction rendered first, in dependency order, by the reduction
  rule's own loop over key blocks (recomputing the score tile and combining it into a per-row
  accumulator with the generated combiner), then a last loop reads those per-row results from
  registers and accumulates ``tl.dot(p, v)``: ``q @ k`` once per reduction and once more.

Lanes past the key extent are dropped (-inf in the max, 0 in the sums and in ``p`` and ``v``);
lanes past the head dim are zeroed in ``q`` and ``k``; lanes past the query extent or the value
dim are masked at the store.
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import NamedTuple

from fusion.errors import UnsupportedOpError
from fusion.ir.hlo_module import HloInstruction, HloModule
from fusion.text.printer import print_computation, print_instruction
from fusion.ir.shape import ArrayShape
from tiling.maps.affine_expr import AffineExpr, DimExpr, const
from tiling.fusion_pass.attention_pattern import AttentionPattern
from tiling.fusion_pass.attention_mask import KeyBand, iota_roles
from tiling.fusion_pass.online_softmax import OnlineSoftmax, online_sum
from tiling.policy.limits import MAX_GRID_YZ
from triton_backend.lowering.host_template import PRELUDE, RUNTIME, kernel_specs
from triton_backend.lowering.emitter.identifiers import IdentifierAllocator, comment_block, sanitize
from triton_backend.lowering.kernel_plan import index_bits_for
from triton_backend.lowering.emitter.triton_types import KERNEL_IMPORTS, storage_dtype
from triton_backend.lowering.rules.reduction_rules import emit_sibling_reductions
from triton_backend.lowering.rules.memory_rules import store_output
from triton_backend.lowering.rules.value_rules import rule_for
from triton_backend.lowering.emitter.value_emitter import Value, ValueEmitter
from triton_backend.templates.attention.tiling import AttentionTiling
from triton_backend.templates.dot.gemm_kernel import DOT_BF16_PRELUDE, dot_operand, precision_keyword

#: log2(e): ``exp(x) = exp2(x * LOG2E)``, one multiply folded into the ``exp2``'s operand.
_LOG2E = 1.4426950408889634


class DotNumerics(NamedTuple):
    """How one dot multiplies (as ``dot_fusion.dot_numerics`` says for the dot template)."""

    operand_dtype: str
    acc_dtype: str
    input_precision: str | None
    result_rounding: str  # template turning the fp32 accumulator into the register value


@dataclass
class _OnlineState:
    """The loop-carried values of the online softmax: the running max ``m`` (and, with
    ``-inf`` read as 0, ``m_used``), the running sum ``l``, the accumulator."""

    m: str
    l: str
    acc: str
    m_used: str


@dataclass
class HookedEmitter(ValueEmitter):
    """The emitter of an attention kernel, forward or backward: ``hooks`` (value name ->
    ``hook(indices)``) render the dots and pinned iotas, memoized like any other value, so a
    score tile is computed once per loop body."""

    hooks: dict = field(default_factory=dict)

    def value(self, name: str, indices: tuple[AffineExpr, ...]) -> Value:
        hook = self.hooks.get(name)
        if hook is None:
            return super().value(name, indices)
        key = (name, tuple(indices))
        if key not in self.memo:
            self.remember(name, indices, hook(tuple(indices)))
        return self.memo[key]


def row_and_batch_programs(em: ValueEmitter, tiles: int, batch: int,
                           hint: str) -> tuple[str, str, tuple[int, int]]:
    """The program ids of a grid of ``tiles`` row blocks times ``batch`` elements: the row
    block's (named ``hint``), the batch element's, and the grid.  Past grid y's limit the
    batch shares grid x."""
    if batch > MAX_GRID_YZ:
        pid = em.bind(f"tl.program_id(0) % {tiles}", hint)
        pid_b = em.bind(f"tl.program_id(0) // {tiles}", "pid_batch")
        return pid, pid_b, (tiles * batch, 1)
    pid = em.bind("tl.program_id(0)", hint)
    pid_b = em.bind("tl.program_id(1)", "pid_batch")
    return pid, pid_b, (tiles, batch)


def _decompose(flat: DimExpr, sizes: tuple[int, ...]) -> list[AffineExpr]:
    """Row-major components of a flattened index (the slowest one without a mod; a dim of
    extent 1 is the constant 0, as the pattern's roles and the indexing maps have it)."""
    parts: list[AffineExpr] = []
    for i, size in enumerate(sizes):
        if size == 1:
            parts.append(const(0))
            continue
        stride = math.prod(sizes[i + 1:])
        q = flat // stride if stride != 1 else flat
        parts.append(q if i == 0 else q % size)
    return parts


def _operand_indices(dot: HloInstruction, side: str, rank: int, batch, free, contracting):
    """Indices of a dot operand from its dimension numbers (any layout or dim order).

    ``batch`` holds the kernel's batch indices: the dot's batch dims, then (a query-head
    group) the lhs free dims before the query dim, which the rhs does not have: grouped-query
    attention reads K and V at the kv head alone, shared by the group.  ``contracting``: the
    index of the contracting dim, or a tuple of one per contracting dim in the dot's order
    (the grouped-query backward's ``dK`` and ``dV`` contract the group with the queries)."""
    out: list = [None] * rank
    batch_dims = dot.attr(f"{side}_batch_dims", ())
    for i, dim in enumerate(batch_dims):
        out[dim] = batch[i]
    contracting_dims = dot.attr(f"{side}_contracting_dims")
    at = contracting if isinstance(contracting, tuple) else (contracting,)
    if len(at) != len(contracting_dims):
        raise UnsupportedOpError(f"{dot.name}'s {side} contracts {len(contracting_dims)} dims, "
                                 f"the kernel indexes {len(at)}", where=dot.name)
    for c, index in zip(contracting_dims, at):
        out[c] = index
    frees = [k for k in range(rank) if out[k] is None]
    own = [*batch[len(batch_dims):], free] if side == "lhs" else [free]
    if len(own) != len(frees):
        raise UnsupportedOpError(f"{dot.name}'s {side} has {len(frees)} free dims, the kernel "
                                 f"indexes {len(own)}", where=dot.name)
    for k, index in zip(frees, own):
        out[k] = index
    return tuple(out)


@dataclass
class _Kernel:
    """The state of one rendering (used once)."""

    module: HloModule
    fusion_instr: HloInstruction
    pattern: AttentionPattern
    tiling: AttentionTiling
    numerics: tuple[DotNumerics, DotNumerics]
    #: For the Triton interpreter: reductions by halving steps (``ValueEmitter.tree_reductions``).
    interpreter: bool = False
    #: The softmax reductions when the normalization is one (``tiling.fusion_pass.online_softmax``):
    #: then one loop over the keys computes everything (``online_output``).
    online: OnlineSoftmax | None = None
    #: The keys the mask lets each query row see (``tiling.fusion_pass.attention_mask``): the
    #: one-pass loop visits only the key blocks that hold some of them.
    band: KeyBand | None = None

    def __post_init__(self) -> None:
        self.comp = self.module.computation(self.fusion_instr.attr("calls"))
        self.dot1 = self.comp.instruction(self.pattern.dot1)
        self.dot2 = self.comp.instruction(self.pattern.dot2)
        self.lead = 1 if self.pattern.batch else 0
        t = self.tiling
        self.qa, self.ka, self.da = self.lead, self.lead + 1, self.lead + 2
        self.blocks = [1] * self.lead + [t.block_m, t.block_n, t.block_d]
        self.names = IdentifierAllocator()
        shapes = [p.shape for p in self.comp.parameters if isinstance(p.shape, ArrayShape)]
        bits = index_bits_for(math.prod(s.dims) for s in (*shapes, self.fusion_instr.shape))
        self.em = HookedEmitter(
            self.module, self.comp, list(self.blocks), self.names,
            {r: (self.ka,) for r in self.pattern.reduces}, reduction_chunk=t.block_n,
            index_bits=bits, rule_for=rule_for, tree_reductions=self.interpreter,
            hooks={self.dot1.name: self.scores,
                   self.dot2.name: self.online_output if self.online else self.output})

    # --- shapes -----------------------------------------------------------------------------
    def _full(self, axes: dict[int, int]) -> tuple[int, ...]:
        return tuple(axes.get(a, 1) for a in range(len(self.blocks)))

    def _tile(self, value: str, axes: tuple[int, int], masks: list[str], dtype: str,
              hint: str, transpose: bool = False) -> str:
        """``value`` (spanning at most ``axes``) as a 2-D ``tl.dot`` operand of ``dtype``,
        padding lanes zeroed (``masks``)."""
        return dot_operand(self.em, value, self._full({a: self.blocks[a] for a in axes}),
                           tuple(self.blocks[a] for a in axes), masks, dtype, hint, transpose)

    def _var(self, e: DimExpr) -> str:
        return self.em.dims[e.index].name

    def _key_mask(self, key: DimExpr) -> list[str]:
        keys = self.pattern.keys
        return [] if keys % self.tiling.block_n == 0 else [f"({self._var(key)} < {keys})"]

    # --- the two dots -----------------------------------------------------------------------
    def query_tile(self) -> str:
        """The first dot's lhs at the program's query rows (loaded once, before any loop)."""
        lhs = self.dot1.operands[0]
        rank = self.comp.instruction(lhs).shape.rank
        at = _operand_indices(self.dot1, "lhs", rank, self.batch, self.q, self.c)
        masks = [] if self.pattern.head_dim == self.tiling.block_d else \
            [f"({self._var(self.c)} < {self.pattern.head_dim})"]
        return self._tile(self._single(lhs, at), (self.qa, self.da), masks,
                          self.numerics[0].operand_dtype, "q")

    def scores(self, indices: tuple[AffineExpr, ...]) -> str:
        """The first dot at ``(batch, query, key)``: ``q_tile @ k_tile^T``, rounded."""
        nb = len(self.pattern.batch)
        key = indices[nb + 1]
        if tuple(indices[:nb]) != tuple(self.batch) or indices[nb] != self.q or \
                not isinstance(key, DimExpr) or self.em.dims[key.index].axis != self.ka:
            raise UnsupportedOpError(f"the scores {self.dot1.name} are read at {indices}, not "
                                     "at (batch, query rows, key block)", where=self.dot1.name)
        rhs = self.dot1.operands[1]
        rank = self.comp.instruction(rhs).shape.rank
        at = _operand_indices(self.dot1, "rhs", rank, self.batch, key, self.c)
        masks = [] if self.pattern.head_dim == self.tiling.block_d else \
            [f"({self._var(self.c)} < {self.pattern.head_dim})"]
        numerics = self.numerics[0]
        k_tile = self._tile(self._single(rhs, at), (self.ka, self.da), masks,
                            numerics.operand_dtype, "k", transpose=True)
        precision = precision_keyword(numerics.input_precision)
        em = self.em
        s = em.bind(f"tl.dot({self.q_tile}, {k_tile}{precision}, "
                    f"out_dtype={numerics.acc_dtype})", "qk")
        scores_shape = self._full({self.qa: self.blocks[self.qa], self.ka: self.blocks[self.ka]})
        s = em.bind(f"tl.reshape({s}, {scores_shape})", "qk")
        return em.bind(numerics.result_rounding.format(acc=s), self.dot1.name)

    def output(self, indices: tuple[AffineExpr, ...]) -> str:
        """The second dot at the output tile: the loop over key blocks accumulating p @ v."""
        if tuple(indices) != self.out_indices:
            raise UnsupportedOpError(f"{self.dot2.name} is read at {indices}, not at its own "
                                     "index (only elementwise epilogues are fused)",
                                     where=self.dot2.name)
        em, t, numerics = self.em, self.tiling, self.numerics[1]
        acc = em.bind(f"tl.zeros(({t.block_m}, {t.block_d}), dtype={numerics.acc_dtype})", "acc")
        start = self.names.fresh("key_start")
        keys = self.pattern.keys
        with em.block(f"for {start} in range(0, {keys}, {t.block_n}):"):
            key = em.new_dim("key", self.ka, keys, start, -(-keys // t.block_n) * t.block_n - 1)
            lhs, rhs = self.dot2.operands
            p_at = _operand_indices(self.dot2, "lhs", self.comp.instruction(lhs).shape.rank,
                                    self.batch, self.q, key)
            v_at = _operand_indices(self.dot2, "rhs", self.comp.instruction(rhs).shape.rank,
                                    self.batch, self.dv, key)
            p = self._tile(self._single(lhs, p_at), (self.qa, self.ka), self._key_mask(key),
                           numerics.operand_dtype, "p")
            v = self._tile(self._single(rhs, v_at), (self.ka, self.da), self._key_mask(key),
                           numerics.operand_dtype, "v")
            precision = precision_keyword(numerics.input_precision)
            em.emit(f"{acc} = tl.dot({p}, {v}, {acc}{precision}, "
                    f"out_dtype={numerics.acc_dtype})")
        out_shape = self._full({self.qa: t.block_m, self.da: t.block_d})
        view = em.bind(f"tl.reshape({acc}, {out_shape})", "acc")
        return em.bind(numerics.result_rounding.format(acc=view), self.dot2.name)

    def online_output(self, indices: tuple[AffineExpr, ...]) -> str:
        """The second dot at the output tile, in one pass over key blocks (online softmax).

        ``online_softmax`` checked what the fusion computes between its reductions: the sum's
        operand is ``exp(a - m)`` and the second dot's lhs ``exp(a - m) / sum``, ``a`` the
        max's operand (the masked scores).  So per block only ``a`` is rendered from the HLO;
        the rest is FlashAttention's loop (``_online_loop``).  After the loop the output is the
        accumulator over the sum.  With a mask band whose inside computes its scores alike
        (``KeyBand.unmasked_at``), the blocks inside the band for every row of the program run
        in a loop of their own, rendered at that point's coordinates, where the mask's
        arithmetic folds away; the blocks before and after it keep the mask.
        """
        if tuple(indices) != self.out_indices:
            raise UnsupportedOpError(f"{self.dot2.name} is read at {indices}, not at its own "
                                     "index (only elementwise epilogues are fused)",
                                     where=self.dot2.name)
        em, t, numerics = self.em, self.tiling, self.numerics[1]
        top = self.comp.instruction(self.online.max_reduce)
        total = self.comp.instruction(self.online.sum_reduce)
        bm = t.block_m
        init = em.scalar_value(top.operands[1])
        state = _OnlineState(
            em.bind(f"tl.full(({bm},), {init}, tl.float32)", "m"),
            em.bind(f"tl.zeros(({bm},), tl.float32)", "l"),
            em.bind(f"tl.zeros(({bm}, {t.block_d}), dtype={numerics.acc_dtype})", "acc"),
            self.names.fresh("m_used"))
        em.emit(f"{state.m_used} = tl.where({state.m} == -float('inf'), 0.0, {state.m})")
        first, end = self._key_blocks()
        # A second copy of the loop body costs registers; worth it where the dots are cheap
        # (tensor cores), not for an IEEE f32 dot on the FMA units (which then spilled).
        if self.band is not None and self.band.unmasked_at is not None \
                and self.numerics[0].operand_dtype not in ("tl.float32", "tl.float64"):
            start, stop = self._inside_blocks(first, end)
            self._online_loop(state, first, start)
            em.emit("# key blocks inside the mask's band for every row: no mask arithmetic")
            self._online_loop(state, start, stop, unmasked=True)
            self._online_loop(state, stop, end)
        else:
            self._online_loop(state, first, end)
        row = em.shape_of(self._row(top.name))
        self._set(top.name, self._row(top.name), em.bind(f"tl.reshape({state.m}, {row})", top.name))
        self._set(total.name, self._row(total.name),
                  em.bind(f"tl.reshape({state.l}, {row})", total.name))
        out = em.bind(f"{state.acc} / {state.l}[:, None]", "acc")
        out_shape = self._full({self.qa: bm, self.da: t.block_d})
        view = em.bind(f"tl.reshape({out}, {out_shape})", "acc")
        return em.bind(numerics.result_rounding.format(acc=view), self.dot2.name)

    def _online_loop(self, state: "_OnlineState", first: str, end: str,
                     unmasked: bool = False) -> None:
        """One loop of the online softmax over the key blocks ``[first, end)``.

        Per block: the running max grows by the block's ``tl.max`` of ``a``; the running sum
        and the accumulator are rescaled by ``alpha = exp(m_before - m)``; ``e = exp(a - m)``
        (one ``exp2`` of ``(a - m) * log2(e)``) is summed and, converted to the dot's
        operand type, multiplied into the accumulator.  A max still at ``-inf`` (no finite
        score yet) is read as 0, so the scores seen so far, all ``-inf``, add ``exp(-inf) =
        0`` and not NaN, and ``alpha`` is at most 1 (the rescaled values are still 0 then).
        NaN scores make the sum NaN, hence the whole row, as in the HLO.  ``unmasked``: the
        scores are rendered with every ``iota`` at ``KeyBand.unmasked_at``'s coordinates.
        """
        em, t, numerics = self.em, self.tiling, self.numerics[1]
        bm, bn, keys = t.block_m, t.block_n, self.pattern.keys
        start = self.names.fresh("key_start")
        with em.block(f"for {start} in range({first}, {end}, {bn}):"):
            key = em.new_dim("key", self.ka, keys, start, -(-keys // bn) * bn - 1)
            score = self.comp.instruction(self.online.max_reduce).operands[0]
            at = tuple(self._index_of(r, key) for r in self.pattern.roles[score])
            with self._iotas_at(self.band.unmasked_at if unmasked else None):
                a = self._single(score, at)
            shape = self._full({self.qa: bm, self.ka: bn})
            a = em.bind(f"tl.reshape(tl.broadcast_to({a}, {shape}), ({bm}, {bn}))", "a")
            if keys % bn:
                valid = em.bind(f"tl.reshape({self._var(key)} < {keys}, (1, {bn}))", "key_valid")
                a = em.bind(f"tl.where({valid}, {a}, -float('inf'))", "a")
            m_new = em.bind(f"tl.maximum({state.m}, tl.max({a}, 1))", "m_new")
            # a - m before the log2(e) factor: a masked score of -0.7 * f32 max (JAX's), times
            # log2(e), overflows to -inf, and a block of nothing else would give inf - inf
            safe = em.bind(f"tl.where({m_new} == -float('inf'), 0.0, {m_new})", "m_safe")
            alpha = em.bind(f"tl.math.exp2(tl.minimum({state.m_used} - {safe}, 0.0) * {_LOG2E})",
                            "alpha")
            e = em.bind(f"tl.math.exp2(({a} - {safe}[:, None]) * {_LOG2E})", "e")
            em.emit(f"{state.l} = {state.l} * {alpha} + tl.sum({e}, 1)")
            rhs = self.dot2.operands[1]
            v_at = _operand_indices(self.dot2, "rhs", self.comp.instruction(rhs).shape.rank,
                                    self.batch, self.dv, key)
            p = em.bind(f"{e}.to({numerics.operand_dtype})", "p")
            v = self._tile(self._single(rhs, v_at), (self.ka, self.da), self._key_mask(key),
                           numerics.operand_dtype, "v")
            precision = precision_keyword(numerics.input_precision)
            em.emit(f"{state.acc} = tl.dot({p}, {v}, {state.acc} * {alpha}[:, None]{precision}, "
                    f"out_dtype={numerics.acc_dtype})")
            em.emit(f"{state.m} = {m_new}")
            em.emit(f"{state.m_used} = {safe}")

    @contextmanager
    def _iotas_at(self, point: tuple[int, int] | None):
        """While rendering: every ``iota`` of the computation at ``point``'s (query, key)
        coordinates, a constant (nothing changes for ``None``)."""
        if point is None:
            yield
            return
        hooks, roles = self.em.hooks, iota_roles(self.comp, self.pattern)
        for name, role in roles.items():
            value = {"q": point[0], "k": point[1]}.get(role, 0)
            hooks[name] = partial(self._constant, name, value)
        try:
            yield
        finally:
            for name in roles:
                hooks.pop(name, None)

    def _constant(self, name: str, value: int, indices: tuple[AffineExpr, ...]) -> str:
        dtype = storage_dtype(self.comp.instruction(name).shape.element_type)
        return self.em.bind(f"tl.full({self.em.shape_of(indices)}, {value}, {dtype})", name)

    def _inside_blocks(self, first: str, end: str) -> tuple[str, str]:
        """In the kernel: ``KeyBand.inside_range`` of this program's rows."""
        band, t, em = self.band, self.tiling, self.em
        q0, bn = f"{self.pid_m} * {t.block_m}", t.block_n
        start = first if band.low is None else f"tl.maximum({first}, {q0} + {t.block_m - 1 + band.low})"
        start = em.bind(f"({start} + {bn - 1}) // {bn} * {bn}", "inside_start")
        stop = end if band.high is None else f"tl.maximum({q0} + {band.high + 1}, 0) // {bn} * {bn}"
        last = f"({end} + {bn - 1}) // {bn} * {bn}"
        stop = em.bind(f"tl.maximum({start}, tl.minimum({stop}, {last}))", "inside_stop")
        return start, stop

    def _key_blocks(self) -> tuple[str, str]:
        """The first and the end key of the blocks this program's query rows may see (the
        mask's band; every key without one)."""
        band, t, keys = self.band, self.tiling, self.pattern.keys
        if band is None:
            return "0", str(keys)
        em, q0 = self.em, f"{self.pid_m} * {t.block_m}"
        first, end = "0", str(keys)
        if band.low is not None:
            first = em.bind(f"tl.minimum(tl.maximum({q0} + {band.low}, 0), {keys}) "
                            f"// {t.block_n} * {t.block_n}", "first_key")
        if band.high is not None:
            end = em.bind(f"tl.minimum(tl.maximum({q0} + {t.block_m + band.high}, 0), {keys})",
                          "end_key")
        em.emit("# key blocks the mask hides from every row of this program are not visited")
        return first, end

    def _set(self, name: str, indices: tuple[AffineExpr, ...], value: str) -> None:
        """Make ``value`` the emitter's answer for ``name`` at ``indices`` (in this block)."""
        self.em.remember(name, indices, value)

    def _single(self, name: str, indices) -> str:
        value = self.em.value(name, indices)
        if not isinstance(value, str):
            raise UnsupportedOpError(f"tuple-shaped dot operand {name}", where=name)
        return value

    # --- the kernel -------------------------------------------------------------------------
    def render(self) -> tuple[str, tuple[int, ...]]:
        em, t, pattern = self.em, self.tiling, self.pattern
        for p in self.comp.parameters:  # parameter pointers first, in parameter order
            em.pointer_for(p)
        out_shape = self.fusion_instr.shape
        if not isinstance(out_shape, ArrayShape):
            raise UnsupportedOpError("an attention fusion has one array output",
                                     where=self.fusion_instr.name)
        out_pointer = self.names.fresh("out0_ptr")
        batch = math.prod(pattern.batch)
        tiles_m = -(-pattern.queries // t.block_m)
        pid_m, pid_b, grid = row_and_batch_programs(em, tiles_m, batch, "pid_m")
        self.pid_m = pid_m
        self.batch: list[AffineExpr] = []
        if self.lead:
            # The batch element is a dim variable of one lane, so loads know its bounds.
            flat = em.new_dim("batch", 0, batch, pid_b, batch - 1)
            self.batch = _decompose(flat, pattern.batch)
        self.q = em.new_dim("q", self.qa, pattern.queries, f"{pid_m} * {t.block_m}",
                            tiles_m * t.block_m - 1)
        self.c = em.new_dim("c", self.da, pattern.head_dim)
        self.dv = em.new_dim("dv", self.da, pattern.value_dim)
        self.out_indices = tuple(self.batch) + (self.q, self.dv)
        self.q_tile = self.query_tile()
        if self.online is None:
            em.emit("# the normalization's reductions by dependency level, each level one "
                    "loop over the keys")
            emit_sibling_reductions(
                em, [(name, self._row(name)) for name in pattern.reduces],
                online=lambda top, total: online_sum(self.module, self.comp, top, total))
            em.emit("# the output: p @ v accumulated over key blocks, then the epilogue")
        else:
            em.emit("# one pass over the keys: a running max and sum (online softmax), the "
                    "output rescaled as the max grows")
        value = em.value(pattern.tail.value, self.out_indices)
        if not isinstance(value, str):
            raise UnsupportedOpError("tuple-shaped attention root", where=self.comp.root_name)
        q, dv = self._var(self.q), self._var(self.dv)
        mask = em.bind(f"({q} < {pattern.queries}) & ({dv} < {pattern.value_dim})", "out_mask")
        zero = em.bind(f"{q} * 0 + {dv} * 0", "tile_zero")
        if pattern.tail.ops:
            em.emit(f"# stored where the root {', '.join(pattern.tail.ops)} puts each element: "
                    f"{pattern.tail.to_root}")
        store_output(em, value, out_shape, out_pointer, pattern.tail.at_root(self.out_indices),
                     mask, zero, "output 0", self.out_indices)
        return self._source(out_pointer, out_shape, grid), grid

    def _row(self, name: str) -> tuple[AffineExpr, ...]:
        """The indices of a per-row value (a reduction of the normalization) at this program's
        rows."""
        return tuple(self._index_of(r) for r in self.pattern.roles[name])

    def _index_of(self, role, key: DimExpr | None = None) -> AffineExpr:
        if isinstance(role, tuple):
            return self.batch[role[1]]
        if role == "q":
            return self.q
        if role == "k" and key is not None:
            return key
        if role is None:
            return const(0)
        raise UnsupportedOpError(f"a reduction's result varies along {role!r}",
                                 where=self.fusion_instr.name)

    def _source(self, out_pointer: str, out_shape: ArrayShape, grid) -> str:
        em, t, pattern = self.em, self.tiling, self.pattern
        kernel_name = self.names.fresh(f"{sanitize(self.fusion_instr.name)}_kernel")
        parameters = self.comp.parameters
        constants = [b for b in em.buffers.values() if b.parameter_number is None]
        signature = [em.buffers[p.name].pointer for p in parameters]
        signature += [c.pointer for c in constants] + [out_pointer]
        header = comment_block(
            f"Generated by triton_backend.templates.attention.kernel for fusion "
            f"{self.fusion_instr.name}.\n{print_instruction(self.fusion_instr)}\n\n"
            f"{print_computation(self.comp)}\n\n"
            f"scores {pattern.dot1}, output {pattern.dot2}, batch {list(pattern.batch)}, "
            f"{pattern.queries} queries, {pattern.keys} keys, head dim {pattern.head_dim}, "
            f"value dim {pattern.value_dim}, reductions {list(pattern.reduces)}\n"
            f"tiling {t}, grid {grid}")
        kernel = (f"@triton.jit\ndef {kernel_name}({', '.join(signature)}):\n"
                  + "\n".join(em.lines) + "\n")
        combiners = "\n\n".join(em.helper_functions.values())
        specs = kernel_specs(kernel_name, grid, parameters, [c.instruction for c in constants],
                             (out_shape,), (t.num_warps, t.num_stages))
        return (header + PRELUDE + KERNEL_IMPORTS + DOT_BF16_PRELUDE + "\n\n"
                + (combiners + "\n\n" if combiners else "") + kernel + "\n\n" + specs + RUNTIME)


def render_attention_kernel(module: HloModule, fusion_instr: HloInstruction,
                            pattern: AttentionPattern, tiling: AttentionTiling,
                            numerics: tuple[DotNumerics, DotNumerics],
                            interpreter: bool = False, online: OnlineSoftmax | None = None,
                            band: KeyBand | None = None) -> tuple[str, tuple[int, ...]]:
    """The kernel file source of the attention fusion ``fusion_instr``, and its grid
    (``interpreter``: shaped for the Triton interpreter, reductions by halving steps;
    ``online``: the softmax reductions, for the one-pass form; ``band``: the keys its mask
    lets each query see, whose blocks alone the one-pass form visits)."""
    return _Kernel(module, fusion_instr, pattern, tiling, numerics, interpreter,
                   online, band).render()


__all__ = ["DotNumerics", "HookedEmitter", "render_attention_kernel"]
