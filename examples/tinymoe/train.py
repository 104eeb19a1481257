"""Train TinyMoE-196M (WORKLOADS.md) on the pinned text stream of examples/tinymoe/data.py,
with Latch or with the PyTorch control, recipes B2 and Q.

    python examples/tinymoe/data.py build --out data/tinymoe              # once (~2 min)
    python examples/tinymoe/train.py --data data/tinymoe --recipe B2 --engine torch \\
        --out runs/b2-torch [--steps 10000] [--stop-at 2000]
    python examples/tinymoe/train.py ... --engine latch                  # latch.compile
    python examples/tinymoe/train.py ... --engine latch --save-program p.latch   # compile only
    python examples/tinymoe/train.py ... --engine latch --program p.latch # runtime only (GPU)
    python examples/tinymoe/train.py --tiny --engine torch-eager --device cpu ...  # smoke test

Engines (the same model from bench/tinymoe_model.py, the same initial weights for a seed,
the same batches for a step):

* ``latch``: ``latch.compile(model, rule, example, target="cuda"|"cpu", precision=...)``,
  rule = clip_grad_norm(1.0, AdamW(warmup_cosine(peak, warmup, steps, 0.1), betas
  (0.9, 0.95), eps 1e-8, weight decay 0.1)); one whole update per ``prog.step``.
* ``torch``: the control of WORKLOADS.md: the model under ``torch.compile`` (default mode)
  and, on CUDA, the whole update (bf16 autocast forward, backward, clip_grad_norm_, AdamW
  with ``capturable=True`` and the learning rate a device tensor) captured in one CUDA
  graph and replayed.  On the CPU: torch.compile without a graph.
* ``torch-eager``: the same update in eager PyTorch (the CPU smoke-test engine).

Recipes (WORKLOADS.md): B2 = batch 2 x 1024, lr 3e-4, 1000 warmup steps; Q = batch 32 x
1024, lr 1.2e-3, 200 warmup steps; cosine to 10% of the peak at ``--steps``.  ``--warmup``
and ``--lr`` override them (for short smoke runs only; the run records it).

The run folder (``--out``) holds ``train.csv`` (step, loss, lr, tokens, ms per step),
``val.csv`` (validation panels: mean cross-entropy on a fixed validation set, overall and
per text family, every ``--val-every`` steps), ``loss.png`` (both curves, redrawn at each
checkpoint and at the end), ``run.json`` and
the checkpoint: ``checkpoint.json`` names the newest state file; both are written
atomically (temporary file, fsync, rename), so an interrupted run resumes from the last
complete checkpoint when started again with the same arguments (``--no-resume`` starts
over).  SIGINT/SIGTERM finish the current step, write a checkpoint and stop.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
for p in (HERE, os.path.join(ROOT, "bench"), os.path.join(ROOT, "tests", "py"), ROOT):
    if p not in sys.path:
        sys.path.insert(0, p)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import data as tmdata  # noqa: E402  (examples/tinymoe/data.py)

TINY = dict(d=64, n_layers=2, n_heads=2, seq=64, hidden=128, n_experts=8, top_k=2,
            aux_weight=0.01)
ENGINES = ("latch", "torch", "torch-eager")
CKPT_POINTER = "checkpoint.json"
TRAIN_FIELDS = ("step", "loss", "lr", "tokens", "step_ms", "elapsed_s")


def recipes():
    from tinymoe_model import RECIPES
    return RECIPES


def lr_at(s: int, peak: float, warmup: int, total: int) -> float:
    """The learning rate of update s (0-based), as latch.optim.warmup_cosine evaluates it."""
    from latch.optim.schedules import warmup_cosine_value
    return warmup_cosine_value(s, peak, warmup, total, 0.1)


def atomic_write(path: str, data: bytes) -> None:
    from latch.artifact import atomic_write as aw
    aw(path, data, tmp_prefix=".tinymoe-")


# ----------------------------------------------------------------------------- model
def build_model(args, vocab: int):
    """(model, seq): TinyMoE-196M, or the --tiny configuration (vocab from the data)."""
    from models import TinyMoE
    from tinymoe_model import CONFIG, N_PARAMS
    torch.manual_seed(args.seed)
    if args.tiny:
        cfg = dict(TINY, vocab=vocab)
        if args.seq:
            cfg["seq"] = args.seq
        return TinyMoE(**cfg), cfg["seq"]
    if vocab != CONFIG["vocab"]:
        raise SystemExit(f"the data has a {vocab}-token vocabulary; TinyMoE-196M needs "
                         f"{CONFIG['vocab']} (use --tiny for small test data)")
    model = TinyMoE(**CONFIG)
    n = sum(p.numel() for p in model.parameters())
    assert n == N_PARAMS, (n, N_PARAMS)
    return model, CONFIG["seq"]


def autocast(device: torch.device, precision: str):
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=(precision == "bf16"))


# ----------------------------------------------------------------------------- engines
class TorchEngine:
    """torch-eager, or torch.compile (+ one CUDA graph per update on CUDA)."""

    def __init__(self, model, args, device, compiled: bool):
        self.model, self.args, self.device = model.to(device), args, device
        self.params = list(self.model.parameters())
        self.compiled = compiled
        self.graphed = compiled and device.type == "cuda"
        self.fwd = torch.compile(self.model) if compiled else self.model
        self.lr = (torch.tensor(args.lr, dtype=torch.float32, device=device) if self.graphed
                   else args.lr)
        self.opt = torch.optim.AdamW(self.params, lr=self.lr, betas=(0.9, 0.95), eps=1e-8,
                                     weight_decay=0.1, capturable=self.graphed,
                                     foreach=(device.type == "cuda"))
        self.loss_buf = torch.zeros((), device=device)
        self.graph = None
        self.x = self.y = None
        self.warm = 0
        self.step_no = 0

    def _update(self):
        self.opt.zero_grad(set_to_none=not self.graphed)
        with autocast(self.device, self.args.precision):
            loss = self.fwd(self.x, self.y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        self.opt.step()
        self.loss_buf.copy_(loss.detach().float())

    def step(self, s: int, x, y):
        """Update s (0-based) on batch (x, y); returns the loss (a 0-d tensor, not synced)."""
        lr = lr_at(s, self.args.lr, self.args.warmup, self.args.steps)
        if not self.graphed:
            for g in self.opt.param_groups:
                g["lr"] = lr
            self.x, self.y = x.to(self.device), y.to(self.device)
            self._update()
            return self.loss_buf.clone()
        if self.x is None:
            self.x = torch.empty_like(x, device=self.device)
            self.y = torch.empty_like(y, device=self.device)
        self.x.copy_(x, non_blocking=True)
        self.y.copy_(y, non_blocking=True)
        self.lr.fill_(lr)
        if self.graph is None and self.warm < 3:
            # warm-up updates (torch.compile compiles here) on a side stream, then capture;
            # they are real updates of the run
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                self._update()
            torch.cuda.current_stream().wait_stream(side)
            self.warm += 1
            return self.loss_buf.clone()
        if self.graph is None:
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self._update()      # recorded, not run
        self.graph.replay()
        return self.loss_buf.clone()

    def eval_model(self):
        return self.model

    def state_bytes(self, step: int) -> bytes:
        buf = io.BytesIO()
        torch.save({"step": step, "model": self.model.state_dict(),
                    "opt": self.opt.state_dict()}, buf)
        return buf.getvalue()

    def load(self, path: str) -> int:
        ck = torch.load(path, map_location=self.device, weights_only=True)
        self.model.load_state_dict(ck["model"])
        self.opt.load_state_dict(ck["opt"])
        if self.graphed:      # keep the device tensor as the learning rate
            for g in self.opt.param_groups:
                g["lr"] = self.lr
        return int(ck["step"])


class LatchEngine:
    def __init__(self, model, args, device, example):
        import latch
        from latch import optim
        self.model, self.args, self.device = model, args, device
        self.eval = None
        if args.program:
            side = args.program + ".json"
            if os.path.exists(side):
                saved = json.load(open(side))
                diff = {k: (saved.get(k), args.schedule.get(k))
                        for k in sorted(set(saved) | set(args.schedule))
                        if args.schedule.get(k) != saved.get(k)}
                if diff:
                    raise SystemExit(f"{args.program} was compiled for other settings "
                                     f"(saved, now): {diff}")
            t0 = time.perf_counter()
            self.prog = latch.load(args.program)
            print(f"loaded {args.program} in {time.perf_counter() - t0:.1f} s", flush=True)
        else:
            rule = optim.clip_grad_norm(1.0, optim.AdamW(
                optim.warmup_cosine(args.lr, args.warmup, args.steps, 0.1),
                betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1))
            target = args.target or ("cuda" if device.type == "cuda" or args.save_program
                                     else "cpu")
            t0 = time.perf_counter()
            self.prog = latch.compile(model, rule, example, target=target,
                                      precision=args.precision, attention=args.attention,
                                      deterministic=args.deterministic)
            print(f"latch.compile (target {target}, precision {args.precision}): "
                  f"{time.perf_counter() - t0:.1f} s", flush=True)
        self.cuda = self.prog.manifest.get("kind") == "cuda-update" or (
            not args.program and device.type == "cuda")
        self.state = None

    def save_program(self, path: str) -> None:
        """The program, and beside it (``path + '.json'``) the settings baked into it."""
        self.prog.save(path)
        atomic_write(path + ".json", (json.dumps(self.args.schedule, indent=1, sort_keys=True)
                                      + "\n").encode())

    def init_state(self):
        if self.cuda != (self.device.type == "cuda"):
            raise SystemExit(f"the program runs on {'cuda' if self.cuda else 'cpu'}, "
                             f"--device is {self.device.type}")
        self.state = self.prog.init(self.model)

    def step(self, s: int, x, y):
        if self.cuda:
            x, y = x.to(self.device), y.to(self.device)
        return torch.tensor(self.prog.step(self.state, x, y))

    def eval_model(self):
        """The torch model holding the state's current parameters (for validation)."""
        if self.eval is None:
            self.eval = self.model.to(self.device)
        params = self.state.parameters()
        with torch.no_grad():
            for n, p in self.eval.named_parameters():
                p.copy_(params[n].to(self.device))
        return self.eval

    def state_bytes(self, step: int) -> bytes:
        from latch.checkpoint import encode
        return encode(self.state)

    def load(self, path: str) -> int:
        import latch
        self.state = latch.load_state(path, self.prog)
        return int(self.state.step)


# ----------------------------------------------------------------------------- validation
class Validator:
    def __init__(self, path: str, seq: int, batch: int, max_batches: int):
        manifest = tmdata.load_manifest(path)
        fams = sorted({r["family"] for r in manifest["documents"] if r["split"] == "val"})
        self.sets = {}
        for f in fams:         # the same number of batches from each family, spread evenly
            b = tmdata.validation_batches(path, batch, seq, max(1, max_batches // len(fams)), f)
            if b:
                self.sets[f] = b
        if not self.sets:
            raise SystemExit(f"{path}: no validation windows of {seq + 1} tokens")

    @torch.no_grad()
    def run(self, model, device, precision) -> dict:
        was = model.training
        model.eval()
        aux = model.aux_weight
        model.aux_weight = 0.0          # the panels report the cross-entropy alone
        try:
            out, total, count = {"all": 0.0}, 0.0, 0
            for name, batches in self.sets.items():
                tot = torch.zeros((), device=device)
                for b in batches:
                    b = b.to(device)
                    with autocast(device, precision):
                        tot += model(b[:, :-1], b[:, 1:]).float()
                out[name] = float(tot) / len(batches)
                total += float(tot)
                count += len(batches)
            out["all"] = total / count      # mean over every panel batch (families equal)
        finally:
            model.aux_weight = aux
            model.train(was)
        return out


# ----------------------------------------------------------------------------- run folder
class Run:
    """CSV logs, plot, checkpoints of one run folder."""

    def __init__(self, out: str, config: dict, resume: bool, force: bool,
                 keep: frozenset = frozenset()):
        self.out = out
        self.keep = keep            # steps whose state files outlive newer checkpoints
        os.makedirs(out, exist_ok=True)
        self.config = config
        self.train_rows: list[dict] = []
        self.val_rows: list[dict] = []
        self.start_step = 0
        pointer = os.path.join(out, CKPT_POINTER)
        self.resume_from = None
        if resume and os.path.exists(pointer):
            meta = json.load(open(pointer))
            old = meta["config"]
            diff = {k: (old.get(k), v) for k, v in config.items()
                    if k not in ("stop_at", "program", "save_program") and old.get(k) != v}
            if diff and not force:
                raise SystemExit(f"{out} holds a run with other settings {diff}; use "
                                 "--no-resume (start over), another --out, or --force")
            self.resume_from = os.path.join(out, meta["state_file"])
            self.start_step = int(meta["step"])
            self.train_rows = [r for r in self._read_csv("train.csv")
                               if int(r["step"]) < self.start_step]
            self.val_rows = [r for r in self._read_csv("val.csv")
                             if int(r["step"]) <= self.start_step]
        else:                                   # a fresh start: no stale checkpoint
            for f in os.listdir(out):
                if f == CKPT_POINTER or f.startswith("state-"):
                    os.unlink(os.path.join(out, f))
        self._write_csv("train.csv", TRAIN_FIELDS, self.train_rows)
        if self.val_rows:
            self._write_csv("val.csv", list(self.val_rows[0]), self.val_rows)
        elif os.path.exists(os.path.join(out, "val.csv")):
            os.unlink(os.path.join(out, "val.csv"))
        atomic_write(os.path.join(out, "run.json"),
                     (json.dumps(config, indent=1, sort_keys=True) + "\n").encode())
        self._train_f = open(os.path.join(out, "train.csv"), "a", newline="")
        self._train_w = csv.DictWriter(self._train_f, TRAIN_FIELDS)

    def _read_csv(self, name):
        p = os.path.join(self.out, name)
        if not os.path.exists(p):
            return []
        with open(p, newline="") as f:
            return list(csv.DictReader(f))

    def _write_csv(self, name, fields, rows):
        buf = io.StringIO()
        w = csv.DictWriter(buf, list(fields))
        w.writeheader()
        for r in rows:
            w.writerow(r)
        atomic_write(os.path.join(self.out, name), buf.getvalue().encode())

    def log_train(self, rows: list[dict]):
        for r in rows:
            self._train_w.writerow(r)
        self._train_f.flush()
        self.train_rows += rows

    def log_val(self, row: dict):
        self.val_rows.append(row)
        self._write_csv("val.csv", list(row), self.val_rows)

    def checkpoint(self, step: int, state: bytes, ext: str):
        """State file first, then the pointer (the commit point), then old files go (except
        the states of the steps in ``keep``, e.g. for the FP64 qualification)."""
        name = f"state-{step:08d}.{ext}"
        atomic_write(os.path.join(self.out, name), state)
        atomic_write(os.path.join(self.out, CKPT_POINTER),
                     (json.dumps({"step": step, "state_file": name, "config": self.config},
                                 indent=1, sort_keys=True) + "\n").encode())
        for f in os.listdir(self.out):
            if f.startswith("state-") and f != name and _state_step(f) not in self.keep:
                try:
                    os.unlink(os.path.join(self.out, f))
                except FileNotFoundError:
                    pass

    def plot(self, title: str):
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return False
        fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
        if self.train_rows:
            s = np.array([int(r["step"]) for r in self.train_rows])
            v = np.array([float(r["loss"]) for r in self.train_rows])
            ax.plot(s, v, color="tab:blue", alpha=0.25, lw=0.8, label="train (per step)")
            k = max(1, min(len(v) // 25, 100))
            if k > 1:                 # centred moving mean over k updates
                c = np.cumsum(np.insert(v, 0, 0.0))
                m = (c[k:] - c[:-k]) / k
                ax.plot(s[k // 2: k // 2 + len(m)], m, color="tab:blue", lw=1.5,
                        label=f"train (mean of {k} updates)")
        if self.val_rows:
            vs = [int(r["step"]) for r in self.val_rows]
            for name, color in zip([k for k in self.val_rows[0] if k.startswith("val_")],
                                   ("tab:red", "tab:green", "tab:purple", "tab:orange",
                                    "tab:brown")):
                lw = 2.0 if name == "val_all" else 1.0
                ax.plot(vs, [float(r[name]) for r in self.val_rows], marker="o", ms=3, lw=lw,
                        color=color, label=name.replace("val_", "val ").replace(" all", ""))
        ax.set_xlabel("update")
        ax.set_ylabel("cross-entropy (nats/token)")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        plt.close(fig)
        atomic_write(os.path.join(self.out, "loss.png"), buf.getvalue())
        return True

    def close(self):
        self._train_f.close()


def _state_step(name: str) -> int | None:
    """The step of a ``state-<step>.<ext>`` file name (None for other names)."""
    try:
        return int(name[len("state-"):].split(".")[0])
    except ValueError:
        return None


class Progress:
    def __init__(self, start: int, stop: int, total: int):
        self.start, self.stop, self.total = start, stop, total
        self.tty = sys.stdout.isatty()
        self.t0 = time.perf_counter()
        self.last_print = 0.0

    def update(self, step_done: int, text: str, force: bool = False):
        now = time.perf_counter()
        n = self.stop - self.start
        k = step_done - self.start
        if not force and now - self.last_print < (0.2 if self.tty else 15.0):
            return
        self.last_print = now
        rate = k / max(now - self.t0, 1e-9)
        eta = (self.stop - step_done) / rate if rate > 0 else float("nan")
        width = 28
        fill = int(width * k / max(n, 1))
        line = (f"[{'#' * fill}{'.' * (width - fill)}] {step_done}/{self.stop} "
                f"({100 * step_done / self.total:.0f}% of {self.total}) {text} "
                f"{rate:.2f} it/s ETA {_fmt_s(eta)}")
        if self.tty:
            sys.stdout.write("\r" + line + "\x1b[K")
        else:
            sys.stdout.write(line + "\n")
        sys.stdout.flush()

    def newline(self):
        if self.tty:
            sys.stdout.write("\n")
            sys.stdout.flush()


def _fmt_s(s: float) -> str:
    if not math.isfinite(s):
        return "?"
    s = int(s)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


# ----------------------------------------------------------------------------- main
def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="folder written by data.py build")
    ap.add_argument("--recipe", choices=("B2", "Q"), default="B2")
    ap.add_argument("--engine", choices=ENGINES, default="torch")
    ap.add_argument("--out", required=True, help="run folder (logs, plot, checkpoint)")
    ap.add_argument("--steps", type=int, default=10_000,
                    help="length of the schedule: cosine reaches 10%% here (default 10000)")
    ap.add_argument("--stop-at", type=int, default=None,
                    help="stop after this many updates (the schedule still spans --steps)")
    ap.add_argument("--device", default=None, help="cuda or cpu (default: cuda if present)")
    ap.add_argument("--precision", choices=("bf16", "fp32"), default="bf16",
                    help="bf16: autocast matmuls, fp32 master weights (WORKLOADS.md)")
    ap.add_argument("--seed", type=int, default=0, help="model init and batch order")
    ap.add_argument("--batch", type=int, default=None, help="override the recipe's batch")
    ap.add_argument("--lr", type=float, default=None, help="override the recipe's peak lr")
    ap.add_argument("--warmup", type=int, default=None, help="override the recipe's warmup")
    ap.add_argument("--val-every", type=int, default=250)
    ap.add_argument("--val-batches", type=int, default=16,
                    help="batches (of the training batch size, at least 4 sequences) per panel")
    ap.add_argument("--ckpt-every", type=int, default=500)
    ap.add_argument("--keep-states", default="",
                    help="comma-separated steps whose checkpoints are kept (default: only the "
                         "newest); each is also a checkpoint step")
    ap.add_argument("--log-every", type=int, default=10, help="host syncs for the loss")
    ap.add_argument("--tiny", action="store_true",
                    help="a tiny model (d 64, 2 layers, seq 64) for CPU smoke tests")
    ap.add_argument("--seq", type=int, default=None, help="sequence length (--tiny only)")
    ap.add_argument("--no-resume", action="store_true")
    ap.add_argument("--force", action="store_true", help="resume despite changed settings")
    ap.add_argument("--program", default=None, help="--engine latch: a saved program to run")
    ap.add_argument("--save-program", default=None,
                    help="--engine latch: compile, save the program there and stop")
    ap.add_argument("--deterministic", action="store_true",
                    help="--engine latch: latch.compile(deterministic=True): no float atomics "
                         "(bitwise reproducible runs; scatters summed in fixed point)")
    ap.add_argument("--attention", choices=("auto", "math", "flash", "fused"), default="auto",
                    help="--engine latch, bf16: latch.compile's attention option (auto: fused "
                         "on cuda, math on cpu; math: scores rounded to bf16 as CPU autocast; "
                         "flash: float32 scores, as PyTorch's CUDA kernels; fused: that "
                         "rounding in fused flash-style kernels, cuda target)")
    ap.add_argument("--target", choices=("cuda", "cpu"), default=None,
                    help="--engine latch: the compile target (default: cuda with "
                         "--save-program or on a CUDA device, else cpu)")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
    rec = recipes()[args.recipe]
    args.batch = args.batch or rec["batch"]
    args.lr = args.lr if args.lr is not None else rec["peak"]
    args.warmup = args.warmup if args.warmup is not None else rec["warmup"]
    if args.steps <= args.warmup:
        raise SystemExit(f"--steps ({args.steps}) must exceed the warmup ({args.warmup}); "
                         "pass --warmup for short runs")
    stop = min(args.stop_at or args.steps, args.steps)

    manifest = tmdata.load_manifest(args.data)
    vocab = manifest["tokenizer"]["vocab_size"]
    model, seq = build_model(args, vocab)
    n_params = sum(p.numel() for p in model.parameters())
    config = {"recipe": args.recipe, "engine": args.engine, "steps": args.steps,
              "batch": args.batch, "seq": seq, "lr": args.lr, "warmup": args.warmup,
              "final_ratio": 0.1, "precision": args.precision, "seed": args.seed,
              "tiny": args.tiny, "params": n_params, "device": device.type,
              "data_manifest_sha256": tmdata.sha256_file(os.path.join(args.data,
                                                                      "manifest.json")),
              "deviates_from_recipe": (args.batch, args.lr, args.warmup) !=
              (rec["batch"], rec["peak"], rec["warmup"]) or args.tiny}
    # what a compiled Latch program bakes in (checked when a saved one is loaded)
    args.schedule = {k: config[k] for k in ("recipe", "steps", "batch", "seq", "lr", "warmup",
                                             "precision", "tiny", "params")}
    if args.engine == "latch":
        config["attention"] = args.schedule["attention"] = args.attention
        if args.deterministic:     # only when set: programs saved before the flag still load
            config["deterministic"] = args.schedule["deterministic"] = True
    stream = tmdata.TokenStream(args.data, args.batch, seq, seed=args.seed)
    x0, y0 = stream.xy(0)

    if args.engine == "latch":
        eng = LatchEngine(model, args, device, (x0, y0))
        if args.save_program:
            eng.save_program(args.save_program)
            print(f"saved the program to {args.save_program}; run it with --program "
                  f"{args.save_program} (same --recipe/--steps/--lr/--warmup/--batch)")
            return 0
        eng.init_state()
        ext = "latchckpt"
    else:
        if args.program or args.save_program:
            raise SystemExit("--program/--save-program are for --engine latch")
        eng = TorchEngine(model, args, device, compiled=(args.engine == "torch"))
        ext = "pt"

    try:
        keep = frozenset(int(k) for k in args.keep_states.split(",") if k.strip())
    except ValueError:
        raise SystemExit(f"--keep-states takes step numbers, got {args.keep_states!r}")
    run = Run(args.out, config, resume=not args.no_resume, force=args.force, keep=keep)
    start = run.start_step
    if run.resume_from:
        got = eng.load(run.resume_from)
        if got != start:
            raise SystemExit(f"{run.resume_from} holds step {got}, checkpoint.json says {start}")
        print(f"resumed from {run.resume_from} at update {start}", flush=True)
    vbatch = max(4, args.batch)
    validator = Validator(args.data, seq, vbatch, args.val_batches)
    print(f"TinyMoE{' (tiny)' if args.tiny else '-196M'}: {n_params:,} parameters; recipe "
          f"{args.recipe}: batch {args.batch} x {seq}, lr {args.lr:g}, warmup {args.warmup}, "
          f"cosine to 10% at {args.steps}; engine {args.engine} on {device.type} "
          f"({args.precision}); data {stream.tokens_per_epoch():,} training tokens per "
          f"epoch; validation panel: "
          f"{', '.join(f'{k} {len(v) * vbatch}' for k, v in validator.sets.items())} "
          f"sequences", flush=True)

    stop_flag = {"sig": None}

    def on_signal(signum, frame):
        stop_flag["sig"] = signum
    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}

    title = (f"TinyMoE{' tiny' if args.tiny else '-196M'} {args.recipe} ({args.engine}, "
             f"{args.precision}, {device.type})")

    def panel(step):
        t = time.perf_counter()
        v = validator.run(eng.eval_model(), device, args.precision)
        row = {"step": step, "tokens": step * args.batch * seq}
        row.update({f"val_{k}": f"{x:.6f}" for k, x in v.items()})
        row["panel_s"] = f"{time.perf_counter() - t:.2f}"
        run.log_val(row)
        prog.newline()
        print(f"validation @ {step}: " + ", ".join(f"{k} {x:.4f}" for k, x in v.items()) +
              f" (ppl {math.exp(min(v['all'], 50)):.1f})", flush=True)

    prog = Progress(start, stop, args.steps)
    t_run = time.perf_counter()
    elapsed0 = float(run.train_rows[-1]["elapsed_s"]) if run.train_rows else 0.0
    pending, t_last, last_loss = [], time.perf_counter(), float("nan")
    if start == 0 and not any(int(r["step"]) == 0 for r in run.val_rows):
        panel(0)
    s = start
    try:
        while s < stop:
            x, y = stream.device_xy(s, device) if device.type == "cuda" else stream.xy(s)
            loss = eng.step(s, x, y)
            pending.append((s, loss, lr_at(s, args.lr, args.warmup, args.steps)))
            s += 1
            boundary = (s % args.log_every == 0 or s == stop or s % args.val_every == 0 or
                        s % args.ckpt_every == 0 or stop_flag["sig"])
            if boundary:
                if device.type == "cuda":
                    torch.cuda.synchronize()
                now = time.perf_counter()
                ms = 1e3 * (now - t_last) / len(pending)
                rows = [{"step": k, "loss": f"{float(l):.6f}", "lr": f"{lr:.6e}",
                         "tokens": (k + 1) * args.batch * seq, "step_ms": f"{ms:.2f}",
                         "elapsed_s": f"{elapsed0 + now - t_run:.2f}"}
                        for k, l, lr in pending]
                last_loss = float(rows[-1]["loss"])
                if not math.isfinite(last_loss):
                    print(f"\nnon-finite loss at update {pending[-1][0]}", flush=True)
                run.log_train(rows)
                pending, t_last = [], time.perf_counter()
                prog.update(s, f"loss {last_loss:.4f} lr {rows[-1]['lr']} {ms:.1f} ms/it",
                            force=(s == stop))
            if s % args.val_every == 0 or s == stop:
                panel(s)
                t_last = time.perf_counter()
            if s % args.ckpt_every == 0 or s == stop or s in keep or stop_flag["sig"]:
                run.checkpoint(s, eng.state_bytes(s), ext)
                if s != stop:
                    run.plot(title)
                t_last = time.perf_counter()
            if stop_flag["sig"]:
                prog.newline()
                print(f"stopped by signal {stop_flag['sig']} after update {s}; checkpoint "
                      f"written, run again to resume", flush=True)
                break
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)
        run.close()
    prog.newline()
    run.plot(title)
    print(f"done: {s} updates, last loss {last_loss:.4f}; {args.out}/train.csv, val.csv, "
          f"loss.png, {CKPT_POINTER}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
