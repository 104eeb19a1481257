"""The fast-example models on the GPU: Latch's cuda artifacts against FP64 references and
against PyTorch eager fp32 (runtime only: no MLIR on the GPU machine).

    LATCH_COMMIT=$(git rev-parse HEAD) PYTHONPATH=.:tests/py python bench/gpu_models.py \
        [--artifacts bench/artifacts] [--iters 100] [--only w1,w2]

For each ``<workload>.latch`` built by bench/build_cuda_models.py:

1. numerics: ``latch.load`` (routed to latch.runtime), ``init(model)`` with the stored
   initial parameters, the stored batches for the stored number of updates; relative L2
   per tensor (every parameter and optimizer moment, and each loss) against the float64
   reference in ``<workload>.ref.npz``.  The worst tensor is reported, with PyTorch
   float32's own error on the same tensor (CPU, from the build) — a tensor where PyTorch
   float32 itself is far from float64 is ill-conditioned (see
   tests/py/test_compile_numerics.py), not a Latch bug;
2. time per update: Latch (one CUDA graph replay per step, after warm-up; inputs already on
   the GPU) vs PyTorch eager fp32 of the same model and rule on the same GPU (zero_grad,
   forward, backward, clip, optimizer step, schedule step), CUDA events, median and spread.

Writes bench/results/gpu_models-<UTC>.json (and $OUT/ when set) with the GPU, driver, torch
and commit.  Exit status 0 iff every workload ran and its worst tensor is below --limit or
ill-conditioned.
"""
from __future__ import annotations

import argparse
import datetime
import glob
import json
import math
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))

WORKLOAD_MODEL = {"mlp": "mlp", "char_lm": "char_lm", "tiny_moe": "tiny_moe", "looped": "looped"}


def wc(s, peak, warmup, total, final_ratio):
    final = peak * final_ratio
    if s < warmup:
        return peak * (s + 1) / warmup
    progress = min(1.0, (s - warmup) / (total - warmup))
    return final + (peak - final) * 0.5 * (1.0 + math.cos(math.pi * progress))


def rel_l2(got, ref):
    import numpy as np
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    d = np.linalg.norm(ref.ravel())
    e = np.linalg.norm((got - ref).ravel())
    return float(e / d) if d > 0 else float(e)


def eager_update(model, config, pattern):
    """A closure running one eager fp32 update of ``model`` (on the GPU) per call, the same
    rule as tests/py/reference.py (no .item(): no host sync)."""
    import fnmatch

    import torch

    named = dict(model.named_parameters())
    if config == "adamw_schedule_clip":
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, 0.95),
                                weight_decay=0.1)
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: wc(s, 1e-2, 2, 6, 0.1) / 1e-2)

        def step(*batch):
            opt.zero_grad(set_to_none=True)
            loss = model(*batch)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            opt.step()
            sched.step()
            return loss
        return step
    if config == "partition_every":
        slow = [n for n in named if fnmatch.fnmatchcase(n, pattern)]
        fast = [n for n in named if n not in slow]
        opt_slow = torch.optim.AdamW([named[n] for n in slow], lr=3e-3)
        opt_fast = torch.optim.SGD([named[n] for n in fast], lr=0.05, momentum=0.9)
        acc = {n: torch.zeros_like(named[n]) for n in slow}
        count = [0]

        def step(*batch):
            model.zero_grad(set_to_none=False)
            loss = model(*batch)
            loss.backward()
            opt_fast.step()
            for n in slow:
                acc[n] += named[n].grad
            count[0] += 1
            if count[0] % 2 == 0:
                for n in slow:
                    named[n].grad = acc[n] / 2
                opt_slow.step()
                for n in slow:
                    acc[n].zero_()
            return loss
        return step
    raise KeyError(config)


def time_fn(fn, iters, warmup):
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return {"median_ms": statistics.median(times), "p10_ms": times[len(times) // 10],
            "p90_ms": times[(9 * len(times)) // 10], "min_ms": times[0], "iters": iters}


def run_workload(path, args):
    import numpy as np
    import torch

    import latch
    from models import MODELS

    name = os.path.basename(path)[:-len(".latch")]
    build = {}
    bpath = os.path.join(os.path.dirname(path), "build.json")
    if os.path.exists(bpath):
        build = json.load(open(bpath)).get(name, {})
    model_name = build.get("model") or next(m for m in WORKLOAD_MODEL if name.startswith(m))
    config = build.get("config", "adamw_schedule_clip")
    pattern = build.get("pattern", "")
    ref = np.load(path[:-len(".latch")] + ".ref.npz")
    steps = int(ref["steps"])
    dev = torch.device("cuda")

    model, _ = MODELS[model_name](seed=0)
    with torch.no_grad():
        for n, t in model.named_parameters():
            t.copy_(torch.from_numpy(ref[f"init/{n}"]))
    batches = []
    for i in range(steps):
        b, j = [], 0
        while f"batch/{i}/{j}" in ref:
            b.append(torch.from_numpy(ref[f"batch/{i}/{j}"]).to(dev))
            j += 1
        batches.append(tuple(b))

    rec = {"workload": name, "model": model_name, "config": config, "steps": steps}
    prog = latch.load(path)
    rec["runtime_class"] = type(prog).__module__ + "." + type(prog).__name__
    d = prog.describe()
    rec.update({"launches": d["kernels"], "kernel_modules": d["modules"],
                "arena_bytes": d["arena_bytes"],
                "load_modules_s": round(prog.timings.get("load_modules_s", 0.0), 3)})
    for k in ("planned_arena_bytes", "buffer_bytes", "state_bytes", "compile_seconds"):
        if k in build:
            rec[k] = build[k]
    state = prog.init(model)
    losses = [prog.step(state, *b) for b in batches]
    errs, t32 = {}, {}
    for i, (a, r) in enumerate(zip(losses, ref["losses"])):
        errs[f"loss[{i}]"] = abs(a - r) / abs(r)
        t32[f"loss[{i}]"] = abs(float(ref["torch32_losses"][i]) - r) / abs(r)
    got = {n: t.double().cpu().numpy() for n, t in state.tensors().items()}
    for key in ref.files:
        if key.startswith("ref/"):
            n = key[4:]
            if n not in got:
                raise RuntimeError(f"the Latch state has no {n}")
            errs[n] = rel_l2(got[n], ref[key])
            t32[n] = float(ref[f"torch32_err/{n}"])
    worst = max(errs, key=lambda n: (math.isnan(errs[n]), errs[n]))   # NaN is worst
    over = {n: (e, t32[n]) for n, e in errs.items() if not e <= args.limit}
    ill = {n: v for n, v in over.items() if v[1] > args.limit and v[0] <= 3 * v[1]}
    bad = {n: v for n, v in over.items() if n not in ill}
    well = {n: e for n, e in errs.items() if n not in over}
    rec["numerics"] = {
        "metric": "relative L2 vs float64 PyTorch, per tensor", "limit": args.limit,
        "worst_tensor": worst, "worst_rel_l2": errs[worst],
        "worst_torch_fp32_rel_l2": t32[worst],
        "worst_well_conditioned": max(well.values()) if well else None,
        "ill_conditioned": {n: {"latch": a, "torch_fp32": b} for n, (a, b) in ill.items()},
        "bad": {n: {"latch": a, "torch_fp32": b} for n, (a, b) in bad.items()},
        "losses": losses, "ref_losses": [float(x) for x in ref["losses"]],
        "state_step": state.step, "tensors_checked": len(errs)}
    rec["ok"] = not bad

    # -- timing: Latch graph replay vs eager fp32 -------------------------------------------
    batch = batches[0]
    staged = prog.input_views()
    for v, t in zip(staged, batch):
        v.copy_(t)
    torch.cuda.synchronize()
    latch_t = time_fn(lambda: prog._step(*staged), args.iters, args.warmup)
    rec["graph_captured"] = prog.graph_captured
    eager_model = MODELS[model_name](seed=0)[0].to(dev)
    with torch.no_grad():
        for n, t in eager_model.named_parameters():
            t.copy_(torch.from_numpy(ref[f"init/{n}"]))
    upd = eager_update(eager_model, config, pattern)
    eager_t = time_fn(lambda: upd(*batch), args.iters, args.warmup)
    return rec, [dict(rec, engine="latch-cuda-graph", **latch_t),
                 {"workload": name, "engine": "torch-eager-fp32", **eager_t}]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--artifacts", default=os.path.join(ROOT, "bench", "artifacts"))
    p.add_argument("--iters", type=int, default=100)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--limit", type=float, default=1e-5)
    p.add_argument("--only", default="")
    p.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    import torch

    from latch.runtime import driver as drv

    only = [w for w in args.only.split(",") if w]
    paths = sorted(glob.glob(os.path.join(args.artifacts, "*.latch")))
    paths = [q for q in paths if os.path.basename(q)[:-6] in only] if only else paths
    paths = [q for q in paths if os.path.exists(q[:-6] + ".ref.npz")]
    env = {"gpu": torch.cuda.get_device_name(0), "driver": drv.driver_version(),
           "torch": torch.__version__, "cuda_bindings": drv.bindings_version(),
           "commit": os.environ.get("LATCH_COMMIT", "unknown"),
           "utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    print(json.dumps(env))
    if args.child:
        # one workload in this process (a CUDA fault poisons the context: the parent keeps
        # going with the next workload)
        rec, timing = run_workload(paths[0], args)
        with open(args.child, "w") as f:
            json.dump({"rec": rec, "timing": timing}, f)
        return 0
    import subprocess
    import tempfile

    records, failures = [], {}
    for path in paths:
        name = os.path.basename(path)[:-6]
        fd, tmp = tempfile.mkstemp(suffix=".json")
        os.close(fd)
        cmd = [sys.executable, os.path.abspath(__file__), "--artifacts", args.artifacts,
               "--iters", str(args.iters), "--warmup", str(args.warmup), "--limit",
               str(args.limit), "--only", name, "--child", tmp]
        r = subprocess.run(cmd, capture_output=True, text=True)
        try:
            with open(tmp) as f:
                got = json.load(f)
            rec, timing = got["rec"], got["timing"]
        except (OSError, ValueError, KeyError):
            tail = "\n".join(l for l in (r.stdout + r.stderr).splitlines()
                             if not l.startswith("frame #"))[-1500:]
            print(f"{name}: FAILED (exit {r.returncode})\n{tail}")
            failures[name] = tail[-400:]
            continue
        finally:
            os.unlink(tmp)
        records.extend(timing)
        n = rec["numerics"]
        lat, eag = timing[0]["median_ms"], timing[1]["median_ms"]
        print(f"{name:28s} worst rel L2 {n['worst_rel_l2']:.2e} ({n['worst_tensor']}; torch "
              f"fp32 {n['worst_torch_fp32_rel_l2']:.2e}) well-cond. worst "
              f"{n['worst_well_conditioned']}  ill-cond. {sorted(n['ill_conditioned'])}  "
              f"bad {sorted(n['bad'])}")
        print(f"{'':28s} {rec['launches']} launches, arena {rec['arena_bytes']:,} B; "
              f"latch {lat:.3f} ms vs eager {eag:.3f} ms per update ({eag / lat:.2f}x)")
    out = {"env": env, "records": records, "failures": failures}
    stamp = env["utc"].replace(":", "").replace("-", "")
    for folder in [os.path.join(ROOT, "bench", "results"), os.environ.get("OUT")]:
        if folder:
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, f"gpu_models-{stamp}.json"), "w") as f:
                json.dump(out, f, indent=1)
    ok = not failures and all(r.get("ok", True) for r in records)
    print("OK" if ok else f"FAILED: {failures or [r['workload'] for r in records if not r.get('ok', True)]}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
