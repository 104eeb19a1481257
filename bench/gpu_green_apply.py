"""Diagnostic (GPU side, runtime only): why do an update's two phases not overlap?  The step
phase (forward, loss, backward, gradient norm) and the apply phase (AdamW over every
parameter, 5.4 GB at B2) take 4.74 and ~2.0 ms alone and 6.46 ms side by side with no order
between them (bench/gpu_pipelined_updates.py, ``diag-phases-unordered``).  Two causes are
possible: the apply kernels' blocks fill every SM (registers and thread slots: 8 blocks of
256 threads an SM) so that each small step-phase kernel waits for apply blocks to retire
before its own blocks start, or DRAM contention.  An SM partition tells them apart: the
apply phase launched into a *green context* holding ``--sms`` SMs (CUDA 12.4+
``cuGreenCtxCreate``), the step phase on the program's own streams.  If the SM slots are the
cause, the step phase runs beside the apply phase at nearly its own speed; if DRAM is,
it does not.

    PYTHONPATH=.:tests/py:bench python bench/gpu_green_apply.py \\
        bench/artifacts/tinymoe196m/tinymoe196m-b2-bf16.latch=tinymoe-b2 [--sms 16,32,48]

Times each arrangement by CUDA events around work enqueued behind a sleeping kernel (the
launches queue up while the GPU sleeps, so the figure is the GPU's, not Python's), eagerly
(no graph; bench/gpu_pipelined_updates.py ``--apply-sms`` times the pipelined graphs with
the apply phase in a green context), ``--iters`` times, medians:
step phase alone, apply phase alone (all SMs, and in each green context), the two
unordered on all SMs, and unordered with the apply phase in each green context.  The state
is garbage afterwards (the phases race): timing only.  Writes
bench/results/green_apply-<date>.json (and $OUT).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))

SLEEP_CYCLES = 60_000_000        # ~30 ms at 2 GHz: longer than enqueueing ~900 launches


def run(artifact: str, workload: str, args, env: dict) -> list[dict]:
    import torch

    from gpu_profile_launches import loaded_with_state
    from latch.runtime import streams
    from latch.runtime.pipelined import PipelinedUpdates, side_by_side_after

    prog, state, inputs = loaded_with_state(artifact, workload)
    prog.step(state, *inputs)                     # modules loaded, buffers touched
    torch.cuda.synchronize()
    pipe = PipelinedUpdates(prog, priorities=True)
    s, at = pipe.start, prog.at_new
    step_specs, apply_specs = pipe.specs[:s], pipe.specs[s:]
    step_launches = pipe.variant.setup(at).launches[:s]
    apply_all = pipe._apply(at)
    name = os.path.basename(artifact)
    base = dict(env, workload=workload, artifact=name, apply_from=s,
                launches=len(pipe.specs))

    def enqueue(parts, apply_stream):
        """Enqueue parts [(phase, specs, launch objects)] with no order between them: the
        step phase over the pipelined runner's step streams, the apply phase on
        ``apply_stream``."""
        after = side_by_side_after([(sp, at) for _, sp, _ in parts], prog.swap.slots)
        launches = [la for _, _, objs in parts for la in objs]
        side = pipe.step_streams + [apply_stream]
        pinned = [len(side) if phase == "apply" else None
                  for phase, _, objs in parts for _ in objs]
        plan = streams.plan(after, 1 + len(side), streams.policy_wanted(), pinned=pinned,
                            avoid=frozenset({0}))
        events = streams.Events(plan)
        streams.enqueue(plan, launches, prog.stream, side, events)
        return events

    def timed(parts, apply_stream) -> list[float]:
        out = []
        kept = []
        for _ in range(args.iters + 2):
            cur = torch.cuda.current_stream()
            torch.cuda._sleep(SLEEP_CYCLES)
            a = torch.cuda.Event(enable_timing=True)
            b = torch.cuda.Event(enable_timing=True)
            a.record(cur)
            prog.torch_stream.wait_stream(cur)
            kept.append(enqueue(parts, apply_stream))
            cur.wait_stream(prog.torch_stream)
            b.record(cur)
            b.synchronize()
            out.append(a.elapsed_time(b))
        for ev in kept:
            ev.destroy()
        return out[2:]

    records = []

    def record(engine, times, **extra):
        rec = dict(base, engine=engine, median_ms=round(statistics.median(times), 4),
                   min_ms=round(min(times), 4), max_ms=round(max(times), 4),
                   iters=len(times), **extra)
        records.append(rec)
        print(f"  {engine:34s} {rec['median_ms']:8.3f} ms ({rec['min_ms']:.3f}–"
              f"{rec['max_ms']:.3f})", flush=True)

    step_part = ("step", step_specs, step_launches)
    plain_apply = pipe.apply_stream
    print(f"{name}: apply phase from launch {s} of {len(pipe.specs)}", flush=True)
    record("step-phase-alone", timed([step_part], plain_apply))
    record("apply-phase-alone", timed([("apply", apply_specs, apply_all)], plain_apply))
    record("unordered", timed([("apply", apply_specs, apply_all), step_part], plain_apply))
    for sms in args.sms:
        try:         # the pipelined runner's apply phase and stream in a green context
            green = PipelinedUpdates(prog, priorities=True, apply_sms=sms)
            apply_part = ("apply", apply_specs, green._apply(at))
        except Exception as e:     # noqa: BLE001 - a diagnostic: say what failed
            print(f"  green context of {sms} SMs: {type(e).__name__}: {e}", flush=True)
            records.append(dict(base, engine=f"green-{sms}", error=str(e)))
            continue
        granted = green.green.sms
        try:
            record(f"apply-phase-alone-green-{granted}sms",
                   timed([apply_part], green.apply_stream), sms=granted)
            record(f"unordered-apply-green-{granted}sms",
                   timed([apply_part, step_part], green.apply_stream), sms=granted)
        except Exception as e:     # noqa: BLE001
            print(f"  launching into a green context of {granted} SMs: {e}", flush=True)
            records.append(dict(base, engine=f"green-{granted}", error=str(e)))
        prog.stream.synchronize("green")
        green.close()
    pipe.close()
    prog.close()
    return records


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("artifacts", nargs="+", help="ARTIFACT.latch=WORKLOAD")
    ap.add_argument("--sms", default="16,32,48",
                    help="SM counts of the apply phase's green contexts (comma-separated)")
    ap.add_argument("--iters", type=int, default=15)
    args = ap.parse_args()
    args.sms = [int(x) for x in args.sms.split(",") if x]
    import torch

    from latch.runtime import driver as drv
    from results_files import save_records

    env = {"gpu": torch.cuda.get_device_name(), "driver": drv.driver_version(),
           "torch": torch.__version__, "commit": os.environ.get("LATCH_COMMIT", "unknown"),
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    print(json.dumps(env), flush=True)
    records = []
    for spec in args.artifacts:
        artifact, workload = spec.split("=")
        records += run(artifact, workload, args, env)
    stamp = env["date"].replace("-", "").replace(":", "")
    save_records(records, f"green_apply-{stamp}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
