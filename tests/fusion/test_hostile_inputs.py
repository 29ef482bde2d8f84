"""Hostile inputs the front end must refuse with a located one-line error (issue 18).

Layouts that are not a permutation or pad to terabytes are refused by the verifier (so
``check`` rejects what later stages cannot handle); npz archives that are not archives, hold
no numbers, claim more data than they hold, or whose ``_dtypes`` type would change a value are
``EvaluationError``s naming the file and the key; a while loop can be bounded
(``max_while_iterations``) and Ctrl-C stops an endless one.
"""
from __future__ import annotations

import io
import json
import signal
import threading
import _thread
import zipfile

import numpy as np
import numpy.lib.format as npy_format
import pytest

from fusion.errors import EvaluationError, HloVerifyError
from fusion.evaluator import evaluate
from fusion.evaluator.npz_io import load_arrays
from fusion.text.parser import parse_hlo
from fusion.shapes.verifier import verify_module


def _negate(layout: str, dims: str = "16,16") -> str:
    return (f"HloModule m\nENTRY e {{\n  p = f32[{dims}]{layout} parameter(0)\n"
            f"  ROOT n = f32[{dims}] negate(p)\n}}\n")


@pytest.mark.parametrize("layout, dims, message", [
    ("{2,11,0}", "2,3,4", "not a permutation of 0..2"),
    ("{1,1}", "16,16", "not a permutation of 0..1"),
    ("{0}", "16,16", "has 1 entries but the shape has rank 2"),
    ("{1,0:T(0,128)}", "16,16", "must be positive"),
    ("{1,0:T(1000000,1000000)}", "16,16", "1000000000000 elements"),
    ("{1,0:T(1099511627776,2)}", "16,16", "2199023255552 elements"),
    ("{1,0:T(1,1024)(1024,1)(1,1024)(1024,1)}", "1,1", "pads 1 elements to"),
])
def test_verifier_rejects_bad_layouts_located(layout, dims, message):
    module = parse_hlo(_negate(layout, dims))
    with pytest.raises(HloVerifyError, match=r"layout .* is invalid") as info:
        verify_module(module)
    assert message in str(info.value)
    assert (info.value.line, info.value.column, info.value.where) == (3, 3, "p")


@pytest.mark.parametrize("layout, dims", [
    ("{1,0}", "16,16"), ("{0,1}", "16,16"), ("{1,0:T(8,128)}", "16,16"),
    ("{1,0:T(8,128)(2,1)}", "37,300"), ("{0,1,2:T(2,*,4)}", "2,3,16"), ("{}", ""),
])
def test_verifier_keeps_valid_layouts(layout, dims):
    verify_module(parse_hlo(_negate(layout, dims)))


# -- npz inputs -------------------------------------------------------------------------------

def _dtypes(mapping) -> np.ndarray:
    return np.array(json.dumps(mapping))


def _saved(**arrays) -> io.BytesIO:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    buf.seek(0)
    buf.name = "in.npz"
    return buf


@pytest.mark.parametrize("values, dtype, element", [
    ([1e10, -1e10, 2.9, np.nan], "s32", "[0] is 10000000000.0"),
    ([2.0, 2.9], "s32", "[1] is 2.9"),
    ([1.0, np.nan], "s64", "[1] is nan"),
    ([1e300], "f32", "[0] is 1e+300"),
    ([1 + 2j], "f32", "[0] is (1+2j)"),
    ([300], "u8", "[0] is 300"),
    ([0, 2], "pred", "[1] is 2"),
])
def test_lossy_dtype_conversion_is_an_error_naming_the_key(values, dtype, element):
    with pytest.raises(EvaluationError) as info:
        load_arrays(_saved(p0=np.array(values), _dtypes=_dtypes({"p0": dtype})))
    text = str(info.value)
    assert text.startswith("in.npz: array 'p0'") and f"as {dtype}" in text
    assert element in text and "\n" not in text


def test_exact_and_rounding_conversions_stay_allowed():
    loaded = load_arrays(_saved(p0=np.array([2.0, -3.0]), p1=np.array([0.1, np.nan, np.inf]),
                                p2=np.array([1 + 0j]), p3=np.array([0, 1]),
                                _dtypes=_dtypes({"p0": "s32", "p1": "f32", "p2": "f64",
                                                 "p3": "pred"})))
    assert loaded["p0"].dtype == np.int32 and loaded["p0"].tolist() == [2, -3]
    expected = np.array([0.1, np.nan, np.inf], np.float32)
    np.testing.assert_array_equal(loaded["p1"], expected)
    assert loaded["p2"].tolist() == [1.0] and loaded["p3"].tolist() == [False, True]


def _header_claiming(elements: int) -> bytes:
    header = io.BytesIO()
    npy_format.write_array_header_1_0(
        header, {"descr": "<f4", "fortran_order": False, "shape": (elements,)})
    return header.getvalue() + bytes(16)


def _bad_files(tmp_path):
    files = {}
    files["empty"] = tmp_path / "empty.npz"
    files["empty"].write_bytes(b"")
    files["not a zip"] = tmp_path / "text.npz"
    files["not a zip"].write_bytes(b"hello, not an archive")
    files["npy"] = tmp_path / "single.npz"
    with open(files["npy"], "wb") as f:
        np.save(f, np.zeros(3))
    files["object"] = tmp_path / "object.npz"
    np.savez(files["object"], p0=np.array([1, "a", None], dtype=object))
    files["bytes"] = tmp_path / "bytes.npz"
    np.savez(files["bytes"], p0=np.array([b"12", b"34"]), _dtypes=_dtypes({"p0": "s32"}))
    files["dtypes list"] = tmp_path / "list.npz"
    np.savez(files["dtypes list"], p0=np.zeros(2), _dtypes=_dtypes(["f32"]))
    files["dtypes value"] = tmp_path / "value.npz"
    np.savez(files["dtypes value"], p0=np.zeros(2), _dtypes=_dtypes({"p0": ["f32"]}))
    files["huge header"] = tmp_path / "huge.npz"
    with zipfile.ZipFile(files["huge header"], "w") as z:
        z.writestr("p0.npy", _header_claiming(2**40))
    files["corrupt member"] = tmp_path / "corrupt.npz"
    np.savez(files["corrupt member"], p0=np.arange(64.0))
    data = bytearray(files["corrupt member"].read_bytes())
    data[100:140] = bytes(40)  # inside p0's data: the CRC no longer matches
    files["corrupt member"].write_bytes(bytes(data))
    return files


@pytest.mark.parametrize("kind", ["empty", "not a zip", "npy", "object", "bytes", "dtypes list",
                                  "dtypes value", "huge header", "corrupt member"])
def test_bad_npz_files_are_one_line_errors(tmp_path, kind):
    path = _bad_files(tmp_path)[kind]
    with pytest.raises(EvaluationError) as info:
        load_arrays(str(path))
    text = str(info.value)
    assert text.startswith(str(path) + ":") and "\n" not in text
    if kind in ("object", "bytes", "huge header", "corrupt member"):
        assert "'p0'" in text


# -- while loops ------------------------------------------------------------------------------

ENDLESS = """HloModule m
cond {
  s = (s32[]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  z = s32[] constant(0)
  ROOT c = pred[] compare(i, z), direction=GE
}
body {
  s = (s32[]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  one = s32[] constant(1)
  n = s32[] add(i, one)
  m = s32[] constant(1000)
  r = s32[] remainder(n, m)
  ROOT t = (s32[]) tuple(r)
}
ENTRY e {
  p = s32[] parameter(0)
  t = (s32[]) tuple(p)
  w = (s32[]) while(t), condition=cond, body=body
  ROOT o = s32[] get-tuple-element(w), index=0
}
"""


def test_max_while_iterations_stops_an_endless_loop_naming_it():
    module = parse_hlo(ENDLESS)
    with pytest.raises(EvaluationError, match="after 25 iteration") as info:
        evaluate(module, np.int32(0), max_while_iterations=25)
    assert info.value.where == "while %w" and info.value.line == 20


def test_max_while_iterations_keeps_loops_that_end():
    # While i < 0: from -5 the loop runs exactly 5 iterations, to 0.
    module = parse_hlo(ENDLESS.replace("direction=GE", "direction=LT"))
    assert evaluate(module, np.int32(-5), max_while_iterations=5)[0] == 0
    with pytest.raises(EvaluationError, match="after 4 iteration"):
        evaluate(module, np.int32(-5), max_while_iterations=4)
    with pytest.raises(EvaluationError, match="max_while_iterations"):
        evaluate(module, np.int32(-5), max_while_iterations=-1)


def test_ctrl_c_propagates_out_of_an_endless_evaluation():
    module = parse_hlo(ENDLESS)
    # interrupt_main does nothing while SIGINT is ignored (as it is for a test run started
    # in the background by a non-interactive shell): the evaluation would never end.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.5, _thread.interrupt_main)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            evaluate(module, np.int32(0))
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
