"""Build the artifact that bench/gpu_smoke.py runs (on this machine: needs MLIR).

    .venv/bin/python bench/build_smoke_artifact.py [-o bench/artifacts/sgd_update.latch]
                                                   [--chip sm_90] [--block 32,8]

Compiles examples/mlir/sgd_update.mlir (a whole Latch update program: least squares, global
norm clipping, warmup+cosine schedule, SGD with momentum) with the cuda target and prints a
summary of the manifest.  Then carry bench/artifacts/ to the GPU machine and run
``PYTHONPATH=. python bench/gpu_smoke.py bench/artifacts/sgd_update.latch``.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-o", "--output", default=os.path.join(ROOT, "bench", "artifacts",
                                                          "sgd_update.latch"))
    p.add_argument("--source", default=os.path.join(ROOT, "examples", "mlir", "sgd_update.mlir"))
    p.add_argument("--chip", default="sm_90")
    p.add_argument("--features", default="+ptx81")
    p.add_argument("--block", default="32,8")
    args = p.parse_args(argv)

    from latch.targets.cuda import compile_update_to_artifact

    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    with open(args.source) as f:
        text = f.read()
    m = compile_update_to_artifact(text, args.output, chip=args.chip, features=args.features,
                                   block=args.block)
    with open(args.output, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    print(f"wrote {args.output} ({os.path.getsize(args.output)} bytes, sha256 {digest[:16]})")
    print(f"  target {m['target']}  arena {m['arena_bytes']} bytes "
          f"(planned {m['planned_arena_bytes']})")
    print(f"  states  {[(s['name'], s['shape'], s['dtype']) for s in m['states']]}")
    print(f"  inputs  {[(s['shape'], s['dtype']) for s in m['inputs']]}")
    print(f"  outputs {[(s['shape'], s['dtype']) for s in m['outputs']]}")
    print(f"  {len(m['launches'])} launches, {len(m['copies'])} state copies:")
    for launch in m["launches"]:
        print(f"    {launch['module']}::{launch['kernel']} grid={launch['grid']} "
              f"block={launch['block']} args={len(launch['args'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
