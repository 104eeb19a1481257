"""Debug a cuda artifact launch by launch (GPU side, runtime only):

    PYTHONPATH=.:tests/py python bench/gpu_debug_launches.py bench/artifacts/<w>.latch

Loads the artifact, initializes the state from ``<w>.ref.npz`` (as bench/gpu_models.py),
zeroes the arena, then runs the launch list of one step one kernel at a time, synchronizing
after each: prints the first launch that faults and the first launches after which new
non-finite (NaN or inf) float32 values appear in the arena, a state or an output buffer.
"""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))


def main(path, limit=8):
    import numpy as np
    import torch

    import latch
    from latch.runtime import driver as drv
    from models import MODELS

    name = os.path.basename(path)[:-6]
    ref = np.load(path[:-6] + ".ref.npz")
    model_name = next(m for m in ("mlp", "char_lm", "tiny_moe") if name.startswith(m))
    model, _ = MODELS[model_name](seed=0)
    with torch.no_grad():
        for n, t in model.named_parameters():
            t.copy_(torch.from_numpy(ref[f"init/{n}"]))
    batch, j = [], 0
    while f"batch/0/{j}" in ref:
        batch.append(torch.from_numpy(ref[f"batch/0/{j}"]).cuda())
        j += 1
    prog = latch.load(path)
    prog.use_graph = False
    prog.init(model)                  # the model's parameters into the state buffers
    for t, buf in zip(batch, prog.input_buffers):
        buf.view().copy_(t)
    drv.memset_zero(prog.arena.ptr, prog.arena.nbytes, prog.stream, "arena")
    prog.stream.synchronize("zero")
    arena = torch.as_tensor(_Raw(prog.arena.ptr, prog.arena.nbytes), device="cuda")

    def bad_counts():
        a = arena[: arena.numel() // 4 * 4].view(torch.float32)
        out = {"arena": int((~torch.isfinite(a)).sum())}
        for b in prog.state_buffers + prog.output_buffers:
            if b.spec["dtype"] == "f32" and b.nbytes:
                out[b.label] = int((~torch.isfinite(b.view())).sum())
        return out

    before = bad_counts()
    print("non-finite before:", {k: v for k, v in before.items() if v})
    reported = 0
    for i, launch in enumerate(prog.launches):
        try:
            launch.enqueue(prog.stream)
            prog.stream.synchronize(launch.what)
        except Exception as e:  # noqa: BLE001
            print(f"launch {i} {launch.what} FAULTED: {e}")
            print("  spec:", launch.spec)
            return 1
        now = bad_counts()
        grew = {k: (before.get(k, 0), v) for k, v in now.items() if v > before.get(k, 0)}
        if grew and reported < limit:
            print(f"launch {i} {launch.what} grid={launch.grid} block={launch.block}: "
                  f"non-finite grew {grew}")
            print("  args:", launch.spec["args"])
            reported += 1
        before = now
    print("all launches ran; outputs:", [b.view().cpu() for b in prog.output_buffers])
    return 0


class _Raw:
    def __init__(self, ptr, n):
        self.__cuda_array_interface__ = {"shape": (n,), "typestr": "|u1", "data": (ptr, False),
                                         "version": 2, "strides": None}


if __name__ == "__main__":
    sys.exit(max([main(p) for p in sys.argv[1:]] or [0]))
