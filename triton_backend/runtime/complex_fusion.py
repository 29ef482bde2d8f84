"""A fusion over complex values, run as the kernel of its expansion into real parts.

``fusion.transforms.complex_expansion`` rewrites the fused computation so that every ``c64``/``c128``
value is two ``f32``/``f64`` values; the kernel of that expansion takes each complex operand
as two real tensors (real part, imaginary part) and returns each complex output as two.
:class:`ComplexPairFusion` is that kernel's ``CompiledFusion`` seen from the host: it is
called, like any compiled fusion, with the original (complex) tensors and returns the
original outputs, splitting the operands (``Tensor.real``/``.imag``, made contiguous) and
joining the outputs (``torch.complex``) around the launch.

>>> import torch
>>> split_complex([torch.tensor([1 + 2j])], (True,))
[tensor([1.]), tensor([2.])]
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from triton_backend.runtime.kernel_loading import CompiledFusion


def split_complex(tensors: Sequence[Any], is_complex: Sequence[bool]) -> list[Any]:
    """Each complex tensor as its contiguous real and imaginary parts; the others as they are."""
    out: list[Any] = []
    for tensor, split in zip(tensors, is_complex):
        out += [tensor.real.contiguous(), tensor.imag.contiguous()] if split else [tensor]
    return out


def join_complex(parts: Sequence[Any], is_complex: Sequence[bool]) -> tuple[Any, ...]:
    """The inverse of :func:`split_complex`: consecutive (real, imaginary) parts joined."""
    import torch  # noqa: PLC0415 - lazy: `check --triton` imports the driver without torch

    out, k = [], 0
    for joined in is_complex:
        if joined:
            out.append(torch.complex(parts[k], parts[k + 1]))
            k += 2
        else:
            out.append(parts[k])
            k += 1
    return tuple(out)


@dataclass(frozen=True)
class ComplexPairFusion(CompiledFusion):
    """The compiled expansion of a complex fusion, called with and returning complex tensors.

    ``operand_parts``/``output_parts``: per original operand/output, whether it is complex.
    """

    operand_parts: tuple[bool, ...] = ()
    output_parts: tuple[bool, ...] = ()

    @classmethod
    def of(cls, inner: CompiledFusion, operand_parts: tuple[bool, ...],
           output_parts: tuple[bool, ...]) -> "ComplexPairFusion":
        return cls(**{f.name: getattr(inner, f.name) for f in fields(CompiledFusion)},
                   operand_parts=operand_parts, output_parts=output_parts)

    def __call__(self, *tensors, **launch_options):
        parts = super().__call__(*split_complex(tensors, self.operand_parts), **launch_options)
        return join_complex(tuple(parts), self.output_parts)

    def launch_parts(self, device):
        """None: the expansion's kernel takes split parts, so it launches through
        :meth:`prepared_launch`, which splits and joins."""
        return None

    def prepared_launch(self, device, *, locked: bool = True, contiguous_inputs: bool = False):
        """The expansion's prepared launch, called with and returning complex tensors (the
        parts it splits off are contiguous, so ``contiguous_inputs`` holds for them too)."""
        launch = super().prepared_launch(device, locked=locked, contiguous_inputs=contiguous_inputs)
        operand_parts, output_parts = self.operand_parts, self.output_parts

        def complex_launch(*tensors):
            return join_complex(tuple(launch(*split_complex(tensors, operand_parts))),
                                output_parts)

        return complex_launch


__all__ = ["ComplexPairFusion", "join_complex", "split_complex"]
