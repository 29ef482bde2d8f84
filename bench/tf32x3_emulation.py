"""Would 3xTF32 f32 dots pass f32's check on the corpus?  Evidence from the CPU, by emulation.

Issue 26 allows 3xTF32 as the default for f32 dots "only where it passes the same f32
tolerance on the whole corpus".  ``bench/gpu_corpus_check.py --f32-dot-precision tf32x3``
gives that evidence on a GPU; this script gives it without one.  Each f32 dot is rewritten
into the HLO of what Triton's ``input_precision="tf32x3"`` computes (its ``F32DotTC`` pass,
after CUTLASS's 3xTF32), and the module is evaluated by the reference evaluator and judged by
``run --check``'s own comparison (f32's tolerance widened by each output's summation length,
then the error against the module computed in f64):

* ``big = tf32(a)``: rounded to TF32's 10 mantissa bits (``reduce-precision``: to nearest
  even; Triton's ``cvt.rna`` breaks ties away from zero, a difference on exact ties only);
* ``small = a - big``, which the tensor core reads truncated to TF32 (the low 13 bits of the
  f32 dropped: emulated by a bit mask);
* ``dot(a, b) = dot(big_a, big_b) + (dot(small_a, big_b) + dot(big_a, small_b))``, the sum of
  the small products with its NaNs replaced by 0 (an infinite input makes ``small`` NaN).

Each TF32 product is exact in f32 (11 x 11 significant bits), so the evaluator's f32 dots of
the split operands compute what the tensor cores do, up to the order of the f32 additions.

    python bench/tf32x3_emulation.py [--csv F] [FILES...]
"""
from __future__ import annotations

import argparse
import csv
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from fusion.ir.attributes import Literal  # noqa: E402
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule  # noqa: E402
from fusion.ir.shape import ArrayShape  # noqa: E402
from fusion.transforms.dot_algorithm import F32_DOT_ALGORITHMS, with_f32_dot_precision  # noqa: E402

#: An f32's bits that TF32 keeps: sign, exponent and the top 10 mantissa bits.
TF32_MASK = 0xFFFFE000
#: The XLA algorithm of the dots this emulates.
TF32X3 = F32_DOT_ALGORITHMS["tf32x3"]
FIELDS = ["file", "status", "f32_dots", "outputs", "worst_rel_error", "seconds", "detail"]


def _split(name: str, operand: str, shape: ArrayShape) -> tuple[list, str, str]:
    """Instructions computing ``operand``'s TF32 ``big`` and ``small`` parts; their names."""
    u32 = ArrayShape("u32", shape.dims, shape.layout)
    big, diff, bits = f"{name}.big", f"{name}.diff", f"{name}.bits"
    mask, masked, small = f"{name}.mask", f"{name}.masked", f"{name}.small"
    scalar = ArrayShape("u32", ())
    return [
        HloInstruction(big, "reduce-precision", shape, (operand,),
                       (("exponent_bits", 8), ("mantissa_bits", 10))),
        HloInstruction(diff, "subtract", shape, (operand, big)),
        HloInstruction(bits, "bitcast-convert", u32, (diff,)),
        HloInstruction(f"{mask}.s", "constant", scalar, (), (("literal", Literal((), (TF32_MASK,))),)),
        HloInstruction(mask, "broadcast", u32, (f"{mask}.s",), (("dimensions", ()),)),
        HloInstruction(masked, "and", u32, (bits, mask)),
        HloInstruction(small, "bitcast-convert", shape, (masked,)),
    ], big, small


def _emulated_dot(dot: HloInstruction, comp: HloComputation) -> list[HloInstruction]:
    lhs, rhs = dot.operands
    left, a_big, a_small = _split(f"{dot.name}.lhs", lhs, comp.instruction(lhs).shape)
    right, b_big, b_small = _split(f"{dot.name}.rhs", rhs, comp.instruction(rhs).shape)
    attrs = tuple((k, v) for k, v in dot.attributes if k != "algorithm")
    shape = dot.shape
    pred = ArrayShape("pred", shape.dims, shape.layout)
    n = dot.name
    zero_s = ArrayShape("f32", ())
    return left + right + [
        HloInstruction(f"{n}.sb", "dot", shape, (a_small, b_big), attrs),
        HloInstruction(f"{n}.bs", "dot", shape, (a_big, b_small), attrs),
        HloInstruction(f"{n}.small", "add", shape, (f"{n}.sb", f"{n}.bs")),
        HloInstruction(f"{n}.nan", "compare", pred, (f"{n}.small", f"{n}.small"),
                       (("direction", "NE"),)),
        HloInstruction(f"{n}.zero.s", "constant", zero_s, (), (("literal", Literal((), (0.0,))),)),
        HloInstruction(f"{n}.zero", "broadcast", shape, (f"{n}.zero.s",), (("dimensions", ()),)),
        HloInstruction(f"{n}.kept", "select", shape, (f"{n}.nan", f"{n}.zero", f"{n}.small")),
        HloInstruction(f"{n}.bb", "dot", shape, (a_big, b_big), attrs),
        dot.replace(opcode="add", operands=(f"{n}.bb", f"{n}.kept"), attributes=()),
    ]


def emulate_tf32x3(module: HloModule) -> tuple[HloModule, int]:
    """``module`` with every f32 dot that takes TF32 (``dot_algorithm``'s rule) computed as
    3xTF32 on tensor cores computes it; and how many dots changed."""
    marked = with_f32_dot_precision(module, "tf32x3")
    count = 0
    comps = []
    for comp in marked.computations:
        out = []
        for instr in comp.instructions:
            if instr.opcode == "dot" and instr.attr("algorithm", None) == TF32X3:
                out.extend(_emulated_dot(instr, comp))
                count += 1
            else:
                out.append(instr)
        comps.append(HloComputation(comp.name, tuple(out), comp.root_name)
                     if len(out) != len(comp.instructions) else comp)
    return replace(marked, computations=tuple(comps)), count


def check(path: Path) -> dict:
    """One program: the emulated module's outputs judged against the evaluator's."""
    from fusion.evaluator import evaluate  # noqa: PLC0415
    from fusion.evaluator.npz_io import random_inputs  # noqa: PLC0415
    from fusion.ir.shape import flatten_shape  # noqa: PLC0415
    from fusion.text.parser import parse_hlo  # noqa: PLC0415
    from triton_backend.host.output_check import compare_with_evaluator  # noqa: PLC0415

    start = time.perf_counter()
    row = {"file": path.name}
    module = parse_hlo(path.read_text())
    emulated, count = emulate_tf32x3(module)
    row["f32_dots"] = count
    if not count:
        return {**row, "status": "no f32 dot", "seconds": round(time.perf_counter() - start, 2)}
    inputs = random_inputs(module)
    types = [s.dtype for s in flatten_shape(module.entry.root.shape)]
    comparisons = compare_with_evaluator(module, inputs, evaluate(emulated, *inputs), types)
    failed = [c.key for c in comparisons if not c.passed]
    worst = max((c.max_rel_error for c in comparisons if c.dtype == "f32"), default=0.0)
    return {**row, "status": "FAIL" if failed else "ok", "outputs": len(comparisons),
            "worst_rel_error": f"{worst:.2e}", "seconds": round(time.perf_counter() - start, 2),
            "detail": ", ".join(failed)}


def default_files() -> list[Path]:
    """The files ``gpu_corpus_check`` runs, whose f32 dots this emulates."""
    sys.path.insert(0, str(ROOT / "bench"))
    from gpu_corpus_check import default_files as corpus  # noqa: PLC0415

    return corpus()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--csv", type=Path, default=Path("tf32x3_emulation.csv"))
    args = parser.parse_args(argv)
    rows = []
    print(f"{'file':<44}{'status':<12}{'dots':>5}{'worst rel':>11}{'s':>7}  detail")
    for path in args.files or default_files():
        try:
            row = check(path)
        except Exception as err:  # noqa: BLE001 - a program the evaluator cannot run: say so
            row = {"file": path.name, "status": "error", "detail": f"{type(err).__name__}: {err}"}
        rows.append(row)
        print(f"{row['file'][:43]:<44}{row['status']:<12}{row.get('f32_dots', ''):>5}"
              f"{row.get('worst_rel_error', ''):>11}{row.get('seconds', ''):>7}  "
              f"{row.get('detail', '')}", flush=True)
    with args.csv.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    judged = [r for r in rows if r["status"] in ("ok", "FAIL")]
    failed = [r["file"] for r in judged if r["status"] == "FAIL"]
    print(f"{len(judged)} programs with f32 dots: {len(judged) - len(failed)} pass f32's check "
          f"as 3xTF32, {len(failed)} fail{': ' + ', '.join(failed) if failed else ''}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
