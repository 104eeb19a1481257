"""GradLev adaptation on the GPU (WORKLOADS.md "GradLev"): numerics at full size against
eager PyTorch in float64, and the time per 1024-step block, side by side in one run, runtime
only (artifacts from ``bench/gradlev_build.py``):

    LATCH_COMMIT=$(git rev-parse HEAD) PYTHONPATH=.:tests/py:bench \\
        python bench/gradlev_gpu.py [--reps 20]

Engines (same inputs, one process):

* ``latch``: the compiled function (one kernel for the whole scan, carry in shared
  memory), a full call: input copies into the staging buffers, the CUDA graph, output
  copies; ``latch-kernel``: the graph alone (``run_staged``), inputs already staged;
* ``torch-eager``: ``latch.scan`` in eager mode (a Python loop of the step function,
  ``torch.func.grad`` inside), float32;
* ``torch-eager-graph``: that loop captured once in one CUDA graph, replayed;
* ``torch-manual-graph``: the step written by hand in closed form (``err = W k - v``,
  ``W -= eta err k^T`` as bmm/baddbmm, ``o = W q``), the loop captured in one CUDA graph —
  the strongest control (WORKLOADS.md's 13.8 ms);
* ``torch-compile-step``: the step function under ``torch.compile``, called in a Python
  loop.

Ratios are quoted against the fastest PyTorch control of the run.

Medians / min / max of CUDA-event times after warm-up.  Writes
bench/results/gradlev-<UTC>.json (and $OUT/ when set): one record per engine
``{workload, engine, median_ms, min_ms, max_ms, gpu, torch, commit, date}`` plus a numerics
record (relative L2 of o and the final W vs float64, Latch and eager float32).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for p in (ROOT, os.path.join(ROOT, "examples"), os.path.join(ROOT, "bench")):
    if p not in sys.path:
        sys.path.insert(0, p)
ART = os.path.join(ROOT, "bench", "artifacts", "gradlev")


def log(msg):
    print(f"[gradlev_gpu {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def inputs(H, D, T, dtype, seed=0):
    import torch
    g = torch.Generator().manual_seed(seed)
    W0 = torch.randn(H, D, D, generator=g, dtype=torch.float64) * 0.1
    qkv = [torch.randn(T, H, D, generator=g, dtype=torch.float64) / D ** 0.5 for _ in range(3)]
    return tuple(t.to(dtype).cuda() for t in (W0, *qkv))


def timed(fn, reps, warmup):
    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b))
    return {"median_ms": statistics.median(out), "min_ms": min(out), "max_ms": max(out),
            "reps": reps}


def captured(fn, static_inputs, warmups: int):
    """(graph, outputs): ``fn(*static_inputs)`` warmed up on a side stream, captured into
    one CUDA graph and replayed once (the outputs are the graph's static outputs)."""
    import torch
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmups):
            fn(*static_inputs)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(*static_inputs)
    graph.replay()
    torch.cuda.synchronize()
    return graph, out


def rel(x, ref):
    return float((x.double() - ref).norm() / ref.norm())


def main() -> int:
    import torch

    from gradlev_build import ETA, adapt_fn
    from gradlev_small import make_step
    from latch.runtime.function import CudaFunction

    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--eager-reps", type=int, default=5)
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    with open(os.path.join(ART, "build.json")) as f:
        build = json.load(f)
    env = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "commit": os.environ.get("LATCH_COMMIT", "unknown"),
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    log(json.dumps(env))
    adapt = adapt_fn(ETA)
    records, ok = [], True

    # -- numerics: small and full size vs eager float64 on the GPU ----------------------------
    for name in ("small", "full"):
        s = build["builds"][name]
        H, D, T = s["heads"], s["d"], s["tokens"]
        log(f"{name}: loading {s['path']}")
        fn = CudaFunction.load(os.path.join(ROOT, s["path"]))
        x32 = inputs(H, D, T, torch.float32)
        x64 = tuple(t.double() for t in x32)
        W, o = fn(*x32)
        torch.cuda.synchronize()
        log(f"{name}: eager float64 reference ({T} steps)")
        rW, ro = adapt(*x64)
        eW, eo = adapt(*x32)
        num = {"workload": "gradlev", "engine": "numerics", "size": name, **env,
               "latch_rel_l2_o": rel(o, ro), "latch_rel_l2_W": rel(W, rW),
               "eager_f32_rel_l2_o": rel(eo, ro), "eager_f32_rel_l2_W": rel(eW, rW),
               "bound": 1e-4}
        passed = num["latch_rel_l2_o"] <= 1e-4 and num["latch_rel_l2_W"] <= 1e-4
        num["pass"] = passed
        ok &= passed
        log(f"{name}: rel L2 vs float64: latch o {num['latch_rel_l2_o']:.2e} W "
            f"{num['latch_rel_l2_W']:.2e}; eager fp32 o {num['eager_f32_rel_l2_o']:.2e} W "
            f"{num['eager_f32_rel_l2_W']:.2e} -> {'PASS' if passed else 'FAIL'}")
        records.append(num)
        # a second and third call: the CUDA graph path gives the same bits
        W2, o2 = fn(*x32)
        W3, o3 = fn(*x32)
        same = bool(torch.equal(W2, W) and torch.equal(o3, o) and fn.graph_captured)
        log(f"{name}: graph replay bitwise equal to the first call: {same}")
        ok &= same
        if name == "small":
            fn.close()

    # -- timing at full size ---------------------------------------------------------------
    s = build["builds"]["full"]
    H, D, T = s["heads"], s["d"], s["tokens"]
    x32 = inputs(H, D, T, torch.float32)
    times = {}
    log("timing latch (full call)")
    times["latch"] = timed(lambda: fn(*x32), a.reps, 3)
    log(f"  {times['latch']}")
    log("timing latch-kernel (staged inputs, graph only)")
    staged = fn.input_views()
    for v, t in zip(staged, x32):
        v.copy_(t)
    def kernel_only():
        fn.run_staged()                  # on the function's stream: make the events wait
        torch.cuda.current_stream().wait_stream(fn.torch_stream)
    times["latch-kernel"] = timed(kernel_only, a.reps, 3)
    log(f"  {times['latch-kernel']}")
    log("timing torch-eager (Python loop)")
    times["torch-eager"] = timed(lambda: adapt(*x32), a.eager_reps, 1)
    log(f"  {times['torch-eager']}")
    def controls():
        log("timing torch-eager-graph (the loop in one CUDA graph)")
        static = tuple(t.clone() for t in x32)
        graph, (gW, go) = captured(adapt, static, warmups=2)
        log(f"  graph result vs latch: W {rel(gW, W.double()):.1e}")
        times["torch-eager-graph"] = timed(graph.replay, a.reps, 3)
        log(f"  {times['torch-eager-graph']}")
        log("timing torch-manual-graph (the closed-form step, W -= eta (W k - v) k^T, in "
            "a loop captured in one CUDA graph)")

        def manual(W0, q, k, v):
            Wm, outs = W0, []
            for t in range(T):
                err = torch.bmm(Wm, k[t].unsqueeze(-1)) - v[t].unsqueeze(-1)     # [H, D, 1]
                Wm = torch.baddbmm(Wm, err, k[t].unsqueeze(1), alpha=-ETA)       # rank-1
                outs.append(torch.bmm(Wm, q[t].unsqueeze(-1)).squeeze(-1))
            return Wm, torch.stack(outs)
        mgraph, (mW, mo) = captured(manual, static, warmups=1)
        log(f"  manual result vs float64 (full size): W {rel(mW, rW):.1e}, o {rel(mo, ro):.1e}")
        times["torch-manual-graph"] = timed(mgraph.replay, a.reps, 3)
        log(f"  {times['torch-manual-graph']}")
        log("timing torch-compile-step (compiled step, Python loop)")
        step_c = torch.compile(make_step(ETA))

        def compiled_loop():
            Wc = x32[0]
            outs = []
            for t in range(T):
                Wc, y = step_c(Wc, (x32[1][t], x32[2][t], x32[3][t]))
                outs.append(y)
            return Wc, torch.stack(outs)
        times["torch-compile-step"] = timed(compiled_loop, a.eager_reps, 2)
        log(f"  {times['torch-compile-step']}")
    try:
        controls()
    except Exception as e:  # noqa: BLE001 - report and keep the other engines
        log(f"a PyTorch control failed: {type(e).__name__}: {e}")
    for engine, t in times.items():
        records.append({"workload": "gradlev", "engine": engine, **t, **env,
                        "shape": {"heads": H, "d": D, "tokens": T}})
    controls_run = [e for e in times if e.startswith("torch-")]
    ref = min(controls_run, key=lambda e: times[e]["median_ms"])     # the best control
    base = times[ref]["median_ms"]
    log("per 1024-step block (median ms): " + ", ".join(
        f"{e} {t['median_ms']:.3f} ({base / t['median_ms']:.2f}x vs {ref})"
        for e, t in times.items()))
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    from results_files import save_records
    for path in save_records(records, f"gradlev-{stamp}"):
        log(f"wrote {path}")
    log("numerics: " + ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
