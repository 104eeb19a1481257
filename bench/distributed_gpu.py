"""Data-parallel Latch programs on several GPUs (torchrun + NCCL), runtime only: the
artifacts come from bench/distributed_build.py (and bench/tinymoe196m_build.py).

    LATCH_COMMIT=$(git rev-parse HEAD) PYTHONPATH=.:tests/py:bench \
        python bench/distributed_gpu.py [--gpus 2] [--parts numerics,tinymoe] [--iters 10]

Starts ``torchrun --standalone --nproc-per-node N`` children (NCCL_NVLS_ENABLE=0) and
gathers what rank 0 of each reports:

* ``numerics`` (N GPUs): for each ``bench/artifacts/dp/<model>-dp.latch``, every rank loads
  it on its GPU, ``init(model)`` (rank 0's parameters are broadcast), runs the stored
  updates on its shard of each global batch; then the relative L2 of every parameter and
  moment against the float64 reference of the *global* batch (``<model>.ref.npz``), the
  losses (each rank reports the global mean loss), whether every rank holds bitwise the same
  parameters, and whether the step's CUDA graph (NCCL inside) was captured.  Rank 0 also
  runs ``<model>-1gpu.latch`` (one GPU, the global batch) as the control.
* ``tinymoe`` (1 GPU, then N GPUs): TinyMoE-196M, bf16, ``--batch`` sequences per GPU (32:
  recipe Q, 2: recipe B2).  Latch: the one-GPU program (tinymoe196m-b<B>-bf16.latch) on 1
  GPU, the data-parallel program (dp/tinymoe196m-b<B>-bf16-dp.latch) on N; engine
  ``latch-no-overlap``: the same with every reduction waited for as soon as it starts
  (``LATCH_OVERLAP_COLLECTIVES=0``), to measure what the overlap is worth; PyTorch: ``torch.compile`` (default mode) on 1
  GPU, ``DistributedDataParallel`` + ``torch.compile`` on N, same recipe (autocast bf16,
  AdamW foreach, clip 1.0).  Per update: CUDA events on every rank (median of ``--iters``
  after 3 warm-up updates; the slowest rank counts).  Scaling = N x t(1 GPU) / t(N GPUs).

Writes bench/results/distributed-<UTC>.json (and $OUT/) with GPU, driver, torch, commit.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for p in (ROOT, os.path.join(ROOT, "bench"), os.path.join(ROOT, "tests", "py")):
    if p not in sys.path:
        sys.path.insert(0, p)
DP = os.path.join(ROOT, "bench", "artifacts", "dp")
TINY = os.path.join(ROOT, "bench", "artifacts", "tinymoe196m")


def rel_l2(got, ref) -> float:
    import numpy as np
    got, ref = np.asarray(got, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    d = np.linalg.norm(ref.ravel())
    e = np.linalg.norm((got - ref).ravel())
    return float(e / d) if d > 0 else float(e)


def _log(msg: str) -> None:
    print(f"[rank {os.environ.get('RANK', '0')}] {msg}", file=sys.stderr, flush=True)


def _dist():
    import torch
    import torch.distributed as dist
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    return dist, dist.get_rank(), dist.get_world_size()


# ------------------------------------------------------------------------------ numerics
def _model_with_init(name, ref):
    import torch
    from models import MODELS
    model, _ = MODELS[name](seed=0)
    with torch.no_grad():
        for n, t in model.named_parameters():
            t.copy_(torch.from_numpy(ref[f"init/{n}"]))
    return model


def _batches(ref, steps, dev):
    import torch
    out = []
    for i in range(steps):
        b, j = [], 0
        while f"batch/{i}/{j}" in ref:
            b.append(torch.from_numpy(ref[f"batch/{i}/{j}"]).to(dev))
            j += 1
        out.append(tuple(b))
    return out


def _errors(state, ref):
    got = {n: t.double().cpu().numpy() for n, t in state.tensors().items()}
    errs = {k[4:]: rel_l2(got[k[4:]], ref[k]) for k in ref.files if k.startswith("ref/")}
    worst = max(errs, key=lambda n: (errs[n] != errs[n], errs[n]))
    t32 = {k[len("torch32_err/"):]: float(ref[k]) for k in ref.files
           if k.startswith("torch32_err/")}
    return {"worst_tensor": worst, "worst_rel_l2": errs[worst],
            "worst_torch_fp32_rel_l2": t32.get(worst), "per_tensor": errs}


def child_numerics(args) -> dict:
    import numpy as np
    import torch

    import latch
    dist, rank, world = _dist()
    dev = torch.device("cuda", torch.cuda.current_device())
    out = {}
    for name in [w for w in args.only.split(",") if w]:
        ref = np.load(os.path.join(DP, f"{name}.ref.npz"))
        steps = int(ref["steps"])
        batches = _batches(ref, steps, dev)
        prog = latch.load(os.path.join(DP, f"{name}-dp.latch"))
        _log(f"{name}: loaded, {prog.describe()['collectives']}")
        state = prog.init(_model_with_init(name, ref))
        _log(f"{name}: init (parameters broadcast)")
        losses = []
        for b in batches:
            G = b[0].shape[0]
            lo, hi = rank * G // world, (rank + 1) * G // world
            losses.append(prog.step(state, *(x[lo:hi] for x in b)))
            _log(f"{name}: step {len(losses)} loss {losses[-1]:.6f} "
                 f"graph {prog.graph_captured}")
        mine = state.tensors()
        identical = True
        for n in sorted(mine):
            t = mine[n].contiguous()
            t0 = t.clone()
            dist.broadcast(t0, src=0)
            same = torch.tensor([int(torch.equal(t, t0))], device=dev)
            dist.all_reduce(same, op=dist.ReduceOp.MIN)
            identical &= bool(same.item())
        rec = {"ranks": world, "steps": steps, "graph_captured": prog.graph_captured,
               "buckets": prog.describe()["collectives"]["buckets"],
               "ranks_bitwise_identical": identical,
               "losses": losses, "ref_losses": [float(x) for x in ref["losses"]],
               "loss_rel_err": max(abs(a - r) / abs(r) for a, r in zip(losses, ref["losses"])),
               "dp": _errors(state, ref)}
        if rank == 0:
            one = latch.load(os.path.join(DP, f"{name}-1gpu.latch"))
            s1 = one.init(_model_with_init(name, ref))
            l1 = [one.step(s1, *b) for b in batches]
            rec["one_gpu"] = _errors(s1, ref)
            rec["one_gpu"]["loss_rel_err"] = max(abs(a - r) / abs(r)
                                                 for a, r in zip(l1, ref["losses"]))
            rec["dp_vs_one_gpu_max_rel_l2"] = max(
                rel_l2(mine[n].double().cpu().numpy(), s1.tensors()[n].double().cpu().numpy())
                for n in mine)
            one.close()
        # a captured graph holds NCCL work of the communicator: free it before the process
        # group is destroyed (else ncclCommDestroy waits for it)
        prog.close()
        out[name] = rec
        dist.barrier()
    dist.destroy_process_group()
    return out


# ------------------------------------------------------------------------------ TinyMoE
def _timed(step, iters, dist) -> dict:
    import torch
    for s in range(3):
        step(s)
    torch.cuda.synchronize()
    if dist is not None:
        dist.barrier()
    times = []
    t0 = time.perf_counter()
    for s in range(3, 3 + iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        step(s)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    wall = (time.perf_counter() - t0) / iters * 1e3
    return {"median_ms": statistics.median(times), "min_ms": min(times),
            "max_ms": max(times), "wall_ms_per_update": wall, "iters": iters}


def child_tinymoe(args) -> dict:
    import torch

    from tinymoe_bench_gpu import lr_at
    from tinymoe_model import make_tinymoe_196m
    world = int(os.environ.get("WORLD_SIZE", "1"))
    dist = None
    rank = 0
    if world > 1:
        dist, rank, world = _dist()
    else:
        torch.cuda.set_device(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    model, (idx, tgt) = make_tinymoe_196m(batch=args.batch)
    # each rank its own batch: the tokens rolled by the rank
    idx, tgt = idx.roll(rank * 97, 1).cuda(), tgt.roll(rank * 97, 1).cuda()
    out = {"ranks": world}
    if args.engine in ("latch", "latch-no-overlap"):
        import latch
        if args.engine == "latch-no-overlap":
            os.environ["LATCH_OVERLAP_COLLECTIVES"] = "0"
        path = (os.path.join(DP, f"tinymoe196m-b{args.batch}-bf16-dp.latch") if world > 1 else
                os.path.join(TINY, f"tinymoe196m-b{args.batch}-bf16.latch"))
        prog = latch.load(path)
        state = prog.init(model)
        out.update(artifact=os.path.relpath(path, ROOT), launches=len(prog.launches),
                   collectives=prog.describe()["collectives"])
        out.update(_timed(lambda s: prog.step(state, idx, tgt), args.iters, dist))
        out["graph_captured"] = prog.graph_captured
        prog.close()      # before destroy_process_group: the graph holds NCCL work
    else:
        m = model.cuda()
        params = list(m.parameters())
        if world > 1:
            from torch.nn.parallel import DistributedDataParallel as DDP
            m = DDP(m, device_ids=[torch.cuda.current_device()])
        fwd = torch.compile(m)
        opt = torch.optim.AdamW(params, lr=lr_at(args.batch, 0), betas=(0.9, 0.95), eps=1e-8,
                                weight_decay=0.1, foreach=True)

        def step(s):
            for g in opt.param_groups:
                g["lr"] = lr_at(args.batch, s)
            opt.zero_grad(set_to_none=False)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = fwd(idx, tgt)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
        t0 = time.perf_counter()
        try:
            step(0)
        except Exception as e:  # noqa: BLE001 - DDPOptimizer's graph splitting failed
            import traceback
            _log("torch.compile of the DDP model failed; retrying with "
                 "torch._dynamo.config.optimize_ddp = False:\n" +
                 "".join(traceback.format_exception(e))[-4000:])
            out["ddp_optimizer_error"] = f"{type(e).__name__}: {str(e)[:500]}"
            torch._dynamo.reset()
            torch._dynamo.config.optimize_ddp = False
            fwd = torch.compile(m)
            step(0)
        out["optimize_ddp"] = bool(torch._dynamo.config.optimize_ddp)
        torch.cuda.synchronize()
        out["compile_s"] = round(time.perf_counter() - t0, 1)
        out.update(_timed(step, args.iters, dist))
    if dist is not None:
        t = torch.tensor([out["median_ms"]], device="cuda")
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        out["slowest_rank_median_ms"] = float(t.item())
        dist.destroy_process_group()
    else:
        out["slowest_rank_median_ms"] = out["median_ms"]
    return out


# ------------------------------------------------------------------------------ driver
def _torchrun(n: int, child: str, args, timeout: float) -> dict:
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1",
               NVSHMEM_DISABLE_NVLS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc-per-node={n}", os.path.abspath(__file__), "--child", child,
           "--result", path, "--iters", str(args.iters), "--only", args.only,
           "--engine", args.engine, "--hang-s", str(args.hang_s), "--batch", str(args.batch)]
    t0 = time.perf_counter()
    try:
        r = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired as e:
        err = (e.stderr or b"").decode("utf-8", "replace") if isinstance(e.stderr, bytes) \
            else (e.stderr or "")
        print(f"torchrun {child} timed out after {timeout} s\n{err[-6000:]}", flush=True)
        return {"error": f"timeout {timeout} s", "stderr_tail": err[-3000:]}
    if r.returncode != 0:
        print(r.stdout[-3000:], r.stderr[-8000:], flush=True)
        return {"error": f"exit {r.returncode}", "stderr_tail": r.stderr[-8000:]}
    with open(path) as f:
        res = json.load(f)
    res["wall_s"] = round(time.perf_counter() - t0, 1)
    return res


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpus", type=int, default=2)
    p.add_argument("--parts", default="numerics,tinymoe")
    p.add_argument("--engines", default="latch,torch-ddp-compile")
    p.add_argument("--gpu-counts", default="",
                   help="GPU counts of the tinymoe part (default: 1 and --gpus)")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--only", default="mlp,char_lm")
    p.add_argument("--batch", type=int, default=32,
                   help="sequences per GPU of the tinymoe part (2: recipe B2, 32: recipe Q)")
    p.add_argument("--child", default="", help=argparse.SUPPRESS)
    p.add_argument("--result", default="", help=argparse.SUPPRESS)
    p.add_argument("--engine", default="latch", help=argparse.SUPPRESS)
    p.add_argument("--timeout-s", type=float, default=420,
                   help="limit of each torchrun job")
    p.add_argument("--hang-s", type=float, default=0,
                   help="children dump every thread's stack and exit after this long")
    args = p.parse_args()
    if args.child and args.hang_s:
        import faulthandler
        faulthandler.dump_traceback_later(args.hang_s, exit=True)
    if args.child:
        res = child_numerics(args) if args.child == "numerics" else child_tinymoe(args)
        if int(os.environ.get("RANK", "0")) == 0:
            with open(args.result, "w") as f:
                json.dump(res, f)
        return 0

    import torch

    from latch.runtime import driver as drv
    env = {"gpu": torch.cuda.get_device_name(0), "gpus": torch.cuda.device_count(),
           "driver": drv.driver_version(), "torch": torch.__version__,
           "nccl": ".".join(map(str, torch.cuda.nccl.version())),
           "commit": os.environ.get("LATCH_COMMIT", "unknown"),
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    print(json.dumps(env), flush=True)
    records = []
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")

    def save():
        doc = {"env": env, "records": records}
        from results_files import save_records
        save_records(doc, f"distributed-{now}")

    parts = args.parts.split(",")
    if "numerics" in parts:
        res = _torchrun(args.gpus, "numerics", args, args.timeout_s)
        for name, rec in res.items():
            if not isinstance(rec, dict):
                continue
            records.append({"part": "numerics", "workload": name, **rec})
            if "dp" in rec:
                print(f"numerics {name}: {rec['ranks']} ranks, worst rel. L2 "
                      f"{rec['dp']['worst_rel_l2']:.2e} ({rec['dp']['worst_tensor']}; torch "
                      f"fp32 {rec['dp']['worst_torch_fp32_rel_l2']}), one GPU "
                      f"{rec.get('one_gpu', {}).get('worst_rel_l2', float('nan')):.2e}, "
                      f"loss {rec['loss_rel_err']:.1e}, ranks identical "
                      f"{rec['ranks_bitwise_identical']}, graph {rec['graph_captured']}",
                      flush=True)
            else:
                print(f"numerics {name}: {rec}", flush=True)
        if "error" in res:
            records.append({"part": "numerics", **res})
        save()
    if "tinymoe" in parts:
        by = {}
        for engine in args.engines.split(","):
            args.engine = engine
            counts = [int(x) for x in args.gpu_counts.split(",") if x] or [1, args.gpus]
            for n in counts:
                res = _torchrun(n, "tinymoe", args, args.timeout_s)
                records.append({"part": f"tinymoe-b{args.batch}-per-gpu", "engine": engine,
                                **res})
                by[(engine, n)] = res.get("slowest_rank_median_ms")
                print(f"tinymoe B{args.batch}/GPU {engine:18s} {n} GPU(s): "
                      f"{by[(engine, n)]} ms/update", flush=True)
                save()
        for engine in args.engines.split(","):
            t1, tn = by.get((engine, 1)), by.get((engine, args.gpus))
            if t1 and tn:
                scaling = args.gpus * t1 / tn
                records.append({"part": "scaling", "engine": engine, "gpus": args.gpus,
                                "ms_1gpu": t1, "ms_ngpu": tn, "throughput_scaling": scaling})
                print(f"scaling {engine}: {scaling:.3f}x on {args.gpus} GPUs "
                      f"({t1:.1f} -> {tn:.1f} ms/update at {args.batch} sequences per GPU)")
        save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
