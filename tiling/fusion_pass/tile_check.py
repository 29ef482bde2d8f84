"""The tile analysis as priority fusion's ``TileCheck``: no fusion the analysis cannot tile.

A candidate fusion is judged by ``tiling.symbolic.tiled_fusion`` (every instruction's symbolic
tile) and ``tiling.policy.choice.choose_tiling`` (is some output tiling legal?).  The
pass refuses a merge only when it *makes* a tileable kernel untileable:

* the merged fusion is not tileable (or has no legal tiling), and
* every part it merges (producer and consumer, or the two siblings) was tileable on its own.

A part the analysis already refuses (interior padding, a gather, an op without an indexing
rule) is emitted by the code generator's fallback whatever is fused with it, so such a part
does not block fusions that keep it untileable; refusing them would leave every kernel around
such an op unfused.  The emitter's structural check (one reduction shape per fusion, no
nested tuples: what the tile analysis does not express) stays absolute.

Verdicts are memoized per node (the pass judges many candidates, most of them again after
each merge).  A fusion whose instructions are all elementwise work on the output's shape
(or scalars broadcast into it) reads every value at the output index: its verdict is that of
the identity map on the output dims, computed once per shape without building the analysis.

>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... ENTRY e {
...   p = f32[16,32] parameter(0)
...   ROOT n = f32[16,32] negate(p)
... }''')
>>> print(tile_analysis_check(m.entry, m))
None
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from fusion.errors import FusionCompilerError
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.opcodes import traits
from fusion.ir.shape import ArrayShape
from tiling.fusion_pass.decisions import Node, structural_tile_check
from tiling.policy.choice import choose_tiling
from tiling.policy.tile_scans import scans_read_along_tile
from tiling.symbolic.tiled_fusion import SymbolicTiledFusion, analyze_computation_tiling


def _elementwise_like(opcode: str) -> bool:
    """Reads its operands at its own index, or reads none (a parameter, a constant, an iota)."""
    t = traits(opcode)
    return t.elementwise or t.given_value or opcode == "iota"


def legal_tiling_problem(analysis: SymbolicTiledFusion) -> str | None:
    """None when ``analysis`` is tileable and some candidate tiling of
    ``tiling.policy.candidates`` (persistent, or with the reduced dims looped in chunks) is
    legal; else why not.  Stops at the first legal tiling: it ranks nothing.

    >>> from fusion.text.parser import parse_hlo
    >>> m = parse_hlo('''HloModule m
    ... ENTRY e {
    ...   p = f32[64] parameter(0)
    ...   a = f32[8,8] reshape(p)
    ...   t = f32[8,8] transpose(a), dimensions={1,0}
    ...   ROOT r = f32[64] reshape(t)
    ... }''')
    >>> legal_tiling_problem(analyze_computation_tiling(m.entry, "r"))[:45]
    'not tileable: p: `d0 floordiv 8 + (d0 mod 8) '
    """
    choice = choose_tiling(analysis, ranked=False)
    return None if choice.found else choice.reason


def analysis_problem(fused: HloComputation) -> str | None:
    """The tile analysis's verdict on one fused computation (None: it has a legal tiling)."""
    try:
        analysis = analyze_computation_tiling(fused, fused.name)
        problem = legal_tiling_problem(analysis)
    except FusionCompilerError as err:  # an op the analysis cannot tile: untileable
        message = getattr(err, "message", None) or str(err)
        return f"not tileable: the analysis fails: {message}"
    return None if problem is None else f"the tile analysis finds it {problem}"


def tile_analysis_check(fused: HloComputation, module: HloModule) -> str | None:
    """A ``TileCheck`` with no memory of the parts: the emitter's structural check, then the
    tile analysis (see ``analysis_problem``).  See the module docstring for an example."""
    return structural_tile_check(fused, module) or analysis_problem(fused)


def scan_problem(fused: HloComputation) -> str | None:
    """Why ``fused`` must not hold its scans (None: it may): each must be read along the tile
    (``tiling.policy.tile_scans``), or every output would reduce a window of its operand, and
    no reduce may share the kernel (its row and the scan's tile would have to agree).

    >>> from fusion.text.parser import parse_hlo
    >>> m = parse_hlo('''HloModule m
    ... add {
    ...   a = f32[] parameter(0)
    ...   b = f32[] parameter(1)
    ...   ROOT s = f32[] add(a, b)
    ... }
    ... ENTRY e {
    ...   x = f32[8,300] parameter(0)
    ...   z = f32[] constant(0)
    ...   c = f32[8,300] reduce-window(x, z), window={size=1x300 pad=0_0x299_0}, to_apply=add
    ...   ROOT r = f32[8,300] reverse(c), dimensions={1}
    ... }''')
    >>> scan_problem(m.entry)
    'scan c is not read along the tile: each of its outputs would reduce a window'
    """
    scans = [i.name for i in fused.instructions if traits(i.opcode).reduction
             and i.opcode != "reduce"]
    reduces = [i.name for i in fused.instructions if i.opcode == "reduce"]
    if scans and reduces:
        return f"scan {scans[0]} would share a kernel with reduction {reduces[0]}"
    if not scans:
        return None
    try:
        along = scans_read_along_tile(analyze_computation_tiling(fused, fused.name))
    except FusionCompilerError as err:
        return f"the tile analysis fails: {getattr(err, 'message', None) or err}"
    for name in scans:
        if name not in along:
            return f"scan {name} is not read along the tile: each of its outputs would " \
                   "reduce a window"
    return None


def _dims(instr: HloInstruction) -> tuple[int, ...] | None:
    return tuple(instr.shape.dims) if isinstance(instr.shape, ArrayShape) else None


def _one_element(instr: HloInstruction) -> bool:
    """One element, computed elementwise or moved from a fixed index of its operands."""
    t = traits(instr.opcode)
    return isinstance(instr.shape, ArrayShape) and math.prod(instr.shape.dims) == 1 and (
        _elementwise_like(instr.opcode) or (t.data_movement and not t.rt_var_indexing))


def elementwise_dims(comp: HloComputation, node: Node) -> tuple[int, ...] | None:
    """The output dims of ``node`` (members of ``comp``) when every member is elementwise
    work (constants, iotas included) on the output's dims or on scalars, or a broadcast of a
    scalar, or one element taken from any value by moving elements (a slice and reshape of
    a parameter to a scalar: a random generator's key), and every other input has the
    output's dims or is a scalar: every value is then read at the output index (or is one
    element), so the fusion tiles exactly as the identity map does.  None otherwise.  Judged
    on ``comp`` without building the fused computation.

    >>> from fusion.text.parser import parse_hlo
    >>> m = parse_hlo('''HloModule m
    ... ENTRY e {
    ...   p = f32[4,8] parameter(0)
    ...   c = f32[] constant(2)
    ...   b = f32[4,8] broadcast(c), dimensions={}
    ...   ROOT n = f32[4,8] multiply(p, b)
    ... }''')
    >>> elementwise_dims(m.entry, Node(("c", "b", "n"), ("n",), True))
    (4, 8)
    >>> elementwise_dims(m.entry, Node(("n",), ("n", "b"), True)) is None
    True
    >>> k = parse_hlo('''HloModule k
    ... ENTRY e {
    ...   s = u64[2] parameter(0)
    ...   one = u64[1] slice(s), slice={[1:2]}
    ...   key = u64[] reshape(one)
    ...   b = u64[4,8] broadcast(key), dimensions={}
    ...   i = u64[4,8] iota(), iota_dimension=1
    ...   ROOT x = u64[4,8] xor(i, b)
    ... }''')
    >>> elementwise_dims(k.entry, Node(("one", "key", "b", "i", "x"), ("x",), True))
    (4, 8)
    """
    if len(node.outputs) != 1:
        return None
    out = _dims(comp.instruction(node.root))
    if out is None:
        return None
    for name in node.members:
        instr = comp.instruction(name)
        if _one_element(instr):
            continue
        if _dims(instr) not in (out, ()):
            return None
        if instr.opcode == "broadcast":
            if _dims(comp.instruction(instr.operands[0])) != ():
                return None
        elif not _elementwise_like(instr.opcode):
            return None
        if any(_dims(comp.instruction(o)) not in (out, ()) for o in instr.operands):
            return None
    return out


# Attributes that never change indexing: JAX gives every op its own ``metadata``, which
# would make the layers of a model look different.
_UNSEMANTIC_ATTRIBUTES = frozenset({"metadata"})


def candidate_structure(comp: HloComputation, node: Node) -> tuple | None:
    """The fused computation of ``node`` up to names: per member its opcode, shape,
    attributes and operands (as member positions, or ``~k`` for the k-th external input),
    then the external inputs' shapes and the outputs.  Two nodes with equal structures make
    isomorphic fusions, which the tile analysis judges alike (its reasons aside, which name
    instructions).  None when the analysis may depend on names (runtime variables) or an
    attribute cannot be hashed.

    >>> from fusion.text.parser import parse_hlo
    >>> m = parse_hlo('''HloModule m
    ... ENTRY e {
    ...   p = f32[4,8] parameter(0)
    ...   a = f32[8,4] transpose(p), dimensions={1,0}
    ...   b = f32[8,4] negate(a)
    ...   c = f32[4,8] transpose(b), dimensions={1,0}
    ...   ROOT d = f32[4,8] negate(c)
    ... }''')
    >>> first = candidate_structure(m.entry, Node(("a", "b"), ("b",), True))
    >>> first == candidate_structure(m.entry, Node(("c", "d"), ("d",), True))
    False
    >>> first == candidate_structure(m.entry, Node(("a", "b"), ("b",), True))
    True
    """
    position: dict[str, int] = {}
    inputs: dict[str, int] = {}
    items: list[tuple] = []
    for k, name in enumerate(node.members):
        instr = comp.instruction(name)
        if traits(instr.opcode).rt_var_indexing:
            # Its maps' runtime variables name other instructions: the analysis (the order
            # its maps sort in) may see names, so such fusions are not shared by structure.
            return None
        operands = []
        for o in instr.operands:
            at = position.get(o)
            if at is None:
                at = inputs.get(o)
                if at is None:
                    at = inputs[o] = ~len(inputs)
            operands.append(at)
        attributes = instr.attributes
        if any(key in _UNSEMANTIC_ATTRIBUTES for key, _ in attributes):
            attributes = tuple(a for a in attributes if a[0] not in _UNSEMANTIC_ATTRIBUTES)
        items.append((instr.opcode, instr.shape, attributes, tuple(operands)))
        position[name] = k
    key = (tuple(items), tuple(comp.instruction(v).shape for v in inputs),
           tuple(position[o] for o in node.outputs))
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _identity_computation(dims: tuple[int, ...]) -> HloComputation:
    shape = ArrayShape("f32", dims, None)
    return HloComputation("identity", (
        HloInstruction("p", "parameter", shape, (), (("parameter_number", 0),)),
        HloInstruction("n", "negate", shape, ("p",), ())), "n")


@dataclass
class TilingVerdicts:
    """Memoized tile-analysis verdicts for the nodes of ``comp``.

    ``build`` turns a node into its candidate fused computation (the pass's own builder).
    ``shortcut`` (on by default) answers elementwise fusions from the identity map's verdict
    and a candidate isomorphic to one found tileable from that verdict.
    """

    comp: HloComputation
    module: HloModule
    build: Callable[[Node], HloComputation]
    shortcut: bool = True
    _by_node: dict[Node, str | None] = field(default_factory=dict)
    _structural: dict[Node, str | None] = field(default_factory=dict)
    _by_dims: dict[tuple[int, ...], str | None] = field(default_factory=dict)
    _tileable_structures: set[tuple] = field(default_factory=set)
    _elementwise: dict[Node, tuple[int, ...] | None] = field(default_factory=dict)
    _reduces: dict[Node, bool] = field(default_factory=dict)

    def verdict(self, node: Node) -> str | None:
        """Why the node's fusion cannot be tiled (None: it can)."""
        if node not in self._by_node:
            self._by_node[node] = self._judge(node)
        return self._by_node[node]

    def _split(self, merged: Node, parts: Sequence[Node]) -> tuple[Node, Node] | None:
        """``(producer, consumer)`` when ``parts`` are the producer and consumer ``merged``
        unites (the consumer keeps its outputs; the two may share duplicated members), else
        None."""
        if len(parts) != 2 or parts[1].outputs != merged.outputs or not (
                max(len(p.members) for p in parts) <= len(merged.members)
                <= len(parts[0].members) + len(parts[1].members)):
            return None
        return parts[0], parts[1]

    def _elementwise_dims(self, node: Node, parts: Sequence[Node] = ()) -> tuple[int, ...] | None:
        """``elementwise_dims`` of the node, remembered, and derived from its producer and
        consumer when both are known: the merge is elementwise on the consumer's dims exactly
        when the consumer is and the producer is elementwise on those dims or on scalars (an
        elementwise member keeps its operands' dims up to the producer's root)."""
        if node in self._elementwise:
            return self._elementwise[node]
        split = self._split(node, parts)
        if split is not None and all(p in self._elementwise for p in split):
            dims = self._elementwise[split[1]]
            producer = self._elementwise[split[0]]
            # (A producer of one element is made of such members only.)
            out = dims if dims is not None and producer is not None and (
                producer in (dims, ()) or math.prod(producer) == 1) else None
        else:
            out = elementwise_dims(self.comp, node)
        self._elementwise[node] = out
        return out

    def _has_reduce(self, node: Node, parts: Sequence[Node]) -> bool:
        if node not in self._reduces:
            split = self._split(node, parts)
            if split is not None and all(p in self._reduces for p in split):
                self._reduces[node] = any(self._reduces[p] for p in split)
            else:
                self._reduces[node] = any(self.comp.instruction(m).opcode == "reduce"
                                          for m in node.members)
        return self._reduces[node]

    def _judge(self, node: Node, parts: Sequence[Node] = ()) -> str | None:
        dims = self._elementwise_dims(node, parts) if self.shortcut else None
        if dims is None:
            # A chain, or a model's repeated layers, offers the same candidate structure over
            # and over under other names: analyse it once.  Only "tileable" is shared: a
            # refusal's reason names the candidate's own instructions.
            structure = candidate_structure(self.comp, node) if self.shortcut else None
            if structure is not None and structure in self._tileable_structures:
                return None
            problem = analysis_problem(self.build(node))
            if problem is None and structure is not None:
                self._tileable_structures.add(structure)
            return problem
        if dims not in self._by_dims:
            self._by_dims[dims] = analysis_problem(_identity_computation(dims))
        return self._by_dims[dims]

    def merge_problem(self, merged: Node, parts: Sequence[Node]) -> str | None:
        """Why ``merged`` must not be made: the emitter's structural check refuses it, or it
        is untileable while every part was tileable (module docstring); None otherwise."""
        for p in parts:  # their facts first: the merge's derive from them
            self._has_reduce(p, ())
            if self.shortcut:
                self._elementwise_dims(p)
        if merged not in self._structural:
            reduces = self._has_reduce(merged, parts)
            # The structural check looks only at fusions with a reduction: build no other.
            self._structural[merged] = reduces and structural_tile_check(self.build(merged),
                                                                         self.module) or None
        if self._structural[merged]:
            return self._structural[merged]
        # A part already known to be untileable settles it without analysing the merge.
        if any(self._by_node.get(p) is not None for p in parts):
            return None
        if merged not in self._by_node:
            self._by_node[merged] = self._judge(merged, parts)
        problem = self._by_node[merged]
        if problem is None or any(self.verdict(p) is not None for p in parts):
            return None
        return problem


__all__ = [
    "TilingVerdicts", "analysis_problem", "candidate_structure", "elementwise_dims",
    "legal_tiling_problem", "tile_analysis_check",
]
