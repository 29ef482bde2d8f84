"""The benchmark scripts on CPU: skips that exit 0, and the pieces that run without a GPU."""
from __future__ import annotations

import csv
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from fusion.evaluator import evaluate
from fusion.text.parser import parse_hlo
from tiling.fusion_pass.decisions import MAX_FUSION_MEMBERS

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
CORPUS = ROOT / "tests" / "data" / "hlo"


def _load(name):
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH))


def test_gpu_runtime_skips_cleanly_without_a_gpu(capsys, tmp_path):
    gpu_runtime = _load("gpu_runtime")
    assert gpu_runtime.main(["--csv", str(tmp_path / "x.csv")]) == 0
    assert "gpu_runtime: skipped:" in capsys.readouterr().out
    assert not (tmp_path / "x.csv").exists()


def test_gpu_paths_check_skips_without_a_gpu_and_compares_under_the_interpreter(capsys):
    check = _load("gpu_paths_check")
    assert check.main([]) == 0
    assert "gpu_paths_check: skipped:" in capsys.readouterr().out
    files = [str(CORPUS / "batched_einsum.before.hlo"), str(CORPUS / "fori_loop.before.hlo")]
    assert check.main(["--interpreter", *files]) == 0
    lines = capsys.readouterr().out.splitlines()
    statuses = {tuple(line.split()[:3]) for line in lines[:-1]}
    assert ("batched_einsum.before", "dot_library", "pass") in statuses
    assert ("fori_loop.before", "cuda_graph", "refused") in statuses  # a while: refused, located
    assert lines[-1] == "every check passed"


def test_gpu_paths_check_widens_a_tolerance_for_a_long_sum():
    import torch

    check = _load("gpu_paths_check")
    want, got = torch.tensor([0.1, -0.2]), torch.tensor([0.1 + 5.8e-6, -0.2])
    assert not check._agree(want, got, "f32", "tf32x3")[0]  # a plain f32 element: too far
    assert check._agree(want, got, "f32", "tf32x3", summation_length=768)[0]  # another sum order
    assert not check._agree(want, got, "f32", "exact", summation_length=768)[0]


def test_gpu_corpus_check_skips_without_a_gpu_and_checks_under_the_interpreter(capsys, tmp_path):
    check = _load("gpu_corpus_check")
    assert check.main(["--csv", str(tmp_path / "x.csv")]) == 0
    assert "gpu_corpus_check: skipped:" in capsys.readouterr().out
    bad = tmp_path / "bad.hlo"
    bad.write_text("HloModule m\nENTRY e {\n  ROOT r = f32[2] add(p, q)\n}\n")
    csv_path = tmp_path / "rows.csv"
    assert check.main(["--interpreter", "--jobs", "2", "--csv", str(csv_path),
                       str(ROOT / "examples" / "gelu_small.hlo"), str(bad)]) == 1
    out = capsys.readouterr().out
    assert "summary: 1 error, 1 pass" in out
    rows = {r["file"]: r for r in csv.DictReader(csv_path.open())}
    assert rows["gelu_small.hlo"]["status"] == "pass" and rows["gelu_small.hlo"]["kernels"] == "1"
    assert rows["bad.hlo"]["status"] == "error" and "does not exist" in rows["bad.hlo"]["detail"]


def test_gpu_runtime_rows_print_as_they_come():
    gpu_runtime = _load("gpu_runtime")
    line = gpu_runtime.program_line({"module": "softmax", "kernels": 1, "ours_s": 2e-5,
                                     "ours_device_s": 1e-5, "ours_device_peak_fraction": 0.8,
                                     "ours_graph_s": 9e-6})
    assert line.split() == ["softmax", "1", "20.0", "-", "-", "-", "-", "-", "-", "-", "-",
                            "10.0", "-", "80.0", "9.0", "-", "-", "-"]
    assert len(line) == len(gpu_runtime.PROGRAM_HEADER)  # columns line up with the header
    skipped = gpu_runtime.program_line({"module": "x", "skipped": "compile_hlo: boom"})
    assert skipped.split()[1:] == ["skipped:", "compile_hlo:", "boom"]


def test_plot_is_optional(tmp_path):
    gpu_runtime = _load("gpu_runtime")
    message = gpu_runtime.write_plot([], tmp_path / "p.png")
    if importlib.util.find_spec("matplotlib") is None:
        assert "matplotlib is not installed" in message and not (tmp_path / "p.png").exists()
    else:
        assert (tmp_path / "p.png").exists()


@pytest.mark.parametrize("name", ["softmax", "layernorm", "gelu", "integer_ops", "slices"])
def test_torch_reference_of_fusions_matches_the_evaluator(name):
    sys.path.insert(0, str(BENCH))
    try:
        from hlo_torch_reference import torch_function
    finally:
        sys.path.remove(str(BENCH))
    module = parse_hlo((CORPUS / f"{name}.after.hlo").read_text())
    checked = 0
    for _, instr in module.fusions():
        comp = module.computation(instr.attr("calls"))
        try:
            fn = torch_function(module, comp)
        except KeyError:
            continue
        rng = np.random.default_rng(0)
        arrays = []
        for p in comp.parameters:
            dtype = p.shape.element_type.numpy_dtype()
            values = rng.integers(1, 5, p.shape.dims) if dtype.kind in "iu" else rng.standard_normal(p.shape.dims)
            arrays.append(np.asarray(values).astype(dtype))
        sub = parse_hlo(_wrap(module, instr))
        (expected,) = evaluate(sub, *arrays)
        got = fn(*[torch.from_numpy(np.asarray(a, np.float32) if a.dtype.name == "bfloat16" else a)
                   .to(torch.bfloat16 if a.dtype.name == "bfloat16" else None) for a in arrays])
        np.testing.assert_allclose(got.float().numpy() if got.is_floating_point() else got.numpy(),
                                   np.asarray(expected, np.float32) if got.is_floating_point() else expected,
                                   rtol=2e-2, atol=2e-2)
        checked += 1
    assert checked


def _wrap(module, instr) -> str:
    """The fused computation (and its callees) as a module of its own."""
    from fusion.ir.hlo_module import HloComputation, HloModule
    from fusion.text.printer import print_hlo
    from fusion.ir.call_graph import reachable_computations

    names = reachable_computations(module, instr.attr("calls"),
                                   lambda i: reversed(i.called_computations()))
    comps = [module.computation(n) for n in reversed(names)]
    entry = comps[-1]
    comps[-1] = HloComputation(entry.name, entry.instructions, entry.root_name, is_entry=True)
    return print_hlo(HloModule("wrapped", tuple(comps), entry.name))


def test_compile_latency_without_triton(capsys):
    compile_latency = _load("compile_latency")
    assert compile_latency.main(["--no-triton", str(CORPUS / "softmax.after.hlo")]) == 0
    out = capsys.readouterr().out
    assert "softmax.after.hlo" in out and "codegen_warm" in out


def test_codegen_quality_compiles_for_sm90(capsys):
    codegen_quality = _load("codegen_quality")
    assert codegen_quality.main([str(CORPUS / "gelu.after.hlo")]) == 0
    line = next(l for l in capsys.readouterr().out.splitlines() if l.startswith("gelu.after.hlo"))
    fields = line.split()
    assert fields[4] == "1.00"  # an elementwise fusion moves each byte once
    assert int(fields[5]) > 0 and fields[6] == "0"  # registers, no spills


def test_compile_scaling_splits_the_cold_compile(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FUSION_KERNEL_CACHE_DIR", str(tmp_path / "kernels"))
    compile_scaling = _load("compile_scaling")
    path = tmp_path / "rows.csv"
    assert compile_scaling.main(["--sizes", "20", "60", "--kinds", "elementwise", "diamond",
                                 "--csv", str(path)]) == 0
    import csv

    rows = list(csv.DictReader(path.open()))
    assert [(r["kind"], r["ops"]) for r in rows] == [
        ("elementwise", "20"), ("elementwise", "60"), ("diamond", "20"), ("diamond", "60")]
    for r in rows:
        cold, imports, ours = (float(r[k]) for k in ("compile_cold", "kernel_import", "ours"))
        assert 0 < imports < cold and abs(cold - imports - ours) < 1e-9
    # The cold compiles ran on their own kernel caches; the environment is as it was.
    assert compile_scaling.os.environ["FUSION_KERNEL_CACHE_DIR"] == str(tmp_path / "kernels")
    assert "fitted slope" in capsys.readouterr().out


def test_compile_scaling_cpu_table(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FUSION_KERNEL_CACHE_DIR", str(tmp_path / "kernels"))
    compile_scaling = _load("compile_scaling")
    # One real cold compile in this process: every kernel file generated, on fresh caches.
    kernels, seconds = compile_scaling.cpu_compile("elementwise", 450)
    assert kernels == -(-450 // MAX_FUSION_MEMBERS) and seconds > 0  # the member limit
    assert compile_scaling.os.environ["FUSION_KERNEL_CACHE_DIR"] == str(tmp_path / "kernels")
    rows = compile_scaling.cpu_table(["elementwise"], [1000, 2000],
                                     measure=lambda kind, n: (n // 200, n / 1000))
    assert [(r["ops"], r["kernels"]) for r in rows] == [(1000, 5), (2000, 10)]
    out = capsys.readouterr().out
    assert "ms/op" in out and "elementwise     1000        5     1.00   1.000" in out
    assert "fitted slope of log(CPU s) against log(ops) 1.00" in out


def test_tile_sweep_sweeps_rows_per_program_only_where_asked():
    from triton_backend.driver.module_compiler import compile_hlo

    sweep = _load("tile_sweep")
    text = (BENCH / "programs" / "softmax_f32_4096x1024.hlo").read_text()
    fused = compile_hlo(parse_hlo(text), target="sm_90").module
    assert list(sweep.swept_fusions(fused)) == []
    ((_, kind, configs),) = sweep.swept_fusions(fused, rows=True)
    assert kind == "rows" and ((1, 1024), 8, 1) in configs and ((16, 1024), 8, 1) in configs
    assert set(sweep.ROWS_PROGRAMS) <= set(sweep.DEFAULT_PROGRAMS)


def test_tf32x3_emulation_is_about_as_exact_as_f32_where_tf32_is_not():
    # A K=4096 dot of unit-scale f32 values: the emulated 3xTF32 stays within a few f32
    # roundings of the exact product (NumPy in f64), one TF32 product does not.
    emulation = _load("tf32x3_emulation")
    text = """HloModule m
ENTRY e {
  a = f32[8,4096] parameter(0)
  b = f32[4096,8] parameter(1)
  ROOT d = f32[8,8] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""
    module = parse_hlo(text)
    emulated, count = emulation.emulate_tf32x3(module)
    assert count == 1 and {i.opcode for i in emulated.entry} >= {"reduce-precision", "and"}
    rng = np.random.default_rng(0)
    a, b = (rng.uniform(-1, 1, s).astype(np.float32) for s in ((8, 4096), (4096, 8)))
    exact = a.astype(np.float64) @ b.astype(np.float64)
    scale = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    (x3,) = evaluate(emulated, a, b)
    (f32,) = evaluate(module, a, b)
    assert np.max(np.abs(x3 - exact) / scale) < 4 * max(np.max(np.abs(f32 - exact) / scale), 2e-7)
    tf32 = (_tf32_round(a) @ _tf32_round(b)).astype(np.float32)
    assert np.max(np.abs(tf32 - exact) / scale) > 30 * np.max(np.abs(x3 - exact) / scale)
    # An infinite operand: the small products' NaN (inf - inf) is dropped, as on the GPU.
    a[0, 0] = np.inf
    assert np.isinf(evaluate(emulated, a, np.abs(b))[0][0]).all()


def _tf32_round(x: np.ndarray) -> np.ndarray:
    """TF32's rounding of ``x`` (10 mantissa bits, to nearest even), in f64."""
    from fusion.evaluator.conversion_ops import reduce_precision

    return reduce_precision(x, 8, 10).astype(np.float64)


def test_tf32x3_emulation_judges_a_corpus_program_with_run_check(tmp_path, capsys):
    emulation = _load("tf32x3_emulation")
    assert emulation.main([str(CORPUS / "swiglu.after.hlo"), "--csv", str(tmp_path / "t.csv")]) == 0
    (row,) = list(csv.DictReader((tmp_path / "t.csv").open()))
    assert row["status"] == "ok" and int(row["f32_dots"]) == 2
    assert "1 programs with f32 dots: 1 pass" in capsys.readouterr().out


def test_gpu_corpus_check_runs_the_coverage_programs_too():
    """The forms only a GPU compiles (bench/programs/coverage: the sort network, in one tile
    and through scratch, the small floats as bytes, an int32 implicit GEMM, the random
    generators' integer products) are in the lent GPU's check by default."""
    check = _load("gpu_corpus_check")
    names = {p.name for p in check.default_files()}
    assert {"two_key_sort.hlo", "argsort_f64.hlo", "conv_int32.hlo", "small_floats.hlo",
            "long_lexsort.hlo", "random_bits.hlo"} <= names


def test_gpu_corpus_check_keeps_the_files_with_f32_dots_where_asked():
    check = _load("gpu_corpus_check")
    files = [CORPUS / "matmul.after.hlo", CORPUS / "softmax.after.hlo", CORPUS / "swiglu.before.hlo"]
    assert check.with_f32_dots(files) == [files[0], files[2]]


def test_differential_fuzz_prints_its_verdicts(capsys, tmp_path):
    pytest.importorskip("jax")
    differential_fuzz = _load("differential_fuzz")
    assert differential_fuzz.main(["--count", "2", "--seed", "5", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "2 programs (seeds 5..6)" in out
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()[-5:]}
    assert rows["ok"] == ["2", "2"] and rows["WRONG"] == ["0", "0"]
    assert not list(tmp_path.iterdir())  # no defect written
