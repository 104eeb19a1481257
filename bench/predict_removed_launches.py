"""Predict, from an earlier GPU profile, what removing launches from an artifact would save.

    .venv/bin/python bench/predict_removed_launches.py \
        --profile bench/results/profile-tinymoe196m-b2-bf16-unroll16-368090c-h100.json \
        --profile-artifact OLD.latch --profile-kernels OLD_DUMP/cuda-latch-kernels-to-ptx.mlir \
        --artifact BEFORE.latch --kernels BEFORE_DUMP/cuda-latch-kernels-to-ptx.mlir \
        --remove-args 'memref<2048x8xf32>,memref<6x2048x8xf32>' --reader-us 1 \
        --remove-grid 264 --writer-us 0.5

A compiler step that fuses launches into others changes kernels, and
``bench/estimate_critical_path.py`` can only guess the time of a kernel no profile has
seen.  This script instead takes the artifact *before* the step (``--artifact``), times
its launches with that script's rules (``--new-small-us`` for small unmatched ones), and
applies the step as it changes the launch graph: the launches it removes take no time
(their dependencies still hold), and the launch that takes over their work gets a stated
extra time.  Rules:

* ``--remove-args T1,T2,...``: remove each launch whose kernel's memref argument types are
  exactly these (in any order); the first later launch that depends on it gets
  ``--reader-us`` more (a reader that now does the removed kernel's work first).
* ``--remove-grid N``: remove each launch of a ``[N, 1, 1]`` grid that depends on a launch
  of a larger grid; the latest such launch gets ``--writer-us`` more, once however many
  removed launches follow it (the one-hot gathers' overflow walks and heavy-row roundings,
  now blocks of the gather's launch).

It prints the critical path and the summed launch time before and after, for each
``--new-small-us``.  A prediction from a model (each launch's time alone, the longest
chain of ``after`` dependencies): quote it as one.
"""
from __future__ import annotations

import argparse
import collections

from estimate_critical_path import (_launches, kernel_signatures, launch_times, longest,
                                    profiled_medians)


def apply_rules(new: list, sigs: dict, ms: list, remove_args, reader_us: float,
                remove_grid, writer_us: float):
    """(times after the step, {rule: launches removed})."""
    after = list(ms)
    removed = collections.Counter()
    credited = set()
    for i, launch in enumerate(new):
        types = sorted(t for t, _, _ in sigs.get(launch["module"], []))
        if remove_args and types == remove_args:
            after[i] = 0.0
            removed["by argument types"] += 1
            reader = next((j for j in range(i + 1, len(new)) if i in new[j]["after"]), None)
            if reader is not None:
                after[reader] += reader_us / 1e3
        elif remove_grid and launch["grid"] == [remove_grid, 1, 1]:
            writers = [j for j in launch["after"]
                       if new[j]["grid"][0] * new[j]["grid"][1] * new[j]["grid"][2] > remove_grid]
            if not writers:
                continue
            after[i] = 0.0
            removed[f"grid [{remove_grid}, 1, 1]"] += 1
            if max(writers) not in credited:
                credited.add(max(writers))
                after[max(writers)] += writer_us / 1e3
    return after, removed


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--profile", required=True)
    p.add_argument("--profile-artifact", required=True)
    p.add_argument("--profile-kernels", required=True)
    p.add_argument("--artifact", required=True, help="the artifact before the step")
    p.add_argument("--kernels", required=True)
    p.add_argument("--new-small-us", default="4,10")
    p.add_argument("--remove-args", default="")
    p.add_argument("--reader-us", type=float, default=0.0)
    p.add_argument("--remove-grid", type=int, default=0)
    p.add_argument("--writer-us", type=float, default=0.0)
    args = p.parse_args(argv)

    import json

    profile = json.load(open(args.profile))
    old = _launches(args.profile_artifact)
    if len(old) != len(profile["launches"]):
        raise SystemExit("the profile is not of --profile-artifact (launch counts differ)")
    old_sigs = kernel_signatures(args.profile_kernels)
    new = _launches(args.artifact)
    sigs = kernel_signatures(args.kernels)
    remove_args = sorted(t for t in args.remove_args.split(",") if t) if args.remove_args \
        else None
    medians, loose_medians = profiled_medians(profile, old, old_sigs)
    for small in (float(x) for x in args.new_small_us.split(",")):
        ms, _, _, blind = launch_times(new, sigs, medians, loose_medians, small)
        if blind:
            print(f"{len(blind)} contraction/attention launches unmatched (counted 0)")
        after, removed = apply_rules(new, sigs, ms, remove_args, args.reader_us,
                                     args.remove_grid, args.writer_us)
        print(f"{args.artifact} (unmatched small launches at {small:g} us): critical path "
              f"{longest(new, ms):.3f} -> {longest(new, after):.3f} ms, summed launch time "
              f"{sum(ms):.2f} -> {sum(after):.2f} ms; removed {sum(removed.values())} "
              f"launches ({', '.join(f'{k}: {v}' for k, v in removed.items())})")


if __name__ == "__main__":
    main()
