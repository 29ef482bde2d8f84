"""``rng-bit-generator``: the reference evaluator's bits against XLA's own, bit for bit (JAX's
``lax.rng_bit_generator`` and HLO text run by XLA), the expansion into integer ops against the
evaluator (a law over states, shapes, types and algorithms), and the verifier's errors."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fusion
from fusion.errors import HloVerifyError
from fusion.evaluator.random_ops import philox4x32, rng_bits, threefry2x32
from fusion.shapes.verifier import verify_module
from fusion.transforms.rng_expansion import expand_rng_bit_generators

ALGORITHMS = ("rng_default", "rng_philox", "rng_three_fry")
UNSIGNED = {"u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64}


def _module(algorithm: str, length: int, dtype: str, dims: tuple[int, ...]) -> str:
    shape = f"{dtype}[{','.join(map(str, dims))}]"
    return (f"HloModule m\nENTRY e {{\n  s = u64[{length}] parameter(0)\n"
            f"  ROOT r = (u64[{length}], {shape}) rng-bit-generator(s), "
            f"algorithm={algorithm}\n}}\n")


def _bits(value) -> np.ndarray:
    value = np.asarray(value)
    return value.view(f"u{value.dtype.itemsize}")


def test_philox_and_threefry_match_the_random123_known_answers():
    # The known-answer vectors of Random123 (kat_vectors): Philox4x32-10 and Threefry2x32-20.
    ones = np.uint64(0xFFFFFFFF)
    assert [int(w) for w in philox4x32([np.uint64(0)] * 4, (0, 0))] == \
        [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    assert [int(w) for w in philox4x32([ones] * 4, (ones, ones))] == \
        [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]
    assert [int(w) for w in threefry2x32((np.uint64(0), np.uint64(0)), (0, 0))] == \
        [0x6B200159, 0x99BA4EFE]
    assert [int(w) for w in threefry2x32((ones, ones), (ones, ones))] == \
        [0x1CB996FC, 0xBB002BE7]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_the_bits_and_new_state_match_jax(algorithm):
    jax = pytest.importorskip("jax")
    from jax import lax

    chosen = {"rng_default": lax.RandomAlgorithm.RNG_DEFAULT,
              "rng_philox": lax.RandomAlgorithm.RNG_PHILOX,
              "rng_three_fry": lax.RandomAlgorithm.RNG_THREE_FRY}[algorithm]
    rng = np.random.default_rng(7)
    types = list(UNSIGNED.values())
    shapes = [(), (1,), (5,), (2, 3), (3, 5), (4, 8), (7, 1, 3), (2, 5, 7)]
    if algorithm == "rng_philox":  # what rng_default runs on CPU and GPU: a few shapes more
        shapes = shapes[2::3]
    for n, dims in enumerate(shapes):
        states = rng.integers(0, 2**64, (len(types), 2), dtype=np.uint64)
        states[n % len(types), 1] = np.uint64(2**64 - 2)  # a counter that wraps past 2**64

        def every_type(s, d=dims):  # one compile per shape
            return [lax.rng_bit_generator(s[k], d, dtype=t, algorithm=chosen)
                    for k, t in enumerate(types)]
        with jax.enable_x64(True):
            results = jax.jit(every_type)(states)
        for state, dtype, (new, bits) in zip(states, types, results):
            want_state, want = rng_bits(state, algorithm, dims, np.dtype(dtype))
            np.testing.assert_array_equal(np.asarray(new), want_state)
            assert np.asarray(bits).dtype == want.dtype
            np.testing.assert_array_equal(np.asarray(bits), want, err_msg=f"{dims} {dtype}")


@pytest.mark.parametrize("algorithm,length", [("rng_philox", 3), ("rng_default", 3),
                                              ("rng_three_fry", 2)])
def test_long_states_and_float_or_signed_bits_match_xla_running_the_text(algorithm, length):
    """A u64[3] state is a 128-bit Philox counter; bits of a float or signed type are the
    unsigned bits reinterpreted (what XLA's CPU backend returns)."""
    pytest.importorskip("jax")
    from tests.conformance.xla_oracle import run_xla

    state = np.array([0x0123456789ABCDEF, 2**64 - 3, 41][:length], np.uint64)
    for dtype in ("f32", "bf16", "s16", "f64", "u8"):
        text = _module(algorithm, length, dtype, (9, 6))
        want_state, want = run_xla(text, state)
        got_state, got = fusion.evaluate(fusion.parse_hlo(text), state)
        np.testing.assert_array_equal(np.asarray(got_state), np.asarray(want_state))
        np.testing.assert_array_equal(_bits(got), _bits(want), err_msg=dtype)


@settings(max_examples=25, deadline=None)
@given(algorithm=st.sampled_from(ALGORITHMS), long_state=st.booleans(),
       dtype=st.sampled_from(["u8", "u16", "u32", "u64", "s32", "f16", "f64"]),
       dims=st.lists(st.integers(1, 7), max_size=3).map(tuple),
       state=st.lists(st.integers(0, 2**64 - 1), min_size=3, max_size=3))
def test_the_expanded_ops_compute_the_evaluators_bits(algorithm, long_state, dtype, dims, state):
    """The law the compiler relies on: the integer ops ``rng_expansion`` writes compute, for
    every state, shape, type and algorithm, the bits and state the op itself computes."""
    length = 3 if long_state and algorithm != "rng_three_fry" else 2
    module = fusion.parse_hlo(_module(algorithm, length, dtype, dims))
    expanded = expand_rng_bit_generators(module)
    verify_module(expanded)
    assert "rng-bit-generator" not in {i.opcode for i in expanded.entry}
    values = np.array(state[:length], np.uint64)
    for got, want in zip(fusion.evaluate(expanded, values), fusion.evaluate(module, values)):
        assert np.asarray(got).shape == np.asarray(want).shape
        np.testing.assert_array_equal(_bits(got), _bits(want))


@pytest.mark.parametrize("state,bits,algorithm,problem", [
    ("u64[3]", "u32[4]", "rng_three_fry", "expected: u64[2]"),
    ("u64[4]", "u32[4]", "rng_philox", "expected: u64[2] or u64[3]"),
    ("u32[2]", "u32[4]", "rng_default", "the state of rng-bit-generator"),
    ("u64[2]", "pred[4]", "rng_default", "fills pred values"),
    ("u64[2]", "u32[4]", "rng_mersenne", "algorithm 'rng_mersenne' is unknown"),
])
def test_invalid_generators_are_located_errors(state, bits, algorithm, problem):
    text = (f"HloModule m\nENTRY e {{\n  s = {state} parameter(0)\n"
            f"  ROOT r = ({state}, {bits}) rng-bit-generator(s), algorithm={algorithm}\n}}\n")
    with pytest.raises(HloVerifyError) as info:
        verify_module(fusion.parse_hlo(text))
    assert problem in str(info.value) and (info.value.line, info.value.column) == (4, 3)
    with pytest.raises(HloVerifyError):  # the expansion checks before it writes anything
        expand_rng_bit_generators(fusion.parse_hlo(text))
