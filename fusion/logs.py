"""The ``hlo_triton_fusion`` logger hierarchy: off by default, on with ``FUSION_LOG`` or ``-v``.

Every package logs under one root so a user switches all of it on at once:
``hlo_triton_fusion.fusion``, ``hlo_triton_fusion.tiling``, ``hlo_triton_fusion.triton_backend.*``.

    >>> get_logger("tiling.fusion_pass.priority_fusion").name
    'hlo_triton_fusion.tiling.fusion_pass.priority_fusion'
    >>> level_from_text("debug") == logging.DEBUG
    True
"""
from __future__ import annotations

import logging
import os

ROOT = "hlo_triton_fusion"
ENV_VAR = "FUSION_LOG"

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "error": logging.ERROR, "off": None, "": None, "0": None}

# A library stays silent unless asked: NullHandler keeps Python's last-resort handler from
# printing warnings of ours to stderr.
logging.getLogger(ROOT).addHandler(logging.NullHandler())


def level_from_text(text: str) -> int | None:
    """``"info"`` -> ``logging.INFO``; ``"off"`` or empty -> ``None``; unknown -> ValueError."""
    key = text.strip().lower()
    if key not in _LEVELS:
        raise ValueError(f"{ENV_VAR}={text!r}: expected one of debug, info, warning, error, off")
    return _LEVELS[key]


def get_logger(name: str) -> logging.Logger:
    """The logger ``hlo_triton_fusion.<name>``; the first call applies ``FUSION_LOG``."""
    _configure_from_env_once()
    return logging.getLogger(f"{ROOT}.{name}")


_stderr_handler: logging.Handler | None = None


def enable(level: int) -> None:
    """Send records of ``level`` and above to stderr (``-v`` is INFO, ``-vv`` DEBUG)."""
    global _stderr_handler
    root = logging.getLogger(ROOT)
    if _stderr_handler is None:
        _stderr_handler = logging.StreamHandler()
        _stderr_handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        root.addHandler(_stderr_handler)
    root.setLevel(level)


_env_applied = False


def _configure_from_env_once() -> None:
    global _env_applied
    if _env_applied:
        return
    _env_applied = True
    text = os.environ.get(ENV_VAR, "")
    try:
        level = level_from_text(text)
    except ValueError:
        level = None
    if level is not None:
        enable(level)
