"""Instructions per loop iteration of our dot and attention kernels, beside Triton's tutorial
kernels compiled at the same tiles, target and launch options (no GPU needed).

For each ``bench/programs`` program (default: the attention, matmul and GPT-2 block ones) the
module is compiled for ``sm_<arch>`` and every dot or attention kernel's main loop is read from
its SASS (``triton_backend.reports.sass_loops``: the steady-state loop, per warp).  The
reference is compiled in a child process without ``TRITON_INTERPRET`` at the kernel's block
sizes, ``num_warps`` and ``num_stages``:

* dots: the tutorials' matmul K loop (``03-matrix-multiplication.py``; the kernel in
  ``bench/handwritten_kernels.py``, whose epilogue is outside the loop);
* attention: FlashAttention-2's forward as the tutorials write it (``06-fused-attention.py``):
  ``q`` in registers, per key block ``qk``, a running max and sum, ``exp2`` with the scale
  folded in, ``p`` converted to ``v``'s type for the second dot; a causal kernel visits the
  blocks left of the diagonal unmasked and masks only the diagonal ones.

A loop the compiler unrolled completely (a short constant K; marked ``~``) is counted from its
first tensor-core op to its last (``sass_loops.unrolled_loop``), per step: that span runs all
but one of its ``tensor-core ops / the reference's per iteration`` steps.  (Counting the whole
kernel, as this once did, charged a fused epilogue's work, run once, to every K step.)  An f32 dot is IEEE on the FMA units, the tutorial's is TF32 on the
tensor cores: no ratio.  Prints a table (ours, reference, ratio, tensor-core ops and async
copies per iteration):

    python bench/loop_instructions.py [--arch 90] [--json] [PROGRAMS...]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

DEFAULT_PROGRAMS = sorted(str(p) for p in (ROOT / "bench" / "programs").glob("*.hlo")
                          if p.name.startswith(("attention", "matmul", "gpt2")))
_MARKER = "LOOP-INSTRUCTIONS-JSON "
_TL_TYPES = {"bf16": "bf16", "f16": "fp16", "f32": "fp32"}


def _reference_kernels():
    """The reference ``@triton.jit`` kernels (imported only in the compiling child)."""
    import triton
    import triton.language as tl

    @triton.jit
    def flash_attention_fwd(Q, K, V, Out, qk_scale, N_CTX: tl.constexpr, HEAD_DIM: tl.constexpr,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
                            IEEE: tl.constexpr):
        start_m = tl.program_id(0)
        base = tl.program_id(1).to(tl.int64) * N_CTX * HEAD_DIM
        offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, HEAD_DIM)
        q = tl.load(Q + base + offs_m[:, None] * HEAD_DIM + offs_d[None, :])
        m_i = tl.full([BLOCK_M], -float("inf"), tl.float32)
        l_i = tl.full([BLOCK_M], 1.0, tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        precision: tl.constexpr = "ieee" if IEEE else "tf32"
        end = start_m * BLOCK_M if CAUSAL else N_CTX
        for start_n in range(0, end, BLOCK_N):  # whole blocks every row sees: no mask
            k = tl.load(K + base + (start_n + offs_n)[None, :] * HEAD_DIM + offs_d[:, None])
            qk = tl.dot(q, k, input_precision=precision)
            m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            p = tl.math.exp2(qk * qk_scale - m_ij[:, None])
            alpha = tl.math.exp2(m_i - m_ij)
            l_i = l_i * alpha + tl.sum(p, 1)
            v = tl.load(V + base + (start_n + offs_n)[:, None] * HEAD_DIM + offs_d[None, :])
            acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=precision)
            m_i = m_ij
        if CAUSAL:  # the diagonal blocks, masked
            for start_n in range(start_m * BLOCK_M, (start_m + 1) * BLOCK_M, BLOCK_N):
                k = tl.load(K + base + (start_n + offs_n)[None, :] * HEAD_DIM + offs_d[:, None])
                qk = tl.dot(q, k, input_precision=precision) * qk_scale
                qk = tl.where(offs_m[:, None] >= (start_n + offs_n)[None, :], qk, -1.0e6)
                m_ij = tl.maximum(m_i, tl.max(qk, 1))
                p = tl.math.exp2(qk - m_ij[:, None])
                alpha = tl.math.exp2(m_i - m_ij)
                l_i = l_i * alpha + tl.sum(p, 1)
                v = tl.load(V + base + (start_n + offs_n)[:, None] * HEAD_DIM + offs_d[None, :])
                acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=precision)
                m_i = m_ij
        acc = acc / l_i[:, None]
        tl.store(Out + base + offs_m[:, None] * HEAD_DIM + offs_d[None, :],
                 acc.to(Out.dtype.element_ty))

    from handwritten_kernels import matmul_bias_gelu_kernel
    return {"attention": flash_attention_fwd, "dot": matmul_bias_gelu_kernel}


def _reference_request(kind: str, dtype: str, tiles, warps: int, stages: int, extra: dict) -> dict:
    return {"kind": kind, "dtype": dtype, "tiles": list(tiles), "num_warps": warps,
            "num_stages": stages, **extra}


def _compile_reference(request: dict, arch: int) -> dict:
    from triton_backend.reports import sass_loops
    from triton_backend.reports.ptx_report import compile_for_target

    kernel = _reference_kernels()[request["kind"]]
    t = _TL_TYPES[request["dtype"]]
    if request["kind"] == "attention":
        bm, bn = request["tiles"][:2]
        signature = {"Q": f"*{t}", "K": f"*{t}", "V": f"*{t}", "Out": f"*{t}", "qk_scale": "fp32",
                     "N_CTX": "constexpr", "HEAD_DIM": "constexpr", "BLOCK_M": "constexpr",
                     "BLOCK_N": "constexpr", "CAUSAL": "constexpr", "IEEE": "constexpr"}
        constexprs = {"N_CTX": request["keys"], "HEAD_DIM": request["head_dim"], "BLOCK_M": bm,
                      "BLOCK_N": bn, "CAUSAL": request["causal"], "IEEE": t == "fp32"}
        aligned = ("Q", "K", "V", "Out")
    else:
        bm, bn, bk = request["tiles"][:3]
        signature = {"a_ptr": f"*{t}", "b_ptr": f"*{t}", "bias_ptr": f"*{t}", "c_ptr": "*bf16",
                     "M": "i32", "N": "i32", "K": "i32", "stride_am": "i32",
                     "stride_ak": "constexpr", "stride_bk": "i32", "stride_bn": "constexpr",
                     "stride_cm": "i32", "stride_cn": "constexpr", "BLOCK_SIZE_M": "constexpr",
                     "BLOCK_SIZE_N": "constexpr", "BLOCK_SIZE_K": "constexpr",
                     "GROUP_SIZE_M": "constexpr"}
        constexprs = {"stride_ak": 1, "stride_bn": 1, "stride_cn": 1, "BLOCK_SIZE_M": bm,
                      "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": 8}
        aligned = ("a_ptr", "b_ptr", "bias_ptr", "c_ptr", "M", "N", "K", "stride_am",
                   "stride_bk", "stride_cm")
    r = compile_for_target(kernel, signature, constexprs, aligned=aligned, arch=arch,
                           num_warps=request["num_warps"], num_stages=request["num_stages"])
    loop = sass_loops.main_loop(sass_loops.parse_sass(sass_loops.disassemble(r.cubin)))
    return {"registers": r.registers, "spills": r.spills,
            "main_loop": None if loop is None else loop.__dict__}


def reference_in_child(requests: list[dict], arch: int) -> list[dict]:
    """Compile the reference kernels in a child process without ``TRITON_INTERPRET``."""
    from triton_backend.reports.compile_child import child_environment

    env = child_environment()
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    result = subprocess.run([sys.executable, __file__, "--arch", str(arch), "--child",
                             json.dumps(requests)], capture_output=True, text=True, env=env,
                            check=False)
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith(_MARKER)]
    if result.returncode != 0 or not lines:
        raise RuntimeError(f"compiling the reference kernels failed:\n{result.stderr[-3000:]}")
    return json.loads(lines[-1][len(_MARKER):])


def our_kernels(path: str, arch: int) -> list[dict]:
    """Per dot or attention kernel of the program: its main loop and the reference request."""
    from fusion.text.parser import parse_hlo
    from triton_backend import compile_hlo
    from triton_backend.reports.compile_report import build_report, compile_for_target, write_kernels
    from triton_backend.templates.attention.driver import attention_form, attention_pattern

    compiled = compile_hlo(parse_hlo(Path(path).read_text()), target=f"sm_{arch}")
    report = build_report(compiled)
    rows = []
    with tempfile.TemporaryDirectory(prefix="loop-instructions-") as tmp:
        write_kernels(compiled, report, Path(tmp))
        report = compile_for_target(report, Path(tmp), arch)
    for f in report.fusions:
        if f.emitter_kind not in ("attention", "dot"):
            continue
        instr = compiled.module.computation(f.computation).instruction(f.name)
        dtype = _operand_type(compiled.module, instr)
        extra = {}
        if f.emitter_kind == "attention":
            pattern = attention_pattern(compiled.module, instr)
            band = attention_form(compiled.module, instr).band
            extra = {"keys": pattern.keys, "head_dim": max(16, 1 << (pattern.head_dim - 1).bit_length()),
                     "causal": band is not None and band.high == 0 and band.low is None}
        rows.append({"program": Path(path).stem, "kernel": f.name, "kind": f.emitter_kind,
                     "tiles": list(f.tile_sizes), "main_loop": f.target.main_loop,
                     "ptx": f.target.ptx_features, "registers": f.target.registers,
                     "request": _reference_request(f.emitter_kind, dtype, f.tile_sizes,
                                                   f.num_warps or 4, f.num_stages or 3, extra)})
    return rows


def _operand_type(module, fusion_instr) -> str:
    """The element type of the fused computation's first dot's lhs (what the tensor cores
    would multiply)."""
    comp = module.computation(fusion_instr.attr("calls"))
    dot = next(i for i in comp.instructions if i.opcode == "dot")
    return comp.instruction(dot.operands[0]).shape.dtype


def _per_step(ours: dict, ref: dict) -> int | None:
    """Our instructions per K step: the loop's, or an unrolled loop's span over the steps it
    covers (all but the last: it starts at the first step's multiplies and ends at the last
    step's).

    >>> _per_step({"instructions": 90, "tensor_core": 4}, {"tensor_core": 4})
    90
    >>> _per_step({"instructions": 300, "tensor_core": 16, "unrolled": 1}, {"tensor_core": 4})
    100
    """
    count = ours.get("instructions")
    if ours.get("unrolled") and ref.get("tensor_core"):
        steps = ours.get("tensor_core", 0) // ref["tensor_core"]
        return round(count / (steps - 1)) if steps > 1 else None
    return count


def table(rows: list[dict]) -> str:
    head = (f"{'program':38} {'kernel':24} {'tiles':14} {'ours':>6} {'ref':>6} {'ratio':>6} "
            f"{'ours tc/async':>14} {'ref tc/async':>13}")
    lines = [head, "-" * len(head)]
    for r in rows:
        ours, ref = r["main_loop"] or {}, (r.get("reference") or {}).get("main_loop") or {}
        count = _per_step(ours, ref)
        comparable = count and ref.get("instructions") and not (
            r["kind"] == "dot" and r["request"]["dtype"] == "f32")
        ratio = count / ref["instructions"] if comparable else None
        shown = "-" if count is None else f"{'~' if ours.get('unrolled') else ''}{count}"
        lines.append(f"{r['program'][:38]:38} {r['kernel'][:24]:24} {'x'.join(map(str, r['tiles'])):14} "
                     f"{shown:>6} {ref.get('instructions', '-'):>6} "
                     f"{'-' if ratio is None else f'{ratio:.2f}x':>6} "
                     f"{ours.get('tensor_core', '-')}/{ours.get('async_copies', '-'):<8} "
                     f"{ref.get('tensor_core', '-')}/{ref.get('async_copies', '-')}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("programs", nargs="*", default=None)
    parser.add_argument("--arch", type=int, default=90, choices=(80, 86, 89, 90))
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        requests = json.loads(args.child)
        print(_MARKER + json.dumps([_compile_reference(r, args.arch) for r in requests]))
        return 0
    rows = [row for path in (args.programs or DEFAULT_PROGRAMS) for row in our_kernels(path, args.arch)]
    for row, ref in zip(rows, reference_in_child([r["request"] for r in rows], args.arch)):
        row["reference"] = ref
    print(json.dumps(rows, indent=1) if args.json else table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
