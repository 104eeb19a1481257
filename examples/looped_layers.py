"""Looped layers with shared weights (``latch.repeat``), trained with Latch next to eager
PyTorch running the same model (in eager mode ``latch.repeat`` is a plain loop).

    .venv/bin/python examples/looped_layers.py [--times 3] [--steps 20] [--target cpu|cuda]
                                               [--tuple-carry]

The compiler traces the block once and keeps a forward loop and a reverse loop in the IR
(tests/lit/programs/repeat-training.py); the shared weights' gradients accumulate across
the visits.  ``--target cuda`` compiles for the GPU (loops unrolled into the launch list)
and, without a GPU here, saves the artifact (``--save looped.latch``) to run elsewhere.

The carry may be a tuple (any pytree) of tensors: ``--tuple-carry`` carries
``(hidden, penalty_sum)`` through the loop, each visit adding a penalty on its update that
the loss reads only through the carry (as the looped TinyMoE carries its MoE aux loss:
tests/lit/programs/repeat-tuple-carry.py); gradients flow back through both leaves.
"""
import argparse
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

import latch
from latch import optim


class Block(nn.Module):
    def __init__(self, d=16, h=32):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d, h), nn.Linear(h, d)

    def forward(self, x):
        return x + self.fc2(torch.tanh(self.fc1(x)))


class PenaltyBlock(Block):
    """block(carry) -> carry with carry = (hidden, penalty sum)."""

    def forward(self, carry):
        x, penalty = carry
        d = self.fc2(torch.tanh(self.fc1(x)))
        return x + d, penalty + (d * d).mean()


class Looped(nn.Module):
    def __init__(self, times, tuple_carry=False):
        super().__init__()
        self.pre, self.post = nn.Linear(8, 16), nn.Linear(16, 4)
        self.block = PenaltyBlock() if tuple_carry else Block()
        self.times, self.tuple_carry = times, tuple_carry

    def forward(self, x, y):
        h = self.pre(x)
        if not self.tuple_carry:
            return F.mse_loss(self.post(latch.repeat(self.block, h, self.times)), y)
        h, penalty = latch.repeat(self.block, (h, h.new_zeros(())), self.times)
        return F.mse_loss(self.post(h), y) + 0.1 * penalty / self.times


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--times", type=int, default=3)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--target", default="cpu")
    p.add_argument("--save", default="")
    p.add_argument("--tuple-carry", action="store_true",
                   help="carry (hidden, penalty sum) through the loop")
    args = p.parse_args()
    torch.manual_seed(0)
    model = Looped(args.times, args.tuple_carry)
    x, y = torch.randn(32, 8), torch.randn(32, 4)
    prog = latch.compile(model, optim.AdamW(1e-2), (x, y), target=args.target)
    print(prog.report())
    if args.save:
        prog.save(args.save)
        print("saved", args.save)
    if args.target == "cuda" and not torch.cuda.is_available():
        return
    dev = "cuda" if args.target == "cuda" else "cpu"
    ref = copy.deepcopy(model).to(dev)
    opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    state = prog.init(model)
    x, y = x.to(dev), y.to(dev)
    print(f"{'step':>4}  {'latch':>10}  {'eager':>10}")
    for s in range(args.steps):
        loss = prog.step(state, x, y)
        opt.zero_grad()
        ref_loss = ref(x, y)
        ref_loss.backward()
        opt.step()
        if s % 5 == 0 or s == args.steps - 1:
            print(f"{s:4d}  {loss:10.6f}  {ref_loss.item():10.6f}")
    got = state.parameters()
    worst = max(float((got[n].to(dev) - p.detach()).norm() / p.detach().norm())
                for n, p in ref.named_parameters())
    print(f"worst relative difference of the parameters after {args.steps} updates: {worst:.2e}")


if __name__ == "__main__":
    main()
