"""Counting the calls a compile or a call makes to one function (a test's measure of work
done or skipped, deterministic where a time is not)."""
from __future__ import annotations

from typing import Any


def count_calls(monkeypatch, owner: Any, name: str) -> list[tuple]:
    """Wrap ``owner.name`` (through ``monkeypatch``: undone after the test) so that each call
    appends its positional arguments to the returned list, then runs the real function."""
    calls: list[tuple] = []
    real = getattr(owner, name)

    def counting(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, counting)
    return calls
