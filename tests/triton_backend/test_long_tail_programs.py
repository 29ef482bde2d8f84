"""The long tail of real programs (issue 29): small programs of the kinds that crashed or
differed from XLA, each run three ways (XLA on the same text, the evaluator, ``compile_hlo``
under the interpreter) by ``xla_three_way.compare_three_ways``."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("jax")
from tests.triton_backend.xla_three_way import compare_three_ways  # noqa: E402 - after jax


def _rand(shape, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _loop_fusion(params: list[str], body: str, root: str) -> str:
    """A module whose entry calls one kLoop fusion of ``body`` on parameters ``params``."""
    fused = "\n".join(f"  p{i} = {s} parameter({i})" for i, s in enumerate(params))
    entry = "\n".join(f"  a{i} = {s} parameter({i})" for i, s in enumerate(params))
    args = ", ".join(f"a{i}" for i in range(len(params)))
    return (f"HloModule m\nfused {{\n{fused}\n  {body}\n}}\nENTRY e {{\n{entry}\n"
            f"  ROOT f = {root} fusion({args}), kind=kLoop, calls=fused\n}}")


# -- a concatenate the fusion never reads --------------------------------------------------------
# Its map from the output is empty (it is an empty operand of another concatenate or of a
# pad), so its tile is empty; the legality rule "the tile along the axis divides every
# operand" took ``size % 0`` and raised a raw ZeroDivisionError.
NEVER_READ_CONCATENATES = {
    "operand_of_a_concatenate": (
        ["f32[4,0]", "f32[4,3]"],
        "i = f32[4,0] concatenate(p0, p0), dimensions={1}\n"
        "  ROOT x = f32[4,3] concatenate(i, p1), dimensions={1}", "f32[4,3]"),
    "operand_of_a_pad": (
        ["f32[4,0]", "f32[4,3]"],
        "i = f32[4,0] concatenate(p0, p0), dimensions={1}\n  k = f32[] constant(1)\n"
        "  ROOT x = f32[4,3] pad(i, k), padding=0_0x1_2", "f32[4,3]"),
    "negated_twice_along_dim_0": (
        ["f32[0,4]", "f32[2,4]"],
        "i = f32[0,4] concatenate(p0, p0), dimensions={0}\n  n = f32[0,4] negate(i)\n"
        "  ROOT x = f32[2,4] concatenate(n, p1, n), dimensions={0}", "f32[2,4]"),
}


@pytest.mark.parametrize("case", sorted(NEVER_READ_CONCATENATES))
def test_a_concatenate_the_fusion_never_reads_compiles(case):
    params, body, root = NEVER_READ_CONCATENATES[case]
    shapes = [tuple(int(n) for n in p[4:-1].split(",")) for p in params]
    compare_three_ways(_loop_fusion(params, body, root),
                       *(_rand(s, k) for k, s in enumerate(shapes)))
