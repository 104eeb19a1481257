"""TinyMoE-196M updates on the GPU, side by side: Latch vs PyTorch eager vs torch.compile +
CUDA graph (runtime only here: the Latch artifacts come from bench/tinymoe196m_build.py).

    LATCH_COMMIT=$(git rev-parse HEAD) PYTHONPATH=.:tests/py:bench \
        python bench/tinymoe_bench_gpu.py [--batches 2,32] [--iters 20] [--curve-steps 200]
    ... python bench/tinymoe_bench_gpu.py --workloads looped-b32     # the looped TinyMoE

For each batch (B2: recipe B2, B32: recipe Q; bf16 autocast matmuls, fp32 master weights,
AdamW 0.9/0.95 eps 1e-8 wd 0.1, clip 1.0, warmup+cosine learning rate; WORKLOADS.md), each
engine runs in its own process on the same model (same seed) and the same fixed batch:

* ``latch``: the artifact ``tinymoe196m-b<B>-bf16.latch``, one CUDA graph replay per update;
* ``latch-math`` / ``latch-flash`` / ``latch-fused`` (not in the default ``--engines``):
  ``tinymoe196m-b<B>-bf16-math.latch`` (and ``-flash``, ``-fused``), compiled with that
  ``attention`` option instead of the default (``"auto"``, which is ``"fused"`` on cuda with
  bf16: passes/attention_kernels.py); their speed-ups over the controls and their time
  relative to ``latch`` are printed;
* ``latch-det`` (not in the default ``--engines``): ``tinymoe196m-b<B>-bf16-det.latch``,
  compiled with ``deterministic=True`` (no float atomics), with its time relative to
  ``latch``; ``--repeat-check`` runs each Latch engine's loss curve twice from the fresh
  state and records whether the two runs' losses and final states are bitwise equal
  (``bitwise_repeatable``);
* ``latch-loop`` (not in the default ``--engines``; ``--workloads looped-b32``):
  ``tinymoe196m-b32-bf16-looped-loop.latch``, compiled with ``repeat="loop"`` (the repeat
  kept as one loop, its backward rematerializing each visit's forward) instead of the cuda
  default ``"unroll"``;
* ``latch-<switches>`` (not in the default ``--engines``), e.g. ``latch-padded`` or
  ``latch-padded-gridorder``: the build ``tinymoe196m-b<B>-bf16-<switches>.latch`` with
  those compiler steps switched off (bench/tinymoe196m_build.py ``OFF_SWITCHES``), its time
  relative to ``latch``: the A/B of a step, side by side in one run;
* ``latch-base`` (not in the default ``--engines``): ``tinymoe196m-b<B>-bf16-base.latch``,
  the build of an earlier commit copied in beside today's (``cp tinymoe196m-b2-bf16.latch
  tinymoe196m-b2-bf16-base.latch`` before rebuilding): the A/B of a change that has no
  switch, side by side in one run;
* ``torch-eager``: zero_grad, autocast forward, backward, clip_grad_norm_, AdamW, schedule;
* ``torch-compile-graph``: the model under ``torch.compile`` (default mode), the whole
  update (AdamW with ``capturable=True``, the learning rate a device tensor) captured into
  one CUDA graph and replayed.

``--workloads`` picks workloads by name instead of ``--batches``: ``b2``, ``b32`` (as above)
and ``looped-b32``, WORKLOADS.md's looped TinyMoE (the same 196M parameters, layers 2-5
applied twice: 0,1,2,3,4,5,2,3,4,5,6,7; recipe Q, B32): the Latch artifact
``tinymoe196m-b32-bf16-looped.latch`` (one latch.repeat carrying (hidden, aux sum), unrolled
into the launch list), and the same looped model (``latch.repeat`` is a plain loop in eager
PyTorch) under eager and under torch.compile + CUDA graph.

Each engine first trains ``--curve-steps`` updates on the fixed batch from the fresh state
(the loss curve; the curves are compared: Latch against eager, and eager against the
compiled control as the size of bf16 noise; each Latch build against every PyTorch engine
run and against ``latch-base`` / ``latch``: ``curve_max_rel_diff_vs_<engine>``), then
times ``--iters`` further updates with CUDA events (median, min, max).  Prints a table with ratios; writes
bench/results/tinymoe_bench-<UTC>.json (and $OUT/) with records holding workload, engine,
median_ms, min_ms, max_ms, gpu, torch, commit, date, plus kernels per update and arena
bytes for Latch, and the update's work against the machine: the matmul FLOPs and optimizer
bytes of one update (``update_work``), the bf16 matmul rate and copy bandwidth measured at
the start of the same run (``measure_ceilings``), the resulting floor and each engine's
fraction of it.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))
sys.path.insert(0, ROOT)
ART = os.path.join(ROOT, "bench", "artifacts", "tinymoe196m")
ENGINES = ("latch", "torch-eager", "torch-compile-graph")


def event_times(fn, n) -> list[float]:
    """Milliseconds of ``n`` calls of ``fn``, each between two CUDA events, synchronized."""
    import torch
    times = []
    for _ in range(n):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return times


def events_ms(fn, n):
    times = event_times(fn, n)
    return {"median_ms": statistics.median(times), "min_ms": min(times),
            "max_ms": max(times), "iters": n}


def recipe_of(batch: int) -> dict:
    from tinymoe_model import RECIPES
    return RECIPES["B2" if batch == 2 else "Q"]


def lr_at(batch: int, s: int) -> float:
    from latch.optim.schedules import warmup_cosine_value
    r = recipe_of(batch)
    return warmup_cosine_value(s, r["peak"], r["warmup"], 10_000, 0.1)


def parse_workload(name: str) -> tuple[int, bool]:
    """``b32`` -> (32, False); ``looped-b32`` -> (32, True)."""
    looped = name.startswith("looped-")
    body = name[len("looped-"):] if looped else name
    if not body.startswith("b") or not body[1:].isdigit():
        raise SystemExit(f"unknown workload {name!r}: expected b<batch> or looped-b<batch>")
    return int(body[1:]), looped


# Latch engines: the suffix of their bench/tinymoe196m_build.py build ("-math": the
# attention option "math", "-det": deterministic=True).
LATCH_ENGINES = {"latch": "", "latch-math": "-math", "latch-flash": "-flash",
                 "latch-fused": "-fused", "latch-det": "-det", "latch-base": "-base",
                 "latch-loop": "-loop"}


# runtime switches: ``latch-<switch>`` engines that run the same build as ``latch`` with
# the runtime's environment changed (the A/B of a runtime step); combinable with
# OFF_SWITCHES, e.g. ``latch-castsperstep-greedystreams``
RUNTIME_SWITCHES = {"greedystreams": {"LATCH_STREAM_PLAN": "greedy"}}


def curve_deviations(curves: dict) -> dict:
    """{Latch engine: {reference engine: the largest relative difference of their losses
    over the updates both ran}} — each Latch build's fresh-state loss curve against the
    PyTorch engines' and against ``latch-base`` / ``latch`` (another build of the same
    update: a compiler step that broke the numerics shows here before in any timing)."""
    out = {}
    for mine, a in curves.items():
        if latch_suffix(mine) is None or not a:
            continue
        for ref in ("torch-eager", "torch-compile-graph", "latch-base", "latch"):
            b = curves.get(ref)
            if ref == mine or not b:
                continue
            out.setdefault(mine, {})[ref] = max_rel_diff(a, b)
    return out


def max_rel_diff(a: list, b: list) -> float:
    """The largest ``|a - b| / |b|`` over the updates both loss curves ran."""
    return max(abs(x - y) / abs(y) for x, y in zip(a, b))


def latch_suffix(engine: str) -> str | None:
    """The build suffix of a Latch engine: LATCH_ENGINES', or for ``latch-<switches>``
    (``-`` separated bench/tinymoe196m_build.py OFF_SWITCHES, e.g. ``latch-padded`` or
    ``latch-padded-gridorder``: the build with those steps off, the A/B of a compiler step
    side by side with ``latch``; and RUNTIME_SWITCHES) ``-<switches>`` of the build;
    None for other engines."""
    from tinymoe196m_build import GLOBAL_SWITCHES, OFF_SWITCHES

    built_switches = {**OFF_SWITCHES, **GLOBAL_SWITCHES}
    if engine in LATCH_ENGINES:
        return LATCH_ENGINES[engine]
    parts = engine.split("-")
    if parts[0] == "latch" and len(parts) > 1 and \
            all(w in built_switches or w in RUNTIME_SWITCHES for w in parts[1:]):
        built = [w for w in parts[1:] if w in built_switches]
        return "-" + "-".join(built) if built else ""
    return None


def flat_loss(losses) -> bool:
    """Whether a loss curve of at least 10 updates on the fixed batch never moved: the
    updates did nothing (the non-finite guard skipped each one) — its time is not that of a
    training update (results_table.py skips records marked ``invalid``)."""
    return len(losses) >= 10 and max(losses) == min(losses)


def latch_environment() -> dict:
    """The runtime's switches set for a whole run: every ``LATCH_`` variable of the
    environment but ``LATCH_COMMIT`` (which names the commit), recorded with the results."""
    return {k: v for k, v in sorted(os.environ.items())
            if k.startswith("LATCH_") and k != "LATCH_COMMIT"}


def runtime_env(engine: str) -> dict:
    """The environment a Latch engine's RUNTIME_SWITCHES set."""
    env = {}
    if latch_suffix(engine) is not None:
        for w in engine.split("-")[1:]:
            env.update(RUNTIME_SWITCHES.get(w, {}))
    return env


def provenance_warning(res: dict, commit: str) -> str | None:
    """Why a Latch engine's record may not be the program its run is labelled with: its
    artifact built from other compiler sources than the tree the run carries (build.json's
    digest of them against this tree's), or — where no digest was recorded — from another
    commit than ``commit`` (LATCH_COMMIT) or uncommitted sources; or not the file its
    build recorded (rebuilt or copied since); None if none of these (or nothing is
    known: artifacts built before build.json kept their sources)."""
    source, recorded = res.get("artifact_source"), res.get("artifact_is_recorded")
    problems = []
    if res.get("artifact_sources_match") is False:
        problems.append(f"artifact built from other compiler sources than this tree's "
                        f"(built at {source})")
    elif res.get("artifact_sources_match") is None and source and (
            source.endswith("+dirty") or
            not (commit.startswith(source) or source.startswith(commit))):
        problems.append(f"artifact built from {source}, run labelled {commit}")
    if recorded is False:
        problems.append("artifact is not the file its build recorded")
    return "; ".join(problems) or None


def build_name(batch: int, looped: bool, suffix: str = "") -> str:
    """The bench/tinymoe196m_build.py build (and artifact) of a workload (``suffix``: a
    LATCH_ENGINES value, e.g. "-flash" for the ``latch-flash`` engine)."""
    return f"b{batch}-bf16" + ("-looped" if looped else "") + suffix


def run_latch(batch, idx, tgt, model, args, looped=False, suffix="") -> dict:
    import torch

    import latch
    from tinymoe196m_build import artifact_record

    name = build_name(batch, looped, suffix)
    prog = latch.load(os.path.join(ART, f"tinymoe196m-{name}.latch"))
    d = prog.describe()
    out = {"launches": d["kernels"], "kernel_modules": d["modules"],
           "arena_bytes": d["arena_bytes"], "streams": d.get("streams")}
    # which compiler sources built it (build.json), and whether the file is that build's
    out.update(artifact_record(name, ART))

    def curve():
        state = prog.init(model)
        losses = [prog.step(state, idx, tgt) for _ in range(args.curve_steps)]
        return state, [float(x) for x in losses]

    t0 = time.perf_counter()
    state, out["losses"] = curve()
    torch.cuda.synchronize()
    out["curve_wall_s"] = round(time.perf_counter() - t0, 2)
    out["graph_captured"] = prog.graph_captured
    if args.repeat_check:        # the same curve again from the fresh state: bitwise equal?
        first = prog.state_dict()        # the active state: the last stepped
        again, losses = curve()
        second = prog.state_dict()
        out["bitwise_repeatable"] = losses == out["losses"] and all(
            torch.equal(first[n], second[n]) for n in first)
        del first, second, again
    out.update(events_ms(lambda: prog.step(state, idx, tgt), args.iters))
    return out


def torch_update(batch, idx, tgt, model, compiled: bool):
    """The PyTorch control's update (zero_grad, bf16 autocast forward, backward, clip 1.0,
    foreach AdamW; under torch.compile with ``capturable=True`` and the learning rate a
    device tensor when ``compiled``): (update, optimizer, learning rate, loss buffer), the
    update writing its loss into the buffer."""
    import torch
    dev = idx.device
    m = model.to(dev)
    params = list(m.parameters())
    fwd = torch.compile(m) if compiled else m
    lr = torch.tensor(lr_at(batch, 0), device=dev) if compiled else lr_at(batch, 0)
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1,
                            capturable=compiled, foreach=True)
    loss_buf = torch.zeros((), device=dev)

    def update():
        opt.zero_grad(set_to_none=False)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = fwd(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        loss_buf.copy_(loss.detach().float())

    return update, opt, lr, loss_buf


def run_torch(batch, idx, tgt, model, args, compiled: bool) -> dict:
    import torch
    update, opt, lr, loss_buf = torch_update(batch, idx, tgt, model, compiled)
    losses = []
    out = {}
    if compiled:
        # warm up (compiles) on the fresh state: these updates are the curve's first ones
        t0 = time.perf_counter()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for s in range(3):
                lr.fill_(lr_at(batch, s))
                update()
                losses.append(float(loss_buf))
        torch.cuda.current_stream().wait_stream(side)
        out["compile_and_warmup_s"] = round(time.perf_counter() - t0, 1)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            update()

        def step(s):
            lr.fill_(lr_at(batch, s))
            graph.replay()
    else:
        def step(s):
            for g in opt.param_groups:
                g["lr"] = lr_at(batch, s)
            update()
    t0 = time.perf_counter()
    for s in range(len(losses), args.curve_steps):
        step(s)
        losses.append(loss_buf.clone())
    torch.cuda.synchronize()
    out["curve_wall_s"] = round(time.perf_counter() - t0, 2)
    out["losses"] = [float(x) for x in losses]
    k = [args.curve_steps]

    def timed():
        step(k[0])
        k[0] += 1
    out.update(events_ms(timed, args.iters))
    return out


def child(engine: str, workload: str, args) -> dict:
    import torch
    from tinymoe_model import make_looped_tinymoe_196m, make_tinymoe_196m
    from tinymoe196m_build import fingerprint

    torch.backends.cuda.matmul.allow_tf32 = False
    batch, looped = parse_workload(workload)
    make = make_looped_tinymoe_196m if looped else make_tinymoe_196m
    model, (idx, tgt) = make(batch=batch)
    suffix = latch_suffix(engine) or ""
    build = json.load(open(os.path.join(ART, "build.json"))).get(
        build_name(batch, looped, suffix), {})
    want, got = build.get("fingerprint", {}), fingerprint(model)
    same = all(abs(got[k][1] - want[k][1]) <= 1e-9 * abs(want[k][1]) for k in want)
    idx, tgt = idx.cuda(), tgt.cuda()
    if latch_suffix(engine) is not None:
        out = run_latch(batch, idx, tgt, model, args, looped, suffix)
        for k in ("total_s", "stages_s"):
            if k in build:
                out["compile_" + k] = build[k]
    else:
        out = run_torch(batch, idx, tgt, model, args, engine == "torch-compile-graph")
    out["fingerprint_matches_build"] = same if want else None
    return out


def update_work(batch: int, looped: bool = False) -> dict:
    """FLOPs of one update's matmuls (forward + backward = 3x forward, as computed: dense
    causal attention scores, experts over their full capacity) and the bytes of the AdamW
    step's state traffic (read p, g, m, v; write p, m, v in fp32), from CONFIG."""
    from tinymoe_model import CONFIG, N_PARAMS
    d, T, V, E, k, h = (CONFIG[x] for x in ("d", "seq", "vocab", "n_experts", "top_k",
                                             "hidden"))
    layers = CONFIG["n_layers"] + (4 if looped else 0)
    N = batch * T
    C = -(-int(1.25 * N * k) // E)
    per_layer = (2 * N * d * 3 * d + 2 * N * d * d          # qkv, attention out
                 + 2 * 2 * batch * T * T * d                # scores and probs x values
                 + 2 * N * d * E                            # router
                 + E * C * (2 * 2 * d * h + 2 * h * d))     # experts w1, w3, w2
    fwd = layers * per_layer + 2 * N * d * V                # + the tied LM head
    return {"matmul_flop": 3 * fwd, "optimizer_bytes": 7 * 4 * N_PARAMS}


def _seconds_each(fn, reps=10) -> float:
    """Mean seconds of ``fn`` over ``reps`` back-to-back calls after one warm-up."""
    import torch

    fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps):
        fn()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / reps / 1e3


def measure_copy_gbs() -> float:
    """Copy bandwidth in GB/s (2 GiB device to device, read + write counted), measured
    here, in this run (also bench/gpu_profile_launches.py's)."""
    import torch

    src = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    return 2 * src.numel() / _seconds_each(lambda: dst.copy_(src)) / 1e9   # freed on return


def measure_ceilings() -> dict:
    """bf16 matmul TFLOP/s (8192^3 torch.matmul) and copy bandwidth (:func:`measure_copy_gbs`),
    measured here, in this run."""
    import torch

    n = 8192
    x = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    tflops = 2 * n ** 3 / _seconds_each(lambda: x @ y) / 1e12
    return {"matmul_bf16_tflops": tflops, "copy_gbs": measure_copy_gbs()}


def add_work_figures(rec: dict, work: dict, ceilings: dict) -> None:
    """Record the update's work (``update_work``), the ceilings measured in this run, the
    floor they give (matmuls at the measured bf16 rate + optimizer traffic at the measured
    copy bandwidth) and the fraction of it ``rec``'s median reaches."""
    floor_ms = 1e3 * (work["matmul_flop"] / (ceilings["matmul_bf16_tflops"] * 1e12)
                      + work["optimizer_bytes"] / (ceilings["copy_gbs"] * 1e9))
    rec.update(work)
    rec.update(ceilings)
    rec.update(floor_ms=floor_ms, fraction_of_ceilings=floor_ms / rec["median_ms"],
               achieved_matmul_tflops=work["matmul_flop"] / (rec["median_ms"] * 1e9))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", default="2,32")
    p.add_argument("--workloads", default=None,
                   help="b2, b32, looped-b32 (comma-separated; overrides --batches)")
    p.add_argument("--engines", default=",".join(ENGINES))
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--curve-steps", type=int, default=200)
    p.add_argument("--budget-s", type=float, default=540.0)
    p.add_argument("--repeat-check", action="store_true",
                   help="run each Latch engine's curve twice: are the runs bitwise equal?")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        engine, workload, path = args.child.split(":", 2)
        res = child(engine, workload, args)
        with open(path, "w") as f:
            json.dump(res, f)
        return 0

    import torch

    from latch.runtime import driver as drv
    t_start = time.perf_counter()
    env = {"gpu": torch.cuda.get_device_name(0), "driver": drv.driver_version(),
           "torch": torch.__version__, "commit": os.environ.get("LATCH_COMMIT", "unknown"),
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           # an engine's RUNTIME_SWITCHES come on top, for that engine only
           "runtime_env": latch_environment()}
    print(json.dumps(env), flush=True)
    ceilings = measure_ceilings()
    torch.cuda.empty_cache()
    print(f"ceilings measured in this run: bf16 matmul {ceilings['matmul_bf16_tflops']:.0f} "
          f"TFLOP/s, copy {ceilings['copy_gbs']:.0f} GB/s", flush=True)
    records = []
    stamp = env["date"].replace(":", "").replace("-", "")

    def save():
        from results_files import save_records
        save_records(records, f"tinymoe_bench-{stamp}")

    workloads = (args.workloads.split(",") if args.workloads
                 else [f"b{b}" for b in args.batches.split(",")])
    for wl in workloads:
        batch, looped = parse_workload(wl)
        tag = ("looped-" if looped else "") + f"B{batch}"     # printed
        got = {}
        for engine in args.engines.split(","):
            left = args.budget_s - (time.perf_counter() - t_start)
            rec = dict(env, workload=("looped-" if looped else "") + f"tinymoe-b{batch}",
                       engine=engine)
            if left < 20:
                rec["skipped"] = "device time budget"
                records.append(rec)
                continue
            tmp = f"/tmp/tinymoe-bench-{engine}-{wl}.json"
            if os.path.exists(tmp):
                os.unlink(tmp)
            try:
                r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child",
                                    f"{engine}:{wl}:{tmp}", "--iters", str(args.iters),
                                    "--curve-steps", str(args.curve_steps)] +
                                   (["--repeat-check"] if args.repeat_check else []),
                                   capture_output=True, text=True, timeout=left,
                                   env={**os.environ, **runtime_env(engine)})
                res = json.load(open(tmp)) if os.path.exists(tmp) else \
                    {"failed": f"exit {r.returncode}",
                     "stderr": (r.stdout + r.stderr).strip().splitlines()[-12:]}
            except subprocess.TimeoutExpired:
                res = {"failed": f"timed out after {left:.0f} s"}
            rec.update(res)
            records.append(rec)
            got[engine] = rec
            if "failed" in res:
                print(f"{tag} {engine}: FAILED {json.dumps(res)[:1500]}", flush=True)
            else:
                warning = provenance_warning(res, env["commit"])
                if warning:
                    print(f"{tag} {engine}: WARNING {warning}", flush=True)
                extra = (f" {res['launches']} launches, arena {res['arena_bytes']:,} B"
                         if engine.startswith("latch") else "")
                if "bitwise_repeatable" in res:
                    extra += f"; two runs bitwise equal: {res['bitwise_repeatable']}"
                losses = res.get("losses") or []
                curve = (f"; loss {losses[0]:.4f} -> {losses[-1]:.4f} over {len(losses)} "
                         "updates" if losses else "")
                if flat_loss(losses):     # no update took effect: not a training update
                    rec["invalid"] = (f"the loss did not move over {len(losses)} updates "
                                      "(every update skipped, e.g. non-finite gradients)")
                    curve += " — INVALID: the loss did not move"
                print(f"{tag} {engine:20s} median {res['median_ms']:9.3f} ms (min "
                      f"{res['min_ms']:.3f}, max {res['max_ms']:.3f}){curve};{extra}",
                      flush=True)
            save()
        ok = {e: r for e, r in got.items() if "median_ms" in r}
        work = update_work(batch, looped)
        for e, r in ok.items():
            add_work_figures(r, work, ceilings)
            print(f"{tag} {e:20s} {work['matmul_flop'] / 1e12:.2f} TFLOP of matmuls + "
                  f"{work['optimizer_bytes'] / 1e9:.1f} GB of optimizer traffic: floor "
                  f"{r['floor_ms']:.2f} ms at the measured ceilings = "
                  f"{100 * r['fraction_of_ceilings']:.1f}% of this engine's time", flush=True)
        for mine in (m for m in ok if latch_suffix(m) is not None):
            for e in ("torch-eager", "torch-compile-graph"):
                if e in ok:
                    ratio = ok[e]["median_ms"] / ok[mine]["median_ms"]
                    ok[mine][f"speedup_vs_{e}"] = ratio
                    print(f"{tag} {mine} vs {e}: {ratio:.2f}x", flush=True)
            if mine != "latch" and "latch" in ok:    # another build vs the default one
                r = ok[mine]["median_ms"] / ok["latch"]["median_ms"]
                ok[mine]["time_vs_latch"] = r
                print(f"{tag} {mine} / latch: {r:.3f}x the time", flush=True)
        curves = {e: r["losses"] for e, r in ok.items()}
        deviations = curve_deviations(curves)
        if "torch-eager" in deviations.get("latch", {}):
            dev = deviations["latch"]["torch-eager"]
            n = min(len(curves["latch"]), len(curves["torch-eager"]))
            ok["latch"]["curve_max_rel_diff_vs_eager"] = dev
            line = f"{tag} loss curves over {n} updates: latch vs eager max rel diff {dev:.3e}"
            if curves.get("torch-compile-graph"):
                noise = max_rel_diff(curves["torch-compile-graph"][:n], curves["torch-eager"])
                ok["latch"]["curve_max_rel_diff_compile_vs_eager"] = noise
                line += f"; torch.compile vs eager (bf16 noise) {noise:.3e}"
            print(line, flush=True)
        for mine, devs in deviations.items():
            for ref, dev in devs.items():
                ok[mine][f"curve_max_rel_diff_vs_{ref}"] = dev
            print(f"{tag} loss curve of {mine}, max rel diff: " +
                  ", ".join(f"vs {ref} {dev:.3e}" for ref, dev in devs.items()), flush=True)
        save()
    print("wrote", f"tinymoe_bench-{stamp}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
