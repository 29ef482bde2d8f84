"""Every kernel the corpus compiles to also compiles for a GPU: sm_90 and sm_80, no spills.

The tests run kernels in the Triton interpreter; this checks the same kernel files go through
Triton's real compiler and ``ptxas`` for an H100 and an A100, without a GPU.  A child process
compiles them (``compile_kernel_files``: kernels decorated under ``TRITON_INTERPRET`` cannot be
compiled); the distinct kernel files of an architecture are split into ``SHARDS`` parts by
their content hash, so xdist can run the parts on different workers.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.conformance.target_kernels import distinct_kernel_files, names, shard
from triton_backend.reports.compile_report import compile_kernel_files

CORPUS = Path(__file__).parents[1] / "data" / "hlo"
#: Every corpus program, before and after XLA's passes (fused by us when unfused).
PROGRAMS = sorted(CORPUS.glob("*.hlo"))
ARCHS = (90, 80)
SHARDS = 2


@pytest.mark.slow
@pytest.mark.parametrize("part", range(SHARDS))
@pytest.mark.parametrize("arch", ARCHS)
def test_every_corpus_kernel_compiles_without_spills(target_compiles, arch, part):
    # The kernel files of every corpus program compiled for this target: the tiling a GPU
    # gets, never the interpreter's.
    programs = target_compiles.programs(PROGRAMS, arch)
    files = [f for kernels in programs.values() for f in kernels.files]
    assert len(files) > 60  # the whole corpus, not a vacuous pass
    distinct = distinct_kernel_files(files)
    # The shards partition the distinct files: none is left out, none checked twice.
    covered = [tuple(paths) for i in range(SHARDS) for paths in shard(distinct, i, SHARDS)]
    assert sorted(covered) == sorted(map(tuple, distinct.values()))
    groups = shard(distinct, part, SHARDS)
    assert groups  # this shard checks something
    # No main-loop disassembly: these checks read registers and spills only.
    results = compile_kernel_files([paths[0] for paths in groups], arch, loops=False)
    assert len(results) == len(groups)
    for paths, r in zip(groups, results):
        assert r["registers"] > 0, names(paths)
        assert r["spill_store_bytes"] == 0 and r["spill_load_bytes"] == 0, (names(paths), r)
        assert (paths[0].parent / r["cubin_file"]).stat().st_size > 0
