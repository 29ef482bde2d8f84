"""LAPACK's routines in NumPy, with LAPACK's output conventions, batched over leading dims.

What JAX's FFI calls return is LAPACK's output as is, so the reference keeps every convention
a program may read: the factor of ``potrf`` in one triangle with the other triangle untouched;
``geev``'s eigenvalues in its order; ``getrf``'s packed ``L\\U`` with 1-based row swaps
(partial pivoting on the first largest ``|x|``, ``|re|+|im|`` for complex, as ``i?amax``) and
``info`` = the first zero pivot;
``geqrf``'s packed ``R`` and Householder vectors with their ``tau``; ``orgqr``'s product of
those reflectors; ``info`` as one ``int32`` per matrix.  Each routine computes in the precision
of its operand (NumPy's single-precision LAPACK for ``float32``/``complex64``).  Eigenvector
and singular-vector signs are whatever NumPy's LAPACK gives (``geev``'s, SciPy's when it is
installed: XLA:CPU's own); tests compare those by reconstruction.

>>> a = np.array([[4.0, 9.0], [2.0, 5.0]], np.float32)
>>> lu, pivots, info = getrf(a)
>>> lu.tolist(), pivots.tolist(), int(info)
([[4.0, 9.0], [0.5, 0.5]], [1, 2], 0)
"""
from __future__ import annotations

import numpy as np


def _batched(a: np.ndarray) -> tuple[np.ndarray, tuple[int, ...]]:
    """``a`` as a stack of matrices ``[B, m, n]`` and its batch dims."""
    return a.reshape((-1,) + a.shape[-2:]), a.shape[:-2]


def _hermitian_from(a: np.ndarray, lower: bool) -> np.ndarray:
    """The Hermitian matrix whose ``lower`` (or upper) triangle is that of ``a``."""
    tri = np.tril(a) if lower else np.triu(a)
    strict = np.tril(a, -1) if lower else np.triu(a, 1)
    diag = np.real(np.diagonal(a, axis1=-2, axis2=-1)).astype(a.dtype)
    out = tri + np.conj(np.swapaxes(strict, -1, -2))
    idx = np.arange(a.shape[-1])
    out[..., idx, idx] = diag
    return out


def potrf(a: np.ndarray, lower: bool) -> tuple[np.ndarray, np.ndarray]:
    """Cholesky of each matrix's ``lower`` (or upper) triangle: (factor, info).

    The factor fills that triangle; the other keeps ``a``'s values.  A matrix that is not
    positive definite has ``info`` = the order of its first non-positive-definite leading
    minor (and its factor is ``a`` unchanged).
    """
    stack, batch = _batched(np.array(a))
    out = stack.copy()
    info = np.zeros(len(stack), np.int32)
    for b, matrix in enumerate(stack):
        h = _hermitian_from(matrix, lower)
        try:
            if not np.all(np.isfinite(h)):
                raise np.linalg.LinAlgError
            factor = np.linalg.cholesky(h)
        except np.linalg.LinAlgError:
            info[b] = _first_bad_minor(h)
            continue
        if lower:
            out[b] = np.tril(factor) + np.triu(matrix, 1)
        else:
            out[b] = np.triu(np.conj(factor.T)) + np.tril(matrix, -1)
    return out.reshape(a.shape), info.reshape(batch)


def _first_bad_minor(h: np.ndarray) -> int:
    for k in range(1, h.shape[-1] + 1):
        try:
            minor = h[:k, :k]
            if not np.all(np.isfinite(minor)):
                return k
            np.linalg.cholesky(minor)
        except np.linalg.LinAlgError:
            return k
    return h.shape[-1]


def _pivot_magnitude(column: np.ndarray) -> np.ndarray:
    if np.iscomplexobj(column):
        return np.abs(column.real) + np.abs(column.imag)
    return np.abs(column)


def getrf(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """LU with partial pivoting: (packed L\\U, 1-based pivots ``[..., min(m, n)]``, info)."""
    stack, batch = _batched(np.array(a))
    m, n = stack.shape[-2:]
    k = min(m, n)
    out = stack.copy()
    pivots = np.zeros((len(stack), k), np.int32)
    info = np.zeros(len(stack), np.int32)
    for b in range(len(stack)):
        lu = out[b]
        for j in range(k):
            magnitude = _pivot_magnitude(lu[j:, j])
            # i?amax: the first largest; a NaN never compares larger, so NaN columns pivot on j.
            p = j + (int(np.nanargmax(magnitude)) if not np.all(np.isnan(magnitude)) else 0)
            pivots[b, j] = p + 1
            if p != j:
                lu[[j, p]] = lu[[p, j]]
            pivot = lu[j, j]
            if pivot != 0:
                lu[j + 1:, j] = lu[j + 1:, j] * (np.ones((), lu.dtype) / pivot)
            elif info[b] == 0:
                info[b] = j + 1
            lu[j + 1:, j + 1:] -= np.outer(lu[j + 1:, j], lu[j, j + 1:])
    return out.reshape(a.shape), pivots.reshape(batch + (k,)), info.reshape(batch)


def geqrf(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """QR as Householder reflectors: (R above the diagonal, the vectors below it; taus)."""
    stack, batch = _batched(np.array(a))
    m, n = stack.shape[-2:]
    k = min(m, n)
    out = np.empty_like(stack)
    taus = np.zeros((len(stack), k), stack.dtype)
    for b, matrix in enumerate(stack):
        if k == 0:
            out[b] = matrix
            continue
        h, tau = np.linalg.qr(matrix, mode="raw")  # LAPACK's geqrf output, transposed
        out[b], taus[b] = h.T, tau
    return out.reshape(a.shape), taus.reshape(batch + (k,))


def orgqr(a: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """The first ``n`` columns of ``H(1) H(2) ... H(k)``, ``H(i) = I - tau_i v_i v_i^H``."""
    stack, batch = _batched(np.array(a))
    tau_stack = np.asarray(taus).reshape(len(stack), -1)
    m, n = stack.shape[-2:]
    out = np.empty_like(stack)
    for b, matrix in enumerate(stack):
        q = np.eye(m, n, dtype=stack.dtype)
        for i in reversed(range(tau_stack.shape[-1])):
            v = np.zeros(m, stack.dtype)
            v[i] = 1
            v[i + 1:] = matrix[i + 1:, i]
            q = q - tau_stack[b, i] * np.outer(v, np.conj(v) @ q)
        out[b] = q
    return out.reshape(a.shape)


def syevd(a: np.ndarray, lower: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Eigen-decomposition of each Hermitian matrix's triangle: (vectors as columns,
    ascending eigenvalues, info); a matrix LAPACK cannot decompose (non-finite) has info 1
    and NaN results."""
    stack, batch = _batched(np.array(a))
    n = stack.shape[-1]
    real = np.real(np.zeros((), stack.dtype)).dtype
    vectors = np.empty_like(stack)
    values = np.empty((len(stack), n), real)
    info = np.zeros(len(stack), np.int32)
    for b, matrix in enumerate(stack):
        try:
            if not np.all(np.isfinite(matrix)):
                raise np.linalg.LinAlgError
            values[b], vectors[b] = np.linalg.eigh(_hermitian_from(matrix, lower))
        except np.linalg.LinAlgError:
            values[b], vectors[b], info[b] = np.nan, np.nan, 1
    return vectors.reshape(a.shape), values.reshape(batch + (n,)), info.reshape(batch)


def left_vectors(right: np.ndarray) -> np.ndarray:
    """The left eigenvectors that go with the right ones (columns of ``right``): the columns
    of ``inv(right)^H``, each scaled to norm 1 with its largest component real and positive
    (``geev``'s normalization, up to LAPACK's choice of sign).

    >>> v = left_vectors(np.array([[1.0, 1.0], [0.0, 1.0]]))
    >>> np.round(v, 4).tolist()
    [[0.7071, 0.0], [-0.7071, 1.0]]
    """
    left = np.conj(np.swapaxes(np.linalg.inv(right), -1, -2))
    left = left / np.linalg.norm(left, axis=-2, keepdims=True)
    largest = np.argmax(np.abs(left), axis=-2)
    pivot = np.take_along_axis(left, largest[..., None, :], axis=-2)
    return left * (np.conj(pivot) / np.abs(pivot))


def _eig(matrix: np.ndarray, left: bool, right: bool
         ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """(eigenvalues, left vectors, right vectors) of one matrix: SciPy's LAPACK ``geev``,
    the very routine jaxlib calls for XLA:CPU (so its vectors' phases are XLA's), else
    NumPy's, whose vectors may differ from XLA's by each column's phase."""
    try:
        import scipy.linalg  # noqa: PLC0415 - optional: installed with jax
    except ImportError:
        values, vectors = np.linalg.eig(matrix)
        vectors = vectors.astype(np.result_type(vectors.dtype, np.complex64))
        return values, left_vectors(vectors) if left else None, vectors if right else None
    try:
        out = scipy.linalg.eig(matrix, left=left, right=right, check_finite=False)
    except (ValueError, scipy.linalg.LinAlgError) as err:
        raise np.linalg.LinAlgError(str(err)) from None
    if not (left or right):
        return out, None, None
    values, *vectors = out
    return values, vectors[0] if left else None, vectors[-1] if right else None


def geev(a: np.ndarray, left: bool, right: bool
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Eigen-decomposition of each general matrix: (eigenvalues in LAPACK's order, left and
    right eigenvectors as columns, complex, zeros where not asked for; info), as LAPACK's
    ``geev`` gives them (norm 1, largest component real; :func:`_eig`).  Non-finite
    matrices have info 1 and NaN results."""
    stack, batch = _batched(np.array(a))
    n = stack.shape[-1]
    complex_type = np.result_type(stack.dtype, np.complex64)  # c64 for f32, c128 for f64
    values = np.empty((len(stack), n), complex_type)
    vl = np.zeros((len(stack), n, n), complex_type)
    vr = np.zeros((len(stack), n, n), complex_type)
    info = np.zeros(len(stack), np.int32)
    for b, matrix in enumerate(stack):
        try:
            if not np.all(np.isfinite(matrix)):
                raise np.linalg.LinAlgError
            values[b], lefts, rights = _eig(matrix, left, right)
            if right:
                vr[b] = rights
            if left:
                vl[b] = lefts
        except np.linalg.LinAlgError:
            values[b], info[b] = np.nan, 1
            vl[b] = np.nan if left else 0
            vr[b] = np.nan if right else 0
    shaped = lambda x: x.reshape(batch + x.shape[1:])  # noqa: E731
    return shaped(values), shaped(vl), shaped(vr), info.reshape(batch)


def eigenvalue_outputs(values: np.ndarray, dtype: np.dtype) -> tuple[np.ndarray, ...]:
    """Complex eigenvalues as JAX's LAPACK calls (``geev``, ``gees``) return them for a
    matrix of ``dtype``: its real and imaginary parts in that type for a real matrix, the
    values themselves for a complex one.

    >>> [x.tolist() for x in eigenvalue_outputs(np.array([1 + 2j]), np.dtype(np.float32))]
    [[1.0], [2.0]]
    """
    if np.dtype(dtype).kind == "c":
        return (values.astype(dtype),)
    return values.real.astype(dtype), values.imag.astype(dtype)


def geev_outputs(a: np.ndarray, left: bool, right: bool) -> tuple[np.ndarray, ...]:
    """The outputs of JAX's ``geev`` calls: the eigenvalues (:func:`eigenvalue_outputs`),
    the left and right eigenvectors (complex) and info.

    >>> [x.dtype.name for x in geev_outputs(np.eye(2, dtype=np.float32), False, True)]
    ['float32', 'float32', 'complex64', 'complex64', 'int32']
    """
    values, vl, vr, info = geev(a, left, right)
    return (*eigenvalue_outputs(values, np.asarray(a).dtype), vl, vr, info)


def gesdd(a: np.ndarray, full_matrices: bool, compute_uv: bool
          ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None, np.ndarray]:
    """SVD ``a = U diag(s) V^H``: (s descending, U, V^H, info); U and V^H are None when not
    computed.  Non-finite matrices have info 1 and NaN results."""
    stack, batch = _batched(np.array(a))
    m, n = stack.shape[-2:]
    k = min(m, n)
    real = np.real(np.zeros((), stack.dtype)).dtype
    s = np.empty((len(stack), k), real)
    u = np.empty((len(stack), m, m if full_matrices else k), stack.dtype)
    vh = np.empty((len(stack), n if full_matrices else k, n), stack.dtype)
    info = np.zeros(len(stack), np.int32)
    for b, matrix in enumerate(stack):
        try:
            if not np.all(np.isfinite(matrix)):
                raise np.linalg.LinAlgError
            u[b], s[b], vh[b] = np.linalg.svd(matrix, full_matrices=full_matrices)
        except np.linalg.LinAlgError:
            s[b], u[b], vh[b], info[b] = np.nan, np.nan, np.nan, 1
    shaped = lambda x: x.reshape(batch + x.shape[1:])  # noqa: E731
    if not compute_uv:
        return shaped(s), None, None, info.reshape(batch)
    return shaped(s), shaped(u), shaped(vh), info.reshape(batch)


def trsm(a: np.ndarray, b: np.ndarray, *, left_side: bool, lower: bool, transpose_a: str,
         unit_diagonal: bool) -> np.ndarray:
    """Solve ``op(A) X = B`` (left side) or ``X op(A) = B`` with ``A`` the ``lower`` (or
    upper) triangle of ``a`` (unit diagonal if asked), ``op`` one of N, T, C; substitution as
    LAPACK's ``trsm`` does it: a zero on the diagonal gives inf/NaN, no error.

    >>> trsm(np.array([[2.0, 0], [1, 1]]), np.array([[2.0], [3]]), left_side=True, lower=True,
    ...      transpose_a="N", unit_diagonal=False).tolist()
    [[1.0], [2.0]]
    """
    a = np.asarray(a)
    tri = np.tril(a) if lower else np.triu(a)
    if unit_diagonal:
        idx = np.arange(a.shape[-1])
        tri = tri.copy()
        tri[..., idx, idx] = 1
    op = tri if transpose_a == "N" else np.swapaxes(tri, -1, -2)
    if transpose_a == "C":
        op = np.conj(op)
    op_lower = lower if transpose_a == "N" else not lower
    rhs = np.array(b)
    if not left_side:  # X op = B  <=>  op^T X^T = B^T
        op, rhs, op_lower = np.swapaxes(op, -1, -2), np.swapaxes(rhs, -1, -2).copy(), not op_lower
    x = np.zeros_like(rhs)
    n = op.shape[-1]
    for i in (range(n) if op_lower else reversed(range(n))):
        done = slice(0, i) if op_lower else slice(i + 1, n)
        partial = np.einsum("...j,...jr->...r", op[..., i, done], x[..., done, :])
        x[..., i, :] = (rhs[..., i, :] - partial) / op[..., i, i][..., None]
    return x if left_side else np.swapaxes(x, -1, -2)


def pivots_to_permutation(pivots: np.ndarray, size: int) -> np.ndarray:
    """The row permutation that the row swaps ``pivots`` (``[..., k]``, 0-based: JAX subtracts
    one from LAPACK's before ``cu_lu_pivots_to_permutation``) apply to ``size`` rows:
    ``perm[i]`` is the original row at position ``i``.  A swap out of range is skipped.

    >>> pivots_to_permutation(np.array([2, 2, 2], np.int32), 4).tolist()
    [2, 0, 1, 3]
    """
    pivots = np.asarray(pivots)
    stack = pivots.reshape(-1, pivots.shape[-1])
    perm = np.tile(np.arange(size, dtype=np.int32), (len(stack), 1))
    for b, row in enumerate(stack):
        for i, p in enumerate(row):
            j = int(p)
            if 0 <= j < size:
                perm[b, [i, j]] = perm[b, [j, i]]
    return perm.reshape(pivots.shape[:-1] + (size,))


__all__ = ["eigenvalue_outputs", "geev", "geev_outputs", "geqrf", "gesdd", "getrf", "orgqr", "pivots_to_permutation",
           "potrf", "syevd", "trsm"]
