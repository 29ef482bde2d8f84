"""XLA itself, on the CPU, as the test oracle: run an HLO module's TEXT on NumPy arrays.

No jax tracing is involved; the path through jaxlib 0.10.2 is::

    module = jaxlib._hlo.hlo_module_from_text(text)                 # XLA's own HLO parser
    mlir   = jaxlib._jax.mlir.hlo_to_stablehlo(
                 module.as_serialized_hlo_module_proto())           # StableHLO bytecode
    cpu    = jax.extend.backend.get_backend("cpu")
    exe    = cpu.compile_and_load(mlir, jaxlib._jax.DeviceList((device,)),
                 jax.extend.backend.get_compile_options(num_replicas=1, num_partitions=1))
    outs   = exe.execute([jax.device_put(a, device) for a in arrays])   # under jax.enable_x64

``execute`` returns the ENTRY result flattened depth first (one ``jax.Array`` per leaf), the
same convention as ``compile_hlo`` and ``fusion.evaluator.npz_io``.  bf16 and the f8 types travel as
``ml_dtypes`` arrays.  The 64-bit types need ``jax.enable_x64`` around ``device_put`` (otherwise
jax silently narrows s64/f64 to 32 bits); it is a context manager, so no global state changes.

Optimized HLO (``NAME.after.hlo``: XLA's output, with fusions and layout-dependent ``bitcast``
ops) cannot be fed back to XLA as is: StableHLO keeps ``mhlo.fusion`` regions and
``mhlo.bitcast``, but drops layouts, and XLA's CPU emitters then CHECK-fail (aborting the whole
process) on layout-less fusions, or layout assignment rejects the bitcasts.  Before parsing,
:func:`xla_executable_text` therefore rewrites the text, line by line, into the equivalent
unoptimized form XLA accepts: every ``fusion(...), kind=K, calls=C`` becomes
``call(...), to_apply=C`` (XLA inlines calls, so the fused computation's semantics are kept
exactly), and every ``bitcast`` becomes a ``reshape`` (same element type; only when both
layouts store the non-unit dims in descending order, where a bitcast *is* a row-major
reshape) or a
``bitcast-convert`` (same dimensions, another element type of the same width).  A bitcast with
any other layout raises :class:`OracleError` rather than guess.

>>> import numpy as np
>>> run_xla('''HloModule m
... ENTRY e {
...   x = f32[3] parameter(0)
...   ROOT y = f32[3] multiply(x, x)
... }''', np.float32([1, 2, -3]))[0].tolist()
[1.0, 4.0, 9.0]
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

import numpy as np


class OracleError(Exception):
    """XLA could not be made to run the given HLO text (the text is named in the message)."""


# `  [ROOT ]%name = TYPE opcode(operands), attrs`; TYPE is an array shape here (bitcast/fusion
# lines we rewrite); tuple-shaped fusions are matched by the looser _FUSION pattern.
_INSTR = re.compile(
    r"^(?P<lead>\s*(?:ROOT\s+)?)%?(?P<name>[\w.\-]+)\s*=\s*(?P<type>[a-z]\w*)\[(?P<dims>[^\]]*)\]"
    r"(?:\{(?P<layout>[^}]*)\})?\s+(?P<op>[\w\-]+)\((?P<args>[^)]*)\)(?P<rest>.*)$")
_FUSION = re.compile(r"\bfusion\(")
_KIND = re.compile(r",\s*kind=k\w+")
_CALLS = re.compile(r"\bcalls=")


def _descending(layout: str | None, dims: list[int]) -> bool:
    """Whether the layout stores the dims row-major; unit dims may sit anywhere (a bitcast to
    ``f32[6,1,1]{0,2,1}`` moves no element, so it is a plain reshape)."""
    if layout is None or len(dims) <= 1:
        return True
    minor_to_major = [int(d) for d in layout.split(":")[0].split(",") if d.strip()]
    order = [d for d in minor_to_major if dims[d] != 1]
    return order == sorted(order, reverse=True)


def _dims(text: str) -> list[int]:
    return [int(d) for d in text.replace("<=", "").split(",") if d.strip()]


def xla_executable_text(text: str) -> str:
    """``text`` with fusions turned into calls and bitcasts into reshape/bitcast-convert.

    >>> print(xla_executable_text('''  %b = s32[3,1]{1,0} bitcast(%a)
    ...   ROOT %f = f32[2]{0} fusion(%x), kind=kLoop, calls=%fc'''))
    Traceback (most recent call last):
    ...
    tests.conformance.xla_oracle.OracleError: bitcast %b: operand %a is not defined before it
    >>> print(xla_executable_text('''  %a = s32[3]{0} parameter(0)
    ...   %b = s32[3,1]{1,0} bitcast(%a)
    ...   ROOT %f = f32[2]{0} fusion(%x), kind=kLoop, calls=%fc'''))
      %a = s32[3]{0} parameter(0)
      %b = s32[3,1]{1,0} reshape(%a)
      ROOT %f = f32[2]{0} call(%x), to_apply=%fc
    """
    types: dict[str, tuple[str, list[int], str | None]] = {}  # HLO names are module-unique
    out = []
    for line in text.splitlines():
        match = _INSTR.match(line)
        if match:
            types[match["name"]] = (match["type"], _dims(match["dims"]), match["layout"])
        if match and match["op"] == "bitcast":
            line = _rewrite_bitcast(match, types)
        elif _FUSION.search(line) and "calls=" in line:
            line = _CALLS.sub("to_apply=", _KIND.sub("", _FUSION.sub("call(", line, count=1)))
        out.append(line)
    return "\n".join(out)


def _rewrite_bitcast(match: re.Match, types: dict) -> str:
    name, operand = match["name"], match["args"].strip().lstrip("%")
    if operand not in types:
        raise OracleError(f"bitcast %{name}: operand %{operand} is not defined before it")
    src_type, src_dims, src_layout = types[operand]
    dst_dims = _dims(match["dims"])
    if src_type != match["type"]:
        if src_dims != dst_dims:
            raise OracleError(f"bitcast %{name} changes both element type and shape")
        op = "bitcast-convert"
    elif _descending(src_layout, src_dims) and _descending(match["layout"], dst_dims):
        op = "reshape"
    else:
        raise OracleError(f"bitcast %{name} with non-default layouts {{{src_layout}}} -> "
                          f"{{{match['layout']}}} is not a plain reshape")
    head = match.group(0)[: match.start("op")]
    return f"{head}{op}({match['args']}){match['rest']}"


@dataclass(frozen=True)
class XlaProgram:
    """An HLO module compiled by XLA for the CPU; call it with one NumPy array per parameter."""

    executable: Any
    device: Any
    parameter_dtypes: tuple[np.dtype, ...]

    def __call__(self, *arrays: np.ndarray) -> tuple[np.ndarray, ...]:
        import jax

        if len(arrays) != len(self.parameter_dtypes):
            raise OracleError(f"the module takes {len(self.parameter_dtypes)} arguments, "
                              f"got {len(arrays)}")
        with jax.enable_x64(True):
            buffers = [jax.device_put(np.asarray(a, dtype=d), self.device)
                       for a, d in zip(arrays, self.parameter_dtypes)]
            results = self.executable.execute(buffers)
        return tuple(np.asarray(r) for r in results)


@functools.lru_cache(maxsize=1)
def _cpu():
    import jax.extend.backend as jb

    backend = jb.get_backend("cpu")
    # The LAPACK custom-calls (lapack_spotrf_ffi, ...) call SciPy's LAPACK through function
    # pointers that jax loads only when it lowers a linear-algebra op itself: without this,
    # running HLO text that holds one crashes the process.
    from jaxlib import lapack

    lapack._lapack.initialize()
    return backend, backend.local_devices()[0]


@functools.lru_cache(maxsize=256)
def compile_with_xla(text: str) -> XlaProgram:
    """Compile HLO ``text`` (unoptimized or XLA-optimized) with XLA's CPU backend (memoized)."""
    import jax.extend.backend as jb
    from jaxlib import _hlo, _jax

    backend, device = _cpu()
    try:
        module = _hlo.hlo_module_from_text(xla_executable_text(text))
        proto = module.as_serialized_hlo_module_proto()
        shape = _hlo.XlaComputation(proto).program_shape()
        stablehlo = _jax.mlir.hlo_to_stablehlo(proto)
        options = jb.get_compile_options(num_replicas=1, num_partitions=1)
        executable = backend.compile_and_load(stablehlo, _jax.DeviceList((device,)), options)
    except Exception as err:  # jaxlib raises several unrelated types (XlaRuntimeError, ...)
        raise OracleError(f"XLA could not compile the module: {err}") from err
    dtypes = tuple(np.dtype(s.numpy_dtype()) for s in shape.parameter_shapes())
    return XlaProgram(executable, device, dtypes)


def run_xla(text: str, *arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """Run HLO ``text`` with XLA on the CPU; the ENTRY result flattened depth first."""
    return compile_with_xla(text)(*arrays)


__all__ = ["OracleError", "XlaProgram", "compile_with_xla", "run_xla", "xla_executable_text"]
