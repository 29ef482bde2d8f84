"""runtime/direct_launch: when a launch may skip JITFunction.run, against a stand-in JIT
function that records which path each launch took (the GPU run is bench/gpu_session.sh's)."""
from __future__ import annotations

import pytest

from triton_backend.runtime.direct_launch import direct_launcher, enabled


class Param:
    def __init__(self, is_constexpr=False):
        self.is_constexpr = is_constexpr


class Compiled:
    function, packed_metadata = "function", "metadata"

    def __init__(self):
        self.direct = []

    def run(self, *args):
        self.direct.append(args)


class Jit:
    def __init__(self, params=2, constexpr=False):
        self.params = [Param(constexpr)] * params
        self.slow = []
        self.compiled = {}

    def run(self, *args, grid, warmup, **options):
        self.slow.append((args, options))
        return self.compiled.setdefault(tuple(options.items()), Compiled())


class Tensor:
    def __init__(self, address):
        self.address = address

    def data_ptr(self):
        return self.address


class Hook:
    def __init__(self, calls=()):
        self.calls = list(calls)


def launcher(jit, device=lambda: 0, hooks=lambda: (Hook(), Hook())):
    return direct_launcher(jit, (3, 2), device_index=device, stream=lambda d: 99,
                           is_tensor=lambda a: isinstance(a, Tensor), hooks=hooks)


def test_second_launch_is_direct_with_the_grid_stream_and_arguments():
    jit = Jit()
    launch = launcher(jit)
    a, b = Tensor(1024), Tensor(2048)
    launch(a, b, num_warps=4)
    launch(a, b, num_warps=4)
    assert len(jit.slow) == 1
    (direct,) = jit.compiled[(("num_warps", 4),)].direct
    assert direct == (3, 2, 1, 99, "function", "metadata", None, None, None, a, b)


def test_each_set_of_options_has_its_own_kernel():
    jit = Jit()
    launch = launcher(jit)
    a, b = Tensor(0), Tensor(16)
    for warps in (4, 8, 4, 8):
        launch(a, b, num_warps=warps)
    assert [opts for _, opts in jit.slow] == [{"num_warps": 4}, {"num_warps": 8}]
    assert all(len(c.direct) == 1 for c in jit.compiled.values())


@pytest.mark.parametrize("address", [8, 1, 4])
def test_a_pointer_no_longer_aligned_goes_through_triton(address):
    jit = Jit()
    launch = launcher(jit)
    b = Tensor(32)
    launch(Tensor(64), b)
    launch(Tensor(address), b)
    assert len(jit.slow) == 2


def test_a_pointer_unaligned_at_first_may_be_anything_later():
    jit = Jit()
    launch = launcher(jit)
    launch(Tensor(8), Tensor(32))
    launch(Tensor(64), Tensor(32))
    launch(Tensor(4), Tensor(32))
    assert len(jit.slow) == 1


@pytest.mark.parametrize("jit, args", [
    (Jit(params=3), (Tensor(0), Tensor(16), 7)),          # a scalar: Triton specializes on it
    (Jit(params=2, constexpr=True), (Tensor(0), Tensor(16))),  # constexpr parameters
    (Jit(params=3), (Tensor(0), Tensor(16))),             # defaults filled in by the binder
])
def test_launches_that_are_never_direct(jit, args):
    launch = launcher(jit)
    for _ in range(3):
        launch(*args)
    assert len(jit.slow) == 3


def test_an_installed_hook_or_another_device_takes_tritons_path():
    jit, hooks, device = Jit(), [Hook(), Hook()], [0]
    launch = launcher(jit, device=lambda: device[0], hooks=lambda: tuple(hooks))
    a, b = Tensor(0), Tensor(16)
    launch(a, b)
    hooks[0] = Hook([print])
    launch(a, b)
    hooks[0], device[0] = Hook(), 1
    launch(a, b)
    device[0] = 0
    launch(a, b)
    assert len(jit.slow) == 3 and len(jit.compiled[()].direct) == 1


def test_switched_off_by_the_environment(monkeypatch):
    monkeypatch.setenv("FUSION_DIRECT_LAUNCH", "0")
    assert not enabled()
    monkeypatch.setenv("FUSION_DIRECT_LAUNCH", "1")
    assert enabled()
