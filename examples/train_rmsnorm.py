"""Training a small model whose RMSNorm is an HLO op, under ``torch.compile``.

    python examples/train_rmsnorm.py [--steps 20] [--backend inductor]

The RMSNorm is HLO text compiled to Triton kernels (``torch_op``); its scale is a trainable
``nn.Parameter``, and so are the weights of the linear layers around it (plain PyTorch).  The
op's backward is the VJP module ``fusion.autodiff`` derives from the same HLO, compiled to
kernels too.  The model trains with SGD under ``torch.compile(fullgraph=True)`` beside the same
model written in plain PyTorch; the losses and final weights must agree.  Runs on CPU through
the Triton interpreter (a few seconds a step on small shapes), or on a GPU when there is one.
"""
from __future__ import annotations

import argparse
import sys

import torch

from triton_backend.integrations.torch_op import torch_op

ROWS, FEATURES, HIDDEN = 8, 16, 32

RMSNORM = f"""HloModule train_rmsnorm
add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}
ENTRY main {{
  x = f32[{ROWS},{FEATURES}] parameter(0)
  g = f32[{FEATURES}] parameter(1)
  sq = f32[{ROWS},{FEATURES}] multiply(x, x)
  zero = f32[] constant(0)
  sum = f32[{ROWS}] reduce(sq, zero), dimensions={{1}}, to_apply=add
  n = f32[] constant({FEATURES})
  nb = f32[{ROWS}] broadcast(n), dimensions={{}}
  mean = f32[{ROWS}] divide(sum, nb)
  eps = f32[] constant(1e-06)
  eb = f32[{ROWS}] broadcast(eps), dimensions={{}}
  me = f32[{ROWS}] add(mean, eb)
  r = f32[{ROWS}] rsqrt(me)
  rb = f32[{ROWS},{FEATURES}] broadcast(r), dimensions={{0}}
  gb = f32[{ROWS},{FEATURES}] broadcast(g), dimensions={{1}}
  xr = f32[{ROWS},{FEATURES}] multiply(x, rb)
  ROOT y = f32[{ROWS},{FEATURES}] multiply(xr, gb)
}}
"""


def torch_rmsnorm(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * g


class Model(torch.nn.Module):
    """W2 · gelu(W1 · rmsnorm(x) · g): every weight trainable, the norm an HLO op or not."""

    def __init__(self, rmsnorm) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.rmsnorm = rmsnorm
        self.scale = torch.nn.Parameter(torch.ones(FEATURES))
        self.up = torch.nn.Linear(FEATURES, HIDDEN)
        self.down = torch.nn.Linear(HIDDEN, FEATURES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.nn.functional.gelu(self.up(self.rmsnorm(x, self.scale))))


def train(model: torch.nn.Module, steps: int, device: torch.device) -> list[float]:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
    data = torch.Generator().manual_seed(1)
    target = torch.nn.Linear(FEATURES, FEATURES, bias=False).to(device)  # what to learn
    torch.nn.init.normal_(target.weight, std=0.3, generator=data)
    batches = [torch.randn(ROWS, FEATURES, generator=data).to(device) for _ in range(4)]
    losses = []
    for step in range(steps):
        x = batches[step % len(batches)]
        with torch.no_grad():
            y = target(x)
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--backend", default="inductor", help="torch.compile backend")
    args = parser.parse_args(argv)
    op = torch_op(RMSNORM, name="example_train_rmsnorm")   # backward="auto": trainable
    device = op.compiled.device
    ours = Model(op).to(device)
    plain = Model(torch_rmsnorm).to(device)
    compiled = torch.compile(ours, fullgraph=True, backend=args.backend)
    ours_losses = train(compiled, args.steps, device)
    plain_losses = train(plain, args.steps, device)
    print(f"{op.qualname} on {device}, torch.compile(backend={args.backend!r}), SGD")
    for step in sorted({0, args.steps // 2, args.steps - 1}):
        print(f"  step {step:3d}  loss {ours_losses[step]:.6f}  (plain PyTorch "
              f"{plain_losses[step]:.6f})")
    same_losses = all(abs(a - b) <= 1e-4 * max(1.0, abs(b))
                      for a, b in zip(ours_losses, plain_losses))
    same_weights = all(torch.allclose(a, b, rtol=1e-4, atol=1e-5)
                       for a, b in zip(ours.parameters(), plain.parameters()))
    print("  OK" if same_losses and same_weights else "  MISMATCH")
    return 0 if same_losses and same_weights else 1


if __name__ == "__main__":
    sys.exit(main())
