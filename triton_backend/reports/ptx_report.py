"""Compile a ``@triton.jit`` kernel for an NVIDIA target without a GPU, and report on it.

Confirmed with Triton 3.9.0 (no GPU, no driver)::

    from triton.compiler import ASTSource
    from triton.backends.compiler import GPUTarget
    src = ASTSource(fn=kernel, signature={"x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
                    constexprs={"BLOCK": 1024}, attrs={(0,): [["tt.divisibility", 16]]})
    compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": 4, "num_stages": 3, "enable_fp_fusion": False})
    compiled.asm["ptx"], compiled.asm["cubin"], compiled.metadata.shared

``attrs`` keys are tuples of argument positions; ``tt.divisibility 16`` on a pointer is what
lets Triton emit 128-bit ``ld.global.v4`` accesses.  ``metadata`` has no register or spill
counts without a driver, so those come from the ``ptxas -v`` log of the wheel's own ``ptxas``
(``triton/backends/nvidia/bin/ptxas`` or ``ptxas-blackwell``, chosen per arch by
``triton.backends.nvidia.compiler.get_ptxas``): the log Triton prints while building the
cubin (``knobs.nvidia.dump_ptxas_log``), or, when Triton's cache had the cubin, a run of our
own with ``--gpu-name`` taken from the PTX ``.target`` line (``sm_90a`` for arch 90).

The kernel must be a real ``JITFunction``: a function decorated while ``TRITON_INTERPRET=1``
is an ``InterpretedFunction`` and cannot be compiled; compile in a process without it.
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class PtxasResources:
    """What ``ptxas -v`` says about one entry function."""

    registers: int
    spill_store_bytes: int
    spill_load_bytes: int
    shared_bytes: int
    stack_bytes: int


@dataclass(frozen=True)
class CompiledReport:
    """A compiled kernel and the resource facts the backend's tests and tuning look at."""

    name: str
    arch: int
    num_warps: int
    num_stages: int
    ptx: str
    cubin: bytes
    registers: int
    spill_store_bytes: int
    spill_load_bytes: int
    shared_bytes: int
    vectorized_global_accesses: Mapping[str, int] = field(default_factory=dict)
    ptxas_log: str = ""

    @property
    def spills(self) -> int:
        """Bytes of spill stores plus spill loads."""
        return self.spill_store_bytes + self.spill_load_bytes


class PtxasNotFoundError(RuntimeError):
    """The Triton wheel's ``ptxas`` is missing (or not executable)."""


def find_ptxas(arch: int = 90) -> Path | None:
    """The ``ptxas`` Triton itself uses for ``arch`` (None if absent).

    Triton 3.9 ships two: ``bin/ptxas`` (CUDA 12.9) for arch < 90 and ``bin/ptxas-blackwell``
    (CUDA 13.x) for arch >= 90; the PTX ``.version`` it emits follows that choice, so the
    other binary may reject the PTX.
    """
    try:
        from triton.backends.nvidia.compiler import get_ptxas  # noqa: PLC0415 - lazy

        path = Path(get_ptxas(arch).path)
    except Exception:  # noqa: BLE001 - any failure here means "no usable ptxas"
        return None
    return path if path.is_file() and os.access(path, os.X_OK) else None


_VECTOR_ACCESS = re.compile(r"\b((?:ld|st)\.global(?:\.[a-z]+)*?\.v(?:2|4|8))\.")


def count_vector_accesses(ptx: str) -> dict[str, int]:
    """Counts of vector global loads/stores, keyed ``ld.global.v4`` etc. (qualifiers dropped).

    >>> count_vector_accesses("@%p1 ld.global.v4.b32 {%r1,%r2,%r3,%r4}, [%rd1];\\n"
    ...                       "st.global.v2.b32 [%rd2], {%r1, %r2};\\nld.global.b32 %r9, [%rd3];")
    {'ld.global.v4': 1, 'st.global.v2': 1}
    """
    counts: dict[str, int] = {}
    for match in _VECTOR_ACCESS.finditer(ptx):
        op = match.group(1)
        key = f"{op[:2]}.global.{op.rsplit('.', 1)[1]}"
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items()))


_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_REGS = re.compile(r"Used (\d+) registers")
_SPILLS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_SMEM = re.compile(r"(\d+) bytes smem")


def parse_ptxas_log(log: str, entry: str) -> PtxasResources:
    """Resources of ``entry`` from a ``ptxas -v`` log.

    >>> parse_ptxas_log('''ptxas info    : Compiling entry function 'k' for 'sm_90a'
    ... ptxas info    : Function properties for k
    ...     8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
    ... ptxas info    : Used 40 registers, used 1 barriers, 1024 bytes smem, 384 bytes cmem[0]''', "k")
    PtxasResources(registers=40, spill_store_bytes=4, spill_load_bytes=4, shared_bytes=1024, stack_bytes=8)
    """
    sections = _ENTRY.split(log)
    # split() gives [before, name1, body1, name2, body2, ...]
    bodies = {sections[i]: sections[i + 1] for i in range(1, len(sections) - 1, 2)}
    if entry not in bodies:
        raise ValueError(f"ptxas log has no entry function {entry!r}; found {sorted(bodies)}")
    body = bodies[entry]
    regs = _REGS.search(body)
    spills = _SPILLS.search(body)
    smem = _SMEM.search(body)
    if regs is None or spills is None:
        raise ValueError(f"cannot read register/spill counts for {entry!r} from ptxas log:\n{body}")
    return PtxasResources(
        registers=int(regs.group(1)),
        spill_store_bytes=int(spills.group(2)),
        spill_load_bytes=int(spills.group(3)),
        shared_bytes=int(smem.group(1)) if smem else 0,
        stack_bytes=int(spills.group(1)),
    )


def run_ptxas(ptx: str, arch: int, ptxas: Path | None = None) -> str:
    """``ptxas -v`` on ``ptx`` for the GPU its ``.target`` line names; returns the log."""
    ptxas = ptxas or find_ptxas(arch)
    if ptxas is None:
        raise PtxasNotFoundError("ptxas not found in the Triton wheel (triton/backends/nvidia/bin)")
    target = re.search(r"^\s*\.target\s+(sm_\w+)", ptx, re.MULTILINE)
    if target is None:
        raise ValueError("PTX has no .target line")
    with tempfile.TemporaryDirectory(prefix="ptx-report-") as tmp:
        ptx_path, cubin_path = Path(tmp) / "kernel.ptx", Path(tmp) / "kernel.cubin"
        ptx_path.write_text(ptx)
        result = subprocess.run(
            [str(ptxas), "-v", f"--gpu-name={target.group(1)}", str(ptx_path), "-o", str(cubin_path)],
            capture_output=True, text=True, check=False,
        )
    if result.returncode != 0:
        raise RuntimeError(f"ptxas failed ({result.returncode}):\n{result.stderr}")
    return result.stdout + result.stderr


def _attrs_for(signature: Mapping[str, str], aligned: Iterable[str]) -> dict:
    names = list(signature)
    attrs = {}
    for name in aligned:
        if name not in signature:
            raise ValueError(f"aligned argument {name!r} is not in the signature {names}")
        attrs[(names.index(name),)] = [["tt.divisibility", 16]]
    return attrs


@contextlib.contextmanager
def _triton_ptxas_log() -> Iterator[io.StringIO]:
    """The ``ptxas -v`` log of the cubin Triton builds inside the block.

    Triton runs ``ptxas -v`` itself and prints the log when ``knobs.nvidia.dump_ptxas_log``
    is set: reading it there spares a second ``ptxas`` run per kernel (a sixth of the compile
    time of a large kernel), and the counts are those of the very cubin Triton returns.
    """
    from triton import knobs  # noqa: PLC0415 - triton only when compiling

    captured = io.StringIO()
    with knobs.nvidia.scope(), contextlib.redirect_stdout(captured):
        knobs.nvidia.dump_ptxas_log = True
        yield captured


#: The ``ptxas -v`` log kept in Triton's cache entry of a kernel, beside its cubin.
PTXAS_LOG_FILE = "fusion-ptxas-v.log"


def _kept_ptxas_log(compiled) -> str:
    """The log :func:`_keep_ptxas_log` left in ``compiled``'s cache entry ("" if none): a
    warm compile then needs no ``ptxas`` run (three quarters of its time)."""
    from triton.runtime.cache import get_cache_manager  # noqa: PLC0415 - triton only here

    path = get_cache_manager(compiled.hash).get_file(PTXAS_LOG_FILE)
    return Path(path).read_text() if path else ""


def _keep_ptxas_log(compiled, log: str) -> None:
    """Keep ``log`` in Triton's cache entry of ``compiled`` (the entry is keyed by the
    source, options, target and Triton version, so the log is that cubin's)."""
    from triton.runtime.cache import get_cache_manager  # noqa: PLC0415

    manager = get_cache_manager(compiled.hash)
    if not manager.get_file(PTXAS_LOG_FILE):
        manager.put(log, PTXAS_LOG_FILE, binary=False)


def _triton_make_cubin_log(ptx: str, arch: int, options: Mapping[str, object]) -> str:
    """The ``ptxas -v`` log of Triton's own ``make_cubin`` on ``ptx``: the flags of the
    installed Triton (``--fmad=false``, ``-lineinfo``, and on Triton 3.9
    ``--regAllocOptLevel=2``, under which a cross-entropy kernel spills 8 bytes where a
    plain ``ptxas -v`` spills none), so a cached cubin is judged as a fresh one is."""
    from triton.backends.compiler import GPUTarget  # noqa: PLC0415 - triton only when compiling
    from triton.compiler.compiler import make_backend  # noqa: PLC0415

    backend = make_backend(GPUTarget("cuda", arch, 32))
    with _triton_ptxas_log() as log:
        backend.make_cubin(ptx, {}, backend.parse_options(dict(options)), arch)
    return log.getvalue()


def compile_for_target(kernel_fn, signature: Mapping[str, str], constexprs: Mapping[str, object] | None = None,
                       *, aligned: Iterable[str] = (), arch: int = 90, num_warps: int = 4,
                       num_stages: int = 3) -> CompiledReport:
    """Compile ``kernel_fn`` for ``sm_<arch>`` and measure it.

    ``signature`` maps every parameter (in order) to a Triton type string (``"*fp32"``,
    ``"i32"``, ``"constexpr"``); ``constexprs`` gives the constexpr values; ``aligned`` names
    the pointer (or integer) parameters promised divisible by 16 bytes.  FP contraction is off
    (see ``numerics_policy``).
    """
    import triton  # noqa: PLC0415 - triton only when compiling
    from triton.backends.compiler import GPUTarget  # noqa: PLC0415
    from triton.compiler import ASTSource  # noqa: PLC0415
    from triton.runtime.jit import JITFunction  # noqa: PLC0415

    if not isinstance(kernel_fn, JITFunction):
        raise TypeError(
            f"{getattr(kernel_fn, '__name__', kernel_fn)!r} is not a triton.jit JITFunction "
            "(decorated under TRITON_INTERPRET=1?); compile it in a process without the interpreter")
    if arch not in (80, 86, 89, 90):
        raise ValueError(f"unsupported arch {arch}; expected one of 80, 86, 89, 90")
    source = ASTSource(fn=kernel_fn, signature=dict(signature), constexprs=dict(constexprs or {}),
                       attrs=_attrs_for(signature, aligned))
    options = {"num_warps": num_warps, "num_stages": num_stages, "enable_fp_fusion": False}
    with _triton_ptxas_log() as triton_log:
        compiled = triton.compile(source, target=GPUTarget("cuda", arch, 32), options=options)
    ptx = compiled.asm["ptx"]
    name = compiled.metadata.name
    log = triton_log.getvalue()
    entry = f"entry function '{name}'"
    if entry not in log:
        # Triton's cache had the cubin (ptxas did not run): the log kept beside it, or the
        # cubin built again as Triton did.
        log = _kept_ptxas_log(compiled) or _triton_make_cubin_log(ptx, arch, options)
    if entry not in log:  # this Triton logs elsewhere
        log = run_ptxas(ptx, arch)
    _keep_ptxas_log(compiled, log)
    resources = parse_ptxas_log(log, name)
    return CompiledReport(
        name=name, arch=arch, num_warps=num_warps, num_stages=num_stages, ptx=ptx,
        cubin=bytes(compiled.asm["cubin"]), registers=resources.registers,
        spill_store_bytes=resources.spill_store_bytes, spill_load_bytes=resources.spill_load_bytes,
        shared_bytes=max(resources.shared_bytes, int(compiled.metadata.shared)),
        vectorized_global_accesses=count_vector_accesses(ptx), ptxas_log=log,
    )
