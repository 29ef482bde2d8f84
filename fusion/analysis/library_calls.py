"""Library calls: the ops XLA itself hands to a library (FFT, LAPACK/cuSOLVER, top-k).

An instruction is a library call when it is one of the HLO ops ``cholesky``, ``fft``,
``topk``, ``triangular-solve``, or a ``custom-call`` whose target is in :data:`TARGETS`: the
linear-algebra targets JAX emits on the CPU (``lapack_spotrf_ffi``, ...), on NVIDIA and AMD
GPUs (``cusolver_potrf_ffi``, ``cu_lu_pivots_to_permutation``, ``cusparse_gtsv2_ffi``, ...), XLA's own
``ProductOfElementaryHouseholderReflectors`` and the ``TopK`` custom-call of XLA:CPU.  This
module decodes what such an instruction computes (:func:`library_call`: the routine and its
options from the target name, the attributes and the MLIR-dictionary ``backend_config``) and
nothing else: the shape rules (``shape_rules_library``), the NumPy reference
(``evaluator/library_ops``) and the torch host rules (``triton_backend/host/library_calls``)
all read the same :class:`LibraryCall`.

>>> TARGETS["lapack_spotrf_ffi"], TARGETS["cusolver_gesvdj_ffi"]
('cholesky', 'svd')
>>> mlir_dictionary("{diag = 85 : ui8, side = 76 : ui8, lower = true}")
{'diag': 85, 'side': 76, 'lower': True}
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from fusion.errors import UnsupportedOpError
from fusion.ir.hlo_module import HloInstruction
from fusion.opcodes import traits
from fusion.text.parser import parse_shape
from fusion.ir.shape import ArrayShape, Shape, TupleShape, flatten_shape

#: LAPACK's type letters and the element type of the matrix they factor.
LAPACK_TYPES = {"s": "f32", "d": "f64", "c": "c64", "z": "c128"}

# routine (LAPACK spelling, without the type letter) -> what it computes, per type letters.
_LAPACK = {
    "gesdd": ("svd", "sdcz"), "gesvd": ("svd", "sdcz"), "geqrf": ("qr", "sdcz"),
    "getrf": ("lu", "sdcz"), "heevd": ("eigh", "cz"), "orgqr": ("householder_product", "sd"),
    "potrf": ("cholesky", "sdcz"), "syevd": ("eigh", "sd"), "trsm": ("triangular_solve", "sdcz"),
    "ungqr": ("householder_product", "cz"), "gtsv": ("tridiagonal_solve", "sdcz"),
    "geev": ("eig", "sdcz"), "gees": ("schur", "sdcz"), "gehrd": ("hessenberg", "sdcz"),
    "hetrd": ("tridiagonal", "cz"), "sytrd": ("tridiagonal", "sd"),
}
_GPU_SOLVER = {
    "gesdd": "svd", "gesvd": "svd", "gesvdj": "svd", "geqrf": "qr", "getrf": "lu",
    "orgqr": "householder_product", "potrf": "cholesky", "syevd": "eigh",
    "sytrd": "tridiagonal",
}


def _targets() -> dict[str, str]:
    table = {"ProductOfElementaryHouseholderReflectors": "householder_product", "TopK": "topk"}
    for routine, (what, letters) in _LAPACK.items():
        table.update({f"lapack_{p}{routine}_ffi": what for p in letters})
    for prefix in ("cu", "hip"):
        table.update({f"{prefix}solver_{routine}_ffi": what for routine, what in _GPU_SOLVER.items()})
        table[f"{prefix}_lu_pivots_to_permutation"] = "lu_pivots_to_permutation"
        table[f"{prefix}sparse_gtsv2_ffi"] = "tridiagonal_solve"
    # JAX's eig on an NVIDIA GPU: MAGMA or LAPACK on the host ("hybrid"), geev's outputs.
    table.update({"cuhybrid_eig_comp": "eig", "cuhybrid_eig_real": "eig"})
    return dict(sorted(table.items()))


#: custom-call target -> the routine it computes (alphabetical).
TARGETS: dict[str, str] = _targets()

#: The custom-call targets through which JAX calls back into Python (``jax.debug.print``,
#: ``jax.pure_callback``, ``io_callback``): the function lives in the process that lowered the
#: module, and the HLO text holds only its index.
PYTHON_CALLBACK_TARGETS = frozenset({
    "xla_ffi_python_cpu_callback", "xla_ffi_python_gpu_callback",
    "xla_python_cpu_callback", "xla_python_gpu_callback",
})


def opaque_target_reason(target: object) -> str:
    """Why a custom call to ``target`` (not in :data:`TARGETS`) cannot run here.

    >>> opaque_target_reason("xla_ffi_python_cpu_callback").split(":")[0]
    'custom-call target xla_ffi_python_cpu_callback is a Python callback (jax.debug.print, jax.pure_callback, io_callback)'
    """
    if target in PYTHON_CALLBACK_TARGETS:
        return (f"custom-call target {target} is a Python callback (jax.debug.print, "
                "jax.pure_callback, io_callback): the function it calls lives in the JAX "
                "process that lowered the module, not in the HLO text; lower the program "
                "without it")
    return (f"custom-call target {target} is not a library call the Triton path runs (an "
            "opaque target has no Triton lowering)")


@dataclass(frozen=True)
class LibraryCall:
    """What one library call computes.

    ``routine``: ``cholesky``, ``eig``, ``eigh``, ``fft``, ``hessenberg``,
    ``householder_product``, ``lu``, ``lu_pivots_to_permutation``, ``qr``, ``schur``, ``svd``,
    ``topk``, ``triangular_solve``, ``tridiagonal`` or ``tridiagonal_solve``.
    ``target``: the custom-call target, or the opcode of an HLO op.  ``lapack_type``: the
    element type a LAPACK target's type letter names (``None`` elsewhere).
    ``info``: the result is a tuple whose last element is LAPACK's per-matrix ``info``.
    ``lower``: which triangle is read (Cholesky, eigh, triangular solve).  ``left_side``,
    ``transpose_a`` (``N``, ``T`` or ``C``), ``unit_diagonal``: the triangular solve.
    ``compute_uv``, ``full_matrices``: the SVD; ``svd_v``: its fourth output holds V, not V^H
    (cuSOLVER's Jacobi SVD); ``svd_swapped``: its third output holds V^H and the fourth U
    (cuSOLVER's gesvd on a wide matrix).  ``compute_v``: eigh computes eigenvectors, schur
    its Schur vectors; ``left_vectors``, ``right_vectors``: eig computes those.  ``low``,
    ``high``: the rows and columns a Hessenberg reduction reduces (LAPACK's 1-based ilo, ihi;
    ``high`` 0: the last).
    ``largest``: top-k order.  ``fft_type`` and ``fft_length``: the FFT.
    """

    routine: str
    target: str
    lapack_type: str | None = None
    info: bool = False
    lower: bool = True
    left_side: bool = True
    transpose_a: str = "N"
    unit_diagonal: bool = False
    compute_uv: bool = True
    full_matrices: bool = True
    svd_v: bool = False
    svd_swapped: bool = False
    compute_v: bool = True
    left_vectors: bool = False
    right_vectors: bool = True
    low: int = 1
    high: int = 0
    largest: bool = True
    fft_type: str = ""
    fft_length: tuple[int, ...] = ()


def is_library_call(instr: HloInstruction) -> bool:
    """True for the HLO library ops (the ``library_call`` trait) and a custom-call to a
    target of :data:`TARGETS`.

    >>> from fusion.ir.shape import ArrayShape
    >>> cc = HloInstruction("c", "custom-call", ArrayShape("f32", (2,)), ("x",),
    ...                     (("custom_call_target", "lapack_strsm_ffi"),))
    >>> is_library_call(cc), is_library_call(HloInstruction("a", "add", cc.shape, ("x", "x")))
    (True, False)
    """
    if traits(instr.opcode).library_call:
        return True
    return instr.opcode == "custom-call" and instr.attr("custom_call_target", None) in TARGETS


_ENTRY = re.compile(r'\s*([A-Za-z_][\w.]*)\s*=\s*(true|false|-?\d+|"[^"]*")(?:\s*:\s*\w+)?\s*'
                    r'(?:,|$)')


def mlir_dictionary(text: str) -> dict[str, bool | int | str]:
    """The entries of a ``backend_config`` written as an MLIR dictionary of scalars
    (``{uplo = 76 : ui8, lower = true, magma = "auto"}``, what JAX's FFI calls carry); ``{}``
    or an empty text is empty.  Any other form (JSON, protobuf text) gives ``ValueError``."""
    body = text.strip()
    if body.startswith('"') and body.endswith('"'):
        body = body[1:-1].strip()
    if not body:
        return {}
    if not (body.startswith("{") and body.endswith("}")):
        raise ValueError(f"backend_config {text!r} is not an MLIR dictionary")
    body, out, pos = body[1:-1].strip(), {}, 0
    while pos < len(body):
        match = _ENTRY.match(body, pos)
        if match is None:
            raise ValueError(f"cannot read backend_config entry at {body[pos:]!r}")
        key, value = match.group(1), match.group(2)
        out[key] = (value == "true" if value in ("true", "false") else
                    value[1:-1] if value.startswith('"') else int(value))
        pos = match.end()
    return out


def _unsupported(instr: HloInstruction, message: str) -> UnsupportedOpError:
    loc = instr.location
    return UnsupportedOpError(message, line=loc.line if loc else None,
                              column=loc.column if loc else None, where=instr.name)


def _letter(config: dict, key: str, allowed: str, default: str, instr: HloInstruction) -> str:
    """A LAPACK character option (``uplo = 76`` is ``'L'``)."""
    value = config.get(key, ord(default))
    letter = chr(value) if isinstance(value, int) and 0 < value < 128 else "?"
    if letter not in allowed:
        raise _unsupported(instr, f"backend_config {key}={value!r} of {instr.attr('custom_call_target')} "
                           f"is not one of {', '.join(repr(c) for c in allowed)} (as ASCII codes)")
    return letter


def library_call(instr: HloInstruction) -> LibraryCall:
    """Decode ``instr`` (a library call, :func:`is_library_call`) into a :class:`LibraryCall`;
    an unknown target or an option out of range is an ``UnsupportedOpError`` located at it.

    >>> from fusion.ir.attributes import RawText
    >>> from fusion.ir.shape import ArrayShape
    >>> cc = HloInstruction("c", "custom-call", ArrayShape("f32", (2, 2)), ("a", "b"),
    ...     (("custom_call_target", "lapack_strsm_ffi"),
    ...      ("backend_config", RawText("{diag = 85 : ui8, side = 82 : ui8, trans_x = 84 : ui8, uplo = 85 : ui8}"))))
    >>> c = library_call(cc)
    >>> c.routine, c.lower, c.left_side, c.transpose_a, c.unit_diagonal, c.lapack_type
    ('triangular_solve', False, False, 'T', True, 'f32')
    """
    decode = HLO_LIBRARY_OPS.get(instr.opcode)
    if decode is not None:
        return decode(instr)
    target = instr.attr("custom_call_target", None) if instr.opcode == "custom-call" else None
    routine = TARGETS.get(target) if isinstance(target, str) else None
    if routine is None:
        raise _unsupported(instr, f"custom-call target {target} is not a known library call")
    try:
        config = mlir_dictionary(str(instr.attr("backend_config", "")))
    except ValueError as err:
        raise _unsupported(instr, f"custom-call {target}: {err}") from None
    lapack_type = LAPACK_TYPES[target[len("lapack_")]] if target.startswith("lapack_") else None
    base = dict(routine=routine, target=target, lapack_type=lapack_type)
    if routine == "topk":
        return LibraryCall(**base)
    if routine in ("householder_product", "lu_pivots_to_permutation", "qr"):
        return LibraryCall(**base)
    if routine == "lu":
        return LibraryCall(**base, info=True)
    if routine == "tridiagonal_solve":  # LAPACK's gtsv returns info, cuSPARSE's gtsv2 not
        return LibraryCall(**base, info=lapack_type is not None)
    if routine in ("cholesky", "tridiagonal"):
        lower = (_letter(config, "uplo", "LU", "L", instr) == "L" if lapack_type
                 else bool(config.get("lower", True)))
        return LibraryCall(**base, info=True, lower=lower)
    if routine in ("eig", "eigh", "hessenberg", "schur"):
        return _eigen_call(instr, base, config)
    if routine == "svd":
        if lapack_type:
            mode = _letter(config, "mode", "ASON", "A", instr)
            if mode == "O":
                raise _unsupported(instr, f"{target} with mode 'O' (U overwriting the operand)")
            return LibraryCall(**base, info=True, compute_uv=mode != "N",
                               full_matrices=mode == "A")
        return LibraryCall(**base, info=True, compute_uv=bool(config.get("compute_uv", True)),
                           full_matrices=bool(config.get("full_matrices", True)),
                           svd_v=target.endswith(("gesvdj_ffi", "gesvdp_ffi")),
                           svd_swapped=bool(config.get("transposed", False)))
    assert routine == "triangular_solve", routine
    return LibraryCall(**base, left_side=_letter(config, "side", "LR", "L", instr) == "L",
                       lower=_letter(config, "uplo", "LU", "L", instr) == "L",
                       transpose_a=_letter(config, "trans_x", "NTC", "N", instr),
                       unit_diagonal=_letter(config, "diag", "NU", "N", instr) == "U")


def _eigen_call(instr: HloInstruction, base: dict, config: dict) -> LibraryCall:
    """An eigen-decomposition's options (eig, eigh, schur) or a Hessenberg reduction's."""
    routine, target, lapack_type = base["routine"], base["target"], base["lapack_type"]
    if routine == "schur":
        if _letter(config, "sort", "NS", "N", instr) == "S":
            raise _unsupported(instr, f"{target} with sort 'S' (its select function is a "
                               "callback the HLO does not carry)")
        return LibraryCall(**base, info=True,
                           compute_v=_letter(config, "mode", "NV", "V", instr) == "V")
    if routine == "hessenberg":
        return LibraryCall(**base, info=True, low=int(config.get("low", 1)),
                           high=int(config.get("high", 0)))
    if routine == "eigh":
        if lapack_type:
            lower = _letter(config, "uplo", "LU", "L", instr) == "L"
            compute_v = _letter(config, "mode", "NV", "V", instr) == "V"
        else:
            lower, compute_v = bool(config.get("lower", True)), True
        return LibraryCall(**base, info=True, lower=lower, compute_v=compute_v)
    if lapack_type:
        left = _letter(config, "compute_left", "NV", "N", instr) == "V"
        right = _letter(config, "compute_right", "NV", "V", instr) == "V"
    else:
        left, right = bool(config.get("left", False)), bool(config.get("right", True))
    return LibraryCall(**base, info=True, left_vectors=left, right_vectors=right)


def _fft(instr: HloInstruction) -> LibraryCall:
    return LibraryCall("fft", instr.opcode, fft_type=str(instr.attr("fft_type", "FFT")),
                       fft_length=tuple(instr.attr("fft_length", ())))


def _topk(instr: HloInstruction) -> LibraryCall:
    return LibraryCall("topk", instr.opcode, largest=bool(instr.attr("largest", True)))


def _cholesky(instr: HloInstruction) -> LibraryCall:
    return LibraryCall("cholesky", instr.opcode, lower=bool(instr.attr("lower", False)))


def _triangular_solve(instr: HloInstruction) -> LibraryCall:
    transpose = {"NO_TRANSPOSE": "N", "TRANSPOSE": "T", "ADJOINT": "C"}.get(
        str(instr.attr("transpose_a", "NO_TRANSPOSE")))
    if transpose is None:
        raise _unsupported(instr, f"triangular-solve with transpose_a={instr.attr('transpose_a')}; "
                           "expected NO_TRANSPOSE, TRANSPOSE or ADJOINT")
    return LibraryCall("triangular_solve", instr.opcode,
                       left_side=bool(instr.attr("left_side", False)),
                       lower=bool(instr.attr("lower", False)), transpose_a=transpose,
                       unit_diagonal=bool(instr.attr("unit_diagonal", False)))


#: The HLO ops with the ``library_call`` trait -> the decoder of their attributes.
HLO_LIBRARY_OPS: dict[str, Callable[[HloInstruction], LibraryCall]] = {
    "cholesky": _cholesky,
    "fft": _fft,
    "topk": _topk,
    "triangular-solve": _triangular_solve,
}


def jacobi_svd_is_thin(declared: tuple[Shape, ...], m: int, n: int) -> bool:
    """cuSOLVER's Jacobi SVD returns U and V whole, or thin (``[m, k]``, ``[n, k]``) when JAX
    asks for "econ" results: which one, from the declared result ``(a, s, u, v, info)``."""
    u, v = declared[2], declared[3]
    return (isinstance(u, ArrayShape) and u.dims[-1:] != (m,)) or \
        (isinstance(v, ArrayShape) and v.dims[-1:] != (n,))


#: routine -> (matrix operands, matrix result leaves) LAPACK/cuSOLVER read and write column-major.
_MATRICES = {
    "cholesky": ((0,), (0,)), "eig": ((0,), (2, 3)), "eigh": ((0,), (0,)),
    "hessenberg": ((0,), (0,)), "householder_product": ((0,), (0,)), "schur": ((0,), (0, 1)),
    "tridiagonal": ((0,), (0,)),
    "lu": ((0,), (0,)), "qr": ((0,), (0,)), "svd": ((0,), (0, 2, 3)),
    "triangular_solve": ((0, 1), (0,)), "tridiagonal_solve": ((3,), (3,)),
}


def _column_major(shape: ArrayShape) -> bool:
    order = shape.effective_layout.minor_to_major
    return shape.rank < 2 or tuple(order[:2]) == (shape.rank - 2, shape.rank - 1)


def _constraints(instr: HloInstruction) -> tuple[Shape, ...] | None:
    text = str(instr.attr("operand_layout_constraints", "")).strip()
    if not (text.startswith("{") and text.endswith("}")):
        return None
    shape = parse_shape("(" + text[1:-1] + ")")
    return shape.elements if isinstance(shape, TupleShape) else (shape,)


def layout_problem(call: LibraryCall, instr: HloInstruction,
                   operand_shapes: tuple[Shape, ...]) -> str | None:
    """Why LAPACK/cuSOLVER would not see ``instr``'s logical matrices, or None.

    Those routines read and write column-major buffers, so a custom-call computes the routine
    on its logical matrices only when the operands' layouts (``operand_layout_constraints``,
    else the operands' own) and the results' layouts put the row dim minor, as JAX emits them
    (``f32[4,4]{0,1}``); an unlaid-out shape is row-major, as XLA lays it out.
    """
    if call.lapack_type is None and not call.target.startswith(
            ("cusolver_", "hipsolver_", "cusparse_", "hipsparse_", "cuhybrid_")):
        return None
    if call.svd_swapped:
        return f"{call.target} with transposed=true (a row-major SVD) is not run"
    if call.routine not in _MATRICES:
        return None
    operands_at, results_at = _MATRICES[call.routine]
    if call.routine == "tridiagonal_solve" and not call.info:
        results_at = (0,)  # cuSPARSE's gtsv2 returns the solution alone
    leaves = flatten_shape(instr.shape)
    if call.routine == "eig" and len(leaves) == 4:
        results_at = (1, 2)  # a complex matrix's eigenvalues are one output, not two
    laid_out = _constraints(instr) or operand_shapes
    for what, shapes, positions in (("operand", laid_out, operands_at), ("result", leaves, results_at)):
        for k in positions:
            shape = shapes[k] if k < len(shapes) else None
            if isinstance(shape, ArrayShape) and not _column_major(shape):
                return (f"{call.target} reads and writes column-major matrices, but its {what} "
                        f"{k} is laid out {shape}: the routine would see the transpose")
    return None


__all__ = ["HLO_LIBRARY_OPS", "LAPACK_TYPES", "LibraryCall", "PYTHON_CALLBACK_TARGETS", "TARGETS",
           "is_library_call", "opaque_target_reason",
           "jacobi_svd_is_thin", "layout_problem", "library_call", "mlir_dictionary"]
