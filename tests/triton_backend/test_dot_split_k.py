"""Split-K dot kernels (issue 26): K sliced across programs, the partial tiles summed in slice
order by the tile's last program, the epilogue run once on the whole sum.  Split is forced on
small shapes under the interpreter and checked against the reference evaluator; the default
rule is checked against a brute-force search of what it promises."""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import triton
import triton.language as tl

import fusion
from fusion.errors import UnsupportedOpError
from tests.triton_backend.dot_fusion_helpers import entry_as_fusion, random_inputs, to_torch
from tests.triton_backend.test_dot_fusion import plain_dot, run_and_check
from triton_backend.device_lib import ordered_sums
from triton_backend.templates.dot import tiling as dot_tiling
from triton_backend.templates.dot.driver import compile_dot_fusion
from triton_backend.templates.dot.tiling import (
    MAX_SPLIT_K, MIN_K_STEPS_PER_SPLIT, SM_COUNT, DotProblem, candidate_tilings,
    default_split_k, default_tiling, grid_size, tiling_from)


@triton.jit
def _arrivals(counters, flags, PARTS: tl.constexpr):
    pid = tl.program_id(0)
    last = ordered_sums.last_to_arrive(counters, pid // PARTS, PARTS)
    tl.store(flags + pid, last.to(tl.int32))


def test_exactly_one_program_per_slot_arrives_last_and_resets_the_counter():
    # Programs run in grid order under the interpreter: the last of each slot's 3 is last.
    counters = torch.zeros(2, dtype=torch.int32)
    for _ in range(2):  # the counters left by the first launch serve the second
        flags = torch.full((6,), -1, dtype=torch.int32)
        _arrivals[(6,)](counters, flags, 3)
        assert flags.tolist() == [0, 0, 1, 0, 0, 1] and counters.tolist() == [0, 0]


@pytest.mark.parametrize("dtype", ["f32", "f64"])  # f64: partial tiles kept in f64 too
def test_ragged_k_split_in_three_matches_the_evaluator(dtype):
    # K = 100 in 7 steps of 16: slices of 3 steps (48), the last one past K (3 * 48 = 144).
    compiled = run_and_check(plain_dot(dtype, dtype, lhs="20,100", rhs="100,36",
                                       out_dims="20,36"), 100, tile_sizes=(16, 32, 16, 3))
    assert compiled.tile_sizes == (16, 32, 16, 3) and compiled.grid == (2 * 2 * 3, 1)
    assert "ordered_sums.sum_across_programs" in compiled.source


def test_bias_gelu_epilogue_runs_once_on_the_whole_sum():
    # GELU of each slice's partial sum, added up, would differ from GELU of the sum.
    x, w, b = (jnp.zeros((20, 200), jnp.bfloat16), jnp.zeros((200, 36), jnp.bfloat16),
               jnp.zeros((36,), jnp.bfloat16))
    text = jax.jit(lambda x, w, b: jax.nn.gelu(x @ w + b)).lower(x, w, b).as_text(dialect="hlo")
    module = entry_as_fusion(fusion.parse_hlo(text))
    compiled = run_and_check(module, 200, tile_sizes=(16, 32, 16, 4))  # 13 steps: 4+4+4+1
    kernel = compiled.source[compiled.source.index("@triton.jit"):]
    assert kernel.index("if last:") < kernel.index("tanh") < kernel.index("tl.store(")


@pytest.mark.parametrize("fold_batch", [False, True])
def test_batched_split_k(monkeypatch, fold_batch):
    if fold_batch:  # the batch folded into grid x, as past grid y's 65535 blocks
        monkeypatch.setattr(dot_tiling, "MAX_GRID_YZ", 2)
    module = plain_dot("f32", "f32", lhs="3,20,72", rhs="3,72,36", out_dims="3,20,36",
                       dims="lhs_batch_dims={0}, lhs_contracting_dims={2}, "
                            "rhs_batch_dims={0}, rhs_contracting_dims={1}")
    compiled = run_and_check(module, 72, tile_sizes=(16, 32, 16, 2))
    assert compiled.grid == ((2 * 2 * 2 * 3, 1) if fold_batch else (2 * 2 * 2, 3))


def test_int8_split_k_is_exact():
    run_and_check(plain_dot("s8", "s32", lhs="16,96", rhs="96,16", out_dims="16,16"), 96,
                  tile_sizes=(16, 16, 16, 3))


def test_workspace_is_overwritten_and_counters_are_left_zero():
    module = plain_dot("f32", "f32", lhs="20,100", rhs="100,36", out_dims="20,36")
    compiled = compile_dot_fusion(module, "r", tile_sizes=(16, 32, 16, 3))
    kernel_file = compiled.module
    (_, _, (partials,), _, _), (_, _, (tiles,), _, zeroed) = kernel_file.SCRATCH_SPECS
    assert zeroed and tiles == 4 and partials == 4 * 3 * 16 * 32
    a, b = (to_torch(x) for x in random_inputs(module, 3))
    workspace = torch.full((partials,), float("nan"))
    counters = torch.zeros(tiles, dtype=torch.int32)
    out = torch.empty(20, 36)
    for _ in range(2):  # the counters the first launch leaves serve the second
        kernel_file.KERNEL[kernel_file.GRID](a, b, out, workspace, counters)
        assert torch.equal(counters, torch.zeros_like(counters))
        np.testing.assert_allclose(out.numpy(), (a.double() @ b.double()).numpy(), rtol=1e-5,
                                   atol=1e-4)
    again = compiled(a, b)[0]
    assert torch.equal(again, out)  # deterministic: the same bits through the file's run


def test_each_launch_off_a_cuda_stream_gets_its_own_counters():
    compiled = compile_dot_fusion(plain_dot("f32", "f32", lhs="20,100", rhs="100,36",
                                            out_dims="20,36"), "r", tile_sizes=(16, 32, 16, 3))
    first, second = (compiled.module._scratch(torch.device("cpu")) for _ in range(2))
    assert first[1] is not second[1] and not first[1].any()


def _brute_force_split(problem: DotProblem, bm: int, bn: int, bk: int, arch: int) -> int:
    tiles = math.ceil(problem.m / bm) * math.ceil(problem.n / bn) * problem.batch
    steps = math.ceil(problem.k / bk)
    fits = [s for s in range(2, MAX_SPLIT_K + 1)
            if tiles * s <= SM_COUNT[arch] and steps // s >= MIN_K_STEPS_PER_SPLIT]
    return max(fits, default=1)


@pytest.mark.parametrize("arch", [80, 90])
def test_default_rule_splits_only_idle_sms_with_long_k(arch):
    shapes = [(1, 512, 1024, 1024, 2), (1, 512, 1024, 4096, 2), (4, 128, 128, 8192, 4),
              (1, 64, 64, 64, 2), (1, 4096, 4096, 4096, 2), (8, 512, 512, 2048, 2),
              (1, 128, 256, 300, 4)]
    for shape in shapes:
        problem = DotProblem(*shape)
        tiling = default_tiling(problem, arch)
        want = _brute_force_split(problem, tiling.block_m, tiling.block_n, tiling.block_k, arch)
        assert tiling.split_k == want, (shape, tiling)
        programs = math.prod(grid_size(tiling, problem))
        assert tiling.split_k == 1 or programs <= SM_COUNT[arch]
    # The Llama block's 512x1024 dots: 32 tiles of 128x128 would leave most of sm_90's 132
    # SMs idle; 64 tiles of 64x128 still do, so K is split in 2 (128 programs).
    llama = default_tiling(DotProblem(1, 512, 1024, 1024, 2), 90)
    assert (llama.block_m, llama.block_n, llama.split_k) == (64, 128, 2)
    assert default_split_k(DotProblem(1, 512, 1024, 1024, 2), 128, 128, 64, 80) == 3


def test_autotune_candidates_and_explicit_sizes_carry_split_k():
    problem = DotProblem(1, 64, 64, 2048, 2)
    splits = {t.split_k for t in candidate_tilings(problem, 90)}
    assert {1, 2, 4, 8, 16} <= splits
    assert tiling_from((64, 64, 64, 8), problem, 90).tile_sizes == (64, 64, 64, 8)
    with pytest.raises(UnsupportedOpError, match="exceeds the 2 K steps"):
        tiling_from((16, 16, 64, 3), DotProblem(1, 16, 16, 100, 4), 90)


def test_autotune_sweeps_the_dot_template_tilings_split_k_included():
    from fusion.text.printer import print_hlo
    from triton_backend.driver.compiled_fusion import compile_fusion
    from triton_backend.runtime.device_specs import device_spec
    from triton_backend.tuning.autotune import compile_candidate, plan_sweep

    module = plain_dot("bf16", "bf16", lhs="64,2048", rhs="2048,64", out_dims="64,64")
    trials = plan_sweep(module, module.entry.root, device_spec("h100"))
    configs = [t.config for t in trials]
    assert all(len(c.tile_sizes) in (3, 4) for c in configs)
    split = next(c for c in configs if len(c.tile_sizes) == 4)
    # What the tuning database stores comes back as the same kernel.
    assert compile_candidate(print_hlo(module), "r", split.tile_sizes,
                             split.num_warps, split.num_stages, on_gpu=False) is None
    compiled = compile_fusion(module, "r", tile_sizes=split.tile_sizes)
    assert compiled.tile_sizes == split.tile_sizes
    # A single 64x64 tile cannot fill 132 SMs: the best predicted candidates split K.
    assert len(configs[0].tile_sizes) == 4


def test_split_k_workspace_past_32_bit_offsets_is_refused():
    problem = DotProblem(16384, 256, 256, 4096, 2)  # 2^14 tiles x 2 slices x 256 x 256 = 2^31
    with pytest.raises(UnsupportedOpError, match="32-bit offsets"):
        tiling_from((256, 256, 16, 2), problem, 90)


def test_report_models_a_split_k_kernel_with_its_programs_and_partial_tiles():
    from triton_backend.reports.kernel_model import kernel_model
    from triton_backend.runtime.device_specs import device_spec

    module = plain_dot("bf16", "bf16", lhs="256,4096", rhs="4096,256", out_dims="256,256")
    lhs, rhs, out = 256 * 4096 * 2, 4096 * 256 * 2, 256 * 256 * 2
    models = {}
    for sizes in ((128, 128, 64), (128, 128, 64, 8)):
        kernel = compile_dot_fusion(module, "r", tile_sizes=sizes)
        models[len(sizes)] = kernel_model(module, module.entry.root, kernel, device_spec("h100"))
    partials = 2 * 4 * (2 * 2 * 8 * 128 * 128)  # f32 partial tiles written once, read once
    # Unsplit, the 4 tiles run at once and share their operand panels through L2; split-K
    # programs are counted with every re-read.
    assert models[3].modeled_bytes == lhs + rhs + out
    assert models[4].modeled_bytes == lhs * 2 + rhs * 2 + out + partials
    # 4 tiles on 132 SMs: the model counts 32 programs' worth of busy SMs with split-K.
    assert models[4].predicted_time_s < models[3].predicted_time_s


def test_compiled_module_launches_a_split_k_kernel_through_its_prepared_steps(monkeypatch):
    from triton_backend import compile_hlo

    text = """HloModule m
ENTRY e {
  a = f32[24,100] parameter(0)
  b = f32[100,40] parameter(1)
  ROOT d = f32[24,40] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}"""
    compiled = compile_hlo(text, tiling={"wrapped_d": (16, 32, 16, 4)})
    (kernel,) = compiled.fusions.values()
    assert kernel.tile_sizes == (16, 32, 16, 4)
    prepared = []
    real_parts = kernel.module.launch_parts
    # Through monkeypatch: the loaded kernel module is shared by every compile of this process.
    monkeypatch.setattr(kernel.module, "launch_parts",
                        lambda *args, **kw: prepared.append(args) or real_parts(*args, **kw))
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((24, 100), np.float32), rng.standard_normal((100, 40), np.float32)
    want = fusion.evaluate(fusion.parse_hlo(text), a, b)[0]
    for _ in range(2):  # the second call reuses the prepared launch
        (got,) = compiled(torch.from_numpy(a), torch.from_numpy(b))
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-4)
    # The plan launches the kernel (with its scratch) from the file's launch_parts, decided once.
    assert len(prepared) == 1
