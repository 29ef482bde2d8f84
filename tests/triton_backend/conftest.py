"""Fixtures of the backend tests."""
from __future__ import annotations

import pytest


@pytest.fixture
def inductor_without_vec_isa_probe():
    """Inductor generating plain (not explicitly vectorised) C++ for the CPU ops around ours.

    Before Inductor's first CPU kernel in a process it compiles and loads a probe program per
    vector instruction set (~10 s of compiler runs on a cold Inductor cache).  What the
    torch.compile tests check is our custom op inside Inductor's graphs (traced, compiled,
    differentiated, giving the same numbers), which calls the op as an external kernel
    whatever Inductor's own C++ looks like; the probe tests the machine, not us.
    """
    import torch._inductor.config as inductor_config

    with inductor_config.patch({"cpp.vec_isa_ok": False}):
        yield
