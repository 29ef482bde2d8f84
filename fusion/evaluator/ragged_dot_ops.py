"""``ragged-dot`` (``fusion.analysis.ragged_dot``): the dense dot of the operands expanded
along a leading group dim, each element kept in its group and zero elsewhere (JAX's
``_ragged_dot_general_impl``), computed by the evaluator's dot rule.

>>> from fusion.text.parser import parse_hlo
>>> from fusion.evaluator import evaluate
>>> m = parse_hlo('''HloModule m
... ENTRY e {
...   a = f32[4,1] parameter(0)
...   b = f32[2,1,1] parameter(1)
...   g = s32[2] parameter(2)
...   ROOT r = f32[4,1] ragged-dot(a, b, g), lhs_contracting_dims={1}, rhs_contracting_dims={1}, lhs_ragged_dims={0}, rhs_group_dims={0}
... }''')
>>> rows = np.float32([[1], [2], [3], [4]])
>>> evaluate(m, rows, np.float32([[[10]], [[100]]]), np.int32([1, 2]))[0].ravel().tolist()
[10.0, 200.0, 300.0, 0.0]
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from fusion.analysis.ragged_dot import dense_dot_attributes, ragged_dot
from fusion.evaluator.dot_ops import eval_dot


def in_groups(x: np.ndarray, dim: int, sizes: np.ndarray, size_dims: tuple[int, ...] = ()
              ) -> np.ndarray:
    """``[g] + x.shape``: element ``[j, ...]`` is ``x``'s where its index along ``dim`` lies in
    group ``j`` (the ``sizes[..., j]`` indices after the groups before it), else zero.
    ``sizes`` is ``[g]``, or ``[s..., g]`` with one list per index of ``x``'s ``size_dims``."""
    sizes = np.maximum(sizes.astype(np.int64), 0)  # a negative size counts as 0
    ends = np.cumsum(sizes, axis=-1)
    starts = ends - sizes
    order = sorted(range(len(size_dims)), key=lambda k: size_dims[k])
    shape = [sizes.shape[-1]] + [1] * x.ndim
    for k in order:
        shape[size_dims[k] + 1] = x.shape[size_dims[k]]
    bound = lambda b: np.moveaxis(b, -1, 0).transpose([0] + [1 + k for k in order]) \
        .reshape(shape)  # noqa: E731
    index_shape = [1] * (x.ndim + 1)
    index_shape[dim + 1] = x.shape[dim]
    index = np.arange(x.shape[dim]).reshape(index_shape)
    keep = (bound(starts) <= index) & (index < bound(ends))
    return np.where(keep, x[None], np.zeros((), x.dtype))


def eval_ragged_dot(ev: Any, instr: Any, args: list) -> np.ndarray:
    lhs, rhs, sizes = args
    r = ragged_dot(instr, *ev.operand_shapes(instr))
    if r.mode != "batch":
        lhs = in_groups(lhs, r.ragged_dim, sizes, r.size_dims)
    if r.expands_rhs:
        rhs = in_groups(rhs, r.rhs_ragged_dim, sizes, r.rhs_size_dims)
    dense = instr.replace(opcode="dot", operands=instr.operands[:2],
                          attributes=dense_dot_attributes(instr, r))
    return eval_dot(ev, dense, [lhs, rhs])


RAGGED_DOT_RULES: dict[str, Callable[..., Any]] = {"ragged-dot": eval_ragged_dot}

__all__ = ["RAGGED_DOT_RULES", "eval_ragged_dot", "in_groups"]
