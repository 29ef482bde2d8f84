"""Modules ``check`` accepts must compile and run or fail with a located error (issue 18).

Each case used to end in a raw traceback past the verifier: a reducer whose instructions are
out of text order (a ``KeyError`` in the combine function), a layout that is not a permutation
(an ``IndexError`` in the layout math); a while loop that never ends could not be stopped.
Results are compared with the reference evaluator.
"""
from __future__ import annotations

import signal
import threading
import _thread

import numpy as np
import pytest
import torch

from fusion.errors import EvaluationError, FusionCompilerError, HloVerifyError
from fusion.evaluator import evaluate
from fusion.text.parser import parse_hlo
from triton_backend import compile_hlo
from triton_backend.cli import main
from tests.fusion.test_hostile_inputs import ENDLESS

REDUCER_OUT_OF_ORDER = """HloModule m
add {
  ROOT s = f32[] add(a, b)
  a = f32[] parameter(0)
  b = f32[] parameter(1)
}
fused {
  x = f32[8] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[] reduce(x, z), dimensions={0}, to_apply=add
}
ENTRY e {
  p = f32[8] parameter(0)
  ROOT f = f32[] fusion(p), kind=kInput, calls=fused
}
"""


def test_reducer_out_of_text_order_compiles_and_matches_the_evaluator():
    x = np.linspace(-2, 2, 8, dtype=np.float32)
    compiled = compile_hlo(REDUCER_OUT_OF_ORDER)
    (out,) = compiled(torch.from_numpy(x))
    (ref,) = evaluate(parse_hlo(REDUCER_OUT_OF_ORDER), x)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-6, atol=1e-6)


def test_layout_that_is_not_a_permutation_is_refused_before_compiling(tmp_path):
    text = ("HloModule m\nENTRY e {\n  p = f32[2,3,4]{2,11,0} parameter(0)\n"
            "  ROOT n = f32[2,3,4]{2,1,0} negate(p)\n}\n")
    with pytest.raises(HloVerifyError, match="not a permutation") as info:
        compile_hlo(text)
    assert info.value.line == 3
    path = tmp_path / "bad_layout.hlo"
    path.write_text(text)
    assert main(["check", str(path)]) == 1


def test_absurd_tiled_layout_is_refused_before_allocating():
    text = ("HloModule m\nENTRY e {\n  p = f32[16,16]{1,0:T(1000000,1000000)} parameter(0)\n"
            "  ROOT n = f32[16,16]{1,0:T(1000000,1000000)} negate(p)\n}\n")
    with pytest.raises(HloVerifyError, match="at most 1048576"):
        compile_hlo(text)


def test_max_while_iterations_stops_an_endless_compiled_loop():
    compiled = compile_hlo(ENDLESS)
    with pytest.raises(EvaluationError, match="after 7 iteration") as info:
        compiled(torch.tensor(0, dtype=torch.int32), max_while_iterations=7)
    assert info.value.where == "while %w" and info.value.line == 20
    # The same loop bounded from above by its condition runs to its end within the limit.
    ending = compile_hlo(ENDLESS.replace("direction=GE", "direction=LT"))
    (out,) = ending(torch.tensor(-5, dtype=torch.int32), max_while_iterations=5)
    assert int(out) == 0
    with pytest.raises(FusionCompilerError, match="max_while_iterations"):
        ending(torch.tensor(-5, dtype=torch.int32), max_while_iterations=-2)


def test_ctrl_c_propagates_out_of_an_endless_compiled_loop():
    compiled = compile_hlo(ENDLESS)
    call = type(compiled).__call__.__code__

    def ctrl_c_inside_the_call(signum, frame):
        # Raised only while the compiled call runs: a Ctrl-C that lands after it is ignored.
        while frame is not None:
            if frame.f_code is call:
                raise KeyboardInterrupt
            frame = frame.f_back

    # interrupt_main does nothing while SIGINT is ignored (a background test run).
    previous = signal.signal(signal.SIGINT, ctrl_c_inside_the_call)
    # Ctrl-C again every half second until the call is out: an interrupt that lands in a
    # finalizer run by the garbage collector is reported there and dropped ("Exception
    # ignored in ..."), and one such drop left a CI run in the endless loop for good.
    done = threading.Event()

    def interrupt():
        while not done.wait(0.5):
            _thread.interrupt_main()

    ctrl_c = threading.Thread(target=interrupt, daemon=True)
    ctrl_c.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            compiled(torch.tensor(0, dtype=torch.int32))
    finally:
        done.set()
        ctrl_c.join()
        signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("command", ["evaluate", "run"])
def test_max_iterations_option_stops_an_endless_loop(tmp_path, capsys, command):
    path = tmp_path / "endless.hlo"
    path.write_text(ENDLESS)
    status = main([command, str(path), "--outputs", str(tmp_path / "o.npz"),
                   "--max-iterations", "3"])
    err = capsys.readouterr().err
    assert status == 1
    assert "after 3 iteration" in err and "while %w" in err
