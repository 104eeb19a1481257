"""The GradLev workload (WORKLOADS.md): a GPT-2-small-shaped model whose last block is
followed by a fast-weight layer that adapts token by token, compiled with ``latch.scan``.

Everything but the adaptation is ordinary PyTorch: token + position embeddings, pre-norm
GPT-2 blocks (causal attention, GELU MLP), then the fast-weight layer, a final norm and the
tied LM head.  The fast-weight layer projects the hidden state to per-head q, k, v (head dim
64 at full size), and per sequence and head a fast weight W (from a learned W0) takes, for
t = 0..T-1 in order, one gradient step on 1/2 |W k_t - v_t|^2 (step size eta,
``torch.func.grad`` inside the step function) and emits o_t = W_t q_t.  Only that scan is
handed to Latch: ``latch.compile(adapt, None, (W0, q, k, v), target=...)`` — on the GPU it
is ONE kernel that keeps each W in shared memory across all T steps.

    .venv/bin/python examples/gradlev_gpt2.py --small             # CPU, seconds
    python examples/gradlev_gpt2.py                               # GPT-2 small, GPU
    # or compile here and run on a GPU machine without MLIR (runtime only):
    .venv/bin/python examples/gradlev_gpt2.py --save-program gl.latch
    PYTHONPATH=. python examples/gradlev_gpt2.py --program gl.latch

Prints the relative L2 of the logits against the same model with the scan run eagerly in
float64, and the time of the adaptation alone (Latch vs the eager loop).  Exits 1 if the
logits disagree by more than 1e-4.
"""
from __future__ import annotations

import argparse
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import latch
from gradlev_small import make_step   # the step function (torch.func.grad inside)

FULL = dict(vocab=50257, d=768, layers=12, heads=12, seq=1024, batch=4)
SMALL = dict(vocab=1000, d=64, layers=2, heads=4, seq=64, batch=2)
ETA = 0.1


def adapt(W0, q, k, v):
    """W0 [P, D, D]; q, k, v [T, P, D] (P = batch x heads problems) -> (W_T, o [T, P, D])."""
    return latch.scan(make_step(ETA), W0, (q, k, v))


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=-1)
        q, k, v = (t.view(B, T, self.heads, D // self.heads).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(B, T, D))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class FastWeightLayer(nn.Module):
    """Per-head q, k, v from the hidden state; the scan ``run(W0, q, k, v)`` adapts."""

    def __init__(self, d, heads):
        super().__init__()
        self.heads, self.hd = heads, d // heads
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.W0 = nn.Parameter(torch.eye(self.hd).repeat(heads, 1, 1) * 0.5)
        self.proj = nn.Linear(d, d, bias=False)

    def scan_inputs(self, x):
        B, T, D = x.shape
        H, hd = self.heads, self.hd
        q, k, v = self.qkv(x).split(D, dim=-1)
        # [B, T, H, hd] -> [T, B*H, hd]; k normalized so that eta = 0.1 is a stable step
        q, v = ((t.view(B, T, H, hd).permute(1, 0, 2, 3).reshape(T, B * H, hd)) for t in (q, v))
        k = F.normalize(k.view(B, T, H, hd), dim=-1).permute(1, 0, 2, 3).reshape(T, B * H, hd)
        W0 = self.W0.unsqueeze(0).expand(B, H, hd, hd).reshape(B * H, hd, hd)
        return W0.contiguous(), q.contiguous(), k.contiguous(), v.contiguous()

    def forward(self, x, run):
        B, T, D = x.shape
        _, o = run(*self.scan_inputs(x))                          # o [T, B*H, hd]
        o = o.view(T, B, self.heads, self.hd).permute(1, 0, 2, 3).reshape(B, T, D)
        return x + self.proj(o)


class GradLevGPT2(nn.Module):
    def __init__(self, vocab, d, layers, heads, seq, **_):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.fast = FastWeightLayer(d, heads)
        self.ln = nn.LayerNorm(d)

    def trunk(self, ids):
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
        for b in self.blocks:
            x = b(x)
        return x

    def forward(self, ids, run=adapt):
        x = self.fast(self.trunk(ids), run)
        return self.ln(x) @ self.tok.weight.t()


def rel_l2(x, ref) -> float:
    return float((x.double() - ref.double()).norm() / ref.double().norm())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="a CPU-sized model (seconds)")
    ap.add_argument("--target", choices=("cpu", "cuda"), default=None,
                    help="default: cuda when a GPU is present and not --small")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--save-program", help="compile the scan for cuda, save it here, stop")
    ap.add_argument("--program", help="run a scan saved with --save-program (no MLIR needed)")
    a = ap.parse_args(argv)
    cfg = SMALL if a.small else FULL
    if a.save_program:
        H, hd, T = cfg["heads"], cfg["d"] // cfg["heads"], cfg["seq"]
        P = cfg["batch"] * H
        shapes = (torch.zeros(P, hd, hd),) + tuple(torch.zeros(T, P, hd) for _ in range(3))
        latch.compile(adapt, None, shapes, target="cuda").save(a.save_program)
        print(f"wrote {a.save_program}")
        return 0
    target = "cuda" if a.program else \
        a.target or ("cuda" if torch.cuda.is_available() and not a.small else "cpu")
    dev = torch.device("cuda" if target == "cuda" else "cpu")
    torch.manual_seed(0)
    model = GradLevGPT2(**cfg).to(dev).eval()
    ids = torch.randint(0, cfg["vocab"], (cfg["batch"], cfg["seq"]), device=dev)
    with torch.no_grad():
        h = model.trunk(ids)
        example = tuple(t.cpu() for t in model.fast.scan_inputs(h))
    P, T, D = example[0].shape[0], example[1].shape[0], example[0].shape[1]
    print(f"GradLev on GPT-2 ({cfg['layers']} layers, d {cfg['d']}, {cfg['heads']} heads, "
          f"{cfg['seq']} tokens, batch {cfg['batch']}): scan over {T} tokens of {P} fast "
          f"weights {D}x{D}, target {target}", flush=True)
    t0 = time.perf_counter()
    if a.program:
        fn = latch.load(a.program)
        print(f"loaded {a.program}", flush=True)
    else:
        fn = latch.compile(adapt, None, example, target=target)
        print(f"compiled in {time.perf_counter() - t0:.1f} s", flush=True)

    with torch.no_grad():
        logits = model(ids, run=fn)
        ref = model.double()(ids, run=adapt)          # the scan eagerly, in float64
        model.float()
    err = rel_l2(logits, ref)
    print(f"logits vs float64 (eager scan): relative L2 {err:.2e}", flush=True)

    inputs = tuple(t.to(dev) for t in model.fast.scan_inputs(h))

    def timed(f, reps):
        f(*inputs)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(reps):
            f(*inputs)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        return (time.perf_counter() - t0) / reps * 1e3
    with torch.no_grad():
        ms_latch = timed(fn, a.reps)
        ms_eager = timed(adapt, max(1, a.reps // 5 if T > 256 else a.reps))
    print(f"adaptation per {T}-step block: latch {ms_latch:.2f} ms, eager loop "
          f"{ms_eager:.2f} ms ({ms_eager / ms_latch:.1f}x)", flush=True)
    ok = math.isfinite(err) and err <= 1e-4
    print("OK" if ok else "FAIL: logits differ from float64", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
