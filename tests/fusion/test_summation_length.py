"""The longest sum behind each result (``fusion.analysis.summation_length``), which widens
``--check``'s tolerance: counted by hand on small modules of every kind of sum."""
from __future__ import annotations

import pytest

from fusion.analysis.summation_length import output_summation_lengths
from fusion.text.parser import parse_hlo

ADD = """add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
"""


def lengths(entry: str, extra: str = "") -> tuple[int, ...]:
    return output_summation_lengths(parse_hlo(f"HloModule m\n{ADD}{extra}ENTRY e {{\n{entry}\n}}"))


def test_a_dot_adds_its_contracted_dims_and_a_chain_takes_the_longest():
    """Two dots in a row: each result rounds on its own, so the lengths do not multiply."""
    assert lengths("""  x = f32[4,64,32] parameter(0)
  w = f32[4,32,96] parameter(1)
  v = f32[96,8] parameter(2)
  d = f32[4,64,96] dot(x, w), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
  ROOT e = f32[4,64,8] dot(d, v), lhs_contracting_dims={2}, rhs_contracting_dims={0}""") == (96,)


def test_a_convolution_adds_its_window_times_its_input_features():
    assert lengths("""  x = f32[1,10,10,3] parameter(0)
  k = f32[3,3,3,16] parameter(1)
  ROOT c = f32[1,8,8,16] convolution(x, k), window={size=3x3}, dim_labels=b01f_01io->b01f""") == (27,)


def test_a_scan_adds_its_window_and_elementwise_work_adds_nothing():
    assert lengths("""  x = f32[4,300] parameter(0)
  z = f32[] constant(0)
  s = f32[4,300] reduce-window(x, z), window={size=1x300 pad=0_0x299_0}, to_apply=add
  ROOT n = f32[4,300] negate(s)""") == (300,)
    assert lengths("""  x = f32[4,300] parameter(0)
  ROOT n = f32[4,300] negate(x)""") == (1,)


def test_each_tuple_leaf_has_its_own_length():
    assert lengths("""  x = f32[16,8] parameter(0)
  z = f32[] constant(0)
  rows = f32[16] reduce(x, z), dimensions={1}, to_apply=add
  all = f32[] reduce(x, z), dimensions={0,1}, to_apply=add
  inner = (f32[16], f32[]) tuple(rows, all)
  ROOT t = ((f32[16], f32[]), f32[16,8]) tuple(inner, x)""") == (8, 128, 1)


@pytest.mark.parametrize("kind", ["fusion", "call"])
def test_a_called_computation_counts_its_sums(kind):
    extra = """body {
  p = f32[64,128] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[64] reduce(p, z), dimensions={1}, to_apply=add
}
"""
    how = "kind=kInput, calls=body" if kind == "fusion" else "to_apply=body"
    assert lengths(f"""  x = f32[64,128] parameter(0)
  ROOT f = f32[64] {kind}(x), {how}""", extra) == (128,)


def test_run_check_widens_a_sums_tolerance(tmp_path, monkeypatch, capsys):
    """``fusion-compile run --check``: a column sum over 400 rows is compared at 20 times f32's
    tolerance, the elementwise result beside it at f32's own."""
    import json

    from triton_backend.cli import main
    from triton_backend.host.output_check import TOLERANCES

    monkeypatch.chdir(tmp_path)
    (tmp_path / "sums.hlo").write_text(f"HloModule sums\n{ADD}ENTRY e {{\n"
                                       "  x = f32[400,8] parameter(0)\n  z = f32[] constant(0)\n"
                                       "  r = f32[8] reduce(x, z), dimensions={0}, to_apply=add\n"
                                       "  n = f32[400,8] negate(x)\n"
                                       "  ROOT t = (f32[8], f32[400,8]) tuple(r, n)\n}\n")
    assert main(["run", "sums.hlo", "--check", "--json"]) == 0
    outputs = json.loads(capsys.readouterr().out)["check"]["outputs"]
    f32 = TOLERANCES["f32"]
    assert [(o["atol"], o["rtol"]) for o in outputs] == [(f32.atol * 20, f32.rtol * 20),
                                                         (f32.atol, f32.rtol)]
