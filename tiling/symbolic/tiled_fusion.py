"""The tiled instruction graph of a fusion (XLA's ``SymbolicTileAnalysis`` and
``TiledHloComputation``).

The fusion's output is cut into blocks of ``tile_sizes``; each block becomes one Triton
program.  Walking from the root operand-wards, every instruction gets the map from the fusion
output to its own elements (the composition of the per-op maps along the path) and, from it,
its symbolic tile (``tiling.symbolic.symbolic_tile``).  Two paths asking for the same tile share one
node; different tiles of one instruction (``p0 + transpose(p0)``) are different nodes.

>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... f {
...   p0 = f32[4,256] parameter(0)
...   ROOT e = f32[4,256] exponential(p0)
... }
... ENTRY main {
...   x = f32[4,256] parameter(0)
...   ROOT r = f32[4,256] fusion(x), kind=kLoop, calls=f
... }''')
>>> tiled = tile_fusion(m, m.entry.root, (1, 128))
>>> tiled.grid, tiled.num_blocks
((4, 2), 8)
>>> print(tiled)
p0 = parameter() tile_sizes=(1, 128) tile_strides=(1, 1) tile_offsets_indexing=(d0, d1) -> (d0, d1 * 128), domain: d0 in [0, 3], d1 in [0, 1]
e = exponential(p0) tile_sizes=(1, 128) tile_strides=(1, 1) tile_offsets_indexing=(d0, d1) -> (d0, d1 * 128), domain: d0 in [0, 3], d1 in [0, 1]
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from math import prod
from typing import Sequence

from fusion.errors import (  # TilingError: defined there with every user error, re-exported here
    FusionCompilerError,
    TilingError,
)
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.opcodes import ELEMENTWISE_OPCODES, traits
from fusion.analysis.reduction_kind import kept_and_reduced
from fusion.ir.shape import ArrayShape, TupleShape
from tiling.maps.affine_expr import AffineExpr, Constant, DimExpr, const, d
from tiling.indexing_analysis import output_to_input_indexing
from tiling.maps.indexing_map import IndexingMap, compose
from tiling.maps.map_transforms import remove_unused_symbols
from tiling.symbolic.symbolic_tile import (
    ConcreteTile,
    NotTileable,
    SymbolicTile,
    pin_point_variables,
    symbolic_tile,
)


def next_power_of_two(n: int) -> int:
    """Triton's ``tl.arange`` needs power-of-two extents: a tile of 100 is padded to 128.

    >>> [next_power_of_two(n) for n in (1, 3, 100, 128)]
    [1, 4, 128, 128]
    """
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


@dataclass(frozen=True)
class SymbolicNode:
    """One instruction reached with one map from the fusion output."""

    index: int
    instruction: HloInstruction
    indexing: IndexingMap
    tile: SymbolicTile | NotTileable
    operands: tuple[int, ...]

    @property
    def name(self) -> str:
        return self.instruction.name


@dataclass(frozen=True)
class TiledInstruction:
    """An instruction of the tiled graph with its tile at concrete sizes.

    ``tile.offsets_map``: block ids -> the tile's first element; ``tile.element_map``:
    (block ids, in-tile indices) -> element indices; ``padded_sizes``: the power-of-two
    extents Triton works on (elements beyond ``tile.sizes`` are masked).
    """

    index: int
    instruction: HloInstruction
    indexing: IndexingMap
    symbolic: SymbolicTile
    tile: ConcreteTile
    operands: tuple[int, ...]
    label: str

    @property
    def name(self) -> str:
        return self.instruction.name

    @property
    def padded_sizes(self) -> tuple[int, ...]:
        return tuple(next_power_of_two(s) for s in self.tile.sizes)

    def to_string(self, labels: Sequence[str]) -> str:
        ops = ", ".join(labels[i] for i in self.operands)
        return (f"{self.label} = {self.instruction.opcode}({ops}) "
                f"tile_sizes=({', '.join(map(str, self.tile.sizes))}) "
                f"tile_strides=({', '.join(map(str, self.tile.strides))}) "
                f"tile_offsets_indexing={self.tile.offsets_map}")


@dataclass(frozen=True)
class TiledFusion:
    """The tiled instruction graph for one output tiling; ``instructions`` in post order
    (operands first), the roots last.  ``grid[i]`` blocks along output dim ``i``."""

    fusion: str
    tile_sizes: tuple[int, ...]
    output_dims: tuple[int, ...]
    reduction_chunk: int | None
    instructions: tuple[TiledInstruction, ...]
    roots: tuple[int, ...]

    @property
    def grid(self) -> tuple[int, ...]:
        return tuple(-(-n // t) for n, t in zip(self.output_dims, self.tile_sizes))

    @property
    def num_blocks(self) -> int:
        out = 1
        for g in self.grid:
            out *= g
        return out

    def to_string(self) -> str:
        labels = [t.label for t in self.instructions]
        return "\n".join(t.to_string(labels) for t in self.instructions)

    def __str__(self) -> str:
        return self.to_string()


@dataclass(frozen=True)
class SymbolicTiledFusion:
    """The tiling-independent part: every (instruction, map) node and its symbolic tile."""

    fusion: str
    computation: HloComputation
    output_dims: tuple[int, ...]
    nodes: tuple[SymbolicNode, ...]
    roots: tuple[int, ...]

    def not_tileable(self) -> list[tuple[SymbolicNode, NotTileable]]:
        return [(n, n.tile) for n in self.nodes if isinstance(n.tile, NotTileable)]

    @cached_property
    def distinct_tiles(self) -> tuple[SymbolicNode, ...]:
        """The first node of each distinct tile object, in node order.

        Whether a tiling is exact, and every size at given tile sizes, is a function of the
        tile alone, and equal maps share one tile object (``_tile``'s memo): the legality
        and cost checks of a fusion whose hundreds of elementwise nodes share the output's
        tile look at it once instead of once per node.  Checking in node order keeps the
        first offending node (and so every message) as a walk over all nodes gives it."""
        seen: dict[int, SymbolicNode] = {}
        for n in self.nodes:
            seen.setdefault(id(n.tile), n)
        return tuple(seen.values())

    @cached_property
    def memo(self) -> dict:
        """Values other layers derive from this analysis alone (the costs of each candidate
        tiling ask for the same tile boxes), under keys those layers name.  Pure memoization:
        the analysis itself never changes."""
        return {}

    @cached_property
    def padded_reduced_extent(self) -> int:
        """The largest padded extent of the reduced dims any tile covers whole (0: none)."""
        out = 0
        for n in self.distinct_tiles:
            if isinstance(n.tile, SymbolicTile) and n.tile.num_range_vars:
                out = max(out, prod(next_power_of_two(s) for s in n.tile.full_range_sizes()))
        return out

    @cached_property
    def concatenates(self) -> tuple[SymbolicNode, ...]:
        """The concatenate nodes (each candidate tiling checks their tiles)."""
        return tuple(n for n in self.nodes if n.instruction.opcode == "concatenate")

    def problems(self, tile_sizes: Sequence[int], reduction_chunk: int | None = None) -> list[str]:
        """Why these sizes do not give exact tiles (empty when they do)."""
        out = [f"{n.name}: {t}" for n, t in self.not_tileable()]
        if out:
            return out
        failing = {id(n.tile) for n in self.distinct_tiles
                   if not n.tile.is_satisfied(tile_sizes, _chunks(n.tile, reduction_chunk))}
        for n in self.nodes:
            if id(n.tile) in failing:
                out.append(f"{n.name}: tile sizes {tuple(tile_sizes)} violate "
                           f"{n.tile.constraints.to_str(len(tile_sizes))}")
        return out

    def first_problem(self, tile_sizes: Sequence[int],
                      reduction_chunk: int | None = None) -> str | None:
        """``problems(...)[0]``, or None when there is none, without listing the rest."""
        for n in self.nodes:
            if isinstance(n.tile, NotTileable):
                return f"{n.name}: {n.tile}"
        for n in self.distinct_tiles:
            if not n.tile.is_satisfied(tile_sizes, _chunks(n.tile, reduction_chunk)):
                return (f"{n.name}: tile sizes {tuple(tile_sizes)} violate "
                        f"{n.tile.constraints.to_str(len(tile_sizes))}")
        return None

    def instantiate(self, tile_sizes: Sequence[int],
                    reduction_chunk: int | None = None) -> TiledFusion:
        """The tiled graph at ``tile_sizes``; ``TilingError`` if a tile would be inexact."""
        tile_sizes = tuple(int(t) for t in tile_sizes)
        _check_sizes(self, tile_sizes)
        problems = self.problems(tile_sizes, reduction_chunk)
        if problems:
            raise TilingError("; ".join(problems), where=self.fusion)
        tiles: list[TiledInstruction] = []
        by_key: dict[tuple, int] = {}
        node_to_tile: dict[int, int] = {}
        seen_names: dict[str, int] = {}
        for node in self.nodes:  # post order: operands are already placed
            concrete = node.tile.instantiate(tile_sizes, self.output_dims,
                                             _chunks(node.tile, reduction_chunk))
            operands = tuple(node_to_tile[i] for i in node.operands)
            key = (node.name, concrete.sizes, concrete.strides, str(concrete.offsets_map),
                   operands)
            if key in by_key:
                node_to_tile[node.index] = by_key[key]
                continue
            count = seen_names.get(node.name, 0)
            seen_names[node.name] = count + 1
            label = node.name if count == 0 else f"{node.name}#{count + 1}"
            tiles.append(TiledInstruction(len(tiles), node.instruction, node.indexing,
                                          node.tile, concrete, operands, label))
            by_key[key] = node_to_tile[node.index] = len(tiles) - 1
        roots = tuple(dict.fromkeys(node_to_tile[r] for r in self.roots))
        return TiledFusion(self.fusion, tile_sizes, self.output_dims, reduction_chunk,
                           tuple(tiles), roots)


def _chunks(tile: SymbolicTile, reduction_chunk: int | None) -> tuple[int, ...] | None:
    if reduction_chunk is None:
        return None
    return tuple(min(reduction_chunk, n) for n in tile.full_range_sizes())


def _check_sizes(analysis: SymbolicTiledFusion, tile_sizes: tuple[int, ...]) -> None:
    dims = analysis.output_dims
    if len(tile_sizes) != len(dims):
        raise TilingError(f"{len(tile_sizes)} tile sizes for an output of rank {len(dims)}"
                          f" {list(dims)}", where=analysis.fusion)
    for i, (t, n) in enumerate(zip(tile_sizes, dims)):
        if not 1 <= t <= max(n, 1):
            raise TilingError(f"tile size {t} of dim {i} is outside [1, {n}]",
                              where=analysis.fusion)


def leaf_dims(instr: HloInstruction) -> tuple[int, ...] | None:
    """The dims of an array result, or of the first leaf of a variadic op's tuple."""
    shape = instr.shape
    if isinstance(shape, TupleShape):
        shape = shape.elements[0] if shape.elements else None
    return tuple(shape.dims) if isinstance(shape, ArrayShape) else None


def fused_computation(module: HloModule, fusion_instr: HloInstruction) -> HloComputation:
    called = fusion_instr.attr("calls", None)
    if fusion_instr.opcode != "fusion" or not isinstance(called, str) \
            or not module.has_computation(called):
        raise TilingError(f"{fusion_instr.opcode} {fusion_instr.name!r} is not a fusion with a"
                          " fused computation", where=fusion_instr.name)
    return module.computation(called)


def _output_dims(computation: HloComputation, fusion: str) -> tuple[tuple[int, ...], list[str],
                                                                  list[IndexingMap]]:
    """The iteration space, the root names and each root's map from the space.

    Outputs of one shape are reached through the identity.  A multi-output reduction (XLA's:
    reduces next to outputs of the reduce input's shape) iterates over the larger shape; a
    reduce output is reached through the projection onto the reduce's kept dims, so a block
    computes it from whole reduced dims of its own (the ranking keeps those dims whole, or
    every block along them would recompute the reduction).
    """
    root = computation.root
    if isinstance(root.shape, ArrayShape):
        return tuple(root.shape.dims), [root.name], [IndexingMap.identity(root.shape.dims)]
    if root.opcode != "tuple":  # a variadic reduce: its outputs share their dims
        leaves = {tuple(e.dims) for e in root.shape.elements if isinstance(e, ArrayShape)}
        if len(leaves) != 1 or len(leaves) != len({type(e) for e in root.shape.elements}):
            raise TilingError(f"root {root.opcode} {root.name!r} has outputs of different"
                              " shapes", where=fusion)
        dims = leaves.pop()
        return dims, [root.name], [IndexingMap.identity(dims)]
    outs = [computation.instruction(o) for o in root.operands]
    dims = {tuple(o.shape.dims) for o in outs if isinstance(o.shape, ArrayShape)}
    if not dims or any(isinstance(o.shape, TupleShape) for o in outs):
        raise TilingError("a multi-output fusion is tiled only when its outputs are arrays",
                          where=fusion)
    space = max(dims, key=lambda ds: (prod(ds), len(ds)))
    maps = []
    for o in outs:
        if tuple(o.shape.dims) == space:
            maps.append(IndexingMap.identity(space))
            continue
        projection = reduce_projection(computation, o.name, space, tuple(o.shape.dims))
        if projection is None:
            raise TilingError("a multi-output fusion is tiled only when all outputs have the same"
                              " dims or are reduces of the largest one's shape; got "
                              f"{sorted(dims)}", where=fusion)
        maps.append(IndexingMap.from_sizes(projection, space))
    return space, [o.name for o in outs], maps


def reduce_projection(computation: HloComputation, name: str, space: tuple[int, ...],
                      dims: tuple[int, ...]) -> tuple[AffineExpr, ...] | None:
    """The map's results from ``space`` to output ``name`` (of ``dims``) when the output is a
    reduce of an input of shape ``space``: ``d_k`` for the reduce's kept dims, ``0`` for unit
    dims a reshape or bitcast added.  Looks through elementwise ops and copies of one shape
    (the kernel emitter's rule), get-tuple-elements of a variadic reduce, and reshapes/bitcasts
    that only add or remove unit dims (``f32[2] -> f32[2,1]``).  ``None`` when the output is
    not such a reduce.

    >>> from fusion.text.parser import parse_hlo
    >>> m = parse_hlo('''HloModule m
    ... add { a = f32[] parameter(0)
    ...   b = f32[] parameter(1)
    ...   ROOT r = f32[] add(a, b) }
    ... ENTRY f {
    ...   p0 = f32[2,8] parameter(0)
    ...   z = f32[] constant(0)
    ...   s = f32[2] reduce(p0, z), dimensions={1}, to_apply=add
    ...   ROOT r = f32[2,1] reshape(s)
    ... }''')
    >>> [str(e) for e in reduce_projection(m.entry, "r", (2, 8), (2, 1))]
    ['d0', '0']
    """
    # pos[i]: the output dim that dim i of the current instruction is (None: a unit dim
    # the output does not have).
    pos: tuple[int | None, ...] = tuple(range(len(dims)))
    element: int | None = None  # the variadic reduce's output a get-tuple-element picked
    while True:
        instr = computation.instruction(name)
        shape = instr.shape
        if element is not None and instr.opcode == "reduce" and isinstance(shape, TupleShape):
            shape = shape.elements[element] if element < len(shape.elements) else None
        if not isinstance(shape, ArrayShape):
            return None
        if instr.opcode == "reduce":
            operand = computation.instruction(instr.operands[0]).shape
            if not isinstance(operand, ArrayShape) or tuple(operand.dims) != space:
                return None
            kept, _ = kept_and_reduced(len(space), instr.attr("dimensions"))
            if tuple(space[k] for k in kept) != tuple(shape.dims):
                return None
            results: list[AffineExpr] = [const(0)] * len(dims)
            for k, j in zip(kept, pos):
                if j is not None:
                    results[j] = d(k)
            return tuple(results)
        if instr.opcode == "get-tuple-element":
            element, name = instr.attr("index"), instr.operands[0]
            continue
        if element is not None:  # only a reduce may sit under a get-tuple-element
            return None
        if traits(instr.opcode).reshape_like:
            pos = _through_unit_reshape(computation, instr, pos)
            if pos is None:
                return None
            name = instr.operands[0]
            continue
        if instr.opcode not in ELEMENTWISE_OPCODES:  # a copy is elementwise
            return None
        same = [o for o in instr.operands
                if getattr(computation.instruction(o).shape, "dims", None) == shape.dims]
        if not same:
            return None
        name = same[0]


def _through_unit_reshape(computation: HloComputation, instr: HloInstruction,
                          pos: tuple[int | None, ...]) -> tuple[int | None, ...] | None:
    """``pos`` carried to the operand of a reshape/bitcast that only adds or removes unit
    dims (its operand index is one of its own dims or ``0`` per operand dim); ``None`` when
    it moves data some other way (a real reshape, a transposing bitcast)."""
    operand = computation.instruction(instr.operands[0]).shape
    if not isinstance(operand, ArrayShape):
        return None
    try:
        maps = output_to_input_indexing(instr, computation)[0]
    except FusionCompilerError:  # the analysis cannot read this op: no unit-dim carry
        return None
    if len(maps) != 1:
        return None
    m = pin_point_variables(next(iter(maps)).simplify(), tuple(instr.shape.dims))
    out: list[int | None] = []
    for size, e in zip(operand.dims, m.results):
        if isinstance(e, DimExpr):
            out.append(pos[e.index])
        elif isinstance(e, Constant) and e.value == 0 and size == 1:
            out.append(None)
        else:
            return None
    used = [e.index for e in m.results if isinstance(e, DimExpr)]
    nonunit = [i for i, n in enumerate(instr.shape.dims) if n != 1]
    if sorted(used) != sorted(set(used)) or not set(nonunit) <= set(used):
        return None
    return tuple(out)


def analyze_fusion_tiling(module: HloModule, fusion_instr: HloInstruction) -> SymbolicTiledFusion:
    """Every instruction of the fused computation with its map(s) from the output and its
    symbolic tile; independent of the tile sizes (reuse it across candidates)."""
    computation = fused_computation(module, fusion_instr)
    return analyze_computation_tiling(computation, fusion_instr.name)


def analyze_computation_tiling(computation: HloComputation, name: str) -> SymbolicTiledFusion:
    """``analyze_fusion_tiling`` for a bare computation (e.g. a single-op wrapper)."""
    out_dims, root_names, root_maps = _output_dims(computation, name)
    keys: dict[tuple[str, IndexingMap], int] = {}
    pending: list[tuple[str, IndexingMap]] = []
    operand_keys: dict[int, list[tuple[str, IndexingMap]]] = {}
    op_maps_cache: dict[str, tuple] = {}
    for r, m in zip(root_names, root_maps):
        if (r, m) not in keys:
            keys[(r, m)] = len(keys)
            pending.append((r, m))
    entries: list[tuple[str, IndexingMap]] = list(keys)
    while pending:
        name_, m = pending.pop()
        idx = keys[(name_, m)]
        instr = computation.instruction(name_)
        if name_ not in op_maps_cache:
            try:
                op_maps_cache[name_] = _op_maps(instr, computation)
            except FusionCompilerError as err:
                raise TilingError(f"no indexing for {instr.opcode} {name_!r}: {err}",
                                  where=name) from None
        children = []
        for operand_name, maps in zip(instr.operands, op_maps_cache[name_]):
            # (One map needs no sorting by its text: the printing is the costly part.)
            first = list(maps) if len(maps) <= 1 else sorted(maps, key=str)[:1]
            for op_map in first or [IndexingMap.undefined()]:
                # A range variable the operand does not depend on (the row reduction of a
                # mean read inside the variance's reduction) must not widen its tile: as XLA
                # does after composing, drop the unused symbols.
                composed = _composed(op_map, m)
                key = (operand_name, composed)
                if key not in keys:
                    keys[key] = len(keys)
                    entries.append(key)
                    pending.append(key)
                children.append(key)
        operand_keys[idx] = children
    root_keys = [keys[(r, m)] for r, m in zip(root_names, root_maps)]
    order = _post_order(entries, keys, operand_keys, root_keys)
    new_index = {old: new for new, old in enumerate(order)}
    nodes = []
    for old in order:
        name_, m = entries[old]
        instr = computation.instruction(name_)
        dims = leaf_dims(instr)
        tile = _tile(m, dims, out_dims)
        ops = tuple(new_index[keys[k]] for k in operand_keys.get(old, []))
        nodes.append(SymbolicNode(new_index[old], instr, m, tile, ops))
    roots = tuple(new_index[k] for k in root_keys)
    return SymbolicTiledFusion(name, computation, out_dims, tuple(nodes), roots)


# The fusion pass analyses every candidate it weighs, and each grows from an analysed part
# by a few instructions: the maps composed and the tiles derived are pure functions of the
# maps' exact representation, so they are shared across analyses (bounded memos).
_MEMO_LIMIT = 1 << 15
_composed_memo: dict[tuple, IndexingMap] = {}
_tile_memo: dict[tuple, SymbolicTile | NotTileable] = {}


def _composed(op_map: IndexingMap, m: IndexingMap) -> IndexingMap:
    """``remove_unused_symbols(compose(op_map, m))``, memoized by representation."""
    key = (op_map.structural_key(), m.structural_key())
    hit = _composed_memo.get(key)
    if hit is None:
        if len(_composed_memo) >= _MEMO_LIMIT:
            _composed_memo.clear()
        hit = _composed_memo[key] = remove_unused_symbols(compose(op_map, m))
    return hit


_op_maps_memo: dict[tuple, tuple] = {}


def _op_maps(instr: HloInstruction, computation: HloComputation) -> tuple:
    """``output_to_input_indexing(instr, computation)``, memoized by the op's signature
    (opcode, shapes, attributes) unless its maps name other instructions (runtime
    variables)."""
    key = (instr.opcode, instr.shape, instr.attributes,
           tuple(computation.instruction(o).shape for o in instr.operands))
    try:
        hit = _op_maps_memo.get(key)
    except TypeError:  # an attribute value that cannot be hashed: no memo
        return output_to_input_indexing(instr, computation)
    if hit is None:
        hit = output_to_input_indexing(instr, computation)
        if any(m.rt_vars for maps in hit for m in maps):
            return hit
        if len(_op_maps_memo) >= _MEMO_LIMIT:
            _op_maps_memo.clear()
        _op_maps_memo[key] = hit
    return hit


def _tile(m: IndexingMap, dims, out_dims) -> SymbolicTile | NotTileable:
    """``symbolic_tile(m, dims, out_dims)``, memoized by representation."""
    key = (m.structural_key(), dims, tuple(out_dims))
    hit = _tile_memo.get(key)
    if hit is None:
        if len(_tile_memo) >= _MEMO_LIMIT:
            _tile_memo.clear()
        hit = _tile_memo[key] = symbolic_tile(m, dims, out_dims)
    return hit


def _post_order(entries, keys, operand_keys, roots) -> list[int]:
    order: list[int] = []
    state: dict[int, int] = {}
    stack = [(r, False) for r in reversed(roots)]
    while stack:
        idx, expanded = stack.pop()
        if expanded:
            if state.get(idx) != 2:
                state[idx] = 2
                order.append(idx)
            continue
        if state.get(idx):
            continue
        state[idx] = 1
        stack.append((idx, True))
        for k in reversed(operand_keys.get(idx, [])):
            if not state.get(keys[k]):
                stack.append((keys[k], False))
    return order


def tile_fusion(module: HloModule, fusion_instr: HloInstruction, tile_sizes: Sequence[int],
                reduction_chunk: int | None = None) -> TiledFusion:
    """The tiled instruction graph of ``fusion_instr`` for output tiles of ``tile_sizes``.

    Reduced dims are whole (persistent) unless ``reduction_chunk`` splits them into a loop of
    chunks.  Raises ``TilingError`` (with the instruction and the violated constraint) when a
    tile would not be exact.  Legality for Triton is checked separately
    (``tiling.policy.legality``).  See the module docstring for an example.
    """
    return analyze_fusion_tiling(module, fusion_instr).instantiate(tile_sizes, reduction_chunk)
