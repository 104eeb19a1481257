"""Build the bf16 gradient probes: one cuda artifact per model, compiled with
``precision="bf16"`` and the rule ``optim.SGD(1.0)`` (no momentum, no weight decay), so that
one update from a fresh state gives the gradients exactly as ``g = p_before - p_after``
(float32 master weights: the subtraction adds only float32 rounding of ``p``, orders of
magnitude below bf16's).  bench/bf16_probe_gpu.py runs them on the GPU against PyTorch in
float64 and PyTorch's own bf16 autocast, both computed there.

    .venv/bin/python bench/bf16_probe_build.py [--only mlp,char_lm,tiny_moe,tiny_moe_e64,tinymoe-b2,tinymoe-b32]

Writes bench/artifacts/bf16probe/<workload>.latch and build.json (compile times, counts, a
fingerprint of the model's initial parameters so the GPU side can check that the same seed
built the same model there; weights are not carried).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))
OUT = os.path.join(ROOT, "bench", "artifacts", "bf16probe")
WORKLOADS = ("mlp", "char_lm", "tiny_moe", "tiny_moe_e64", "tinymoe-b2", "tinymoe-b32")


def make(workload: str):
    """(model, example inputs) of a workload, deterministic for seed 0."""
    if workload.startswith("tinymoe-b"):
        from tinymoe_model import make_tinymoe_196m
        return make_tinymoe_196m(batch=int(workload[len("tinymoe-b"):]))
    if workload.startswith("looped-tinymoe-b"):          # layers 2-5 twice (WORKLOADS.md)
        from tinymoe_model import make_looped_tinymoe_196m
        return make_looped_tinymoe_196m(batch=int(workload[len("looped-tinymoe-b"):]))
    if workload == "tiny_moe_e64":
        # the small TinyMoE with heads of 64 and 256-token sequences: its causal attention
        # takes latch-form-attention-kernels' fused kernels (wgmma on sm_90a; 4 query tiles,
        # the diagonal and below), which the 16-wide heads of 16 tokens above do not
        from models import make_tiny_moe
        return make_tiny_moe(seed=0, batch=4, seq=256, vocab=256, d=128, n_heads=2,
                             hidden=128)
    from models import MODELS
    return MODELS[workload](seed=0)


def fingerprint(model) -> list[float]:
    """Sum and sum of squares (float64) over all parameters."""
    s = q = 0.0
    for p in model.parameters():
        t = p.detach().double()
        s += float(t.sum())
        q += float((t * t).sum())
    return [s, q]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="mlp,char_lm,tiny_moe,tiny_moe_e64")
    args = p.parse_args(argv)
    import latch
    from latch import optim

    os.makedirs(OUT, exist_ok=True)
    bpath = os.path.join(OUT, "build.json")
    summary = json.load(open(bpath)) if os.path.exists(bpath) else {}
    for w in [x for x in args.only.split(",") if x]:
        if w not in WORKLOADS:
            raise SystemExit(f"unknown workload {w!r} (known: {', '.join(WORKLOADS)})")
        model, example = make(w)
        t0 = time.perf_counter()
        prog = latch.compile(model, optim.SGD(1.0), example, target="cuda", precision="bf16")
        seconds = time.perf_counter() - t0
        path = os.path.join(OUT, f"{w}.latch")
        prog.save(path)
        m = prog.manifest
        summary[w] = {"compile_seconds": round(seconds, 2), "launches": len(m["launches"]),
                      "kernel_modules": len(m["modules"]), **m["memory"],
                      "fingerprint": fingerprint(model),
                      "input_shapes": [list(x.shape) for x in example]}
        print(f"== {w}: {path} ({os.path.getsize(path):,} B, {seconds:.1f} s)", flush=True)
        print(prog.report(), flush=True)
    with open(bpath, "w") as f:
        json.dump(summary, f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
