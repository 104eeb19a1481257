"""Estimate an artifact's critical path from an earlier GPU profile, without a GPU.

    .venv/bin/python bench/estimate_critical_path.py \
        --profile bench/results/profile-tinymoe196m-b2-bf16-tiling.json \
        --profile-artifact OLD.latch --profile-kernels OLD_DUMP/cuda-latch-kernels-to-ptx.mlir \
        --artifact NEW.latch --kernels NEW_DUMP/cuda-latch-kernels-to-ptx.mlir [--new-small-us 4,10,20]

``bench/gpu_profile_launches.py`` times every launch of an artifact on the GPU, alone.  A
later artifact of the same model shares most of its kernels; this script gives each of its
launches the median time of the profiled launches with the same kernel signature (each
``gpu.func`` memref argument's type and whether the kernel reads or writes it, from the
``cuda-latch-kernels-to-ptx.mlir`` stage input that ``LATCH_DUMP_DIR`` writes) and the same
grid, or failing that the median of those with the same argument types (in any order) and
grid whatever their uses (a kernel that now only writes a buffer it used to read and write
as well: latch-fold-zero-fills; an upper bound); a launch with no match is estimated — a
grid of at most 64 blocks (a latency-bound kernel, e.g. one of latch-fuse-rows' fused runs)
as ``--new-small-us`` microseconds, any other as its arguments' bytes at 3 TB/s plus 3 us
(contraction and attention kernels with no match are reported and counted as 0) — and the
longest path through the launches' ``after`` dependencies is summed.  Applied to the profile's own artifact it reproduces the
profile's ``critical_path_ms``.  An estimate, not a measurement: quote it as a prediction.
"""
from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import zipfile

_VIEWS = {"memref.subview", "memref.reinterpret_cast", "memref.view", "memref.cast",
          "memref.collapse_shape", "memref.expand_shape", "memref.transpose"}
_READS = {"memref.load", "vector.load", "vector.transfer_read", "vector.maskedload",
          "vector.gather"}
_WRITES = {"memref.store", "vector.store", "vector.transfer_write", "vector.maskedstore",
           "vector.scatter"}
_BYTES = {"i1": 1, "i8": 1, "bf16": 2, "f16": 2, "f32": 4, "i32": 4, "i64": 8, "f64": 8,
          "index": 8}


def kernel_signatures(path: str) -> dict:
    """gpu.module name -> [(memref type, bytes, uses)] of its kernel's memref arguments."""
    sys.path.insert(0, ".")
    from mlir import ir

    import latch.dialect

    def uses(value):
        found = set()
        for use in value.uses:
            op = use.owner.operation if hasattr(use.owner, "operation") else use.owner
            if op.name in _VIEWS:
                for r in op.results:
                    found |= uses(r)
            elif op.name in _READS:
                found.add("r")
            elif op.name in _WRITES:
                found.add("w")
            elif op.name in ("memref.atomic_rmw", "memref.generic_atomic_rmw"):
                found |= {"r", "w", "atomic"}
            else:
                found.add("?" + op.name)
        return found

    ctx = ir.Context()
    ctx.allow_unregistered_dialects = True
    latch.dialect.load(ctx)
    out = {}
    with ctx:
        module = ir.Module.parse(open(path).read())
        for op in module.body.operations:
            if op.operation.name != "gpu.module":
                continue
            name = ir.StringAttr(op.operation.attributes["sym_name"]).value
            for fn in op.regions[0].blocks[0].operations:
                if fn.operation.name != "gpu.func":
                    continue
                args = []
                for a in fn.regions[0].blocks[0].arguments:
                    try:
                        t = ir.MemRefType(a.type)
                    except (ValueError, TypeError):
                        continue
                    n = 1
                    for d in t.shape:
                        n *= d
                    args.append((str(a.type), n * _BYTES.get(str(t.element_type), 4),
                                 "".join(sorted(uses(a)))))
                out[name] = args
    return out


def _key(signature, launch):
    return tuple((t, u) for t, _, u in signature), tuple(launch["grid"])


def _loosen(key):
    """A :func:`_key` without how each argument is used, nor their order: a kernel that now
    only writes a buffer it used to read and write (its initial values folded, so another
    argument may come first) matches its old self."""
    args, grid = key
    return tuple(sorted(t for t, _ in args)), grid


def _launches(path: str) -> list:
    return json.loads(zipfile.ZipFile(path).read("manifest.json"))["launches"]


def longest(launches, ms) -> float:
    return _finish_times(launches, ms)[0]


def _finish_times(launches, ms):
    """(longest path's length, each launch's finish time, each launch's latest predecessor)."""
    done, before = [0.0] * len(launches), [None] * len(launches)
    for i, launch in enumerate(launches):
        start = max([(done[j], j) for j in launch["after"]], default=(0.0, None))
        done[i], before[i] = ms[i] + start[0], start[1]
    return max(done, default=0.0), done, before


def critical_path(launches, ms) -> list:
    """The launch indices of the longest path, first to last."""
    _, done, before = _finish_times(launches, ms)
    path, i = [], max(range(len(launches)), key=done.__getitem__, default=None)
    while i is not None:
        path.append(i)
        i = before[i]
    return path[::-1]


def profiled_medians(profile: dict, old: list, old_sigs: dict):
    """({:func:`_key`: median ms}, {:func:`_loosen`-ed key: median ms}) of the launches of
    the profiled artifact ``old`` (kernel signatures ``old_sigs``) timed in ``profile``."""
    times = collections.defaultdict(list)
    for launch, timed in zip(old, profile["launches"]):
        times[_key(old_sigs.get(launch["module"], []), launch)].append(timed["ms"])
    loose = collections.defaultdict(list)
    for k, v in times.items():
        loose[_loosen(k)] += v
    return ({k: statistics.median(v) for k, v in times.items()},
            {k: statistics.median(v) for k, v in loose.items()})


def launch_times(new: list, sigs: dict, medians: dict, loose_medians: dict, small: float):
    """(each launch's ms, how many matched loosely, how many not at all, the contraction
    and attention modules among those) for the launches ``new`` (kernel signatures
    ``sigs``), by the rules of the module docstring (``small`` us for a small unmatched
    grid)."""
    ms, loosely, unmatched, blind = [], 0, 0, []
    for launch in new:
        sig = sigs.get(launch["module"], [])
        k = _key(sig, launch)
        if k in medians:
            ms.append(medians[k])
            continue
        if _loosen(k) in loose_medians:
            ms.append(loose_medians[_loosen(k)])
            loosely += 1
            continue
        unmatched += 1
        blocks = launch["grid"][0] * launch["grid"][1] * launch["grid"][2]
        if launch["module"].startswith(("latch_contract", "latch_attention")):
            blind.append(launch["module"])
            ms.append(0.0)
        elif blocks <= 64:
            ms.append(small / 1e3)
        else:
            ms.append(0.003 + sum(b for _, b, _ in sig) / 3.0e9)
    return ms, loosely, unmatched, blind


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--profile", required=True)
    p.add_argument("--profile-artifact", required=True)
    p.add_argument("--profile-kernels", required=True)
    p.add_argument("--artifact", required=True)
    p.add_argument("--kernels", required=True)
    p.add_argument("--new-small-us", default="4,10,20")
    p.add_argument("--show-path", action="store_true",
                   help="list the new artifact's critical path launch by launch (with the "
                        "first --new-small-us estimate for unmatched launches)")
    args = p.parse_args(argv)

    prof = json.load(open(args.profile))
    old = _launches(args.profile_artifact)
    old_sigs = kernel_signatures(args.profile_kernels)
    if len(old) != len(prof["launches"]):
        raise SystemExit("the profile is not of --profile-artifact (launch counts differ)")
    medians, loose_medians = profiled_medians(prof, old, old_sigs)
    print(f"profile's own launches re-timed: critical path "
          f"{longest(old, [medians[_key(old_sigs.get(la['module'], []), la)] for la in old]):.2f} ms "
          f"(the profile says {prof.get('critical_path_ms', float('nan')):.2f})")

    new = _launches(args.artifact)
    sigs = kernel_signatures(args.kernels)
    for n, small in enumerate(float(x) for x in args.new_small_us.split(",")):
        ms, loosely, unmatched, blind = launch_times(new, sigs, medians, loose_medians, small)
        print(f"{args.artifact}: {len(new)} launches, {loosely} matched by argument types "
              f"alone, {unmatched} estimated "
              f"(small ones at {small:g} us): critical path {longest(new, ms):.2f} ms, "
              f"sum {sum(ms):.2f} ms" +
              (f"; {len(blind)} contraction/attention launches unmatched (counted 0)"
               if blind else ""))
        if args.show_path and n == 0:
            total = 0.0
            for i in critical_path(new, ms):
                total += ms[i]
                la = new[i]
                print(f"  {i:5d} {ms[i] * 1e3:8.1f} us  {total:7.3f} ms  {la['module']:24s} "
                      f"grid {la['grid']} block {la['block']}")


if __name__ == "__main__":
    main()
