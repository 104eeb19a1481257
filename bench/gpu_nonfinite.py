"""Non-finite steps on the GPU: the cuda runtime's in-graph guard (latch/runtime/guard.py)
must leave the state bitwise unchanged on a poisoned step (runtime only: no MLIR needed).

    LATCH_COMMIT=$(git rev-parse HEAD) PYTHONPATH=. python bench/gpu_nonfinite.py \
        [--artifacts bench/artifacts]

Uses the ``nonfinite-<rule>-<policy>.latch`` artifacts and ``nonfinite-batches.npz`` of
bench/build_nonfinite_artifacts.py.  For every artifact and poison (NaN input, inf target,
overflow) and two positions of the poisoned step:

* ``after capture``: clean batches 0, 1 (the CUDA graph is captured by then), the poisoned
  batch (a graph replay), clean batches 2, 3;
* ``first step``: the poisoned batch first (direct launches, before any graph), then clean
  batches 0-3;

checks that the poisoned step is skipped (``skip``: a non-finite loss comes back,
``state.skipped_steps == 1``) or raises ``latch.NonFiniteError`` (``raise``:
``skipped_steps == 0``), that every state tensor (parameters, moments, accumulators, the
step counter) is bitwise what it was before it, and that after the clean steps the state is
bitwise the state of a run that never saw the poisoned batch.

Writes bench/results/gpu_nonfinite-<UTC>.json (and $OUT/ when set) with the GPU, driver,
torch and commit.  Exit status 0 iff every case passes.
"""
from __future__ import annotations

import argparse
import datetime
import glob
import json
import math
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))

KINDS = ("nan_input", "inf_target", "overflow")


def load_batches(path):
    """(init params {name: tensor}, clean batches, {kind: poisoned batch}) from the npz."""
    import numpy as np
    import torch

    z = np.load(path)

    def batch(prefix):
        out, j = [], 0
        while f"{prefix}/{j}" in z:
            out.append(torch.from_numpy(z[f"{prefix}/{j}"]))
            j += 1
        return tuple(out)

    init = {k[5:]: torch.from_numpy(z[k]) for k in z.files if k.startswith("init/")}
    clean, i = [], 0
    while f"clean/{i}/0" in z:
        clean.append(batch(f"clean/{i}"))
        i += 1
    poison = {k: batch(f"poison/{k}") for k in KINDS if f"poison/{k}/0" in z}
    return init, clean, poison


def _model(init):
    import torch
    from models import MLPRegression

    model = MLPRegression()
    with torch.no_grad():
        for n, t in model.named_parameters():
            t.copy_(init[n])
    return model


def _tensors(state):
    return {k: v.clone() for k, v in state.tensors().items()}


def _diff(a, b):
    import torch
    return [k for k in a if not torch.equal(a[k], b[k])]


def check_program(load, policy, model, clean, poison, name="") -> list[dict]:
    """All cases of one program.  ``load()`` returns a fresh program (``latch.load(path)``
    or a ``latch.compile(..., target="cuda")`` handle); returns one record per case."""
    import latch
    import torch

    dev = torch.device("cuda")
    clean = [tuple(t.to(dev) for t in b) for b in clean]
    poison = {k: tuple(t.to(dev) for t in b) for k, b in poison.items()}
    prog = load()
    ref = prog.init(model)
    ref_after = []
    for b in clean:
        prog.step(ref, *b)
        ref_after.append(_tensors(ref))
    records = []
    for kind, bad in poison.items():
        for where in ("after capture", "first step"):
            rec = {"program": name, "policy": policy, "poison": kind, "position": where,
                   "problems": []}
            problems = rec["problems"]
            try:
                p = prog if where == "after capture" else load()
                rt = getattr(p, "runtime", lambda: p)()
                a = p.init(model)
                lead = clean[:2] if where == "after capture" else []
                for b in lead:
                    p.step(a, *b)
                before = _tensors(a)
                step_before = a.step
                rec["graph_captured_before_poison"] = bool(rt.graph_captured)
                t0 = time.perf_counter()
                if policy == "raise":
                    try:
                        loss = p.step(a, *bad)
                        problems.append(f"no NonFiniteError (loss {loss})")
                    except latch.NonFiniteError as e:
                        rec["raised"] = str(e)
                else:
                    loss = p.step(a, *bad)
                    rec["loss"] = loss
                    if math.isfinite(loss) and rt.last_step_finite:
                        problems.append(f"not detected (loss {loss})")
                rec["poisoned_step_ms"] = round((time.perf_counter() - t0) * 1e3, 3)
                rec["skipped_steps"] = a.skipped_steps
                want = 1 if policy == "skip" else 0
                if a.skipped_steps != want:
                    problems.append(f"skipped_steps {a.skipped_steps}, expected {want}")
                after = _tensors(a)
                changed = _diff(before, after)
                rec["state_tensors"] = len(after)
                rec["changed_by_poisoned_step"] = changed
                rec["step_counter"] = [step_before, a.step]
                if changed:
                    problems.append(f"the poisoned step changed {changed}")
                if a.step != step_before:
                    problems.append(f"step counter {step_before} -> {a.step}")
                rest = clean[2:] if where == "after capture" else clean
                for b in rest:
                    loss = p.step(a, *b)
                    if not math.isfinite(loss):
                        problems.append(f"clean step gave loss {loss}")
                final = _tensors(a)
                diverged = _diff(final, ref_after[-1])
                rec["differs_from_clean_run"] = diverged
                rec["final_step"] = a.step
                if diverged:
                    problems.append(f"differs from the clean run: {diverged}")
                if a.step != len(clean):
                    problems.append(f"final step {a.step}, expected {len(clean)}")
            except Exception as e:  # noqa: BLE001
                problems.append(f"raised {type(e).__name__}: {str(e).splitlines()[0]}")
            rec["ok"] = not problems
            records.append(rec)
    return records


def run(artifacts: str) -> dict:
    import latch

    init, clean, poison = load_batches(os.path.join(artifacts, "nonfinite-batches.npz"))
    records = []
    for path in sorted(glob.glob(os.path.join(artifacts, "nonfinite-*.latch"))):
        name = os.path.basename(path)[len("nonfinite-"):-len(".latch")]
        prog = latch.load(path)
        policy = prog.on_nonfinite
        if not name.endswith(policy):
            raise RuntimeError(f"{path}: the runtime reads on_nonfinite={policy!r}")
        records += check_program(lambda: latch.load(path), policy, _model(init), clean,
                                 poison, name)
    return {"records": records}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--artifacts", default=os.path.join(ROOT, "bench", "artifacts"))
    args = p.parse_args(argv)

    import torch

    from latch.runtime import driver as drv

    if not torch.cuda.is_available():
        print("no CUDA GPU: skipped")
        return 0
    env = {"gpu": torch.cuda.get_device_name(0), "driver": drv.driver_version(),
           "torch": torch.__version__, "cuda_bindings": drv.bindings_version(),
           "commit": os.environ.get("LATCH_COMMIT", "unknown"),
           "utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    print(json.dumps(env))
    out = {"env": env, **run(args.artifacts)}
    recs = out["records"]
    for r in recs:
        print(f"{r['program']:22s} {r['poison']:10s} {r['position']:13s} "
              f"{'ok' if r['ok'] else 'FAILED'}  skipped={r.get('skipped_steps')} "
              f"step={r.get('step_counter')} loss={r.get('loss', r.get('raised', ''))!s:.40}"
              f"  {'; '.join(r['problems'])}")
    out["summary"] = {"cases": len(recs), "ok": sum(r["ok"] for r in recs),
                      "programs": sorted({r["program"] for r in recs})}
    stamp = env["utc"].replace(":", "").replace("-", "")
    for folder in [os.path.join(ROOT, "bench", "results"), os.environ.get("OUT")]:
        if folder:
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, f"gpu_nonfinite-{stamp}.json"), "w") as f:
                json.dump(out, f, indent=1)
    ok = bool(recs) and all(r["ok"] for r in recs)
    print(f"{out['summary']['ok']}/{len(recs)} cases ok: " + ("OK" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
