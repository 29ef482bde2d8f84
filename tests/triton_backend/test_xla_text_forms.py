"""HLO text as XLA's own parser accepts it (issue 15), each run against XLA on the same text.

* a module without the ``HloModule`` line: XLA names it ``module_<entry computation>``;
* computations written inline as attribute values (``to_apply={ ... }``), named ``_``, ``_.1``;
* ``backend_config`` in protobuf text format as well as JSON, with ``block_level_fusion_config``
  read from either;
* XLA:CPU's library fusions (``kind=kCustom``, ``"fusion_config":{"kind":"__ynn_fusion"}``),
  compiled from their bodies like any fusion;
* float literals as XLA reads them: the integer token ``-0`` is +0, ``-0.0`` is -0.
"""
from __future__ import annotations

import numpy as np
import pytest

from fusion.analysis.emitter_kind import EmitterKind, analyze_fusion
from fusion.text.parser import parse_hlo
from fusion.text.printer import print_hlo
from tiling.policy.candidates import tiling_candidates
from tiling.policy.choice import choose_from_report
from tiling.policy.xla_tiling_config import xla_tiling_of
from triton_backend import compile_hlo
from triton_backend.host.input_validation import tensor_from_numpy, tensor_to_numpy

pytest.importorskip("jax")
from tests.conformance.xla_oracle import run_xla  # noqa: E402 - after the jax check

HEADERLESS_INLINE = """
ENTRY main.7 {
  x = f32[4,8] parameter(0)
  z = f32[] constant(0)
  r = f32[4] reduce(x, z), dimensions={1}, to_apply={
    a = f32[] parameter(0)
    b = f32[] parameter(1)
    ROOT c = f32[] add(a, b)
  }
  m = f32[4] reduce(x, z), dimensions={1}, to_apply={ a = f32[] parameter(0)
    b = f32[] parameter(1)
    ROOT c = f32[] maximum(a, b) }
  f = f32[4] fusion(r, m), kind=kLoop, calls={ p = f32[4] parameter(0)
    q = f32[4] parameter(1)
    ROOT n = f32[4] subtract(p, q) }
  ROOT t = (f32[4], f32[4]) tuple(f, r)
}"""

PROTO_CONFIG = ('{ fusion_backend_config:{ kind: "__triton" block_level_fusion_config:{ '
                'output_tiles:{ sizes:"2" sizes:"128"} num_warps:"4" } } }')
JSON_CONFIG = ('{"fusion_backend_config":{"kind":"__triton","block_level_fusion_config":'
               '{"output_tiles":[{"sizes":["2","128"]}],"num_warps":"4"}}}')

TRITON_FUSION = """HloModule m
f {
  p = f32[8,256] parameter(0)
  ROOT e = f32[8,256] exponential(p)
}
ENTRY e {
  x = f32[8,256] parameter(0)
  ROOT y = f32[8,256] fusion(x), kind=kCustom, calls=f, backend_config=CONFIG
}"""

# What XLA:CPU prints for a large reduction and for a dot (their YNNPACK library fusions).
LIBRARY_FUSIONS = """HloModule m
region {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}
reduce_body {
  p = f32[4,40] parameter(0)
  c = f32[] constant(-inf)
  ROOT r = f32[4] reduce(p, c), dimensions={1}, to_apply=region
}
dot_body {
  p0 = f32[8,16] parameter(0)
  p1 = f32[16,4] parameter(1)
  ROOT d = f32[8,4] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
ENTRY e {
  x = f32[4,40] parameter(0)
  y = f32[8,16] parameter(1)
  w = f32[16,4] parameter(2)
  r = f32[4] fusion(x), kind=kCustom, calls=reduce_body, backend_config={"fusion_config":{"kind":"__ynn_fusion"},"outer_dimension_partitions":[]}
  d = f32[8,4] fusion(y, w), kind=kCustom, calls=dot_body, backend_config={"fusion_config":{"kind":"__ynn_fusion"},"outer_dimension_partitions":[]}
  ROOT t = (f32[4], f32[8,4]) tuple(r, d)
}"""


def _run(text: str, *arrays: np.ndarray) -> list[np.ndarray]:
    module = parse_hlo(text)
    compiled = compile_hlo(text)
    tensors = [tensor_from_numpy(a, p.shape.dtype) for a, p in zip(arrays, module.entry.parameters)]
    return [tensor_to_numpy(t) for t in compiled(*tensors)]


def _close(got, want) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, np.asarray(w), rtol=2e-6, atol=1e-6)


def test_headerless_module_with_inline_computations_is_named_and_run_as_xla_does():
    from jaxlib import _hlo

    module = parse_hlo(HEADERLESS_INLINE)
    assert module.name == _hlo.hlo_module_from_text(HEADERLESS_INLINE).name == "module_main.7"
    assert [c.name for c in module.computations] == ["_", "_.1", "_.2", "main.7"]
    assert module.entry.instruction("m").attr("to_apply") == "_.1"
    printed = print_hlo(module)
    assert print_hlo(parse_hlo(printed)) == printed
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    _close(_run(HEADERLESS_INLINE, x), run_xla(HEADERLESS_INLINE, x))


def test_a_list_of_computation_names_is_not_taken_for_an_inline_body():
    text = HEADERLESS_INLINE.replace("calls={ p = f32[4] parameter(0)", "calls={sub}, x={ p = f32[4] parameter(0)")
    module = parse_hlo(text)
    assert module.entry.instruction("f").attr("calls") == ("sub",)
    assert [c.name for c in module.computations] == ["_", "_.1", "main.7"]


def test_block_level_config_reads_the_same_from_protobuf_text_and_json():
    configs = {}
    for form, config in (("text", PROTO_CONFIG), ("json", JSON_CONFIG)):
        module = parse_hlo(TRITON_FUSION.replace("CONFIG", config))
        fusion = module.entry.root
        configs[form] = xla_tiling_of(fusion)
        assert analyze_fusion(module, fusion).kind is EmitterKind.TRITON
        chosen, why = choose_from_report(tiling_candidates(module, fusion))
        assert chosen.tile_sizes == (2, 128) and "XLA" in why
    assert configs["text"] == configs["json"]
    assert configs["text"].output_tiles == ((2, 128),) and configs["text"].num_warps == 4


def test_cpu_library_fusions_compile_from_their_bodies():
    module = parse_hlo(LIBRARY_FUSIONS)
    for name in ("r", "d"):
        kind = analyze_fusion(module, module.entry.instruction(name)).kind
        assert kind not in (EmitterKind.CUSTOM, EmitterKind.CUDNN, EmitterKind.TRITON)
    rng = np.random.default_rng(2)
    arrays = (rng.standard_normal((4, 40)).astype(np.float32),
              rng.standard_normal((8, 16)).astype(np.float32),
              rng.standard_normal((16, 4)).astype(np.float32))
    _close(_run(LIBRARY_FUSIONS, *arrays), run_xla(LIBRARY_FUSIONS, *arrays))


@pytest.mark.parametrize("literal,sign", [("-0", 1.0), ("-0.0", -1.0), ("0", 1.0)])
def test_a_negative_zero_literal_reads_as_xla_reads_it(literal, sign):
    text = f"""HloModule m
ENTRY e {{
  x = f32[2] parameter(0)
  c = f32[] constant({literal})
  b = f32[2] broadcast(c), dimensions={{}}
  ROOT d = f32[2] divide(x, b)
}}"""
    value = parse_hlo(text).entry.instruction("c").attr("literal").values[0]
    assert np.copysign(1.0, value) == sign
    x = np.float32([1.0, -2.0])
    (want,) = run_xla(text, x)
    (got,) = _run(text, x)
    np.testing.assert_array_equal(got, np.asarray(want))
    np.testing.assert_array_equal(got, sign * np.float32([np.inf, -np.inf]))
