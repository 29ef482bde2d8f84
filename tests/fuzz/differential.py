"""One random program (``random_programs``) through XLA, the reference evaluator and
``compile_hlo``, with a verdict.

Both module texts are tried: JAX's lowering (``before``, fused by our pass) and XLA's CPU
optimization of it (``after``, XLA's own fusions).  XLA runs the JAX function itself on the CPU;
the evaluator and our compiled module (under the interpreter) run the text.  Each of ours is
compared with XLA by ``run --check``'s rule (the type's tolerance widened by the summation
length, then judged against the program computed in f64: its JAX lowering, which every
XLA-optimized text computes too).  Verdicts:

* ``ok``: both agree with XLA;
* ``REFUSED``: a located project error (``UnsupportedOpError`` for XLA's CPU-only custom
  fusions, say): allowed, counted;
* ``EVALUATOR`` / ``WRONG``: the evaluator / our compiled module disagrees with XLA;
* ``CRASH``: any other exception.
"""
from __future__ import annotations

import traceback
from dataclasses import dataclass

import numpy as np

from tests.fuzz.random_programs import RandomProgram

VERDICTS = ("ok", "REFUSED", "EVALUATOR", "WRONG", "CRASH")


@dataclass(frozen=True)
class Verdict:
    """The outcome of one module text of one program."""

    seed: int
    variant: str
    kind: str
    detail: str = ""
    text: str = ""


def _disagreements(module, truth, inputs, want, got, dtypes) -> list[str]:
    """Each output of ``got`` past XLA's ``want`` by ``run --check``'s rule, judged against
    ``truth`` (the program's JAX lowering: XLA's optimized text may not be computable in f64,
    its TOTALORDER comparators reinterpreting bits) computed in f64."""
    from fusion.analysis.summation_length import output_summation_lengths  # noqa: PLC0415
    from triton_backend.host.output_check import compare_output, judged_against_exact  # noqa: PLC0415

    if len(got) != len(want):
        return [f"{len(got)} outputs, XLA {len(want)}"]
    lengths = output_summation_lengths(module)
    comparisons = [compare_output(f"o{n}", w, g, t, summation_length=length)
                   for n, (w, g, t, length) in enumerate(zip(want, got, dtypes, lengths))]
    comparisons = judged_against_exact(truth, inputs, want, got, comparisons)
    return [c.describe() for c in comparisons if not c.passed]


def check_text(program: RandomProgram, variant: str, text: str, inputs, want,
               truth_text: str | None = None) -> Verdict:
    """One module text: the evaluator's and the compiled module's outputs against XLA's
    (``truth_text``: the module whose f64 value judges them, by default ``text``)."""
    from fusion.errors import FusionCompilerError  # noqa: PLC0415
    from fusion.evaluator import evaluate  # noqa: PLC0415
    from fusion.ir.shape import flatten_shape  # noqa: PLC0415
    from fusion.text.parser import parse_hlo  # noqa: PLC0415
    from triton_backend import compile_hlo  # noqa: PLC0415
    from triton_backend.host.input_validation import tensor_from_numpy, tensor_to_numpy  # noqa: PLC0415

    def verdict(kind: str, detail: str = "") -> Verdict:
        return Verdict(program.seed, variant, kind, detail, text if kind != "ok" else "")

    try:
        module = parse_hlo(text)
        truth = module if truth_text is None else parse_hlo(truth_text)
        dtypes = [s.dtype for s in flatten_shape(module.entry.root.shape)]
        evaluated = [np.asarray(v) for v in evaluate(module, *inputs)]
        problems = _disagreements(module, truth, inputs, want, evaluated, dtypes)
        if problems:
            return verdict("EVALUATOR", "\n".join(problems))
        compiled = compile_hlo(text, cache=False)
        tensors = [tensor_from_numpy(a, p.shape.dtype)
                   for a, p in zip(inputs, module.entry.parameters)]
        got = [tensor_to_numpy(t) for t in compiled(*tensors)]
        problems = _disagreements(module, truth, inputs, want, got, dtypes)
        if problems:
            return verdict("WRONG", f"{compiled.fusion_mode}\n" + "\n".join(problems))
    except FusionCompilerError as err:
        return verdict("REFUSED", f"{type(err).__name__}: {err}")
    except Exception:  # noqa: BLE001 - every other exception is a defect to report
        return verdict("CRASH", traceback.format_exc()[-3000:])
    return verdict("ok")


def check_program(program: RandomProgram, variants=("before", "after")) -> list[Verdict]:
    """``program``'s verdicts, one per module text in ``variants``."""
    inputs = program.example_inputs()
    want = program.run_xla(inputs)
    before = program.hlo_text()
    texts = {"before": lambda: before, "after": program.optimized_hlo_text}
    return [check_text(program, v, texts[v](), inputs, want, before) for v in variants]


__all__ = ["VERDICTS", "Verdict", "check_program", "check_text"]
