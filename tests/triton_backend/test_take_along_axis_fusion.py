"""Cross-entropy written with ``jnp.take_along_axis``: the gather (one element per row, at a
data-dependent column) fuses into the row reduction's kernel as a per-row load at the clamped
label column, and the kernel, the evaluator and XLA agree on every label, out-of-range and
negative ones included (the program's own wrap-around select and validity check give NaN;
a bare gather clamps as XLA does)."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("jax")

from tests.triton_backend.xla_three_way import compare_three_ways  # noqa: E402
from triton_backend.reports.compile_report import build_report  # noqa: E402

BENCH = Path(__file__).resolve().parents[2] / "bench" / "programs"
ROWS, COLS = 8, 64
# In range, the last column, past the end, wrapped negatives (-1 -> 63, -64 -> 0) and
# negatives that stay out of range after the wrap (-65, -200).
LABELS = np.array([0, 63, 64, 100, -1, -64, -65, -200], dtype=np.int32)


def small_program(name: str) -> str:
    """A bench program at ``ROWS x COLS``: the generator's JAX HLO with its sizes replaced."""
    text = (BENCH / f"{name}_4096x8192.hlo").read_text()
    return (text.replace("8191", str(COLS - 1)).replace("8192", str(COLS))
            .replace("4096", str(ROWS)))


def per_row_loss(text: str) -> str:
    """``text`` with the per-row loss (before the mean) as its result."""
    text = text.replace("ROOT div.1", "div.1").replace(
        "sub.9 = f32[8]{0} subtract", "ROOT sub.9 = f32[8]{0} subtract")
    return text.replace("->f32[]}", "->f32[8]{0}}")


def logits(dtype: str) -> np.ndarray:
    x = np.random.default_rng(0).normal(size=(ROWS, COLS)).astype(np.float32)
    if dtype == "bf16":
        import ml_dtypes  # noqa: PLC0415
        return x.astype(ml_dtypes.bfloat16)
    return x


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_per_row_loss_is_one_kernel_and_matches_xla(dtype):
    text = per_row_loss(small_program(f"cross_entropy_{dtype}"))
    compiled = compare_three_ways(text, logits(dtype), LABELS, rtol=1e-5, atol=1e-5)
    report = build_report(compiled, device=None)
    assert len(report.fusions) == 1, [f.name for f in report.fusions]
    assert report.kernel_bytes == report.compulsory_bytes


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_mean_loss_fuses_like_the_one_hot_form(dtype):
    """In-range labels give a finite mean; the kernel is that of the one-hot program: the
    row reduction with the mean over rows in it (split among programs on a GPU)."""
    labels = np.array([0, 63, 5, 17, 32, 1, 62, 40], dtype=np.int32)
    text = small_program(f"cross_entropy_{dtype}")
    compiled = compare_three_ways(text, logits(dtype), labels, rtol=1e-5, atol=1e-5)
    report = build_report(compiled, device=None)
    one_hot = build_report(compare_three_ways(small_program(f"cross_entropy_one_hot_{dtype}"),
                                              logits(dtype), labels, rtol=1e-5, atol=1e-5),
                           device=None)
    assert len(report.fusions) == len(one_hot.fusions) == 1
    # Nothing travels between kernels: the logits and labels are read once, the mean written.
    assert report.kernel_bytes == report.compulsory_bytes


# What ``logsumexp(x) - x[row, labels[row]]`` is without the program's validity check: the
# gather clamps an out-of-range start index into the row, as XLA does.
BARE_GATHER = f"""HloModule bare
max {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}}
ENTRY e {{
  x = f32[{ROWS},{COLS}] parameter(0)
  labels = s32[{ROWS}] parameter(1)
  ninf = f32[] constant(-inf)
  top = f32[{ROWS}] reduce(x, ninf), dimensions={{1}}, to_apply=max
  r = s32[{ROWS},1] reshape(labels)
  picked = f32[{ROWS}] gather(x, r), offset_dims={{}}, collapsed_slice_dims={{1}},
    start_index_map={{1}}, operand_batching_dims={{0}}, start_indices_batching_dims={{0}},
    index_vector_dim=1, slice_sizes={{1,1}}
  ROOT loss = f32[{ROWS}] subtract(top, picked)
}}"""


def test_bare_gather_clamps_out_of_range_labels_inside_the_reduction_kernel():
    compiled = compare_three_ways(BARE_GATHER, logits("f32"), LABELS)
    report = build_report(compiled, device=None)
    (fusion,) = report.fusions
    kernel = Path(compiled.fusions[fusion.name].kernel_path).read_text()
    # XLA's clamp of the start index into [0, COLS - 1], then one load per row.
    assert re.search(rf"tl\.minimum\(tl\.maximum\(\(\w+\)\.to\(tl\.int64\), 0\), {COLS - 1}\)",
                     kernel), kernel
