"""XLA's own tiling choice: ``block_level_fusion_config`` in a fusion's ``backend_config``.

XLA's Triton fusions carry their output tiling as JSON, e.g.
``{"fusion_backend_config": {"kind": "__triton", "block_level_fusion_config":
{"output_tiles": [{"sizes": ["1", "128"]}], "num_warps": "4", "num_stages": 1}}}``; older XLA
writes ``"output_tile_sizes": ["1", "128"]``.  Numbers may be JSON strings (proto int64).
XLA's parser also accepts the protobuf text format of the same message, read here alike
(``fusion.text.backend_config``): ``{ fusion_backend_config:{ kind: "__triton"
block_level_fusion_config:{ output_tiles:{ sizes:"1" sizes:"128"} num_warps:"4" } } }``.

>>> cfg = parse_block_level_config('{"fusion_backend_config": {"kind": "__triton",'
...     ' "block_level_fusion_config": {"output_tiles": [{"sizes": ["1", "128"]}],'
...     ' "num_warps": "4", "num_stages": 1}}}')
>>> cfg.tile_sizes, cfg.num_warps, cfg.num_stages
((1, 128), 4, 1)
>>> parse_block_level_config('{"fusion_backend_config": {"kind": "__triton"}}') is None
True
>>> cfg = parse_block_level_config('{ fusion_backend_config:{ kind: "__triton" '
...     'block_level_fusion_config:{ output_tiles:{ sizes:"1" sizes:"128"} num_warps:"4" } } }')
>>> cfg.tile_sizes, cfg.num_warps, cfg.num_stages
((1, 128), 4, None)
"""
from __future__ import annotations

from dataclasses import dataclass

from fusion.ir.attributes import RawText
from fusion.text.backend_config import as_list, parse_backend_config
from fusion.errors import HloParseError
from fusion.ir.hlo_module import HloInstruction


@dataclass(frozen=True)
class XlaTilingConfig:
    """``output_tiles`` (one tuple of sizes per output; ``tile_sizes`` is the first),
    ``num_warps``, ``num_stages``, ``num_ctas`` (``None`` where XLA left them out)."""

    output_tiles: tuple[tuple[int, ...], ...]
    num_warps: int | None = None
    num_stages: int | None = None
    num_ctas: int | None = None

    @property
    def tile_sizes(self) -> tuple[int, ...]:
        return self.output_tiles[0] if self.output_tiles else ()

    def to_json(self) -> dict:
        return {"output_tiles": [list(t) for t in self.output_tiles],
                "num_warps": self.num_warps, "num_stages": self.num_stages,
                "num_ctas": self.num_ctas}


def _int(value, what: str, text: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise HloParseError(f"block_level_fusion_config: {what} {value!r} is not an integer",
                            text=text) from None


def parse_block_level_config(text: str) -> XlaTilingConfig | None:
    """The config in a ``backend_config`` text (JSON or protobuf text format), or ``None``
    if it has none.  The text may be bare (``backend_config={...}``), single-quoted, or a
    quoted JSON string."""
    config = parse_backend_config(text)
    if config is None:
        if "block_level_fusion_config" in text:
            raise HloParseError("backend_config is neither JSON nor protobuf text format",
                                text=text)
        return None
    fbc = config.get("fusion_backend_config", config)
    block = fbc.get("block_level_fusion_config") if isinstance(fbc, dict) else None
    if not isinstance(block, dict):
        return None
    tiles: list[tuple[int, ...]] = []
    # as_list: in the text format a repeated field written once is a single value.
    for tile in as_list(block.get("output_tiles")):
        sizes = tile.get("sizes", []) if isinstance(tile, dict) else tile
        tiles.append(tuple(_int(v, "tile size", text) for v in as_list(sizes)))
    if not tiles and "output_tile_sizes" in block:
        tiles.append(tuple(_int(v, "tile size", text) for v in as_list(block["output_tile_sizes"])))

    def opt(key):
        return _int(block[key], key, text) if key in block else None

    return XlaTilingConfig(tuple(tiles), opt("num_warps"), opt("num_stages"), opt("num_ctas"))


def xla_tiling_of(fusion_instr: HloInstruction) -> XlaTilingConfig | None:
    """The ``block_level_fusion_config`` of a fusion instruction, if it carries one."""
    raw = fusion_instr.attr("backend_config", None)
    if raw is None:
        return None
    text = raw.text if isinstance(raw, RawText) else str(raw)
    try:
        return parse_block_level_config(text)
    except HloParseError as err:
        raise HloParseError(err.message, text=err.text, where=fusion_instr.name) from None
