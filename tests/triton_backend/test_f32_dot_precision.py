"""TF32 for f32 dots as an explicit option (``compile_hlo(f32_dot_precision=...)``, issue 26).

The transform (``fusion.transforms.dot_algorithm``) gives XLA's TF32 algorithm to the f32 dots
that may take it and leaves the rest; ``compile_hlo`` then emits ``input_precision='tf32'`` in
the dot and attention kernels, keys its module cache by the option, and still matches the
reference evaluator within a TF32 error bound.
"""
from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import fusion
from fusion.errors import BadArgumentError
from fusion.text.parser import parse_hlo
from fusion.text.printer import print_hlo
from fusion.transforms.dot_algorithm import with_f32_dot_precision
from triton_backend.driver.module_compiler import compile_hlo
from triton_backend.host import output_check
from triton_backend.host.output_check import TF32_TOLERANCE
from triton_backend.integrations.torch_op import torch_op

TF32 = "input_precision='tf32'"

#: Four dots in an entry, and one in a fused computation: which ones take an algorithm.
MIXED = """HloModule mixed

fused_dot {
  fa = f32[8,16] parameter(0)
  fb = f32[16,4] parameter(1)
  ROOT fd = f32[8,4] dot(fa, fb), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

ENTRY e {
  a = f32[8,16] parameter(0)
  b = f32[16,4] parameter(1)
  default = f32[8,4] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}, operand_precision={default,default}
  highest = f32[8,4] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}, operand_precision={default,highest}
  given = f32[8,4] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}, algorithm=dot_f32_f32_f32
  ha = bf16[8,16] convert(a)
  hb = bf16[16,4] convert(b)
  half = bf16[8,4] dot(ha, hb), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  fused = f32[8,4] fusion(a, b), kind=kOutput, calls=fused_dot
  ROOT t = (f32[8,4], f32[8,4], f32[8,4], bf16[8,4], f32[8,4]) tuple(default, highest, given, half, fused)
}
"""


def _algorithms(module: fusion.HloModule) -> dict[str, str | None]:
    return {i.name: i.attr("algorithm", None)
            for c in module.computations for i in c if i.opcode == "dot"}


@pytest.mark.parametrize("precision,algorithm", [("tf32", "dot_tf32_tf32_f32"),
                                                 ("tf32x3", "dot_tf32_tf32_f32_x3")])
def test_transform_marks_only_default_f32_dots(precision, algorithm):
    out = with_f32_dot_precision(parse_hlo(MIXED), precision)
    assert _algorithms(out) == {"fd": algorithm, "default": algorithm, "highest": None,
                                "given": "dot_f32_f32_f32", "half": None}
    text = print_hlo(out)
    # XLA's own spelling, after the dot's other attributes; and it parses back the same.
    assert (f"default = f32[8,4] dot(a, b), lhs_contracting_dims={{1}}, "
            f"rhs_contracting_dims={{0}}, operand_precision={{default,default}}, "
            f"algorithm={algorithm}") in text
    assert "algorithm" not in next(line for line in text.splitlines() if "highest = " in line)
    assert parse_hlo(text) == out


def test_ieee_and_nothing_to_mark_return_the_module_itself():
    module = parse_hlo(MIXED)
    assert with_f32_dot_precision(module, "ieee") is module
    bf16_only = parse_hlo("""HloModule m
ENTRY e {
  a = bf16[4,4] parameter(0)
  ROOT d = bf16[4,4] dot(a, a), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}""")
    assert with_f32_dot_precision(bf16_only, "tf32") is bf16_only


@pytest.mark.parametrize("bad", ["TF32", "high", "", None, 32])
def test_bad_option_is_a_bad_argument(bad):
    with pytest.raises(BadArgumentError, match="f32_dot_precision") as err:
        compile_hlo(_dot_text(""), f32_dot_precision=bad)
    assert "'ieee', 'tf32', 'tf32x3'" in str(err.value)
    with pytest.raises(BadArgumentError, match="f32_dot_precision"):
        with_f32_dot_precision(parse_hlo(MIXED), bad)


def _dot_text(precision_attr: str, m: int = 24, k: int = 48, n: int = 20) -> str:
    return f"""HloModule tf32_dot
ENTRY e {{
  a = f32[{m},{k}] parameter(0)
  b = f32[{k},{n}] parameter(1)
  ROOT d = f32[{m},{n}] dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}{precision_attr}
}}"""


def _dot_sources(compiled) -> list[str]:
    return [f.source for f in compiled.fusions.values() if "tl.dot(" in f.source]


def _assert_within_tf32(got: np.ndarray, want: np.ndarray, bound_scale: np.ndarray) -> None:
    """TF32 keeps 10 of f32's 23 mantissa bits: rounding each operand to nearest is a relative
    error of at most 2^-11, so each product a*b is off by at most (2*2^-11 + 2^-22)|a||b|; the
    f32 accumulation of K products adds at most about K*2^-24 sum|a*b|.  For the K here
    (<= 64) that is below 1.0e-3 * (|A| @ |B|) per element; 2e-3 * (|A| @ |B|) leaves a factor
    of two.  The bound is per element and scaled by the magnitudes actually summed, so it holds
    through cancellation (an rtol on the result alone would not), and on a GPU too (under the
    interpreter tl.dot ignores input_precision and is exact)."""
    tol = 2e-3 * bound_scale + 1e-30
    err = np.abs(got.astype(np.float64) - want.astype(np.float64))
    assert (err <= tol).all(), f"max error {err.max():.3g}, worst ratio {(err / tol).max():.3g}"


def test_compile_hlo_tf32_only_for_default_dots_and_matches_the_evaluator():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((24, 48)).astype(np.float32)
    b = rng.standard_normal((48, 20)).astype(np.float32)
    default = compile_hlo(_dot_text(""), f32_dot_precision="tf32", cache=False)
    (source,) = _dot_sources(default)
    assert TF32 in source
    (got,) = default(torch.from_numpy(a), torch.from_numpy(b))
    module = default.source_module
    assert _algorithms(module) == {"d": "dot_tf32_tf32_f32"}
    want = np.asarray(fusion.evaluate(parse_hlo(_dot_text("")), a, b))
    _assert_within_tf32(got.numpy(), want, np.abs(a.astype(np.float64)) @ np.abs(b))
    highest = compile_hlo(_dot_text(", operand_precision={highest,highest}"),
                          f32_dot_precision="tf32", cache=False)
    (source,) = _dot_sources(highest)
    assert TF32 not in source and "input_precision='ieee'" in source


def test_module_cache_tells_the_options_apart():
    # The same text in one process (the in-process module cache on): each option its kernels.
    text = _dot_text("", m=16, k=32, n=16)
    ieee = compile_hlo(text)
    tf32 = compile_hlo(text, f32_dot_precision="tf32")
    tf32x3 = compile_hlo(text, f32_dot_precision="tf32x3")
    assert [TF32 in s for s in _dot_sources(ieee)] == [False]
    assert [TF32 in s for s in _dot_sources(tf32)] == [True]
    assert ["input_precision='tf32x3'" in s for s in _dot_sources(tf32x3)] == [True]
    # Each is cached: the same compiled kernels come back (with the module just parsed).
    assert compile_hlo(text, f32_dot_precision="tf32").fusions is tf32.fusions
    assert [TF32 in s for s in _dot_sources(compile_hlo(text))] == [False]


def _attention_text(precision) -> str:
    def f(q, k, v):
        s = jnp.einsum("...qd,...kd->...qk", q, k, precision=precision) / 8.0
        return jnp.einsum("...qk,...kd->...qd", jax.nn.softmax(s, axis=-1), v,
                          precision=precision)
    shape = jax.ShapeDtypeStruct((1, 2, 16, 8), jnp.float32)
    return jax.jit(f).lower(shape, shape, shape).as_text(dialect="hlo")


def test_attention_kernel_uses_tf32_for_default_dots_only():
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((1, 2, 16, 8)).astype(np.float32) for _ in range(3))
    text = _attention_text(None)
    compiled = compile_hlo(text, f32_dot_precision="tf32", cache=False)
    (attention,) = [f for f in compiled.fusions.values() if f.kind == "attention"]
    assert attention.source.count(TF32) >= 2  # both dots: scores and the weighted sum
    (got,) = compiled(*(torch.from_numpy(x) for x in (q, k, v)))
    want = np.asarray(fusion.evaluate(parse_hlo(text), q, k, v))
    # The softmax weights w are >= 0 and sum to one.  The scores are off by at most
    # e = 2e-3 * max(|q| @ |k|^T) / 8 (the dot bound below), which moves each weight by a
    # relative exp(2e) - 1 ~ 2e, so the output by <= 2e * max|v|; the second dot adds its own
    # TF32 error, <= 2e-3 * (w @ |v|) <= 2e-3 * max|v|.  As a bound 2e-3 * scale:
    score_err = 2e-3 * (np.abs(q) @ np.abs(k).swapaxes(-1, -2)).max() / 8.0
    scale = np.abs(v).max() * (1.0 + 2.0 * score_err / 2e-3) * np.ones_like(want)
    _assert_within_tf32(got.numpy(), want, scale)
    exact = compile_hlo(_attention_text(jax.lax.Precision.HIGHEST), f32_dot_precision="tf32",
                        cache=False)
    (attention,) = [f for f in exact.fusions.values() if f.kind == "attention"]
    assert TF32 not in attention.source


def test_torch_op_passes_the_option_to_forward_and_backward():
    text = _dot_text("", m=8, k=16, n=8).replace("tf32_dot", "tf32_torch_op")
    op = torch_op(text, name="tf32_dot_option", f32_dot_precision="tf32")
    assert [TF32 in s for s in _dot_sources(op.compiled)] == [True]
    rng = np.random.default_rng(2)
    a = torch.from_numpy(rng.standard_normal((8, 16)).astype(np.float32)).requires_grad_()
    b = torch.from_numpy(rng.standard_normal((16, 8)).astype(np.float32))
    op(a, b).sum().backward()
    # d(sum(a @ b))/da = ones @ b^T: the backward module's dot runs as TF32 too.
    sources = _dot_sources(op.backward.compiled)
    assert sources and all(TF32 in s for s in sources)
    want = np.ones((8, 8)) @ b.numpy().T.astype(np.float64)
    _assert_within_tf32(a.grad.numpy(), want, np.ones((8, 8)) @ np.abs(b.numpy().T))
    with pytest.raises(BadArgumentError, match="f32_dot_precision"):
        torch_op(text, name="tf32_dot_bad_option", f32_dot_precision="fast")


def test_cli_run_and_compile_take_the_option(tmp_path, monkeypatch, capsys):
    from triton_backend.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "dot.hlo").write_text(_dot_text("", m=8, k=16, n=8))
    assert main(["run", "dot.hlo", "--check", "--json", "--f32-dot-precision", "tf32"]) == 0
    check = json.loads(capsys.readouterr().out)["check"]
    widened = output_check.widened(TF32_TOLERANCE, 16)  # the dot adds 16 terms
    tolerance = (widened.atol, widened.rtol)
    assert check["passed"] and [(o["atol"], o["rtol"]) for o in check["outputs"]] == [tolerance]
    assert main(["compile", "dot.hlo", "-o", "out", "--f32-dot-precision", "tf32"]) == 0
    kernels = [p.read_text() for p in (tmp_path / "out").glob("kernel_*.py")]
    assert kernels and all(TF32 in k for k in kernels)
    with pytest.raises(SystemExit):
        main(["run", "dot.hlo", "--f32-dot-precision", "fast"])


def test_a_module_naming_tf32_itself_is_checked_at_tf32_tolerance():
    # The evaluator multiplies exactly; a GPU runs the dot in TF32, as the HLO asks.
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((8, 16)).astype(np.float32), rng.standard_normal((16, 8))
    b = b.astype(np.float32)
    rounded = [(x.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32) for x in (a, b)]
    tf32_like = rounded[0] @ rounded[1]  # what TF32 tensor cores give, operands truncated
    widened = output_check.widened(TF32_TOLERANCE, 16)
    for attr, tolerance in ((", algorithm=dot_tf32_tf32_f32", widened),
                            ("", output_check.widened(output_check.TOLERANCES["f32"], 16))):
        module = parse_hlo(_dot_text(attr, m=8, k=16, n=8))
        [check] = output_check.compare_with_evaluator(module, [a, b], [tf32_like], ["f32"])
        assert check.tolerance == tolerance
        assert check.passed == bool(attr), check.describe()
