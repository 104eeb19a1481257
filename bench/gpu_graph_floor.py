"""How much of an update's time is its launches: the same CUDA graph with every kernel
emptied (GPU side, runtime only).

    LATCH_COMMIT=$(git rev-parse --short HEAD) PYTHONPATH=.:tests/py:bench \
        python bench/gpu_graph_floor.py ARTIFACT.latch --model tinymoe-b2 [--iters 30]

Loads the artifact and initializes its state from the model (``--model``: a workload of
bench/bf16_probe_build.py, as gpu_profile_launches.py), then times the update as
tinymoe_bench_gpu.py does (``prog.step``, median of ``--iters`` after the graph is captured,
CUDA events) in three forms, one after the other in the same process:

* **real**: the program;
* **empty**: every kernel replaced by one that only runs ``griddepcontrol.launch_dependents``
  and ``griddepcontrol.wait`` (as every Latch kernel begins) and returns, launched with its
  own grid, block and dynamic shared memory — the launches, their dependencies across the
  streams, the guard kernels, the copies and the scheduling of every block, without the
  kernels' work;
* **one-block**: the same empty kernel on one block of 32 threads — launches and
  dependencies alone.

``empty`` is the floor that faster kernels cannot lower (only fewer launches, fewer
dependencies or fewer blocks can); ``real - empty`` is what the kernels' work adds on top.
The graph keeps the program's streams, events and order (each form is captured again by the
program's own code path).  The emptied updates change no state (the non-finite guard may
count them as skipped steps).  Prints the three medians and writes
``graph-floor-<artifact>-<UTC time>.json`` (bench/results and $OUT).
"""
from __future__ import annotations

import argparse
import datetime
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))

EMPTY_PTX = """.version 8.1
.target {chip}
.address_size 64

.visible .entry latch_empty()
{{
    griddepcontrol.launch_dependents;
    griddepcontrol.wait;
    ret;
}}
"""


def recapture(prog) -> None:
    """Forget every variant's captured graphs: the next step records directly, the one
    after captures again."""
    for v in prog.variants:
        for made in v.setups.values():
            if made.graph is not None:
                made.graph.destroy()
            made.graph, made.uses = None, 0


def all_launches(prog) -> list:
    """Every kernel launch of every variant of the program, in each placement of its
    swapped states that a one-variant program meets (none or all of them in their new-value
    slots: latch.runtime.commit), made now if not yet used."""
    for v in prog.variants:
        v.setup(frozenset())
        v.setup(v.flips)
    return [la for v in prog.variants for made in v.setups.values() for la in made.launches]


def empty_kernel(prog):
    """(loaded module, function) of the empty kernel, allowed as much dynamic shared memory
    as the program's largest launch asks for (so it can take any launch's place)."""
    from latch.runtime import driver as drv

    chip = prog.manifest.get("target", {}).get("chip", "sm_90")
    module = prog.device.load_ptx(EMPTY_PTX.format(chip=chip), "latch_empty")
    fn = module.function("latch_empty")
    most = max(int(la.shared) for la in all_launches(prog))
    if most > 48 * 1024:                # the contractions' dynamic shared memory, opted in
        drv.call("cuFuncSetAttribute", fn, drv.driver().CUfunction_attribute
                 .CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, most, what="latch_empty")
    return module, fn


def save_graph_record(kind: str, args, fields: dict) -> None:
    """Write a graph tool's record ``<kind>-<artifact>-<UTC time>.json`` (bench/results and
    $OUT: results_files.save_records) with the GPU, torch, commit, date, artifact and
    model before ``fields``, and print where it went."""
    import torch

    from results_files import save_records

    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    name = os.path.splitext(os.path.basename(args.artifact))[0]
    doc = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
           "commit": os.environ.get("LATCH_COMMIT", "unknown"), "date": stamp,
           "artifact": args.artifact, "model": args.model, **fields}
    for path in save_records(doc, f"{kind}-{name}-{stamp}"):
        print("wrote", path)


def _empty_launches(prog, fn, one_block: bool) -> None:
    for launch in all_launches(prog):
        launch.function = fn
        if one_block:
            launch.grid, launch.block, launch.shared = (1, 1, 1), (32, 1, 1), 0
    recapture(prog)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("artifact")
    p.add_argument("--model", required=True)
    p.add_argument("--iters", type=int, default=30)
    args = p.parse_args(argv)
    import torch

    from gpu_profile_launches import loaded_with_state
    from tinymoe_bench_gpu import events_ms

    prog, state, inputs = loaded_with_state(args.artifact, args.model)
    empty, fn = empty_kernel(prog)

    def timed(form: str) -> dict:
        for _ in range(3):                  # direct, capture, one replay
            prog.step(state, *inputs)
        torch.cuda.synchronize()
        out = events_ms(lambda: prog.step(state, *inputs), args.iters)
        print(f"{form:10s} median {out['median_ms']:8.3f} ms (min {out['min_ms']:.3f}, "
              f"max {out['max_ms']:.3f})", flush=True)
        return out

    launches = len(prog.launches)
    blocks = sum(la.grid[0] * la.grid[1] * la.grid[2] for la in prog.launches)
    forms = {"real": timed("real")}
    _empty_launches(prog, fn, one_block=False)
    forms["empty"] = timed("empty")
    _empty_launches(prog, fn, one_block=True)
    forms["one-block"] = timed("one-block")
    real, floor = forms["real"]["median_ms"], forms["empty"]["median_ms"]
    print(f"{launches} launches, {blocks:,} blocks; the kernels' work adds "
          f"{real - floor:.3f} ms to the emptied graph's {floor:.3f} ms "
          f"({floor / real:.0%} of the update is the launches); one block each: "
          f"{forms['one-block']['median_ms']:.3f} ms")
    save_graph_record("graph-floor", args, {"launches": launches, "blocks": blocks,
                                            "iters": args.iters, "forms": forms})
    empty.unload()
    return 0


if __name__ == "__main__":
    sys.exit(main())
