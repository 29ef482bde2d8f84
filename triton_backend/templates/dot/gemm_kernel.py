"""What a GEMM-shaped kernel is made of, once for the dot and the convolution templates.

Both templates render one ``BLOCK_M x BLOCK_N`` output tile per program of a ``batch`` x
(M x K) @ (K x N) problem (a convolution's batch is its groups): the same program ids (the
batch on grid y, or folded into grid x past its 65535 blocks) with grouped tile ordering, an
accumulator that ``tl.dot`` fills in a loop over K from two operand tiles, an epilogue that
reads the hero (the dot or the convolution) as that accumulator, masked stores of the outputs,
and the same kernel file around it.  With split-K (``tiling.split_k > 1``) each program adds
one K slice of its tile, and the last program of a tile to finish adds the slices' partial
sums in slice order (``device_lib.ordered_sums``) and runs the epilogue on the whole sum; the
partial sums and the arrival counters are the file's ``SCRATCH_SPECS``.  Only the operand and output indices differ (a dot's
dimension numbers, a convolution's window): those stay in each template (``dot.kernel``,
``conv.kernel``), and :func:`gemm_prelude` and :class:`GemmKernel` here render the rest.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from fusion.errors import UnsupportedOpError
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.ir.shape import ArrayShape
from tiling.fusion_pass.layout_tail import layout_tail
from tiling.maps.affine_expr import AffineExpr, DimExpr
from triton_backend.lowering.emitter.addressing import buffer_addressing
from triton_backend.lowering.emitter.identifiers import IdentifierAllocator, sanitize
from triton_backend.lowering.emitter.triton_types import KERNEL_IMPORTS, render_store_narrow
from triton_backend.lowering.emitter.value_emitter import Value, ValueEmitter
from triton_backend.lowering.host_template import PRELUDE, RUNTIME, kernel_specs
from triton_backend.lowering.kernel_file import output_shapes
from triton_backend.lowering.rules.split_reduction import ORDERED_SUMS_IMPORT, scratch_specs_line
from triton_backend.lowering.rules.value_rules import rule_for
from triton_backend.templates.dot.tiling import (DotProblem, DotTiling, batch_on_grid_x, grid_size,
                                                 k_slice)

#: bf16 tl.dot in the Triton 3.9 interpreter multiplies the raw uint16 bits; there the
#: (exact) widened operands are multiplied in fp32 instead, which is what the tensor cores
#: compute for bf16 (exact products, fp32 accumulation).
SPLIT_K_IMPORT = ORDERED_SUMS_IMPORT

DOT_BF16_PRELUDE = (
    "\n# bf16 operands go to the tensor cores as bf16; the interpreter's bf16 tl.dot is broken,\n"
    "# so there they are multiplied as (exactly widened) fp32.\n"
    "DOT_BF16 = tl.constexpr(tl.float32 if os.environ.get('TRITON_INTERPRET', '') == '1' "
    "else tl.bfloat16)\n"
)


#: The dtype ``tl.dot`` multiplies each HLO operand type in when both operands have it (f64,
#: which takes an f64 result, aside).
TL_DOT_OPERAND_DTYPES = {"f32": "tl.float32", "f16": "tl.float16", "bf16": "DOT_BF16",
                         "s8": "tl.int8", "f8e4m3fn": "xla_math.DOT_F8E4M3FN",
                         "f8e5m2": "xla_math.DOT_F8E5M2"}

#: The operand dtypes ``tl.dot`` multiplies (the tensor cores, or f32's and f64's FMA loops);
#: a dot of others sums its products itself (``GemmKernel.k_loop``).
TL_DOT_OPERANDS = frozenset(TL_DOT_OPERAND_DTYPES.values()) | {"tl.float64"}

#: The ``xla_math`` constant a kernel names for each bf16 split ``input_precision``
#: (``triton_backend.device_lib.dot_precision``: what this Triton runs it as).
SPLIT_PRECISION_CONSTANTS = {"bf16x3": "BF16X3_PRECISION", "bf16x6": "BF16X6_PRECISION"}


def precision_keyword(input_precision: str | None) -> str:
    """The ``tl.dot`` keyword argument for ``input_precision`` (none for None); a bf16 split
    names the ``xla_math`` constant that says how this Triton runs it.

    >>> precision_keyword("ieee"), precision_keyword("bf16x3")
    (", input_precision='ieee'", ', input_precision=xla_math.BF16X3_PRECISION')
    """
    if not input_precision:
        return ""
    constant = SPLIT_PRECISION_CONSTANTS.get(input_precision)
    return f", input_precision={'xla_math.' + constant if constant else repr(input_precision)}"


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


@dataclass(frozen=True)
class GemmKernel:
    """A GEMM-shaped kernel being rendered: the fusion, its problem and tiling, what its
    emitters share (identifiers, buffers, helper functions), and from :func:`gemm_prelude` its
    output pointers, program ids, accumulator, K loop variable and the statements before the
    K loop (``top``)."""

    module: HloModule
    computation: HloComputation
    fusion_instr: HloInstruction
    tiling: DotTiling
    problem: DotProblem
    outputs: tuple[ArrayShape, ...]
    names: IdentifierAllocator
    kernel_name: str
    buffers: dict = field(default_factory=dict)
    helpers: dict = field(default_factory=dict)
    helper_names: dict = field(default_factory=dict)
    out_pointers: tuple[str, ...] = ()
    acc_dtype: str = ""
    pid: str = ""
    pid_batch: str = ""
    pid_m: str = ""
    pid_n: str = ""
    acc: str = ""
    k0: str = ""
    top: tuple[str, ...] = ()
    #: Split-K: the program's K slice, and the pointers of the partial sums and the counters.
    pid_k: str = ""
    scratch_pointers: tuple[str, ...] = ()

    @property
    def tiles_m(self) -> int:
        return math.ceil(self.problem.m / self.tiling.block_m)

    @property
    def tiles_n(self) -> int:
        return math.ceil(self.problem.n / self.tiling.block_n)

    @property
    def split_k(self) -> int:
        return self.tiling.split_k

    @property
    def k_slice(self) -> int:
        """The K extent each program adds (all of K, in whole steps, without split-K)."""
        return k_slice(self.tiling, self.problem)

    @property
    def k_ragged(self) -> bool:
        """Whether the last K tile has lanes past K (they must add nothing)."""
        if self.split_k == 1:
            return self.problem.k % self.tiling.block_k != 0
        return self.split_k * self.k_slice != self.problem.k

    @property
    def grid(self) -> tuple[int, int]:
        return grid_size(self.tiling, self.problem)

    def emitter(self, cls: type[ValueEmitter], blocks, indent: str, **extra) -> ValueEmitter:
        """A new emitter of the kernel (``cls``, axes ``blocks``), sharing its identifiers."""
        return cls(self.module, self.computation, list(blocks), self.names, {},
                   buffers=self.buffers, helper_functions=self.helpers,
                   helper_names=self.helper_names, indent=indent, rule_for=rule_for, **extra)

    def lhs_emitter(self, lead: int) -> ValueEmitter:
        """The lhs tile's emitter, ``[BLOCK_M, BLOCK_K]`` after ``lead`` one-lane axes."""
        return self.emitter(ValueEmitter, [1] * lead + [self.tiling.block_m, self.tiling.block_k],
                            "        ")

    def rhs_emitter(self, lead: int) -> ValueEmitter:
        """The rhs tile's emitter, ``[BLOCK_K, BLOCK_N]`` after ``lead`` one-lane axes."""
        return self.emitter(ValueEmitter, [1] * lead + [self.tiling.block_k, self.tiling.block_n],
                            "        ")

    def epilogue_emitter(self, lead: int, hero_name: str, hero_kind: str) -> AccumulatorEpilogue:
        """The output tile's emitter, ``[BLOCK_M, BLOCK_N]``, reading the hero as the
        accumulator."""
        return self.emitter(AccumulatorEpilogue,
                            [1] * lead + [self.tiling.block_m, self.tiling.block_n], "    ",
                            hero_name=hero_name, hero_kind=hero_kind)

    def m_dim(self, em: ValueEmitter, axis: int) -> DimExpr:
        """The M index of the program's tile on ``axis`` of ``em``."""
        bm = self.tiling.block_m
        return em.new_dim("m", axis, self.problem.m, f"{self.pid_m} * {bm}", self.tiles_m * bm - 1)

    def n_dim(self, em: ValueEmitter, axis: int) -> DimExpr:
        """The N index of the program's tile on ``axis`` of ``em``."""
        bn = self.tiling.block_n
        return em.new_dim("n", axis, self.problem.n, f"{self.pid_n} * {bn}", self.tiles_n * bn - 1)

    def k_dim(self, em: ValueEmitter, axis: int) -> DimExpr:
        """The K index of the loop's step on ``axis`` of ``em``."""
        k, bk = self.problem.k, self.tiling.block_k
        return em.new_dim("k", axis, k, self.k0, self.split_k * self.k_slice - 1 if k else bk - 1)

    def k_loop(self, lhs: ValueEmitter, rhs: ValueEmitter, a: str, b: str,
               input_precision: str | None, acc_dtype: str, operand_dtype: str) -> tuple[str, ...]:
        """The K loop: both operand tiles rendered, then one ``tl.dot`` into the accumulator
        (or, for operands ``tl.dot`` does not take, their products summed over K)."""
        acc = self.acc
        if operand_dtype in TL_DOT_OPERANDS:
            step = f"{acc} = tl.dot({a}, {b}, {acc}{precision_keyword(input_precision)}, " \
                   f"out_dtype={acc_dtype})"
        else:  # e.g. s32: on the CUDA cores, wrapping as the result type does
            step = f"{acc} += tl.sum({a}[:, :, None] * {b}[None, :, :], axis=1)"
        bounds = f"0, {self.problem.k}"
        if self.split_k > 1:  # this program's slice: K_SLICE = steps / split_k rounded up
            start = f"{self.pid_k} * {self.k_slice}"
            bounds = f"{start}, {start} + {self.k_slice}"
        return (f"for {self.k0} in range({bounds}, {self.tiling.block_k}):",
                *lhs.lines, *rhs.lines, f"        {step}")

    def store_outputs(self, epi: AccumulatorEpilogue, lead: int, m_dim: DimExpr,
                      n_dim: DimExpr, out_indices: tuple, rounding: str,
                      hero_dims: tuple[int, ...]) -> None:
        """Render the fusion root at the output tile (the hero read as the accumulator,
        rounded by ``rounding``) and store every output, masked past M and N.  A root that
        only rearranges a value (its ``layout_tail``: a transpose or reshape of the result)
        is that value stored at the rearranged indices."""
        # The root is rendered at the hero's output indices, so every output (or the value
        # a tail rearranges) must have the hero's dims (checked first: a root of another
        # rank, a broadcast of the dot, would otherwise be lowered at indices of the wrong
        # rank).
        tail = layout_tail(self.computation)
        shapes = [self.computation.instruction(tail.value).shape] if tail.ops else self.outputs
        for i, shape in enumerate(shapes):
            if tuple(shape.dims) != tuple(hero_dims):
                raise UnsupportedOpError(f"output {i} {list(shape.dims)} is not shaped like the "
                                         f"{epi.hero_kind} {list(hero_dims)}",
                                         where=self.fusion_instr.name)
        epi.hero_indices = out_indices
        bm, bn = self.tiling.block_m, self.tiling.block_n
        acc_view = f"tl.reshape({self.acc}, (1, {bm}, {bn}))" if lead else self.acc
        epi.hero_value = epi.bind(rounding.format(acc=acc_view), epi.hero_name)
        root_value = epi.value(tail.value, out_indices)
        store_indices = tail.at_root(out_indices)
        values = root_value if isinstance(root_value, tuple) else (root_value,)
        if len(values) != len(self.outputs):
            raise UnsupportedOpError(f"root produces {len(values)} values for "
                                     f"{len(self.outputs)} outputs",
                                     where=self.computation.root_name)
        mn = [epi.dims[m_dim.index].name, epi.dims[n_dim.index].name]
        mask = epi.bind(f"({mn[0]} < {self.problem.m}) & ({mn[1]} < {self.problem.n})",
                        "out_mask")
        zero = epi.bind(f"{mn[0]} * 0 + {mn[1]} * 0", "tile_zero")
        for i, (v, shape, pointer) in enumerate(zip(values, self.outputs, self.out_pointers)):
            offset = epi.index_text(buffer_addressing(shape, f"output {i}").offset(store_indices))
            epi.emit(f"tl.store({pointer} + {offset} + {zero}, "
                     f"{render_store_narrow(v, shape.element_type)}, mask={mask})")

    def source(self, header: str, loop: tuple[str, ...], epi: ValueEmitter) -> str:
        """The kernel file: ``header``, the preludes, helper functions, the kernel (``top``,
        the K loop, the epilogue) and its launch specs."""
        parameters = self.computation.parameters
        constants = [buf for buf in self.buffers.values() if buf.parameter_number is None]
        signature = [self.buffers[p.name].pointer for p in parameters]
        signature += [c.pointer for c in constants] + list(self.out_pointers)
        signature += list(self.scratch_pointers)
        body = ["    " + line for line in self.top] + ["    " + loop[0], *loop[1:]]
        body += self._split_k_sum() + ["    " + line for line in epi.lines] \
            if self.split_k > 1 else epi.lines
        kernel = (f"@triton.jit\ndef {self.kernel_name}({', '.join(signature)}):\n"
                  + "\n".join(body) + "\n")
        combiners = "\n\n".join(self.helpers.values())
        specs = kernel_specs(self.kernel_name, self.grid, parameters,
                             [c.instruction for c in constants], self.outputs,
                             (self.tiling.num_warps, self.tiling.num_stages))
        imports = KERNEL_IMPORTS + (SPLIT_K_IMPORT if self.split_k > 1 else "")
        return (header + PRELUDE + imports + DOT_BF16_PRELUDE + "\n\n"
                + (combiners + "\n\n" if combiners else "") + kernel + "\n\n" + specs
                + self._scratch_specs() + RUNTIME)

    def _split_k_sum(self) -> list[str]:
        """After the K loop of a split-K kernel: the partial tile joins the others, and the
        program that adds the last one goes on to the epilogue with their ordered sum."""
        names, bm, bn = self.names, self.tiling.block_m, self.tiling.block_n
        tile, offsets, last = names.fresh("tile"), names.fresh("tile_offsets"), names.fresh("last")
        partials, arrivals = self.scratch_pointers
        return [f"    # split-K: this program's partial tile joins the other {self.split_k - 1}; the "
                "tile's last program to finish",
                "    # adds them in slice order (deterministic) and runs the epilogue once",
                f"    {tile} = {self.pid_batch} * {self.tiles_m * self.tiles_n} + {self.pid}",
                f"    {offsets} = tl.arange(0, {bm})[:, None] * {bn} + tl.arange(0, {bn})[None, :]",
                f"    {last}, {self.acc} = ordered_sums.sum_across_programs({partials}, {arrivals}, "
                f"{tile}, {self.pid_k}, {self.split_k}, {self.acc}, {offsets}, {bm * bn})",
                f"    if {last}:"]

    def _scratch_specs(self) -> str:
        """``SCRATCH_SPECS`` of a split-K file: the partial tiles (the accumulator's type, one
        per slice of every tile) and one zeroed arrival counter per tile."""
        if self.split_k == 1:
            return ""
        tiles = self.tiles_m * self.tiles_n * self.problem.batch
        partials = tiles * self.split_k * self.tiling.block_m * self.tiling.block_n
        dtype = {"tl.int32": "torch.int32", "tl.float64": "torch.float64"}.get(self.acc_dtype,
                                                                             "torch.float32")
        return scratch_specs_line([("split_k_partials", dtype, partials)],
                                  ("split_k_arrivals", tiles))


def gemm_prelude(module: HloModule, fusion_instr: HloInstruction, tiling: DotTiling,
                 problem: DotProblem, acc_dtype: str, batch_id: str,
                 group_id: str) -> GemmKernel:
    """Start the kernel of a GEMM-shaped fusion: the parameter and output pointers, the
    program ids (the batch one named ``batch_id``) with grouped ordering (``GROUP_M`` rows of
    tiles, the group named ``group_id``) and the zeroed accumulator."""
    names = IdentifierAllocator()
    kernel_name = names.fresh(f"{sanitize(fusion_instr.name)}_kernel")
    kernel = GemmKernel(module, module.computation(fusion_instr.attr("calls")), fusion_instr,
                        tiling, problem, output_shapes(fusion_instr), names, kernel_name)
    for p in kernel.computation.parameters:  # parameter pointers first, in parameter order
        kernel.emitter(ValueEmitter, [1], "    ").pointer_for(p)
    out_pointers = tuple(names.fresh(f"out{i}_ptr") for i in range(len(kernel.outputs)))
    split = tiling.split_k
    pid, pid_batch = names.fresh("pid"), names.fresh(batch_id)
    program, pid_k = (names.fresh("program"), names.fresh("pid_k")) if split > 1 else (pid, "")
    group, first_m, group_rows = names.fresh(group_id), names.fresh("first_m"), names.fresh("group_rows")
    pid_m, pid_n = names.fresh("pid_m"), names.fresh("pid_n")
    tiles_m, tiles = kernel.tiles_m, kernel.tiles_m * kernel.tiles_n
    in_group = tiling.group_m * kernel.tiles_n
    if batch_on_grid_x(problem):
        # Past grid y's 65535 blocks the batch shares grid x: program = batch * tiles + tile.
        top = [f"{pid_batch} = tl.program_id(0) // {tiles * split}",
               f"{program} = tl.program_id(0) % {tiles * split}"]
    else:
        top = [f"{program} = tl.program_id(0)", f"{pid_batch} = tl.program_id(1)"]
    if split > 1:
        top += [f"# split-K: programs s * {tiles} .. (s + 1) * {tiles} - 1 add K slice s of "
                "every tile",
                f"{pid_k} = {program} // {tiles}", f"{pid} = {program} % {tiles}"]
    top += ["# grouped ordering: GROUP_M rows of tiles walk the N tiles together (L2 reuse)",
            f"{group} = {pid} // {in_group}",
            f"{first_m} = {group} * {tiling.group_m}",
            f"{group_rows} = tl.minimum({tiles_m} - {first_m}, {tiling.group_m})",
            f"{pid_m} = {first_m} + ({pid} % {in_group}) % {group_rows}",
            f"{pid_n} = ({pid} % {in_group}) // {group_rows}"]
    acc, k0 = names.fresh("acc"), names.fresh("k0")
    top.append(f"{acc} = tl.zeros(({tiling.block_m}, {tiling.block_n}), dtype={acc_dtype})")
    scratch = (names.fresh("split_k_partials_ptr"), names.fresh("split_k_arrivals_ptr")) \
        if split > 1 else ()
    return replace(kernel, out_pointers=out_pointers, acc_dtype=acc_dtype, pid=pid,
                   pid_batch=pid_batch, pid_m=pid_m, pid_n=pid_n, acc=acc, k0=k0, top=tuple(top),
                   pid_k=pid_k, scratch_pointers=scratch)


def operand_tile(em: ValueEmitter, name: str, indices, shape, valid: list[str], dtype: str,
                 hero_kind: str) -> str:
    """Operand ``name`` of the hero read at ``indices`` as a 2-D ``shape`` tile of ``dtype``,
    zero where a ``valid`` check fails."""
    value = em.value(name, indices)
    if not isinstance(value, str):
        raise UnsupportedOpError(f"tuple-shaped {hero_kind} operand {name}", where=name)
    # Lanes past K (and a convolution's padding and the holes of lhs dilation) must add
    # nothing, whatever the operand's prologue computed there.
    return dot_operand(em, value, (1,) * (em.rank - 2) + tuple(shape), tuple(shape), valid,
                       dtype, name)


def dot_operand(em: ValueEmitter, value: str, full_shape: tuple[int, ...],
                shape: tuple[int, int], valid: list[str], dtype: str, hint: str,
                transpose: bool = False) -> str:
    """``value``, a tile of the kernel space, as a 2-D ``tl.dot`` operand of ``dtype``:
    converted, broadcast to ``full_shape``, zero where a ``valid`` check fails (each a
    parenthesized condition), reshaped to ``shape``, transposed if asked.

    Converted first: a loaded bf16 tile that the emitter widened for the HLO's arithmetic
    folds back to the loaded tile only where the two conversions meet; with a reshape or a
    transpose between them Triton kept it in registers and stored it again to shared memory
    for the tensor cores, a round trip per K step that the tutorial kernels do not make.

    >>> from triton_backend.lowering.emitter.identifiers import IdentifierAllocator
    >>> class Lines:  # the emitter's bind, recorded
    ...     def __init__(self): self.lines, self.names = [], IdentifierAllocator()
    ...     def bind(self, code, hint):
    ...         name = self.names.fresh(hint); self.lines.append(f"{name} = {code}"); return name
    >>> em = Lines()
    >>> dot_operand(em, "k", (1, 64, 32), (64, 32), ["(h < 40)"], "DOT_BF16", "k", True)
    'k_tile_3'
    >>> print("\\n".join(em.lines))
    k_in = k.to(DOT_BF16)
    k_tile = tl.broadcast_to(k_in, (1, 64, 32))
    k_tile_1 = tl.where((h < 40), k_tile, 0)
    k_tile_2 = tl.reshape(k_tile_1, (64, 32))
    k_tile_3 = tl.trans(k_tile_2)
    """
    value = em.bind(f"{value}.to({dtype})", f"{hint}_in")
    tile = em.bind(f"tl.broadcast_to({value}, {tuple(full_shape)})", f"{hint}_tile")
    if valid:
        tile = em.bind(f"tl.where({' & '.join(valid)}, {tile}, 0)", f"{hint}_tile")
    if len(full_shape) != 2:
        tile = em.bind(f"tl.reshape({tile}, {tuple(shape)})", f"{hint}_tile")
    if transpose:
        tile = em.bind(f"tl.trans({tile})", f"{hint}_tile")
    return tile


__all__ = ["DOT_BF16_PRELUDE", "TL_DOT_OPERAND_DTYPES", "TL_DOT_OPERANDS", "AccumulatorEpilogue", "GemmKernel", "dot_operand", "gemm_prelude", "operand_tile",
           "precision_keyword"]
