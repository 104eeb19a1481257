"""Build the cuda artifacts of the fast-example models and their FP64 references (on this
machine: needs MLIR; the GPU side, bench/gpu_models.py, needs only the runtime).

    .venv/bin/python bench/build_cuda_models.py [--steps 6] [--only mlp,char_lm]

For every workload below: ``latch.compile(model, rule, example, target="cuda")`` →
``bench/artifacts/<workload>.latch``, and ``bench/artifacts/<workload>.ref.npz`` holding the
initial parameters, the batches of ``--steps`` updates (fixed seeds, as
tests/py/test_compile_numerics.py draws them), the float64 PyTorch losses, parameters and
optimizer moments after those updates (tests/py/reference.py), and PyTorch float32's own
relative L2 error per tensor on the same run (to tell ill-conditioned tensors apart).
Prints each program's report and writes bench/artifacts/build.json (compile times, kernel
counts, arena sizes).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))

# workload -> (model, rule config of tests/py/reference.py, partition pattern)
WORKLOADS = {
    "mlp_adamw_clip": ("mlp", "adamw_schedule_clip", "fc2.*"),
    "char_lm_adamw_clip": ("char_lm", "adamw_schedule_clip", "blocks.*.fc*"),
    "tiny_moe_adamw_clip": ("tiny_moe", "adamw_schedule_clip", "*.moe.w*"),
    "tiny_moe_partition_every": ("tiny_moe", "partition_every", "*.moe.w*"),
    "looped_adamw_clip": ("looped", "adamw_schedule_clip", "block.*"),
}


def batches_for(make, steps):
    _, example = make(seed=0)
    return [example] + [make(seed=1000 + s)[1] for s in range(1, steps)]


def write_reference(path, model, config, pattern, batches, **extra) -> None:
    """``path`` (.npz): the initial parameters, the batches, the float64 PyTorch losses,
    parameters and optimizer moments after training on them (tests/py/reference.py), and
    PyTorch float32's own relative L2 per tensor on the same run; ``extra``: more arrays."""
    import numpy as np
    import torch

    from reference import rel_l2, train_fp64, train_torch

    losses, params, states = train_fp64(model, config, batches, pattern)
    l32, p32, s32 = train_torch(model, config, batches, pattern, torch.float32)
    ref = {"losses": np.array(losses), "torch32_losses": np.array(l32),
           "steps": np.array(len(batches)), **{k: np.array(v) for k, v in extra.items()}}
    for n, t in model.named_parameters():
        ref[f"init/{n}"] = t.detach().numpy()
    for i, b in enumerate(batches):
        for j, x in enumerate(b):
            ref[f"batch/{i}/{j}"] = x.numpy()
    for n, a in {**params, **states}.items():
        ref[f"ref/{n}"] = a
        ref[f"torch32_err/{n}"] = np.array(rel_l2((p32 | s32)[n], a))
    np.savez(path, **ref)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--only", default="")
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "artifacts"))
    args = p.parse_args(argv)

    import latch
    from models import MODELS
    from reference import latch_rule

    os.makedirs(args.out, exist_ok=True)
    only = [w for w in args.only.split(",") if w]
    bpath = os.path.join(args.out, "build.json")   # --only rebuilds keep the others' entries
    summary = json.load(open(bpath)) if os.path.exists(bpath) else {}
    for workload, (model_name, config, pattern) in WORKLOADS.items():
        if only and workload not in only:
            continue
        make = MODELS[model_name]
        model, example = make(seed=0)
        t0 = time.perf_counter()
        prog = latch.compile(model, latch_rule(config, pattern), example, target="cuda")
        seconds = time.perf_counter() - t0
        path = os.path.join(args.out, f"{workload}.latch")
        prog.save(path)
        print(f"== {workload}: {path} ({os.path.getsize(path):,} bytes, {seconds:.1f} s)")
        print(prog.report())

        write_reference(os.path.join(args.out, f"{workload}.ref.npz"), model, config, pattern,
                        batches_for(make, args.steps))
        m = prog.manifest
        summary[workload] = {
            "model": model_name, "config": config, "pattern": pattern,
            "compile_seconds": round(seconds, 2), "stages": prog.compile_seconds,
            "launches": len(m["launches"]), "kernel_modules": len(m["modules"]),
            "state_copies": len(m["copies"]), **m["memory"],
            "parameters": int(sum(t.numel() for t in model.parameters())),
            "artifact_bytes": os.path.getsize(path)}
    with open(os.path.join(args.out, "build.json"), "w") as f:
        json.dump(summary, f, indent=1, sort_keys=True)
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
