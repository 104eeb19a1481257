"""Equal-steps comparison of TinyMoE training runs (issue: training to quality, items 3-4).

Reads ``train.py`` run folders (``run.json``, ``train.csv``, ``val.csv``) of one recipe:
Latch runs and control runs, paired by seed (same seed = same initial weights and batch
order: only the program differs).  Two seeds of an engine measure the seed-to-seed noise.
Prints and writes (JSON, PNG plot, Markdown tables):

* validation cross-entropy per panel for every run;
* per seed, |Latch − control| over the panels after the warmup (RMS and largest), against
  the seed-to-seed noise |seed B − seed A| of the control (and of Latch, with two Latch
  seeds); a pair *agrees* when both its RMS and its largest difference are within the
  control's; the mean over seeds of Latch − control per panel, and at how many panels it
  is negative (Latch lower);
* the update time (median of the logged per-update times after the first 20 updates, in
  which torch.compile compiles the control) with its p5–p95 spread;
* updates and time to a validation-loss target: ``--target`` or, by default, the highest
  final validation loss of the runs (every run reaches it); time = updates × the median
  update time (panels, checkpoints and compilation excluded; compile reported apart);
* optionally the FP64 qualification reports of ``qualify.py`` (``--qualify`` JSON files):
  worst tensors per engine and state, plain and with routing pinned.

    python examples/tinymoe/compare.py --latch runs/q-latch-s0 --latch runs/q-latch-s1 \\
        --control runs/q-torch-s0 --control runs/q-torch-s1 \\
        --qualify q-fresh.json q-1000.json q-2000.json --out bench/results/tinymoe_q
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
SETTINGS = ("recipe", "steps", "batch", "seq", "lr", "warmup", "precision", "tiny")


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
    return {"folder": folder, "config": config, "engine": config["engine"],
            "seed": int(config["seed"]),
            "label": f"{config['engine']}"
                     + (f" (attention {config['attention']})"
                        if config.get("attention", "math") != "math" else "")
                     + f" seed {config['seed']}",
            "val": {int(r["step"]): float(r["val_all"]) for r in val},
            "train_loss": [(int(r["step"]), float(r["loss"])) for r in train],
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


def difference(a: dict, b: dict, panels: list[int]) -> dict:
    d = [a["val"][s] - b["val"][s] for s in panels]
    return {"rms": rms(d), "max_abs": max(map(abs, d), default=float("nan")),
            "mean": sum(d) / len(d) if d else float("nan")}


def compare(latches: list[dict], controls: list[dict], target: float | None) -> dict:
    runs = latches + controls
    first = runs[0]["config"]
    for r in runs[1:]:
        diff = {k: (first.get(k), r["config"].get(k)) for k in SETTINGS
                if first.get(k) != r["config"].get(k)}
        if diff:
            raise SystemExit(f"{r['folder']} ran other settings than {runs[0]['folder']}: "
                             f"{diff}")
    by_seed = {c["seed"]: c for c in controls}
    for r in latches:
        if r["seed"] not in by_seed:
            raise SystemExit(f"{r['folder']}: no control run with seed {r['seed']} (pairs are "
                             "by seed: same initial weights and batches)")
    warmup = int(first["warmup"])
    steps = sorted(set.intersection(*[set(r["val"]) for r in runs]))
    after = [s for s in steps if s > warmup]
    out = {"panels": steps, "panels_compared": after, "pairs": [], "seed_noise": {}}
    for name, group in (("control", controls), ("latch", latches)):
        if len(group) >= 2:
            out["seed_noise"][name] = dict(difference(group[1], group[0], after),
                                           seeds=[group[0]["seed"], group[1]["seed"]])
    noise = out["seed_noise"].get("control")
    for r in latches:
        d = difference(r, by_seed[r["seed"]], after)
        d["seed"] = r["seed"]
        if noise:
            d["agree"] = d["rms"] <= noise["rms"] and d["max_abs"] <= noise["max_abs"]
        out["pairs"].append(d)
    if latches and controls:
        mean = {s: statistics.mean(r["val"][s] - by_seed[r["seed"]]["val"][s] for r in latches)
                for s in after}
        out["mean_latch_minus_control"] = mean
        out["panels_latch_lower"] = sum(v < 0 for v in mean.values())
    final = {r["label"]: r["val"][max(r["val"])] for r in runs}
    best = {r["label"]: min(r["val"].values()) for r in runs}
    if target is None:
        target = max(final.values())
    out.update(target=target, final_val=final, best_val=best, to_target={}, update_ms={})
    for r in runs:
        s, t = updates_to(r, target)
        out["to_target"][r["label"]] = {"updates": s, "update_time_s": t}
        out["update_ms"][r["label"]] = {"median": r["update_ms"], "p5": r["update_ms_p5"],
                                        "p95": r["update_ms_p95"],
                                        "first_updates_s": r["first_updates_s"]}
    return out


def _state_source(q: dict) -> str:
    st = q.get("state", "")
    if st == "fresh":
        return "init"
    return "Latch run" if st.endswith(".latchckpt") else "control run"


def qualification_table(reports: list[dict], key: str = "engines", top: int = 3) -> list[str]:
    """Markdown rows per state and engine (``key``: "engines", or "engines_pinned" for the
    comparison with routing pinned to float64's choices)."""
    lines = ["| state (update, from) | engine | loss rel. err. | tensors > 0.08 | "
             "worst tensors (rel. L2 vs FP64) |", "|---|---|---|---|---|"]
    for q in reports:
        for eng, e in q.get(key, {}).items():
            worst = sorted(e["errors"].items(), key=lambda kv: -kv[1])[:top]
            lines.append(f"| {q['step']} ({_state_source(q)}) | {eng} | {e['loss_rel']:.1e} | "
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
    palette = ("tab:red", "tab:blue", "tab:green", "tab:purple")
    seeds = sorted({r["seed"] for r in runs})
    k = 25
    for r in runs:
        color = palette[seeds.index(r["seed"]) % len(palette)]
        ls = "-" if r["engine"] == "latch" else "--"
        s = sorted(r["val"])
        ax1.plot(s, [r["val"][x] for x in s], marker="o", ms=2.5, lw=1.4, ls=ls, color=color,
                 label=r["label"])
        tl = r["train_loss"]
        if len(tl) > k:
            v = [x for _, x in tl]
            c = [0.0]
            for x in v:
                c.append(c[-1] + x)
            m = [(c[i + k] - c[i]) / k for i in range(len(v) - k + 1)]
            ax2.plot([tl[i + k // 2][0] for i in range(len(m))], m, lw=1.0, ls=ls,
                     color=color, label=r["label"])
    ax1.axhline(target, color="gray", ls=":", lw=0.8, label=f"target {target:.3f}")
    ax1.set_title("validation cross-entropy (fixed panel)", fontsize=10)
    ax2.set_title(f"training loss (mean of {k} updates)", fontsize=10)
    for ax in (ax1, ax2):
        ax.set_xlabel("update")
        ax.set_ylabel("nats/token")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    lo = min(min(r["val"].values()) for r in runs)
    ax1.set_ylim(lo - 0.1, lo + 2.0)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def report_lines(latches, controls, res) -> list[str]:
    runs = latches + controls
    c = runs[0]["config"]
    lines = [f"TinyMoE recipe {c['recipe']}, {runs[0]['updates']} updates (schedule "
             f"{c['steps']}), batch {c['batch']} x {c['seq']}", "",
             "| run | update ms (median, p5–p95) | first 20 updates s | final val | best val | "
             f"updates to {res['target']:.3f} | update time to target s |",
             "|---|---|---|---|---|---|---|"]
    for r in runs:
        u, t = res["update_ms"][r["label"]], res["to_target"][r["label"]]
        lines.append(f"| {r['label']} | {u['median']:.1f} ({u['p5']:.1f}–{u['p95']:.1f}) | "
                     f"{u['first_updates_s']:.1f} | {res['final_val'][r['label']]:.4f} | "
                     f"{res['best_val'][r['label']]:.4f} | {t['updates']} | "
                     + (f"{t['update_time_s']:.0f}" if t["update_time_s"] is not None else "—")
                     + " |")
    mean = res.get("mean_latch_minus_control", {})
    lines += ["", "| update | " + " | ".join(r["label"] for r in runs) +
              (" | Latch − control (mean over seeds) |" if mean else " |"),
              "|---" * (len(runs) + 1 + bool(mean)) + "|"]
    for s in res["panels"]:
        row = " | ".join(f"{r['val'][s]:.4f}" for r in runs)
        extra = f" | {mean[s]:+.4f}" if s in mean else (" | " if mean else "")
        lines.append(f"| {s} | {row}{extra} |")
    n = len(res["panels_compared"])
    lines += ["", f"Over the {n} panels after the warmup (validation loss, nats):"]
    for name, d in res["seed_noise"].items():
        lines.append(f"- seed-to-seed noise, {name} (seed {d['seeds'][1]} − seed "
                     f"{d['seeds'][0]}): RMS {d['rms']:.4f}, max {d['max_abs']:.4f}")
    for d in res["pairs"]:
        verdict = ("" if "agree" not in d else
                   ": within the control's seed-to-seed noise" if d["agree"] else
                   ": beyond the control's seed-to-seed noise")
        lines.append(f"- Latch − control, seed {d['seed']}: RMS {d['rms']:.4f}, max "
                     f"{d['max_abs']:.4f}, mean {d['mean']:+.4f}{verdict}")
    if mean:
        lines.append(f"- Latch − control, mean over the seeds: RMS "
                     f"{rms(list(mean.values())):.4f}; negative (Latch lower) at "
                     f"{res['panels_latch_lower']} of {n} panels")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--latch", action="append", required=True, help="Latch run folders")
    ap.add_argument("--control", action="append", required=True,
                    help="control run folders (one per Latch seed; two seeds give the noise)")
    ap.add_argument("--target", type=float, default=None,
                    help="validation-loss target (default: the highest final loss of the runs)")
    ap.add_argument("--qualify", nargs="*", default=[], help="qualify.py JSON reports")
    ap.add_argument("--out", help="write OUT.json, OUT.png and OUT.md")
    a = ap.parse_args(argv)
    latches = [read_run(p) for p in a.latch]
    controls = [read_run(p) for p in a.control]
    runs = latches + controls
    labels = [r["label"] for r in runs]
    for r in runs:                          # e.g. two runs of one engine and seed
        if labels.count(r["label"]) > 1:
            r["label"] += f" ({os.path.basename(os.path.normpath(r['folder']))})"
    res = compare(latches, controls, a.target)
    lines = report_lines(latches, controls, res)
    reports = sorted((json.load(open(p)) for p in a.qualify),
                     key=lambda q: (q["step"], _state_source(q)))
    if reports:
        def summary(engines):
            return {e: {"worst": v["worst"], "worst_rel_l2": v["worst_rel_l2"],
                        "loss_rel": v["loss_rel"], "beyond_limit": v["beyond_limit"]}
                    for e, v in engines.items()}
        res["qualification"] = [{"step": q["step"], "state": q.get("state"),
                                 "pass": q["pass"], "engines": summary(q["engines"]),
                                 "pass_pinned": q.get("pass_pinned"),
                                 "engines_pinned": summary(q.get("engines_pinned", {})),
                                 "routing_flips": q.get("torch_bf16_routing_flips_per_layer"),
                                 "gpu": q.get("gpu"), "commit": q.get("commit")}
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
