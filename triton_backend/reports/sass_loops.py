"""What a compiled kernel's main loop executes, read from its SASS, and what its PTX uses.

A dot or attention kernel's time is its loop over K (or over key blocks): the instructions one
iteration issues per warp, whether its multiplies are tensor-core ``wgmma`` (sm_90) or ``mma``,
and whether its tiles arrive by asynchronous copies (``cp.async``, or TMA's
``cp.async.bulk.tensor``) that overlap with the math.  Bytes moved do not show any of this.

The SASS comes from the Triton wheel's own ``cuobjdump -sass`` on the cubin (no GPU needed).
Loops are backward branches; the *main loop* is the steady state: of the loops whose bodies
hold the most tensor-core instructions (``HGMMA``/``HMMA``), the shortest (a kernel that keeps
its masked iterations in a loop of their own runs the other one most of the time).  A loop
unrolled completely has no backward branch: :func:`unrolled_loop` finds its span instead.

>>> sass = '''
...         /*0000*/                   MOV R1, c[0x0][0x28] ;
...         /*0010*/                   HGMMA.64x64x16.F32.BF16 R24, gdesc[UR4], RZ ;
...         /*0020*/                   FADD R2, R2, R3 ;
...         /*0030*/              @P0 BRA 0x10 ;
...         /*0040*/                   EXIT ;'''
>>> main_loop(parse_sass(sass))
LoopStats(instructions=3, tensor_core=1, async_copies=0)
>>> count_ptx_features("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {...};\\n"
...                    "cp.async.cg.shared.global [%r1], [%rd2], 16;")
{'wgmma': 1, 'mma': 0, 'cp.async': 1, 'tma': 0}
"""
from __future__ import annotations

import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from triton_backend.reports.ptx_report import find_ptxas

_INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);")
_BRANCH = re.compile(r"\bBRA\b[^;]*?\b0x([0-9a-f]+)\b")
_TENSOR_CORE = re.compile(r"\b(?:HGMMA|HMMA|IMMA|QGMMA)\b")
_ASYNC_COPY = re.compile(r"\b(?:LDGSTS|UTMALDG|UBLKCP)\b")

_PTX_FEATURES = {
    "wgmma": re.compile(r"\bwgmma\.mma_async\b"),
    "mma": re.compile(r"\bmma\.sync\b"),
    "cp.async": re.compile(r"\bcp\.async\.(?:ca|cg)\b"),
    "tma": re.compile(r"\bcp\.async\.bulk\.tensor\b"),
}


@dataclass(frozen=True)
class LoopStats:
    """One loop of a kernel: instructions per iteration (per warp), of which tensor-core
    multiplies and asynchronous global-to-shared copies."""

    instructions: int
    tensor_core: int
    async_copies: int


def parse_sass(text: str) -> list[tuple[int, str]]:
    """``(address, instruction)`` per SASS instruction, in address order."""
    return [(int(m.group(1), 16), m.group(2).strip()) for m in _INSTRUCTION.finditer(text)]


def loops(instructions: list[tuple[int, str]]) -> list[LoopStats]:
    """Every loop: the instructions from a backward branch's target to the branch."""
    index = {address: k for k, (address, _) in enumerate(instructions)}
    found = []
    for k, (address, text) in enumerate(instructions):
        branch = _BRANCH.search(text)
        if branch is None:
            continue
        target = int(branch.group(1), 16)
        if target < address and target in index:
            body = [t for _, t in instructions[index[target]:k + 1]]
            found.append(LoopStats(len(body), sum(bool(_TENSOR_CORE.search(t)) for t in body),
                                   sum(bool(_ASYNC_COPY.search(t)) for t in body)))
    return found


def main_loop(instructions: list[tuple[int, str]]) -> LoopStats | None:
    """Of the loops with the most tensor-core instructions, the shortest; None without any
    loop."""
    found = loops(instructions)
    return max(found, key=lambda s: (s.tensor_core, -s.instructions)) if found else None


def _stats(texts: list[str]) -> LoopStats:
    return LoopStats(len(texts), sum(bool(_TENSOR_CORE.search(t)) for t in texts),
                     sum(bool(_ASYNC_COPY.search(t)) for t in texts))


def whole_kernel(instructions: list[tuple[int, str]]) -> LoopStats:
    """The whole kernel as one "iteration"."""
    return _stats([t for _, t in instructions])


def unrolled_loop(instructions: list[tuple[int, str]]) -> LoopStats | None:
    """A loop the compiler unrolled completely (a short constant trip count): the span from
    its first tensor-core instruction to its last, all of them; None without any.

    The whole kernel would count its prologue (address setup, the first stages' copies) and
    its epilogue (a fused bias and GELU is thousands of instructions, run once) as if every
    K step ran them.  The span holds the steps' own work; it runs ``steps - 1`` steps from
    the first step's multiplies to the last step's (``tensor_core / per_step - 1``).

    >>> sass = [(0, "MOV R1, R2"), (16, "HGMMA.64x64x16.F32.BF16 R24, gdesc[UR4], RZ"),
    ...         (32, "LDGSTS.E.BYPASS.128 [R3], desc[UR6][R4.64]"), (48, "IADD3 R5, R5, 0x40"),
    ...         (64, "HGMMA.64x64x16.F32.BF16 R24, gdesc[UR8], R24"), (80, "MUFU.TANH R6, R7")]
    >>> unrolled_loop(sass)
    LoopStats(instructions=4, tensor_core=2, async_copies=1)
    """
    texts = [t for _, t in instructions]
    ops = [k for k, t in enumerate(texts) if _TENSOR_CORE.search(t)]
    return _stats(texts[ops[0]:ops[-1] + 1]) if ops else None


def find_cuobjdump() -> Path | None:
    """The Triton wheel's ``cuobjdump`` (beside its ``ptxas``), or None."""
    ptxas = find_ptxas(90)
    if ptxas is None:
        return None
    path = ptxas.parent / "cuobjdump"
    return path if path.is_file() else None


def disassemble(cubin: bytes) -> str:
    """The SASS of a cubin (``cuobjdump -sass``); "" without the tool."""
    tool = find_cuobjdump()
    if tool is None:
        return ""
    with tempfile.TemporaryDirectory(prefix="sass-") as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        result = subprocess.run([str(tool), "-sass", str(path)], capture_output=True,
                                text=True, check=False)
    return result.stdout if result.returncode == 0 else ""


def count_ptx_features(ptx: str) -> dict[str, int]:
    """How many ``wgmma``/``mma`` multiplies and ``cp.async``/TMA copies the PTX holds."""
    return {name: len(pattern.findall(ptx)) for name, pattern in _PTX_FEATURES.items()}


__all__ = ["LoopStats", "count_ptx_features", "disassemble", "find_cuobjdump", "loops",
           "main_loop", "parse_sass", "unrolled_loop", "whole_kernel"]
