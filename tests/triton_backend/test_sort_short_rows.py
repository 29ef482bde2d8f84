"""Short rows sort several to a program (``templates.sort.kernel.rows_per_program``): a
``[rows, lanes]`` tile, rows down, each row's network or ``tl.sort`` along the lanes, the
last program's rows past the end masked.  Truth: XLA itself (JAX on CPU), bit for bit."""
from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from triton_backend import compile_hlo  # noqa: E402
from triton_backend.templates.sort import kernel  # noqa: E402


def test_many_short_rows_sort_several_to_a_program_as_xla_sorts_them(monkeypatch):
    def sorts(a, b):
        return (jnp.sort(a, axis=-1),  # packed keys, tl.sort along the lanes
                lax.sort((jnp.round(a), b, a), dimension=1, num_keys=2)[2],  # the network
                jnp.argsort(b, axis=-1, descending=True, stable=True))  # an iota operand

    # 32 rows a program, 17 programs, the last holding 5 rows (the interpreter runs the
    # programs one by one: fewer than the GPU's default of at least 128)
    monkeypatch.setattr(kernel, "MIN_SORT_PROGRAMS", 16)
    rows, lanes = 517, 3
    assert kernel.rows_per_program(rows, 4) == 32
    rng = np.random.default_rng(0)
    a = (rng.integers(-3, 4, (rows, lanes)) / 2).astype(np.float32)
    b = rng.standard_normal((rows, lanes)).astype(np.float32)
    a[5, 1], b[7, 2] = np.nan, -0.0
    compiled = compile_hlo(jax.jit(sorts).lower(a, b).as_text(dialect="hlo"), cache=False)
    sort_grids = [f.grid for f in compiled.fusions.values() if "sort" in f.fusion_name]
    assert len(sort_grids) == 3 and all(grid == (17,) for grid in sort_grids)
    import torch
    got = compiled(torch.from_numpy(a), torch.from_numpy(b))
    for g, w in zip(got, jax.jit(sorts)(a, b)):
        np.testing.assert_array_equal(g.numpy().view(np.int32), np.asarray(w).view(np.int32))
