"""Long scans whose result XLA:CPU's tree of 16-wide scans changes, computed as that tree.

XLA:CPU's ``ReduceWindowRewriter`` rewrites a scan (a cumulative sum's reduce-window, see
``fusion.analysis.xla_reduction_order.scan_window``) longer than ``SCAN_BASE`` = 16 into
pad, reshape to columns of 16, a 16-wide scan of each column, an exclusive scan of the
column totals (itself rewritten while longer than 16), and ``to_apply(column_scan,
prefix)``.  The reference evaluator follows the tree for every scan longer than 16
(``fusion.evaluator.reduction_ops.xla_order_scan``); kernels fold their own way (a scan along
the tile, ``tiling.policy.tile_scans``) where the result is the same but for rounding, and
take the tree where it is not: an fp8 sum rounds after every add, so the order decides it,
and a window counts its init once per padding position, so an init that its reducer does
not fold into itself (``scan_inits``: a sum from 3) counts another number of times in the
tree, which XLA computes.  Kernels get the tree's ops here, each of which
they already fold in XLA's order (a reduce-window of at most 16 folds sequentially from
init), with the reducer inlined as elementwise ops in place of XLA's ``map`` (which no kernel
emits).  The scan dim is split in place, where XLA transposes it last: the same values.
Other scans keep their single reduce-window, as does a scan whose reducer is not elementwise
scalar ops.

>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... add {
...   a = f8e4m3fn[] parameter(0)
...   b = f8e4m3fn[] parameter(1)
...   ROOT s = f8e4m3fn[] add(a, b)
... }
... ENTRY e {
...   x = f8e4m3fn[3,40] parameter(0)
...   z = f8e4m3fn[] constant(0)
...   ROOT r = f8e4m3fn[3,40] reduce-window(x, z), window={size=1x40 pad=0_0x39_0}, to_apply=add
... }''')
>>> [i.opcode for i in rewrite_tree_scans(m).entry][2:8]
['pad', 'reshape', 'reduce-window', 'slice', 'reshape', 'reduce-window']
>>> rewrite_tree_scans(m).entry.root.name, rewrite_tree_scans(m).entry.root.opcode
('r', 'slice')
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from fusion.analysis.xla_reduction_order import SCAN_BASE, Scan, folds_in_xla_order, scan_of
from fusion.ir.attributes import PaddingConfig, PaddingDim, SliceDim, Window, WindowDim
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.ir.shape import ArrayShape
from fusion.transforms.map_inlining import inline_scalar_computation, is_scalar_elementwise
from fusion.transforms.scan_inits import init_absorbs_itself


def rewrite_tree_scans(module: HloModule) -> HloModule:
    """``module`` with every scan longer than ``SCAN_BASE`` whose result the tree changes
    (fp8, or an init its reducer does not absorb) rewritten as XLA:CPU's tree (the module
    itself when it has none)."""
    taken = {i.name for c in module.computations for i in c}
    comps = tuple(_rewritten(c, module, taken) for c in module.computations)
    if all(new is old for new, old in zip(comps, module.computations)):
        return module
    return replace(module, computations=comps)


def _rewritten(comp: HloComputation, module: HloModule, taken: set[str]) -> HloComputation:
    out: list[HloInstruction] = []
    changed = False
    for instr in comp:
        tree = _tree_scan(instr, comp, module, taken)
        out.extend(tree or (instr,))
        changed |= tree is not None
    return replace(comp, instructions=tuple(out)) if changed else comp


def _tree_scan(instr: HloInstruction, comp: HloComputation, module: HloModule,
               taken: set[str]) -> list[HloInstruction] | None:
    """The instructions replacing ``instr`` (the last one named as it), or None when it is
    not a scan whose tree XLA computes differently or its reducer cannot be inlined."""
    scan = scan_of(instr, comp)
    if scan is None or not scan.tree or len(instr.operands) != 2 \
            or not isinstance(instr.shape, ArrayShape):
        return None
    operand = comp.instruction(instr.operands[0]).array_shape
    reducer = module.computation(instr.attr("to_apply"))
    if not _inlinable(reducer):
        return None
    if not folds_in_xla_order(instr.shape.element_type) \
            and init_absorbs_itself(instr, comp, module):
        return None
    builder = _Builder(instr, reducer, taken)
    builder.scan(instr.operands[0], operand.dims, scan)
    last = builder.instructions[-1]
    builder.instructions[-1] = last.replace(name=instr.name, shape=instr.shape,
                                            location=instr.location)
    return builder.instructions


def _inlinable(reducer: HloComputation) -> bool:
    """Whether ``reducer`` is scalar elementwise ops on its two parameters and constants."""
    return len(reducer.parameters) == 2 and is_scalar_elementwise(reducer)


@dataclass
class _Builder:
    """Appends the tree's instructions for one reduce-window ``instr``."""

    instr: HloInstruction
    reducer: HloComputation
    taken: set[str]
    instructions: list[HloInstruction] = field(default_factory=list)

    def fresh(self) -> str:
        n = 1
        while f"{self.instr.name}.scan{n}" in self.taken:
            n += 1
        self.taken.add(f"{self.instr.name}.scan{n}")
        return f"{self.instr.name}.scan{n}"

    def add(self, opcode: str, dims: tuple[int, ...], operands: tuple[str, ...],
            dtype: str | None = None, **attributes: object) -> str:
        name = self.fresh()
        shape = ArrayShape(dtype or self.instr.shape.dtype, dims)
        self.instructions.append(HloInstruction(name, opcode, shape, operands,
                                                tuple(attributes.items())))
        return name

    def pad(self, x: str, dims: tuple[int, ...], k: int, low: int, high: int) -> str:
        config = PaddingConfig(tuple(PaddingDim(low, high) if j == k else PaddingDim(0, 0)
                                     for j in range(len(dims))))
        grown = dims[:k] + (dims[k] + low + high,) + dims[k + 1:]
        return self.add("pad", grown, (x, self.instr.operands[1]), padding=config)

    def slice(self, x: str, dims: tuple[int, ...], k: int, start: int, limit: int) -> str:
        bounds = tuple(SliceDim(start, limit) if j == k else SliceDim(0, n)
                       for j, n in enumerate(dims))
        return self.add("slice", dims[:k] + (limit - start,) + dims[k + 1:], (x,), slice=bounds)

    def window(self, x: str, dims: tuple[int, ...], k: int, low: int, high: int) -> str:
        """A stride-1 window of ``dims[k]`` on dim ``k``, padded ``low``/``high``."""
        window = Window(tuple(WindowDim(n, padding_low=low, padding_high=high) if j == k
                              else WindowDim(1) for j, n in enumerate(dims)))
        out = dims[:k] + (low + high + 1,) + dims[k + 1:]
        return self.add("reduce-window", out, (x, self.instr.operands[1]), window=window,
                        to_apply=self.instr.attr("to_apply"))

    def scan(self, x: str, dims: tuple[int, ...], scan: Scan) -> str:
        """``x`` (of ``dims``) scanned along ``scan.dim`` in XLA's order; the last name."""
        k, n, reverse = scan.dim, scan.length, scan.reverse
        if not scan.tree:
            pad = n if scan.exclusive else n - 1
            return self.window(x, dims, k, 0 if reverse else pad, pad if reverse else 0)
        columns = scan.columns
        length = columns * SCAN_BASE
        padded = self.pad(x, dims, k, 0, length - n) if length != n else x
        tiled = dims[:k] + (columns, SCAN_BASE) + dims[k + 1:]
        tiles = self.add("reshape", tiled, (padded,))
        edge = SCAN_BASE - 1
        scanned = self.window(tiles, tiled, k + 1, 0 if reverse else edge, edge if reverse else 0)
        start = 0 if reverse else edge
        column = self.slice(scanned, tiled, k + 1, start, start + 1)
        totals_dims = dims[:k] + (columns,) + dims[k + 1:]
        totals = self.add("reshape", totals_dims, (column,))
        prefix = self.scan(totals, totals_dims, Scan(k, columns, reverse, exclusive=True))
        prefix_dims = dims[:k] + (columns + 1,) + dims[k + 1:]
        prefix = self.slice(prefix, prefix_dims, k, 1 if reverse else 0,
                            columns + 1 if reverse else columns)
        spread = self.add("broadcast", tiled, (prefix,),
                          dimensions=tuple(j for j in range(len(tiled)) if j != k + 1))
        combined = self.combine(scanned, spread, tiled)
        whole = dims[:k] + (length,) + dims[k + 1:]
        result = self.add("reshape", whole, (combined,))
        if length != n:
            result = self.slice(result, whole, k, 0, n)
        if scan.exclusive:  # the inclusive scan, shifted by one init value
            result = self.pad(result, dims, k, 0 if reverse else 1, 1 if reverse else 0)
        return result

    def combine(self, lhs: str, rhs: str, dims: tuple[int, ...]) -> str:
        """The reducer applied elementwise to ``lhs`` and ``rhs`` (XLA's ``map``), inlined."""
        ops = inline_scalar_computation(self.reducer, (lhs, rhs),
                                        ArrayShape(self.instr.shape.dtype, dims), self.fresh)
        self.instructions.extend(ops)
        return ops[-1].name


__all__ = ["rewrite_tree_scans"]
