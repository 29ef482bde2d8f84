"""What a ``convolution`` instruction's attributes mean: its dimension numbers and groups.

XLA writes the dimension numbers as ``dim_labels=<lhs>_<rhs>-><out>``: the lhs (input) labels
its batch dim ``b``, feature dim ``f`` and spatial dims ``0``, ``1``, ...; the rhs (kernel)
its input feature dim ``i``, output feature dim ``o`` and the same spatial dims; the output
``b``, ``f`` and the spatial dims.  A label's position is the dim it names, so
``b01f_01io->b01f`` is NHWC x HWIO -> NHWC and ``bf01_oi01->bf01`` is NCHW x OIHW -> NCHW.
The text is kept verbatim in the IR (it prints back as XLA prints it); the shape rule, the
evaluator, the indexing maps and the kernel template all read it through :func:`conv_dims`.

>>> dn = parse_dim_labels("b01f_01io->b01f")
>>> dn.lhs_batch, dn.lhs_feature, dn.lhs_spatial, dn.rhs_input, dn.rhs_output, dn.rhs_spatial
(0, 3, (1, 2), 2, 3, (0, 1))
>>> dn.out_spatial, str(dn)
((1, 2), 'b01f_01io->b01f')
>>> parse_dim_labels("f0b_i0o->0bf").out_batch
1
"""
from __future__ import annotations

from dataclasses import dataclass

from fusion.ir.attributes import Window
from fusion.errors import HloVerifyError
from fusion.ir.hlo_module import HloInstruction


@dataclass(frozen=True)
class ConvDimensionNumbers:
    """XLA's ``ConvolutionDimensionNumbers``: which dim of each operand plays which role.

    ``*_spatial[i]`` is the dim of spatial dimension ``i`` (label ``str(i)``) in that tensor.
    """

    lhs_batch: int
    lhs_feature: int
    lhs_spatial: tuple[int, ...]
    rhs_input: int
    rhs_output: int
    rhs_spatial: tuple[int, ...]
    out_batch: int
    out_feature: int
    out_spatial: tuple[int, ...]

    @property
    def num_spatial(self) -> int:
        return len(self.lhs_spatial)

    def __str__(self) -> str:
        return (_labels(self.lhs_batch, self.lhs_feature, self.lhs_spatial, "bf") + "_"
                + _labels(self.rhs_input, self.rhs_output, self.rhs_spatial, "io") + "->"
                + _labels(self.out_batch, self.out_feature, self.out_spatial, "bf"))


def _labels(first: int, second: int, spatial: tuple[int, ...], letters: str) -> str:
    out = [""] * (len(spatial) + 2)
    out[first], out[second] = letters[0], letters[1]
    for i, dim in enumerate(spatial):
        out[dim] = str(i)
    return "".join(out)


def _one(part: str, letters: str, what: str) -> tuple[int, int, tuple[int, ...]]:
    rank = len(part)
    counts = {ch: part.count(ch) for ch in part}
    spatial_labels = [str(i) for i in range(rank - 2)]
    wanted = set(letters) | set(spatial_labels)
    if rank < 2 or set(part) != wanted or any(c != 1 for c in counts.values()):
        raise ValueError(f"the {what} labels {part!r} must name each of "
                         f"{', '.join(sorted(wanted)) or letters} exactly once")
    return part.index(letters[0]), part.index(letters[1]), tuple(part.index(s) for s in
                                                                  spatial_labels)


def parse_dim_labels(text: str) -> ConvDimensionNumbers:
    """The dimension numbers of ``dim_labels`` text; ``ValueError`` saying what is wrong.

    >>> parse_dim_labels("bf012_oi012->bf012").rhs_output
    0
    """
    try:
        operands, out = text.split("->")
        lhs, rhs = operands.split("_")
    except ValueError:
        raise ValueError(f"dim_labels {text!r} is not of the form <lhs>_<rhs>-><output>") from None
    lb, lf, ls = _one(lhs, "bf", "lhs")
    ri, ro, rs = _one(rhs, "io", "rhs")
    ob, of, os_ = _one(out, "bf", "output")
    if not len(ls) == len(rs) == len(os_):
        raise ValueError(f"dim_labels {text!r} gives the lhs, rhs and output different numbers "
                         "of spatial dims")
    return ConvDimensionNumbers(lb, lf, ls, ri, ro, rs, ob, of, os_)


@dataclass(frozen=True)
class Convolution:
    """A convolution's attributes, read and checked: dimension numbers, window and groups."""

    dims: ConvDimensionNumbers
    window: Window
    feature_group_count: int = 1
    batch_group_count: int = 1


def conv_dims(instr: HloInstruction) -> Convolution:
    """Read ``instr``'s convolution attributes; a located ``HloVerifyError`` when malformed.

    A convolution without spatial dims may omit ``window`` (XLA prints ``window={}``).

    >>> from fusion.ir.shape import ArrayShape
    >>> c = HloInstruction("c", "convolution", ArrayShape("f32", (2, 3)), ("x", "w"),
    ...                    (("dim_labels", "bf_io->bf"),))
    >>> conv_dims(c).window.dims, conv_dims(c).feature_group_count
    ((), 1)
    """
    loc = instr.location

    def fail(message: str) -> HloVerifyError:
        return HloVerifyError(message, line=loc.line if loc else None,
                              column=loc.column if loc else None, where=instr.name)

    labels = instr.attr("dim_labels", None)
    if not isinstance(labels, str):
        raise fail("convolution needs dim_labels=<lhs>_<rhs>-><output> (e.g. b01f_01io->b01f)")
    try:
        dims = parse_dim_labels(labels)
    except ValueError as err:
        raise fail(str(err)) from None
    window = instr.attr("window", None)
    if window is None:
        window = Window(())
    if not isinstance(window, Window) or len(window.dims) != dims.num_spatial:
        raise fail(f"convolution with {dims.num_spatial} spatial dims needs a window with "
                   f"{dims.num_spatial} dims")
    for d, w in enumerate(window.dims):
        if min(w.size, w.stride, w.base_dilation, w.window_dilation) < 1:
            raise fail(f"window dim {d} has a non-positive size, stride or dilation")
    groups = []
    for key in ("feature_group_count", "batch_group_count"):
        value = instr.attr(key, 1)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise fail(f"{key} must be a positive integer, got {value!r}")
        groups.append(value)
    if groups[0] > 1 and groups[1] > 1:
        raise fail("a convolution cannot have both feature_group_count and batch_group_count "
                   "above 1")
    return Convolution(dims, window, groups[0], groups[1])


def window_output_size(size: int, w) -> int:
    """Positions of a window dim ``w`` slid over ``size`` elements (dilations and padding).

    >>> from fusion.ir.attributes import WindowDim
    >>> window_output_size(8, WindowDim(3, stride=2, padding_low=1, padding_high=1))
    4
    """
    dilated = (size - 1) * w.base_dilation + 1 if size else 0
    padded = dilated + w.padding_low + w.padding_high
    extent = (w.size - 1) * w.window_dilation + 1
    return 0 if padded < extent else (padded - extent) // w.stride + 1


__all__ = ["ConvDimensionNumbers", "Convolution", "conv_dims", "parse_dim_labels",
           "window_output_size"]
