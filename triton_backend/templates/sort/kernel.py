"""Render the kernel file of a sort fusion: one row per program, ``tl.sort`` of packed keys.

The key of each lane becomes an int32 whose signed order is the comparator's order
(:func:`ordered_key_text`), descending orders are bit-complemented, and the lane index is packed
into the low 32 bits of an int64: sorting the packed values with ``tl.sort`` is then a *stable*
sort by the comparator (ties keep their index order), whatever ``tl.sort``'s own algorithm.
Padding lanes (the row is padded to a power of two) hold ``INT64_MAX`` and sort last.  Every
operand (keys included, so NaN payloads and -0.0 survive bit-exactly) is then gathered from
its input at the sorted source index and stored.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from fusion.errors import UnsupportedOpError
from fusion.ir.hlo_module import HloInstruction, HloModule
from fusion.text.printer import print_computation, print_instruction
from fusion.ir.shape import ArrayShape
from triton_backend.lowering.emitter.addressing import buffer_addressing
from triton_backend.lowering.host_template import PRELUDE, RUNTIME, kernel_specs
from triton_backend.lowering.emitter.triton_types import KERNEL_IMPORTS, storage_dtype
from triton_backend.lowering.emitter.identifiers import comment_block, sanitize

#: Float bit layouts: (signed int type, magnitude mask, +inf bits, canonical NaN bits).
_FLOAT_BITS = {
    "f32": ("tl.int32", 0x7FFFFFFF, 0x7F800000, 0x7FC00000),
    "bf16": ("tl.int16", 0x7FFF, 0x7F80, 0x7FC0),
    "f16": ("tl.int16", 0x7FFF, 0x7C00, 0x7E00),
}


#: The key types a sort orders (``ordered_key_text``; the library sort's too).
SORT_KEY_TYPES = frozenset({"f32", "bf16", "f16", "s8", "s16", "s32", "u8", "u16", "u32", "pred"})


@dataclass(frozen=True)
class SortOrder:
    """The order a comparator defines on operand 0: direction and float key semantics.

    ``float_order``: ``"total"`` (XLA TOTALORDER: -NaN < -inf < ... < -0 < +0 < ... < +NaN) or
    ``"canonical"`` (JAX's: NaNs equal and last, -0 equal to +0; also used for a plain
    float compare, whose NaN behaviour is not a strict weak order).  ``key_rounding``: f32
    keys compared as their nearest-even ``"bf16"`` values (XLA:CPU sorts bf16 as f32 keys
    whose comparator rounds them back; equal roundings keep their order), else None.
    """

    descending: bool
    float_order: str = "canonical"
    key_rounding: str | None = None

    def __post_init__(self) -> None:
        # A module plan's record comes back through here: only an order the templates know.
        if type(self.descending) is not bool or self.float_order not in ("canonical", "total") \
                or self.key_rounding not in (None, "bf16"):
            raise ValueError(f"not a sort order: {self!r}")


def ordered_key_text(key: str, dtype: str, order: SortOrder) -> str:
    """Triton text: an int32 of the raw (storage dtype) ``key`` whose signed order is ``order``.

    >>> ordered_key_text("k", "s16", SortOrder(False))
    '(k).to(tl.int32)'
    """
    if order.key_rounding is not None:  # the f32 value of the rounding: the same order
        key = f"xla_math.round_to_{order.key_rounding}({key})"
    if dtype in _FLOAT_BITS:
        int_t, mag, inf, nan = _FLOAT_BITS[dtype]
        bits = f"({key}).to({int_t}, bitcast=True)"
        if order.float_order == "canonical":
            magnitude = f"({bits} & {mag})"
            bits = (f"tl.where({magnitude} > {inf}, tl.full([], {nan}, {int_t}), "
                    f"tl.where({magnitude} == 0, tl.full([], 0, {int_t}), {bits}))")
        # Negative floats: flip the magnitude bits so signed integer order is the float order.
        text = f"tl.where({bits} < 0, {bits} ^ {mag}, {bits}).to(tl.int32)"
    elif dtype in ("s8", "s16", "s32", "u8", "u16", "pred"):
        text = f"({key}).to(tl.int32)"
    elif dtype == "u32":
        text = f"(({key}) ^ 0x80000000).to(tl.int32, bitcast=True)"
    else:
        raise UnsupportedOpError(f"sort keys of type {dtype} are not supported (keys of at most "
                                 "32 bits: s8..s32, u8..u32, pred, f16, bf16, f32)", where=dtype)
    return f"~({text})" if order.descending else text


@dataclass(frozen=True)
class SortOperand:
    """Where operand ``i`` of the sort comes from: a fusion parameter, or an iota."""

    parameter: HloInstruction | None
    iota_dimension: int | None
    shape: ArrayShape


#: The most elements of short rows one program sorts together, and the fewest programs it
#: leaves (about one per SM): 10,000 rows of 4 lanes are 157 programs of 64 rows, not 10,000
#: programs of 4 lanes each (the interpreter ran one Python call per row: 11 minutes).
ROWS_TILE_ELEMENTS = 1024
MIN_SORT_PROGRAMS = 128


def rows_per_program(rows: int, block: int) -> int:
    """How many rows of ``block`` lanes one program sorts: a power of two, at most
    :data:`ROWS_TILE_ELEMENTS` elements in all, leaving at least :data:`MIN_SORT_PROGRAMS`
    programs where the rows allow.

    >>> rows_per_program(10250, 4), rows_per_program(3, 4), rows_per_program(64, 2048)
    (64, 1, 1)
    """
    most = max(1, ROWS_TILE_ELEMENTS // block)
    share = max(1, rows // MIN_SORT_PROGRAMS)
    return min(most, 1 << (share.bit_length() - 1))


def render_sort_kernel(module: HloModule, fusion_instr: HloInstruction, sort: HloInstruction,
                       operands: tuple[SortOperand, ...], outputs: tuple[ArrayShape, ...],
                       order: SortOrder, block: int, rows_tile: int = 1
                       ) -> tuple[str, tuple[int, ...]]:
    """The kernel file source sorting ``sort``'s rows (``rows_tile`` a program), and its
    grid."""
    key = operands[0]
    if key.parameter is None:
        raise UnsupportedOpError("the sort key (operand 0) must be a fusion parameter",
                                 where=sort.name)

    def packed(read, gather) -> list[str]:
        return [f"key = {read(0, 'lane')}",
                f"ordered = {ordered_key_text('key', key.shape.dtype, order)}",
                "packed = tl.where(valid, (ordered.to(tl.int64) << 32) | lane.to(tl.int64), "
                "0x7FFFFFFFFFFFFFFF)",
                "packed = tl.sort(packed)",
                "source = (packed & 0xFFFFFFFF).to(tl.int32)"] + gather("lane")

    return sort_kernel_source(module, fusion_instr, sort, operands, outputs, block, packed,
                              f"comparator order {order}; padded to {block}",
                              rows_tile=rows_tile)


def _rows_head(block: int, n: int, rows: int, rows_tile: int) -> list[str]:
    """The kernel's first lines: its rows (``row``), a row's lanes (``lane``; ``lanes``, the
    tile of them) and which lanes hold elements (``valid``)."""
    if rows_tile == 1:
        return ["pid = tl.program_id(0)", f"lane = tl.arange(0, {block})", f"valid = lane < {n}",
                "row = pid", "lanes = lane"]
    # a [rows_tile, block] tile: rows down, lanes across
    return ["pid = tl.program_id(0)", f"lane = tl.arange(0, {block})[None, :]",
            f"row = pid * {rows_tile} + tl.arange(0, {rows_tile})[:, None]",
            f"valid = (lane < {n}) & (row < {rows})",
            f"lanes = lane + tl.zeros([{rows_tile}, {block}], tl.int32)"]


def sort_kernel_source(module: HloModule, fusion_instr: HloInstruction, sort: HloInstruction,
                       operands: tuple[SortOperand, ...], outputs: tuple[ArrayShape, ...],
                       block: int, sorting, description: str, functions: str = "",
                       imports: str = "", num_warps: int | None = None,
                       scratch: tuple[tuple[str, str, int], ...] = (), rows_tile: int = 1
                       ) -> tuple[str, tuple[int, ...]]:
    """The kernel file of a sort, ``rows_tile`` rows a program: ``sorting(read, gather)``
    gives the body's lines after the rows' index (``pid``, ``lane = tl.arange(0, block)``,
    ``valid``: the lanes in a row; with several rows a program, ``lane`` is ``[1, block]``,
    ``lanes`` the ``[rows_tile, block]`` tile of lane indices and ``valid`` of that shape):
    ``read(i, at)`` is Triton text of operand ``i``'s raw value at the rows' lanes ``at``,
    masked by ``valid``; ``gather(at)`` the lines that store every output at lanes ``at``
    from its operand at ``source``, each lane's source lane in sorted order (keys included,
    so their bits survive).  ``functions``: source placed before the kernel (a comparator);
    ``num_warps``: the file's ``NUM_WARPS`` (Triton's default without it; one stage);
    ``scratch``: ``(name, torch dtype, entries)`` of buffers the kernel takes after the
    outputs (``SCRATCH_SPECS``, written before they are read) as ``{name}_ptr``."""
    computation = module.computation(fusion_instr.attr("calls"))
    (dim,) = sort.attr("dimensions")
    dims = operands[0].shape.dims
    n = dims[dim]
    others = [j for j in range(len(dims)) if j != dim]
    rows = math.prod(dims[j] for j in others)
    params = computation.parameters
    in_ptr = {p.name: f"in{i}_ptr" for i, p in enumerate(params)}
    out_ptrs = [f"out{i}_ptr" for i in range(len(outputs))]
    body = _rows_head(block, n, rows, rows_tile)
    row_index = {}
    for pos, j in enumerate(others):
        stride = math.prod(dims[i] for i in others[pos + 1:])
        row_index[j] = f"row{j}"
        body.append(f"row{j} = (row // {stride}) % {dims[j]}")

    def base_and_stride(shape: ArrayShape, name: str) -> tuple[str, int]:
        strides = buffer_addressing(shape, name).strides
        base = " + ".join(f"row{j} * {strides[j]}" for j in others) or "0"
        return base, strides[dim]

    def read(i: int, at: str) -> str:
        operand = operands[i]
        if operand.parameter is not None:
            b, s = base_and_stride(operand.shape, operand.parameter.name)
            return f"tl.load({in_ptr[operand.parameter.name]} + {b} + {at} * {s}, mask=valid, other=0)"
        index = f"({at} + lanes * 0)" if operand.iota_dimension == dim else \
            f"(lanes * 0 + {row_index[operand.iota_dimension]})"
        return f"({index}).to({storage_dtype(operand.shape.element_type)})"

    def gather(at: str) -> list[str]:
        lines = []
        for i, (shape, pointer) in enumerate(zip(outputs, out_ptrs)):
            ob, os_ = base_and_stride(shape, f"output {i}")
            lines.append(f"tl.store({pointer} + {ob} + {at} * {os_}, {read(i, 'source')}, "
                         "mask=valid)")
        return lines

    body += sorting(read, gather)
    kernel_name = f"{sanitize(fusion_instr.name)}_sort_kernel"
    signature = [in_ptr[p.name] for p in params] + out_ptrs + [f"{s[0]}_ptr" for s in scratch]
    kernel = (f"@triton.jit\ndef {kernel_name}({', '.join(signature)}):\n"
              + "\n".join("    " + line for line in body) + "\n")
    grid = (-(-rows // rows_tile),)
    header = comment_block(
        f"Generated by triton_backend.templates.sort for sort fusion {fusion_instr.name}.\n"
        f"{print_instruction(fusion_instr)}\n\n{print_computation(computation)}\n\n"
        f"{description}; row length {n}; {rows} rows, {rows_tile} a program")
    specs = kernel_specs(kernel_name, grid, params, [], outputs,
                         None if num_warps is None else (num_warps, 1))
    if scratch:
        specs += "SCRATCH_SPECS = (" + "".join(
            f"({name!r}, {dtype}, ({entries},), (0,), False), "
            for name, dtype, entries in scratch) + ")\n"
    source = (header + PRELUDE + KERNEL_IMPORTS + imports + "\n\n" + functions + kernel
              + "\n\n" + specs + RUNTIME)
    return source, grid
