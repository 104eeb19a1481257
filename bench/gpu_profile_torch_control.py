"""Where the torch.compile control's update time goes, kernel by kernel (GPU side): the
other half of bench/gpu_profile_launches.py's picture of a Latch update.

    PYTHONPATH=.:tests/py:bench python bench/gpu_profile_torch_control.py \
        [--batch 32] [--repeats 3] [--top 30]

Builds TinyMoE-196M for ``--batch`` from the bench's seed, and the torch-compile-graph
engine's update exactly as bench/tinymoe_bench_gpu.py does (torch.compile of the model,
bf16 autocast, clip 1.0, capturable foreach AdamW), warms it up (compiles), then records
``--repeats`` updates under ``torch.profiler`` (eager launches of the compiled code: the
same kernels the CUDA graph replays, without the graph) and reports, per kernel name, the
GPU time per update, in classes comparable to the Latch profile's: matmul (cuBLAS/CUTLASS
GEMMs), attention (flash / efficient SDPA kernels), triton (Inductor's fused elementwise and
reduction kernels), optimizer (multi-tensor apply), other.  Prints the totals per class and
the ``--top`` kernels; writes JSON to bench/results/profile-torch-compile-b<B>.json (and
$OUT/ when set) with the GPU, torch version and date.
"""
from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))
sys.path.insert(0, ROOT)

#: (class, substrings of a kernel name), first match wins
CLASSES = (
    ("attention", ("flash", "fmha", "attention", "attn")),
    ("matmul", ("gemm", "cutlass", "xmma", "nvjet", "cublas", "splitk", "sm90_")),
    ("optimizer", ("multi_tensor", "multitensor", "foreach")),
    ("triton", ("triton",)),
)


def kernel_class(name: str) -> str:
    low = name.lower()
    for cls, keys in CLASSES:
        if any(k in low for k in keys):
            return cls
    return "other"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args()

    import torch
    from torch.profiler import ProfilerActivity, profile
    from tinymoe_bench_gpu import torch_update
    from tinymoe_model import make_tinymoe_196m

    if not torch.cuda.is_available():
        print("gpu_profile_torch_control: no CUDA GPU here", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    model, (idx, tgt) = make_tinymoe_196m(batch=args.batch)
    update, _, _, _ = torch_update(args.batch, idx.cuda(), tgt.cuda(), model, compiled=True)

    for _ in range(3):
        update()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(args.repeats):
            update()
        torch.cuda.synchronize()
    per = collections.defaultdict(lambda: [0.0, 0])
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            t = ev.device_time if hasattr(ev, "device_time") else ev.cuda_time
            per[ev.name][0] += t / 1000.0 / args.repeats
            per[ev.name][1] += 1
    classes = collections.defaultdict(lambda: [0.0, 0])
    for name, (ms, n) in per.items():
        c = classes[kernel_class(name)]
        c[0] += ms
        c[1] += n / args.repeats
    total = sum(ms for ms, _ in per.values())
    print(f"torch-compile B{args.batch}: GPU time per update {total:.3f} ms in "
          f"{sum(n for _, n in per.values()) / args.repeats:.0f} kernels")
    for cls, (ms, n) in sorted(classes.items(), key=lambda t: -t[1][0]):
        print(f"  {cls:10s} {n:6.0f} kernels {ms:9.3f} ms ({100 * ms / total:5.1f}%)")
    top = sorted(per.items(), key=lambda t: -t[1][0])[:args.top]
    for name, (ms, n) in top:
        print(f"  {ms:8.3f} ms  x{n / args.repeats:4.0f}  {kernel_class(name):9s} {name[:100]}")
    rec = {
        "workload": f"tinymoe-b{args.batch}", "engine": "torch-compile",
        "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
        "commit": os.environ.get("LATCH_COMMIT", "unknown"),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "total_ms": round(total, 4),
        "classes": {c: {"ms": round(ms, 4), "kernels": n} for c, (ms, n) in classes.items()},
        "kernels": [{"name": name, "ms": round(ms, 4), "per_update": n / args.repeats,
                     "class": kernel_class(name)}
                    for name, (ms, n) in sorted(per.items(), key=lambda t: -t[1][0])],
    }
    name = f"profile-torch-compile-b{args.batch}.json"
    for d in filter(None, (os.path.join(ROOT, "bench", "results"), os.environ.get("OUT"))):
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, name), "w") as f:
            json.dump(rec, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
