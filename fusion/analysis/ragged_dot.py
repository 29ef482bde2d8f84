"""``ragged-dot``: a dot whose lhs is split into consecutive groups along one dim (XLA's
``RaggedDot``; what ``jax.lax.ragged_dot`` lowers to on GPU and TPU: the grouped matmuls of a
mixture of experts).  ``group_sizes[j]`` rows (or columns) belong to group ``j``, in order;
past their sum, to none (a negative size counts as 0: XLA asks for sizes of at least 0).
Three modes, by the kind of the lhs's ragged dim:

* a free dim (``m``): the rhs has a group dim (``rhs_group_dims``); each lhs row is multiplied
  by its group's rhs, and a row in no group gives zeros.  ``[m, k] x [g, k, n] -> [m, n]``;
* a contracting dim (``k``): the result has the group dim first; group ``j`` sums only its
  own ``k``.  ``[m, k] x [k, n] -> [g, m, n]`` (the rhs gradient of the first mode);
* a batch dim: the plain dot.

The group sizes are ``[g]``, one list for the whole dot, or one list per index of the lhs's
batch dims and of its dims of the ragged dim's kind that come before it
(``[b..., x..., g]``, XLA's ``RaggedDot`` spec): :attr:`RaggedDot.size_dims` names those
lhs dims (``()`` for ``[g]``).

The value is JAX's definition (``_ragged_dot_general_impl``), a dense dot of the operands
expanded along a new leading group dim, each element kept in its group and zero elsewhere:
:meth:`RaggedDot.dense_dot` gives that dot's dimension numbers, which the evaluator
(``evaluator/ragged_dot_ops.py``) and the expansion the compiler runs
(``transforms/ragged_dot_expansion.py``) both use.

>>> from fusion.ir.shape import ArrayShape
>>> i = HloInstruction("r", "ragged-dot", ArrayShape("f32", (12, 5)), ("a", "b", "g"),
...     (("lhs_contracting_dims", (1,)), ("rhs_contracting_dims", (1,)),
...      ("lhs_ragged_dims", (0,)), ("rhs_group_dims", (0,))))
>>> r = ragged_dot(i, ArrayShape("f32", (12, 8)), ArrayShape("f32", (3, 8, 5)),
...                ArrayShape("s32", (3,)))
>>> r.mode, r.groups, r.dense_dot()
('noncontracting', 3, ((2, 0), (1, 0), (), ()))
"""
from __future__ import annotations

from dataclasses import dataclass

from fusion.errors import HloVerifyError, UnsupportedOpError
from fusion.ir.element_types import element_type
from fusion.ir.hlo_module import HloInstruction
from fusion.ir.shape import ArrayShape

#: The attributes that make a dot ragged; the others (precision, algorithm) are the dot's.
RAGGED_ATTRIBUTES = ("lhs_ragged_dims", "rhs_group_dims")
_DOT_DIMS = ("lhs_contracting_dims", "rhs_contracting_dims", "lhs_batch_dims",
             "rhs_batch_dims")


@dataclass(frozen=True)
class RaggedDot:
    """One ragged dot's mode and dimension numbers (see the module docstring)."""

    mode: str
    ragged_dim: int
    group_dim: int | None
    groups: int
    lhs_contracting: tuple[int, ...]
    rhs_contracting: tuple[int, ...]
    lhs_batch: tuple[int, ...]
    rhs_batch: tuple[int, ...]
    size_dims: tuple[int, ...] = ()

    @property
    def rhs_size_dims(self) -> tuple[int, ...]:
        """The rhs dims matching :attr:`size_dims` (the contracting mode's rhs masks)."""
        pairs = dict(zip(self.lhs_batch + self.lhs_contracting,
                         self.rhs_batch + self.rhs_contracting))
        return tuple(pairs[d] for d in self.size_dims)

    @property
    def expands_rhs(self) -> bool:
        """Whether the rhs is expanded along the group dim too (ragged contracting dims)."""
        return self.mode == "contracting"

    @property
    def rhs_ragged_dim(self) -> int:
        """The rhs dim contracted with the lhs's ragged dim (the contracting mode)."""
        return self.rhs_contracting[self.lhs_contracting.index(self.ragged_dim)]

    def dense_dot(self) -> tuple[tuple[int, ...], ...]:
        """``(lhs_contracting, rhs_contracting, lhs_batch, rhs_batch)`` (``_DOT_DIMS``'s order)
        of the dense dot over the expanded operands (a new dim 0, the group, on each)."""
        up = lambda dims: tuple(d + 1 for d in dims)  # noqa: E731
        if self.mode == "noncontracting":
            return (up(self.lhs_contracting) + (0,), self.rhs_contracting + (self.group_dim,),
                    up(self.lhs_batch), self.rhs_batch)
        if self.mode == "contracting":
            return (up(self.lhs_contracting), up(self.rhs_contracting),
                    (0,) + up(self.lhs_batch), (0,) + up(self.rhs_batch))
        return self.lhs_contracting, self.rhs_contracting, self.lhs_batch, self.rhs_batch


#: The element types the grouped GEMM kernel multiplies (operands) and writes (result).
GROUPED_GEMM_TYPES = frozenset({"bf16", "f16", "f32"})


def grouped_gemm_problem(r: RaggedDot, lhs: ArrayShape, rhs: ArrayShape,
                         out: ArrayShape) -> str | None:
    """Why the grouped GEMM kernel (``triton_backend/templates/ragged_dot``) cannot compute
    this ragged dot, or None when it can: the two forms a mixture of experts and its gradient
    write, on row-major operands of one float type without batch dims, ``[m, k] x [g, k, n]``
    (or ``[g, n, k]``) by rows, and ``[k, m] x [k, n] -> [g, m, n]`` by contracting dim.

    >>> r = RaggedDot("noncontracting", 0, 0, 3, (1,), (2,), (), ())
    >>> f = lambda *d: ArrayShape("bf16", d)
    >>> grouped_gemm_problem(r, f(12, 8), f(3, 5, 8), f(12, 5)) is None
    True
    >>> grouped_gemm_problem(r, f(12, 8), f(3, 5, 8), ArrayShape("s32", (12, 5)))
    'the grouped GEMM kernel takes bf16, f16 or f32 operands and results, not bf16 x bf16 -> s32'
    """
    if not canonical_form(r, lhs, rhs):
        return ("the grouped GEMM kernel takes [m, k] x [g, k, n] (or [g, n, k]) by rows and "
                "[k, m] x [k, n] by contracting dim")
    types = (lhs.dtype, rhs.dtype, out.dtype)
    if lhs.dtype != rhs.dtype or not set(types) <= GROUPED_GEMM_TYPES:
        return ("the grouped GEMM kernel takes bf16, f16 or f32 operands and results, not "
                f"{lhs.dtype} x {rhs.dtype} -> {out.dtype}")
    for shape in (lhs, rhs, out):
        if shape.layout is not None and shape.effective_layout.minor_to_major != \
                tuple(range(shape.rank - 1, -1, -1)):
            return f"the grouped GEMM kernel reads row-major arrays, not {shape}"
    return None


def canonical_form(r: RaggedDot, lhs: ArrayShape, rhs: ArrayShape) -> bool:
    """Whether the ragged dot is one of the two matmul forms (any types and layouts):
    ``[m, k] x [g, k, n]`` (or ``[g, n, k]``) by rows, ``[k, m] x [k, n]`` by contracting dim,
    without batch dims.  Their gradients are ragged dots of these forms again."""
    if r.lhs_batch or lhs.rank != 2:
        return False
    if r.mode == "noncontracting":
        return rhs.rank == 3 and r.ragged_dim == 0 and r.group_dim == 0 and \
            r.lhs_contracting == (1,) and r.rhs_contracting in ((1,), (2,))
    return r.mode == "contracting" and rhs.rank == 2 and r.lhs_contracting == (0,) and \
        r.rhs_contracting == (0,)


def dense_dot_attributes(instr: HloInstruction, r: RaggedDot) -> tuple:
    """The attributes of the dense ``dot`` over the expanded operands: the ragged dot's own
    (precision, algorithm) with :meth:`RaggedDot.dense_dot`'s dimension numbers."""
    kept = tuple((k, v) for k, v in instr.attributes
                 if k not in RAGGED_ATTRIBUTES and k not in _DOT_DIMS)
    return kept + tuple(zip(_DOT_DIMS, r.dense_dot()))


def _dims(instr: HloInstruction, key: str) -> tuple[int, ...]:
    value = instr.attr(key, ())
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def ragged_dot(instr: HloInstruction, lhs: ArrayShape, rhs: ArrayShape,
               group_sizes: ArrayShape) -> RaggedDot:
    """The ragged dot ``instr`` of operands of these shapes; ``HloVerifyError`` (located) when
    its dimension numbers are not XLA's, ``UnsupportedOpError`` for group sizes per outer
    batch index of a ragged batch dim."""
    def fail(message: str, expected: str | None = None) -> HloVerifyError:
        return HloVerifyError(message, expected=expected, **instr._located())

    lc, rc, lb, rb = (_dims(instr, k) for k in _DOT_DIMS)
    ragged, group = _dims(instr, "lhs_ragged_dims"), _dims(instr, "rhs_group_dims")
    if len(ragged) != 1 or not 0 <= ragged[0] < lhs.rank:
        raise fail(f"ragged-dot needs one lhs ragged dim of the rank-{lhs.rank} lhs, got "
                   f"lhs_ragged_dims={list(ragged)}")
    if element_type(group_sizes.dtype).kind not in ("signed", "unsigned"):
        raise fail(f"ragged-dot group sizes are {group_sizes}", expected="an integer array")
    dim = ragged[0]
    mode = "contracting" if dim in lc else "batch" if dim in lb else "noncontracting"
    if mode == "noncontracting":
        if len(group) != 1 or not 0 <= group[0] < rhs.rank or group[0] in rc + rb:
            raise fail("ragged-dot with a ragged free lhs dim needs one rhs group dim that is "
                       f"neither contracting nor batch, got rhs_group_dims={list(group)}")
        groups = rhs.dims[group[0]]
    elif group:
        raise fail(f"ragged-dot with a ragged {mode} dim takes no rhs group dim, got "
                   f"rhs_group_dims={list(group)}")
    else:
        groups = group_sizes.dims[-1]
    size_dims: tuple[int, ...] = ()
    if group_sizes.rank > 1:
        if mode == "batch":
            raise UnsupportedOpError(
                f"ragged-dot over a ragged batch dim with group sizes {group_sizes} per outer "
                "batch index is not supported (one list of group sizes, rank 1, is)",
                **instr._located())
        kind = lc if mode == "contracting" else \
            tuple(d for d in range(lhs.rank) if d not in lc + lb)
        size_dims = lb + tuple(d for d in kind if d < dim)
    want = tuple(lhs.dims[d] for d in size_dims) + (groups,)
    if group_sizes.dims != want:
        raise fail(f"ragged-dot has {groups} groups, and its group sizes are {group_sizes}",
                   expected=f"{group_sizes.dtype}[{groups}]" + (
                       f" or {group_sizes.dtype}[{','.join(map(str, want))}] (batch dims, "
                       "then the lhs dims of the ragged dim's kind before it)"
                       if group_sizes.rank > 1 else ""))
    return RaggedDot(mode, dim, group[0] if group else None, groups, lc, rc, lb, rb, size_dims)


__all__ = ["GROUPED_GEMM_TYPES", "RAGGED_ATTRIBUTES", "RaggedDot", "canonical_form",
           "dense_dot_attributes", "grouped_gemm_problem", "ragged_dot"]
