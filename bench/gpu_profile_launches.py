"""Where an update's time goes, kernel by kernel (GPU side, runtime only).

    PYTHONPATH=.:tests/py:bench python bench/gpu_profile_launches.py ARTIFACT.latch \
        --model tinymoe-b2 [--top 25] [--repeats 3]

Loads the artifact, initializes its state from the model (``--model``: a workload of
bench/bf16_probe_build.py, rebuilt from its seed), runs one update, then enqueues the
update's launch list ``--repeats`` times with a CUDA event between consecutive launches
and reports, per launch, the median time: the sum (≈ the update without graph replay's
launch overhead), the time per kernel class (tensor-core contraction, SIMT contraction,
one-block kernels, fused attention, other), and the ``--top`` slowest launches with grid and block.
Writes the same as JSON to $OUT/profile-<artifact>.json when $OUT is set.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))


def kernel_class(launch, ptx_has_mma: dict) -> str:
    mod = launch.spec["module"]
    if mod.startswith("latch_contract"):
        return "contraction-mma" if ptx_has_mma.get(mod) else "contraction-simt"
    if mod.startswith("latch_attention"):
        return "attention"
    if [int(x) for x in launch.grid] == [1, 1, 1]:
        return "one-block"
    return "other"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("artifact")
    p.add_argument("--model", required=True)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    import torch

    import latch
    from bf16_probe_build import make

    model, example = make(args.model)
    prog = latch.load(args.artifact)
    state = prog.init(model)
    inputs = [x.cuda() for x in example]
    prog.step(state, *inputs)
    torch.cuda.synchronize()
    with zipfile.ZipFile(args.artifact) as z:
        ptx_has_mma = {m: b"mma.sync" in z.read(path) or b"wgmma.mma_async" in z.read(path)
                       for m, path in prog.manifest["modules"].items()}
    launches = prog.launches
    per = [[] for _ in launches]
    stream = prog.torch_stream
    for _ in range(args.repeats):
        events = [torch.cuda.Event(enable_timing=True) for _ in range(len(launches) + 1)]
        events[0].record(stream)
        for i, la in enumerate(launches):
            la.enqueue(prog.stream)
            events[i + 1].record(stream)
        stream.synchronize()
        for i in range(len(launches)):
            per[i].append(events[i].elapsed_time(events[i + 1]))
    med = [statistics.median(t) for t in per]
    classes: dict[str, list] = {}
    for la, t in zip(launches, med):
        c = classes.setdefault(kernel_class(la, ptx_has_mma), [0, 0.0])
        c[0] += 1
        c[1] += t
    total = sum(med)
    print(f"{os.path.basename(args.artifact)}: {len(launches)} launches, sum of medians "
          f"{total:.3f} ms")
    for c, (n, t) in sorted(classes.items(), key=lambda kv: -kv[1][1]):
        print(f"  {c:18s} {n:5d} launches {t:9.3f} ms ({100 * t / total:5.1f}%)")
    order = sorted(range(len(launches)), key=lambda i: -med[i])[:args.top]
    top = []
    for i in order:
        la = launches[i]
        top.append({"index": i, "ms": round(med[i], 4), "module": la.spec["module"],
                    "grid": la.grid, "block": la.block,
                    "class": kernel_class(la, ptx_has_mma)})
        print(f"  #{i:5d} {med[i]:8.3f} ms {la.spec['module']:28s} grid {la.grid} "
              f"block {la.block} {top[-1]['class']}")
    if os.environ.get("OUT"):
        name = os.path.basename(args.artifact)[:-len(".latch")]
        with open(os.path.join(os.environ["OUT"], f"profile-{name}.json"), "w") as f:
            every = [{"index": i, "ms": round(t, 4), "module": la.spec["module"],
                      "grid": la.grid, "block": la.block,
                      "class": kernel_class(la, ptx_has_mma)}
                     for i, (la, t) in enumerate(zip(launches, med))]
            json.dump({"artifact": args.artifact, "commit": os.environ.get("LATCH_COMMIT"),
                       "gpu": torch.cuda.get_device_name(), "total_ms": total,
                       "classes": classes, "top": top, "launches": every}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
