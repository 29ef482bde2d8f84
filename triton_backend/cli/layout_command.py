"""``fusion-compile layout SHAPE [--index I,J] [--json]``: where a layout puts each element.

Prints the shape as XLA prints it, the physical (tiled) shape, the padded element count, the
buffer's bytes and the layout's indexing map (logical index -> linear offset); with ``--index``
the element's linear offset (in elements, as XLA's ``LinearIndex`` counts) and the 32-bit word
and bit it starts at.  Never imports torch or triton.
"""
from __future__ import annotations

import argparse

from fusion.text.parser import parse_shape
from fusion.ir.shape import ArrayShape
from triton_backend.cli.json_output import emit
from tiling.layouts.tiled_layout import (
    LayoutError,
    TiledLayout,
    byte_size,
    layout_indexing_map,
    word_and_bit,
)

HELP = "show a shape's tiled layout: physical shape, size, indexing map, an element's offset"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("shape", help='an array shape with a layout, e.g. "bf16[37,300]{1,0:T(8,128)(2,1)}"')
    parser.add_argument("--index", help="a logical element index, e.g. 3,5")


def describe(shape_text: str, index_text: str | None = None) -> dict:
    """Everything the command prints, as the ``--json`` object.

    >>> r = describe("f32[3,5]{1,0:T(2,2)}", "2,3")
    >>> r["physical_shape"], r["padded_elements"], r["bytes"], r["offset"], r["word"], r["bit"]
    ([2, 3, 2, 2], 24, 96, 17, 17, 0)
    """
    shape = parse_shape(shape_text)
    if not isinstance(shape, ArrayShape):
        raise LayoutError("expected an array shape, got a tuple shape", text=shape_text)
    et = shape.element_type
    if not et.has_values:
        raise LayoutError(f"{shape.dtype} has no elements to lay out", text=shape_text)
    layout = shape.effective_layout
    tiled = TiledLayout.of(shape.dims, layout, where=str(shape))
    result = {
        "shape": str(shape.with_layout(layout)),
        "physical_shape": list(tiled.physical_shape),
        "padded_elements": tiled.padded_elements,
        "bytes": byte_size(shape.dtype, shape.dims, layout),
        "map": str(layout_indexing_map(shape.dims, layout)),
        "index": None,
        "offset": None,
        "word": None,
        "bit": None,
    }
    if index_text is not None:
        index = _parse_index(index_text, shape)
        offset = int(tiled.linear_index(index))
        word, bit = word_and_bit(offset, shape.dtype, layout)
        result.update(index=list(index), offset=offset, word=word, bit=bit)
    return result


def _parse_index(text: str, shape: ArrayShape) -> tuple[int, ...]:
    parts = [p.strip() for p in text.split(",")] if text.strip() else []
    try:
        index = tuple(int(p) for p in parts)
    except ValueError:
        raise LayoutError(
            f"--index {text!r} is not a comma-separated list of integers",
            text=text, expected=f"{shape.rank} integers such as " + ",".join(["0"] * shape.rank),
        ) from None
    if len(index) != shape.rank:
        raise LayoutError(
            f"--index {text!r} has {len(index)} entries but {shape} has rank {shape.rank}",
            text=text,
        )
    for i, (e, n) in enumerate(zip(index, shape.dims)):
        if not 0 <= e < n:
            raise LayoutError(f"--index entry {i} is {e}, outside [0, {n - 1}] of {shape}", text=text)
    return index


def run(args: argparse.Namespace) -> int:
    result = describe(args.shape, args.index)
    if args.json:
        emit("layout", result)
        return 0
    rows = [
        ("shape", result["shape"]),
        ("physical shape", "[" + ",".join(str(x) for x in result["physical_shape"]) + "]"),
        ("padded elements", result["padded_elements"]),
        ("bytes", result["bytes"]),
        ("map", result["map"]),
    ]
    if result["index"] is not None:
        rows += [
            ("index", ",".join(str(x) for x in result["index"])),
            ("offset", result["offset"]),
            ("word", result["word"]),
            ("bit", result["bit"]),
        ]
    for name, value in rows:
        print(f"{name + ':':17}{value}")
    return 0


