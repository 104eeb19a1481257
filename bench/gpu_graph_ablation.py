"""What each kernel module costs the update where it runs: the CUDA graph timed with that
module's launches emptied, one module at a time (GPU side, runtime only).

    LATCH_COMMIT=$(git rev-parse --short HEAD) PYTHONPATH=.:tests/py:bench \
        python bench/gpu_graph_ablation.py ARTIFACT.latch --model tinymoe-b2 \
        [--iters 5] [--top 30] [--budget-s 400]

gpu_profile_launches.py times every launch alone: it says what a kernel costs in
isolation, not what it costs the update, whose eight streams overlap kernels and whose
longest chain decides the time (TinyMoE B2: 10.6 ms of launches alone in a 6.5 ms update).
Here the update's own graph is captured again with every launch of one kernel module
replaced by the empty kernel of gpu_graph_floor.py (its grid, block and shared memory
kept), and timed like the update (median of ``--iters`` steps after capture; one real
update between two modules); the module's **marginal cost** is the real update's median
minus that.  Modules are tried in the order of the manifest's first launch of each; the
real update is timed again every 20 modules (its spread is the resolution: differences
below it say nothing).  An emptied kernel writes nothing, and the memory plan reuses its
output's arena slot for other buffers, so what its readers would find there is another
buffer's bytes: as floats possibly NaN, as indices out of any range (a gather through them
faults).  So the arena's temporaries are zeroed before every step, real or emptied
(outside the timing; the slots where swapped states keep their other value are left
alone): an emptied kernel's readers see zeros — finite floats, index 0, empty experts (an
emptied routing kernel then also saves the expert products' work: its marginal cost
includes theirs).  ``--budget-s`` stops the sweep in time (the modules not reached are listed).

Prints the ``--top`` modules by marginal cost with their launches and grids and writes
``graph-ablation-<artifact>-<UTC time>.json`` (bench/results and $OUT).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))


def temporary_ranges(prog) -> list:
    """The arena's byte ranges that hold temporaries: all of it but the slots where a state
    that commits by swap keeps its other value (latch.runtime.commit)."""
    ranges, at = [], 0
    for a, n in sorted(prog.swap.slots.values()):
        if a > at:
            ranges.append((at, a - at))
        at = max(at, a + n)
    if prog.arena.nbytes > at:
        ranges.append((at, prog.arena.nbytes - at))
    return ranges


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("artifact")
    p.add_argument("--model", required=True)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--budget-s", type=float, default=400.0)
    args = p.parse_args(argv)
    import torch

    from gpu_graph_floor import all_launches, empty_kernel, recapture, save_graph_record
    from gpu_profile_launches import loaded_with_state
    from latch.runtime import driver as drv

    t0 = time.monotonic()
    prog, state, inputs = loaded_with_state(args.artifact, args.model)
    empty, fn = empty_kernel(prog)
    launches = all_launches(prog)
    real_fn = {id(la): la.function for la in launches}
    modules: dict[str, list] = {}
    for la in launches:
        modules.setdefault(la.spec["module"], []).append(la)

    temporaries = temporary_ranges(prog)

    def zero_temporaries() -> None:
        for at, n in temporaries:
            drv.memset_zero(prog.arena.ptr + at, n, prog.stream, "the temporaries")
        prog.stream.synchronize("zeroing the temporaries")

    def step() -> None:
        zero_temporaries()
        prog.step(state, *inputs)

    def timed() -> float:
        recapture(prog)
        for _ in range(3):                  # direct, capture, one replay
            step()
        times = []
        for _ in range(args.iters):
            zero_temporaries()              # outside the timing
            torch.cuda.synchronize()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            prog.step(state, *inputs)
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
        return statistics.median(times)

    reals = [timed()]
    rows, skipped = [], []
    for n, (name, group) in enumerate(modules.items()):
        if time.monotonic() - t0 > args.budget_s:
            skipped.append(name)
            continue
        print(f"  [{n + 1}/{len(modules)}] {name}:", end=" ", flush=True)
        for la in group:
            la.function = fn
        ms = timed()
        for la in group:
            la.function = real_fn[id(la)]
        recapture(prog)
        step()                              # one real update: every buffer refreshed
        rows.append({"module": name, "launches": len(group), "ms_emptied": ms,
                     "grid": list(group[0].grid), "block": list(group[0].block)})
        print(f"{ms:.3f} ms emptied (real {reals[-1]:.3f})", flush=True)
        if n % 20 == 19:
            reals.append(timed())
    reals.append(timed())
    real = statistics.median(reals)
    for r in rows:
        r["marginal_ms"] = real - r["ms_emptied"]
    rows.sort(key=lambda r: -r["marginal_ms"])
    spread = max(reals) - min(reals)
    print(f"real update: median {real:.3f} ms over {len(reals)} timings (spread "
          f"{spread:.3f} ms: the resolution); {len(rows)} of {len(modules)} modules emptied "
          f"one at a time", flush=True)
    for r in rows[:args.top]:
        print(f"  {r['module']:24s} {r['launches']:4d} launches  grid {str(r['grid']):16s} "
              f"marginal {r['marginal_ms']:+8.3f} ms")
    print(f"sum of the marginal costs: {sum(r['marginal_ms'] for r in rows):.3f} ms "
          "(kernels that overlap others count less than their own time)")
    if skipped:
        print(f"not reached within --budget-s: {len(skipped)} modules")
    save_graph_record("graph-ablation", args, {"iters": args.iters, "real_ms": reals,
                                               "rows": rows, "not_reached": skipped})
    empty.unload()
    return 0


if __name__ == "__main__":
    sys.exit(main())
