"""Build the artifacts of the data-parallel GPU checks (here: needs MLIR; the GPU side,
bench/distributed_gpu.py, needs only the runtime).

    .venv/bin/python bench/distributed_build.py [--ranks 2] [--steps 6] [--only mlp,char_lm]
        [--tinymoe]

Numerics, for the fast-example models whose loss is a mean over the batch (the MLP and the
char LM; tests/py/models.py): with G the model's usual batch and N ``--ranks``,

* ``bench/artifacts/dp/<model>-dp.latch``: ``distributed=True``, batch G/N per rank;
* ``bench/artifacts/dp/<model>-1gpu.latch``: the same update on one GPU, batch G;
* ``bench/artifacts/dp/<model>.ref.npz``: the initial parameters, ``--steps`` global batches
  and the float64 PyTorch parameters and moments after those updates (tests/py/reference.py,
  AdamW + warmup-cosine + clipping), plus PyTorch float32's own error.

N ranks with batch G/N each must match one GPU with batch G: averaging the ranks' gradients
of their shards' mean losses is the gradient of the global batch's mean loss.  (A loss that
is not a mean over examples — TinyMoE's load-balancing term, its capacity limit — differs
between the two, in Latch as in DDP.)

``--tinymoe``: also TinyMoE-196M per GPU at ``--tinymoe-batches`` (default 32: recipe Q;
2: recipe B2), bf16, ``distributed=True`` (``bench/artifacts/dp/tinymoe196m-b<B>-bf16-dp.latch``)
for the scaling benchmark; the one-GPU programs are bench/tinymoe196m_build.py's.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
OUT = os.path.join(ROOT, "bench", "artifacts", "dp")
CONFIG, PATTERN = "adamw_schedule_clip", ""


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--only", default="mlp,char_lm")
    p.add_argument("--tinymoe", action="store_true", help="also TinyMoE-196M at --tinymoe-batches")
    p.add_argument("--tinymoe-batches", default="32")
    p.add_argument("--bucket-mb", type=float, default=0.004,
                   help="bucket size of the small models (small: several buckets, so the "
                        "check covers overlapping reductions); TinyMoE uses the default 25")
    args = p.parse_args(argv)

    import latch
    from build_cuda_models import batches_for, write_reference
    from models import MODELS
    from reference import latch_rule

    os.makedirs(OUT, exist_ok=True)
    summary = {}
    if os.path.exists(os.path.join(OUT, "build.json")):
        summary = json.load(open(os.path.join(OUT, "build.json")))
    summary.update(ranks=args.ranks, steps=args.steps)
    for name in [w for w in args.only.split(",") if w]:
        make = MODELS[name]
        model, example = make(seed=0)
        G = example[0].shape[0]
        if G % args.ranks:
            raise SystemExit(f"{name}: batch {G} does not split over {args.ranks} ranks")
        shard = tuple(x[: G // args.ranks] for x in example)
        rule = latch_rule(CONFIG, PATTERN)
        t0 = time.perf_counter()
        dp = latch.compile(model, rule, shard, target="cuda", distributed=True,
                           bucket_mb=args.bucket_mb)
        dp.save(os.path.join(OUT, f"{name}-dp.latch"))
        one = latch.compile(model, rule, example, target="cuda")
        one.save(os.path.join(OUT, f"{name}-1gpu.latch"))
        print(f"== {name}: G={G}, {args.ranks} ranks x {G // args.ranks} "
              f"({time.perf_counter() - t0:.1f} s)\n{dp.report()}", flush=True)
        write_reference(os.path.join(OUT, f"{name}.ref.npz"), model, CONFIG, PATTERN,
                        batches_for(make, args.steps), ranks=args.ranks)
        summary[name] = {"global_batch": G, "bucket_mb": args.bucket_mb,
                         "collectives": dp.manifest.get("collectives", []),
                         "launches_dp": len(dp.manifest["launches"]),
                         "launches_1gpu": len(one.manifest["launches"])}
    if args.tinymoe:
        from tinymoe_model import make_tinymoe_196m, tinymoe_rule

        for batch in [int(b) for b in args.tinymoe_batches.split(",") if b]:
            model, example = make_tinymoe_196m(batch=batch)
            t0 = time.perf_counter()
            prog = latch.compile(model, tinymoe_rule("B2" if batch == 2 else "Q"), example,
                                 target="cuda", precision="bf16", distributed=True)
            name = f"tinymoe196m-b{batch}-bf16-dp"
            prog.save(os.path.join(OUT, f"{name}.latch"))
            seconds = time.perf_counter() - t0
            print(f"== {name} ({seconds:.1f} s)\n{prog.report()}", flush=True)
            summary[name] = {
                "compile_s": round(seconds, 1), "launches": len(prog.manifest["launches"]),
                "buckets": len(prog.manifest.get("collectives", [])),
                "arena_bytes": prog.manifest["arena_bytes"]}
    with open(os.path.join(OUT, "build.json"), "w") as f:
        json.dump(summary, f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
