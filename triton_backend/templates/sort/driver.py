"""Sort fusions as kernels: one row in one tile, stable, multi-operand.

A *sort fusion* is a ``fusion`` whose computation's root is a ``sort`` (or a tuple of
get-tuple-elements of one), whose operands are fusion parameters or iotas (argsort sorts
``(x, iota)``).  Rows of at most :data:`MAX_SORT_LENGTH` elements are sorted in one tile;
longer ones in a plain order of one key by one library call (``library_call.LibrarySort``:
``torch.sort``), by any other comparator tile by tile (``long_network_kernel``).

The comparator is *recognized by its behaviour*: it is run through the reference evaluator on
every pair of a probe set of keys (NaNs of both signs, infinities, signed zeros, denormals,
extremes, duplicates, random values) with varying other operands, and must agree everywhere
with one of the orders the kernel implements: LT or GT on operand 0 alone, for floats either
XLA's TOTALORDER or JAX's canonical order (NaNs equal and last, -0 == +0; JAX spells it as a
select/bitcast/xor computation, which is why syntax alone is not enough).  A plain float
``LT``/``GT`` is taken as the canonical order (it agrees with it on every non-NaN pair; NaN
makes a plain compare no strict weak order, and the kernel then sorts NaNs last).  f32 keys
may also be compared as their bf16 roundings (XLA:CPU's form of a bf16 sort).  Anything
else (tie-breaks on other operands, keys of more than 32 bits, custom orders) is sorted by a
bitonic network asking the comparator itself (``network_kernel``), in one tile, and past one
tile through scratch memory, tile by tile (``long_network_kernel``).

>>> import fusion
>>> m = fusion.parse_hlo('''HloModule m
... lt {
...   a = s32[] parameter(0)
...   b = s32[] parameter(1)
...   ROOT c = pred[] compare(a, b), direction=GT
... }
... f {
...   p = s32[3,5] parameter(0)
...   ROOT s = s32[3,5] sort(p), dimensions={1}, to_apply=lt
... }
... ENTRY e {
...   x = s32[3,5] parameter(0)
...   ROOT r = s32[3,5] fusion(x), kind=kLoop, calls=f
... }''')
>>> is_sort_fusion(m, "r"), comparator_order(m, sort_of(m, "r"))
(True, SortOrder(descending=True, float_order='canonical', key_rounding=None))
"""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from fusion.errors import UnsupportedOpError
from fusion.evaluator.interpreter import Evaluator
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.ir.shape import ArrayShape, TupleShape
from triton_backend.templates.sort.kernel import (SORT_KEY_TYPES, SortOperand, SortOrder,
                                                  render_sort_kernel, rows_per_program)
from triton_backend.templates.sort.network_kernel import (comparator_problem,
                                                          render_network_sort_kernel)
from triton_backend.templates.sort.library_call import LIBRARY_KEY_TYPES, LibrarySort
from triton_backend.templates.sort.long_network_kernel import render_long_network_sort_kernel
from triton_backend.runtime.kernel_loading import (CompiledFusion, TemplateKind, find_fusion,
                                                   load_kernel)
from triton_backend.runtime.kernel_cache import KernelCache

#: The longest row sorted in one tile (a bitonic sort of int64 keys held in registers).
MAX_SORT_LENGTH = 4096

#: The tile of a longer row sorted by the network through scratch memory: a two-key sort of
#: rows of 10,000 takes 10 passes over the row, 124 registers on sm_90 and no spills.
LONG_SORT_TILE = 2048

_FLOAT_PROBES = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 1.5, -1.5, 2.0, 1e-40,
                 -1e-40, 3.4e38, -3.4e38, 1e-3, -7.25]


def sort_of(module: HloModule, fusion_instr: HloInstruction | str) -> HloInstruction:
    """The sort that is (or whose elements form) the fusion's root."""
    fusion_instr = find_fusion(module, fusion_instr)
    called = fusion_instr.attr("calls", None)
    if fusion_instr.opcode != "fusion" or not isinstance(called, str) \
            or not module.has_computation(called):
        raise UnsupportedOpError(f"{fusion_instr.name} is not a fusion", where=fusion_instr.name)
    comp = module.computation(called)
    root = comp.root
    if root.opcode == "sort":
        return root
    # Else the root picks elements of one sort: one get-tuple-element, or a tuple of them.
    picks = root.operands if root.opcode == "tuple" else (root.name,)
    sources = {_picked_from(comp, p) for p in picks}
    if len(sources) == 1 and None not in sources:
        source = comp.instruction(sources.pop())
        if source.opcode == "sort":
            return source
    raise UnsupportedOpError(f"fusion {fusion_instr.name}'s root {root.name} is not a sort",
                             where=fusion_instr.name)


def _picked_from(comp: HloComputation, name: str) -> str | None:
    """The tuple-shaped op whose element ``name`` is, when ``name`` is a get-tuple-element."""
    instr = comp.instruction(name)
    return instr.operands[0] if instr.opcode == "get-tuple-element" else None


def is_sort_fusion(module: HloModule, fusion_instr: HloInstruction | str) -> bool:
    """True when ``fusion_instr`` is a fusion whose root is a sort (or its tuple elements)."""
    try:
        sort_of(module, fusion_instr)
    except UnsupportedOpError:
        return False
    return True


_FLOATS = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32, "f64": np.float64}
_INTS = {"s8": np.int8, "s16": np.int16, "s32": np.int32, "s64": np.int64, "u8": np.uint8,
         "u16": np.uint16, "u32": np.uint32, "u64": np.uint64}


def _probe_keys(dtype: str) -> np.ndarray:
    rng = np.random.default_rng(0)
    if dtype in _FLOATS:
        base = np.array(_FLOAT_PROBES + list(rng.standard_normal(15) * 100), np.float64)
        if dtype == "f64":  # and values only f64 holds
            return np.concatenate([base, [1e300, -1e300, 1e-310, 0.1 + 2 ** -55]])
        with np.errstate(over="ignore"):
            return base.astype(np.float32).astype(_FLOATS[dtype])
    if dtype == "pred":
        return np.array([False, True])
    info = np.iinfo(_INTS.get(dtype, np.int8))
    values = [info.min, info.max, 0, 1, info.min + 1, info.max - 1] + \
        list(rng.integers(info.min, info.max, 14, endpoint=True, dtype=info.dtype))
    return np.array(values, dtype=info.dtype)


def _reference_orders(keys: np.ndarray, dtype: str) -> dict[tuple[bool, str], np.ndarray]:
    """less[i, j] for every candidate order, on all pairs of ``keys``."""
    if dtype not in _FLOATS:
        lt = keys[:, None] < keys[None, :]  # in the keys' own type: u64 too
        return {(False, "canonical"): lt, (True, "canonical"): lt.T}
    wide, ints, mask = (np.float64, np.int64, 0x7FFFFFFFFFFFFFFF) if dtype == "f64" else \
        (np.float32, np.int32, 0x7FFFFFFF)
    f = keys.astype(wide)
    bits = f.view(ints).astype(np.int64)
    total = np.where(bits < 0, bits ^ mask, bits)
    canon_f = np.where(np.isnan(f), wide(np.nan), np.where(f == 0, wide(0), f)).astype(wide)
    cbits = canon_f.view(ints).astype(np.int64)
    canon = np.where(cbits < 0, cbits ^ mask, cbits)
    orders = {}
    for name, k in (("canonical", canon), ("total", total)):
        lt = k[:, None] < k[None, :]
        orders[(False, name)] = lt
        orders[(True, name)] = lt.T
    return orders


def _matching_order(less: np.ndarray, keys: np.ndarray, key_type: str
                    ) -> tuple[bool, str] | None:
    """The ``(descending, float_order)`` whose order on every pair of ``keys`` is ``less``
    (the comparator's results), or None."""
    finite = np.ones(len(keys), bool)
    if key_type in _FLOATS:
        finite = ~np.isnan(keys.astype(np.float64))
    both = finite[:, None] & finite[None, :]
    orders = _reference_orders(keys, key_type)
    for order, want in orders.items():
        if np.array_equal(less, want):
            return order
    # A plain float compare: the canonical order on every pair without a NaN.
    for (descending, float_order), want in orders.items():
        if float_order == "canonical" and np.array_equal(less & both, want & both) \
                and not less[~both].any():
            return descending, float_order
    return None


def comparator_order(module: HloModule, sort: HloInstruction) -> SortOrder:
    """The order ``sort``'s comparator defines, or ``UnsupportedOpError`` saying why not."""
    shapes = sort.shape.elements if isinstance(sort.shape, TupleShape) else (sort.shape,)
    key_type = shapes[0].dtype
    keys = _probe_keys(key_type)
    name = sort.attr("to_apply")
    evaluator = Evaluator(module)
    results = []
    for seed in (1, 2):
        rng = np.random.default_rng(seed)
        arrays = []
        for position, shape in enumerate(shapes):
            if position == 0:
                arrays += [keys[:, None], keys[None, :]]
                continue
            others = _probe_keys(shape.dtype)
            pick = lambda: others[rng.integers(0, len(others), (len(keys), len(keys)))]  # noqa: E731
            arrays += [pick(), pick()]
        (less,) = evaluator.call_scalar(name, arrays, caller=sort)
        results.append(np.asarray(less, bool))
    if not np.array_equal(results[0], results[1]):
        raise UnsupportedOpError(f"comparator {name} of {sort.name} depends on operands other than "
                                 "the keys (operand 0): it is no order of the keys alone",
                                 where=sort.name)
    found = _matching_order(results[0], keys, key_type)
    if found is not None:
        return SortOrder(*found)
    if key_type == "f32":  # XLA:CPU's bf16 sort: f32 keys, rounded back in the comparator
        rounded = keys.astype(ml_dtypes.bfloat16).astype(np.float32)
        found = _matching_order(results[0], rounded, key_type)
        if found is not None:
            return SortOrder(*found, key_rounding="bf16")
    raise UnsupportedOpError(
        f"comparator {name} of {sort.name} is not a LT/GT comparison of the keys (plain, "
        "TOTALORDER or JAX's canonical NaN order)", where=sort.name)


#: What a sort fusion's sort may take as an operand, and how the template reads it: a
#: parameter from memory, an iota from its index (argsort).
SORT_OPERANDS = {
    "iota": lambda instr: SortOperand(None, instr.attr("iota_dimension"), instr.shape),
    "parameter": lambda instr: SortOperand(instr, None, instr.shape),
}


def _operands(module, fusion_instr, sort) -> tuple[SortOperand, ...]:
    comp = module.computation(fusion_instr.attr("calls"))
    result = []
    for name in sort.operands:
        instr = comp.instruction(name)
        if instr.opcode not in SORT_OPERANDS:
            raise UnsupportedOpError(f"sort operand {name} is a {instr.opcode}; sort fusions take "
                                     "parameters or iotas as operands", where=name)
        result.append(SORT_OPERANDS[instr.opcode](instr))
    return tuple(result)


def _outputs(module, fusion_instr, sort) -> tuple[ArrayShape, ...]:
    comp = module.computation(fusion_instr.attr("calls"))
    shapes = sort.shape.elements if isinstance(sort.shape, TupleShape) else (sort.shape,)
    root = comp.root
    if root.name == sort.name:
        return tuple(shapes)
    picks = root.operands if root.opcode == "tuple" else (root.name,)
    indices = [comp.instruction(p).attr("index") for p in picks]
    if indices != list(range(len(shapes))):
        raise UnsupportedOpError(f"fusion {fusion_instr.name} returns sort elements {indices}; "
                                 "only all of them in order are supported", where=fusion_instr.name)
    return tuple(shapes)


def sort_method(module: HloModule, fusion_instr: HloInstruction, sort: HloInstruction
                ) -> SortOrder | None:
    """How a sort fusion sorts: the order of the packed-key kernel (or of the library sort,
    past one tile), or None for the comparator network (``network_kernel``: any comparator
    of elementwise ops; past one tile ``long_network_kernel``); ``UnsupportedOpError``
    saying why neither takes it."""
    operands = _operands(module, fusion_instr, sort)
    key = operands[0]
    n = key.shape.dims[sort.attr("dimensions")[0]]
    try:
        order = comparator_order(module, sort)
    except UnsupportedOpError:
        order = None
    else:
        # packed keys in one tile take keys of up to 32 bits, torch.sort past it 64 too
        keys = LIBRARY_KEY_TYPES if n > MAX_SORT_LENGTH else SORT_KEY_TYPES
        if key.shape.dtype not in keys or key.parameter is None:
            order = None
    if order is not None:
        return order
    problem = comparator_problem(module, sort)
    if problem is not None:
        raise UnsupportedOpError(problem, where=sort.name)
    return None


def compile_sort_fusion(module: HloModule, fusion_instr: HloInstruction | str, *,
                        tile_sizes=None, target: str | None = None,
                        cache: KernelCache | None = None, order: SortOrder | None = None):
    """Generate, cache and load the kernel of a sort fusion (kind ``"sort"``: ``tl.sort`` of
    packed keys, or the bitonic network asking the comparator, as :func:`sort_method` says);
    a ``LibrarySort`` (no kernel) for a plain order of rows longer than
    :data:`MAX_SORT_LENGTH`.

    ``tile_sizes`` may give ``(block,)``: a power of two up to :data:`MAX_SORT_LENGTH`.  At
    least the row length, the row padded to it in one tile; shorter, the network over the row
    in tiles of ``block`` through scratch memory (``long_network_kernel``), whatever the
    comparator.  By default the row length rounded up to a power of two, and past one tile
    :data:`LONG_SORT_TILE`.
    ``order``: the comparator's order found before (a module plan's record), else
    ``comparator_order``'s.
    """
    fusion_instr = find_fusion(module, fusion_instr)
    sort = sort_of(module, fusion_instr)
    operands = _operands(module, fusion_instr, sort)
    (dim,) = sort.attr("dimensions")
    n = operands[0].shape.dims[dim]
    order = sort_method(module, fusion_instr, sort) if order is None else order
    outputs = _outputs(module, fusion_instr, sort)
    if tile_sizes is not None:
        (block,) = tuple(tile_sizes)
        if not 2 <= block <= MAX_SORT_LENGTH or block & (block - 1):
            raise UnsupportedOpError(f"sort tile {block} must be a power of two from 2 to "
                                     f"{MAX_SORT_LENGTH}", where=sort.name)
    elif n <= MAX_SORT_LENGTH:
        block = max(1 << max(0, (n - 1).bit_length()), 2)
    elif order is not None:
        return LibrarySort.of(fusion_instr, sort, operands, outputs, order,
                              f"rows of {n} elements, longer than one tile's "
                              f"{MAX_SORT_LENGTH}: one stable torch.sort, as XLA:GPU sends "
                              "a plain sort to CUB")
    else:
        block = LONG_SORT_TILE
    if block < n:  # any comparator: the network, tile by tile through scratch
        # (sort_method asked the network already when it found no order)
        problem = comparator_problem(module, sort) if order is not None else None
        if problem is not None:
            raise UnsupportedOpError(problem, where=sort.name)
        source, grid = render_long_network_sort_kernel(module, fusion_instr, sort, operands,
                                                       outputs, block)
    elif order is None:  # any comparator: the bitonic network asking it
        source, grid = render_network_sort_kernel(module, fusion_instr, sort, operands, outputs,
                                                  block, _rows_tile(operands, dim, block))
    else:
        source, grid = render_sort_kernel(module, fusion_instr, sort, operands, outputs, order,
                                          block, _rows_tile(operands, dim, block))
    loaded, path = load_kernel(module, fusion_instr, source, repr(block), target, cache)
    return CompiledFusion(fusion_instr.name, TemplateKind.SORT, path, source, grid, (block,), loaded)


def _rows_tile(operands, dim: int, block: int) -> int:
    """Rows a program sorts (``rows_per_program``): several when they are short."""
    dims = operands[0].shape.dims
    return rows_per_program(math.prod(dims) // dims[dim] if dims[dim] else 0, block)


__all__ = ["LONG_SORT_TILE", "MAX_SORT_LENGTH", "SORT_OPERANDS", "SortOrder", "comparator_order", "compile_sort_fusion",
           "is_sort_fusion", "sort_method", "sort_of"]
