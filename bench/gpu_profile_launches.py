"""Where an update's time goes, kernel by kernel (GPU side, runtime only).

    PYTHONPATH=.:tests/py:bench python bench/gpu_profile_launches.py ARTIFACT.latch \
        --model tinymoe-b2 [--top 25] [--repeats 3]

Loads the artifact, initializes its state from the model (``--model``: a workload of
bench/bf16_probe_build.py, rebuilt from its seed), runs one update, then enqueues the
update's launch list ``--repeats`` times with a CUDA event between consecutive launches
and reports, per launch, the median time: the sum (≈ the update without graph replay's
launch overhead), the critical path (the longest chain of launches through the manifest's
``after`` lists, weighted by those times: what the update would take on unlimited streams
with free launches), the time per kernel class (tensor-core contraction, SIMT contraction,
one-block kernels, fused attention, other), and the ``--top`` slowest launches with grid
and block, each with the bytes its buffer arguments span (the manifest's ``arg_bytes``: a
streaming kernel's traffic) over its time; then the kernel modules that lose the most time
against the copy bandwidth measured in the same run (time − bytes / bandwidth, summed over
their launches; contractions and attention left out: their floor is not the bandwidth),
and each contraction and attention kernel's registers, spilled bytes and resident blocks
an SM (what the driver's JIT made of its PTX).  The launches are enqueued in chunks behind a sleeping kernel, so the GPU never
waits for the host between two of them (a per-launch time is the kernel's, not Python's).
Writes the same as JSON to $OUT/profile-<artifact>.json when $OUT is set.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))


CHUNK = 256                 # launches enqueued behind one sleep
SLEEP_CYCLES = 20_000_000   # ≈ 10 ms at the H200's clock: longer than enqueueing a chunk


def critical_path(after, ms):
    """(ms, [launch index]) of the longest chain through ``after`` (launch i follows the
    launches after[i]), each launch weighted by ms[i]; None when a launch has no list."""
    if not after or any(a is None for a in after):
        return None
    best, prev = [0.0] * len(ms), [None] * len(ms)
    for i, deps in enumerate(after):
        j = max(deps, key=lambda d: best[d], default=None)
        best[i] = ms[i] + (best[j] if j is not None else 0.0)
        prev[i] = j
    end = max(range(len(ms)), key=lambda i: best[i])
    chain = []
    while end is not None:
        chain.append(end)
        end = prev[end]
    return best[chain[0]], chain[::-1]


def kernel_class(launch, ptx_has_mma: dict) -> str:
    mod = launch.spec["module"]
    if mod.startswith("latch_contract"):
        return "contraction-mma" if ptx_has_mma.get(mod) else "contraction-simt"
    if mod.startswith("latch_attention"):
        return "attention"
    if [int(x) for x in launch.grid] == [1, 1, 1]:
        return "one-block"
    return "other"


def bandwidth_note(launch, ms: float) -> str:
    nbytes = launch.spec.get("arg_bytes")
    if not nbytes or ms <= 0:
        return ""
    return f", {nbytes / 1e6:.1f} MB at {nbytes / ms / 1e6:.0f} GB/s"


def lost_to_bandwidth(launches, ms, copy_gbs: float, ptx_has_mma: dict) -> list:
    """Per kernel module outside contractions and attention: its launches, time, argument
    bytes, achieved GB/s and the time beyond ``bytes / copy_gbs``, most lost first."""
    rows: dict = {}
    for la, t in zip(launches, ms):
        nbytes = la.spec.get("arg_bytes")
        if nbytes is None or kernel_class(la, ptx_has_mma) in (
                "contraction-mma", "contraction-simt", "attention"):
            continue
        r = rows.setdefault(la.spec["module"], {"module": la.spec["module"], "launches": 0,
                                                "ms": 0.0, "bytes": 0})
        r["launches"] += 1
        r["ms"] += t
        r["bytes"] += nbytes
    for r in rows.values():
        r["gbs"] = r["bytes"] / r["ms"] / 1e6 if r["ms"] > 0 else 0.0
        r["lost_ms"] = r["ms"] - r["bytes"] / copy_gbs / 1e6
        r["ms"] = round(r["ms"], 4)
    return sorted(rows.values(), key=lambda r: -r["lost_ms"])


def kernel_resources(launches) -> dict:
    """Per kernel module (first launch of each): registers a thread, local (spilled) bytes
    a thread, and the resident blocks an SM the driver allows at its block size and
    dynamic shared memory (``cuOccupancyMaxActiveBlocksPerMultiprocessor``)."""
    from latch.runtime import driver as drv

    d = drv.driver()
    attr = d.CUfunction_attribute
    out = {}
    for la in launches:
        mod = la.spec["module"]
        if mod in out:
            continue
        threads = int(la.block[0]) * int(la.block[1]) * int(la.block[2])
        shared = int(la.spec.get("shared_bytes", 0))
        out[mod] = {
            "registers": drv.call("cuFuncGetAttribute", attr.CU_FUNC_ATTRIBUTE_NUM_REGS,
                                  la.function, what=mod),
            "local_bytes": drv.call("cuFuncGetAttribute",
                                    attr.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, la.function,
                                    what=mod),
            "blocks_per_sm": drv.call("cuOccupancyMaxActiveBlocksPerMultiprocessor",
                                      la.function, threads, shared, what=mod),
            "shared_bytes": shared}
    return out


def loaded_with_state(artifact: str, model_name: str):
    """(program, its training state initialized from the workload ``model_name`` of
    bench/bf16_probe_build.py, that workload's inputs on the GPU)."""
    import latch
    from bf16_probe_build import make

    model, example = make(model_name)
    prog = latch.load(artifact)
    return prog, prog.init(model), [x.cuda() for x in example]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("artifact")
    p.add_argument("--model", required=True)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    import torch

    from tinymoe_bench_gpu import measure_copy_gbs

    prog, state, inputs = loaded_with_state(args.artifact, args.model)
    prog.step(state, *inputs)
    torch.cuda.synchronize()
    with zipfile.ZipFile(args.artifact) as z:
        ptx_has_mma = {m: b"mma.sync" in z.read(path) or b"wgmma.mma_async" in z.read(path)
                       for m, path in prog.manifest["modules"].items()}
    launches = prog.launches
    per = [[] for _ in launches]
    stream = prog.torch_stream
    for _ in range(args.repeats):
        for lo in range(0, len(launches), CHUNK):
            chunk = range(lo, min(lo + CHUNK, len(launches)))
            events = [torch.cuda.Event(enable_timing=True) for _ in range(len(chunk) + 1)]
            with torch.cuda.stream(stream):
                torch.cuda._sleep(SLEEP_CYCLES)    # the host enqueues the chunk meanwhile
            events[0].record(stream)
            for k, i in enumerate(chunk):
                launches[i].enqueue(prog.stream)
                events[k + 1].record(stream)
            stream.synchronize()
            for k, i in enumerate(chunk):
                per[i].append(events[k].elapsed_time(events[k + 1]))
    med = [statistics.median(t) for t in per]
    copy_gbs = measure_copy_gbs()
    print(f"copy bandwidth measured in this run: {copy_gbs:.0f} GB/s")
    path = critical_path([la.spec.get("after") for la in launches], med)
    classes: dict[str, list] = {}
    for la, t in zip(launches, med):
        c = classes.setdefault(kernel_class(la, ptx_has_mma), [0, 0.0])
        c[0] += 1
        c[1] += t
    total = sum(med)
    print(f"{os.path.basename(args.artifact)}: {len(launches)} launches, sum of medians "
          f"{total:.3f} ms")
    if path is not None:
        print(f"  critical path {path[0]:.3f} ms over {len(path[1])} launches")
    for c, (n, t) in sorted(classes.items(), key=lambda kv: -kv[1][1]):
        print(f"  {c:18s} {n:5d} launches {t:9.3f} ms ({100 * t / total:5.1f}%)")
    order = sorted(range(len(launches)), key=lambda i: -med[i])[:args.top]
    top = []
    for i in order:
        la = launches[i]
        top.append({"index": i, "ms": round(med[i], 4), "module": la.spec["module"],
                    "grid": la.grid, "block": la.block,
                    "class": kernel_class(la, ptx_has_mma)})
        print(f"  #{i:5d} {med[i]:8.3f} ms {la.spec['module']:28s} grid {la.grid} "
              f"block {la.block} {top[-1]['class']}{bandwidth_note(la, med[i])}")
    resources = kernel_resources(launches)
    for mod, r in sorted(resources.items()):
        if mod.startswith(("latch_contract", "latch_attention")) or r["local_bytes"]:
            print(f"  {mod:28s} {r['registers']:4d} registers, {r['local_bytes']:5d} B "
                  f"local, {r['blocks_per_sm']} blocks an SM ({r['shared_bytes']} B shared)")
    lost = lost_to_bandwidth(launches, med, copy_gbs, ptx_has_mma)
    if lost:
        print(f"  time beyond the copy bandwidth ({copy_gbs:.0f} GB/s), by kernel module:")
        for row in lost[:args.top]:
            print(f"    {row['module']:28s} {row['launches']:4d} launches {row['ms']:8.3f} ms "
                  f"for {row['bytes'] / 1e6:9.1f} MB: {row['gbs']:6.0f} GB/s, "
                  f"{row['lost_ms']:7.3f} ms beyond")
    if os.environ.get("OUT"):
        name = os.path.basename(args.artifact)[:-len(".latch")]
        with open(os.path.join(os.environ["OUT"], f"profile-{name}.json"), "w") as f:
            every = [{"index": i, "ms": round(t, 4), "module": la.spec["module"],
                      "grid": la.grid, "block": la.block,
                      "class": kernel_class(la, ptx_has_mma),
                      "arg_bytes": la.spec.get("arg_bytes")}
                     for i, (la, t) in enumerate(zip(launches, med))]
            json.dump({"artifact": args.artifact, "commit": os.environ.get("LATCH_COMMIT"),
                       "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "total_ms": total,
                       "critical_path_ms": path[0] if path else None,
                       "critical_path": path[1] if path else None,
                       "classes": classes, "top": top, "copy_gbs": copy_gbs,
                       "lost_to_bandwidth": lost, "resources": resources,
                       "launches": every}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
