"""GPU smoke test of the cuda target, run with the runtime only (no MLIR on that machine):

    PYTHONPATH=. python bench/gpu_smoke.py bench/artifacts/sgd_update.latch [--steps 50]

Loads the artifact built by bench/build_smoke_artifact.py (examples/mlir/sgd_update.mlir),
runs ``--steps`` updates with fixed random inputs, and compares every step's loss and the
final state with a plain-PyTorch float64 re-implementation of the same math:

    r = x·w − y;  loss = mean(r²);  g = 2/N · xᵀr
    coef = min(1, max_norm / (‖g‖ + 1e-6));  g ← coef·g                (clip_grad_norm_)
    lr(s) = peak·(s+1)/warmup  (s < warmup)
            final + (peak − final)/2 · (1 + cos(π·min(1, (s−warmup)/(total−warmup))))
    buf ← momentum·buf + g;  w ← w − lr·buf;  s ← s + 1                  (torch SGD, momentum)

It also runs the same steps with CUDA graphs off (eager launches) and checks that graph
replay gives bit-identical state, and times the first step, the capture step and graph
replays.  Prints everything needed to debug; writes JSON to bench/results/.  Exit status 0
iff all checks pass.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# the hyperparameters of examples/mlir/sgd_update.mlir
PEAK, WARMUP, TOTAL, FINAL_RATIO = 0.05, 10, 200, 0.1
MOMENTUM, MAX_NORM = 0.9, 1.0
LOSS_TOL, STATE_TOL = 1e-3, 1e-4


def reference_steps(x, y, w0, steps):
    """float64 PyTorch reference: (losses, final w, final momentum, final step)."""
    import torch

    x, y, w = x.double(), y.double(), w0.double().clone()
    buf = torch.zeros_like(w)
    n = x.shape[0]
    losses = []
    for s in range(steps):
        r = x @ w - y
        losses.append(float((r * r).mean()))
        g = (2.0 / n) * (x.T @ r)
        total = float(torch.linalg.vector_norm(g))
        g = g * min(1.0, MAX_NORM / (total + 1e-6))
        if s < WARMUP:
            lr = PEAK * (s + 1) / WARMUP
        else:
            final = PEAK * FINAL_RATIO
            p = min(1.0, (s - WARMUP) / (TOTAL - WARMUP))
            lr = final + (PEAK - final) / 2 * (1 + math.cos(math.pi * p))
        buf = MOMENTUM * buf + g
        w = w - lr * buf
    return losses, w, buf, steps


def rel_l2(a, b) -> float:
    import torch

    a, b = a.double().cpu(), b.double().cpu()
    denom = float(torch.linalg.vector_norm(b))
    diff = float(torch.linalg.vector_norm(a - b))
    return diff / denom if denom else diff


def versions() -> dict:
    info = {"python": sys.version.split()[0], "platform": platform.platform()}
    try:
        import torch
        info["torch"] = torch.__version__
        info["torch_cuda"] = torch.version.cuda
    except Exception as e:  # noqa: BLE001
        info["torch"] = f"unavailable: {e}"
    try:
        from latch.runtime import driver as drv
        info["cuda_bindings"] = drv.bindings_version()
        info["cuda_driver"] = drv.driver_version()
    except Exception as e:  # noqa: BLE001
        info["cuda_driver"] = f"unavailable: {e}"
    try:
        info["commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, text=True,
                                        capture_output=True, timeout=10).stdout.strip() or None
    except Exception:  # noqa: BLE001
        info["commit"] = None
    if not (info["commit"] and len(info["commit"]) == 40):
        info["commit"] = os.environ.get("LATCH_COMMIT", "unknown")
    return info


def blocked_compiler_modules() -> list[str]:
    return sorted(m for m in sys.modules
                  if m == "mlir" or m.startswith(("mlir.", "torch_mlir", "latch.dialect",
                                                  "latch.passes")))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="Latch cuda-target GPU smoke test")
    p.add_argument("artifact", nargs="?",
                   default=os.path.join(ROOT, "bench", "artifacts", "sgd_update.latch"))
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--replays", type=int, default=200, help="graph replays timed")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    args = p.parse_args(argv)

    result: dict = {"benchmark": "gpu_smoke", "artifact": os.path.relpath(args.artifact, ROOT),
                    "steps": args.steps, "seed": args.seed,
                    "started": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                    "ok": False, "checks": {}, "errors": []}
    stage = "versions"
    try:
        result["versions"] = versions()
        print("versions:", json.dumps(result["versions"]))

        stage = "load"
        import torch

        from latch.runtime import CudaProgram
        t0 = time.perf_counter()
        prog = CudaProgram.load(args.artifact)
        result["load_s"] = time.perf_counter() - t0
        result["program"] = prog.describe()
        result["device"] = {"name": prog.device.name, "chip": prog.device.chip,
                            "torch_name": torch.cuda.get_device_name(0)}
        print(f"device: {prog.device.name} ({prog.device.chip}); loaded in "
              f"{result['load_s']:.3f}s")
        print("program:", json.dumps(result["program"]))
        for name, mod in prog.modules.items():
            if mod.info_log:
                print(f"  JIT info {name}: {mod.info_log}")
        leaked = blocked_compiler_modules()
        result["checks"]["runtime_import_hygiene"] = {"compiler_modules_imported": leaked,
                                                      "ok": not leaked}
        print("compiler modules imported by the runtime:", leaked or "none")

        stage = "inputs"
        gen = torch.Generator().manual_seed(args.seed)
        (n, k), (_, o) = prog.inputs_spec[0]["shape"], prog.inputs_spec[1]["shape"]
        x = torch.randn(n, k, generator=gen, dtype=torch.float64)
        w_true = torch.randn(k, o, generator=gen, dtype=torch.float64) / math.sqrt(k)
        y = x @ w_true + 0.01 * torch.randn(n, o, generator=gen, dtype=torch.float64)
        w0 = 0.1 * torch.randn(k, o, generator=gen, dtype=torch.float64)
        x32, y32, w032 = x.float(), y.float(), w0.float()
        xd, yd = x32.cuda(), y32.cuda()

        stage = "reference"
        # the reference starts from the same float32-rounded data the GPU sees
        ref_losses, ref_w, ref_buf, ref_step = reference_steps(x32, y32, w032, args.steps)

        stage = "steps (CUDA graph)"
        prog.load_state({"w": w032})
        losses, step_s = [], []
        for s in range(args.steps):
            t0 = time.perf_counter()
            loss = prog.step(xd, yd)
            torch.cuda.synchronize()
            step_s.append(time.perf_counter() - t0)
            losses.append(float(loss))
            ok = math.isfinite(losses[-1])
            print(f"step {s:4d}  loss latch {losses[-1]:.9g}  ref {ref_losses[s]:.9g}  "
                  f"rel {abs(losses[-1] - ref_losses[s]) / max(abs(ref_losses[s]), 1e-30):.2e}"
                  f"  {step_s[-1] * 1e3:8.3f} ms"
                  f"{'  (eager)' if s == 0 else '  (capture+replay)' if s == 1 else ''}"
                  f"{'' if ok else '  NON-FINITE'}")
        state = prog.state_dict()
        torch.cuda.synchronize()
        result["losses"] = losses
        result["reference_losses"] = ref_losses
        loss_err = max(abs(a - b) / max(abs(b), 1e-30) for a, b in zip(losses, ref_losses))
        errs = {"loss_max_rel": loss_err,
                "w_rel_l2": rel_l2(state["w"], ref_w),
                "momentum_rel_l2": rel_l2(state["w.momentum"], ref_buf),
                "step": int(state["step"].item()), "step_expected": ref_step}
        result["errors_vs_fp64"] = errs
        print("relative errors vs the float64 reference:", json.dumps(errs))
        result["checks"]["loss"] = {"ok": loss_err < LOSS_TOL, "tol": LOSS_TOL}
        result["checks"]["state"] = {"ok": errs["w_rel_l2"] < STATE_TOL and
                                     errs["momentum_rel_l2"] < STATE_TOL, "tol": STATE_TOL}
        result["checks"]["step_counter"] = {"ok": errs["step"] == ref_step}
        result["checks"]["graph_captured"] = {"ok": prog.graph_captured or args.steps < 2}

        stage = "eager vs graph"
        eager = CudaProgram.load(args.artifact, use_graph=False)
        eager.load_state({"w": w032})
        eager_losses = [float(eager.step(xd, yd)) for _ in range(args.steps)]
        es = eager.state_dict()
        torch.cuda.synchronize()
        same = (eager_losses == losses and all(torch.equal(es[k], state[k]) for k in state))
        diffs = {k: float((es[k].double() - state[k].double()).abs().max()) for k in state}
        result["checks"]["graph_equals_eager"] = {"ok": same, "max_abs_diff": diffs}
        print(f"graph replay == eager launches: {same}  max |diff| {diffs}")
        eager.close()

        stage = "input checks"
        raised = {}
        for label, bad in (("shape", (xd[:-1], yd)), ("dtype", (xd.double(), yd)),
                           ("device", (x32, y32)), ("count", (xd,))):
            try:
                prog.step(*bad)
                raised[label] = "did not raise"
            except Exception as e:  # noqa: BLE001
                raised[label] = f"{type(e).__name__}: {e}"
        result["checks"]["input_validation"] = {
            "ok": all(v.startswith("LatchError") for v in raised.values()), "messages": raised}
        print("input validation:", json.dumps(raised))

        stage = "timing"
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        host = []
        start.record()
        for _ in range(args.replays):
            t0 = time.perf_counter()
            prog.step(xd, yd)
            host.append(time.perf_counter() - t0)
        end.record()
        torch.cuda.synchronize()
        replay_ms = start.elapsed_time(end) / max(1, args.replays)
        synced = []
        for _ in range(20):
            t0 = time.perf_counter()
            prog.step(xd, yd)
            torch.cuda.synchronize()
            synced.append(time.perf_counter() - t0)
        result["timing"] = {
            "first_step_ms": step_s[0] * 1e3,
            "capture_step_ms": step_s[1] * 1e3 if len(step_s) > 1 else None,
            "graph_capture_ms": prog.timings.get("graph_capture_s", 0) * 1e3,
            "replay_synced_median_ms": statistics.median(synced) * 1e3,
            "replay_stream_ms_per_step": replay_ms,
            "replay_host_enqueue_median_ms": statistics.median(host) * 1e3,
            "replays": args.replays, "kernels_per_step": len(prog.launches)}
        print("timing:", json.dumps(result["timing"]))
        prog.close()
        result["ok"] = all(c["ok"] for c in result["checks"].values())
    except Exception as e:  # noqa: BLE001
        tb = traceback.format_exc()
        result["errors"].append({"stage": stage, "error": f"{type(e).__name__}: {e}",
                                 "traceback": tb})
        print(f"FAILED in stage '{stage}':\n{tb}", file=sys.stderr)
    os.makedirs(args.out, exist_ok=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = os.path.join(args.out, f"gpu_smoke-{stamp}.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1, default=str)
    print(f"{'PASS' if result['ok'] else 'FAIL'}: checks "
          f"{ {k: v['ok'] for k, v in result['checks'].items()} }; results in {path}")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
