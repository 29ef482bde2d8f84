"""``ragged-dot`` written as the dense dot it is (``fusion.analysis.ragged_dot``): each
expanded operand is a ``select`` of its broadcast along a new leading group dim, kept where
its index along the ragged dim lies in that group; the groups' starts are a ``[g]`` sum of
the sizes before each (an iota comparison and a reduce over a ``[g, g]`` square), so no scan.
The fusion pass may take the masks into the dot's prologue.  It computes every group's
product for every row (``g`` times the useful work, as JAX's own CPU lowering does), so the
two matmul forms the grouped GEMM template runs (``triton_backend/templates/ragged_dot``)
stay ragged dots in the module the compiler starts from; this is for the others.  A module
without ragged dots is returned as is.

>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... ENTRY e {
...   a = f32[12,8] parameter(0)
...   b = f32[3,8,5] parameter(1)
...   g = s32[3] parameter(2)
...   ROOT r = f32[12,5] ragged-dot(a, b, g), lhs_contracting_dims={1}, rhs_contracting_dims={1}, lhs_ragged_dims={0}, rhs_group_dims={0}
... }''')
>>> root = expand_ragged_dots(m).entry.root
>>> root.opcode, root.attr("lhs_contracting_dims"), root.attr("rhs_contracting_dims")
('dot', (2, 0), (1, 0))
"""
from __future__ import annotations

from fusion.analysis.ragged_dot import (
    canonical_form, dense_dot_attributes, grouped_gemm_problem, ragged_dot,
)
from fusion.ir.hlo_module import HloInstruction, HloModule
from fusion.ir.instruction_writer import InstructionWriter
from fusion.ir.shape import ArrayShape
from fusion.transforms.op_expansion import expand_ops


def expand_ragged_dots(module: HloModule, keep: str | None = None) -> HloModule:
    """``module`` with every ``ragged-dot`` written as a dense dot (module docstring), but
    those that ``keep`` names stay: ``"grouped"``, those the grouped GEMM kernel computes
    (``grouped_gemm_problem``), ``"canonical"``, those of its forms whatever their types
    (``canonical_form``: their VJP is ragged dots again)."""
    def write(ops: _Ops, instr: HloInstruction, shapes: tuple, adder) -> bool:
        lhs, rhs, sizes = shapes
        r = ragged_dot(instr, lhs, rhs, sizes)
        if (keep == "grouped" and grouped_gemm_problem(r, lhs, rhs, instr.shape) is None) or \
                (keep == "canonical" and canonical_form(r, lhs, rhs)):
            return False
        a, b, g = instr.operands
        if r.mode != "batch":
            at_least_0 = ops.add("maximum", sizes, (g, ops.splat(0, sizes)))
            starts = ops.starts(sizes, at_least_0, adder(sizes.dtype))
            bounds = (starts, ops.add("add", sizes, (starts, at_least_0)))
            a = ops.in_groups(a, lhs, r.ragged_dim, bounds, sizes, r.size_dims)
            if r.expands_rhs:
                b = ops.in_groups(b, rhs, r.rhs_ragged_dim, bounds, sizes, r.rhs_size_dims)
        ops.add("dot", instr.shape, (a, b), **dict(dense_dot_attributes(instr, r)))
        return True

    return expand_ops(module, "ragged-dot", write, "rd", writer=_Ops,
                      adder_name="ragged_dot_add")


class _Ops(InstructionWriter):
    """The instructions one ragged dot becomes: the groups' bounds and the masks."""

    def starts(self, sizes: ArrayShape, g: str, adder: str) -> str:
        """``sizes``' shape ``[s..., g]``: the sum of the sizes of the groups before each."""
        lead, groups = sizes.dims[:-1], sizes.dims[-1]
        square = ArrayShape(sizes.dtype, lead + (groups, groups))
        n = len(lead)
        spread = self.add("broadcast", square, (g,), dimensions=tuple(range(n)) + (n + 1,))
        row = self.add("iota", square, (), iota_dimension=n)
        col = self.add("iota", square, (), iota_dimension=n + 1)
        before = self.add("compare", ArrayShape("pred", square.dims), (col, row),
                          direction="LT")
        picked = self.add("select", square, (before, spread, self.splat(0, square)))
        return self.add("reduce", ArrayShape(sizes.dtype, sizes.dims),
                        (picked, self.scalar(0, sizes.dtype)), dimensions=(n + 1,),
                        to_apply=adder)

    def in_groups(self, x: str, shape: ArrayShape, dim: int, bounds: tuple[str, str],
                  sizes: ArrayShape, size_dims: tuple[int, ...]) -> str:
        """``[g] + shape``: ``x`` where its index along ``dim`` is in group ``j`` (of the
        list for its indices along ``size_dims``), else 0."""
        groups, it = sizes.dims[-1], sizes.dtype
        out = ArrayShape(shape.dtype, (groups,) + shape.dims)
        index = ArrayShape(it, out.dims)
        test = ArrayShape("pred", out.dims)
        spread = self.add("broadcast", out, (x,), dimensions=tuple(range(1, out.rank)))
        at = self.add("iota", index, (), iota_dimension=dim + 1)
        # [s..., g] as [g, s...] with the s dims in the order of the dims they index
        order = sorted(range(len(size_dims)), key=lambda k: size_dims[k])
        permutation = (len(size_dims),) + tuple(order)
        moved = ArrayShape(it, tuple(sizes.dims[p] for p in permutation))
        targets = (0,) + tuple(size_dims[k] + 1 for k in order)
        low, high = (self.add("broadcast", index, (
            b if permutation == tuple(range(len(permutation))) else
            self.add("transpose", moved, (b,), dimensions=permutation),), dimensions=targets)
            for b in bounds)
        keep = self.add("and", test, (self.add("compare", test, (low, at), direction="LE"),
                                      self.add("compare", test, (at, high), direction="LT")))
        return self.add("select", out, (keep, spread, self.splat(0, out)))


__all__ = ["expand_ragged_dots"]
