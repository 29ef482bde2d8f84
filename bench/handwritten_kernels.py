"""Hand-written Triton kernels that ``bench/fusion_quality.py`` sets beside ours.

* ``softmax``: the fused softmax of the Triton tutorials (``02-fused-softmax.py``): one
  program per row (a persistent loop over rows), the whole row in registers;
* ``layernorm``: the forward kernel of the Triton tutorials' layer norm
  (``05-layer-norm.py``, ``_layer_norm_fwd_fused``), which also stores the mean and rstd;
* ``matmul_bias_gelu``: the tutorials' matmul (``03-matrix-multiplication.py``: grouped
  program order, a K loop of ``tl.dot``) with a fused epilogue: bias, then tanh-GELU, stored
  as bf16.

Each :class:`Case` names the kernel, its Triton signature and constexprs, launch options and
the HLO shapes it reads and writes, so it compiles the same way as our kernels
(``triton_backend.reports.ptx_report.compile_for_target``: PTX for ``sm_90`` and the wheel's
``ptxas -v`` for registers and spills, no GPU needed).  By construction each reads its inputs
once and writes its outputs once: memory moved = compulsory.

Compiling needs real ``JITFunction`` s, i.e. a process without ``TRITON_INTERPRET``;
:func:`compile_in_child` starts one (``python bench/handwritten_kernels.py --arch 90``, which
prints one JSON line).  On a GPU, :data:`LAUNCHERS` run the kernels on torch tensors
(``bench/gpu_runtime.py``).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import triton
import triton.language as tl

_MARKER = "HANDWRITTEN-JSON "

_BYTES = {"f32": 4, "bf16": 2, "f16": 2}


@triton.jit
def softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, n_cols,
                   BLOCK_SIZE: tl.constexpr, num_stages: tl.constexpr):
    # The Triton tutorial's fused softmax, verbatim but for the names of comments.
    row_start = tl.program_id(0)
    row_step = tl.num_programs(0)
    for row_idx in tl.range(row_start, n_rows, row_step, num_stages=num_stages):
        row_start_ptr = input_ptr + row_idx * input_row_stride
        col_offsets = tl.arange(0, BLOCK_SIZE)
        input_ptrs = row_start_ptr + col_offsets
        mask = col_offsets < n_cols
        row = tl.load(input_ptrs, mask=mask, other=-float("inf"))
        row_minus_max = row - tl.max(row, axis=0)
        numerator = tl.exp(row_minus_max)
        denominator = tl.sum(numerator, axis=0)
        softmax_output = numerator / denominator
        output_row_start_ptr = output_ptr + row_idx * output_row_stride
        output_ptrs = output_row_start_ptr + col_offsets
        tl.store(output_ptrs, softmax_output, mask=mask)


@triton.jit
def layer_norm_fwd_fused(X, Y, W, B, Mean, Rstd, stride, N, eps, BLOCK_SIZE: tl.constexpr):
    # The Triton tutorial's layer norm forward kernel.
    row = tl.program_id(0)
    Y += row * stride
    X += row * stride
    _mean = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        a = tl.load(X + cols, mask=cols < N, other=0.).to(tl.float32)
        _mean += a
    mean = tl.sum(_mean, axis=0) / N
    _var = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        x = tl.load(X + cols, mask=cols < N, other=0.).to(tl.float32)
        x = tl.where(cols < N, x - mean, 0.)
        _var += x * x
    var = tl.sum(_var, axis=0) / N
    rstd = 1 / tl.sqrt(var + eps)
    tl.store(Mean + row, mean)
    tl.store(Rstd + row, rstd)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        mask = cols < N
        w = tl.load(W + cols, mask=mask)
        b = tl.load(B + cols, mask=mask)
        x = tl.load(X + cols, mask=mask, other=0.).to(tl.float32)
        x_hat = (x - mean) * rstd
        y = x_hat * w + b
        tl.store(Y + cols, y, mask=mask)


@triton.jit
def matmul_bias_gelu_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K,
                            stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                            BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
                            BLOCK_SIZE_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr):
    # The Triton tutorial's matmul (grouped ordering), epilogue: + bias, tanh-GELU, bf16.
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    offs_am = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
    offs_bn = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_SIZE_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_SIZE_K, other=0.0)
        accumulator = tl.dot(a, b, accumulator)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    bias = tl.load(bias_ptr + offs_cn, mask=offs_cn < N, other=0.0).to(tl.float32)
    y = accumulator + bias[None, :]
    inner = 0.7978845608028654 * (y + 0.044715 * y * y * y)
    tanh = 2.0 * tl.sigmoid(2.0 * inner) - 1.0
    c = (0.5 * y * (1.0 + tanh)).to(tl.bfloat16)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptrs, c, mask=c_mask)


@dataclass(frozen=True)
class Case:
    """One hand-written kernel at one size, described enough to compile and to count bytes."""

    name: str
    comparable: str               #: the bench program it corresponds to
    kernel: str                   #: attribute name of the ``@triton.jit`` function here
    signature: dict
    constexprs: dict
    aligned: tuple[str, ...]
    num_warps: int
    num_stages: int
    grid: tuple[int, ...]
    inputs: tuple[tuple[str, tuple[int, ...]], ...]    #: (dtype, dims) read once each
    outputs: tuple[tuple[str, tuple[int, ...]], ...]   #: (dtype, dims) written once each
    notes: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def input_bytes(self) -> int:
        return sum(_BYTES[t] * math.prod(d) for t, d in self.inputs)

    @property
    def output_bytes(self) -> int:
        return sum(_BYTES[t] * math.prod(d) for t, d in self.outputs)

    @property
    def compulsory_bytes(self) -> int:
        return self.input_bytes + self.output_bytes


def _softmax_case(rows: int, cols: int) -> Case:
    block = triton.next_power_of_2(cols)
    return Case(
        f"triton tutorial softmax f32[{rows},{cols}]", f"softmax_f32_{rows}x{cols}",
        "softmax_kernel",
        {"output_ptr": "*fp32", "input_ptr": "*fp32", "input_row_stride": "i32",
         "output_row_stride": "i32", "n_rows": "i32", "n_cols": "i32",
         "BLOCK_SIZE": "constexpr", "num_stages": "constexpr"},
        {"BLOCK_SIZE": block, "num_stages": 4},
        ("output_ptr", "input_ptr", "input_row_stride", "output_row_stride", "n_rows", "n_cols"),
        8, 4, (rows,), (("f32", (rows, cols)),), (("f32", (rows, cols)),),
        "one program per row (the tutorial caps the grid at the resident programs)")


def _layernorm_case(rows: int, cols: int) -> Case:
    block = min(65536 // 4, triton.next_power_of_2(cols))
    return Case(
        f"triton tutorial layernorm f32[{rows},{cols}]", f"layernorm_f32_{rows}x{cols}",
        "layer_norm_fwd_fused",
        {"X": "*fp32", "Y": "*fp32", "W": "*fp32", "B": "*fp32", "Mean": "*fp32",
         "Rstd": "*fp32", "stride": "i32", "N": "i32", "eps": "fp32",
         "BLOCK_SIZE": "constexpr"},
        {"BLOCK_SIZE": block},
        ("X", "Y", "W", "B", "Mean", "Rstd", "stride", "N"),
        min(max(block // 256, 1), 8), 1, (rows,),
        (("f32", (rows, cols)), ("f32", (cols,)), ("f32", (cols,))),
        (("f32", (rows, cols)), ("f32", (rows,)), ("f32", (rows,))),
        "also writes the mean and rstd rows (for the backward pass)")


def _matmul_case(m: int, n: int, k: int) -> Case:
    bm, bn, bk = 128, 256, 64
    return Case(
        f"triton tutorial matmul+bias+GELU bf16 {m}x{k}x{n}", f"matmul_bias_gelu_bf16_{m}",
        "matmul_bias_gelu_kernel",
        {"a_ptr": "*bf16", "b_ptr": "*bf16", "bias_ptr": "*bf16", "c_ptr": "*bf16",
         "M": "i32", "N": "i32", "K": "i32", "stride_am": "i32", "stride_ak": "constexpr",
         "stride_bk": "i32", "stride_bn": "constexpr", "stride_cm": "i32",
         "stride_cn": "constexpr", "BLOCK_SIZE_M": "constexpr", "BLOCK_SIZE_N": "constexpr",
         "BLOCK_SIZE_K": "constexpr", "GROUP_SIZE_M": "constexpr"},
        {"stride_ak": 1, "stride_bn": 1, "stride_cn": 1, "BLOCK_SIZE_M": bm,
         "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": 8},
        ("a_ptr", "b_ptr", "bias_ptr", "c_ptr", "M", "N", "K", "stride_am", "stride_bk",
         "stride_cm"),
        8, 3, (math.ceil(m / bm) * math.ceil(n / bn),),
        (("bf16", (m, k)), ("bf16", (k, n)), ("bf16", (n,))), (("bf16", (m, n)),),
        f"tiles {bm}x{bn}x{bk}, the tutorial's first sm_90 config",
        {"m": m, "n": n, "k": k})


def cases() -> list[Case]:
    """The hand-written kernels at the sizes of the matching bench programs."""
    return [_softmax_case(4096, 1024), _softmax_case(1024, 8192), _layernorm_case(4096, 1024),
            _layernorm_case(1024, 8192), _matmul_case(1024, 1024, 1024)]


def compile_cases(arch: int = 90, names: list[str] | None = None) -> list[dict]:
    """Compile every case for ``sm_<arch>`` in this process (which must not interpret)."""
    from triton_backend.reports.ptx_report import compile_for_target  # noqa: PLC0415

    out = []
    for case in cases():
        if names and case.name not in names:
            continue
        row = {"name": case.name, "comparable": case.comparable, "grid": list(case.grid),
               "num_warps": case.num_warps, "num_stages": case.num_stages,
               "compulsory_bytes": case.compulsory_bytes, "notes": case.notes}
        try:
            r = compile_for_target(globals()[case.kernel], case.signature, case.constexprs,
                                   aligned=case.aligned, arch=arch, num_warps=case.num_warps,
                                   num_stages=case.num_stages)
            row.update(registers=r.registers, spills=r.spills, shared_bytes=r.shared_bytes)
        except Exception as err:  # noqa: BLE001 - reported in the row
            row["error"] = f"{type(err).__name__}: {str(err)[:300]}"
        out.append(row)
    return out


def compile_in_child(arch: int = 90, names: list[str] | None = None) -> list[dict]:
    """:func:`compile_cases` in a child process without ``TRITON_INTERPRET``."""
    from triton_backend.reports.compile_child import child_environment

    env = child_environment()
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    command = [sys.executable, str(Path(__file__).resolve()), "--arch", str(arch)]
    for name in names or ():
        command += ["--only", name]
    result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith(_MARKER)]
    if result.returncode != 0 or not lines:
        raise RuntimeError(f"compiling the hand-written kernels failed:\n{result.stderr[-3000:]}")
    return json.loads(lines[-1][len(_MARKER):])


# --- launching on a GPU (bench/gpu_runtime.py) ----------------------------------------------

def launch_softmax(x, num_stages: int = 4):
    import torch  # noqa: PLC0415

    y = torch.empty_like(x)
    rows, cols = x.shape
    # num_stages is the kernel's own constexpr (the software pipelining of its row loop).
    softmax_kernel[(rows,)](y, x, x.stride(0), y.stride(0), rows, cols,
                            triton.next_power_of_2(cols), num_stages, num_warps=8)
    return y


def launch_layernorm(x, w, b, eps: float = 1e-5):
    import torch  # noqa: PLC0415

    rows, cols = x.shape
    y = torch.empty_like(x)
    mean = torch.empty(rows, dtype=torch.float32, device=x.device)
    rstd = torch.empty(rows, dtype=torch.float32, device=x.device)
    block = min(65536 // x.element_size(), triton.next_power_of_2(cols))
    layer_norm_fwd_fused[(rows,)](x, y, w, b, mean, rstd, x.stride(0), cols, eps,
                                  BLOCK_SIZE=block, num_warps=min(max(block // 256, 1), 8))
    return y


def launch_matmul_bias_gelu(a, w, bias):
    import torch  # noqa: PLC0415

    m, k = a.shape
    _, n = w.shape
    c = torch.empty((m, n), dtype=torch.bfloat16, device=a.device)
    grid = (triton.cdiv(m, 128) * triton.cdiv(n, 256),)
    matmul_bias_gelu_kernel[grid](a, w, bias, c, m, n, k, a.stride(0), a.stride(1), w.stride(0),
                                  w.stride(1), c.stride(0), c.stride(1), BLOCK_SIZE_M=128,
                                  BLOCK_SIZE_N=256, BLOCK_SIZE_K=64, GROUP_SIZE_M=8,
                                  num_warps=8, num_stages=3)
    return c


#: kernel attribute -> launcher taking the case's inputs as torch tensors (in ``Case.inputs``
#: order; the matmul's are a, w, bias).
LAUNCHERS = {"softmax_kernel": launch_softmax, "layer_norm_fwd_fused": launch_layernorm,
             "matmul_bias_gelu_kernel": launch_matmul_bias_gelu}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", type=int, default=90, choices=(80, 86, 89, 90))
    parser.add_argument("--only", action="append", help="only the case of this name")
    args = parser.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET", "").strip().lower() in ("1", "true", "on", "yes"):
        print("handwritten_kernels: unset TRITON_INTERPRET to compile for a GPU target",
              file=sys.stderr)
        return 2
    print(_MARKER + json.dumps(compile_cases(args.arch, args.only)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
