"""The child that compiles kernel files for a GPU target (``reports.compile_child``): one per
process and environment, serving request after request; a failed request is a located error
and the child serves on; a child that died is replaced."""
from __future__ import annotations

import io
import json

import pytest

from fusion.errors import FusionCompilerError
from triton_backend import compile_hlo
from triton_backend.reports import compile_child
from triton_backend.reports.compile_report import compile_kernel_files
from triton_backend.reports.ptx_report import find_ptxas

pytestmark = pytest.mark.skipif(find_ptxas(90) is None, reason="ptxas is not in the Triton wheel")

TEXT = """HloModule m
ENTRY e {
  x = f32[64,256] parameter(0)
  ROOT n = f32[64,256] negate(x)
}"""


def _kernel_file():
    (fusion,) = compile_hlo(TEXT, target="sm_90").fusions.values()
    return fusion.kernel_path


def _children() -> dict:
    return {key: child for key, child in compile_child._CHILDREN.items() if child.alive()}


def test_requests_share_one_child_and_a_failed_one_does_not_end_it(tmp_path):
    kernel = _kernel_file()
    (first,) = compile_kernel_files([kernel], 90, loops=False)
    pids = {child.process.pid for child in _children().values()}
    broken = tmp_path / "broken.py"
    broken.write_text("import triton\nKERNEL = undefined_name\n")
    with pytest.raises(FusionCompilerError) as err:
        compile_kernel_files([broken], 90, loops=False)
    assert "sm_90" in str(err.value) and "undefined_name" in str(err.value)
    (again,) = compile_kernel_files([kernel], 90, loops=False)
    assert {child.process.pid for child in _children().values()} == pids
    assert again == first and first["registers"] > 0 and first["spill_store_bytes"] == 0


def test_a_child_that_died_is_replaced():
    kernel = _kernel_file()
    compile_kernel_files([kernel], 90, loops=False)
    for child in _children().values():
        child.process.kill()
        child.process.wait()
    (result,) = compile_kernel_files([kernel], 90, loops=False)
    assert result["registers"] > 0 and _children()


def test_another_environment_gets_its_own_child(monkeypatch):
    kernel = _kernel_file()
    compile_kernel_files([kernel], 80, loops=False)
    before = set(_children())
    monkeypatch.setenv("HLO_FUSION_COMPILE_CHILD_TEST", "1")  # the child would see it
    compile_kernel_files([kernel], 80, loops=False)
    assert len(set(_children()) - before) == 1


def test_serve_answers_each_request_and_reports_a_failure():
    def handle(request):
        return 1 / request["x"]

    out = io.StringIO()
    compile_child.serve(handle, io.StringIO('{"x": 4}\n\n{"x": 0}\n{"x": 2}\n'), out)
    lines = out.getvalue().splitlines()
    assert [json.loads(line.split(" ", 1)[1]) for line in lines[::2]] == [0.25, 0.5]
    assert lines[1].startswith("COMPILE-CHILD-FAILURE ") and "ZeroDivisionError" in lines[1]
