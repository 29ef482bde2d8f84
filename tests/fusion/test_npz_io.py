"""The npz convention: bit-exact round trips for every element type; random inputs."""
from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusion.ir.element_types import ELEMENT_TYPES
from fusion.errors import EvaluationError
from fusion.evaluator.npz_io import input_arrays, load_arrays, random_inputs, save_arrays
from fusion.text.parser import parse_hlo

HLO = pathlib.Path(__file__).parents[1] / "data" / "hlo"
VALUE_TYPES = sorted(n for n, t in ELEMENT_TYPES.items() if t.has_values)
STORED_AS = {"bf16": "uint16", "f8e4m3fn": "uint8", "f8e5m2": "uint8", "s4": "uint8",
             "u4": "uint8", "s2": "uint8", "u2": "uint8", "f4e2m1fn": "uint8"}


def _bits(array: np.ndarray) -> np.ndarray:
    # Compare bit patterns, so NaNs and -0.0 count as equal only to themselves.
    if array.dtype == bool:
        return array
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8)


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(VALUE_TYPES), dims=st.lists(st.integers(0, 3), max_size=3),
       seed=st.integers(0, 2**16))
def test_round_trip_is_bit_exact(tmp_path_factory, name, dims, seed):
    t = ELEMENT_TYPES[name]
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=int(np.prod(dims)) * t.byte_size, dtype=np.uint8)
    if t.bits < 8 or t.kind == "pred":
        array = (raw % (2 if t.kind == "pred" else 2**t.bits)).astype(np.int16)
        if t.kind == "signed":
            array = array - 2 ** (t.bits - 1)
        array = array.astype(t.numpy_dtype()).reshape(dims)
    else:
        array = raw.view(t.numpy_dtype()).reshape(dims)
    path = tmp_path_factory.mktemp("npz") / "a.npz"
    save_arrays(path, {"p0": array}, {"p0": name})
    with np.load(path) as raw_archive:
        assert json.loads(str(raw_archive["_dtypes"])) == {"p0": name}
        if name in STORED_AS:
            assert raw_archive["p0"].dtype == np.dtype(STORED_AS[name])
    back = load_arrays(path)
    assert list(back) == ["p0"] and back["p0"].dtype == array.dtype
    np.testing.assert_array_equal(_bits(back["p0"]), _bits(array))


def test_sub_byte_values_are_stored_as_their_own_bits(tmp_path):
    import ml_dtypes

    save_arrays(tmp_path / "a.npz", {"p0": np.array([-1, 7, -8], ml_dtypes.int4)}, {"p0": "s4"})
    with np.load(tmp_path / "a.npz") as raw:
        assert raw["p0"].tolist() == [0xF, 0x7, 0x8]


def test_plain_numpy_archives_are_read_by_dtype(tmp_path):
    np.savez(tmp_path / "a.npz", p0=np.arange(3, dtype=np.int16))
    assert load_arrays(tmp_path / "a.npz")["p0"].tolist() == [0, 1, 2]


def test_bad_dtypes_entry_is_reported(tmp_path):
    np.savez(tmp_path / "a.npz", p0=np.zeros(2, np.uint16), _dtypes=np.array('{"p0": "bf17"}'))
    with pytest.raises(EvaluationError, match="unknown element type 'bf17' for 'p0'"):
        load_arrays(tmp_path / "a.npz")


def test_bf16_stored_with_the_wrong_width_is_reported(tmp_path):
    np.savez(tmp_path / "a.npz", p0=np.zeros(2, np.uint8), _dtypes=np.array('{"p0": "bf16"}'))
    with pytest.raises(EvaluationError, match="must be stored as uint16, found uint8"):
        load_arrays(tmp_path / "a.npz")


def _module(name):
    return parse_hlo((HLO / name).read_text())


def test_random_inputs_are_deterministic_and_typed():
    m = _module("bf16_softmax.before.hlo")
    a, b, c = random_inputs(m, 0), random_inputs(m, 0), random_inputs(m, 1)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))
    for x, p in zip(a, m.entry.parameters):
        assert x.dtype == ELEMENT_TYPES[p.shape.dtype].numpy_dtype() and x.shape == p.shape.dims
        assert np.all(np.abs(x.astype(np.float32)) <= 2)


@pytest.mark.parametrize("name", ["dynamic_slice.before.hlo", "dynamic_slice.after.hlo"])
def test_dynamic_slice_starts_stay_in_range(name):
    # operand f32[5,6], slice 2x3, start 0 from parameter 1: the start must be in [0, 3].
    m = _module(name)
    starts = [int(random_inputs(m, seed)[1]) for seed in range(40)]
    assert min(starts) >= 0 and max(starts) <= 3 and len(set(starts)) > 1


@pytest.mark.parametrize("name", ["gather.before.hlo", "gather.after.hlo",
                                  "scatter.before.hlo", "scatter.after.hlo"])
def test_gather_scatter_indices_stay_in_range(name):
    m = _module(name)
    operand_rows = m.entry.parameters[0].shape.dims[0]
    for seed in range(10):
        indices = [a for a in random_inputs(m, seed) if a.dtype.kind in "iu"]
        assert indices and all(0 <= i.min() and i.max() < operand_rows for i in indices)


def test_input_arrays_checks_keys_shapes_and_types():
    m = _module("layernorm.before.hlo")
    good = {f"p{k}": a for k, a in enumerate(random_inputs(m))}
    assert len(input_arrays(m, good, "in.npz")) == len(good)
    with pytest.raises(EvaluationError, match="in.npz has no array 'p1'"):
        input_arrays(m, {k: v for k, v in good.items() if k != "p1"}, "in.npz")
    with pytest.raises(EvaluationError, match=r"array 'p0' has shape \[1\]"):
        input_arrays(m, {**good, "p0": np.zeros(1, np.float32)}, "in.npz")
    with pytest.raises(EvaluationError, match="array 'p0' has element type f64"):
        input_arrays(m, {**good, "p0": good["p0"].astype(np.float64)}, "in.npz")
    with pytest.raises(EvaluationError, match="unexpected array"):
        input_arrays(m, {**good, "q": good["p0"]}, "in.npz")


@pytest.mark.parametrize("dtype,values", [("bf16", [1.5, -2.0, 3.0]),
                                          ("f8e4m3fn", [0.5, -1.0, 448.0]),
                                          ("s4", [-8, 7, -1])])
def test_ml_dtypes_arrays_written_by_plain_savez_are_read_as_their_parameters(
        tmp_path, dtype, values):
    """``np.savez`` keeps an ml_dtypes array as raw bytes (``|V2``, ``|V1``): the parameter it
    feeds gives the type back, bit for bit; a parameter of another width is an error."""
    numpy_dtype = ELEMENT_TYPES[dtype].numpy_dtype()
    array = np.array(values, numpy_dtype)
    np.savez(tmp_path / "a.npz", p0=array)
    raw = load_arrays(tmp_path / "a.npz")["p0"]
    assert raw.dtype.kind == "V"
    m = parse_hlo(f"HloModule m\nENTRY e {{\n  ROOT x = {dtype}[3] parameter(0)\n}}\n")
    (got,) = input_arrays(m, {"p0": raw}, "a.npz")
    assert got.dtype == numpy_dtype and _bits(got).tolist() == _bits(array).tolist()
    f32 = parse_hlo("HloModule m\nENTRY e {\n  ROOT x = f32[3] parameter(0)\n}\n")
    with pytest.raises(EvaluationError, match="raw .-byte values .* parameter x is f32"):
        input_arrays(f32, {"p0": raw}, "a.npz")
