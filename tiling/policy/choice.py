"""``choose_tiling``: the one function that picks a fusion's output tiling, and why.

Its callers are thin: the fusion pass's tile check asks whether any tiling is legal
(``ranked=False``), the ``tile`` command and ``compile`` take the ranked choice (XLA's
``block_level_fusion_config`` when legal, else the default of ``tiling.policy.candidates``),
and the kernel planner takes the fallback for a fusion the tile analysis refused
(``analysis=None``: powers of two filling a budget from the minor-most dim).

>>> from fusion.text.parser import parse_hlo
>>> from tiling.symbolic.tiled_fusion import analyze_fusion_tiling
>>> m = parse_hlo('''HloModule m
... f {
...   p0 = f32[64,512] parameter(0)
...   ROOT e = f32[64,512] exponential(p0)
... }
... ENTRY main {
...   x = f32[64,512] parameter(0)
...   ROOT r = f32[64,512] fusion(x), kind=kLoop, calls=f
... }''')
>>> a = analyze_fusion_tiling(m, m.entry.root)
>>> choose_tiling(a).tile_sizes, choose_tiling(a, ranked=False).tile_sizes
((1, 128), (2, 512))
>>> choose_tiling(None, output_dims=(5, 300), budget=256).tile_sizes
(1, 256)
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from math import log2, prod
from typing import Sequence

from tiling.policy.candidates import (
    TilingCandidate,
    TilingReport,
    candidate_sizes,
    report_for,
)
from tiling.policy.devices import DeviceSpec
from tiling.policy.legality import check_tiling, legal_reduction_chunk, reduced_extent
from tiling.policy.limits import (
    DEFAULT_DEVICE,
    DEFAULT_REDUCTION_CHUNK,
    MAX_PERSISTENT_REDUCTION,
    TARGET_TILE_ELEMENTS,
)
from tiling.policy.verdict import Illegal
from tiling.symbolic.tiled_fusion import SymbolicTiledFusion, next_power_of_two
from tiling.policy.xla_tiling_config import XlaTilingConfig


@dataclass(frozen=True)
class TilingChoice:
    """The tiling to use (``tile_sizes`` None: none was found, ``reason`` says why not).

    ``candidate`` and ``report`` are the ranked choice's costs and the whole ranking.
    """

    tile_sizes: tuple[int, ...] | None
    reduction_chunk: int | None
    reason: str
    candidate: TilingCandidate | None = None
    report: TilingReport | None = None

    @property
    def found(self) -> bool:
        return self.tile_sizes is not None


def choose_tiling(analysis: SymbolicTiledFusion | None, *, output_dims: Sequence[int] = (),
                  budget: int = TARGET_TILE_ELEMENTS, xla: XlaTilingConfig | None = None,
                  prefer_ours: bool = False, target_elements: int = TARGET_TILE_ELEMENTS,
                  device: DeviceSpec = DEFAULT_DEVICE, ranked: bool = True) -> TilingChoice:
    """The output tiling of a fusion, with why.

    * ``analysis`` None (the tile analysis refused the fusion): ``default_tile_sizes`` of
      ``output_dims`` within ``budget`` elements;
    * ``ranked=False``: the legal candidate nearest ``TARGET_TILE_ELEMENTS`` (persistent, or
      with the reduced dims looped in chunks), found without costing any: the fusion pass
      asks this of many candidate fusions and needs only whether one exists;
    * otherwise the ranked choice on ``device``, aiming at ``target_elements`` per block:
      XLA's tiling when ``xla`` is legal (unless ``prefer_ours``), else the default of
      ``report_for``.
    """
    if analysis is None:
        return TilingChoice(default_tile_sizes(tuple(output_dims), budget), None,
                            "default tile sizes (no tile analysis)")
    if not ranked:
        return _first_legal(analysis)
    report = report_for(analysis, xla, target_elements, device)
    candidate, reason = choose_from_report(report, prefer_ours)
    if candidate is None:
        return TilingChoice(None, None, reason, None, report)
    return TilingChoice(candidate.tile_sizes, candidate.reduction_chunk, reason, candidate, report)


def choose_from_report(report: TilingReport, prefer_ours: bool = False,
                       ) -> tuple[TilingCandidate | None, str]:
    """The ranked choice of a report: XLA's tiling when the fusion carries a legal one (unless
    ``prefer_ours``), else our default; with the reason."""
    if report.xla_tiling is not None and not prefer_ours and report.xla_problem is None:
        sizes = report.xla_tiling.tile_sizes
        for c in report.legal:
            if c.tile_sizes == sizes and c.reduction_chunk is None:
                return c, "XLA's block_level_fusion_config (honored; legal for our backend)"
    if report.xla_tiling is not None and report.xla_problem is not None and not prefer_ours:
        return report.default, (f"XLA's tiling {list(report.xla_tiling.tile_sizes)} rejected"
                                f" ({report.xla_problem}); using ours: {report.default_reason}")
    return report.default, report.default_reason


def _first_legal(analysis: SymbolicTiledFusion) -> TilingChoice:
    blocked = analysis.not_tileable()
    if blocked:
        node, tile = blocked[0]
        return TilingChoice(None, None, f"not tileable: {node.name}: {tile.reason}")
    first = None
    for sizes in _nearest_target_first(tuple(analysis.output_dims)):
        chunk, reason = legal_reduction_chunk(analysis, sizes)
        if reason is None:
            return TilingChoice(tuple(sizes), chunk, "the legal tiling nearest the target size")
        first = first or f"sizes {list(sizes)}: {reason}"
    return TilingChoice(None, None, f"no legal tiling (e.g. {first})")


@lru_cache(maxsize=512)
def _nearest_target_first(output_dims: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    # The fusion pass asks this of every candidate fusion; a model's fusions share a few
    # output shapes, and the order depends on nothing else.
    return tuple(sorted(candidate_sizes(output_dims), key=_distance_to_target))


def _distance_to_target(sizes: tuple[int, ...]) -> tuple[float, tuple[int, ...]]:
    return abs(log2(max(prod(sizes), 1)) - log2(TARGET_TILE_ELEMENTS)), sizes


def check_requested_tiling(analysis: SymbolicTiledFusion, tile_sizes: Sequence[int],
                           reduction_chunk: int | None) -> tuple[int | None, Illegal | None]:
    """``(reduction chunk, verdict)`` for tile sizes a user asked for: the reduced dims are
    looped in ``DEFAULT_REDUCTION_CHUNK`` when no chunk is given and they do not fit a
    persistent reduction.  A verdict whose ``is_preference`` holds may still be honored."""
    chunk = reduction_chunk
    if chunk is None and reduced_extent(analysis) > MAX_PERSISTENT_REDUCTION:
        chunk = DEFAULT_REDUCTION_CHUNK
    return chunk, check_tiling(analysis, tuple(tile_sizes), chunk)


def default_tile_sizes(dims: tuple[int, ...],
                       budget: int = TARGET_TILE_ELEMENTS) -> tuple[int, ...]:
    """Power-of-two tile sizes filling ``budget`` elements from the minor-most dim outwards.

    >>> default_tile_sizes((5, 300), budget=256)
    (1, 256)
    >>> default_tile_sizes((3, 5), budget=1024)
    (4, 8)
    """
    sizes = []
    for size in reversed(dims):
        block = min(next_power_of_two(size), max(1, budget))
        sizes.append(block)
        budget //= block
    return tuple(reversed(sizes))


__all__ = [
    "TilingChoice", "check_requested_tiling", "choose_from_report", "choose_tiling",
    "default_tile_sizes",
]
