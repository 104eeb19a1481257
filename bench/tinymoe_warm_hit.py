"""TinyMoE-196M through the persistent compile cache: a cold compile in one process, then warm
hits in new processes (target cuda; here, no GPU needed).

    .venv/bin/python bench/tinymoe_warm_hit.py [--batch 2] [--precision bf16] [--hits 2]

Each run is a fresh Python process timing the ``latch.compile(...)`` call alone (after
``import torch, latch`` and building the model), with ``LATCH_CACHE_DIR`` set to a new
temporary folder shared by the runs.  Prints and writes
bench/results/tinymoe_warm_hit-<UTC>.json (times, the cache line of each report, load
average, commit).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = """
import json, sys, time
sys.path.insert(0, {bench!r}); sys.path.insert(0, {tests!r})
import torch, latch
from tinymoe_model import make_tinymoe_196m, tinymoe_rule
model, example = make_tinymoe_196m(batch={batch})
t0 = time.perf_counter()
prog = latch.compile(model, tinymoe_rule({recipe!r}), example, target="cuda",
                     precision={precision!r})
seconds = time.perf_counter() - t0
print(json.dumps({{"compile_s": round(seconds, 3), "cache": prog.report().splitlines()[-1]}}))
"""


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--precision", default="bf16")
    p.add_argument("--hits", type=int, default=2)
    args = p.parse_args(argv)
    code = CHILD.format(bench=os.path.join(ROOT, "bench"), tests=os.path.join(ROOT, "tests", "py"),
                        batch=args.batch, recipe="B2" if args.batch == 2 else "Q",
                        precision=args.precision)
    runs = []
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, LATCH_CACHE_DIR=cache)
        env.pop("LATCH_CACHE", None)
        for i in range(1 + args.hits):
            r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               env=env, cwd=ROOT)
            if r.returncode != 0:
                print(r.stderr[-2000:])
                return 1
            run = json.loads(r.stdout.strip().splitlines()[-1])
            run["kind"] = "cold" if i == 0 else "warm, new process"
            runs.append(run)
            print(f"{run['kind']:18s} {run['compile_s']:8.2f} s   {run['cache']}", flush=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                            cwd=ROOT).stdout.strip()
    now = datetime.datetime.now(datetime.timezone.utc)
    out = {"workload": f"tinymoe-b{args.batch}", "precision": args.precision,
           "target": "cuda", "runs": runs, "loadavg": os.getloadavg(), "commit": commit,
           "date": now.strftime("%Y-%m-%dT%H:%M:%SZ")}
    folder = os.path.join(ROOT, "bench", "results")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"tinymoe_warm_hit-{now.strftime('%Y%m%dT%H%M%SZ')}.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print("wrote", os.path.relpath(path, ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
