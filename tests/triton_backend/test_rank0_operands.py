"""A kernel whose values are rank-0 mixes scalars (constants, scalar parameters) with the
(1, 1) tiles of reductions; elementwise rules whose expansions compare both operands must
work on that mix under the interpreter, where a rank-0 compare carries its operands' float
type (found by the differential fuzzer: ``clip(sum(x), -0.5, 0.75)`` crashed)."""
from __future__ import annotations

import numpy as np
import pytest

from fusion.evaluator import evaluate
from fusion.text.parser import parse_hlo
from triton_backend import compile_hlo
from triton_backend.host.input_validation import tensor_from_numpy, tensor_to_numpy
from triton_backend.host.output_check import compare_output

ADD = "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n"

#: op -> its HLO at rank 0, between the scalar parameter or constant ``s``/``c`` and the row
#: sum ``r`` (a reduction's (1, 1) tile), in both operand orders.
OPS = {
    "maximum": "maximum(c, r)", "minimum": "minimum(s, r)", "maximum_reversed": "maximum(r, c)",
    "atan2": "atan2(c, r)", "atan2_reversed": "atan2(r, s)", "power": "power(s, r)",
    "clamp": "clamp(c, r, s)",
}


@pytest.mark.parametrize("op", sorted(OPS))
def test_a_scalar_and_a_reduction_meet_in_a_compound_rule(op):
    text = (f"HloModule m\n{ADD}ENTRY e {{\n  x = f32[32] parameter(0)\n"
            "  s = f32[] parameter(1)\n  z = f32[] constant(0)\n"
            "  r = f32[] reduce(x, z), dimensions={0}, to_apply=add\n"
            f"  c = f32[] constant(-0.5)\n  ROOT o = f32[] {OPS[op]}\n}}\n")
    rng = np.random.default_rng(1)
    for x, s in ((rng.standard_normal(32).astype(np.float32) / 8, np.float32(0.75)),
                 (np.full(32, np.nan, np.float32), np.float32(2.0))):
        want = evaluate(parse_hlo(text), x, s)[0]
        (got,) = compile_hlo(text)(tensor_from_numpy(x, "f32"), tensor_from_numpy(s, "f32"))
        comparison = compare_output("o0", want, tensor_to_numpy(got), "f32")
        assert comparison.passed, comparison.describe()
