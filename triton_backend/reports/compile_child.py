"""The child process that compiles kernel files for a GPU target, kept for the next request.

A ``@triton.jit`` function decorated under ``TRITON_INTERPRET=1`` cannot be compiled for a GPU,
so a process that runs kernels under the interpreter compiles them for ``sm_<arch>`` in a
child without it (``compile_report.compile_kernel_files``).  Starting that child (Python,
torch and Triton imported) cost about 2 s, more than compiling most kernels from Triton's
cache, and a test session or a report asks many times.  So one child serves every request of
this process with the same environment: one JSON request per line on its stdin, one reply
line on its stdout (other output is skipped; what it writes to stderr is kept in a file for
the error message).

* A request's failure (a Python exception in the child) is a ``FusionCompilerError`` with the
  child's traceback; the child serves on.  A child that dies (a crash in the compiler) is
  reported the same way, with its stderr, and the next request starts a new one.
* The environment the child needs is the one it was started with: a request under another
  environment (a changed ``TRITON_CACHE_DIR``, say) starts another child.  Variables that
  only name this process's test or its compiled-module cache do not count.
* The child leaves when its stdin closes, so it never outlives this process.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable
from typing import IO, Any

from fusion.errors import FusionCompilerError

_REPLY = "COMPILE-CHILD-REPLY "
_FAILURE = "COMPILE-CHILD-FAILURE "
#: Environment variables the compile does not read (each test sets them anew).
_IRRELEVANT_ENV = frozenset({"PYTEST_CURRENT_TEST", "FUSION_MODULE_CACHE_DIR"})


def child_environment() -> dict[str, str]:
    """This process's environment as a child compiling for a GPU needs it: without
    ``TRITON_INTERPRET``, with the numerics policy's ``TRITON_DEFAULT_FP_FUSION=0``."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "0"  # the numerics policy: no FP contraction
    return env


class _Child:
    """One serving child and the lock its request/reply pairs take."""

    def __init__(self, module: str, env: dict[str, str]):
        self.stderr: IO[str] = tempfile.TemporaryFile(mode="w+")
        self.process = subprocess.Popen(
            [sys.executable, "-m", module], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self.stderr, text=True, env=env)
        self.lock = threading.Lock()

    def ask(self, request: dict, where: str) -> Any:
        with self.lock:
            try:
                self.process.stdin.write(json.dumps(request) + "\n")
                self.process.stdin.flush()
                for line in self.process.stdout:
                    if line.startswith(_REPLY):
                        return json.loads(line[len(_REPLY):])
                    if line.startswith(_FAILURE):
                        raise FusionCompilerError(
                            f"compiling the kernels for {where} failed:\n"
                            f"{json.loads(line[len(_FAILURE):])[-4000:]}", where=where)
            except OSError:  # the child is gone (a broken pipe)
                pass
            self.close()
            raise FusionCompilerError(f"compiling the kernels for {where} failed: the compiler "
                                      f"process ended:\n{self._stderr_tail()}", where=where)

    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        for stream in (self.process.stdin, self.process.stdout):
            try:
                stream.close()
            except OSError:
                pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def _stderr_tail(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read().strip()[-4000:]


_CHILDREN: dict[tuple, _Child] = {}
_CHILDREN_LOCK = threading.Lock()


def ask(module: str, request: dict, where: str) -> Any:
    """Send ``request`` to the child serving ``python -m module`` under this
    process's environment (started on first use, again after it died); its reply."""
    env = child_environment()
    key = (module, tuple(sorted((k, v) for k, v in env.items() if k not in _IRRELEVANT_ENV)))
    with _CHILDREN_LOCK:
        child = _CHILDREN.get(key)
        if child is None or not child.alive():
            child = _CHILDREN[key] = _Child(module, env)
    return child.ask(request, where)


def serve(handle: Callable[[dict], Any], stdin: IO[str] = sys.stdin,
          stdout: IO[str] = sys.stdout) -> None:
    """The child's loop: one reply line per request line, until stdin closes."""
    for line in stdin:
        if not line.strip():
            continue
        try:
            reply = _REPLY + json.dumps(handle(json.loads(line)))
        except Exception:  # noqa: BLE001 - reported to the parent, which raises it located
            text = traceback.format_exc()
            sys.stderr.write(text)
            reply = _FAILURE + json.dumps(text)
        stdout.write(reply + "\n")
        stdout.flush()


__all__ = ["ask", "child_environment", "serve"]
