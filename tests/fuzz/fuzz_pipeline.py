"""Runs one (possibly hostile) HLO text through the front end and classifies the outcome.

Stages: parse -> verify -> print/parse round trip -> layouts of every shape -> evaluate (on
``npz_io.random_inputs``, with the evaluator's size limit lowered to ``EVALUATE_MAX_ELEMENTS``
so that large modules must be refused cleanly) -> indexing analysis of every instruction; then,
for every text whether or not it got that far, the ``check``, ``evaluate`` and ``indexing``
CLI commands in-process (and ``layout`` on the first shape with a layout in the text).  The outcome is ``ok``, the
class name of the first project error (which must carry a location: line:column or ``where``),
or a failure: ``CRASH`` (any other exception, or a project error without a location),
``ROUNDTRIP`` (the printed module does not parse back to the same text), ``TIMEOUT``, or
``WRONG`` (a back-end stage's run differs from the reference evaluator, ``backend_stages``).
A module that compiled but is too large to run within a case is ``NOT_RUN``.  While loops are
bounded at ``MAX_WHILE_ITERATIONS`` (a mutated loop bound is a clear error, not a hang).

>>> run_pipeline("HloModule m\\nENTRY e {\\n  ROOT c = f32[] constant(1)\\n}\\n").kind
'ok'
>>> r = run_pipeline("HloModule m\\nENTRY e {\\n  ROOT c = f32[] negate(x)\\n}\\n")
>>> r.kind, r.stage
('HloVerifyError', 'verify')
"""
from __future__ import annotations

import contextlib
import io
import math
import os
import re
import signal
import tempfile
import traceback
from dataclasses import dataclass
from pathlib import Path

from fusion.errors import FusionCompilerError
from fusion.evaluator import evaluate, size_limit
from fusion.evaluator.npz_io import random_inputs
from fusion.text.parser import parse_hlo
from fusion.text.printer import print_hlo
from fusion.ir.shape import ArrayShape, flatten_shape
from fusion.shapes.verifier import verify_module

FAILURES = ("CRASH", "ROUNDTRIP", "TIMEOUT", "WRONG")
MAX_WHILE_ITERATIONS = 1000
_SHAPE_WITH_LAYOUT = re.compile(r"[a-z][a-z0-9]*\[[^\]\n]*\]\{[^{}\n]*\}")
EVALUATE_MAX_ELEMENTS = 100_000


@dataclass(frozen=True)
class Outcome:
    """``kind``: ``ok``, a project error class name, or one of ``FAILURES``."""

    kind: str
    stage: str = ""
    detail: str = ""

    @property
    def failed(self) -> bool:
        return self.kind in FAILURES


class _Timeout(BaseException):
    """Raised by the alarm; a BaseException so that no ``except Exception`` swallows it."""


def _has_location(err: FusionCompilerError) -> bool:
    return err.line is not None or bool(err.where)


def _round_trip(module) -> str | None:
    printed = print_hlo(module)
    reparsed = parse_hlo(printed)
    again = print_hlo(reparsed)
    return None if again == printed else "print(parse(print(m))) != print(m)"


def _layouts(module) -> None:
    from tiling.layouts.tiled_layout import TiledLayout, layout_indexing_map  # noqa: PLC0415

    seen = set()
    for comp in module.computations:
        for instr in comp.instructions:
            for leaf in flatten_shape(instr.shape):
                if not isinstance(leaf, ArrayShape) or leaf.layout is None:
                    continue
                key = (leaf.dtype, leaf.dims, leaf.layout)
                if key in seen or math.prod(leaf.dims) > EVALUATE_MAX_ELEMENTS:
                    continue
                seen.add(key)
                TiledLayout.of(leaf.dims, leaf.layout, where=instr.name)
                layout_indexing_map(leaf.dims, leaf.layout)


def _indexing(module) -> None:
    from tiling.indexing_analysis import output_to_input_indexing  # noqa: PLC0415

    for comp in module.computations:
        for instr in comp.instructions:
            holder = module if instr.opcode == "fusion" else comp
            outputs = len(flatten_shape(instr.shape))
            for output in sorted({0, outputs - 1}):
                output_to_input_indexing(instr, holder, output_index=output)


def _cli(text: str) -> None:
    from triton_backend.cli import main  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "case.hlo"
        path.write_bytes(text.encode("utf-8", "surrogatepass"))
        commands = [["check", str(path)], ["check", "--json", str(path)],
                    ["indexing", str(path)]]
        commands.append(["evaluate", str(path), "--outputs", str(Path(tmp) / "o.npz"),
                         "--max-iterations", str(MAX_WHILE_ITERATIONS)])
        shape = _SHAPE_WITH_LAYOUT.search(text)
        if shape is not None:
            commands.append(["layout", shape.group(), "--json"])
        for argv in commands:
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
                    _env(size_limit.ENV_VAR, str(EVALUATE_MAX_ELEMENTS)):
                status = main(argv)
            if status not in (0, 1):
                raise AssertionError(f"{argv[0]} exited with {status}")
            if status == 1 and "error" not in err.getvalue() + out.getvalue():
                raise AssertionError(f"{argv[0]} failed without an error message")


@contextlib.contextmanager
def _env(name: str, value: str):
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            del os.environ[name]
        else:
            os.environ[name] = old


def frontend_stages(text: str):
    """Yields stage names as it goes; raises on the first error.

    The CLI runs on every text, valid or not (its commands must fail cleanly too); the
    direct stages' first error is re-raised after it.
    """
    first_error = None
    try:
        yield "parse"
        module = parse_hlo(text)
        yield "verify"
        verify_module(module)
        yield "round trip"
        problem = _round_trip(module)
        if problem:
            raise _RoundTrip(problem)
        yield "layout"
        _layouts(module)
        yield "evaluate"
        # Large modules must be refused by the evaluator's own size limit, lowered here so
        # that refusing is the only thing that can happen to them.
        with _env(size_limit.ENV_VAR, str(EVALUATE_MAX_ELEMENTS)):
            evaluate(module, *random_inputs(module, seed=0),
                     max_while_iterations=MAX_WHILE_ITERATIONS)
        yield "indexing"
        _indexing(module)
    except FusionCompilerError as err:
        first_error = err
    yield "cli"
    _cli(text)
    if first_error is not None:
        raise first_error


def with_extra_stages(extra):
    """The front-end stages, then ``extra`` (name -> function of the parsed module) in order,
    run only on modules that passed every front-end stage."""
    def stages(text: str):
        yield from frontend_stages(text)
        module = parse_hlo(text)
        for name, stage in extra.items():
            yield name
            stage(module)
    return stages


class _RoundTrip(Exception):
    pass


class WrongResult(Exception):
    """A back-end stage's outputs differ from the reference evaluator's (``WRONG``)."""


class NotRun(Exception):
    """A back-end stage compiled the module but did not run it: too large for a case."""


def run_pipeline(text: str, timeout_s: float = 10.0, stages=frontend_stages) -> Outcome:
    """The outcome of ``text`` through every stage (see the module docstring)."""
    stage = "start"
    error_stage = None
    use_alarm = timeout_s and hasattr(signal, "setitimer") and os.name == "posix"
    if use_alarm:
        def on_alarm(signum, frame):
            raise _Timeout()
        previous = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        for stage in stages(text):
            if stage != "cli":
                error_stage = stage
        return Outcome("ok", stage)
    except _Timeout:
        return Outcome("TIMEOUT", stage, f"over {timeout_s} s")
    except _RoundTrip as err:
        return Outcome("ROUNDTRIP", stage, str(err))
    except WrongResult as err:
        return Outcome("WRONG", stage, str(err))
    except NotRun as err:
        return Outcome("NOT_RUN", stage, str(err))
    except Exception as err:  # noqa: BLE001 - that is the point: anything else is a crash
        if isinstance(err, FusionCompilerError):
            stage = error_stage if stage == "cli" and error_stage else stage
            if not _has_location(err):
                return Outcome("CRASH", stage, f"{type(err).__name__} without a location: {err}")
            return Outcome(type(err).__name__, stage, str(err))
        return Outcome("CRASH", stage, "".join(traceback.format_exception(err))[-3000:])
    finally:
        if use_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
