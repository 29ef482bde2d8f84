"""RMSNorm from HLO text, used as a torch custom op inside a ``torch.nn.Module``.

    python examples/rmsnorm_torch.py                       # the hand-written HLO below
    python examples/rmsnorm_torch.py --hlo tests/data/hlo/rmsnorm.before.hlo   # JAX-lowered

The JAX-lowered file comes from ``jax.jit(rmsnorm).lower(x, g).as_text(dialect="hlo")``
(see ``tests/data/hlo/generate_corpus.py``).  Runs on CPU through the Triton interpreter, or
on a GPU when there is one.  Prints the largest difference to PyTorch's own RMSNorm, in eager
mode and under ``torch.compile(fullgraph=True)``, and of the gradient of the trainable weight
(the op's backward is the VJP module ``fusion.autodiff`` derives from the HLO).  Training a
model with such ops for some steps: ``examples/train_rmsnorm.py``.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from triton_backend.integrations.torch_op import torch_op

ROWS, FEATURES = 16, 64

HAND_WRITTEN = f"""HloModule rmsnorm_hand_written
add_f32 {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}
ENTRY main {{
  x = f32[{ROWS},{FEATURES}] parameter(0)
  g = f32[{FEATURES}] parameter(1)
  sq = f32[{ROWS},{FEATURES}] multiply(x, x)
  zero = f32[] constant(0)
  sum = f32[{ROWS}] reduce(sq, zero), dimensions={{1}}, to_apply=add_f32
  inv_n = f32[] constant({1.0 / FEATURES})
  inv_nb = f32[{ROWS}] broadcast(inv_n), dimensions={{}}
  mean = f32[{ROWS}] multiply(sum, inv_nb)
  eps = f32[] constant(1e-06)
  epsb = f32[{ROWS}] broadcast(eps), dimensions={{}}
  shifted = f32[{ROWS}] add(mean, epsb)
  r = f32[{ROWS}] rsqrt(shifted)
  rb = f32[{ROWS},{FEATURES}] broadcast(r), dimensions={{0}}
  normed = f32[{ROWS},{FEATURES}] multiply(x, rb)
  gb = f32[{ROWS},{FEATURES}] broadcast(g), dimensions={{1}}
  ROOT y = f32[{ROWS},{FEATURES}] multiply(normed, gb)
}}
"""


class HloRMSNorm(torch.nn.Module):
    """RMSNorm whose forward is the compiled HLO module; ``weight`` is trainable."""

    def __init__(self, hlo_text: str, name: str) -> None:
        super().__init__()
        self.op = torch_op(hlo_text, name=name)
        dtype, (features,) = self.op.signature.inputs[1]
        self.weight = torch.nn.Parameter(torch.linspace(0.5, 1.5, features, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.op(x, self.weight)


def reference(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hlo", type=Path, help="an RMSNorm HLO module (x, g) -> y")
    args = parser.parse_args(argv)
    text = args.hlo.read_text() if args.hlo else HAND_WRITTEN
    name = "example_rmsnorm_" + (args.hlo.stem.replace(".", "_") if args.hlo else "hand_written")
    model = HloRMSNorm(text, name)
    device = model.op.compiled.device
    model = model.to(device)
    x_dtype, x_dims = model.op.signature.inputs[0]
    x = torch.randn(x_dims, generator=torch.Generator().manual_seed(0), dtype=x_dtype).to(device)
    expected = reference(x, model.weight)
    eager = model(x)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")(x)
    # d(sum(y * c))/d(weight), through the op's backward and through PyTorch's own ops.
    c = torch.linspace(-1.0, 1.0, x_dims[-1], dtype=x_dtype, device=device)
    (grad,) = torch.autograd.grad((compiled * c).sum(), model.weight)
    (expected_grad,) = torch.autograd.grad((expected * c).sum(), model.weight)
    print(f"{model.op.qualname} on {device}: input {list(x_dims)}")
    print(f"  eager            max |diff| = {(eager - expected).abs().max().item():.3e}")
    print(f"  torch.compile    max |diff| = {(compiled - expected).abs().max().item():.3e}")
    print(f"  weight gradient  max |diff| = {(grad - expected_grad).abs().max().item():.3e}")
    ok = (torch.allclose(eager, expected, rtol=1e-5, atol=1e-5) and torch.equal(eager, compiled)
          and torch.allclose(grad, expected_grad, rtol=1e-4, atol=1e-4))
    print("  OK" if ok else "  MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
