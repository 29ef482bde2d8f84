"""The fuzzer's back-end stages: tile, compile, and run under the interpreter against the evaluator.

``backend_stages(["tile", "compile", "run"])`` gives the ``extra`` stages of
``fuzz_pipeline.with_extra_stages``: ``tile`` ranks the tilings of every fusion
(``tiling.policy.candidates.tiling_candidates``), ``compile`` compiles the module
(``triton_backend.compile_hlo``), and ``run`` calls the compiled module on the same random
inputs the front end evaluated (``npz_io.random_inputs``, seed 0) and compares every output
with the reference evaluator (``host.output_check.compare_output``, the element type's
tolerance).  A mismatch raises ``WrongResult``, which ``run_pipeline`` reports as ``WRONG``.

Eigen- and singular vectors (``eigh``, ``svd`` library calls) are defined only up to the sign
of each vector, and LAPACK builds differ in their last bits (n·eps·|A|: on a 7x7 f32 ``eigh``,
XLA itself differs from NumPy by 3e-6 where the f32 tolerance allows 1e-6); torch and NumPy
choose differently, so a mismatch in a module holding such a call is ``NotRun`` (the results
are checked by reconstruction in ``tests/*/test_library_calls.py``), not ``WRONG``.

Both sides bound while loops at ``MAX_WHILE_ITERATIONS`` (a mutated loop bound must end in a
clear error, not a hang).  Modules with more than ``RUN_MAX_ELEMENTS`` elements in one value
are compiled but not run (``NotRun``): the interpreter pays per element, and a case must stay
well under a second.

>>> stages = backend_stages(["compile", "run"])
>>> sorted(stages)
['compile', 'run']
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from fusion.evaluator import evaluate
from fusion.ir.hlo_module import HloModule
from fusion.evaluator.npz_io import random_inputs
from fusion.ir.shape import flatten_shape
from tiling.policy.candidates import tiling_candidates
from triton_backend import compile_hlo
from triton_backend.driver.op_coverage import library_call_sites
from triton_backend.host.input_validation import tensor_from_numpy, tensor_to_numpy
from triton_backend.host.output_check import compare_output
from tests.fuzz.fuzz_pipeline import MAX_WHILE_ITERATIONS, NotRun, WrongResult

RUN_MAX_ELEMENTS = 1 << 14
STAGE_NAMES = ("tile", "compile", "run")
#: Library routines whose results LAPACK fixes only up to vector signs and rounding.
UNPINNED_ROUTINES = frozenset({"eigh", "svd"})


def largest_value(module: HloModule) -> int:
    """Elements of the largest array any instruction of ``module`` declares."""
    return max((math.prod(leaf.dims) for comp in module.computations
                for instr in comp.instructions for leaf in flatten_shape(instr.shape)),
               default=0)


def backend_stages(names: Sequence[str]) -> dict[str, Callable[[HloModule], None]]:
    """name -> stage function of the parsed module, for ``names`` in ``STAGE_NAMES`` order."""
    unknown = [n for n in names if n not in STAGE_NAMES]
    if unknown:
        raise ValueError(f"unknown stage(s) {', '.join(unknown)}; known: {', '.join(STAGE_NAMES)}")
    compiled_for: dict[int, object] = {}

    def tile(module: HloModule) -> None:
        for _, instr in module.fusions():
            tiling_candidates(module, instr)

    def compile_(module: HloModule) -> None:
        compiled_for.clear()
        compiled_for[id(module)] = compile_hlo(module)

    def run(module: HloModule) -> None:
        compiled = compiled_for.pop(id(module), None) or compile_hlo(module)
        if largest_value(module) > RUN_MAX_ELEMENTS:
            raise NotRun(f"a value of {largest_value(module)} elements (> {RUN_MAX_ELEMENTS})")
        inputs = random_inputs(module, seed=0)
        reference = evaluate(module, *inputs, max_while_iterations=MAX_WHILE_ITERATIONS)
        params = module.entry.parameters
        tensors = [tensor_from_numpy(a, p.shape.dtype, compiled.device)
                   for a, p in zip(inputs, params)]
        results = compiled(*tensors, max_while_iterations=MAX_WHILE_ITERATIONS)
        outputs = [tensor_to_numpy(t) for t in results]
        types = [leaf.dtype for leaf in flatten_shape(module.entry.root.shape)]
        if len(outputs) != len(reference):
            raise WrongResult(f"{len(outputs)} outputs, the evaluator gives {len(reference)}")
        failed = [c for c in (compare_output(f"o{n}", ref, out, dtype) for n, (ref, out, dtype)
                              in enumerate(zip(reference, outputs, types))) if not c.passed]
        if failed:
            unpinned = sorted({s.routine for s in library_call_sites(module)} & UNPINNED_ROUTINES)
            if unpinned:
                raise NotRun(f"outputs differ after {', '.join(unpinned)}, whose vectors are "
                             "defined only up to sign and LAPACK rounding")
            raise WrongResult("; ".join(c.describe() for c in failed))

    table = {"tile": tile, "compile": compile_, "run": run}
    return {name: table[name] for name in STAGE_NAMES if name in names}
