"""Build the GradLev adaptation artifacts (WORKLOADS.md "GradLev") for the GPU check, here
(MLIR needed), then carry bench/artifacts/gradlev/ to the GPU machine and run
``bench/gradlev_gpu.py`` there with the runtime only:

    .venv/bin/python bench/gradlev_build.py [--only full|small]

Per sequence and head (batch 4 x 12 heads = 48 problems) a 64x64 fast weight W, from W0,
takes for t = 0..1023 one gradient step on 1/2 |W k_t - v_t|^2 (eta 0.1, torch.func.grad
in the step function) and emits o_t = W_t q_t: ``latch.compile(adapt, None, (W0, q, k, v),
target="cuda")`` with ``adapt = lambda W0, q, k, v: latch.scan(step, W0, (q, k, v))``.
Writes ``gradlev-full.latch`` (W0 [48, 64, 64], q/k/v [1024, 48, 64], f32) and
``gradlev-small.latch`` (W0 [2, 8, 8], q/k/v [16, 2, 8]) plus ``build.json`` (shapes, eta,
compile seconds, launches).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for p in (ROOT, os.path.join(ROOT, "examples")):
    if p not in sys.path:
        sys.path.insert(0, p)
ART = os.path.join(ROOT, "bench", "artifacts", "gradlev")
ETA = 0.1
SIZES = {"full": {"heads": 48, "d": 64, "tokens": 1024},
         "small": {"heads": 2, "d": 8, "tokens": 16}}


def adapt_fn(eta: float = ETA):
    import latch
    from gradlev_small import make_step
    step = make_step(eta)

    def adapt(W0, q, k, v):
        return latch.scan(step, W0, (q, k, v))
    return adapt


def main() -> int:
    import torch

    import latch

    ap = argparse.ArgumentParser()
    ap.add_argument("--only", choices=sorted(SIZES))
    a = ap.parse_args()
    os.makedirs(ART, exist_ok=True)
    info = {"eta": ETA, "builds": {}}
    for name, s in SIZES.items():
        if a.only and name != a.only:
            continue
        H, D, T = s["heads"], s["d"], s["tokens"]
        inputs = (torch.zeros(H, D, D),) + tuple(torch.zeros(T, H, D) for _ in range(3))
        print(f"[gradlev_build] {name}: W0 [{H}, {D}, {D}], q/k/v [{T}, {H}, {D}] ...",
              flush=True)
        t0 = time.perf_counter()
        fn = latch.compile(adapt_fn(), None, inputs, target="cuda")
        sec = time.perf_counter() - t0
        path = os.path.join(ART, f"gradlev-{name}.latch")
        fn.save(path)
        m = fn.manifest
        launches = [{"grid": ls["grid"], "block": ls["block"]} for ls in m["launches"]]
        print(f"[gradlev_build] {name}: compiled in {sec:.1f} s, {len(launches)} launch(es) "
              f"{launches}, wrote {os.path.relpath(path, ROOT)}", flush=True)
        print(fn.report(), flush=True)
        info["builds"][name] = {**s, "path": os.path.relpath(path, ROOT),
                                "compile_s": round(sec, 2), "launches": launches}
    with open(os.path.join(ART, "build.json"), "w") as f:
        json.dump(info, f, indent=1)
    print(f"[gradlev_build] done: {os.path.relpath(ART, ROOT)}/", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
