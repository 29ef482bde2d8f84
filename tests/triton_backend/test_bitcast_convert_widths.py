"""``bitcast-convert`` between element widths (``lax.bitcast_convert_type`` from f32 to u16
adds a minor dim of 2, u16[..., 2] to f32 drops it): kept out of fusions and run on the host
as a view of the buffer (``fusion.analysis.element_width``, ``host_ops.host_bitcast_convert``).
Truths: XLA itself (JAX on CPU), bit for bit, and the op coverage check."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import fusion
from fusion.errors import UnsupportedOpError
from triton_backend import compile_hlo
from triton_backend.driver import op_coverage as oc
from triton_backend.host.input_validation import tensor_from_numpy, tensor_to_numpy

RNG = np.random.default_rng(0)


def _split(x):  # each f32 into its two u16 halves, low first; fused ops on both sides
    return lax.bitcast_convert_type(x * 2, jnp.uint16) + 1


def _join(x):
    return lax.bitcast_convert_type(x + 1, jnp.float32) * 2


def _scalar(x):
    return lax.bitcast_convert_type(x, jnp.uint8)


def _pack_bf16_pairs(x):
    return lax.bitcast_convert_type(x.astype(jnp.bfloat16), jnp.uint32)


CASES = {
    "split": (_split, RNG.standard_normal((3, 5)).astype(np.float32)),
    "join": (_join, RNG.integers(0, 60000, (3, 5, 2)).astype(np.uint16)),
    "scalar": (_scalar, np.float32(1.5)),
    "pack_bf16_pairs": (_pack_bf16_pairs, RNG.standard_normal((4, 6, 2)).astype(np.float32)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_width_changing_bitcast_convert_matches_xla_bit_for_bit(name):
    fn, x = CASES[name]
    text = jax.jit(fn).lower(x).as_text(dialect="hlo")
    module = fusion.parse_hlo(text)
    assert oc.uncovered_ops(module) == []
    compiled = compile_hlo(text, cache=False)
    # never inside a fused computation: a host step between the kernels
    assert not any(i.opcode == "bitcast-convert" for c in compiled.module.computations
                   if c.name != compiled.module.entry_name for i in c.instructions)
    (got,) = compiled(tensor_from_numpy(np.asarray(x), module.entry.parameters[0].shape.dtype))
    want = np.asarray(jax.jit(fn)(x))
    got = tensor_to_numpy(got)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def test_a_width_change_on_a_transposed_layout_is_refused_located():
    text = ("HloModule m\nENTRY e {\n  x = f32[3,4]{0,1} parameter(0)\n"
            "  ROOT r = u16[3,4,2]{2,1,0} bitcast-convert(x)\n}\n")
    [found] = oc.uncovered_ops(fusion.parse_hlo(text))
    assert found.instruction.name == "r" and "untiled row-major" in found.reason
    with pytest.raises(UnsupportedOpError, match="changes the element width") as info:
        compile_hlo(text, cache=False)
    assert (info.value.line, info.value.column) == (4, 3)
