"""TinyMoE-196M B2 on the GPU: one Latch update (artifacts of bench/tinymoe196m_build.py)
against PyTorch float64 on the GPU, and the time per update (CUDA graph replays) against
PyTorch eager.  Runtime only: no MLIR needed here.

    LATCH_COMMIT=$(git rev-parse HEAD) PYTHONPATH=.:tests/py:bench \
        python bench/tinymoe196m_gpu.py [--precisions fp32,bf16] [--replays 5]

The model is rebuilt from the same seed (bench/tinymoe_model.py; checked against the
fingerprint in build.json).  Reference: the same model in float64 on the GPU, one
update = forward, backward, clip_grad_norm_(1.0), torch.optim.AdamW(lr = warmup_cosine at
step 0, betas 0.9/0.95, eps 1e-8, weight decay 0.1).  Compared: the loss (relative error),
and for a few parameters the relative L2 of the parameter after the update, of the update
itself (p1 - p0) and of both moments.  Each part runs in its own process (a CUDA fault
poisons a context); results go to $OUT/tinymoe196m-gpu.json (or bench/results).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))
sys.path.insert(0, ROOT)
ART = os.path.join(ROOT, "bench", "artifacts", "tinymoe196m")
CHECK = ("tok.weight", "pos.weight", "layers.0.qkv.weight", "layers.0.out.weight",
         "layers.3.moe.w1", "layers.7.moe.w2", "layers.7.moe.router.weight", "norm.weight")
PEAK, WARMUP, TOTAL, FINAL = 3e-4, 1000, 10_000, 0.1
REF = "/tmp/tinymoe196m-ref.pt"


def lr_at(s):
    from latch.optim.schedules import warmup_cosine_value
    return warmup_cosine_value(s, PEAK, WARMUP, TOTAL, FINAL)


def events_ms(fn, n):
    import torch
    times = []
    for _ in range(n):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return {"median_ms": statistics.median(times), "min_ms": min(times),
            "max_ms": max(times), "all_ms": [round(t, 3) for t in times]}


def rel_l2(a, b):
    a, b = a.double(), b.double()
    d = float(b.norm())
    return float((a - b).norm()) / d if d > 0 else float((a - b).norm())


def child_ref(args) -> dict:
    """Float64 reference update + eager timings (fp32, bf16 autocast)."""
    import copy

    import torch
    from tinymoe_model import make_tinymoe_196m
    from tinymoe196m_build import fingerprint

    model, (idx, tgt) = make_tinymoe_196m(batch=2)
    build = json.load(open(os.path.join(ART, "build.json")))
    want = next(iter(build.values()))["fingerprint"]
    got = fingerprint(model)
    same = all(abs(got[k][0] - want[k][0]) <= 1e-9 * max(1, abs(want[k][0])) and
               abs(got[k][1] - want[k][1]) <= 1e-9 * abs(want[k][1]) for k in want)
    out = {"fingerprint_matches_build": same}
    dev = torch.device("cuda")
    idx, tgt = idx.to(dev), tgt.to(dev)
    m64 = copy.deepcopy(model).double().to(dev)
    p0 = {n: p.detach().clone() for n, p in m64.named_parameters()}
    t0 = time.perf_counter()
    loss = m64(idx, tgt)
    loss.backward()
    gnorm = torch.nn.utils.clip_grad_norm_(m64.parameters(), 1.0)
    opt = torch.optim.AdamW(m64.parameters(), lr=lr_at(0), betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.1)
    opt.step()
    torch.cuda.synchronize()
    out["f64_update_s"] = round(time.perf_counter() - t0, 3)
    out["loss_f64"] = float(loss)
    out["grad_norm_f64"] = float(gnorm)
    named = dict(m64.named_parameters())
    ref = {}
    for n in CHECK:
        st = opt.state[named[n]]
        ref[n] = {"p0": p0[n].cpu(), "p1": named[n].detach().cpu(),
                  "exp_avg": st["exp_avg"].cpu(), "exp_avg_sq": st["exp_avg_sq"].cpu()}
    torch.save({"loss": float(loss), "tensors": ref}, REF)
    del m64, opt, named, p0
    torch.cuda.empty_cache()

    # eager PyTorch timings, same rule (schedule via LambdaLR), no host syncs
    for prec in ("fp32", "bf16"):
        m = copy.deepcopy(model).to(dev)
        opt = torch.optim.AdamW(m.parameters(), lr=PEAK, betas=(0.9, 0.95), eps=1e-8,
                                weight_decay=0.1)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_at(s) / PEAK)

        def step():
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=(prec == "bf16")):
                loss = m(idx, tgt)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
            opt.step()
            sched.step()
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        out[f"eager_{prec}"] = events_ms(step, 10)
        del m, opt
        torch.cuda.empty_cache()
    return out


def child_latch(prec: str, args) -> dict:
    import torch

    import latch
    from tinymoe_model import make_tinymoe_196m

    model, (idx, tgt) = make_tinymoe_196m(batch=2)
    dev = torch.device("cuda")
    path = os.path.join(ART, f"tinymoe196m-b2-{prec}.latch")
    t0 = time.perf_counter()
    prog = latch.load(path)
    out = {"load_s": round(time.perf_counter() - t0, 3)}
    d = prog.describe()
    out.update({"launches": d["kernels"], "kernel_modules": d["modules"],
                "arena_bytes": d["arena_bytes"], "runtime_timings": dict(prog.timings)})
    state = prog.init(model)
    idx, tgt = idx.to(dev), tgt.to(dev)
    t0 = time.perf_counter()
    loss = prog.step(state, idx, tgt)
    torch.cuda.synchronize()
    out["first_step_s"] = round(time.perf_counter() - t0, 3)   # no graph yet: launch by launch
    out["loss"] = loss
    ref = torch.load(REF)
    out["loss_f64"] = ref["loss"]
    out["loss_rel_err"] = abs(loss - ref["loss"]) / abs(ref["loss"])
    tens = state.tensors()
    cmp = {}
    for n, r in ref["tensors"].items():
        p1 = tens[n].double().cpu()
        cmp[n] = {"param_after": rel_l2(p1, r["p1"]),
                  "update_p1_minus_p0": rel_l2(p1 - r["p0"], r["p1"] - r["p0"]),
                  "exp_avg": rel_l2(tens[n + ".exp_avg"].cpu(), r["exp_avg"]),
                  "exp_avg_sq": rel_l2(tens[n + ".exp_avg_sq"].cpu(), r["exp_avg_sq"])}
    out["rel_l2_vs_f64"] = cmp
    out["state_step_after_one_update"] = int(tens["step"].item()) if "step" in tens else None
    del tens
    # timing: the whole update as one CUDA graph replay (the 2nd call captures the graph)
    t0 = time.perf_counter()
    prog.step(idx, tgt)
    torch.cuda.synchronize()
    out["capture_step_s"] = round(time.perf_counter() - t0, 3)
    out["graph_captured"] = prog.graph_captured
    n = args.replays if out["first_step_s"] < 20 else 3
    out["replay"] = events_ms(lambda: prog.step(idx, tgt), n)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--precisions", default="fp32,bf16")
    p.add_argument("--replays", type=int, default=5)
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--child-out", default=None, help=argparse.SUPPRESS)
    p.add_argument("--budget-s", type=float, default=400.0)
    args = p.parse_args()
    if args.child:
        try:
            res = child_ref(args) if args.child == "ref" else child_latch(args.child, args)
        except Exception as e:  # noqa: BLE001
            res = {"failed": f"{type(e).__name__}: {str(e)[:1500]}",
                   "traceback_tail": traceback.format_exc().splitlines()[-10:]}
        with open(args.child_out, "w") as f:
            json.dump(res, f)
        return 0

    import torch

    from latch.runtime import driver as drv
    t_start = time.perf_counter()
    result = {"gpu": torch.cuda.get_device_name(0), "driver": drv.driver_version(),
              "torch": torch.__version__, "cuda_bindings": drv.bindings_version(),
              "commit": os.environ.get("LATCH_COMMIT", "unknown"),
              "utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
              "workload": "TinyMoE-196M B2 (2 x 1024 tokens), one AdamW+clip update, lr at step 0",
              "build": json.load(open(os.path.join(ART, "build.json")))}
    outdir = os.environ.get("OUT") or os.path.join(ROOT, "bench", "results")
    os.makedirs(outdir, exist_ok=True)
    path = os.path.join(outdir, "tinymoe196m-gpu.json")

    def save():
        with open(path, "w") as f:
            json.dump(result, f, indent=1)

    for part in ["ref"] + args.precisions.split(","):
        left = args.budget_s - (time.perf_counter() - t_start)
        if left < 30:
            result[part] = {"skipped": "device time budget"}
            save()
            continue
        tmp = f"/tmp/tinymoe196m-{part}.json"
        t0 = time.perf_counter()
        try:
            r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", part,
                                "--child-out", tmp, "--replays", str(args.replays)],
                               capture_output=True, text=True, timeout=left)
            res = json.load(open(tmp)) if os.path.exists(tmp) else \
                {"failed": f"exit {r.returncode}", "stderr": r.stderr.splitlines()[-15:]}
        except subprocess.TimeoutExpired:
            res = {"failed": f"timed out after {left:.0f} s"}
        res["wall_s"] = round(time.perf_counter() - t0, 1)
        result[part] = res
        print(part, json.dumps(res)[:2500], flush=True)
        save()
    print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
