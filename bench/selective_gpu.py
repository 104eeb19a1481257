"""Selective updates (WORKLOADS.md) on the GPU: TinyMoE-196M, B2, bf16; shared parameters
take an AdamW step every microbatch, expert weights (w1, w2, w3) accumulate and step every 16
microbatches.  Mean time per microbatch over a 16-microbatch cycle, side by side in one run
(runtime only; the artifact comes from
``bench/tinymoe196m_build.py --builds b2-bf16-every16``):

    LATCH_COMMIT=$(git rev-parse HEAD) PYTHONPATH=.:tests/py:bench \
        python bench/selective_gpu.py [--cycles 3] [--every 16]

* ``latch``: the program's two update variants (with / without the expert step), each one
  CUDA graph; the runtime reads the every-counter before each step to pick one.  Also
  reports each variant's launches and state copies, and checks that the expert weights and
  moments are bitwise unchanged across the 15 microbatches between expert steps;
* ``torch-eager``: autocast forward, backward, AdamW (foreach) on the shared parameters;
  expert gradients accumulate in ``.grad``; every 16th microbatch they are divided by 16,
  the expert AdamW steps and they are zeroed;
* ``torch-compile-graph``: the model under ``torch.compile``; one CUDA graph for a
  microbatch (forward, backward, shared AdamW with ``capturable=True``, expert gradients
  accumulated), one for the expert step; replayed.

An engine ``latch-<suffix>`` runs the build ``b2-bf16-every16-<suffix>`` (an A/B of a
compiler switch, bench/tinymoe196m_build.py's OFF_SWITCHES); the Latch engines' losses over
the first cycle are compared bit for bit.  Each engine runs in its own process.  Writes
bench/results/selective-<UTC>.json (and $OUT/) with GPU, driver, torch, commit.
"""
from __future__ import annotations

import argparse
import datetime
import fnmatch
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for p in (ROOT, os.path.join(ROOT, "bench"), os.path.join(ROOT, "tests", "py")):
    if p not in sys.path:
        sys.path.insert(0, p)
ART = os.path.join(ROOT, "bench", "artifacts", "tinymoe196m")
ENGINES = ("latch", "torch-eager", "torch-compile-graph")


def _cycles(step, every, cycles, warm=None, most=8):
    """Warm-up cycles — one, or until ``warm()`` holds (at most ``most``) — then ``cycles``
    timed cycles of ``every`` microbatches (CUDA events around each cycle); returns ms per
    microbatch for each timed cycle and the number of warm-up cycles."""
    import torch
    done = 0
    while True:
        for s in range(every):
            step(every * done + s)
        done += 1
        if warm is None or warm() or done >= most:
            break
    torch.cuda.synchronize()
    out = []
    for c in range(done - 1, done - 1 + cycles):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for s in range(every):
            step(every * (c + 1) + s)
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) / every)
    return out, done


def child(engine: str, args) -> dict:
    import torch

    from tinymoe_bench_gpu import lr_at
    from tinymoe_model import EXPERT_PATTERN, make_tinymoe_196m
    torch.backends.cuda.matmul.allow_tf32 = False
    model, (idx, tgt) = make_tinymoe_196m(batch=2)
    idx, tgt = idx.cuda(), tgt.cuda()
    out = {"engine": engine}
    if engine.startswith("latch"):        # latch-<suffix>: the build with that suffix
        import latch
        suffix = engine[len("latch"):]
        from tinymoe196m_build import artifact_record

        name = f"b2-bf16-every{args.every}{suffix}"
        prog = latch.load(os.path.join(ART, f"tinymoe196m-{name}.latch"))
        out.update(artifact_record(name, ART))      # which sources built it
        d = prog.describe()
        out["variants"] = d["variants"]
        state = prog.init(model)
        expert = [n for n in prog.state_names
                  if fnmatch.fnmatchcase(n.split(".exp_avg")[0], EXPERT_PATTERN)]
        out["expert_state_tensors"] = len(expert)

        def step(s):
            prog.step(state, idx, tgt)
        # bitwise check over one cycle: expert tensors change only on the expert step
        snap = {n: t.clone() for n, t in prog.state_views().items() if n in expert}
        changed_at, losses = [], []
        for s in range(args.every):
            losses.append(prog.step(state, idx, tgt))
            now = prog.state_views()
            if any(not torch.equal(now[n], snap[n]) for n in expert):
                changed_at.append(s)
                snap = {n: now[n].clone() for n in expert}
        out["expert_state_changed_at_microbatch"] = changed_at
        out["first_cycle_losses"] = losses      # two builds of one program: the same bits
        # warm until every (variant, placement of the swapped states) met so far replays a
        # captured graph: with commit by swap a variant meets several placements, each
        # launched directly at its first use and captured at its second (four cycles)
        out["ms_per_microbatch"], out["warmup_cycles"] = _cycles(
            step, args.every, args.cycles, warm=lambda: prog.graph_captured)
        out["variants_after"] = prog.describe()["variants"]
        out["graph_captured"] = prog.graph_captured
        prog.close()
        return out

    m = model.cuda()
    named = dict(m.named_parameters())
    experts = [n for n in named if fnmatch.fnmatchcase(n, EXPERT_PATTERN)]
    shared = [n for n in named if n not in experts]
    compiled = engine == "torch-compile-graph"
    fwd = torch.compile(m) if compiled else m
    lr_s = torch.tensor(lr_at(2, 0), device="cuda") if compiled else lr_at(2, 0)
    lr_e = torch.tensor(lr_at(2, 0), device="cuda") if compiled else lr_at(2, 0)
    kw = dict(betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, foreach=True,
              capturable=compiled)
    opt_s = torch.optim.AdamW([named[n] for n in shared], lr=lr_s, **kw)
    opt_e = torch.optim.AdamW([named[n] for n in experts], lr=lr_e, **kw)
    for n in experts:
        named[n].grad = torch.zeros_like(named[n])

    def micro():
        for n in shared:          # zero_grad; in a graph the gradients keep their addresses
            if not compiled:
                named[n].grad = None
            elif named[n].grad is not None:
                named[n].grad.zero_()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = fwd(idx, tgt)
        loss.backward()
        opt_s.step()

    def expert_step():
        for n in experts:
            named[n].grad.div_(args.every)
        opt_e.step()
        for n in experts:
            named[n].grad.zero_()

    if compiled:
        t0 = time.perf_counter()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                micro()
            expert_step()
        torch.cuda.current_stream().wait_stream(side)
        out["compile_and_warmup_s"] = round(time.perf_counter() - t0, 1)
        g_micro, g_expert = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
        with torch.cuda.graph(g_micro):
            micro()
        with torch.cuda.graph(g_expert):
            expert_step()

        def step(s):
            lr_s.fill_(lr_at(2, s))
            g_micro.replay()
            if (s + 1) % args.every == 0:
                lr_e.fill_(lr_at(2, s // args.every))
                g_expert.replay()
    else:
        def step(s):
            for g in opt_s.param_groups:
                g["lr"] = lr_at(2, s)
            micro()
            if (s + 1) % args.every == 0:
                for g in opt_e.param_groups:
                    g["lr"] = lr_at(2, s // args.every)
                expert_step()
    out["ms_per_microbatch"], out["warmup_cycles"] = _cycles(step, args.every, args.cycles)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--engines", default=",".join(ENGINES))
    p.add_argument("--every", type=int, default=16)
    p.add_argument("--cycles", type=int, default=3)
    p.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        engine, path = args.child.split(":", 1)
        with open(path, "w") as f:
            json.dump(child(engine, args), f)
        return 0

    import statistics
    import tempfile

    import torch

    from latch.runtime import driver as drv
    from tinymoe_bench_gpu import latch_environment
    env = {"gpu": torch.cuda.get_device_name(0), "driver": drv.driver_version(),
           "torch": torch.__version__, "commit": os.environ.get("LATCH_COMMIT", "unknown"),
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "workload": f"tinymoe-b2-selective-every{args.every}",
           # the runtime's switches set for this run (e.g. LATCH_STATE_COMMIT=copy)
           "runtime_env": latch_environment()}
    print(json.dumps(env), flush=True)
    records = []
    for engine in args.engines.split(","):
        fd, path = tempfile.mkstemp(suffix=".json")
        os.close(fd)
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child",
                            f"{engine}:{path}", "--every", str(args.every), "--cycles",
                            str(args.cycles)], capture_output=True, text=True, cwd=ROOT)
        if r.returncode != 0:
            print(r.stderr[-4000:], flush=True)
            records.append({**env, "engine": engine, "error": r.stderr[-2000:]})
            continue
        rec = {**env, **json.load(open(path))}
        rec["median_ms_per_microbatch"] = statistics.median(rec["ms_per_microbatch"])
        records.append(rec)
        extra = ""
        if engine.startswith("latch"):
            from tinymoe_bench_gpu import provenance_warning

            warning = provenance_warning(rec, env["commit"])
            if warning:
                print(f"{engine}: WARNING {warning}", flush=True)
            extra = (f"  variants {[(v['kernels'], v['copies']) for v in rec['variants']]}, "
                     f"expert state changed at microbatch "
                     f"{rec['expert_state_changed_at_microbatch']}")
        print(f"{engine:20s} {rec['median_ms_per_microbatch']:8.2f} ms/microbatch"
              f" (16-cycle mean; cycles {[round(x, 2) for x in rec['ms_per_microbatch']]})"
              f"{extra}", flush=True)
    latches = [r for r in records if r.get("first_cycle_losses")]
    for r in latches[1:]:
        same = r["first_cycle_losses"] == latches[0]["first_cycle_losses"]
        r["same_losses_as_" + latches[0]["engine"]] = same
        print(f"{r['engine']}: first cycle's losses {'the same bits as' if same else 'DIFFER from'}"
              f" {latches[0]['engine']}'s (last {r['first_cycle_losses'][-1]!r} vs "
              f"{latches[0]['first_cycle_losses'][-1]!r})", flush=True)
    base = {r["engine"]: r.get("median_ms_per_microbatch") for r in records}
    for r in records:
        if r["engine"] == "latch" and r.get("median_ms_per_microbatch"):
            for other in ("torch-eager", "torch-compile-graph"):
                if base.get(other):
                    r[f"speedup_vs_{other}"] = base[other] / r["median_ms_per_microbatch"]
                    print(f"latch vs {other}: {r[f'speedup_vs_{other}']:.3f}x")
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    from results_files import save_records
    save_records(records, f"selective-{now}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
