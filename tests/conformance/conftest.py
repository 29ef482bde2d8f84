"""The conformance tests' session-scoped fixtures (``target_kernels`` has what they share)."""
from __future__ import annotations

import os

import pytest

from tests.conformance.target_kernels import TargetCompiles


@pytest.fixture(scope="session")
def target_compiles(tmp_path_factory) -> TargetCompiles:
    """Each program compiled once per GPU target in this test session (``TargetCompiles``):
    under xdist the workers share one folder, beside their own temporary folders."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the session's folder, holding each worker's ``popen-gwN``
    return TargetCompiles(base / "target-kernels")
