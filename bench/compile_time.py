"""Compile time per stage, cold and warm (the persistent compile cache), written as JSON.

    .venv/bin/python bench/compile_time.py                      # fast examples + TinyMoE-196M
    .venv/bin/python bench/compile_time.py --only mlp,char_lm   # a subset
    .venv/bin/python bench/compile_time.py --no-tinymoe --no-profile --targets cpu

Every measurement runs in a fresh child process (this script with ``--child``), so that
"cold" includes everything a user's first ``latch.compile`` pays in a new process (the
torch-mlir import worker's start, first-use initialisation in torch), except importing
torch and Latch and building the model, reported apart as ``import_s``: every time below
is the wall time of the ``latch.compile(...)`` call alone (``total_s``; ``cpu_s`` is this
process's CPU time in it).

- fast examples (models.py: mlp, char_lm, tiny_moe), for each target of ``--targets``
  (cpu and cuda: a cuda compile only produces PTX, so it runs without a GPU), fp32, AdamW +
  clipping + warmup-cosine, with a fresh cache folder: **cold** = ``LATCH_CACHE=0``, first
  compile in the process; then, in the same process, a compile with the cache on (a miss:
  it stores the entry) and one more (**warm in-process**, a hit); then a new process
  compiles again (**warm**, a hit in a new process: fingerprint, artifact read, and for
  the cpu target the JIT; ``modules`` lists which of torch._dynamo, sympy, torch-mlir and
  MLIR it imported).  ``--profile-warm`` adds that compile's cProfile (top functions by
  cumulative time).
- TinyMoE-196M (WORKLOADS.md, bench/tinymoe_model.py) at B2, fp32 and bf16 (``--precisions``),
  for target cuda, each in a fresh process with the cache off: the
  stages of ``latch.targets.cuda.compile_program`` run one by one (trace, linalg,
  latch, latch-lower-rules, then ``compile_update_module``'s), so that the time of every
  stage reached is known even when a later stage fails; the failing stage and its error
  are recorded.  With profiling (default), a second run profiles the slowest stage with
  cProfile and the top functions by cumulative time are recorded.

Writes ``bench/results/compile_time-<UTC>.json`` (machine, versions, git commit); fast
examples under ``examples[<model>][<target>]``.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))
sys.path.insert(0, os.path.join(ROOT, "bench"))

EXAMPLES = ("mlp", "char_lm", "tiny_moe")


def _rule():
    from latch import optim
    return optim.clip_grad_norm(1.0, optim.AdamW(optim.warmup_cosine(1e-3, 10, 100, 0.1),
                                                 betas=(0.9, 0.95), weight_decay=0.1))


HEAVY_MODULES = ("torch._dynamo", "sympy", "torch_mlir", "mlir")


def _timed_compile(model, example, profile=False, **kw):
    import cProfile
    import io
    import pstats

    import latch
    before = set(sys.modules)
    prof = cProfile.Profile() if profile else None
    if prof:
        prof.enable()
    t0, c0 = time.perf_counter(), time.process_time()
    prog = latch.compile(model, _rule(), example, **kw)
    total, cpu = time.perf_counter() - t0, time.process_time() - c0
    if prof:
        prof.disable()
    stages = prog.manifest.get("compile_seconds") or getattr(prog, "compile_seconds", {})
    # cpu_s: this process's CPU time (not the import worker's): less sensitive than wall
    # time to other load on the machine
    out = {"total_s": round(total, 3), "cpu_s": round(cpu, 3), "stages_s": dict(stages),
           "cache": prog.manifest.get("cache"),
           "modules": [m for m in HEAVY_MODULES if m in sys.modules and m not in before]}
    if prof:
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(30)
        out["profile_cumulative"] = s.getvalue().splitlines()
    return out


# ----------------------------------------------------------------------------- children
def child_example(name: str, phase: str, target: str = "cpu", profile: str = "") -> dict:
    t0 = time.perf_counter()
    import torch  # noqa: F401

    import latch  # noqa: F401
    from models import MODELS
    model, example = MODELS[name](seed=0)
    out = {"import_s": round(time.perf_counter() - t0, 3)}
    if phase == "cold":
        os.environ["LATCH_CACHE"] = "0"
        out["cold"] = _timed_compile(model, example, target=target)
        os.environ["LATCH_CACHE"] = "1"
        out["miss_in_process"] = _timed_compile(model, example, target=target)
        out["warm_in_process"] = _timed_compile(model, example, target=target)
    else:
        out["warm"] = _timed_compile(model, example, profile=profile == "profile",
                                     target=target)
    return out


def child_tinymoe(profile_stage: str | None, batch: int, precision: str = "bf16") -> dict:
    """The stages of latch.targets.cuda.compile_program, one at a time."""
    import cProfile
    import io
    import pstats
    import traceback

    t0 = time.perf_counter()
    from mlir import ir

    import latch
    import latch.dialect
    from latch.compiler import mlir_tensor_type
    from latch.frontend.importer import import_to_linalg, start_worker
    from latch.frontend.trace import trace_loss_and_grads
    from latch.optim.emit import build_update_module
    from latch.program import _append_functions
    from latch.stages import run_stages
    from latch.targets.cuda import compile_update_module
    from tinymoe_model import make_tinymoe_196m, tinymoe_rule
    out = {"import_s": round(time.perf_counter() - t0, 3), "stages_s": {}, "failed": None}
    t0 = time.perf_counter()
    model, example = make_tinymoe_196m(batch=batch)
    out["build_model_s"] = round(time.perf_counter() - t0, 3)
    times = out["stages_s"]
    prof = cProfile.Profile()
    current = {}

    def stage(name, fn, *args, **kw):
        current["name"] = name
        t = time.perf_counter()
        if name == profile_stage:
            prof.enable()
        try:
            return fn(*args, **kw)
        finally:
            if name == profile_stage:
                prof.disable()
            times[name] = round(time.perf_counter() - t, 3)

    t_all = time.perf_counter()
    try:
        start_worker()            # as latch.compile does: overlaps with tracing
        traced = stage("trace", trace_loss_and_grads, model, example, precision=precision)
        out["graph_nodes"] = len(traced.graph_module.graph.nodes)
        linalg = stage("linalg", import_to_linalg, traced, "loss_and_grads")
        out["linalg_chars"] = len(linalg)
        params = [(n, mlir_tensor_type(s, d)) for n, s, d in
                  zip(traced.param_names, traced.param_shapes, traced.param_dtypes)]
        program = stage("latch", build_update_module, params, tinymoe_rule("B2"),
                        [mlir_tensor_type(t.shape, t.dtype) for t in example])
        with ir.Context() as ctx, ir.Location.unknown():
            latch.dialect.load(ctx)
            module = ir.Module.parse(program)
            _append_functions(module, ir.Module.parse(linalg))
            stage("latch-lower-rules", run_stages, module, ["latch-lower-rules"])
            cuda_times = {}
            current["name"] = "cuda stages"
            try:
                if profile_stage in (None, "latch-bufferize", "latch-form-kernels", "schedule",
                                     "latch-kernels-to-ptx"):
                    if profile_stage:
                        prof.enable()
                    schedule, ptx, _ = compile_update_module(module, times=cuda_times)
                    out["launches"] = len(schedule["launches"])
                    out["kernel_modules"] = len(ptx)
                    out["arena_bytes"] = schedule.get("arena_bytes")
                    out["planned_arena_bytes"] = schedule.get("planned_arena_bytes")
                    out["ptx_bytes"] = sum(len(v) for v in ptx.values())
            finally:
                prof.disable()
                for k, v in cuda_times.items():
                    times[k] = round(v, 3)
                    current["name"] = k
                missing = [s for s in ("latch-bufferize", "latch-form-kernels", "schedule",
                                       "latch-kernels-to-ptx") if s not in cuda_times]
                if missing:
                    current["name"] = missing[0]
    except Exception as e:  # noqa: BLE001 - the cuda path is new: record where it fails
        out["failed"] = {"stage": current.get("name"), "error": f"{type(e).__name__}: "
                         + str(e).strip().splitlines()[0][:500],
                         "traceback_tail": traceback.format_exc().splitlines()[-6:]}
    out["total_s"] = round(time.perf_counter() - t_all, 3)
    if profile_stage:
        s = io.StringIO()
        st = pstats.Stats(prof, stream=s)
        st.sort_stats("cumulative").print_stats(25)
        out["profile_cumulative"] = s.getvalue().splitlines()
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(15)
        out["profile_tottime"] = s.getvalue().splitlines()
    return out


# ----------------------------------------------------------------------------- parent
def _run_child(args: list[str], env_extra: dict) -> dict:
    env = dict(os.environ, **env_extra)
    env.pop("LATCH_DUMP_DIR", None)
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", *args],
                       env=env, capture_output=True, text=True, cwd=ROOT)
    if p.returncode != 0:
        return {"error": p.stderr.strip().splitlines()[-20:]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def _machine() -> dict:
    info = {"platform": platform.platform(), "python": platform.python_version(),
            "cpus": os.cpu_count(), "machine": platform.machine()}
    try:
        with open("/proc/cpuinfo") as f:
            models = [l.split(":", 1)[1].strip() for l in f if l.startswith("model name")]
        info["cpu_model"] = models[0] if models else None
        with open("/proc/meminfo") as f:
            info["mem_total"] = f.readline().split(":", 1)[1].strip()
        info["loadavg_at_start"] = os.getloadavg()
    except OSError:
        pass
    return info


def _git() -> dict:
    def run(*a):
        return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    return {"commit": run("rev-parse", "HEAD"), "dirty": bool(run("status", "--porcelain"))}


def _fmt_stages(st: dict) -> str:
    return ", ".join(f"{k} {v:.2f}" for k, v in st.items())


def _example(name: str, target: str, args) -> dict:
    """``--repeat`` cold+warm runs of one fast example for one target, each with a fresh
    cache folder; the fastest run of each phase is printed and reported as ``best``."""
    runs = []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="latch-bench-cache-") as d:
            env = {"LATCH_CACHE_DIR": d}
            load = os.getloadavg()[0]
            cold = _run_child(["example", name, "cold", target], env)
            warm = _run_child(["example", name, "warm", target,
                               "profile" if args.profile_warm else ""], env)
        runs.append({**cold, **warm, "loadavg_1min_before": load})
    best = {}
    for phase in ("cold", "miss_in_process", "warm_in_process", "warm"):
        ok = [r[phase] for r in runs if phase in r]
        if not ok:
            print(f"{name:9s} {target:4s} {phase:16s} failed: "
                  f"{[r.get('error') for r in runs]}")
            continue
        best[phase] = min(ok, key=lambda r: r["total_s"])
        best[phase]["all_totals_s"] = [r["total_s"] for r in ok]
        c = best[phase]["cache"] or {}
        print(f"{name:9s} {target:4s} {phase:16s} {best[phase]['total_s']:7.2f} s "
              f"(cpu {best[phase]['cpu_s']:5.2f} s)  "
              f"[{_fmt_stages(best[phase]['stages_s'])}]  cache {c.get('status')}"
              f"{' (' + c['reason'] + ')' if c.get('reason') else ''}"
              f"{'  imported ' + ','.join(best[phase]['modules']) if phase == 'warm' else ''}",
              flush=True)
    return {"best": best, "runs": runs}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    p.add_argument("--only", default=",".join(EXAMPLES))
    p.add_argument("--no-tinymoe", action="store_true")
    p.add_argument("--no-profile", action="store_true")
    p.add_argument("--batch", type=int, default=2, help="TinyMoE batch (B2: 2, B32: 32)")
    p.add_argument("--precisions", default="fp32,bf16", help="TinyMoE precisions")
    p.add_argument("--repeat", type=int, default=1,
                   help="runs per fast example; the fastest of each phase is reported")
    p.add_argument("--targets", default="cpu,cuda", help="targets of the fast examples")
    p.add_argument("--profile-warm", action="store_true",
                   help="record a cProfile of each warm (new-process) hit")
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    args = p.parse_args(argv)

    if args.child:
        kind, *rest = args.child
        if kind == "example":
            res = child_example(*rest)
        else:
            res = child_tinymoe(rest[0] if rest and rest[0] != "-" else None, args.batch,
                                rest[1] if len(rest) > 1 else "bf16")
        print(json.dumps(res))
        return 0

    from latch.cache import versions
    result = {"date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(),
              "command": " ".join([os.path.relpath(sys.executable, ROOT), *sys.argv]),
              "machine": _machine(), "git": _git(), "versions": versions(),
              "examples": {}, "tinymoe_196m": None}
    for name in [n for n in args.only.split(",") if n]:
        result["examples"][name] = {}
        for target in [t for t in args.targets.split(",") if t]:
            result["examples"][name][target] = _example(name, target, args)
    if not args.no_tinymoe:
        env = {"LATCH_CACHE": "0"}
        result["tinymoe_196m"] = {}
        for prec in [q for q in args.precisions.split(",") if q]:
            run = _run_child(["tinymoe", "-", prec], env)
            entry = {"batch": args.batch, "precision": prec, "target": "cuda", "run": run}
            result["tinymoe_196m"][prec] = entry
            st = run.get("stages_s") or {}
            print(f"TinyMoE-196M B{args.batch} {prec} cuda: total {run.get('total_s')} s "
                  f"[{_fmt_stages(st)}] failed={run.get('failed')}", flush=True)
            if st and not args.no_profile:
                slowest = max(st, key=st.get)
                prof = _run_child(["tinymoe", slowest, prec], env)
                entry["profiled_stage"] = slowest
                entry["profile"] = prof
                print(f"profile of {slowest}:")
                print("\n".join(prof.get("profile_cumulative", prof.get("error", []))[:45]))
    result["machine"]["loadavg_at_end"] = os.getloadavg()
    os.makedirs(args.out, exist_ok=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = os.path.join(args.out, f"compile_time-{stamp}.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {os.path.relpath(path, ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
