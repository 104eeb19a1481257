"""Every GEMM shape of a TinyMoE B32 update: Latch's contraction kernel vs torch.matmul
(cuBLAS), bf16 operands, f32 accumulation.

    .venv/bin/python bench/gemm_shapes.py build            # here: needs MLIR
    LATCH_COMMIT=$(git rev-parse HEAD) PYTHONPATH=. python bench/gemm_shapes.py run  # GPU

``build`` writes one artifact per shape (bench/artifacts/gemm/<shape>.latch): a function
``c = a @ b`` on tensors (``linalg.matmul`` / ``linalg.batch_matmul`` with bf16 inputs and
an f32 result, what ``precision="bf16"`` produces) compiled for the cuda target; its
contraction launch is the kernel measured.  ``run`` checks each kernel's result against
``torch.matmul`` in float32 of the same bf16 inputs (relative L2), times the contraction
launch alone with CUDA events (median of ``--iters``) and ``torch.matmul`` on bf16 tensors
the same way, and prints TFLOP/s and the ratio; writes bench/results/gemm_shapes-<UTC>.json.
Shapes (WORKLOADS.md): qkv 32768x768x2304, attention out 32768x768x768, expert w1
8x10240x768x1024, expert w2 8x10240x1024x768, LM head 32768x768x32768, LM head
input-gradient 32768x32768x768; and B2 shapes with few output tiles (weight gradients
summed over 2048 tokens, the LM head input-gradient), which the compiler splits along k:
for those the time covers the contraction and the kernel that adds the partial sums.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
ART = os.path.join(ROOT, "bench", "artifacts", "gemm")
# name -> (batch or None, M, K, N)
SHAPES = {
    "qkv": (None, 32768, 768, 2304),
    "attn_out": (None, 32768, 768, 768),
    "expert_w1": (8, 10240, 768, 1024),
    "expert_w2": (8, 10240, 1024, 768),
    "lm_head": (None, 32768, 768, 32768),
    "lm_head_dgrad": (None, 32768, 32768, 768),
    # B2 (2 x 1024 tokens) shapes whose output tiles alone cannot fill the GPU: split-K
    "b2_router_wgrad": (None, 768, 2048, 8),
    "b2_attn_out_wgrad": (None, 768, 2048, 768),
    "b2_qkv_wgrad": (None, 768, 2048, 2304),
    "b2_lm_head_dgrad": (None, 2048, 32768, 768),
}


def mlir_text(batch, m, k, n) -> str:
    if batch is None:
        a, b, c = f"{m}x{k}", f"{k}x{n}", f"{m}x{n}"
        op = "linalg.matmul"
    else:
        a, b, c = f"{batch}x{m}x{k}", f"{batch}x{k}x{n}", f"{batch}x{m}x{n}"
        op = "linalg.batch_matmul"
    return f"""func.func @gemm(%a: tensor<{a}xbf16>, %b: tensor<{b}xbf16>) -> tensor<{c}xf32> {{
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<{c}xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<{c}xf32>) -> tensor<{c}xf32>
  %r = {op} ins(%a, %b : tensor<{a}xbf16>, tensor<{b}xbf16>) outs(%z : tensor<{c}xf32>) -> tensor<{c}xf32>
  return %r : tensor<{c}xf32>
}}
"""


def build(only) -> int:
    import time

    from latch.targets.cuda import compile_update_to_artifact
    os.makedirs(ART, exist_ok=True)
    for name, shape in SHAPES.items():
        if only and name not in only:
            continue
        t0 = time.perf_counter()
        m = compile_update_to_artifact(mlir_text(*shape), os.path.join(ART, f"{name}.latch"))
        kinds = [la["module"] for la in m["launches"]]
        print(f"{name}: {len(kinds)} launches {kinds}, {time.perf_counter() - t0:.1f} s",
              flush=True)
    return 0


def run(only, iters: int) -> int:
    import torch

    import latch
    from latch.runtime import driver as drv
    torch.backends.cuda.matmul.allow_tf32 = False
    env = {"gpu": torch.cuda.get_device_name(0), "driver": drv.driver_version(),
           "torch": torch.__version__, "commit": os.environ.get("LATCH_COMMIT", "unknown"),
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    print(json.dumps(env), flush=True)
    records = []
    gen = torch.Generator(device="cuda").manual_seed(0)

    def timed(fn, stream=None):
        times = []
        for _ in range(iters + 3):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record(stream)
            fn()
            end.record(stream)
            end.synchronize()
            times.append(start.elapsed_time(end))
        times = times[3:]
        return statistics.median(times), min(times), max(times)

    for name, (batch, m, k, n) in SHAPES.items():
        if only and name not in only:
            continue
        flop = 2.0 * (batch or 1) * m * n * k
        lead = () if batch is None else (batch,)
        a = torch.randn(*lead, m, k, device="cuda", generator=gen).bfloat16()
        b = (torch.randn(*lead, k, n, device="cuda", generator=gen) / k ** 0.5).bfloat16()
        prog = latch.load(os.path.join(ART, f"{name}.latch"))
        out = prog(a, b)
        ref = torch.matmul(a.float(), b.float())
        err = float((out - ref).norm() / ref.norm())
        del ref, out
        first = next(i for i, la in enumerate(prog.launches)
                     if la.spec["module"].startswith("latch_contract"))
        launch, rest = prog.launches[first], prog.launches[first:]

        def enqueue_contraction():          # + the split-K partial-sum kernel, if any
            for la in rest:
                la.enqueue(prog.stream)

        ours = timed(enqueue_contraction, prog.torch_stream)
        theirs = timed(lambda: torch.matmul(a, b))
        rec = dict(env, workload=f"gemm-{name}", shape=[batch, m, k, n],
                   rel_l2_vs_fp32=err, grid=launch.grid, block=launch.block,
                   launches=len(rest))
        for engine, (med, lo, hi) in (("latch", ours), ("cublas-torch.matmul", theirs)):
            records.append(dict(rec, engine=engine, median_ms=med, min_ms=lo, max_ms=hi,
                                tflops=flop / med / 1e9))
        print(f"{name:14s} rel L2 {err:.2e}  latch {ours[0]:8.3f} ms "
              f"{flop / ours[0] / 1e9:6.1f} TFLOP/s   cuBLAS {theirs[0]:8.3f} ms "
              f"{flop / theirs[0] / 1e9:6.1f} TFLOP/s   latch/cuBLAS throughput "
              f"{theirs[0] / ours[0]:.2f}", flush=True)
        prog.close()
        del a, b
        torch.cuda.empty_cache()
    stamp = env["date"].replace(":", "").replace("-", "")
    for folder in (os.path.join(ROOT, "bench", "results"), os.environ.get("OUT")):
        if folder:
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, f"gemm_shapes-{stamp}.json"), "w") as f:
                json.dump(records, f, indent=1)
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=["build", "run"])
    p.add_argument("--only", default="")
    p.add_argument("--iters", type=int, default=10)
    args = p.parse_args(argv)
    only = [x for x in args.only.split(",") if x]
    return build(only) if args.what == "build" else run(only, args.iters)


if __name__ == "__main__":
    sys.exit(main())
