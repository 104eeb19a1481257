"""Numerics of latch.compile() on the CPU target against PyTorch in float64, side by side with
eager PyTorch float32 on the same run: the worst relative L2 per model and rule.

    python bench/numerics_cpu.py [--steps 6]     # writes bench/results/numerics_cpu.json
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "py"))

import torch  # noqa: E402

import latch  # noqa: E402
from models import make_char_lm, make_mlp, make_tiny_moe  # noqa: E402
from reference import CONFIGS, latch_rule, rel_l2, train_torch  # noqa: E402

MODELS = {"mlp": (make_mlp, "fc2.*"), "char_lm": (make_char_lm, "blocks.*.fc*"),
          "tiny_moe": (make_tiny_moe, "*.moe.w*")}


def run(model_name: str, config: str, steps: int) -> dict:
    make, pattern = MODELS[model_name]
    model, example = make(seed=0)
    batches = [example] + [make(seed=1000 + s)[1] for s in range(1, steps)]
    prog = latch.compile(model, latch_rule(config, pattern), example)
    state = prog.init(model)
    losses = [prog.step(state, *b) for b in batches]
    l64, p64, s64 = train_torch(model, config, batches, pattern, torch.float64)
    l32, p32, s32 = train_torch(model, config, batches, pattern, torch.float32)
    got = state.tensors()
    ref = {**p64, **s64}
    ours = {n: rel_l2(got[n].numpy(), r) for n, r in ref.items()}
    theirs = {n: rel_l2({**p32, **s32}[n], r) for n, r in ref.items()}
    loss_ours = max(abs(a - b) / abs(b) for a, b in zip(losses, l64))
    loss_theirs = max(abs(a - b) / abs(b) for a, b in zip(l32, l64))
    worst = max(ours, key=ours.get)
    return {"model": model_name, "rule": config, "steps": steps, "tensors": len(ref),
            "latch_worst_rel_l2": ours[worst], "latch_worst_tensor": worst,
            "torch_fp32_on_that_tensor": theirs[worst],
            "torch_fp32_worst_rel_l2": max(theirs.values()),
            "latch_tensors_over_1e-5": sum(v > 1e-5 for v in ours.values()),
            "torch_fp32_tensors_over_1e-5": sum(v > 1e-5 for v in theirs.values()),
            "latch_loss_worst_rel": loss_ours, "torch_fp32_loss_worst_rel": loss_theirs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6)
    args = ap.parse_args()
    rows = []
    print(f"{'model':9s} {'rule':22s} {'latch worst':>12s} {'(tensor)':32s} {'torch fp32':>11s} "
          f"{'>1e-5 latch/torch':>18s}")
    for m in MODELS:
        for c in CONFIGS:
            r = run(m, c, args.steps)
            rows.append(r)
            print(f"{m:9s} {c:22s} {r['latch_worst_rel_l2']:12.2e} {r['latch_worst_tensor'][:32]:32s} "
                  f"{r['torch_fp32_on_that_tensor']:11.2e} "
                  f"{r['latch_tensors_over_1e-5']:>8d}/{r['torch_fp32_tensors_over_1e-5']:<8d}")
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                cwd=HERE).stdout.strip()
    except OSError:
        commit = "unknown"
    out = {"benchmark": "numerics_cpu", "when": datetime.datetime.now(datetime.timezone.utc).isoformat(),
           "commit": commit, "torch": torch.__version__, "python": platform.python_version(),
           "reference": "PyTorch float64 (tests/py/reference.py)", "rows": rows}
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "numerics_cpu.json"), "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
