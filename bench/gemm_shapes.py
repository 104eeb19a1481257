"""Every GEMM shape of a TinyMoE B32 update: Latch's contraction kernel vs torch.matmul
(cuBLAS), bf16 operands, f32 accumulation.

    .venv/bin/python bench/gemm_shapes.py build [--variant V]   # here: needs MLIR
    LATCH_COMMIT=$(git rev-parse HEAD) PYTHONPATH=. python bench/gemm_shapes.py run  # GPU

``build`` writes one artifact per shape (bench/artifacts/gemm/<shape>.latch): a function
``c = a @ b`` on tensors (a ``linalg.generic`` contraction with bf16 inputs and
an f32 result, what ``precision="bf16"`` produces; the operands stored as the model's
products store them, see ``SHAPES``) compiled for the cuda target; its
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
# name -> (batch or None, M, K, N, layout); layout: how a and b are stored, as the model's
# products store them — "nt": a [M, K], b [N, K] (x @ W^T, a forward: both contiguous along
# k); "nn": b [K, N] (an input gradient dy @ W); "tn": a [K, M] (a weight gradient
# dy^T @ x: both contiguous along their rows, the tokens are k)
SHAPES = {
    "qkv": (None, 32768, 768, 2304, "nt"),
    "attn_out": (None, 32768, 768, 768, "nt"),
    "expert_w1": (8, 10240, 768, 1024, "nn"),
    "expert_w2": (8, 10240, 1024, 768, "nn"),
    "lm_head": (None, 32768, 768, 32768, "nt"),
    "lm_head_dgrad": (None, 32768, 32768, 768, "nn"),
    "qkv_dgrad": (None, 32768, 2304, 768, "nn"),
    "qkv_wgrad": (None, 2304, 32768, 768, "tn"),
    # B2 (2 x 1024 tokens) shapes whose output tiles alone cannot fill the GPU: split-K
    "b2_router_wgrad": (None, 768, 2048, 8, "tn"),
    "b2_attn_out_wgrad": (None, 768, 2048, 768, "tn"),
    "b2_qkv_wgrad": (None, 768, 2048, 2304, "tn"),
    "b2_lm_head_dgrad": (None, 2048, 32768, 768, "nn"),
}


def stored_shapes(batch, m, k, n, layout) -> tuple[tuple, tuple]:
    lead = () if batch is None else (batch,)
    a = (k, m) if layout == "tn" else (m, k)
    b = (n, k) if layout == "nt" else (k, n)
    return lead + a, lead + b


def mlir_text(batch, m, k, n, layout="nn", out: str = "f32") -> str:
    """``c = a @ b`` (a and b stored as ``layout`` says) as a linalg.generic on tensors;
    ``out="bf16"``: the f32 sums rounded to bf16 (what autocast's matmul returns, and what
    cuBLAS writes: the contraction kernel then writes the rounded sums itself)."""
    sa, sb = stored_shapes(batch, m, k, n, layout)
    lead = "" if batch is None else "b, "
    dims = f"({lead}m, n, k)"
    ma = f"{dims} -> ({lead}{'k, m' if layout == 'tn' else 'm, k'})"
    mb = f"{dims} -> ({lead}{'n, k' if layout == 'nt' else 'k, n'})"
    mc = f"{dims} -> ({lead}m, n)"
    its = ('"parallel", ' if batch else "") + '"parallel", "parallel", "reduction"'
    ta, tb = ("x".join(map(str, x)) for x in (sa, sb))
    tc = "x".join(map(str, (() if batch is None else (batch,)) + (m, n)))
    return f"""func.func @gemm(%a: tensor<{ta}xbf16>, %b: tensor<{tb}xbf16>) -> tensor<{tc}x{out}> {{
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<{tc}xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<{tc}xf32>) -> tensor<{tc}xf32>
  %r = linalg.generic {{indexing_maps = [affine_map<{ma}>, affine_map<{mb}>, affine_map<{mc}>],
                       iterator_types = [{its}]}}
      ins(%a, %b : tensor<{ta}xbf16>, tensor<{tb}xbf16>) outs(%z : tensor<{tc}xf32>) {{
  ^bb0(%x: bf16, %y: bf16, %acc: f32):
    %xe = arith.extf %x : bf16 to f32
    %ye = arith.extf %y : bf16 to f32
    %p = arith.mulf %xe, %ye : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  }} -> tensor<{tc}xf32>
{_rounded(tc, its.count("parallel")) if out == "bf16" else f"  return %r : tensor<{tc}xf32>"}
}}
"""


def _rounded(tc: str, rank: int) -> str:
    """The body's tail for ``out="bf16"``: round %r to bf16 and return that."""
    ids = ", ".join(f"d{i}" for i in range(rank))
    its = ", ".join(['"parallel"'] * rank)
    ident = f"affine_map<({ids}) -> ({ids})>"
    return f"""  %e16 = tensor.empty() : tensor<{tc}xbf16>
  %r16 = linalg.generic {{indexing_maps = [{ident}, {ident}], iterator_types = [{its}]}}
      ins(%r : tensor<{tc}xf32>) outs(%e16 : tensor<{tc}xbf16>) {{
  ^bb0(%v: f32, %o: bf16):
    %t = arith.truncf %v : f32 to bf16
    linalg.yield %t : bf16
  }} -> tensor<{tc}xbf16>
  return %r16 : tensor<{tc}xbf16>"""


#: build variants, measured side by side with the default build (each written as
#: <shape>-<variant>.latch): "mmasync" — the sm_90 mma.sync kernel the wgmma one replaced;
#: "wide" / "deep" — that kernel's 128x256 tile and 64-deep k-tiles (measured, left off);
#: "n128", "n256", "s3", "n256s3" — the wgmma kernel with 128x128 / 128x256 tiles
#: everywhere (by default contraction_wgmma.n_tile chooses) and/or three stages;
#: "bf16out" — the default kernels writing the sums rounded to bf16, as cuBLAS does (and as
#: the model's autocast products do); "n128s3" — 128x128 tiles in three stages (96 KB of
#: shared memory: two blocks an SM); "ungrouped" — the tiles in the grid's own order
#: (form_contraction_kernels.tile_order off), "bf16out-ungrouped" both; "bf16out-direct" —
#: the rounded sums stored from the accumulator layout (contraction_wgmma.STAGE_OUTPUT off)
VARIANTS = ("mmasync", "wide", "deep", "n128", "n256", "s3", "n256s3", "bf16out", "n128s3",
            "ungrouped", "bf16out-ungrouped", "bf16out-direct")


def build(only, variant: str = "") -> int:
    """Compile every shape (the default build, or ``variant``, see ``VARIANTS``)."""
    import time

    import latch.passes.contraction_wgmma as wg
    import latch.passes.form_contraction_kernels as fck
    from latch.targets.cuda import DEFAULT_CHIP, compile_update_to_artifact
    os.makedirs(ART, exist_ok=True)
    fck.WIDE_TILES = variant == "wide"
    fck.DEEP_K_TILES = variant == "deep"
    chip = "sm_90" if variant in ("mmasync", "wide", "deep") else DEFAULT_CHIP
    # one build a process: a variant changes the module defaults it names, no others
    wg.BN = 256 if variant.startswith("n256") else 128 if variant.startswith("n128") else wg.BN
    wg.STAGES = 3 if variant.endswith("s3") else wg.STAGES
    if variant.endswith("ungrouped"):
        fck.RASTER_GROUP = 1 << 30
    if variant.endswith("direct"):
        wg.STAGE_OUTPUT = False
    suffix = f"-{variant}" if variant else ""
    for name, shape in SHAPES.items():
        if only and name not in only:
            continue
        t0 = time.perf_counter()
        out = "bf16" if variant.startswith("bf16out") else "f32"
        m = compile_update_to_artifact(mlir_text(*shape, out=out),
                                       os.path.join(ART, f"{name}{suffix}.latch"), chip=chip)
        kinds = [la["module"] for la in m["launches"]]
        print(f"{name}{suffix}: {len(kinds)} launches {kinds}, "
              f"{time.perf_counter() - t0:.1f} s", flush=True)
    return 0


def run(only, iters: int) -> int:
    import torch

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

    for name, (batch, m, k, n, layout) in SHAPES.items():
        if only and name not in only:
            continue
        flop = 2.0 * (batch or 1) * m * n * k
        sa, sb = stored_shapes(batch, m, k, n, layout)
        a = torch.randn(*sa, device="cuda", generator=gen).bfloat16()
        b = (torch.randn(*sb, device="cuda", generator=gen) / k ** 0.5).bfloat16()
        # the product's operands as torch.matmul takes them (transposed views: cuBLAS
        # reads the stored layout as it is)
        ma = a.transpose(-1, -2) if layout == "tn" else a
        mb = b.transpose(-1, -2) if layout == "nt" else b
        for variant in [""] + [f"-{v}" for v in VARIANTS]:
            path = os.path.join(ART, f"{name}{variant}.latch")
            if os.path.exists(path):
                records += _measure(f"{name}{variant}", path, a, b, ma, mb, flop, timed,
                                    dict(env, workload=f"gemm-{name}{variant}",
                                         shape=[batch, m, k, n], layout=layout))
        del a, b, ma, mb
        torch.cuda.empty_cache()
    stamp = env["date"].replace(":", "").replace("-", "")
    from results_files import save_records
    save_records(records, f"gemm_shapes-{stamp}")
    return 0


def _measure(name, path, a, b, ma, mb, flop, timed, rec) -> list:
    """The artifact at ``path`` against torch.matmul on the same operands: two records."""
    import torch

    import latch
    records = []
    prog = latch.load(path)
    out = prog(a, b)
    ref = torch.matmul(ma.float(), mb.float())
    err = float((out.float() - ref).norm() / ref.norm())
    del ref, out
    first = next(i for i, la in enumerate(prog.launches)
                 if la.spec["module"].startswith("latch_contract"))
    launch, rest = prog.launches[first], prog.launches[first:]

    def enqueue_contraction():          # + the split-K partial-sum kernel, if any
        for la in rest:
            la.enqueue(prog.stream)

    ours = timed(enqueue_contraction, prog.torch_stream)
    theirs = timed(lambda x=ma, y=mb: torch.matmul(x, y))
    rec = dict(rec, rel_l2_vs_fp32=err, grid=launch.grid, block=launch.block,
               launches=len(rest), shared_bytes=launch.spec.get("shared_bytes", 0))
    for engine, (med, lo, hi) in (("latch", ours), ("cublas-torch.matmul", theirs)):
        records.append(dict(rec, engine=engine, median_ms=med, min_ms=lo, max_ms=hi,
                            tflops=flop / med / 1e9))
    print(f"{name:14s} rel L2 {err:.2e}  latch {ours[0]:8.3f} ms "
          f"{flop / ours[0] / 1e9:6.1f} TFLOP/s   cuBLAS {theirs[0]:8.3f} ms "
          f"{flop / theirs[0] / 1e9:6.1f} TFLOP/s   latch/cuBLAS throughput "
          f"{theirs[0] / ours[0]:.2f}", flush=True)
    prog.close()
    return records


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=["build", "run"])
    p.add_argument("--only", default="")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--variant", choices=VARIANTS, default="",
                   help="build: a variant (see VARIANTS) as <shape>-<variant>.latch (run "
                        "measures every build found side by side)")
    args = p.parse_args(argv)
    only = [x for x in args.only.split(",") if x]
    return build(only, args.variant) if args.what == "build" else run(only, args.iters)


if __name__ == "__main__":
    sys.exit(main())
