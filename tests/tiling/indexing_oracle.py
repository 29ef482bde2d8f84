"""Brute-force oracle of the indexing tests: run an HLO module with the reference evaluator on
inputs whose elements hold their own linear index, and compare, for every output element,
the input elements the maps point at with the element the evaluator actually copied."""
from __future__ import annotations

from collections import defaultdict

import numpy as np

from fusion.evaluator import evaluate
from fusion.text.parser import parse_hlo
from tiling.maps.indexing_map import IndexingMap, enumerate_points

PAD_VALUE = -1


def read_sets(m: IndexingMap, runtime=None) -> dict[tuple, set]:
    """Output point -> the operand indices ``m`` yields there.  Runtime variables take the
    values ``runtime(var, dims)`` returns (what the program actually read)."""
    out: dict[tuple, set] = defaultdict(set)
    nr = m.num_range_vars
    for dims, syms in enumerate_points(m):
        if m.num_rt_vars:
            want = tuple(runtime(v, dims) for v in m.rt_vars)
            if tuple(syms[nr:]) != want:
                continue
        out[dims].add(m.evaluate(dims, syms))
    return out


def runtime_reader(module, arrays):
    """Reads a runtime variable's value from the ENTRY parameter it names, clamped to its
    feasible values as XLA clamps dynamic offsets and gather indices."""
    def read(var, dims):
        number = var.hlo.attr("parameter_number")
        value = int(arrays[number][var.map.evaluate(dims)])
        iv = var.feasible_values
        return min(max(value, iv.lower), iv.upper)
    return read


def iota_input(dims, offset=0, dtype=np.int32):
    return (np.arange(int(np.prod(dims)), dtype=dtype) + offset).reshape(dims)


def check_copy(module, maps_per_operand, arrays, data_operands):
    """Every output element equals exactly the one element that the maps of the data
    operands (those filled with ``iota_input`` at distinct offsets) yield there; padding
    elements (``PAD_VALUE``) are read through no map."""
    (result,) = evaluate(module, *arrays)
    reader = runtime_reader(module, arrays)
    sets = {k: [read_sets(m, reader) for m in maps_per_operand[k]] for k in data_operands}
    offsets = sorted((int(arrays[k].flat[0]), k) for k in data_operands if arrays[k].size)
    for out_index in np.ndindex(*result.shape):
        v = int(result[out_index])
        expected: dict[int, set] = {k: set() for k in data_operands}
        if v != PAD_VALUE:
            k = max((o, k) for o, k in offsets if o <= v)[1]
            base = int(arrays[k].flat[0])
            expected[k] = {tuple(int(i) for i in np.unravel_index(v - base, arrays[k].shape))}
        for k in data_operands:
            got = set().union(*(s.get(out_index, set()) for s in sets[k]))
            assert got == expected[k], (out_index, k, got, expected[k])


def parse(text: str):
    return parse_hlo(text)
