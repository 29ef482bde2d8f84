"""Indexing through computations: composing per-op maps along every path of a fusion.

Output -> input: starting from the identity on the root (on one leaf of a tuple root), each
instruction, visited after all its users, passes every map that reaches it through its own
per-operand maps (``compose(op_map, map)``) to its operands.  Each instruction is visited
once and keeps a *set* of maps, deduplicated up to simplification, so shared producers cost
one visit each: the work grows with the number of instructions times the number of distinct
maps, not with the number of paths.  Input -> output is the mirror image, from one
parameter forward.  A ``get-tuple-element`` routes maps to the leaf it names of a multi-output
producer (a variadic reduce in a fusion).  Undefined maps compose to undefined.

The seed's ``p0 + transpose(p0)``: one parameter read through two maps.

>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... f {
...   p0 = f32[4,4] parameter(0)
...   t = f32[4,4] transpose(p0), dimensions={1,0}
...   ROOT a = f32[4,4] add(p0, t)
... }
... ENTRY e {
...   x = f32[4,4] parameter(0)
...   ROOT r = f32[4,4] fusion(x), kind=kLoop, calls=f
... }''')
>>> maps = output_to_input_indexing_of_computation(m.computation("f"), m)
>>> sorted(str(x) for x in maps["p0"])
['(d0, d1) -> (d0, d1), domain: d0 in [0, 3], d1 in [0, 3]', '(d0, d1) -> (d1, d0), domain: d0 in [0, 3], d1 in [0, 3]']
"""
from __future__ import annotations

from functools import lru_cache

from fusion.cache_keys import ByIdentity
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from tiling.indexing_analysis.op_indexing import op_input_to_output, op_output_to_input
from tiling.indexing_analysis.operands import Operand, array_dims, num_outputs
from tiling.maps.indexing_map import IndexingMap, compose


def _topological_order(computation: HloComputation) -> list[HloInstruction]:
    """Instructions reachable from the root, producers first (iterative: chains are long)."""
    order: list[HloInstruction] = []
    state: dict[str, int] = {}
    stack: list[tuple[str, bool]] = [(computation.root_name, False)]
    while stack:
        name, expanded = stack.pop()
        if expanded:
            state[name] = 2
            order.append(computation.instruction(name))
            continue
        if state.get(name):
            continue
        state[name] = 1
        stack.append((name, True))
        for operand in reversed(computation.instruction(name).operands):
            if not state.get(operand):
                stack.append((operand, False))
    return order


def _operands(instr: HloInstruction, computation: HloComputation) -> tuple[Operand, ...]:
    out = []
    for name in instr.operands:
        producer = computation.instruction(name)
        out.append(Operand(producer.shape, producer))
    return tuple(out)


def _fused_computation(instr: HloInstruction, module: HloModule) -> HloComputation:
    return module.computation(instr.attr("calls"))


def _compose(op_map: IndexingMap, m: IndexingMap) -> IndexingMap:
    # As XLA's ComposeIndexingMaps: a symbol the composed map no longer uses (a reduced dim
    # whose value does not reach this producer) is dropped.
    return compose(op_map, m).remove_unused_symbols()


def _leaf_of(consumer: HloInstruction) -> int:
    return consumer.attr("index") if consumer.opcode == "get-tuple-element" else 0


def _add(target: dict[int, dict], leaf: int, maps) -> None:
    bucket = target.setdefault(leaf, {})
    for m in maps:
        if m.is_known_empty:
            continue
        bucket.setdefault(m, m)  # keyed by equality up to simplification


def _op_maps(instr, computation, module, index, cache, fusion_maps, op_maps):
    """``instr``'s maps for ``index`` (memoized in ``cache``), one tuple per operand or output:
    a nested fusion's from ``fusion_maps``, any other op's single map from ``op_maps``."""
    key = (instr.name, index)
    hit = cache.get(key)
    if hit is None:
        if instr.opcode == "fusion" and module is not None:
            hit = tuple(tuple(s) for s in fusion_maps(instr, module, index))
        else:
            hit = tuple((m,) for m in op_maps(instr, _operands(instr, computation), index))
        cache[key] = hit
    return hit


@lru_cache(maxsize=256)
def _computation_o2i(computation: HloComputation, same_module: ByIdentity,
                     output_index: int) -> dict[str, frozenset[IndexingMap]]:
    module = same_module.obj
    root = computation.root
    reached: dict[str, dict[int, dict]] = {}
    root_dims = array_dims(root.shape, output_index)
    _add(reached.setdefault(root.name, {}), output_index, [IndexingMap.identity(root_dims)])
    cache: dict = {}
    for instr in reversed(_topological_order(computation)):
        for leaf, bucket in sorted(reached.get(instr.name, {}).items()):
            op_maps = _op_maps(instr, computation, module, leaf, cache,
                               fusion_output_to_input, op_output_to_input)
            for operand_name, maps_k in zip(instr.operands, op_maps):
                target = reached.setdefault(operand_name, {})
                composed = [_compose(op_map, m) for op_map in maps_k if not op_map.is_known_empty
                            for m in bucket]
                _add(target, _leaf_of(instr), composed)
    return {
        name: frozenset(m for bucket in leaves.values() for m in bucket)
        for name, leaves in reached.items()
    }


def output_to_input_indexing_of_computation(
    computation: HloComputation, module: HloModule | None = None, output_index: int = 0,
) -> dict[str, frozenset[IndexingMap]]:
    """For every instruction reached from the root, the maps from the computation's output
    ``output_index`` (a leaf of a tuple root) to that instruction's output.  A tuple-shaped
    instruction (a variadic reduce) gets the union of the maps to its leaves, which share
    their dims.  ``module`` resolves nested fusions.  Results are cached per computation."""
    return _computation_o2i(computation, ByIdentity(module), output_index)


def fusion_output_to_input(
    fusion: HloInstruction, module: HloModule, output_index: int = 0,
) -> tuple[frozenset[IndexingMap], ...]:
    """Per fusion operand (by parameter number), the maps from fusion output
    ``output_index`` to it; an unused parameter gets an empty set."""
    computation = _fused_computation(fusion, module)
    per_instruction = output_to_input_indexing_of_computation(computation, module, output_index)
    return tuple(per_instruction.get(p.name, frozenset()) for p in computation.parameters)


@lru_cache(maxsize=256)
def _computation_i2o(computation: HloComputation, same_module: ByIdentity,
                     parameter_number: int) -> tuple[frozenset[IndexingMap], ...]:
    module = same_module.obj
    param = computation.parameters[parameter_number]
    reached: dict[str, dict[int, dict]] = {}
    _add(reached.setdefault(param.name, {}), 0,
         [IndexingMap.identity(array_dims(param.shape))])
    cache: dict = {}
    for instr in _topological_order(computation):
        for k, operand_name in enumerate(instr.operands):
            leaves = reached.get(operand_name)
            if not leaves:
                continue
            bucket = leaves.get(_leaf_of(instr), {})
            if not bucket:
                continue
            per_output = _op_maps(instr, computation, module, k, cache,
                                  fusion_input_to_output, op_input_to_output)
            target = reached.setdefault(instr.name, {})
            for leaf, maps_j in enumerate(per_output):
                _add(target, leaf, [_compose(op_map, m) for op_map in maps_j
                                    if not op_map.is_known_empty for m in bucket])
    root_leaves = reached.get(computation.root_name, {})
    return tuple(frozenset(root_leaves.get(j, {})) for j in range(num_outputs(
        computation.root.shape)))


def fusion_input_to_output(
    fusion: HloInstruction, module: HloModule, operand_index: int,
) -> tuple[frozenset[IndexingMap], ...]:
    """Per fusion output (tuple leaf), the maps from fusion operand ``operand_index`` to it."""
    return _computation_i2o(_fused_computation(fusion, module), ByIdentity(module), operand_index)
