"""Selective updates: shared parameters step every microbatch, the experts accumulate their
gradients and step every N microbatches (``optim.partition`` + ``optim.every``), on the
mini TinyMoE of tests/py/models.py, checked against two PyTorch optimizers stepped by hand.

    .venv/bin/python examples/selective_updates.py [--every 4] [--microbatches 12]
        [--target cpu|cuda] [--save prog.latch]

The compiled program does not touch the expert weights or their moments between expert
steps: on the CPU an ``scf.if`` skips them (tests/lit/programs/selective-updates.py); on
the GPU the program has two update variants, one CUDA graph each, and the runtime picks one
from the every-counter (``prog.report()`` lists them).
"""
import argparse
import copy
import fnmatch
import os
import sys

import torch

import latch
from latch import optim

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "py"))
from models import make_tiny_moe  # noqa: E402

EXPERTS = "*.moe.w[123]"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--every", type=int, default=4)
    p.add_argument("--microbatches", type=int, default=12)
    p.add_argument("--target", default="cpu")
    p.add_argument("--save", default="")
    args = p.parse_args()
    model, example = make_tiny_moe(seed=0)
    rule = optim.partition({EXPERTS: optim.every(args.every, optim.AdamW(3e-3)),
                            "*": optim.AdamW(3e-3)})
    prog = latch.compile(model, rule, example, target=args.target)
    print(prog.report())
    if args.save:
        prog.save(args.save)
        print("saved", args.save)
    if args.target == "cuda" and not torch.cuda.is_available():
        return
    dev = "cuda" if args.target == "cuda" else "cpu"
    ref = copy.deepcopy(model).to(dev)
    named = dict(ref.named_parameters())
    experts = [n for n in named if fnmatch.fnmatchcase(n, EXPERTS)]
    shared = [n for n in named if n not in experts]
    opt_s = torch.optim.AdamW([named[n] for n in shared], lr=3e-3)
    opt_e = torch.optim.AdamW([named[n] for n in experts], lr=3e-3)
    acc = {n: torch.zeros_like(named[n]) for n in experts}
    state = prog.init(model)
    before = {n: state.parameters()[n].clone() for n in experts}
    for s in range(args.microbatches):
        batch = tuple(t.to(dev) for t in make_tiny_moe(seed=100 + s)[1])
        loss = prog.step(state, *batch)
        ref.zero_grad()
        ref_loss = ref(*batch)
        ref_loss.backward()
        opt_s.step()
        for n in experts:
            acc[n] += named[n].grad
        stepped = (s + 1) % args.every == 0
        if stepped:
            for n in experts:
                named[n].grad = acc[n] / args.every
                acc[n].zero_()
            opt_e.step()
        now = state.parameters()
        changed = any(not torch.equal(now[n], before[n]) for n in experts)
        before = {n: now[n].clone() for n in experts}
        print(f"microbatch {s:2d}: loss latch {loss:.6f} torch {ref_loss.item():.6f}; "
              f"experts {'stepped' if changed else 'untouched'}"
              f"{'' if changed == stepped else '  <-- differs from torch'}")
    got = state.parameters()
    worst = max(float((got[n].to(dev) - p.detach()).norm() / p.detach().norm())
                for n, p in ref.named_parameters())
    print(f"worst relative difference of the parameters: {worst:.2e}")


if __name__ == "__main__":
    main()
