"""Pipelined updates measured (GPU side, runtime only): the optimizer of update t in the same
CUDA graph as the forward and backward of update t + 1 (latch.runtime.pipelined), against
the same artifact's updates one after the other, side by side in one run.

    PYTHONPATH=.:tests/py:bench python bench/gpu_pipelined_updates.py \\
        bench/artifacts/tinymoe196m/tinymoe196m-b2-bf16.latch=tinymoe-b2 \\
        [ARTIFACT=WORKLOAD ...] [--updates 6] [--iters 40]

For each artifact (its state initialized from the workload of bench/bf16_probe_build.py,
rebuilt from its seed; the workload's fixed batch):

1. **The same results**: ``--updates`` updates one after the other (``prog.step``, the
   state API), from the same initial state pipelined (``PipelinedUpdates.step``, then
   ``flush``), and one after the other again: the losses and every state tensor equal bit
   for bit — or, for a build with float atomics (not ``deterministic=True``: two runs one
   after the other differ too), the pipelined state no further from the first run (the
   largest relative L2 difference of a tensor) than four times the second run is.
2. **Time per update** (CUDA events around each call, synchronized, ``--iters`` calls, in
   the order A B B A so that drift falls on both): ``latch`` — ``prog.step(state, ...)``,
   the program's graph with its non-finite guard and the status read, as
   bench/tinymoe_bench_gpu.py times it; ``latch-split`` — the step phase's graph then the
   apply phase's graph (the same update without the guard, so the guard's share shows);
   ``latch-pipelined`` — one steady graph a call (the previous update's apply phase and
   this one's step phase; the apply phase's kernels on a stream of their own, launched
   plainly); ``latch-pipelined-priorities`` — the same with the step phase's streams at
   the greatest scheduling priority; ``latch-pipelined-priorities-pdlapply`` — that with
   the apply phase's kernels launched with programmatic stream serialization too.
3. **A diagnostic** (timing only; the state is garbage after it): the step phase alone, the
   apply phase alone, and the two in one graph with no order between them
   (``PipelinedUpdates.unordered_step``): how much running side by side costs the step
   phase's chain when nothing makes it wait for the apply phase.

Prints each figure and writes the records (``workload``, ``engine``, ``median_ms``,
``min_ms``, ``max_ms``, ``gpu``, ``torch``, ``commit``, ``date``, plus the split point and
the equality check) to bench/results/pipelined-<date>.json (and $OUT).
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


def summary(times: list[float]) -> dict:
    return {"median_ms": round(statistics.median(times), 4), "min_ms": round(min(times), 4),
            "max_ms": round(max(times), 4), "iters": len(times)}


def worst_tensor(a: dict, b: dict) -> tuple[float, str | None]:
    """(the largest relative L2 difference of a tensor of ``b`` from the same of ``a``,
    that tensor's name)."""
    worst, name = 0.0, None
    for n in a:
        x, y = a[n].double(), b[n].double()
        d = float((x - y).norm() / x.norm().clamp_min(1e-30))
        if d > worst:
            worst, name = d, n
    return worst, name


def run(artifact: str, workload: str, args, env: dict) -> list[dict]:
    import torch

    from gpu_profile_launches import loaded_with_state
    from tinymoe_bench_gpu import event_times
    from latch.runtime.pipelined import PipelinedUpdates

    prog, state, inputs = loaded_with_state(artifact, workload)
    initial = prog.state_dict()
    name = os.path.basename(artifact)
    base = dict(env, workload=workload, artifact=name, launches=len(prog.launches))

    # 1. the same results: bit for bit, or (float atomics: a build that is not
    # deterministic differs run to run) no further from one after the other than a second
    # run one after the other is
    def sequential():
        prog.load_state(initial)
        losses = [float(prog.step(state, *inputs)) for _ in range(args.updates)]
        return losses, prog.state_dict()

    runner = PipelinedUpdates(prog)
    ranked = PipelinedUpdates(prog, priorities=True)
    chained = PipelinedUpdates(prog, priorities=True, apply_dependent=True)

    def pipelined(r):
        prog.load_state(initial)
        losses = [float(r.step(*inputs)) for _ in range(args.updates)]
        r.flush()
        return losses, prog.state_dict()

    greens = {}                      # engine name -> runner, the apply phase on n SMs
    for n in args.apply_sms:
        try:
            r = PipelinedUpdates(prog, priorities=True, apply_sms=n)
            greens[f"latch-pipelined-green{r.green.sms}"] = r
        except Exception as e:       # noqa: BLE001 - say why and time the rest
            print(f"  green context of {n} SMs: {type(e).__name__}: {e}", flush=True)
    seq, want = sequential()
    green_checks = {}
    for e, r in list(greens.items()):
        try:
            losses, got_g = pipelined(r)
        except Exception as err:     # noqa: BLE001
            print(f"  {e}: {type(err).__name__}: {err}", flush=True)
            del greens[e]
            continue
        d, worst = worst_tensor(want, got_g)
        green_checks[e] = {"sms": r.green.sms, "same_bits": losses == seq and all(
            torch.equal(want[k], got_g[k]) for k in want), "max_rel_diff_pipelined": d,
            "worst_tensor_pipelined": worst, "losses_pipelined": losses}
        print(f"  {e}: {green_checks[e]}", flush=True)
        del got_g
    piped, got = pipelined(runner)
    piped2, got2 = pipelined(ranked)
    again, want2 = sequential()
    (d_piped, n_piped), (d_ranked, _), (d_again, n_again) = (
        worst_tensor(want, other) for other in (got, got2, want2))
    check = {"apply_from": runner.start, "updates_checked": args.updates,
             "same_bits": piped == seq and all(torch.equal(want[n], got[n]) for n in want),
             "same_bits_with_priorities": piped2 == seq and all(
                 torch.equal(want[n], got2[n]) for n in want),
             "max_rel_diff_pipelined_with_priorities": d_ranked,
             "sequential_repeatable": again == seq and all(torch.equal(want[n], want2[n])
                                                           for n in want),
             "max_rel_diff_pipelined": d_piped,
             "max_rel_diff_sequential_again": d_again,
             "worst_tensor_pipelined": n_piped,
             "worst_tensor_sequential_again": n_again,
             "losses_sequential": seq, "losses_pipelined": piped, "losses_again": again}
    check["same_results"] = check["same_bits"] or (
        not check["sequential_repeatable"] and
        check["max_rel_diff_pipelined"] <= 4 * check["max_rel_diff_sequential_again"])
    print(f"{name}: apply phase from launch {runner.start} of {len(prog.launches)}; "
          f"{args.updates} updates pipelined vs one after the other: "
          f"{'the same bits' if check['same_bits'] else 'not the same bits'} (max relative "
          f"difference of a state tensor {check['max_rel_diff_pipelined']:.3g}; two runs one "
          f"after the other: {'the same bits' if check['sequential_repeatable'] else ''}"
          f" {check['max_rel_diff_sequential_again']:.3g}) -> "
          f"{'OK' if check['same_results'] else 'DIFFERENT'}; losses {seq} / {piped}",
          flush=True)
    del want, got, want2, got2
    initial.clear()
    torch.cuda.empty_cache()

    # 2. time per update, A B B A
    split = PipelinedUpdates(prog)

    def split_update():
        split.step(*inputs)
        split.flush()

    engines = {"latch": lambda: prog.step(state, *inputs), "latch-split": split_update,
               "latch-pipelined": lambda: runner.step(*inputs),
               "latch-pipelined-priorities": lambda: ranked.step(*inputs),
               "latch-pipelined-priorities-pdlapply": lambda: chained.step(*inputs)}
    engines.update({e: (lambda r=r: r.step(*inputs)) for e, r in greens.items()})
    runners = (runner, ranked, chained, *greens.values())
    times = {e: [] for e in engines}
    half = max(1, args.iters // 2)
    for e in engines:                                # capture every graph first
        event_times(engines[e], 3)
        for r in runners:
            r.flush()
    for order in (list(engines), list(reversed(engines))):
        for e in order:
            times[e] += event_times(engines[e], half)
            for r in runners:
                r.flush()
    # 3. a diagnostic (the state is garbage afterwards): the two phases side by side
    # with no order between them, against the step phase alone
    head = PipelinedUpdates(prog, priorities=True)

    def step_alone():
        head.step(*inputs)
        head.pending = None            # drop the apply phase: timing only

    def apply_alone():
        split.pending = prog.at_new    # the apply phase on the live state: timing only
        split.flush()

    for e, fn in (("diag-step-phase-alone", step_alone),
                  ("diag-apply-phase-alone", apply_alone),
                  ("diag-phases-unordered", lambda: ranked.unordered_step(*inputs))):
        event_times(fn, 3)
        times[e] = event_times(fn, half)
    for r in (*runners, split, head):
        r.close()
    records = []
    ref = statistics.median(times["latch"])
    for e, t in times.items():
        rec = dict(base, engine=e, **summary(t))
        rec["vs_latch"] = round(ref / rec["median_ms"], 4)
        if e in green_checks:
            rec.update(green_checks[e])
        elif e.startswith("latch-pipelined"):
            rec.update(check)
        records.append(rec)
        print(f"  {e:16s} {rec['median_ms']:8.3f} ms ({rec['min_ms']:.3f}–{rec['max_ms']:.3f})"
              f"  {rec['vs_latch']:.3f}× the latch time", flush=True)
    prog.close()
    return records


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", help="ARTIFACT=WORKLOAD (e.g. …-b2-bf16.latch=tinymoe-b2)")
    p.add_argument("--updates", type=int, default=6)
    p.add_argument("--iters", type=int, default=40)
    p.add_argument("--apply-sms", default="",
                   help="comma-separated SM counts: also pipelined with the apply phase in "
                        "a green context of that many SMs (latch-pipelined-green<N>)")
    args = p.parse_args(argv)
    args.apply_sms = [int(x) for x in args.apply_sms.split(",") if x]
    import torch

    from latch.runtime import driver as drv
    from results_files import save_records

    env = {"gpu": torch.cuda.get_device_name(0), "driver": drv.driver_version(),
           "torch": torch.__version__, "commit": os.environ.get("LATCH_COMMIT", "unknown"),
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    print(json.dumps(env), flush=True)
    records = []
    stamp = env["date"].replace(":", "").replace("-", "")
    for spec in args.runs:
        artifact, workload = spec.rsplit("=", 1)
        try:
            records += run(artifact, workload, args, env)
        except Exception as e:  # noqa: BLE001 - recorded, the next run goes on
            records.append(dict(env, workload=workload, artifact=os.path.basename(artifact),
                                engine="latch-pipelined", failed=f"{type(e).__name__}: {e}"))
            print(f"{artifact}: FAILED {type(e).__name__}: {e}", flush=True)
        save_records(records, f"pipelined-{stamp}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
