"""GPU runtime: our kernels vs PyTorch eager vs torch.compile, on the bench programs or per fusion.

**Programs** (the default): every ``bench/programs/NAME.hlo`` (the unfused JAX programs of
``bench/fusion_quality.py``) compiled whole with ``triton_backend.compile_hlo`` on CUDA and
timed as one call (all its kernels plus host glue) against the same computation written in
PyTorch (:data:`TORCH_PROGRAMS`: ``torch.softmax``, ``F.layer_norm``,
``F.scaled_dot_product_attention`` ...) run eagerly and under ``torch.compile``, and, where
``bench/handwritten_kernels.py`` has one for the same program, the hand-written Triton kernel.
Per program: the median time (``triton.testing.do_bench``, L2 flushed; p20/p80 in the CSV),
GB/s over the module's compulsory bytes (its own inputs and outputs, each once) and the
fraction of the device's peak bandwidth (``triton_backend.runtime.device_specs``), plus our
kernel count and the largest difference of our output from eager PyTorch's.  The ``gpu us``
columns are the GPU's own busy time per call (kernels, copies and fills, from
``torch.profiler``) for ours and eager: a whole call's time minus them is host work.  Whole
calls are also timed for ours from a CUDA graph (``cuda_graph=True``), ours as a torch op,
and torch.compile with ``mode="reduce-overhead"`` (``graph us``, ``op us``, ``compile-ro us``),
and ours with every launch through Triton's ``JITFunction.run`` instead of the direct launch
(``jit-launch us``: ``FUSION_DIRECT_LAUNCH=0``).

**Corpus fusions** (``--corpus``, or FILES): each fusion of the corpus that both we and
``bench/hlo_torch_reference.py`` can express, compiled alone, against its eager and compiled
PyTorch translation.

Writes a CSV, and a PNG bar chart when matplotlib is installed (optional; skipped with a note
when not).  Without a GPU it prints why it skips and exits 0.

    python bench/gpu_runtime.py [--only NAME ...] [--csv gpu_runtime.csv] [--png gpu_runtime.png]
    python bench/gpu_runtime.py --corpus [FILES...]
"""
from __future__ import annotations

import argparse
import csv
import math
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def skip_reason() -> str | None:
    """Why this benchmark cannot run here (None when it can)."""
    if os.environ.get("TRITON_INTERPRET", "").strip().lower() in ("1", "true", "on", "yes"):
        return "TRITON_INTERPRET is set: kernels would run in the interpreter, not on a GPU"
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA GPU is visible (torch.cuda.is_available() is False)"
    return None


def _bench(fn) -> tuple[float, float, float]:
    from triton.testing import do_bench

    median, p20, p80 = do_bench(fn, quantiles=[0.5, 0.2, 0.8])
    return median * 1e-3, p20 * 1e-3, p80 * 1e-3


def _device_seconds(fn, calls: int = 20) -> tuple[float, str]:
    """GPU busy time per call (kernels, copies, fills), from the profiler: the median of
    do_bench is a whole call, host glue included; this is what the GPU itself spends.  Also
    the busiest GPU activities, ``"name=us; ..."`` per call (at most 8), to say which kernel
    of a program the time goes to."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    events = [e for e in prof.key_averages() if e.device_type == DeviceType.CUDA]
    busy_us = sum(e.self_device_time_total for e in events)
    busiest = sorted(events, key=lambda e: -e.self_device_time_total)[:8]
    breakdown = "; ".join(f"{e.key[:48]}={e.self_device_time_total / calls:.1f}" for e in busiest)
    return busy_us * 1e-6 / calls, breakdown


def program_flops(module, computations=None) -> tuple[int, str | None]:
    """Operations of the program's dots (``2 * output elements * contracted size`` each, every
    dot the HLO computes, masked attention scores included) and the first dot's operand type;
    ``computations``: only those (a fusion's), not the module's.

    >>> from fusion.text.parser import parse_hlo
    >>> program_flops(parse_hlo('''HloModule m
    ... ENTRY e {
    ...   a = bf16[64,32] parameter(0)
    ...   b = bf16[32,16] parameter(1)
    ...   ROOT d = f32[64,16] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
    ... }'''))
    (65536, 'bf16')
    """
    total, dtype = 0, None
    for comp in module.computations if computations is None else computations:
        for instr in comp:
            if instr.opcode != "dot":
                continue
            lhs = comp.instruction(instr.operands[0]).array_shape
            contracted = math.prod(lhs.dims[d] for d in instr.attr("lhs_contracting_dims", ()))
            total += 2 * math.prod(instr.array_shape.dims) * contracted
            dtype = dtype or lhs.dtype
    return total, dtype


def _bytes(shapes) -> int:
    from fusion.ir.element_types import ELEMENT_TYPES
    from fusion.ir.shape import ArrayShape

    return sum(math.prod(s.dims) * ELEMENT_TYPES[s.dtype].byte_size for s in shapes
               if isinstance(s, ArrayShape))


def measure_file(path: Path, peak_bw: float | None) -> list[dict]:
    import torch

    from fusion.errors import FusionCompilerError
    from fusion.text.parser import parse_hlo
    from fusion.ir.shape import flatten_shape
    from hlo_torch_reference import torch_function
    from triton_backend.driver.compiled_fusion import compile_fusion

    module = parse_hlo(path.read_text())
    rows = []
    for _, instr in module.fusions():
        comp = module.computation(instr.attr("calls"))
        row = {"module": path.name, "fusion": instr.name}
        try:
            reference = torch_function(module, comp)
            compiled = compile_fusion(module, instr, target="cuda")
        except (KeyError, FusionCompilerError) as err:
            row["skipped"] = str(err)[:120]
            rows.append(row)
            continue
        inputs = [t.cuda() for t in compiled.module.example_inputs()]
        compulsory = _bytes([p.shape for p in comp.parameters]) + _bytes(flatten_shape(instr.shape))
        compiled_reference = torch.compile(reference)
        compiled_reference(*inputs)  # compile outside the timing
        for label, fn in (("ours", lambda: compiled(*inputs)), ("eager", lambda: reference(*inputs)),
                          ("torch_compile", lambda: compiled_reference(*inputs))):
            median, p20, p80 = _bench(fn)
            row[f"{label}_s"], row[f"{label}_p20_s"], row[f"{label}_p80_s"] = median, p20, p80
            row[f"{label}_gbps"] = compulsory / median / 1e9
            if peak_bw:
                row[f"{label}_peak_fraction"] = compulsory / median / peak_bw
        row["compulsory_bytes"] = compulsory
        rows.append(row)
    return rows


# --- the bench programs ---------------------------------------------------------------------

PROGRAMS = Path(__file__).resolve().parent / "programs"


def _torch_programs():
    """Program-name prefix -> PyTorch function taking the ENTRY parameters in order (the JAX
    functions of ``bench/programs/generate.py``, written as a PyTorch user would)."""
    import torch
    import torch.nn.functional as F

    def softmax(x):
        return torch.softmax(x.float(), dim=-1).to(x.dtype)

    def log_softmax(x):
        return torch.log_softmax(x.float(), dim=-1).to(x.dtype)

    def layernorm(x, w, b, eps=1e-5):
        return F.layer_norm(x.float(), x.shape[-1:], w.float(), b.float(), eps).to(x.dtype)

    def rmsnorm(x, w):
        xf = x.float()
        return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype)

    def cross_entropy(logits, labels):
        return F.cross_entropy(logits.float(), labels.long())

    def bias_grad(dy):
        return dy.float().sum(0)

    def global_norm(g):
        return g.square().sum().sqrt()

    def gelu(x):
        return F.gelu(x, approximate="tanh")

    def swiglu(g, u):
        return (F.silu(g.float()) * u.float()).to(g.dtype)

    def matmul_bias_gelu(a, w, b):
        y = torch.matmul(a, w).float() + b.float()
        return F.gelu(y, approximate="tanh").to(a.dtype)

    def attention(q, k, v):
        return F.scaled_dot_product_attention(q, k, v)

    def attention_causal(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def attention_gqa_sliding_window(q, k, v, window=512):
        # Mistral's window: each query sees itself and the window - 1 keys before it.
        n = q.shape[-2]
        i = torch.arange(n, device=q.device)
        visible = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - window)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=visible, enable_gqa=True)

    def jax_attention(q, k, v):
        # jax.nn.dot_product_attention's [batch, tokens, heads, head], causal, grouped
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                             v.transpose(1, 2), is_causal=True, enable_gqa=True)
        return out.transpose(1, 2)

    def jax_attention_grad(q, k, v, w):
        q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
        with torch.enable_grad():
            loss = (jax_attention(q, k, v).float() * w.float()).sum()
            return torch.autograd.grad(loss, (q, k, v))

    def gpt2_block(x, ln1_w, ln1_b, w_qkv, b_qkv, w_o, b_o, ln2_w, ln2_b, w_fc, b_fc, w_proj,
                   b_proj):
        batch, seq, d = x.shape
        heads = 12
        h = layernorm(x, ln1_w, ln1_b)
        q, k, v = (h @ w_qkv + b_qkv).split(d, dim=-1)
        q, k, v = (t.view(batch, seq, heads, d // heads).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + a.transpose(1, 2).reshape(batch, seq, d) @ w_o + b_o
        h = F.gelu(layernorm(x, ln2_w, ln2_b) @ w_fc + b_fc, approximate="tanh")
        return x + h @ w_proj + b_proj

    def matmul(a, b):
        return a @ b

    def cumsum(x):
        return torch.cumsum(x, dim=-1)

    def top_p_mask(logits, p=0.9):
        probs = torch.softmax(logits.float(), dim=-1)
        before = torch.cumsum(probs, dim=-1) - probs
        return torch.where(before < p, logits, torch.full_like(logits, float("-inf")))

    def llama_block(x, attn_norm, w_q, w_k, w_v, w_o, mlp_norm, w_gate, w_up, w_down):
        batch, seq, d = x.shape
        head_dim = 128
        heads, kv_heads = w_q.shape[1] // head_dim, w_k.shape[1] // head_dim
        inv_freq = 1.0 / 10000.0 ** (
            torch.arange(0, head_dim, 2, device=x.device, dtype=torch.float32) / head_dim)
        angles = torch.arange(seq, device=x.device, dtype=torch.float32)[:, None] * inv_freq
        angles = torch.cat([angles, angles], dim=-1)
        cos, sin = angles.cos(), angles.sin()

        def rope(t):
            tf = t.float()
            rotated = torch.cat([-tf[..., head_dim // 2:], tf[..., :head_dim // 2]], dim=-1)
            return (tf * cos + rotated * sin).to(t.dtype)

        def split_heads(t, n):
            return t.view(batch, seq, n, head_dim).transpose(1, 2)

        h = rmsnorm(x, attn_norm)
        q = rope(split_heads(h @ w_q, heads))
        k = rope(split_heads(h @ w_k, kv_heads))
        v = split_heads(h @ w_v, kv_heads)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + a.transpose(1, 2).reshape(batch, seq, heads * head_dim) @ w_o
        h = rmsnorm(x, mlp_norm)
        return x + swiglu(h @ w_gate, h @ w_up) @ w_down

    def moe(x, w, sizes):
        # Eager PyTorch's mixture of experts: one cuBLAS matmul per expert's rows.
        out = torch.empty(x.shape[0], w.shape[2], device=x.device, dtype=torch.float32)
        start = 0
        for j, size in enumerate(sizes.tolist()):
            out[start:start + size] = (x[start:start + size] @ w[j]).float()
            start += size
        out[start:] = 0
        return F.silu(out).to(x.dtype)

    # Longest prefix first (log_softmax before softmax, matmul_bias_gelu before matmul,
    # attention_causal before attention); the window is the bench program's (w512).
    return {"log_softmax": log_softmax, "softmax": softmax, "layernorm": layernorm,
            "rmsnorm": rmsnorm, "cross_entropy": cross_entropy, "gelu": gelu, "swiglu": swiglu,
            "matmul_bias_gelu": matmul_bias_gelu, "matmul": matmul,
            "jax_attention_grad": jax_attention_grad, "jax_attention": jax_attention,
            "attention_gqa_sliding_window": attention_gqa_sliding_window,
            "attention_causal": attention_causal, "attention": attention,
            "gpt2_block": gpt2_block, "llama_block": llama_block, "bias_grad": bias_grad,
            "global_norm": global_norm, "cumsum": cumsum, "top_p_mask": top_p_mask, "moe": moe}


def torch_program(name: str):
    """The PyTorch function of bench program ``name`` (None when there is none)."""
    for prefix, fn in _torch_programs().items():
        if name.startswith(prefix + "_"):
            return fn
    return None


def program_inputs(module, device: str = "cuda"):
    """Random torch tensors for the ENTRY parameters: normal floats (scaled 0.1 where a dot
    would sum many of them), integers in [0, 16) (valid labels and indices), and a ragged
    dot's group sizes, groups of equal size (within one) covering its rows."""
    import torch

    from fusion.ir.shape import ArrayShape

    gen = torch.Generator(device=device).manual_seed(0)
    rows = {i.operands[2]: module.entry.instruction(i.operands[0]).shape.dims[0]
            for i in module.entry if i.opcode == "ragged-dot"}
    out = []
    for p in module.entry.parameters:
        if p.name in rows:
            (groups,) = p.shape.dims
            sizes = [rows[p.name] // groups + (j < rows[p.name] % groups) for j in range(groups)]
            out.append(torch.tensor(sizes, device=device, dtype=_torch_dtype(p.shape.dtype)))
            continue
        shape = p.shape
        if not isinstance(shape, ArrayShape):
            raise ValueError(f"parameter {p.name} is not an array")
        dtype = _torch_dtype(shape.dtype)
        if dtype.is_floating_point:
            t = torch.randn(shape.dims, generator=gen, device=device, dtype=torch.float32) * 0.1
        elif dtype == torch.bool:
            t = torch.randint(0, 2, shape.dims, generator=gen, device=device) > 0
        else:
            t = torch.randint(0, 16, shape.dims, generator=gen, device=device)
        out.append(t.to(dtype))
    return out


def _torch_dtype(hlo_type: str):
    import torch

    return {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16,
            "f64": torch.float64, "s32": torch.int32, "s64": torch.int64, "s8": torch.int8,
            "u8": torch.uint8, "pred": torch.bool}[hlo_type]


def _handwritten_for(name: str):
    """``(label, fn(*inputs))`` of the hand-written Triton kernel for program ``name``, if any."""
    from handwritten_kernels import LAUNCHERS, cases

    for case in cases():
        if case.comparable == name:
            return case.name, LAUNCHERS[case.kernel]
    return None


def measure_program(path: Path, peak_bw: float | None, spec=None) -> dict:
    """One bench program: ours, eager, torch.compile (and hand-written Triton) timed; with a
    device ``spec``, TFLOP/s of its dots against the tensor-core peak of their type."""
    import torch

    import triton_backend
    from fusion.text.parser import parse_hlo
    from fusion.ir.shape import flatten_shape

    name = path.stem
    module = parse_hlo(path.read_text())
    row: dict = {"module": name, "fusion": "(whole program)"}
    reference = torch_program(name)
    try:
        compiled = triton_backend.compile_hlo(module)
    except Exception as err:  # noqa: BLE001 - a program we cannot compile is a row
        row["skipped"] = f"compile_hlo: {type(err).__name__}: {str(err)[:100]}"
        return row
    compulsory = _bytes([p.shape for p in module.entry.parameters]) + \
        _bytes(flatten_shape(module.entry.root.shape))
    row["compulsory_bytes"] = compulsory
    row["kernels"] = len(compiled.fusions)
    flops, dot_type = program_flops(module)
    peak_flops = None
    if flops:
        row["flops"] = flops
        try:
            peak_flops = spec.peak_flops(dot_type, tensor_cores=True) if spec else None
        except ValueError:  # no tensor-core path for this type (f32 counts as TF32's)
            peak_flops = None
    stage = "run"
    try:
        inputs = program_inputs(module)
        ours = compiled(*inputs)
        fns = [("ours", lambda: compiled(*inputs))]
        if reference is not None:
            stage = "eager PyTorch"
            expected = reference(*inputs)
            row["max_abs_diff_vs_eager"] = float((ours[0].float() - expected.float()).abs().max())
            stage = "torch.compile"
            compiled_reference = torch.compile(reference)
            compiled_reference(*inputs)  # compile outside the timing
            fns += [("eager", lambda: reference(*inputs)),
                    ("torch_compile", lambda: compiled_reference(*inputs))]
        fns += _launch_paths(path, module, inputs, reference, row)
        hand = _handwritten_for(name)
        if hand is not None:
            row["handwritten_kernel"] = hand[0]
            fns.append(("handwritten", lambda: hand[1](*inputs)))
        for label, fn in fns:
            stage = f"timing {label}"
            median, p20, p80 = _bench(fn)
            row[f"{label}_s"], row[f"{label}_p20_s"], row[f"{label}_p80_s"] = median, p20, p80
            row[f"{label}_gbps"] = compulsory / median / 1e9
            if peak_bw:
                row[f"{label}_peak_fraction"] = compulsory / median / peak_bw
        for label, fn in fns:
            if label in ("ours", "eager"):
                stage = f"profiling {label}"
                row[f"{label}_device_s"], row[f"{label}_busiest"] = _device_seconds(fn)
                if peak_bw:
                    row[f"{label}_device_peak_fraction"] = \
                        compulsory / row[f"{label}_device_s"] / peak_bw
                if flops:
                    row[f"{label}_device_tflops"] = flops / row[f"{label}_device_s"] / 1e12
                    if peak_flops:
                        row[f"{label}_device_peak_flops_fraction"] = \
                            flops / row[f"{label}_device_s"] / peak_flops
    except Exception as err:  # noqa: BLE001 - one program's failure is a row, not a crash
        row["skipped" if "ours_s" not in row else "error"] = \
            f"{stage}: {type(err).__name__}: {str(err)[:100]}"
    return row


def _launch_paths(path: Path, module, inputs, reference, row: dict) -> list:
    """The other ways to call the program, each timed as a whole call when it runs: ours from
    a CUDA graph (``cuda_graph=True``), ours as a torch op, and torch.compile's
    "reduce-overhead" (its CUDA graphs).  One that fails is noted in ``row``, not timed."""
    import torch

    import triton_backend

    paths = []

    def graphed():
        compiled = triton_backend.compile_hlo(module, cuda_graph=True)
        return lambda: compiled(*inputs)

    def op():
        torch_op = triton_backend.torch_op(path.read_text(), name=f"gpu_runtime_{path.stem}",
                                           backward=None)
        return lambda: torch_op(*inputs)

    def reduce_overhead():
        fn = torch.compile(reference, mode="reduce-overhead")
        return lambda: fn(*inputs)

    def through_triton():
        # Every launch through JITFunction.run (runtime/direct_launch switched off), which is
        # decided when the call's plan is built: on its first call, here (cache=False: a
        # module of its own, not the one compile_hlo keeps and the plain call already built).
        compiled = triton_backend.compile_hlo(module, cache=False)
        previous = os.environ.get("FUSION_DIRECT_LAUNCH")
        os.environ["FUSION_DIRECT_LAUNCH"] = "0"
        try:
            compiled(*inputs)
        finally:
            if previous is None:
                del os.environ["FUSION_DIRECT_LAUNCH"]
            else:
                os.environ["FUSION_DIRECT_LAUNCH"] = previous
        return lambda: compiled(*inputs)

    makers = [("ours_graph", graphed), ("ours_op", op), ("ours_jit_launch", through_triton)]
    if reference is not None:
        makers.append(("torch_compile_ro", reduce_overhead))
    for label, make in makers:
        try:
            fn = make()
            for _ in range(3):  # capture, compile and warm outside the timing
                fn()
            paths.append((label, fn))
        except Exception as err:  # noqa: BLE001 - a path that fails is noted, the rest timed
            row[f"{label}_error"] = f"{type(err).__name__}: {str(err)[:100]}"
    return paths


#: Program-name prefixes timed first, so that a run cut short by its time limit has measured
#: the programs where the FLOPs are (issue 26) before the memory-bound ones.
FIRST = ("attention", "jax_attention", "matmul", "gpt2_block", "llama_block", "vjp_attention",
         "cross_entropy", "global_norm", "bias_grad")


def program_files(only: list[str] | None = None) -> list[Path]:
    """The bench programs (or those named in ``only``), the :data:`FIRST` families first."""
    def rank(f: Path) -> tuple[int, str]:
        first = [i for i, prefix in enumerate(FIRST) if f.stem.startswith(prefix + "_")]
        return (first[0] if first else len(FIRST), f.stem)

    files = sorted(PROGRAMS.glob("*.hlo"), key=rank)
    return [f for f in files if not only or f.stem in only]


PROGRAM_HEADER = (f"{'program':<40}{'kern':>5}{'ours us':>10}{'eager us':>10}{'compile us':>11}"
                  f"{'hand us':>9}{'ours GB/s':>10}{'%peak':>7}{'eager %':>8}{'compile %':>10}"
                  f"{'max diff':>10}{'ours gpu us':>12}{'eager gpu us':>13}{'gpu %peak':>10}"
                  f"{'graph us':>9}{'op us':>8}{'compile-ro us':>14}{'jit-launch us':>14}")


def program_line(r: dict) -> str:
    """One program's row of the table."""
    def cell(key, scale=1.0, spec=".1f"):
        return format(r[key] * scale, spec) if key in r else "-"

    if "skipped" in r:
        return f"{r['module'][:39]:<40}skipped: {r['skipped'][:90]}"
    return (f"{r['module'][:39]:<40}{r['kernels']:>5}{cell('ours_s', 1e6):>10}"
            f"{cell('eager_s', 1e6):>10}{cell('torch_compile_s', 1e6):>11}"
            f"{cell('handwritten_s', 1e6):>9}{cell('ours_gbps'):>10}"
            f"{cell('ours_peak_fraction', 100):>7}{cell('eager_peak_fraction', 100):>8}"
            f"{cell('torch_compile_peak_fraction', 100):>10}"
            f"{cell('max_abs_diff_vs_eager', 1.0, '.2g'):>10}"
            f"{cell('ours_device_s', 1e6):>12}{cell('eager_device_s', 1e6):>13}"
            f"{cell('ours_device_peak_fraction', 100):>10}"
            f"{cell('ours_graph_s', 1e6):>9}{cell('ours_op_s', 1e6):>8}"
            f"{cell('torch_compile_ro_s', 1e6):>14}{cell('ours_jit_launch_s', 1e6):>14}"
            + (f"  ({r['error'][:80]})" if "error" in r else "")
            + (f"\n{'':<8}dots: {r['flops'] / 1e9:.1f} GFLOP, ours {cell('ours_device_tflops')}"
               f" TFLOP/s ({cell('ours_device_peak_flops_fraction', 100)}% of tensor-core peak),"
               f" eager {cell('eager_device_tflops')} TFLOP/s" if "flops" in r else "")
            + "".join(f"\n{'':<8}{label} busiest (us per call): {r[f'{label}_busiest']}"
                      for label in ("ours", "eager")
                      if f"{label}_busiest" in r and r.get("kernels", 1) > 1))


def print_program_table(rows: list[dict]) -> None:
    print(PROGRAM_HEADER)
    for r in rows:
        print(program_line(r))


def write_csv(rows: list[dict], path: Path) -> None:
    fields = sorted({k for r in rows for k in r}, key=lambda k: (k not in ("module", "fusion"), k))
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


def print_fusion_table(rows: list[dict]) -> None:
    print(f"{'module':<28}{'fusion':<32}{'ours':>10}{'eager':>10}{'compile':>10}{'GB/s':>9}{'%peak':>7}")
    for r in rows:
        if "skipped" in r:
            print(f"{r['module']:<28}{r['fusion'][:31]:<32}skipped: {r['skipped'][:60]}")
            continue
        frac = f"{100 * r['ours_peak_fraction']:.1f}" if "ours_peak_fraction" in r else "n/a"
        print(f"{r['module']:<28}{r['fusion'][:31]:<32}{r['ours_s'] * 1e6:>8.1f}us"
              f"{r['eager_s'] * 1e6:>8.1f}us{r['torch_compile_s'] * 1e6:>8.1f}us"
              f"{r['ours_gbps']:>9.1f}{frac:>7}")


def write_plot(rows: list[dict], png: Path) -> str:
    try:
        import matplotlib
    except ImportError:
        return "matplotlib is not installed: no plot (pip install matplotlib, or the 'bench' extra)"
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [r for r in rows if "ours_s" in r]
    labels = [r["module"] if r["fusion"] == "(whole program)"
              else f"{r['module'].split('.')[0]}:{r['fusion']}" for r in done]
    fig, ax = plt.subplots(figsize=(max(6, len(done) * 0.5), 4))
    keys = [k for k in ("ours", "eager", "torch_compile", "handwritten")
            if any(f"{k}_gbps" in r for r in done)] or ["ours"]
    width = 0.8 / len(keys)
    for k, key in enumerate(keys):
        ax.bar([i + (k - (len(keys) - 1) / 2) * width for i in range(len(done))],
               [r.get(f"{key}_gbps", 0.0) for r in done], width, label=key)
    ax.set_xticks(range(len(done)), labels, rotation=70, ha="right", fontsize=7)
    ax.set_ylabel("GB/s (compulsory bytes)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    return f"plot written to {png}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path,
                        help="HLO files whose fusions to time one by one (implies --corpus)")
    parser.add_argument("--corpus", action="store_true",
                        help="time each fusion of the corpus and examples instead of the programs")
    parser.add_argument("--only", action="append", help="only the bench program of this name")
    parser.add_argument("--csv", type=Path, default=Path("gpu_runtime.csv"))
    parser.add_argument("--png", type=Path, default=Path("gpu_runtime.png"))
    args = parser.parse_args(argv)
    reason = skip_reason()
    if reason is not None:
        print(f"gpu_runtime: skipped: {reason}")
        return 0
    import torch

    from compile_latency import default_files
    from triton_backend.runtime.device_specs import detect_device
    from triton_backend.runtime.launch_mode import configure_launch_mode

    configure_launch_mode()
    spec = detect_device(torch)
    peak = spec.memory_bandwidth_bytes_per_s if spec else None
    print(f"device: {torch.cuda.get_device_name(0)}"
          + (f" (peak {peak / 1e12:.2f} TB/s, {spec.name})" if spec else " (not in the device table)"))
    corpus = args.corpus or bool(args.files)
    if corpus:
        rows = [r for p in (args.files or default_files()) for r in measure_file(p, peak)]
    else:
        files = program_files(args.only)
        if not files:
            print(f"gpu_runtime: no bench program matches {args.only}", file=sys.stderr)
            return 1
        rows = []
        # Each row is printed and the CSV rewritten as it comes: a run cut short keeps them.
        print(PROGRAM_HEADER, flush=True)
        for path in files:
            rows.append(measure_program(path, peak, spec))
            print(program_line(rows[-1]), flush=True)
            write_csv(rows, args.csv)
            torch.cuda.empty_cache()
    write_csv(rows, args.csv)
    if corpus:
        print_fusion_table(rows)
    print(f"CSV written to {args.csv}")
    print(write_plot(rows, args.png))
    return 0


if __name__ == "__main__":
    sys.exit(main())
