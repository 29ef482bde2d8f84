"""Fusion roots and heroes, following XLA:GPU's ``FindNonTrivialHero``.

The *hero* of a fusion output is the op that shapes the code of the whole fusion (seed
``gpu_emitters.th.txt``): a reduce, a transpose that needs a shared-memory shuffle, a
concatenate.  It is found by walking from the output operand-wards through *intermediate*
ops: elementwise ops, bitcasts, and reshapes/transposes/copies that are bitcasts.  As in XLA
(``ir_emission_utils.cc``) there are two walks:

1. from the root through intermediates with **one** operand, stopping at a parameter; if
   this reaches a reduce, the reduce is the hero;
2. a breadth-first walk through intermediates with up to **three** operands looking for a
   single tiled transpose (then a single concatenate); every op reachable *from* that hero
   towards the root must itself be an intermediate, a tuple or a parameter.

Otherwise the root is its own hero.

>>> from fusion.ir.hlo_module import HloComputation, HloInstruction
>>> from fusion.ir.shape import ArrayShape
>>> f = lambda *d: ArrayShape("f32", d)
>>> comp = HloComputation("c", (
...     HloInstruction("p", "parameter", f(64, 128), (), (("parameter_number", 0),)),
...     HloInstruction("t", "transpose", f(128, 64), ("p",), (("dimensions", (1, 0)),)),
...     HloInstruction("e", "exponential", f(128, 64), ("t",))), "e")
>>> find_hero(comp, "e")
'e'
>>> find_non_trivial_hero(comp, "e")
't'
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from fusion.errors import HloVerifyError, UnsupportedOpError
from fusion.ir.hlo_module import HloComputation, HloInstruction
from fusion.opcodes import ELEMENTWISE_OPCODES, traits
from fusion.ir.shape import ArrayShape, TupleShape, flatten_shape


# ir_emission_utils.cc: a transpose is worth the shared-memory emitter only when both swapped
# dims are >= 16, or both >= 8 with a product of at least 64 * 128 elements.
MIN_DIMENSION_TO_TRANSPOSE_TILED = 16
MIN_DIMENSION_TO_TRANSPOSE_TILED_2 = 8
MIN_TOTAL_DIMENSIONS_TO_TRANSPOSE_TILED = 64 * 128


@dataclass(frozen=True)
class TransposeDescription:
    """A transpose (or layout-changing copy) seen as a normalized physical 3-D transpose.

    ``dimensions`` are the normalized input dims (physical, major to minor, size-1 dims
    dropped and dims that stay adjacent merged); ``permutation`` is ``(0, 2, 1)`` or
    ``(2, 1, 0)``, as XLA's ``TransposeDescription``.
    """

    instruction: str
    dimensions: tuple[int, int, int]
    permutation: tuple[int, int, int]

    def is_equivalent(self, other: "TransposeDescription") -> bool:
        return self.dimensions == other.dimensions and self.permutation == other.permutation


def operand(computation: HloComputation, instr: HloInstruction, index: int) -> HloInstruction:
    """The ``index``-th operand of ``instr``; an ``HloVerifyError`` naming it if absent."""
    if index >= len(instr.operands):
        raise HloVerifyError(
            f"{instr.opcode} has {len(instr.operands)} operands, expected at least {index + 1}",
            where=instr.name,
        )
    name = instr.operands[index]
    if not computation.has_instruction(name):
        raise HloVerifyError(
            f"operand {name!r} is not in computation {computation.name!r}", where=instr.name
        )
    return computation.instruction(name)


def array_shape_of(instr: HloInstruction) -> ArrayShape:
    """The array shape of ``instr``; the first element for a tuple (variadic reduce)."""
    leaves = flatten_shape(instr.shape)
    if not leaves:
        raise UnsupportedOpError("an empty tuple shape has no array", where=instr.name)
    return leaves[0]


def is_elementwise(computation: HloComputation, instr: HloInstruction) -> bool:
    """XLA's ``IsElementwise``: the opcode list, with bitcast-convert only at equal widths."""
    if instr.opcode not in ELEMENTWISE_OPCODES:
        return False
    if instr.opcode == "bitcast-convert":
        src = array_shape_of(operand(computation, instr, 0))
        return src.element_type.bits == array_shape_of(instr).element_type.bits
    return True


def fusion_roots(computation: HloComputation) -> tuple[str, ...]:
    """The fusion outputs: the operands of a root tuple, else the root itself.

    A ``get-tuple-element`` of a multi-output op inside the root tuple stands for that op,
    as XLA's fusion adaptor resolves it.  Nested tuples are not supported (seed: tuples).
    """
    root = computation.root
    if root.opcode != "tuple":
        return (root.name,)
    out: list[str] = []
    for name in root.operands:
        instr = computation.instruction(name)
        if instr.opcode == "get-tuple-element":
            instr = operand(computation, instr, 0)
        if instr.opcode == "tuple":
            raise UnsupportedOpError(
                "nested tuples in a fusion root are not supported", where=instr.name
            )
        out.append(instr.name)
    return tuple(out)


def _physical_order(shape: ArrayShape) -> list[int]:
    """Logical dims from major to minor."""
    return list(reversed(shape.effective_layout.minor_to_major))


def normalized_physical_transpose(
    source: ArrayShape, result: ArrayShape, permutation: tuple[int, ...]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The physical transpose done by an op whose result dim ``i`` is source dim ``perm[i]``.

    Returns ``(input_dims, perm)``: the input's physical dims (major to minor) with size-1
    dims dropped and dims that stay adjacent and in order merged, and the permutation of
    those groups (result group ``k`` is input group ``perm[k]``).  One group means the op
    moves no data (a bitcast).

    >>> normalized_physical_transpose(ArrayShape("f32", (20, 160, 170)),
    ...                               ArrayShape("f32", (170, 160, 20)), (2, 1, 0))
    ((20, 160, 170), (2, 1, 0))
    >>> from fusion.ir.layout import Layout
    >>> normalized_physical_transpose(ArrayShape("f32", (64, 32), Layout((0, 1))),
    ...                               ArrayShape("f32", (64, 32), Layout((1, 0))), (0, 1))
    ((32, 64), (1, 0))
    """
    pos_in = {d: k for k, d in enumerate(_physical_order(source))}
    pairs = [
        (pos_in[permutation[d]], result.dims[d])
        for d in _physical_order(result)
        if result.dims[d] != 1
    ]
    rank_of = {p: r for r, p in enumerate(sorted(p for p, _ in pairs))}
    groups: list[list[int]] = []  # [first input rank, last input rank, size]
    for p, size in pairs:
        r = rank_of[p]
        if groups and groups[-1][1] + 1 == r:
            groups[-1][1] = r
            groups[-1][2] *= size
        else:
            groups.append([r, r, size])
    by_input = sorted(range(len(groups)), key=lambda g: groups[g][0])
    input_index = {g: i for i, g in enumerate(by_input)}
    return (
        tuple(groups[g][2] for g in by_input),
        tuple(input_index[g] for g in range(len(groups))),
    )


def _layout_change(computation: HloComputation, instr: HloInstruction):
    """``(source, result, permutation)`` for a transpose or copy of arrays, else ``None``."""
    if not traits(instr.opcode).physical_transpose or not instr.operands:
        return None
    source = operand(computation, instr, 0).shape
    result = instr.shape
    if not isinstance(source, ArrayShape) or not isinstance(result, ArrayShape):
        return None
    if instr.opcode == "transpose":
        perm = tuple(instr.attr("dimensions"))
    else:
        perm = tuple(range(result.rank))
    if sorted(perm) != list(range(result.rank)) or source.rank != result.rank:
        raise HloVerifyError(
            f"dimensions {perm} are not a permutation of the rank-{source.rank} operand",
            where=instr.name,
        )
    return source, result, perm


def _tiles_block(source: ArrayShape, result: ArrayShape) -> bool:
    return source.effective_layout.is_tiled or result.effective_layout.is_tiled


def transpose_is_bitcast(computation: HloComputation, instr: HloInstruction) -> bool:
    """A transpose/copy that keeps the physical order of the elements (moves no data)."""
    change = _layout_change(computation, instr)
    if change is None:
        return False
    source, result, perm = change
    if _tiles_block(source, result):
        return perm == tuple(range(len(perm))) and (
            source.effective_layout == result.effective_layout
        )
    return len(normalized_physical_transpose(source, result, perm)[1]) <= 1


def _strides(shape: ArrayShape) -> list[int]:
    strides = [0] * shape.rank
    step = 1
    for d in shape.effective_layout.minor_to_major:
        strides[d] = step
        step *= shape.dims[d]
    return strides


def _merged_strides(shape: ArrayShape) -> list[tuple[int, int]]:
    """``(size, stride)`` of the logical dims, major to minor, with size-1 dims dropped and
    each dim merged into its major neighbour when that one continues it in memory.

    The merged form is unique for the map from row-major logical index to physical offset,
    so two shapes hold every element at the same offset exactly when their forms are equal.
    """
    strides = _strides(shape)
    out: list[tuple[int, int]] = []
    for d in range(shape.rank):
        size = shape.dims[d]
        if size == 1:
            continue
        if out and out[-1][1] == strides[d] * size:
            out[-1] = (out[-1][0] * size, strides[d])
        else:
            out.append((size, strides[d]))
    return out


def reshape_is_bitcast(source: ArrayShape, result: ArrayShape) -> bool:
    """XLA's ``ReshapeIsBitcast``: the reshape keeps every element at its physical offset.

    >>> from fusion.ir.layout import Layout
    >>> reshape_is_bitcast(ArrayShape("f32", (4, 6)), ArrayShape("f32", (24,)))
    True
    >>> reshape_is_bitcast(ArrayShape("f32", (4, 6), Layout((0, 1))), ArrayShape("f32", (24,)))
    False
    """
    if _tiles_block(source, result):
        return source.dims == result.dims and source.effective_layout == result.effective_layout
    if source.num_elements != result.num_elements:
        return False
    if source.num_elements == 0:
        return True

    return _merged_strides(source) == _merged_strides(result)


def is_bitcast_op(computation: HloComputation, instr: HloInstruction) -> bool:
    """A bitcast, or a reshape/transpose/copy that is one."""
    if instr.opcode == "bitcast":
        return True
    if instr.opcode == "reshape":
        source = operand(computation, instr, 0).shape
        return isinstance(source, ArrayShape) and isinstance(instr.shape, ArrayShape) and (
            reshape_is_bitcast(source, instr.shape)
        )
    if traits(instr.opcode).physical_transpose:
        return transpose_is_bitcast(computation, instr)
    return False


def _is_constant_like(computation: HloComputation, instr: HloInstruction) -> bool:
    while traits(instr.opcode).keeps_constant and instr.operands:
        instr = operand(computation, instr, 0)
    return instr.opcode == "constant"


def is_intermediate(
    computation: HloComputation,
    instr: HloInstruction,
    allowed_operand_count: int = 1,
    ignore_constant_operands: bool = False,
) -> bool:
    """XLA's ``IsIntermediate``: an op a hero search may walk through.

    Elementwise ops (but not a copy that moves data: XLA walks "+bitcast, -copy"), bitcasts,
    and reshapes/transposes that are bitcasts, with 1 to ``allowed_operand_count`` operands.
    XLA counts every operand; ``ignore_constant_operands`` does not count constants and
    broadcasts of constants (a looser rule, off by default).
    """
    count = len(instr.operands)
    if ignore_constant_operands and count > 1:
        count = sum(
            1 for k in range(count)
            if not _is_constant_like(computation, operand(computation, instr, k))
        )
    if count == 0 or count > allowed_operand_count:
        return False
    if instr.opcode == "copy":
        return transpose_is_bitcast(computation, instr)
    if is_elementwise(computation, instr):
        return True
    return is_bitcast_op(computation, instr)


def transpose_description(
    computation: HloComputation, instr: HloInstruction
) -> TransposeDescription | None:
    """XLA's ``GetDescriptionForTiledTransposeEmitter`` for a transpose or a copy.

    The physical transpose, normalized, must be ``(0, 2, 1)`` (a 2-D one is read as
    ``[1, a, b]``) or ``(2, 1, 0)``, and the swapped dims must be large enough (see the
    ``MIN_*`` constants); otherwise the loop emitter reads strided and is faster.
    """
    change = _layout_change(computation, instr)
    if change is None:
        return None
    source, result, perm = change
    if _tiles_block(source, result):
        return None
    dims, norm = normalized_physical_transpose(source, result, perm)
    if norm == (1, 0):
        dims, norm = (1,) + dims, (0, 2, 1)
    if norm == (0, 2, 1):
        a, b = dims[2], dims[1]
    elif norm == (2, 1, 0):
        a, b = dims[2], dims[0]
    else:
        return None
    big = a >= MIN_DIMENSION_TO_TRANSPOSE_TILED and b >= MIN_DIMENSION_TO_TRANSPOSE_TILED
    medium = (
        a >= MIN_DIMENSION_TO_TRANSPOSE_TILED_2
        and b >= MIN_DIMENSION_TO_TRANSPOSE_TILED_2
        and a * b >= MIN_TOTAL_DIMENSIONS_TO_TRANSPOSE_TILED
    )
    if not (big or medium):
        return None
    return TransposeDescription(instr.name, dims, norm)  # type: ignore[arg-type]


def _contained_operands(computation: HloComputation, instr: HloInstruction):
    # Parameters are the fusion's boundary: XLA's fusion adaptor never walks into them.
    for k in range(len(instr.operands)):
        op = operand(computation, instr, k)
        if op.opcode != "parameter":
            yield op


def _search_hero(computation: HloComputation, start: HloInstruction, predicate) -> str | None:
    """Breadth-first from ``start`` through 3-operand intermediates to one op matching."""
    hero: str | None = None
    seen = {start.name}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        if predicate(node):
            if hero is not None:
                return None  # several candidates: no hero
            hero = node.name
            continue
        if not is_intermediate(computation, node, 3):
            continue
        for op in _contained_operands(computation, node):
            if op.name not in seen:
                seen.add(op.name)
                queue.append(op)
    if hero is None:
        return None
    # Everything computed from the hero must be an index-preserving epilogue.
    users = computation.users
    seen = set(users[hero])
    queue = deque(seen)
    while queue:
        node = computation.instruction(queue.popleft())
        # XLA also lets a parameter through here; a parameter is never a user.
        if node.opcode != "tuple" and not is_intermediate(computation, node, 3):
            return None
        for u in users[node.name]:
            if u not in seen:
                seen.add(u)
                queue.append(u)
    return hero


def _walk_unary(
    computation: HloComputation, instr: HloInstruction, ignore_constant_operands: bool
) -> HloInstruction:
    hero = instr
    while is_intermediate(computation, hero, 1, ignore_constant_operands):
        candidates = [
            operand(computation, hero, k)
            for k in range(len(hero.operands))
            if not (
                ignore_constant_operands
                and _is_constant_like(computation, operand(computation, hero, k))
            )
        ]
        # An op of constants only (found by fuzzing) has nothing non-trivial below it.
        if not candidates or candidates[0].opcode == "parameter":
            break
        hero = candidates[0]
    return hero


def find_non_trivial_hero(
    computation: HloComputation, root_name: str, *, ignore_constant_operands: bool = False
) -> str:
    """The hero of output ``root_name`` (XLA's ``FindNonTrivialHero``): see the module doc."""
    instr = computation.instruction(root_name)
    hero = _walk_unary(computation, instr, ignore_constant_operands)
    transpose = _search_hero(
        computation, hero, lambda n: transpose_description(computation, n) is not None
    )
    if transpose is not None:
        return transpose
    concat = _search_hero(computation, hero, lambda n: n.opcode == "concatenate")
    if concat is not None:
        return concat
    return hero.name if hero.opcode == "reduce" else instr.name


def find_hero(computation: HloComputation, root_name: str) -> str:
    """XLA's plain ``FindHero``: only the unary walk, and only a reduce counts as a hero."""
    instr = computation.instruction(root_name)
    hero = _walk_unary(computation, instr, False)
    return hero.name if hero.opcode == "reduce" else instr.name


def find_heroes(
    computation: HloComputation, *, ignore_constant_operands: bool = False
) -> tuple[tuple[str, str], ...]:
    """``(root, hero)`` for every fusion output, in output order."""
    return tuple(
        (r, find_non_trivial_hero(computation, r, ignore_constant_operands=ignore_constant_operands))
        for r in fusion_roots(computation)
    )


def num_elements(instr: HloInstruction) -> int:
    shape = instr.shape
    if isinstance(shape, TupleShape):
        return math.prod(array_shape_of(instr).dims)
    return shape.num_elements
