"""The conformance tests' session-scoped fixtures (``target_kernels`` has what they share)."""
from __future__ import annotations

import pytest

from tests.conformance.target_kernels import TargetCompiles


@pytest.fixture(scope="session")
def target_compiles(tmp_path_factory) -> TargetCompiles:
    """Each program compiled once per GPU target in this test process (``TargetCompiles``)."""
    return TargetCompiles(tmp_path_factory.mktemp("target-kernels"))
