"""Differential fuzzing against XLA (``bench/differential_fuzz.py`` runs hundreds): a few
random JAX programs, as JAX writes them and as XLA optimizes them, give XLA's results through
the evaluator and through our compiled kernels; and the verdict does catch a wrong kernel."""
from __future__ import annotations

import pytest

pytest.importorskip("jax")

from tests.fuzz.differential import check_program  # noqa: E402
from tests.fuzz.random_programs import random_program  # noqa: E402

#: 5: a 1-D convolution (a dot once XLA optimizes it), a gather and an average pool; 56: the
#: gradient, through jax.checkpoint (an opt-barrier), of a dot, a concatenate, an average
#: pool, a scatter-add and a dynamic update;
#: 3: bf16 with a dynamic update, a cumsum, a while loop and a dropout by rbg keys.
SEEDS = (5, 56, 3)


@pytest.mark.parametrize("seed", SEEDS)
def test_random_programs_match_xla(seed):
    verdicts = check_program(random_program(seed))
    assert [v.kind for v in verdicts] == ["ok", "ok"], "\n\n".join(
        f"{v.variant}: {v.kind}\n{v.detail}\n{v.text}" for v in verdicts if v.kind != "ok")


def test_a_wrong_kernel_is_a_wrong_verdict(monkeypatch):
    import triton_backend

    real = triton_backend.compile_hlo

    def off_by_one(*args, **kwargs):
        compiled = real(*args, **kwargs)

        class Wrong:
            fusion_mode = compiled.fusion_mode

            def __call__(self, *tensors):
                return tuple(t + 1 for t in compiled(*tensors))
        return Wrong()

    monkeypatch.setattr(triton_backend, "compile_hlo", off_by_one)
    (verdict,) = check_program(random_program(SEEDS[0]), ("before",))
    assert verdict.kind == "WRONG" and verdict.text.startswith("HloModule"), verdict
