"""Train a tiny character-level transformer LM with Latch, PyTorch alongside for comparison.

    python examples/char_lm.py [--steps 150] [--target cpu|cuda]
    python examples/char_lm.py --target cuda --save char_lm.latch   # compile only (needs MLIR)
    PYTHONPATH=. python examples/char_lm.py --load char_lm.latch    # GPU machine, runtime only

The default target is the GPU when one is present (and MLIR is there to compile for it),
otherwise the CPU.  The model is compiled once with ``latch.compile`` (AdamW, warmup+cosine schedule, global
norm clipping, one whole update per call) and trained on the text in examples/data; the same
model and rule run in eager PyTorch from the same initial weights on the same batches, and
both losses are printed side by side.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))


class Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class CharLM(nn.Module):
    """forward(tokens, targets) -> mean cross-entropy of the next character."""

    def __init__(self, vocab: int, d: int = 48, layers: int = 2, heads: int = 4, seq: int = 32):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab)

    def forward(self, tokens, targets):
        x = self.tok(tokens) + self.pos.weight[: tokens.shape[1]]
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def batches(text: str, seq: int, batch: int, steps: int, seed: int = 0):
    chars = sorted(set(text))
    ids = torch.tensor([chars.index(c) for c in text], dtype=torch.int64)
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        starts = torch.randint(0, len(ids) - seq - 1, (batch,), generator=g)
        x = torch.stack([ids[s:s + seq] for s in starts])
        y = torch.stack([ids[s + 1:s + seq + 1] for s in starts])
        yield x, y


def torch_reference_step(model, opt, sched, x, y, max_norm):
    opt.zero_grad(set_to_none=True)
    loss = model(x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    sched.step()
    return loss.item()


def progress(i: int, n: int, text: str) -> None:
    width = 24
    done = int(width * i / n)
    sys.stdout.write(f"\r[{'#' * done}{'.' * (width - done)}] {i:4d}/{n} {text}")
    sys.stdout.flush()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--target", default=None, help="cpu or cuda (default: cuda with a GPU)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--save", metavar="PATH", help="compile, save the program there and stop")
    ap.add_argument("--load", metavar="PATH", help="run a saved program (no compiler needed)")
    args = ap.parse_args()

    import latch

    target = args.target or default_target()
    text = open(os.path.join(HERE, "data", "alice.txt")).read()
    vocab, seq, batch = len(set(text)), 32, 8
    peak, warmup, max_norm = 3e-3, 20, 1.0

    torch.manual_seed(args.seed)
    model = CharLM(vocab, seq=seq)
    reference = CharLM(vocab, seq=seq)
    reference.load_state_dict(model.state_dict())
    n_params = sum(p.numel() for p in model.parameters())
    print(f"char-level LM: {n_params:,} parameters, vocab {vocab}, batch {batch} x {seq} "
          f"characters, {args.steps} updates of AdamW + warmup/cosine + clipping")

    if args.load:
        t0 = time.perf_counter()
        prog = latch.load(args.load)
        print(f"loaded {args.load} in {time.perf_counter() - t0:.1f} s")
    else:
        from latch import optim
        rule = optim.clip_grad_norm(max_norm, optim.AdamW(
            optim.warmup_cosine(peak, warmup, args.steps, 0.1), betas=(0.9, 0.95),
            weight_decay=0.1))
        x0, y0 = next(batches(text, seq, batch, 1, seed=args.seed))
        t0 = time.perf_counter()
        prog = latch.compile(model, rule, (x0, y0), target=target)
        print(f"compiled for {target} in {time.perf_counter() - t0:.1f} s")
        print(prog.report())
        if args.save:
            prog.save(args.save)
            print(f"saved to {args.save}; run it with: PYTHONPATH=. python "
                  f"examples/char_lm.py --load {args.save} --steps {args.steps}")
            return
    device = "cuda" if prog.manifest.get("kind") == "cuda-update" else "cpu"
    state = prog.init(model)
    reference.to(device)

    opt = torch.optim.AdamW(reference.parameters(), lr=peak, betas=(0.9, 0.95), weight_decay=0.1)

    def lr_at(s):
        if s < warmup:
            return (s + 1) / warmup
        p = min(1.0, (s - warmup) / max(1, args.steps - warmup))
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)

    t_latch = t_torch = 0.0
    rows = []
    for i, (x, y) in enumerate(batches(text, seq, batch, args.steps, seed=args.seed + 1), 1):
        x, y = x.to(device), y.to(device)
        t = time.perf_counter()
        l_latch = prog.step(state, x, y)
        t_latch += time.perf_counter() - t
        t = time.perf_counter()
        l_torch = torch_reference_step(reference, opt, sched, x, y, max_norm)
        t_torch += time.perf_counter() - t
        rows.append((i, l_latch, l_torch))
        progress(i, args.steps, f"loss latch {l_latch:.4f}  torch {l_torch:.4f}")
    print()
    print(f"{'step':>6} {'latch loss':>11} {'torch loss':>11}")
    for i, a, b in rows:
        if i == 1 or i % max(1, args.steps // 8) == 0 or i == len(rows):
            print(f"{i:6d} {a:11.4f} {b:11.4f}")
    diffs = [abs(a - b) / max(abs(b), 1e-12) for _, a, b in rows]
    drift = max(abs(p.cpu() - q.detach().cpu()).max().item() for p, q in
                zip(state.parameters().values(), reference.parameters()))
    print(f"max relative loss difference {max(diffs):.2e}; max parameter difference after "
          f"{args.steps} updates {drift:.2e}")
    where = (torch.cuda.get_device_name() if device == "cuda"
             else f"CPU, {torch.get_num_threads()} threads")
    print(f"time per update (wall, including the first steps): latch "
          f"{1e3 * t_latch / args.steps:.2f} ms, torch eager {1e3 * t_torch / args.steps:.2f} ms "
          f"({where})")


def default_target() -> str:
    """cuda when a GPU is present and the compiler can run here, else cpu."""
    try:
        import mlir  # noqa: F401
    except ImportError:
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


if __name__ == "__main__":
    main()
