"""The compiled-module cache (``triton_backend.runtime.module_cache``) behind ``compile_hlo``.

A warm compile (in this process, or from the plan on disk, also in a fresh process) must not
run the fusion pass, tiling or code generation, and must give the same module, kernels and
bit-identical results as the cold one; the results are also checked against the reference
evaluator.  Every key component separates entries; a corrupted or edited plan is ignored and
the module compiled again; an edited kernel file is never executed.  conftest gives each test
an empty cache.
"""
from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import torch

import tiling.fusion_pass.priority_fusion
import triton_backend.driver.compiled_fusion
from fusion.ir.element_types import element_type_of_numpy
from fusion.evaluator import evaluate
from fusion.evaluator.npz_io import random_inputs
from fusion.text.parser import parse_hlo
from triton_backend.runtime import ir_snapshot, module_cache, module_plan
from triton_backend.runtime import source_stamp
from triton_backend.driver.module_compiler import compile_hlo
from triton_backend.host.input_validation import tensor_from_numpy, tensor_to_numpy
from triton_backend.host.output_check import compare_output
from triton_backend.runtime import cache_files
from triton_backend.runtime.kernel_cache import KernelCache
from triton_backend.runtime.cache_files import content_hash, render_entry

HLO = pathlib.Path(__file__).parents[1] / "data" / "hlo"
ROOT = pathlib.Path(__file__).parents[2]
LOGGER = "hlo_triton_fusion.triton_backend.module_cache"
#: Unfused (the fusion pass runs), a while loop (host programs), XLA-fused (runs as given),
#: complex numbers (a fusion run as pairs of floats).
PROGRAMS = ["softmax.before", "fori_loop.before", "cond.after", "fft_filter.after"]
SOFTMAX = (HLO / "softmax.before.hlo").read_text()


def _inputs(text: str) -> tuple[list[np.ndarray], list[torch.Tensor]]:
    module = parse_hlo(text)
    arrays = random_inputs(module, seed=5)
    return arrays, [tensor_from_numpy(a, p.shape.dtype)
                    for a, p in zip(arrays, module.entry.parameters)]


def _run(compiled, text: str) -> list[np.ndarray]:
    return [tensor_to_numpy(t) for t in compiled(*_inputs(text)[1])]


def _check_against_reference(text: str, outputs: list[np.ndarray]) -> None:
    references = evaluate(parse_hlo(text), *_inputs(text)[0])
    assert len(outputs) == len(references)
    for n, (ref, out) in enumerate(zip(references, outputs)):
        comparison = compare_output(f"o{n}", ref, out, element_type_of_numpy(ref.dtype).name)
        assert comparison.passed, comparison.describe()


def _forbid_compiling(monkeypatch) -> None:
    """Fail on any fusion pass, tiling, code generation or kernel (re)write."""
    def forbidden(*args, **kwargs):
        raise AssertionError("a warm compile fused, tiled or generated code")

    cf = triton_backend.driver.compiled_fusion
    monkeypatch.setattr(tiling.fusion_pass.priority_fusion, "fuse_module", forbidden)
    monkeypatch.setattr(cf, "compile_fusion", forbidden)
    monkeypatch.setattr(cf, "choose_fusion_tiling", forbidden)
    monkeypatch.setattr(cf, "render_kernel_file", forbidden)
    monkeypatch.setattr(KernelCache, "load", forbidden)


def _count_compiles(monkeypatch) -> list[str]:
    """The names of the fusions compiled from now on (a warm compile compiles none)."""
    calls: list[str] = []
    real = triton_backend.driver.compiled_fusion.compile_fusion

    def counting(module, instr, **kwargs):
        calls.append(getattr(instr, "name", instr))
        return real(module, instr, **kwargs)

    monkeypatch.setattr(triton_backend.driver.compiled_fusion, "compile_fusion", counting)
    return calls


def _locations(module) -> list:
    return [(c.name, c.location, [(i.name, i.location) for i in c.instructions])
            for c in module.computations]


def _assert_same_compile(warm, cold) -> None:
    assert warm.module == cold.module and _locations(warm.module) == _locations(cold.module)
    assert list(warm.fusions) == list(cold.fusions)
    for name, fusion in cold.fusions.items():
        assert warm.fusions[name] == fusion  # kernel path, source, grid, tiles, reason, chunk
    assert (warm.fusion_mode, warm.fusion_fallbacks, warm.fusion_decisions) == \
        (cold.fusion_mode, cold.fusion_fallbacks, cold.fusion_decisions)
    assert list(warm.programs) == list(cold.programs)


def _plan_paths() -> list[pathlib.Path]:
    return sorted(module_cache.default_cache_dir().glob("*/*.json"))


@pytest.mark.parametrize("program", PROGRAMS)
def test_warm_compile_in_this_process_skips_fusion_tiling_and_codegen(program, monkeypatch):
    text = (HLO / f"{program}.hlo").read_text()
    cold = compile_hlo(text)
    expected = _run(cold, text)
    _check_against_reference(text, expected)
    _forbid_compiling(monkeypatch)
    assert compile_hlo(text) is cold  # kept in memory
    module_cache.forget_remembered()
    warm = compile_hlo(text)  # from the plan on disk
    assert warm is not cold
    _assert_same_compile(warm, cold)
    for got, want in zip(_run(warm, text), expected):
        np.testing.assert_array_equal(got, want)


def test_an_hlo_module_given_twice_is_a_hit_that_keeps_the_given_module(monkeypatch):
    first, second = parse_hlo(SOFTMAX), parse_hlo(SOFTMAX)
    cold = compile_hlo(first)
    _forbid_compiling(monkeypatch)
    warm = compile_hlo(second)
    assert warm.source_module is second and warm.module is cold.module


_CHILD = """
import json, sys
import numpy as np
import tiling.fusion_pass.priority_fusion
import triton_backend.driver.compiled_fusion as cf
from fusion.evaluator.npz_io import random_inputs
from fusion.text.parser import parse_hlo
from triton_backend.driver.module_compiler import compile_hlo
from triton_backend.host.input_validation import tensor_from_numpy, tensor_to_numpy
from triton_backend.runtime.kernel_cache import KernelCache

def forbidden(*args, **kwargs):
    raise AssertionError("a warm compile fused, tiled or generated code")

tiling.fusion_pass.priority_fusion.fuse_module = cf.compile_fusion = forbidden
cf.choose_fusion_tiling = cf.render_kernel_file = KernelCache.load = forbidden
text = open(sys.argv[1]).read()
module = parse_hlo(text)
arrays = random_inputs(module, seed=5)
compiled = compile_hlo(text)
outputs = compiled(*[tensor_from_numpy(a, p.shape.dtype)
                     for a, p in zip(arrays, module.entry.parameters)])
print(json.dumps({"outputs": [tensor_to_numpy(t).tolist() for t in outputs],
                  "kernels": {n: str(f.kernel_path) for n, f in compiled.fusions.items()},
                  "mode": compiled.fusion_mode}))
"""


def test_warm_compile_in_a_fresh_process_skips_codegen_and_gives_the_same_results():
    path = HLO / "softmax.before.hlo"
    module_cache.source_hash.cache_clear()  # the sources as they are now, as the child sees them
    cold = compile_hlo(path.read_text())
    expected = _run(cold, path.read_text())
    env = {**os.environ, "FUSION_LOG": "info", "PYTHONPATH": str(ROOT)}
    child = subprocess.run([sys.executable, "-c", _CHILD, str(path)], capture_output=True,
                           text=True, env=env, cwd=ROOT, timeout=600)
    assert child.returncode == 0, child.stderr[-3000:]
    assert "module cache: hit, plan" in child.stderr
    result = json.loads(child.stdout.strip().splitlines()[-1])
    assert result["mode"] == cold.fusion_mode
    assert result["kernels"] == {n: str(f.kernel_path) for n, f in cold.fusions.items()}
    for got, want in zip(result["outputs"], expected):
        np.testing.assert_array_equal(np.asarray(got, dtype=want.dtype), want)


def _first_fusion(compiled) -> tuple[str, tuple[int, ...]]:
    name, fusion = next(iter(compiled.fusions.items()))
    return name, fusion.tile_sizes


@pytest.mark.parametrize("component", ["text", "target", "tiling", "fuse", "physical_outputs",
                                       "source"])
def test_each_key_component_separates_entries(component, monkeypatch, caplog):
    cold = compile_hlo(SOFTMAX)
    module_cache.forget_remembered()
    options: dict = {}
    text = SOFTMAX
    if component == "text":
        text = SOFTMAX.replace("ENTRY", "\nENTRY", 1)  # the same module, other text
    elif component == "tiling":
        name, sizes = _first_fusion(cold)
        options["tiling"] = {name: sizes}  # the sizes it had: still another key
    elif component == "target":
        options["target"] = "sm_90"
    elif component == "fuse":
        options["fuse"] = False
    elif component == "physical_outputs":
        options["physical_outputs"] = True
    else:
        monkeypatch.setattr(module_cache, "source_hash", lambda: "0" * 64)  # a compiler edit
    calls = _count_compiles(monkeypatch)
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    compile_hlo(text, **options)
    assert calls, "a changed key must compile again"
    messages = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    if component == "text":
        assert any("miss, no plan of this module text" in m for m in messages), messages
    else:
        assert any(m.endswith(f"differs in {component}") for m in messages), messages
        assert any(f"key component '{component}' was" in m for m in messages), messages
    calls.clear()
    module_cache.forget_remembered()
    compile_hlo(text, **options)  # now stored under its own key
    assert calls == []


def test_a_changed_tuning_database_misses(tmp_path, monkeypatch):
    from triton_backend.runtime.tuning_db import TuningDb, fusion_key

    db = TuningDb(tmp_path / "tuning.sqlite")
    cold = compile_hlo(SOFTMAX, tuning_device="h100", tuning_db=db)
    name, sizes = _first_fusion(cold)
    db.put(fusion_key(cold.module, name, "h100"), {"tile_sizes": list(sizes), "num_warps": 2})
    calls = _count_compiles(monkeypatch)
    module_cache.forget_remembered()
    tuned = compile_hlo(SOFTMAX, tuning_device="h100", tuning_db=db)
    assert calls and "tuning database" in tuned.fusions[name].tiling_reason


def _corrupt(path: pathlib.Path, how: str) -> None:
    text = path.read_text()
    header, _, body = text.partition("\n")
    data = json.loads(body)
    if how == "truncated":
        path.write_text(text[: len(text) // 2])
    elif how == "garbage":
        path.write_bytes(b"\xff\xfe not a plan \x00")
    elif how == "edited":  # the hash header no longer matches
        path.write_text(text.replace('"fusion_mode":"', '"fusion_mode":"x', 1))
    else:  # well-formed and correctly hashed, but wrong: it must not rebuild or escape
        if how == "fusion-dropped":
            data["plan"]["fusions"] = data["plan"]["fusions"][1:]
        elif how == "kernel-outside":
            data["plan"]["fusions"][0]["kernel_file"] = "../../kernel_x.py"
        elif how == "wrong-types":
            data["plan"]["fusions"][0]["grid"] = "1, 2"
        elif how == "other-key":
            data["key"]["target"] = "cuda:80"
        elif how == "snapshot-garbage":  # base64 of bytes that are no pickle
            data["plan"]["snapshot"] = base64.b64encode(
                ir_snapshot.SNAPSHOT_FORMAT + b"\x80\x05 not a module").decode()
        elif how == "snapshot-not-base64":
            data["plan"]["snapshot"] = "%%%"
        path.write_text(render_entry(json.dumps(data)))


@pytest.mark.parametrize("how", ["truncated", "garbage", "edited", "fusion-dropped",
                                 "kernel-outside", "wrong-types", "other-key",
                                 "snapshot-garbage", "snapshot-not-base64"])
def test_a_corrupted_or_edited_plan_is_ignored_and_rewritten(how, monkeypatch):
    cold = compile_hlo(SOFTMAX)
    expected = _run(cold, SOFTMAX)
    [plan_path] = _plan_paths()
    _corrupt(plan_path, how)
    module_cache.forget_remembered()
    calls = _count_compiles(monkeypatch)
    again = compile_hlo(SOFTMAX)
    assert calls, "an unusable plan must compile again"
    _assert_same_compile(again, cold)
    for got, want in zip(_run(again, SOFTMAX), expected):
        np.testing.assert_array_equal(got, want)
    calls.clear()
    module_cache.forget_remembered()
    compile_hlo(SOFTMAX)  # the compile rewrote a good plan
    assert calls == []


@pytest.mark.parametrize("header", ["stale", "recomputed"])
def test_an_edited_kernel_file_is_never_run(header, tmp_path, monkeypatch):
    cold = compile_hlo(SOFTMAX)
    expected = _run(cold, SOFTMAX)
    fusion = next(iter(cold.fusions.values()))
    original = fusion.kernel_path.read_text()
    marker = tmp_path / "executed"
    evil = f"open({str(marker)!r}, 'w').close()\n" + original.partition("\n")[2]
    planted = render_entry(evil) if header == "recomputed" \
        else original.partition("\n")[0] + "\n" + evil
    fusion.kernel_path.write_text(planted)
    module_cache.forget_remembered()
    calls = _count_compiles(monkeypatch)
    again = compile_hlo(SOFTMAX)
    assert calls, "a plan whose kernel file changed must compile again"
    for got, want in zip(_run(again, SOFTMAX), expected):
        np.testing.assert_array_equal(got, want)
    assert not marker.exists()
    assert fusion.kernel_path.read_text() == original  # regenerated


def test_a_kernel_file_edited_after_the_warm_compile_checked_it_is_not_what_runs(tmp_path):
    cold = compile_hlo(SOFTMAX)
    expected = _run(cold, SOFTMAX)
    module_cache.forget_remembered()
    warm = compile_hlo(SOFTMAX)  # checks every kernel file now, imports it at its first launch
    marker = tmp_path / "executed"
    for fusion in warm.fusions.values():
        body = f"open({str(marker)!r}, 'w').close()\n" + fusion.source
        fusion.kernel_path.write_text(render_entry(body))
    for got, want in zip(_run(warm, SOFTMAX), expected):
        np.testing.assert_array_equal(got, want)
    assert not marker.exists()


def test_a_plan_records_each_kernel_file_by_its_body_hash():
    cold = compile_hlo(SOFTMAX)
    [plan_path] = _plan_paths()
    plan = json.loads(plan_path.read_text().partition("\n")[2])["plan"]
    recorded = {f["name"]: (f["kernel_file"], f["kernel_sha256"]) for f in plan["fusions"]}
    assert recorded == {n: (f.kernel_path.name,
                            content_hash(cache_files.canonical_source(f.source)))
                        for n, f in cold.fusions.items()}
    assert plan_path.read_text().startswith("# content-sha256: ")


@pytest.mark.parametrize("switch", ["argument", "environment"])
def test_the_cache_can_be_switched_off(switch, monkeypatch):
    options = {"cache": False} if switch == "argument" else {}
    if switch == "environment":
        monkeypatch.setenv(module_cache.CACHE_ENV, "0")
    calls = _count_compiles(monkeypatch)
    first = compile_hlo(SOFTMAX, **options)
    count = len(calls)
    second = compile_hlo(SOFTMAX, **options)
    assert count and len(calls) == 2 * count and second is not first
    assert _plan_paths() == []


# -- the compiler-source stamp (``source_hash``) ----------------------------------------------

_PAST_NS = 1_600_000_000 * 10**9  # long before the stamp: no racy-stamp guard applies


def _tree(root: pathlib.Path) -> pathlib.Path:
    """A project tree like ours (every package, a subpackage), every time long past."""
    files = {"fusion/parser.py": "A = 1\n", "tiling/__init__.py": "",
             "triton_backend/driver/runner.py": "B = 2\n"}
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    _age(root)
    return root


def _age(root: pathlib.Path, ns: int = _PAST_NS) -> None:
    for path in [*root.rglob("*"), root]:
        os.utime(path, ns=(ns, ns))


def _full_hash(root: pathlib.Path) -> str:
    return source_stamp._hash_files(str(root), source_stamp._walk_sources(str(root))[1])


def _forbid_walking(monkeypatch) -> None:
    """From now on, walking or hashing the tree fails the test: only stats are allowed."""
    def forbidden(*args):
        raise AssertionError("an unchanged tree was walked or hashed")

    monkeypatch.setattr(source_stamp, "_walk_sources", forbidden)
    monkeypatch.setattr(source_stamp, "_hash_files", forbidden)


@pytest.fixture
def tree(tmp_path):
    return _tree(tmp_path / "project"), tmp_path / "cache"


def test_the_source_stamp_is_checked_by_stat_alone_when_nothing_changed(tree, monkeypatch):
    root, cache = tree
    first = source_stamp.source_hash(str(root), cache)
    assert first == _full_hash(root)
    _forbid_walking(monkeypatch)
    assert source_stamp.source_hash(str(root), cache) == first


@pytest.mark.parametrize("change", ["edited in place", "edited, same size", "added",
                                    "added in a new folder", "removed", "renamed"])
def test_an_edited_added_or_removed_source_changes_the_hash(change, tree, caplog):
    root, cache = tree
    before = source_stamp.source_hash(str(root), cache)
    parser = root / "fusion" / "parser.py"
    if change == "edited in place":
        with open(parser, "a") as handle:  # the folder's time does not change
            handle.write("C = 3\n")
    elif change == "edited, same size":
        parser.write_text("A = 9\n")
        os.utime(parser, ns=(_PAST_NS + 1, _PAST_NS + 1))  # only its time tells
    elif change == "added":
        (root / "tiling" / "new.py").write_text("")
    elif change == "added in a new folder":
        (root / "tiling" / "sub").mkdir()
        (root / "tiling" / "sub" / "new.py").write_text("")
    elif change == "removed":
        (root / "triton_backend" / "driver" / "runner.py").unlink()
    else:
        parser.rename(root / "fusion" / "renamed.py")
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    after = source_stamp.source_hash(str(root), cache)
    assert after != before and after == _full_hash(root)
    messages = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert any("compiler sources changed since they were stamped" in m for m in messages)
    _age(root, _PAST_NS + 2)
    assert source_stamp.source_hash(str(root), cache) == after  # stamped again


def test_a_changed_folder_without_changed_sources_keeps_the_hash(tree, monkeypatch):
    root, cache = tree
    before = source_stamp.source_hash(str(root), cache)
    (root / "fusion" / ".parser.py.swp").write_text("an editor's swap file")
    monkeypatch.setattr(source_stamp, "_hash_files", lambda *a: pytest.fail("hashed again"))
    assert source_stamp.source_hash(str(root), cache) == before


def test_a_source_modified_just_now_is_hashed_but_not_stamped(tree, monkeypatch):
    root, cache = tree
    (root / "fusion" / "parser.py").write_text("A = 2\n")  # now: within the racy window
    value = source_stamp.source_hash(str(root), cache)
    assert value == _full_hash(root)
    assert not (cache / "sources").exists() or not any((cache / "sources").iterdir())
    calls = []
    real = source_stamp._hash_files
    monkeypatch.setattr(source_stamp, "_hash_files", lambda *a: calls.append(1) or real(*a))
    assert source_stamp.source_hash(str(root), cache) == value and calls == [1]


@pytest.mark.parametrize("how", ["edited", "garbage", "other-root"])
def test_a_damaged_or_foreign_stamp_is_ignored(how, tree):
    root, cache = tree
    before = source_stamp.source_hash(str(root), cache)
    [stamp] = (cache / "sources").glob("*")
    body = json.loads(stamp.read_text().partition("\n")[2])
    if how == "edited":  # the header no longer matches
        stamp.write_text(stamp.read_text().replace(before, "0" * 64))
    elif how == "garbage":
        stamp.write_text(render_entry('{"format": 1, "files": 3}'))
    else:
        body["root"], body["hash"] = "/elsewhere", "0" * 64
        stamp.write_text(render_entry(json.dumps(body)))
    assert source_stamp.source_hash(str(root), cache) == before == _full_hash(root)


def _record(root: pathlib.Path, version: str, lines: list[str]) -> pathlib.Path:
    info = root / f"hlo_triton_fusion-{version}.dist-info"
    info.mkdir()
    (info / "RECORD").write_text("".join(f"{line}\n" for line in lines))
    return info / "RECORD"


WHEEL_RECORD = ["fusion/__init__.py,sha256=AAA,10", "tiling/__init__.py,sha256=BBB,0",
                "triton_backend/__init__.py,sha256=CCC,7",
                "hlo_triton_fusion-1.2.dist-info/RECORD,,"]


def test_an_installed_wheel_is_hashed_by_its_record_alone(tree, monkeypatch):
    root, cache = tree
    record = _record(root, "1.2", WHEEL_RECORD)

    def forbidden(*args):
        raise AssertionError("an installed wheel's sources were stat'ed, walked or hashed")

    for name in ("_stamp_holds", "_walk_sources", "_hash_files"):
        monkeypatch.setattr(source_stamp, name, forbidden)
    first = source_stamp.source_hash(str(root), cache, "1.2")
    assert first == hashlib.sha256(b"RECORD\0" + record.read_bytes()).hexdigest()
    record.write_text(record.read_text().replace("AAA", "DDD"))  # a reinstall of other code
    assert source_stamp.source_hash(str(root), cache, "1.2") not in (first, None)
    assert not (cache / "sources").exists()  # nothing stamped: the RECORD is the stamp


@pytest.mark.parametrize("case", ["other version", "editable record", "no version"])
def test_a_record_that_does_not_list_the_sources_falls_back_to_the_stamp(case, tree):
    root, cache = tree
    if case == "editable record":  # pip's editable install: a path hook, no sources listed
        _record(root, "1.2", ["__editable__.hlo_triton_fusion-1.2.pth,sha256=EEE,90"])
    else:
        _record(root, "1.1", WHEEL_RECORD)
    version = None if case == "no version" else "1.2"
    assert source_stamp.source_hash(str(root), cache, version) == _full_hash(root)


def test_the_source_hash_covers_this_projects_sources():
    root = source_stamp.project_root()
    assert pathlib.Path(root) == ROOT
    module_cache.source_hash.cache_clear()
    try:
        before = _full_hash(ROOT)
        value = module_cache.source_hash()
        assert value in (before, _full_hash(ROOT))  # either side of an edit made meanwhile
    finally:
        module_cache.source_hash.cache_clear()


# -- the given module of a warm compile -------------------------------------------------------

def test_a_warm_compile_parses_the_given_text_only_when_it_is_read(monkeypatch):
    from triton_backend.driver import module_compiler
    from triton_backend.runtime import lazy_module

    cold = compile_hlo(SOFTMAX)
    module_cache.forget_remembered()
    parses = []
    real = module_compiler.parse_hlo
    for where in (module_compiler, lazy_module):  # the compile's parse and the lazy read's
        monkeypatch.setattr(where, "parse_hlo", lambda t: parses.append(t) or real(t))
    warm = compile_hlo(SOFTMAX)
    assert warm is not cold and parses == []
    source = warm.source_module
    assert parses == [SOFTMAX] and warm.source_module is source  # parsed once
    assert source == parse_hlo(SOFTMAX) == cold.source_module
    assert _locations(source) == _locations(parse_hlo(SOFTMAX))


def test_a_module_run_as_given_comes_from_the_plans_snapshot_unparsed(monkeypatch):
    from triton_backend.driver import module_compiler

    text = (HLO / "cond.after.hlo").read_text()  # XLA-fused: no fused text in its plan
    cold = compile_hlo(text)
    module_cache.forget_remembered()
    parses = []
    real = module_compiler.parse_hlo
    monkeypatch.setattr(module_compiler, "parse_hlo", lambda t: parses.append(t) or real(t))
    warm = compile_hlo(text)
    assert parses == [] and warm.module is warm.source_module
    assert warm.module == parse_hlo(text) and _locations(warm.module) == _locations(cold.module)
    for got, want in zip(_run(warm, text), _run(cold, text)):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("program", ["softmax.before", "cond.after"])
def test_a_plan_without_a_snapshot_still_loads_from_its_text(program, monkeypatch):
    text = (HLO / f"{program}.hlo").read_text()
    cold = compile_hlo(text)
    [plan_path] = _plan_paths()
    data = json.loads(plan_path.read_text().partition("\n")[2])
    assert data["plan"]["snapshot"] is not None
    # The text form, as a plan holds it when the module has a value a snapshot cannot hold.
    data["plan"]["snapshot"] = None
    if data["plan"]["module_text"] is not None:
        data["plan"]["locations"] = [list(loc)
                                     for loc in module_plan._locations_of(cold.module)]
    plan_path.write_text(render_entry(json.dumps(data)))
    module_cache.forget_remembered()
    calls = _count_compiles(monkeypatch)
    warm = compile_hlo(text)
    assert calls == []
    _assert_same_compile(warm, cold)


@pytest.mark.parametrize("parts", [[[True]], "yes", [[1], [True]], [[True], [None]]])
def test_a_plan_with_malformed_complex_parts_is_refused(parts):
    data = {"name": "f", "kind": "loop", "kernel_file": "kernel_" + "0" * 40 + ".py",
            "kernel_sha256": "0" * 64, "grid": [1], "tile_sizes": [1], "tiling_reason": "",
            "reduction_chunk": None}
    assert module_plan.FusionPlan.from_data(data).complex_parts is None
    with pytest.raises(module_plan.PlanError):
        module_plan.FusionPlan.from_data({**data, "complex_parts": parts})
    good = module_plan.FusionPlan.from_data({**data, "complex_parts": [[True, False], [True]]})
    assert good.complex_parts == ((True, False), (True,))
    assert module_plan.FusionPlan.from_data(good.to_data()) == good


# -- the background stamp check (``source_stamp.StampCheck``) --------------------------------

def test_the_background_check_gives_the_stamped_hash_by_stats_alone(tree, monkeypatch):
    root, cache = tree
    first = source_stamp.source_hash(str(root), cache)
    assert first == _full_hash(root)
    _forbid_walking(monkeypatch)
    check = source_stamp.StampCheck(str(root), cache)
    assert check.take(str(root), cache) == first
    assert check.take(str(root), cache) is None  # given once: a later call checks again


@pytest.mark.parametrize("change", ["edited in place", "edited, same size", "removed"])
def test_the_background_check_notices_an_edited_source(change, tree):
    root, cache = tree
    before = source_stamp.source_hash(str(root), cache)
    parser = root / "fusion" / "parser.py"
    if change == "edited in place":
        with open(parser, "a") as handle:  # the folder's time does not change
            handle.write("C = 3\n")
    elif change == "edited, same size":
        parser.write_text("A = 9\n")
        os.utime(parser, ns=(_PAST_NS + 1, _PAST_NS + 1))
    else:
        parser.unlink()
    assert source_stamp.StampCheck(str(root), cache).take() is None
    assert source_stamp.source_hash(str(root), cache) not in (before, None)


def test_the_background_check_is_for_its_own_tree_cache_and_process(tree, tmp_path,
                                                                     monkeypatch):
    root, cache = tree
    source_stamp.source_hash(str(root), cache)
    assert source_stamp.StampCheck(str(root), cache).take(str(root), tmp_path / "other") is None
    assert source_stamp.StampCheck(str(root), cache).take(str(tmp_path), cache) is None
    forked = source_stamp.StampCheck(str(root), cache)
    monkeypatch.setattr(source_stamp.os, "getpid", lambda: -1)  # as in a forked child
    assert forked.take() is None


def test_an_edited_compiler_source_invalidates_a_plan_in_a_fresh_process(tree, monkeypatch,
                                                                         caplog):
    """What a fresh process does (a background check from the import, then the compile),
    on a stand-in project tree: an edit made in place between two processes misses."""
    root, _ = tree
    cache = module_cache.default_cache_dir()

    def fresh_process() -> None:
        module_cache.forget_remembered()
        module_cache.source_hash.cache_clear()
        monkeypatch.setattr(module_cache, "_PRECHECK",
                            source_stamp.StampCheck(str(root), cache, module_cache.__version__))

    monkeypatch.setattr(source_stamp, "project_root", lambda: str(root))
    fresh_process()
    cold = compile_hlo(SOFTMAX)
    fresh_process()
    calls = _count_compiles(monkeypatch)
    assert compile_hlo(SOFTMAX).fusions == cold.fusions and calls == []  # a hit
    with open(root / "tiling" / "__init__.py", "a") as handle:
        handle.write("EDITED = True\n")
    fresh_process()
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    again = compile_hlo(SOFTMAX)
    assert calls, "a plan made by other compiler sources must compile again"
    messages = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert any(m.endswith("differs in source") for m in messages), messages
    for got, want in zip(_run(again, SOFTMAX), _run(cold, SOFTMAX)):
        np.testing.assert_array_equal(got, want)
    module_cache.source_hash.cache_clear()
