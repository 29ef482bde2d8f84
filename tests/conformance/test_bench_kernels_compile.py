"""Every kernel of every bench program (``bench/programs``: realistic sizes, unfused, as JAX
lowers them) compiles for sm_90 and sm_80 at its default tiling for that target with no
register spills, and the normalizations, the matmul with its epilogue and attention are one
kernel each.

The tiling is the one ``compile_hlo(..., target=...)`` chooses for a GPU: interpreter-sized
blocks never reach PTX.  A child process compiles the kernels
(``compile_kernel_files``: Triton's compiler and the wheel's ``ptxas``, no GPU needed); the distinct kernel files of an
architecture are split into ``SHARDS`` parts by their content hash, so xdist can run the parts
on different workers.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.conformance.target_kernels import distinct_kernel_files, names, shard
from triton_backend.reports.compile_report import compile_kernel_files
from triton_backend.reports.ptx_report import find_ptxas

PROGRAMS = sorted((Path(__file__).resolve().parents[2] / "bench" / "programs").glob("*.hlo"))
ARCHS = (90, 80)
SHARDS = 2
#: Families that must be one kernel (rows of 1,024 to 8,192, f32 and bf16; attention causal,
#: unmasked and grouped-query with a sliding window; the plain bf16 matmuls; the loss, a
#: bias gradient and a global norm, whose reductions are split among programs).
ONE_KERNEL = ("softmax", "log_softmax", "layernorm", "rmsnorm", "matmul_bias_gelu",
              "matmul_bf16", "attention", "gelu", "swiglu", "cross_entropy", "bias_grad",
              "global_norm")

#: Families whose bf16 kernels must use ``wgmma`` on sm_90 (the attention backward's three;
#: JAX's own attention and its gradient).
TENSOR_CORE = ("attention", "vjp_attention", "jax_attention", "matmul_bf16", "matmul_bias_gelu")

requires_ptxas = pytest.mark.skipif(not all(find_ptxas(a) for a in ARCHS),
                                    reason="ptxas is not in the Triton wheel")


def _compiled(target_compiles, arch: int) -> dict[str, list[Path]]:
    """Program -> its kernel files, compiled with ``target=sm_<arch>``."""
    out = {}
    for name, kernels in target_compiles.programs(PROGRAMS, arch).items():
        # The fusion pass's result compiles as made: no fallback to a less fused module.
        assert kernels.fusion_mode == "fused", (name, kernels.fusion_fallbacks)
        out[name] = list(kernels.files)
    return out


@pytest.mark.slow
@requires_ptxas
@pytest.mark.parametrize("part", range(SHARDS))
@pytest.mark.parametrize("arch", ARCHS)
def test_every_bench_kernel_compiles_without_spills(target_compiles, arch, part):
    programs = _compiled(target_compiles, arch)
    assert len(programs) >= 20  # every bench program, not a vacuous pass
    distinct = distinct_kernel_files(p for files in programs.values() for p in files)
    # The shards partition the distinct files: none is left out, none checked twice.
    covered = [tuple(paths) for i in range(SHARDS) for paths in shard(distinct, i, SHARDS)]
    assert sorted(covered) == sorted(map(tuple, distinct.values()))
    groups = shard(distinct, part, SHARDS)
    assert groups  # this shard checks something
    results = compile_kernel_files([paths[0] for paths in groups], arch, loops=False)
    assert len(results) == len(groups)
    spilled = [(names(paths), r["registers"], r["spill_store_bytes"], r["spill_load_bytes"])
               for paths, r in zip(groups, results)
               if r["spill_store_bytes"] or r["spill_load_bytes"]]
    assert not spilled, spilled
    assert all(r["registers"] > 0 for r in results)
    if arch == 90:  # bf16 attention, forward and backward (``vjp_``), on the tensor cores
        scalar = [names(paths) for paths, r in zip(groups, results)
                  if any(p.parent.name.startswith(TENSOR_CORE) and "bf16" in p.parent.name
                         for p in paths) and not r["ptx_features"].get("wgmma")]
        assert not scalar, scalar


@requires_ptxas
def test_normalizations_matmul_epilogue_and_attention_are_one_kernel(target_compiles):
    compiled = _compiled(target_compiles, 90)
    for name, files in compiled.items():
        if name.startswith(ONE_KERNEL):
            assert len(files) == 1, (name, [f.name for f in files])
    gpt2 = [files for name, files in compiled.items() if name.startswith("gpt2_block")]
    assert gpt2 and all(len(files) <= 10 for files in gpt2)
