"""Equal-steps comparison of TinyMoE training runs (issue: training to quality, items 3-4).

Reads ``train.py`` run folders (``run.json``, ``train.csv``, ``val.csv``) of one recipe:
Latch and the control from the same seed, and the control from a second seed, which
measures the seed-to-seed noise.  Prints and writes (JSON, PNG plot, Markdown tables):

* validation cross-entropy per panel for every run; the difference Latch − control (same
  seed: only the program differs) against control seed B − control seed A (the noise);
  the curves *agree* when, over the panels after the warmup, the RMS and the largest
  |Latch − control| are within the RMS and the largest |seed B − seed A|;
* the update time (median of the logged per-update times, after the first 20 updates:
  torch.compile compiles in the control's first updates) and its spread;
* updates and time to a validation-loss target: ``--target`` or, by default, the highest
  final validation loss of the runs (every run reaches it); time = update time only (panels
  and checkpoints excluded), the control's compile excluded and reported separately;
* optionally the FP64 qualification reports of ``qualify.py`` (``--qualify`` JSON files):
  worst tensors per engine and state.

    python examples/tinymoe/compare.py --latch runs/q-latch --control runs/q-torch-s0 \\
        --control runs/q-torch-s1 --qualify q-fresh.json q-1000.json q-2000.json \\
        --out bench/results/tinymoe_q
"""
from __future__ import annotations

import argparse
import csv
import datetime
import json
import math
import os
import statistics
import sys

SKIP_UPDATES = 20        # the first updates: compilation (control), graph capture


def read_run(folder: str) -> dict:
    def rows(name):
        p = os.path.join(folder, name)
        if not os.path.exists(p):
            raise SystemExit(f"{folder}: no {name} (a train.py run folder?)")
        with open(p, newline="") as f:
            return list(csv.DictReader(f))
    config = json.load(open(os.path.join(folder, "run.json")))
    train = rows("train.csv")
    val = rows("val.csv")
    ms = [float(r["step_ms"]) for r in train]
    steady = ms[SKIP_UPDATES:] or ms
    q = statistics.quantiles(steady, n=20) if len(steady) >= 20 else [min(steady), max(steady)]
    return {"folder": folder, "config": config,
            "label": f"{config['engine']} seed {config['seed']}",
            "val": {int(r["step"]): float(r["val_all"]) for r in val},
            "val_rows": val,
            "train_loss": [(int(r["step"]), float(r["loss"])) for r in train],
            "step_ms": ms,
            "update_ms": statistics.median(steady), "update_ms_p5": q[0], "update_ms_p95": q[-1],
            "first_updates_s": sum(ms[:SKIP_UPDATES]) / 1e3,
            "updates": len(train)}


def updates_to(run: dict, target: float):
    """(first panel step whose validation loss <= target, update time to get there, s)."""
    for s in sorted(run["val"]):
        if run["val"][s] <= target:
            return s, s * run["update_ms"] / 1e3
    return None, None


def rms(xs):
    return math.sqrt(sum(x * x for x in xs) / len(xs)) if xs else float("nan")


def compare(latch: dict, controls: list[dict], target: float | None, warmup: int) -> dict:
    a = controls[0]
    if latch["config"]["seed"] != a["config"]["seed"]:
        raise SystemExit("the first --control must use the Latch run's seed")
    keys = ("recipe", "steps", "batch", "lr", "warmup", "precision")
    for r in controls:
        diff = {k: (latch["config"][k], r["config"][k]) for k in keys
                if latch["config"][k] != r["config"][k]}
        if diff:
            raise SystemExit(f"{r['folder']} ran other settings than {latch['folder']}: {diff}")
    steps = sorted(set(latch["val"]).intersection(*[set(r["val"]) for r in controls]))
    after = [s for s in steps if s > warmup]
    d_latch = [latch["val"][s] - a["val"][s] for s in after]
    out = {"panels": steps, "panels_compared": after,
           "latch_minus_control": {"rms": rms(d_latch),
                                   "max_abs": max(map(abs, d_latch), default=float("nan"))}}
    if len(controls) > 1:
        b = controls[1]
        d_seed = [b["val"][s] - a["val"][s] for s in after]
        out["seed_b_minus_seed_a"] = {"rms": rms(d_seed),
                                      "max_abs": max(map(abs, d_seed), default=float("nan"))}
        out["agree"] = (out["latch_minus_control"]["rms"] <= out["seed_b_minus_seed_a"]["rms"]
                        and out["latch_minus_control"]["max_abs"]
                        <= out["seed_b_minus_seed_a"]["max_abs"])
    runs = [latch] + controls
    final = {r["label"]: r["val"][max(r["val"])] for r in runs}
    if target is None:
        target = max(final.values())
    out["target"] = target
    out["final_val"] = final
    out["to_target"] = {}
    for r in runs:
        s, t = updates_to(r, target)
        out["to_target"][r["label"]] = {"updates": s, "update_time_s": t}
    out["update_ms"] = {r["label"]: {"median": r["update_ms"], "p5": r["update_ms_p5"],
                                     "p95": r["update_ms_p95"],
                                     "first_updates_s": r["first_updates_s"]} for r in runs}
    return out


def qualification_table(reports: list[dict], key: str = "engines", top: int = 3) -> list[str]:
    """Markdown rows per state and engine (``key``: "engines", or "engines_pinned" for the
    comparison with routing pinned to float64's choices)."""
    lines = ["| state | engine | loss rel. err. | tensors > 0.08 | worst tensors (rel. L2 vs FP64) |",
             "|---|---|---|---|---|"]
    for q in reports:
        for eng, e in q.get(key, {}).items():
            worst = sorted(e["errors"].items(), key=lambda kv: -kv[1])[:top]
            lines.append(f"| {q['step']} | {eng} | {e['loss_rel']:.1e} | "
                         f"{len(e['beyond_limit'])} of {len(e['errors'])} | "
                         + ", ".join(f"`{n}` {v:.3f}" for n, v in worst) + " |")
    return lines


def plot(runs: list[dict], target: float, path: str) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5), dpi=110)
    colors = ("tab:red", "tab:blue", "tab:green", "tab:purple")
    for r, c in zip(runs, colors):
        s = sorted(r["val"])
        ax1.plot(s, [r["val"][k] for k in s], marker="o", ms=2.5, lw=1.4, color=c,
                 label=r["label"])
        tl = r["train_loss"]
        k = 25
        if len(tl) > k:
            v = [x for _, x in tl]
            m = [sum(v[i:i + k]) / k for i in range(len(v) - k + 1)]
            ax2.plot([tl[i + k // 2][0] for i in range(len(m))], m, lw=1.0, color=c,
                     label=r["label"])
    ax1.axhline(target, color="gray", ls="--", lw=0.8, label=f"target {target:.3f}")
    ax1.set_title("validation cross-entropy (fixed panel)", fontsize=10)
    ax2.set_title(f"training loss (mean of {25} updates)", fontsize=10)
    for ax in (ax1, ax2):
        ax.set_xlabel("update")
        ax.set_ylabel("nats/token")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    lo = min(min(r["val"].values()) for r in runs)
    ax1.set_ylim(lo - 0.1, lo + 2.5)
    ax2.set_ylim(lo - 0.3, lo + 2.5)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--latch", required=True, help="the Latch run folder")
    ap.add_argument("--control", action="append", required=True,
                    help="control run folders: the Latch run's seed first, then another seed")
    ap.add_argument("--target", type=float, default=None,
                    help="validation-loss target (default: the highest final loss of the runs)")
    ap.add_argument("--qualify", nargs="*", default=[], help="qualify.py JSON reports")
    ap.add_argument("--out", help="write OUT.json, OUT.png and OUT.md")
    a = ap.parse_args(argv)
    latch = read_run(a.latch)
    controls = [read_run(c) for c in a.control]
    labels = [r["label"] for r in [latch] + controls]
    for r in [latch] + controls:          # e.g. two runs of one engine and seed
        if labels.count(r["label"]) > 1:
            r["label"] += f" ({os.path.basename(os.path.normpath(r['folder']))})"
    res = compare(latch, controls, a.target, warmup=int(latch["config"]["warmup"]))
    runs = [latch] + controls
    lines = [f"TinyMoE-196M recipe {latch['config']['recipe']}, {latch['updates']} updates "
             f"(schedule {latch['config']['steps']}), batch {latch['config']['batch']} x "
             f"{latch['config']['seq']}", "",
             "| run | update ms (median, p5–p95) | first 20 updates s | final val | "
             f"updates to {res['target']:.3f} | update time to target s |",
             "|---|---|---|---|---|---|"]
    for r in runs:
        u, t = res["update_ms"][r["label"]], res["to_target"][r["label"]]
        lines.append(f"| {r['label']} | {u['median']:.1f} ({u['p5']:.1f}–{u['p95']:.1f}) | "
                     f"{u['first_updates_s']:.1f} | {res['final_val'][r['label']]:.4f} | "
                     f"{t['updates']} | "
                     + (f"{t['update_time_s']:.0f}" if t["update_time_s"] is not None else "—")
                     + " |")
    lines += ["", "| update | " + " | ".join(r["label"] for r in runs) +
              " | Latch − control | seed B − seed A |", "|---" * (len(runs) + 3) + "|"]
    for s in res["panels"]:
        row = [f"{r['val'][s]:.4f}" for r in runs]
        dl = latch["val"][s] - controls[0]["val"][s]
        ds = (controls[1]["val"][s] - controls[0]["val"][s]) if len(controls) > 1 else float("nan")
        lines.append(f"| {s} | " + " | ".join(row) + f" | {dl:+.4f} | {ds:+.4f} |")
    m = res["latch_minus_control"]
    lines += ["", f"after the warmup ({len(res['panels_compared'])} panels): |Latch − control| "
              f"RMS {m['rms']:.4f}, max {m['max_abs']:.4f}"]
    if "seed_b_minus_seed_a" in res:
        n = res["seed_b_minus_seed_a"]
        lines[-1] += (f"; |seed B − seed A| RMS {n['rms']:.4f}, max {n['max_abs']:.4f}: "
                      + ("agree within seed-to-seed noise" if res["agree"] else
                         "Latch is further from the control than the seeds are apart"))
    reports = [json.load(open(p)) for p in a.qualify]
    if reports:
        reports.sort(key=lambda q: q["step"])

        def summary(engines):
            return {e: {"worst": v["worst"], "worst_rel_l2": v["worst_rel_l2"],
                        "beyond_limit": v["beyond_limit"]} for e, v in engines.items()}
        res["qualification"] = [{"step": q["step"], "state": q.get("state"),
                                 "pass": q["pass"], "engines": summary(q["engines"]),
                                 "pass_pinned": q.get("pass_pinned"),
                                 "engines_pinned": summary(q.get("engines_pinned", {})),
                                 "routing_flips": q.get("torch_bf16_routing_flips_per_layer")}
                                for q in reports]
        lines += ["", "FP64 qualification (plain):", "", *qualification_table(reports)]
        if any("engines_pinned" in q for q in reports):
            lines += ["", "FP64 qualification, routing pinned to float64's top-k choices:", "",
                      *qualification_table(reports, "engines_pinned")]
    text = "\n".join(lines)
    print(text)
    if a.out:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)) or ".", exist_ok=True)
        res["runs"] = {r["label"]: {"folder": r["folder"], "config": r["config"],
                                    "val": r["val"]} for r in runs}
        res["date"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        with open(a.out + ".json", "w") as f:
            json.dump(res, f, indent=1, sort_keys=True)
        with open(a.out + ".md", "w") as f:
            f.write(text + "\n")
        drew = plot(runs, res["target"], a.out + ".png")
        print(f"wrote {a.out}.json, {a.out}.md" + (f", {a.out}.png" if drew else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
